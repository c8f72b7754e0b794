//! `tether-agent engine check NAME`: starts the engine confined as a run would, in a private
//! folder made for the check, and reports whether a session starts, before a job finds out.
//!
//! `initialize`, `authenticate` when an `env_var` method's variables are there (as a run
//! does: [`super::sign_in`]), then `session/new`; no prompt is sent, so nothing is asked of
//! the model. The agent is stopped afterwards as a run's is, and the whole check has
//! [`CHECK_LIMIT`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_client_protocol::v1::schema::NewSessionRequest;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client};
use tether_protocol::capabilities::{CheckedAgent, CheckedAuthMethod, EngineCheck};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::handshake::{self, describe, Introduced};
use super::outfit::{Fitting, Outfit};
use super::process::{self, AgentProcess, Pipes};
use super::sign_in::{self, Method};
use super::terminals::Launch;
use super::transport;
use crate::local::state::AcpEngine;
use crate::policy::guard::Guard;
use crate::policy::hard_floor;
use crate::run::environment;
use crate::run::process_group::TERMINATE_GRACE;
use crate::run::secret_http::runs_root;

/// How long the whole check may take.
pub const CHECK_LIMIT: Duration = Duration::from_secs(60);
/// How long the agent may take to exit on its own once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Lines of the agent's stderr a problem quotes.
const STDERR_QUOTED: usize = 3;

/// Checks `engine` in a private folder made for the check (removed afterwards), under
/// `guard`, the one runs of this agent get.
pub async fn check(engine: &AcpEngine, guard: &Guard) -> EngineCheck {
    let started = Instant::now();
    let folder = tempfile::Builder::new()
        .prefix("tether-engine-check-")
        .tempdir();
    let report = match folder {
        Ok(folder) => match folder.path().canonicalize() {
            Ok(path) => check_in(engine, guard, &path).await,
            Err(err) => problem(format!("the check's folder could not be read: {err}")),
        },
        Err(err) => problem(format!("a folder for the check could not be made: {err}")),
    };
    finished(report, started)
}

/// Checks `engine` with `folder` (canonical) as its working folder.
pub async fn check_in(engine: &AcpEngine, guard: &Guard, folder: &Path) -> EngineCheck {
    let started = Instant::now();
    let checked = confined(engine, guard, folder);
    let report = match tokio::time::timeout(CHECK_LIMIT, checked).await {
        Ok(report) => report,
        Err(_) => problem(format!(
            "the agent did not answer within {} s",
            CHECK_LIMIT.as_secs()
        )),
    };
    finished(report, started)
}

