//! The real coding agents from npm (Claude Code, Codex and Gemini CLI, each speaking ACP)
//! against the scripted model server on loopback, driven directly by a small ACP client:
//! each asked to write a file (or run a command) asks for permission; allowed, it does so
//! and ends with the script's marker, refused, it does not; the server saw the key on
//! every request. None needs an ACP `authenticate` set up this way.
//!
//! The agents are installed once, from `tests/acp-agents`'s lock, into `target/npm/acp-agents`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::model_server::{ModelServer, Provider, Script};
use crate::{collect, npm};

/// The installed agents' programs.
#[derive(Debug, Clone)]
pub struct CodingAgents {
    /// `@zed-industries/claude-code-acp`.
    pub claude_code: PathBuf,
    /// `@zed-industries/codex-acp`.
    pub codex: PathBuf,
    /// `@google/gemini-cli` (run with `--experimental-acp`).
    pub gemini: PathBuf,
}

/// The real agents are heavy (node, a native Codex binary): one test drives them at a time,
/// so the rest of the suite keeps its share of the machine.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// The agents, installed on first use from `tests/acp-agents`'s lock; `None` (after saying
/// why) when they cannot be installed here, which fails under `TETHER_REQUIRE_EXTERNAL=1`.
pub async fn coding_agents() -> Option<CodingAgents> {
    let dir = npm::ACP_AGENTS.installed().await?;
    Some(CodingAgents {
        claude_code: dir.join("node_modules/.bin/claude-code-acp"),
        codex: dir.join("node_modules/.bin/codex-acp"),
        gemini: dir.join("node_modules/.bin/gemini"),
    })
}

/// How to start one agent against `server`, its state kept under `home`.
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

/// Claude Code: the Anthropic base URL and key from the environment; `IS_SANDBOX` lets it
/// run as root; no retries (it would retry a 401 ten times, backing off for minutes); the
/// rest keeps it from calling home.
pub fn claude_code(agents: &CodingAgents, server: &ModelServer) -> Launch {
    let (base, key) = (server.base_url(Provider::Anthropic), server.key());
    Launch {
        program: agents.claude_code.clone(),
        args: Vec::new(),
        env: pairs(&[
            ("ANTHROPIC_BASE_URL", &base),
            ("ANTHROPIC_API_KEY", &key),
            ("IS_SANDBOX", "1"),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
        ]),
    }
}

/// Codex: a provider of its own for the server (the built-in one ignores
/// `OPENAI_BASE_URL`, tries WebSockets first and wants ACP `authenticate`, which saves the
/// key in `auth.json`), without its sandbox and asking before every command and edit.
pub fn codex(agents: &CodingAgents, server: &ModelServer, home: &Path) -> Launch {
    let provider = format!(
        r#"model_providers.scripted={{name="Scripted",base_url="{}",env_key="OPENAI_API_KEY",wire_api="responses",supports_websockets=false,request_max_retries=0,stream_max_retries=0}}"#,
        server.base_url(Provider::OpenAi)
    );
    let settings = [
        r#"model_provider="scripted""#,
        &provider,
        r#"sandbox_mode="danger-full-access""#,
        r#"approval_policy="untrusted""#,
    ];
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    Launch {
        program: agents.codex.clone(),
        args: settings
            .iter()
            .flat_map(|setting| ["-c".to_owned(), (*setting).to_owned()])
            .collect(),
        env: pairs(&[
            ("CODEX_HOME", codex_home.to_str().unwrap()),
            ("OPENAI_API_KEY", &server.key()),
        ]),
    }
}

/// Gemini CLI: base URL and key from the environment (it then picks its `gateway`
/// authentication itself), its home under `home`, its usage statistics off.
pub fn gemini(agents: &CodingAgents, server: &ModelServer, home: &Path) -> Launch {
    let settings = json!({
        "privacy": { "usageStatisticsEnabled": false },
        "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false },
        "telemetry": { "enabled": false },
    });
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::write(home.join(".gemini/settings.json"), settings.to_string()).unwrap();
    Launch {
        program: agents.gemini.clone(),
        args: vec!["--experimental-acp".to_owned()],
        env: pairs(&[
            ("GOOGLE_GEMINI_BASE_URL", &server.base_url(Provider::Gemini)),
            ("GEMINI_API_KEY", &server.key()),
            ("GEMINI_CLI_HOME", home.to_str().unwrap()),
        ]),
    }
}

