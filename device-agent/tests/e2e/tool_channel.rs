//! The run's tool channel end to end, with the real server and daemon:
//!
//! - a recipe calls `"$TETHER_AGENT" tool …` in its sandbox: a search finds an earlier job
//!   by its words, the chain of a follow-up names the run it continues, a bad call is
//!   refused with the server's reason, a forged token is refused, and outside a job the
//!   command says so;
//! - `tether-agent mcp`, started against a running job's channel, speaks MCP over stdio:
//!   `initialize`, `tools/list`, `tools/call tether_context` (answered by the server's
//!   context route), `resources/list` and `resources/read` of the job's attachments;
//! - the real Claude Code ACP adapter, run by the daemon against the scripted model server,
//!   calls `tether_context` through the MCP server the session was given, and the answer
//!   comes back to the model as the tool's result; the task's PNG reaches the model as an
//!   image block.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::decisions::Answer;
use tether_protocol::jobs::{Job, JobState};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::acp::follow_answering;
use super::coding_agents::{coding_agents, one_at_a_time};
use super::model_server::Script;
use super::presets::{Agent, Computer};
use crate::{
    agent, agent_ok, backend_works, output_lines, pair, spawn_server, start_daemon, Web, AGENT,
};

/// A one-pixel PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// An attached text file.
const NOTES: &str = "# Notes\nThe login drops sessions.\n";

/// Each call prints its answer, then ` | exit=N` on a line of its own.
const ASKING: &str = r#"call() { "$TETHER_AGENT" tool "$@"; echo " | exit=$?"; }
call context jobs.search unicorn login
call context job.chain
call context job.get ../elsewhere
TETHER_TOOL_TOKEN=forged call context job.chain
call attachments
echo asked"#;

/// Shows the channel to the test, then waits for it to be done with it.
const HOLDING: &str = r#"env | grep '^TETHER_TOOL_' > tool.env
while [ ! -e done ]; do sleep 0.1; done
echo held"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_and_an_mcp_client_use_the_tool_channel_bwrap() {
    if backend_works("bwrap").await {
        recipes_and_mcp("bwrap", false).await;
    }
}

/// Under Landlock a job without the internet may connect to no socket outside its sandbox
/// (seccomp refuses every `connect`), the channel's included: these jobs have the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_and_an_mcp_client_use_the_tool_channel_landlock() {
    if backend_works("landlock").await {
        recipes_and_mcp("landlock", true).await;
    }
}

async fn recipes_and_mcp(backend: &str, network: bool) {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    for (name, script) in [("note", "echo noted"), ("ask", ASKING), ("hold", HOLDING)] {
        agent_ok(
            home.path(),
            &["recipe", "add", name, "--", "sh", "-c", script],
        )
        .await;
    }
    // Outside a job there is no channel.
    let outside = agent(home.path(), &["tool", "context", "job.chain"]).await;
    assert_eq!(outside.status.code(), Some(2), "{outside:?}");
    assert!(String::from_utf8_lossy(&outside.stderr).contains("inside a job"));

    let daemon = start_daemon(home.path(), backend);
    web.wait_for_device(&device_id, |device| device.online)
        .await;
    let computer = Jobs {
        web: &web,
        device_id: &device_id,
        network,
    };
    let earlier = computer
        .run("note", "Fix the unicorn login", None, &[])
        .await;
    assert_eq!(earlier.state, JobState::Succeeded, "{}", daemon.stderr());

    let asked = computer
        .run("ask", "Look around", Some(&earlier), &[])
        .await;
    assert_eq!(
        asked.state,
        JobState::Succeeded,
        "{asked:#?}\n{}",
        daemon.stderr()
    );
    let output = output_lines(&asked).join("\n");
    let calls: Vec<&str> = output.split(" | exit=").collect();
    assert_eq!(calls.len(), 6, "{output}");
    // The search found the earlier job by two of its words.
    assert!(calls[0].contains("newest first"), "{output}");
    assert!(
        calls[0].contains(&format!("{} · Fix the unicorn login", earlier.id)),
        "{output}"
    );
    assert!(calls[1].starts_with('0'), "{output}");
    // The chain of the follow-up names the run it continues.
    assert!(
        calls[1].contains("Earlier runs of this job's chain"),
        "{output}"
    );
    assert!(calls[1].contains(earlier.id.as_ref()), "{output}");
    assert!(calls[2].starts_with('0'), "{output}");
    // A bad id is refused with the server's reason, on stderr, exit 1.
    assert!(calls[2].contains("tether-agent tool: "), "{output}");
    assert!(calls[2].contains("id"), "{output}");
    assert!(calls[3].starts_with('1'), "{output}");
    // A forged token is refused by the channel itself.
    assert!(
        calls[3].contains("this is not the run's tool token"),
        "{output}"
    );
    assert!(calls[4].starts_with('1'), "{output}");
    // No attachments: an empty list.
    assert!(calls[5].starts_with("0\nasked"), "{output}");

    mcp_against_a_running_job(&computer, work.path()).await;

    // Every channel's socket went with its run.
    let runs = runs_root(home.path());
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&runs);
}