/// The launch a run without a job's grants would have: the allow-listed environment and
/// the network on (an engine with its own network choice keeps it).
pub(super) fn launch_for(guard: &Guard, folder: &Path) -> Launch {
    let mut env = environment::scrub(std::env::vars_os());
    env.push(("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()));
    Launch {
        guard: guard.clone(),
        folder: folder.to_path_buf(),
        network: true,
        env,
        writable: Vec::new(),
        readable: Vec::new(),
    }
}

/// Starts the engine as a run would; the one place that knows how.
pub(super) fn start(
    engine: &AcpEngine,
    launch: &Launch,
    sockets: &Path,
    lines: mpsc::Sender<String>,
) -> Result<(Outfit, AgentProcess, Pipes), String> {
    let fitting = Fitting {
        launch,
        job_network: launch.network,
        home: launch.guard.home(),
        sockets,
    };
    let outfit = Outfit::fit(engine, &fitting)?;
    if let Some(refusal) = hard_floor::check(&outfit.argv).refusal() {
        return Err(refusal);
    }
    let (agent, pipes) = process::start(&outfit, launch, lines)?;
    Ok((outfit, agent, pipes))
}

/// Starts the agent, talks to it, stops it.
async fn confined(engine: &AcpEngine, guard: &Guard, folder: &Path) -> EngineCheck {
    let launch = launch_for(guard, folder);
    let sockets = sockets_for(&launch, &engine.name);
    let (lines, mut stderr_lines) = mpsc::channel(64);
    // Its stderr is not output anywhere: the tail is kept to explain a failure.
    let drain = tokio::spawn(async move { while stderr_lines.recv().await.is_some() {} });
    let (outfit, agent, pipes) = match start(engine, &launch, &sockets, lines) {
        Ok(started) => started,
        Err(refusal) => {
            drain.abort();
            return problem(format!("the agent could not be started: {refusal}"));
        }
    };
    let env = outfit.variable_names();
    let place = Place {
        engine: &engine.name,
        env: &env,
        hint: outfit.sign_in_command,
        folder,
        reads_files: outfit.client_reads_files,
    };
    let mut report = talk_over(pipes, place).await;
    let stderr = agent.stderr_handle();
    let _ = agent.stop(EXIT_GRACE, TERMINATE_GRACE).await;
    drop(outfit);
    drain.abort();
    if let Some(problem) = report.problem.as_mut().filter(|_| !report.ok) {
        let tail = stderr.lines();
        let quoted: Vec<&str> = tail
            .iter()
            .rev()
            .take(STDERR_QUOTED)
            .rev()
            .map(String::as_str)
            .collect();
        if !quoted.is_empty() {
            problem.push_str(&format!("; it said: {}", quoted.join(" / ")));
        }
    }
    report
}

/// Where the engine's `model` network puts its sockets for the check.
fn sockets_for(launch: &Launch, engine: &str) -> PathBuf {
    runs_root(launch.guard.data_dir()).join(format!("net-check-{}", safe_name(engine)))
}

pub(super) fn safe_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// What the conversation goes by.
#[derive(Debug, Clone, Copy)]
struct Place<'a> {
    engine: &'a str,
    /// The names of the agent's variables.
    env: &'a [String],
    hint: Option<&'a str>,
    folder: &'a Path,
    reads_files: bool,
}

/// Connects over the agent's stdio and asks; a broken connection is the problem.
async fn talk_over(pipes: Pipes, place: Place<'_>) -> EngineCheck {
    let transport = transport::lines(pipes.stdout, pipes.input);
    let connection = Client
        .v1()
        .name("tether-agent")
        .connect_with(transport, async |cx: ConnectionTo<Agent>| {
            Ok(ask(&cx, place).await)
        })
        .await;
    connection.unwrap_or_else(|err| problem(format!("the connection to the agent broke: {err}")))
}

/// `initialize`, `authenticate` when possible, `session/new`.
async fn ask(cx: &ConnectionTo<Agent>, place: Place<'_>) -> EngineCheck {
    let introduced = match handshake::initialize(cx, place.reads_files).await {
        Ok(introduced) => introduced,
        Err(why) => return problem(why),
    };
    let methods = sign_in::methods(&introduced.raw);
    let mut report = described(&introduced, &methods);
    if let Err(why) = handshake::check_version(&introduced.agent) {
        report.problem = Some(why);
        return report;
    }
    if let Some(method) = sign_in::env_method(&methods, place.env) {
        if let Err(why) = sign_in::authenticate(cx, method).await {
            report.problem = Some(why);
            return report;
        }
    }
    let request = NewSessionRequest::new(place.folder.to_path_buf());
    match cx.send_request(request).block_task().await {
        Ok(_) => report.ok = true,
        Err(err) if err.code == agent_client_protocol::ErrorCode::AUTH_REQUIRED => {
            report.problem = Some(sign_in::needed(
                place.engine,
                &methods,
                place.env,
                place.hint,
            ));
        }
        Err(err) => {
            report.problem = Some(format!(
                "the agent did not start a session: {}",
                describe(&err)
            ));
        }
    }
    report
}

/// What `initialize` said, as a check not yet ok.
fn described(introduced: &Introduced, methods: &[Method]) -> EngineCheck {
    let agent = &introduced.agent;
    EngineCheck {
        checked_at: 0,
        ok: false,
        agent: agent.agent_info.as_ref().map(|info| CheckedAgent {
            name: info.title.clone().unwrap_or_else(|| info.name.clone()),
            version: info.version.clone(),
        }),
        protocol_version: handshake::protocol_number(agent),
        load_session: agent.agent_capabilities.load_session,
        auth_methods: methods
            .iter()
            .map(|method| CheckedAuthMethod {
                id: method.id.clone(),
                name: method.name.clone(),
                kind: method.kind_name().to_owned(),
            })
            .collect(),
        problem: None,
        took_ms: 0,
    }
}

/// A check that found only `why`.
fn problem(why: String) -> EngineCheck {
    EngineCheck {
        checked_at: 0,
        ok: false,
        agent: None,
        protocol_version: None,
        load_session: false,
        auth_methods: Vec::new(),
        problem: Some(why),
        took_ms: 0,
    }
}

/// Stamps the check with its time and how long it took, bounded as it is sent.
fn finished(mut report: EngineCheck, started: Instant) -> EngineCheck {
    report.checked_at = chrono::Utc::now().timestamp_millis();
    report.took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    report.bounded()
}

/// The check in words, for `engine check NAME`: "claude: ok — Claude Code 0.16.2, ACP 1,
/// loads sessions, sign-in: Log in with Claude Code (agent)".
pub fn render_check(name: &str, check: &EngineCheck) -> String {
    let mut facts = Vec::new();
    if let Some(agent) = &check.agent {
        facts.push(format!("{} {}", agent.name, agent.version));
    }
    if let Some(version) = check.protocol_version {
        facts.push(format!("ACP {version}"));
    }
    if check.agent.is_some() || check.protocol_version.is_some() {
        facts.push(
            if check.load_session {
                "loads sessions"
            } else {
                "no session loading"
            }
            .to_owned(),
        );
    }
    if !check.auth_methods.is_empty() {
        let methods: Vec<String> = check
            .auth_methods
            .iter()
            .map(|method| format!("{} ({})", method.name, method.kind))
            .collect();
        facts.push(format!("sign-in: {}", methods.join(", ")));
    }
    let state = if check.ok { "ok" } else { "not ok" };
    let mut text = format!("{name}: {state}");
    if !facts.is_empty() {
        text.push_str(" — ");
        text.push_str(&facts.join(", "));
    }
    if let Some(problem) = &check.problem {
        text.push_str(&format!("\n  {problem}"));
    }
    text.push_str(&format!(
        "\n  checked in {:.1} s\n",
        check.took_ms as f64 / 1000.0
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn introduced(answer: serde_json::Value) -> Introduced {
        Introduced {
            agent: serde_json::from_value(answer.clone()).unwrap_or_else(|err| panic!("{err}")),
            raw: answer,
        }
    }

    #[test]
    fn initialize_becomes_the_report() {
        let answer = json!({
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": true},
            "agentInfo": {"name": "claude-code-acp", "title": "Claude Code", "version": "0.16.2"},
            "authMethods": [{"id": "claude-login", "name": "Log in with Claude Code",
                             "description": "Run `claude /login` in the terminal"}]
        });
        let introduced = introduced(answer);
        let mut report = described(&introduced, &sign_in::methods(&introduced.raw));
        report.ok = true;
        report.took_ms = 1250;
        assert_eq!(
            render_check("claude", &report),
            "claude: ok — Claude Code 0.16.2, ACP 1, loads sessions, sign-in: Log in with \
             Claude Code (agent)\n  checked in 1.2 s\n"
        );
    }

    #[test]
    fn a_problem_is_said_under_the_line() {
        let mut report = problem("the agent could not be started: no such program".to_owned());
        report.took_ms = 40;
        assert_eq!(
            render_check("codex", &report),
            "codex: not ok\n  the agent could not be started: no such program\n  checked in 0.0 s\n"
        );
    }

    #[test]
    fn an_engine_name_makes_a_safe_socket_folder() {
        assert_eq!(safe_name("my/../agent"), "my____agent");
    }
}