/// What came of one prompt.
#[derive(Debug, Default)]
pub struct Turn {
    pub stop_reason: String,
    /// The agent's message chunks, joined.
    pub said: String,
    /// The `session/request_permission` requests' params.
    pub asked: Vec<Value>,
    /// The methods the agent called on the client, in order.
    pub called: Vec<String>,
    pub stderr: String,
}

/// A minimal ACP client over the agent's stdio, answering its requests itself: permission
/// with the first `allow_once` (or `reject_once`) option, files and terminals for real.
struct Client {
    child: Child,
    /// The agent's process group.
    group: u32,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
    allow: bool,
    turn: Turn,
    /// Finished terminals: `(output, exit code)`.
    terminals: Vec<(String, i32)>,
}

impl Client {
    fn start(launch: &Launch, home: &Path, folder: &Path, allow: bool) -> Client {
        let mut child = Command::new(&launch.program)
            .args(&launch.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .envs(launch.env.iter().map(|(name, value)| (name, value)))
            .current_dir(folder)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, to end with it: the native Codex outlives its node wrapper.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {:?}: {err}", launch.program));
        let stderr = Arc::new(Mutex::new(String::new()));
        tokio::spawn(collect(child.stderr.take().unwrap(), stderr.clone()));
        Client {
            group: child.id().unwrap(),
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
            stderr,
            next_id: 0,
            allow,
            turn: Turn::default(),
            terminals: Vec::new(),
        }
    }

    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a request and answers the agent's own until its result comes; panics on an
    /// error answer or a silence of two minutes.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(120), self.stdout.next_line())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method}: {}", self.stderr()))
                .unwrap()
                .unwrap_or_else(|| panic!("the agent ended during {method}: {}", self.stderr()));
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message.get("method").is_some() {
                self.serve(&message).await;
            } else if message["id"] == id {
                assert!(
                    message.get("error").is_none(),
                    "{method} failed: {message}\n{}",
                    self.stderr()
                );
                return message["result"].clone();
            }
        }
    }

    /// Answers (or notes) one message the agent sent.
    async fn serve(&mut self, message: &Value) {
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let params = &message["params"];
        if message.get("id").is_none() {
            let update = &params["update"];
            if update["sessionUpdate"] == "agent_message_chunk" {
                let text = update["content"]["text"].as_str().unwrap_or_default();
                self.turn.said.push_str(text);
            }
            return;
        }
        self.turn.called.push(method.clone());
        let answer = match method.as_str() {
            "session/request_permission" => Ok(self.permit(params)),
            "fs/read_text_file" => Ok(read_text_file(params)),
            "fs/write_text_file" => write_text_file(params),
            "terminal/create" => Ok(self.create_terminal(params).await),
            "terminal/output" | "terminal/wait_for_exit" => Ok(self.terminal(params)),
            "terminal/release" | "terminal/kill" => Ok(json!({})),
            _ => Err(json!({ "code": -32601, "message": format!("no {method} here") })),
        };
        let reply = match answer {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": message["id"], "result": result }),
            Err(error) => json!({ "jsonrpc": "2.0", "id": message["id"], "error": error }),
        };
        self.send(reply).await;
    }

    fn permit(&mut self, params: &Value) -> Value {
        self.turn.asked.push(params.clone());
        let kind = if self.allow {
            "allow_once"
        } else {
            "reject_once"
        };
        let option = params["options"]
            .as_array()
            .and_then(|options| options.iter().find(|option| option["kind"] == kind))
            .unwrap_or_else(|| panic!("no {kind} option: {params}"));
        json!({ "outcome": { "outcome": "selected", "optionId": option["optionId"] } })
    }

    /// Runs the command to its end at once; `terminalId` is its index.
    async fn create_terminal(&mut self, params: &Value) -> Value {
        let command = params["command"].as_str().unwrap_or_default();
        let args: Vec<&str> = params["args"]
            .as_array()
            .map(|args| args.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // A command without args is a shell line (Claude Code sends it so).
        let mut process = if args.is_empty() {
            let mut shell = Command::new("sh");
            shell.args(["-c", command]);
            shell
        } else {
            let mut program = Command::new(command);
            program.args(args);
            program
        };
        if let Some(cwd) = params["cwd"].as_str() {
            process.current_dir(cwd);
        }
        let output = process.output().await.unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        self.terminals
            .push((text, output.status.code().unwrap_or(-1)));
        json!({ "terminalId": (self.terminals.len() - 1).to_string() })
    }

    fn terminal(&self, params: &Value) -> Value {
        let index: usize = params["terminalId"].as_str().unwrap().parse().unwrap();
        let (output, code) = &self.terminals[index];
        json!({
            "output": output, "truncated": false, "exitCode": code, "signal": null,
            "exitStatus": { "exitCode": code, "signal": null },
        })
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Closes the agent's stdin, gives it a moment to end by itself, then kills what is
    /// left of its group (Codex 0.16 does not end when its stdin closes).
    async fn finish(mut self) -> Turn {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(3), self.child.wait()).await;
        let group = format!("-{}", self.group);
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status()
            .await;
        let _ = self.child.wait().await;
        self.turn.stderr = self.stderr.lock().unwrap().clone();
        self.turn
    }
}