/// The jobs of one computer, with or without the network.
struct Jobs<'a> {
    web: &'a Web,
    device_id: &'a str,
    network: bool,
}

impl Jobs<'_> {
    /// A job of `engine` titled `title`, continuing `continues`, with `attachments` (ids),
    /// run to its end.
    async fn run(
        &self,
        engine: &str,
        title: &str,
        continues: Option<&Job>,
        attachments: &[String],
    ) -> Job {
        let job = self.create(engine, title, continues, attachments).await;
        self.web
            .wait_for_job(job.id.as_ref(), Duration::from_secs(60), |job| {
                job.state.is_final()
            })
            .await
    }

    async fn create(
        &self,
        engine: &str,
        title: &str,
        continues: Option<&Job>,
        attachments: &[String],
    ) -> Job {
        let mut body = json!({
            "deviceId": self.device_id, "title": title, "prompt": format!("{title}, please"),
            "folder": "work", "engine": engine, "mode": "unattended", "network": self.network,
            "timeoutMinutes": 5, "attachments": attachments,
        });
        if let Some(earlier) = continues {
            body["continues"] = json!(earlier.id);
        }
        let res = self.web.post("/api/jobs", &body).await;
        let status = res.status();
        let text = res.text().await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{text}");
        serde_json::from_str(&text).unwrap()
    }
}

/// Uploads `bytes` as `name`; the attachment's id.
async fn upload(web: &Web, name: &str, bytes: &[u8]) -> String {
    let res = web
        .http
        .post(format!("{}/api/attachments", web.base))
        .bearer_auth(&web.token)
        .header(tether_protocol::routes::ATTACHMENT_NAME_HEADER, name)
        .body(bytes.to_vec())
        .send()
        .await
        .unwrap();
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let uploaded: Value = serde_json::from_str(&text).unwrap();
    uploaded["id"].as_str().unwrap().to_owned()
}

/// Starts a job that holds its channel open, and speaks MCP to it through
/// `tether-agent mcp`.
async fn mcp_against_a_running_job(computer: &Jobs<'_>, work: &Path) {
    let web = computer.web;
    let notes = upload(web, "notes.md", NOTES.as_bytes()).await;
    let shot = upload(web, "shot.png", PNG).await;
    let job = computer
        .create("hold", "Hold the channel", None, &[notes, shot])
        .await;
    let env_file = work.join("tool.env");
    crate::wait_until(Duration::from_secs(60), || {
        std::fs::read_to_string(&env_file).is_ok_and(|env| env.lines().count() == 2)
    })
    .await;
    assert!(
        env_file.exists(),
        "the job did not start: {:#?}",
        web.job(job.id.as_ref()).await
    );
    let vars: Vec<(String, String)> = std::fs::read_to_string(&env_file)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let mut mcp = Mcp::start(&vars);

    let initialized = mcp
        .request(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "tether-test", "version": "1" } }),
        )
        .await;
    assert_eq!(
        initialized["result"]["serverInfo"]["name"], "tether",
        "{initialized}"
    );
    let capabilities = &initialized["result"]["capabilities"];
    assert!(capabilities["tools"].is_object() && capabilities["resources"].is_object());
    mcp.notify("notifications/initialized").await;

    let tools = mcp.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "tether_context",
            "tether_report",
            "tether_attach",
            "tether_screenshot"
        ]
    );
    let tool = &tools["result"]["tools"][0];
    assert_eq!(tool["name"], "tether_context", "{tools}");
    assert_eq!(
        tool["inputSchema"]["properties"]["name"]["enum"],
        json!(["job.chain", "job.get", "jobs.search"])
    );

    let search = json!({ "name": "tether_context",
                         "arguments": { "name": "jobs.search", "args": { "query": "unicorn" } } });
    let called = mcp.request("tools/call", search).await;
    let result = &called["result"];
    assert_ne!(result["isError"], true, "{called}");
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("· Fix the unicorn login ·"), "{called}");
    let bad = json!({ "name": "tether_context",
                      "arguments": { "name": "job.get", "args": { "id": 7 } } });
    let refused = mcp.request("tools/call", bad).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");

    let listed = mcp.request("resources/list", json!({})).await;
    let resources = listed["result"]["resources"].as_array().unwrap();
    let shown: Vec<(&str, &str, u64)> = resources
        .iter()
        .map(|resource| {
            (
                resource["name"].as_str().unwrap(),
                resource["mimeType"].as_str().unwrap(),
                resource["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("notes.md", "text/plain", NOTES.len() as u64),
            ("shot.png", "image/png", PNG.len() as u64)
        ],
        "{listed}"
    );
    let read = |index: usize| json!({ "uri": resources[index]["uri"] });
    let notes = mcp.request("resources/read", read(0)).await;
    assert_eq!(notes["result"]["contents"][0]["text"], NOTES, "{notes}");
    let image = mcp.request("resources/read", read(1)).await;
    let blob = image["result"]["contents"][0]["blob"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(blob)
            .unwrap(),
        PNG
    );
    assert_eq!(image["result"]["contents"][0]["mimeType"], "image/png");
    let missing = mcp
        .request(
            "resources/read",
            json!({ "uri": "tether://attachments/att-none/x" }),
        )
        .await;
    assert!(missing["error"].is_object(), "{missing}");
    mcp.finish().await;

    std::fs::write(work.join("done"), b"").unwrap();
    let held = web
        .wait_for_job(job.id.as_ref(), Duration::from_secs(60), |job| {
            job.state.is_final()
        })
        .await;
    assert_eq!(held.state, JobState::Succeeded, "{held:#?}");
}

/// `tether-agent mcp` as an MCP client starts it: JSON-RPC lines on its stdio.
struct Mcp {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl Mcp {
    fn start(vars: &[(String, String)]) -> Mcp {
        let mut child = Command::new(AGENT)
            .arg("mcp")
            .env_clear()
            .envs(vars.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Mcp {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
            next_id: 0,
        }
    }

    async fn send(&mut self, message: &Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn notify(&mut self, method: &str) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method }))
            .await;
    }

    /// The whole answer to one request (`result` or `error`).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method}"))
                .unwrap()
                .unwrap_or_else(|| panic!("tether-agent mcp ended during {method}"));
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Closes its input: it ends by itself.
    async fn finish(mut self) {
        drop(self.stdin);
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("tether-agent mcp did not end with its input")
            .unwrap();
        assert!(status.success(), "{status:?}");
    }
}

