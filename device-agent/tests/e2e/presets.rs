//! The real coding agents from npm as Tether engines, set up by preset (`engine add NAME
//! --preset claude-code|codex|gemini`), with the real server and daemon, against the
//! scripted model server on loopback: each in unattended, ask + allow and ask + deny, under
//! bubblewrap (network `model`) and Landlock (network `on`); the engine's home kept between
//! runs; `--use-my-sign-in` granting the owner's folder to the engine and not to a command
//! it runs; Codex signed in through its `env_var` method; `engine check`.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tether_protocol::decisions::Answer;
use tether_protocol::jobs::{Job, JobState};
use tokio::process::Command;

use super::acp::follow_answering;
use super::coding_agents::{coding_agents, one_at_a_time, CodingAgents};
use super::model_server::{ModelServer, Provider, Script, API_KEY};
use super::{
    backend_works, output_lines, pair, save_secret, spawn_server, Daemon, Server, Web, AGENT,
};

/// A preset under test, and how it is pointed at the model server.
#[derive(Debug, Clone, Copy)]
pub(super) enum Agent {
    ClaudeCode,
    Codex,
    Gemini,
}

impl Agent {
    fn preset(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }

    fn program(self, agents: &CodingAgents) -> PathBuf {
        match self {
            Agent::ClaudeCode => agents.claude_code.clone(),
            Agent::Codex => agents.codex.clone(),
            Agent::Gemini => agents.gemini.clone(),
        }
    }

    /// The base-URL variable and its value, and the key's variable.
    fn endpoint(self, model: &ModelServer) -> (String, &'static str) {
        match self {
            Agent::ClaudeCode => (
                format!("ANTHROPIC_BASE_URL={}", model.base_url(Provider::Anthropic)),
                "ANTHROPIC_API_KEY",
            ),
            Agent::Codex => (
                format!("OPENAI_BASE_URL={}", model.base_url(Provider::OpenAi)),
                "OPENAI_API_KEY",
            ),
            Agent::Gemini => (
                format!(
                    "GOOGLE_GEMINI_BASE_URL={}",
                    model.base_url(Provider::Gemini)
                ),
                "GEMINI_API_KEY",
            ),
        }
    }
}

/// A paired computer with one preset engine `agent`, its daemon running under a backend,
/// the owner's home a folder of the test's.
pub(super) struct Computer {
    _server: Server,
    pub(super) web: Web,
    pub(super) device_id: String,
    pub(super) model: ModelServer,
    data: tempfile::TempDir,
    owner_home: tempfile::TempDir,
    work: tempfile::TempDir,
    pub(super) daemon: Daemon,
}