/// A missing file reads as empty: Gemini CLI 0.61 cannot tell an ACP error answer for a
/// file that does not exist yet from any other failure, and so would refuse to create it.
fn read_text_file(params: &Value) -> Value {
    let path = params["path"].as_str().unwrap_or_default();
    json!({ "content": std::fs::read_to_string(path).unwrap_or_default() })
}

fn write_text_file(params: &Value) -> Result<Value, Value> {
    let path = params["path"].as_str().unwrap_or_default();
    let content = params["content"].as_str().unwrap_or_default();
    std::fs::write(path, content)
        .map(|()| json!({}))
        .map_err(|err| json!({ "code": -32603, "message": err.to_string() }))
}

/// Starts the agent, opens a session in `folder` and sends one prompt, answering
/// permission with allow (or reject).
pub async fn run_turn(launch: &Launch, home: &Path, folder: &Path, allow: bool) -> Turn {
    let mut client = Client::start(launch, home, folder, allow);
    let capabilities =
        json!({ "fs": { "readTextFile": true, "writeTextFile": true }, "terminal": true });
    client
        .request(
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": capabilities,
                    "clientInfo": { "name": "tether-test", "version": "1" } }),
        )
        .await;
    let session = client
        .request("session/new", json!({ "cwd": folder, "mcpServers": [] }))
        .await;
    let prompt = json!([{ "type": "text", "text": "Carry out the scripted task." }]);
    let result = client
        .request(
            "session/prompt",
            json!({ "sessionId": session["sessionId"], "prompt": prompt }),
        )
        .await;
    client.turn.stop_reason = result["stopReason"].as_str().unwrap_or_default().to_owned();
    client.finish().await
}

/// The agent asked, wrote `file` as scripted and said it was done; every request the
/// server saw carried the key, and the model took at least two steps.
fn assert_wrote(turn: &Turn, server: &ModelServer, file: &Path, content: &str) {
    let script = server.script();
    let requests = server.requests();
    assert_eq!(turn.stop_reason, "end_turn", "{turn:#?}\n{requests:#?}");
    assert!(!turn.asked.is_empty(), "no permission asked: {turn:#?}");
    assert_eq!(
        std::fs::read_to_string(file).ok().as_deref(),
        Some(content),
        "{turn:#?}\n{requests:#?}"
    );
    assert!(script.reports_done(&turn.said), "{turn:#?}\n{requests:#?}");
    assert!(
        requests.iter().all(|request| request.keyed),
        "{requests:#?}"
    );
    let steps = requests.iter().filter(|request| request.is_turn()).count();
    assert!(steps >= 2, "{requests:#?}");
}