/// `<data dir>-runs`, beside the agent's data dir (`TETHER_AGENT_HOME`).
fn runs_root(home: &Path) -> std::path::PathBuf {
    let name = home.file_name().unwrap().to_string_lossy();
    home.with_file_name(format!("{name}-runs"))
}

/// The real Claude Code, run by the daemon as the `claude-code` preset, calls
/// `tether_context` through the MCP server its session was given (`tether-agent mcp`,
/// started inside the run's sandbox), and the server's answer is the tool result the model
/// gets back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_calls_tether_context_through_mcp() {
    if !backend_works("bwrap").await {
        return;
    }
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let computer = Computer::start(Agent::ClaudeCode, &agents, "bwrap", "model", &[], |_| {}).await;
    // An earlier job for the search to find.
    let body = json!({
        "deviceId": computer.device_id, "title": "Fix the unicorn login",
        "prompt": "Do what the model says.", "folder": "work", "engine": "agent",
        "mode": "unattended", "network": false, "timeoutMinutes": 5,
    });
    computer.model.set_script(Script::say("first"));
    let earlier = start_job(&computer, &body).await;
    let (earlier, _) =
        follow_answering(&computer.web, &computer.daemon, &earlier, |_| Answer::Deny).await;
    assert_eq!(
        earlier.state,
        JobState::Succeeded,
        "{}",
        computer.daemon.stderr()
    );

    let input = json!({ "name": "jobs.search", "args": { "query": "unicorn" } });
    computer
        .model
        .set_script(Script::call_tool("tether_context", input, "ctx1"));
    // The task comes with a screenshot: Claude Code takes images in its prompt.
    let shot = upload(&computer.web, "shot.png", PNG).await;
    let mut body = body;
    body["title"] = json!("Look for earlier work");
    body["attachments"] = json!([shot]);
    let job_id = start_job(&computer, &body).await;
    let (job, asked) =
        follow_answering(&computer.web, &computer.daemon, &job_id, |_| Answer::Deny).await;
    let requests = computer.model.requests();
    let context = format!(
        "{job:#?}\n{:#?}\n{requests:#?}\n{}",
        output_lines(&job),
        computer.daemon.stderr()
    );
    assert_eq!(job.state, JobState::Succeeded, "{context}");
    assert!(asked.is_empty(), "unattended never asks: {asked:#?}");
    // The model was offered the tool under Claude Code's name for it, called it, and got
    // the server's answer back as its result.
    assert!(
        requests.iter().any(|request| request
            .tools
            .iter()
            .any(|tool| tool == "mcp__tether__tether_context")),
        "{context}"
    );
    assert!(
        requests
            .iter()
            .any(|request| request.answer == "tool mcp__tether__tether_context"),
        "{context}"
    );
    let result = requests
        .iter()
        .find_map(|request| request.result.clone())
        .unwrap_or_default();
    assert!(result.contains("newest first"), "{context}");
    assert!(
        result.contains(&format!("{} · Fix the unicorn login", earlier.id)),
        "{context}"
    );
    // The screenshot reached the model as an image block of the prompt.
    assert!(
        requests
            .iter()
            .any(|request| request.images.iter().any(|image| image == "image/png")),
        "{context}"
    );
    let summary = job
        .outcome
        .as_ref()
        .map(|outcome| outcome.summary.clone())
        .unwrap_or_default();
    assert!(summary.contains("done: ctx1"), "{context}");
}

async fn start_job(computer: &Computer, body: &Value) -> String {
    let res = computer.web.post("/api/jobs", body).await;
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let job: Job = serde_json::from_str(&text).unwrap();
    job.id.to_string()
}