/// The agent's CLI with the owner's home set (the guard and `--use-my-sign-in` read it).
fn cli(data: &Path, owner_home: &Path, backend: &str) -> Command {
    let mut command = Command::new(AGENT);
    command
        .env("TETHER_AGENT_HOME", data)
        .env("HOME", owner_home)
        .env("TETHER_SANDBOX", backend)
        // The token in its file, never in the keyring of the machine running the tests.
        .env("TETHER_TOKEN_STORE", "file")
        .env_remove("TETHER_BWRAP")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

async fn cli_ok(computer_data: &Path, owner_home: &Path, backend: &str, args: &[&str]) -> String {
    let output = cli(computer_data, owner_home, backend)
        .args(args)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{args:?}: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

impl Computer {
    /// Under `backend`, the engine on `network`, `extra` more `engine add` options;
    /// `before_add` prepares the owner's home.
    pub(super) async fn start(
        agent: Agent,
        agents: &CodingAgents,
        backend: &str,
        network: &str,
        extra: &[&str],
        before_add: impl FnOnce(&Path),
    ) -> Computer {
        let model = ModelServer::start(Script::say("idle")).await;
        let server = spawn_server(None).await;
        let web = Web::sign_up(&server.base).await;
        let data = tempfile::tempdir().unwrap();
        let owner_home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        before_add(owner_home.path());
        let device_id = pair(&server.base, &web, data.path()).await;
        let home = owner_home.path();
        let run = |args: Vec<String>| {
            let data = data.path().to_path_buf();
            let home = home.to_path_buf();
            let backend = backend.to_owned();
            async move {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                cli_ok(&data, &home, &backend, &args).await
            }
        };
        run(vec![
            "folders".into(),
            "share".into(),
            "work".into(),
            work.path().display().to_string(),
        ])
        .await;
        let (endpoint, key) = agent.endpoint(&model);
        let mut add: Vec<String> = [
            "engine",
            "add",
            "agent",
            "--preset",
            agent.preset(),
            "--program",
        ]
        .map(str::to_owned)
        .to_vec();
        add.push(agent.program(agents).display().to_string());
        add.extend([
            "--env".to_owned(),
            endpoint,
            "--secret".to_owned(),
            key.to_owned(),
        ]);
        add.extend(["--network".to_owned(), network.to_owned()]);
        add.extend(extra.iter().map(|word| (*word).to_owned()));
        let said = run(add).await;
        assert!(
            said.contains(&format!("preset {}", agent.preset())),
            "{said}"
        );
        assert!(said.contains("is not saved on this computer yet"), "{said}");
        let mut daemon_command = cli(data.path(), home, backend);
        daemon_command.env("TETHER_SANDBOX", backend);
        let daemon = Daemon::spawn(daemon_command);
        let device = web
            .wait_for_device(&device_id, |device| {
                device.online
                    && device.seal_key.is_some()
                    && device.capabilities.as_ref().is_some_and(|caps| {
                        caps.engines.iter().any(|engine| engine.name == "agent")
                    })
            })
            .await;
        save_secret(
            &web,
            data.path(),
            &device_id,
            &device.seal_key.unwrap(),
            (key, API_KEY),
            None,
        )
        .await;
        Computer {
            _server: server,
            web,
            device_id,
            model,
            data,
            owner_home,
            work,
            daemon,
        }
    }

    /// The job's folder.
    pub(super) fn folder(&self) -> PathBuf {
        self.work.path().canonicalize().unwrap()
    }

    /// The engine's own home.
    fn engine_home(&self) -> PathBuf {
        let data = self.data.path().canonicalize().unwrap();
        let mut name = data.file_name().unwrap().to_os_string();
        name.push("-engines");
        data.with_file_name(name).join("agent/home")
    }

    /// Runs one job in `mode` following `script`, answering every question `answer`.
    async fn run(&self, mode: &str, script: Script, answer: Answer) -> (Job, Vec<Value>) {
        self.model.set_script(script);
        let body = json!({
            "deviceId": self.device_id, "title": format!("preset {mode}"),
            "prompt": "Do what the model says.", "folder": "work", "engine": "agent",
            "mode": mode, "network": false, "timeoutMinutes": 5,
        });
        let res = self.web.post("/api/jobs", &body).await;
        assert_eq!(res.status(), reqwest::StatusCode::CREATED);
        let job: Job = res.json().await.unwrap();
        follow_answering(&self.web, &self.daemon, job.id.as_ref(), |_| answer).await
    }

    /// `tether-agent …` on this computer.
    async fn cli(&self, backend: &str, args: &[&str]) -> String {
        cli_ok(self.data.path(), self.owner_home.path(), backend, args).await
    }
}

impl Drop for Computer {
    fn drop(&mut self) {
        if let Some(engines) = self.engine_home().parent().and_then(Path::parent) {
            let _ = std::fs::remove_dir_all(engines);
        }
    }
}

fn summary(job: &Job) -> String {
    job.outcome
        .as_ref()
        .map(|outcome| outcome.summary.clone())
        .unwrap_or_default()
}

fn context(computer: &Computer, job: &Job) -> String {
    format!(
        "{job:#?}\n{:#?}\n{}",
        output_lines(job),
        computer.daemon.stderr()
    )
}

/// The three modes of one preset under one backend: unattended writes without asking,
/// ask + allow writes once allowed, ask + deny writes nothing and says so.
async fn three_modes(agent: Agent, backend: &str, network: &str) {
    if !backend_works(backend).await {
        return;
    }
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let computer = Computer::start(agent, &agents, backend, network, &[], |_| {}).await;
    let file = |name: &str| computer.folder().join(name);

    let script = Script::write_file(file("unattended.md").display().to_string(), "one\n", "u1");
    let (job, asked) = computer
        .run("unattended", script.clone(), Answer::Deny)
        .await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{}",
        context(&computer, &job)
    );
    assert!(asked.is_empty(), "unattended never asks: {asked:#?}");
    assert_eq!(
        std::fs::read_to_string(file("unattended.md")).unwrap(),
        "one\n"
    );
    assert!(
        summary(&job).contains(&script.done()),
        "{}",
        context(&computer, &job)
    );

    let script = Script::write_file(file("allowed.md").display().to_string(), "two\n", "a1");
    let (job, asked) = computer.run("ask", script.clone(), Answer::Allow).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{}",
        context(&computer, &job)
    );
    assert!(
        !asked.is_empty(),
        "ask mode asks: {}",
        context(&computer, &job)
    );
    assert_eq!(
        std::fs::read_to_string(file("allowed.md")).unwrap(),
        "two\n"
    );

    let script = Script::write_file(file("denied.md").display().to_string(), "three\n", "d1");
    let (job, asked) = computer.run("ask", script, Answer::Deny).await;
    assert!(!asked.is_empty(), "{}", context(&computer, &job));
    assert!(!file("denied.md").exists(), "a denied write is not done");
    assert_eq!(job.state, JobState::Blocked, "{}", context(&computer, &job));
    assert!(
        summary(&job).starts_with("stopped after you denied: "),
        "{}",
        context(&computer, &job)
    );

    let turns = computer.model.requests();
    assert!(
        turns
            .iter()
            .filter(|request| request.is_turn())
            .all(|request| request.keyed),
        "every model request carried the key from the vault: {turns:#?}"
    );
    let check = computer
        .cli(backend, &["engine", "check", "agent", "--json"])
        .await;
    let check: Value = serde_json::from_str(&check).unwrap();
    assert_eq!(check["ok"], json!(true), "{check}");
    assert!(check["agent"]["name"].as_str().is_some(), "{check}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_by_preset_under_bubblewrap_on_its_model_network() {
    three_modes(Agent::ClaudeCode, "bwrap", "model").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_by_preset_under_landlock() {
    three_modes(Agent::ClaudeCode, "landlock", "on").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_by_preset_under_bubblewrap_on_its_model_network() {
    three_modes(Agent::Codex, "bwrap", "model").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_by_preset_under_landlock() {
    three_modes(Agent::Codex, "landlock", "on").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_by_preset_under_bubblewrap_on_its_model_network() {
    three_modes(Agent::Gemini, "bwrap", "model").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_by_preset_under_landlock() {
    three_modes(Agent::Gemini, "landlock", "on").await;
}

/// Codex signs in from its `env_var` method with the key from the vault, keeps its
/// sessions in the engine's home between runs (a follow-up loads the earlier session), and
/// the key it wrote in plain text there is gone after each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_signs_in_from_its_variable_and_keeps_its_home_but_not_the_key() {
    if !backend_works("bwrap").await {
        return;
    }
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let computer = Computer::start(Agent::Codex, &agents, "bwrap", "model", &[], |_| {}).await;
    let (first, _) = computer
        .run("unattended", Script::say("first"), Answer::Deny)
        .await;
    assert_eq!(
        first.state,
        JobState::Succeeded,
        "{}",
        context(&computer, &first)
    );
    assert!(
        output_lines(&first)
            .iter()
            .any(|line| line == "signed the agent in: Use OPENAI_API_KEY (OPENAI_API_KEY)"),
        "{}",
        context(&computer, &first)
    );
    let codex_home = computer.engine_home().join(".codex");
    assert!(
        codex_home.join("sessions").is_dir(),
        "its sessions are kept"
    );
    assert!(
        !codex_home.join("auth.json").exists(),
        "no key left in a file"
    );
    let body = json!({
        "deviceId": computer.device_id, "title": "follow-up", "prompt": "And now?",
        "folder": "work", "engine": "agent", "mode": "unattended", "network": false,
        "timeoutMinutes": 5, "continues": first.id,
    });
    computer.model.set_script(Script::say("second"));
    let res = computer.web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), reqwest::StatusCode::CREATED);
    let follow_up: Job = res.json().await.unwrap();
    let (follow_up, _) = follow_answering(
        &computer.web,
        &computer.daemon,
        follow_up.id.as_ref(),
        |_| Answer::Deny,
    )
    .await;
    assert_eq!(
        follow_up.state,
        JobState::Succeeded,
        "{}",
        context(&computer, &follow_up)
    );
    assert!(
        output_lines(&follow_up)
            .iter()
            .any(|line| line.contains("Continuing the agent's earlier session")),
        "{}",
        context(&computer, &follow_up)
    );
}

/// `--use-my-sign-in` grants the owner's `~/.claude` to Claude Code's process (its sessions
/// land there), never to a command it runs (which cannot read a file in it, nor sees the
/// engine's key and variables).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_sign_in_reaches_the_engine_and_not_its_commands() {
    if !backend_works("bwrap").await {
        return;
    }
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let computer = Computer::start(
        Agent::ClaudeCode,
        &agents,
        "bwrap",
        "model",
        &["--use-my-sign-in"],
        |home| {
            std::fs::create_dir_all(home.join(".claude")).unwrap();
            std::fs::write(home.join(".claude/marker.txt"), "owner-sign-in-marker\n").unwrap();
        },
    )
    .await;
    let claude = computer.owner_home.path().join(".claude");
    let command = format!(
        "cat {} > leaked.txt; true",
        claude.join("marker.txt").display()
    );
    let (job, _) = computer
        .run(
            "unattended",
            Script::run_command(command, "c1"),
            Answer::Deny,
        )
        .await;
    assert!(job.state.is_final(), "{}", context(&computer, &job));
    let leaked = std::fs::read_to_string(computer.folder().join("leaked.txt")).unwrap_or_default();
    assert!(
        !leaked.contains("owner-sign-in-marker"),
        "a command read the sign-in: {leaked}"
    );
    assert!(
        summary(&job).starts_with("stopped after Tether refused: "),
        "the guard refused it, not the owner: {}",
        context(&computer, &job)
    );
    let command = "echo \"key=$ANTHROPIC_API_KEY base=$ANTHROPIC_BASE_URL\" > env.txt";
    let (job, _) = computer
        .run(
            "unattended",
            Script::run_command(command, "c2"),
            Answer::Deny,
        )
        .await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{}",
        context(&computer, &job)
    );
    assert_eq!(
        std::fs::read_to_string(computer.folder().join("env.txt")).unwrap(),
        "key= base=\n",
        "the engine's key and variables stay out of its commands"
    );
    assert!(
        claude.join("projects").is_dir(),
        "the engine wrote its session into the owner's folder: {}",
        context(&computer, &job)
    );
    assert!(
        !computer.engine_home().join(".claude/projects").exists(),
        "not into its own home"
    );
}