/// A home, a folder with `file` to be written in it, and a server scripted to write it.
async fn setup(marker: &str) -> (tempfile::TempDir, tempfile::TempDir, PathBuf, ModelServer) {
    let (home, folder) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let file = folder.path().canonicalize().unwrap().join("hello.txt");
    let script = Script::write_file(file.to_str().unwrap(), format!("hello {marker}\n"), marker);
    let server = ModelServer::start(script).await;
    (home, folder, file, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_writes_a_file_it_was_allowed_to() {
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let (home, folder, file, server) = setup("claude-wrote").await;
    let launch = claude_code(&agents, &server);
    let turn = run_turn(&launch, home.path(), folder.path(), true).await;
    assert_wrote(&turn, &server, &file, "hello claude-wrote\n");
    // Through the client, not behind its back.
    assert!(
        turn.called.contains(&"fs/write_text_file".to_owned()),
        "{turn:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_writes_a_file_it_was_allowed_to() {
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let (home, folder, file, server) = setup("codex-wrote").await;
    let launch = codex(&agents, &server, home.path());
    let turn = run_turn(&launch, home.path(), folder.path(), true).await;
    assert_wrote(&turn, &server, &file, "hello codex-wrote\n");
    assert!(
        server
            .requests()
            .iter()
            .any(|request| request.answer == "tool apply_patch"),
        "{:#?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_writes_a_file_it_was_allowed_to() {
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let (home, folder, file, server) = setup("gemini-wrote").await;
    let launch = gemini(&agents, &server, home.path());
    let turn = run_turn(&launch, home.path(), folder.path(), true).await;
    assert_wrote(&turn, &server, &file, "hello gemini-wrote\n");
    assert!(
        turn.called.contains(&"fs/write_text_file".to_owned()),
        "{turn:#?}"
    );
}

/// Refused, each agent leaves the file unwritten: Gemini tells the model, which says it
/// is not done; Claude Code and Codex end the turn without asking the model again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_is_not_done_by_any_agent() {
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    for name in ["claude-code", "codex", "gemini"] {
        let (home, folder, file, server) = setup(&format!("{name}-refused")).await;
        let launch = match name {
            "claude-code" => claude_code(&agents, &server),
            "codex" => codex(&agents, &server, home.path()),
            _ => gemini(&agents, &server, home.path()),
        };
        let turn = run_turn(&launch, home.path(), folder.path(), false).await;
        let requests = server.requests();
        assert!(!turn.asked.is_empty(), "{name}: {turn:#?}");
        assert!(!file.exists(), "{name}: {turn:#?}");
        assert!(
            !server.script().reports_done(&turn.said),
            "{name}: {turn:#?}"
        );
        let steps = requests.iter().filter(|request| request.is_turn()).count();
        let (stop, steps_wanted) = match name {
            "claude-code" => ("end_turn", 1),
            "codex" => ("cancelled", 1),
            _ => ("end_turn", 2),
        };
        assert_eq!(
            (turn.stop_reason.as_str(), steps),
            (stop, steps_wanted),
            "{name}: {turn:#?}\n{requests:#?}"
        );
        if name == "gemini" {
            assert!(turn.said.contains(&server.script().not_done()), "{turn:#?}");
        }
    }
}

/// Each agent runs the scripted command with its shell tool once allowed (Claude Code
/// through an ACP terminal, the others by themselves), and the model hears it worked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agent_runs_a_command_it_was_allowed_to() {
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    for name in ["claude-code", "codex", "gemini"] {
        let (home, folder) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let file = folder.path().canonicalize().unwrap().join("ran.txt");
        let marker = format!("{name}-ran");
        let command = format!("echo {marker} > {}", file.display());
        let server = ModelServer::start(Script::run_command(command, &marker)).await;
        let launch = match name {
            "claude-code" => claude_code(&agents, &server),
            "codex" => codex(&agents, &server, home.path()),
            _ => gemini(&agents, &server, home.path()),
        };
        let turn = run_turn(&launch, home.path(), folder.path(), true).await;
        let requests = server.requests();
        assert_eq!(
            std::fs::read_to_string(&file).ok(),
            Some(format!("{marker}\n")),
            "{name}: {turn:#?}\n{requests:#?}"
        );
        assert!(!turn.asked.is_empty(), "{name}: {turn:#?}");
        assert!(
            server.script().reports_done(&turn.said),
            "{name}: {turn:#?}\n{requests:#?}"
        );
        let through_terminal = turn.called.contains(&"terminal/create".to_owned());
        assert_eq!(through_terminal, name == "claude-code", "{name}: {turn:#?}");
    }
}

/// A request without the key, or with another, is a 401 the server records as unkeyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_server_refuses_a_wrong_key() {
    let server = ModelServer::start(Script::say("keyed")).await;
    let http = reqwest::Client::new();
    let body = json!({ "model": "m", "stream": false, "messages": [] });
    let anthropic = format!("{}/v1/messages", server.base_url(Provider::Anthropic));
    let wrong = http
        .post(&anthropic)
        .header("x-api-key", "wrong")
        .json(&body);
    assert_eq!(wrong.send().await.unwrap().status(), 401);
    let right = http.post(&anthropic).header("x-api-key", server.key());
    let answer: Value = right
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["content"][0]["text"], "done: keyed");
    let gemini = format!(
        "{}/v1beta/models/g:streamGenerateContent?alt=sse&key={}",
        server.base_url(Provider::Gemini),
        server.key()
    );
    let events = http.post(&gemini).json(&json!({})).send().await.unwrap();
    assert!(events.text().await.unwrap().contains("done: keyed"));
    let openai = format!("{}/responses", server.base_url(Provider::OpenAi));
    let unkeyed = http.post(&openai).json(&json!({ "input": [] }));
    assert_eq!(unkeyed.send().await.unwrap().status(), 401);
    let keyed: Vec<bool> = server
        .requests()
        .iter()
        .map(|request| request.keyed)
        .collect();
    assert_eq!(keyed, [false, true, true, false]);
}
