//! The `acp` engine end to end: the real server, the real daemon, and a scripted coding
//! agent built on the agent side of the `agent-client-protocol` crate
//! (`examples/scripted-acp-agent.rs`), started confined (Landlock, as the other e2e tests).
//!
//! The scripted agent reads its script from the job's prompt and writes what each request
//! was answered to stderr (`scripted: STEP JSON`), which the job's output shows. The tests
//! answer the decisions the run asks on the web, and check the folder afterwards.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_protocol::decisions::{Answer, DecisionState};
use tether_protocol::jobs::{Job, JobState, Outcome, TimelineKind};

use super::{
    agent_json, agent_ok, backend_works, external, npm, output_lines, pair, process_alive,
    save_secret, spawn_server_with, start_daemon, wait_until, Daemon, Server, Web, AGENT,
};
use tether_server::Config;

/// The scripted ACP agent, built by `cargo build --all-targets` next to the agent.
fn scripted_agent() -> PathBuf {
    let path = Path::new(AGENT)
        .with_file_name("examples")
        .join("scripted-acp-agent");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p tether-agent --examples` first (the test \
         script builds every target)",
        path.display()
    );
    path
}

/// A paired computer sharing `work` (holding `notes.txt`), with the scripted agent as the
/// ACP engine `scripted`, its daemon running.
pub(crate) struct Computer {
    pub(crate) server: Server,
    pub(crate) web: Web,
    pub(crate) device_id: String,
    pub(crate) home: tempfile::TempDir,
    work: tempfile::TempDir,
    backend: String,
    daemon: Daemon,
}

impl Computer {
    /// Under Landlock, as the other end-to-end tests.
    pub(crate) async fn start() -> Computer {
        Computer::start_with("landlock").await
    }

    /// Under the sandbox `backend`.
    async fn start_with(backend: &str) -> Computer {
        Computer::start_configured(backend, &[], |_| {}).await
    }

    /// Under the sandbox `backend`, the scripted agent started with `agent_args`, on a
    /// server configured by `tweak`.
    async fn start_configured(
        backend: &str,
        agent_args: &[&str],
        tweak: impl FnOnce(&mut Config),
    ) -> Computer {
        let server = spawn_server_with(None, tweak).await;
        let web = Web::sign_up(&server.base).await;
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::write(
            work.path().join("notes.txt"),
            "hello notes\nsecond line\nthird\n",
        )
        .unwrap();
        let device_id = pair(&server.base, &web, home.path()).await;
        let work_path = work.path().to_str().unwrap();
        agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
        let agent = scripted_agent();
        let mut command = vec!["engine", "add", "scripted", "--acp", "--"];
        command.push(agent.to_str().unwrap());
        command.extend(agent_args);
        let said = agent_ok(home.path(), &command).await;
        assert!(said.contains("Engine \"scripted\" (acp)"), "{said}");
        let listed = agent_ok(home.path(), &["engine", "list"]).await;
        assert!(listed.contains("scripted"), "{listed}");
        let daemon = start_daemon(home.path(), backend);
        let device = web
            .wait_for_device(&device_id, |device| {
                device.online
                    && device.capabilities.as_ref().is_some_and(|caps| {
                        caps.engines.iter().any(|engine| engine.name == "scripted")
                    })
            })
            .await;
        let engines = serde_json::to_value(&device.capabilities.unwrap().engines).unwrap();
        assert_eq!(engines, json!([{"name": "scripted", "kind": "acp"}]));
        let status = agent_json(home.path(), &["status", "--json"]).await;
        let shown = std::iter::once(agent.to_str().unwrap())
            .chain(agent_args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            status["engines"],
            json!([{
                "name": "scripted", "kind": "acp", "command": shown, "published": true,
                "settings": "network as the job says",
            }])
        );
        let said = agent_ok(home.path(), &["status"]).await;
        assert!(
            said.contains("Questions waiting on this computer: none"),
            "{said}"
        );
        Computer {
            server,
            web,
            device_id,
            home,
            work,
            backend: backend.to_owned(),
            daemon,
        }
    }

    /// `kill -9` of the daemon (its runs' trees go with it), then a new one on the same data
    /// dir; what the first one said.
    async fn restart_after_kill(&mut self) -> String {
        self.daemon.signal("KILL").await;
        let _ = self.daemon.wait(Duration::from_secs(10)).await;
        let said = self.daemon.stderr();
        self.daemon = start_daemon(self.home.path(), &self.backend);
        said
    }

    pub(crate) fn folder(&self) -> PathBuf {
        self.work.path().canonicalize().unwrap()
    }

    pub(crate) async fn create(&self, mode: &str, network: bool, steps: Value) -> String {
        self.create_naming(mode, network, steps, &[]).await
    }

    /// A job that also names `secrets`.
    pub(crate) async fn create_naming(
        &self,
        mode: &str,
        network: bool,
        steps: Value,
        secrets: &[&str],
    ) -> String {
        let body = json!({
            "deviceId": self.device_id, "title": format!("acp {mode}"),
            "prompt": json!({ "steps": steps }).to_string(),
            "folder": "work", "engine": "scripted", "mode": mode, "network": network,
            "timeoutMinutes": 5, "secrets": secrets,
        });
        self.create_from(&body).await
    }

    /// An unattended follow-up of `earlier` (Continue on the web).
    async fn create_follow_up(&self, earlier: &str, steps: Value) -> String {
        let body = json!({
            "deviceId": self.device_id, "title": "acp follow-up",
            "prompt": json!({ "steps": steps }).to_string(),
            "folder": "work", "engine": "scripted", "mode": "unattended", "network": false,
            "timeoutMinutes": 5, "continues": earlier,
        });
        self.create_from(&body).await
    }

    async fn create_from(&self, body: &Value) -> String {
        let res = self.web.post("/api/jobs", body).await;
        let status = res.status();
        let text = res.text().await.unwrap();
        assert_eq!(status, reqwest::StatusCode::CREATED, "{text}");
        let job: Job = serde_json::from_str(&text).unwrap();
        job.id.to_string()
    }

    /// Follows the job to its end, answering each decision it asks with `decide` (seen
    /// once each). Returns the job and the decisions answered, in order.
    pub(crate) async fn run(
        &self,
        job_id: &str,
        decide: impl Fn(&Value) -> Answer,
    ) -> (Job, Vec<Value>) {
        follow_answering(&self.web, &self.daemon, job_id, decide).await
    }

    /// [`Computer::run`], answering each decision for `scope` ("once" or "session").
    async fn run_answering_for(
        &self,
        job_id: &str,
        scope: &str,
        decide: impl Fn(&Value) -> Answer,
    ) -> (Job, Vec<Value>) {
        follow_answering_for(&self.web, &self.daemon, job_id, scope, decide).await
    }

    fn readyz(&self) -> String {
        format!("{}/readyz", self.server.base)
    }
}

/// What the scripted agent reported for a step: the JSON after `scripted: STEP `.
/// Follows the job to its end on the web, answering each decision it asks with `decide`
/// (seen once each). Returns the job and the decisions answered, in order.
pub(crate) async fn follow_answering(
    web: &Web,
    daemon: &Daemon,
    job_id: &str,
    decide: impl Fn(&Value) -> Answer,
) -> (Job, Vec<Value>) {
    follow_answering_for(web, daemon, job_id, "once", decide).await
}

/// [`follow_answering`], each answer given for `scope`.
async fn follow_answering_for(
    web: &Web,
    daemon: &Daemon,
    job_id: &str,
    scope: &str,
    decide: impl Fn(&Value) -> Answer,
) -> (Job, Vec<Value>) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut answered: Vec<Value> = Vec::new();
    loop {
        let job = web.job(job_id).await;
        if job.state.is_final() {
            return (job, answered);
        }
        for decision in &job.decisions {
            if decision.state != DecisionState::Pending
                || answered.iter().any(|seen| seen["id"] == json!(decision.id))
            {
                continue;
            }
            let decision = serde_json::to_value(decision).unwrap();
            let answer = decide(&decision);
            let res = web
                .post(
                    &format!("/api/decisions/{}/answer", decision["id"].as_str().unwrap()),
                    &json!({ "answer": answer, "scope": scope }),
                )
                .await;
            assert_eq!(res.status(), reqwest::StatusCode::OK, "{decision}");
            answered.push(decision);
        }
        assert!(
            Instant::now() < deadline,
            "the job never ended: {job:#?}\n{}",
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn reports(job: &Job, step: &str) -> Vec<Value> {
    let prefix = format!("stderr: scripted: {step} ");
    output_lines(job)
        .iter()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|json| serde_json::from_str(json).unwrap())
        .collect()
}

/// One `session/load` of the session `made` in `folder`, given the run's tool channel as its
/// one MCP server: `tether-agent mcp` with the channel's socket and token.
fn assert_loaded(loads: &[Value], made: &Value, folder: &Path) {
    assert_eq!(loads.len(), 1, "{loads:#?}");
    let load = &loads[0];
    assert_eq!((&load["sessionId"], &load["cwd"]), (made, &json!(folder)));
    let servers = load["mcpServers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{load:#}");
    let server = &servers[0];
    assert_eq!(
        (&server["name"], &server["args"]),
        (&json!("tether"), &json!(["mcp"])),
        "{load:#}"
    );
    let command = Path::new(server["command"].as_str().unwrap());
    assert_eq!(command, Path::new(crate::AGENT).canonicalize().unwrap());
    let names: Vec<&str> = server["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|var| var["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["TETHER_TOOL_SOCKET", "TETHER_TOOL_TOKEN"],
        "{load:#}"
    );
}

fn has_line(job: &Job, expected: &str) -> bool {
    output_lines(job).iter().any(|line| line == expected)
}

/// The work every mode does: messages, a plan, tool calls, a read, a write, a terminal
/// command writing a file, and a permission for a command that reaches the server (which
/// then runs only if allowed).
fn everyday_work(computer: &Computer) -> Value {
    let folder = computer.folder();
    let fetch = format!("curl -s -o fetched.txt {}", computer.readyz());
    json!([
        {"say": "Looking at the project.\nFirst the notes"},
        {"plan": {"entries": [
            {"content": "read the notes", "priority": "high", "status": "in_progress"},
            {"content": "write the result", "priority": "medium", "status": "pending"}
        ]}},
        {"tool": {"toolCallId": "read-1", "title": "Read notes.txt", "kind": "read",
                  "status": "pending", "locations": [{"path": folder.join("notes.txt")}]}},
        {"read": {"path": "notes.txt", "line": 2, "limit": 1}},
        {"toolUpdate": {"toolCallId": "read-1", "status": "completed"}},
        {"tool": {"toolCallId": "edit-1", "title": "Write result.txt", "kind": "edit",
                  "status": "in_progress", "locations": [{"path": folder.join("result.txt")}]}},
        {"write": {"path": "result.txt", "content": "written by the agent\n"}},
        {"terminal": {"command": "echo from-terminal > terminal.txt"}},
        {"permission": {
            "toolCall": {"toolCallId": "fetch-1", "title": "Fetch the server's status",
                         "kind": "execute", "rawInput": {"command": fetch}},
            "options": [
                {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                {"optionId": "yes", "name": "Allow", "kind": "allow_once"}
            ]
        }},
        {"terminal": {"command": fetch, "ifAllowed": "fetch-1"}},
        {"say": "All done: result.txt, terminal.txt and fetched.txt."}
    ])
}

/// `steps` with `extra` inserted before its last step (the closing message).
fn before_last(mut steps: Value, extra: Value) -> Value {
    let steps_list = steps.as_array_mut().unwrap();
    let last = steps_list.pop().unwrap();
    steps_list.extend(extra.as_array().unwrap().iter().cloned());
    steps_list.push(last);
    steps
}

/// Evidence as a recipe leaves it: one file written by the agent itself (its own sandbox
/// must let it), one by a terminal command it runs.
fn evidence_steps() -> Value {
    json!([
        {"evidence": {"name": "agent-notes.md", "content": "# Notes from the agent\n"}},
        {"terminal": {"command": "printf 'from a terminal\\n' > \"$TETHER_EVIDENCE_DIR/terminal.log\""}}
    ])
}

/// The job lists what [`evidence_steps`] left, and its owner downloads exactly those bytes.
async fn check_evidence(computer: &Computer, job: &Job) {
    assert_eq!(reports(job, "evidence"), [json!({"ok": "agent-notes.md"})]);
    let listed: Vec<(&str, &str, bool)> = job
        .evidence
        .iter()
        .map(|item| (item.name.as_str(), item.kind.as_str(), item.local))
        .collect();
    assert_eq!(
        listed,
        [
            ("agent-notes.md", "report", false),
            ("terminal.log", "log", false)
        ],
        "{:#?}",
        output_lines(job)
    );
    let expected: [&[u8]; 2] = [b"# Notes from the agent\n", b"from a terminal\n"];
    for (item, bytes) in job.evidence.iter().zip(expected) {
        let res = computer
            .web
            .get(&format!("/api/jobs/{}/evidence/{}", job.id, item.id))
            .await;
        assert_eq!(res.status(), reqwest::StatusCode::OK, "{}", item.name);
        assert_eq!(res.bytes().await.unwrap().as_ref(), bytes, "{}", item.name);
    }
    assert!(
        has_line(job, "evidence: 2 evidence file(s) sent"),
        "{:#?}",
        output_lines(job)
    );
}

/// Checks what every mode must show and leave behind after [`everyday_work`], which then
/// succeeded.
fn check_everyday_work(computer: &Computer, job: &Job) {
    let stderr = computer.daemon.stderr();
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}\n{stderr}");
    let outcome = job.outcome.clone().unwrap();
    assert!(
        outcome
            .summary
            .starts_with("All done: result.txt, terminal.txt and fetched.txt."),
        "{outcome:?}"
    );
    check_everyday_steps(computer, job);
}

/// What [`everyday_work`] shows and leaves behind, whatever its outcome.
fn check_everyday_steps(computer: &Computer, job: &Job) {
    let outcome = job.outcome.clone().unwrap();
    // The scripted agent did not report in its own words.
    assert_eq!(outcome.report, None);
    // The client advertised exactly what it implements (and no terminal sign-in).
    assert_eq!(
        reports(job, "initialize"),
        [json!({
            "fs": {"readTextFile": true, "writeTextFile": true},
            "terminal": true,
            "auth": {"terminal": false}
        })]
    );
    // session/update as the job's output: messages joined into lines, the plan, tool calls.
    for expected in [
        "Looking at the project.",
        "First the notes",
        "plan:",
        "  [~] read the notes",
        "  [ ] write the result",
        "tool: Read notes.txt (read) pending",
        "tool: Read notes.txt done",
        "tool: Write result.txt (edit) running",
        "wrote result.txt",
        "$ sh -c 'echo from-terminal > terminal.txt'",
        "All done: result.txt, terminal.txt and fetched.txt.",
    ] {
        assert!(
            has_line(job, expected),
            "{expected:?} not in {:#?}",
            output_lines(job)
        );
    }
    assert_eq!(reports(job, "read"), [json!({"ok": "second line\n"})]);
    assert_eq!(reports(job, "write")[0], json!({"ok": "written"}));
    let terminals = reports(job, "terminal");
    assert!(terminals.len() >= 2, "{terminals:?}");
    assert_eq!(
        terminals[0]["exit"],
        json!({"exitCode": 0}),
        "{terminals:?}"
    );
    assert_eq!(terminals[0]["goneAfterRelease"], true);
    assert_eq!(
        reports(job, "permission"),
        [json!({"toolCallId": "fetch-1", "answer": {"selected": "yes"}})]
    );
    let folder = computer.folder();
    assert_eq!(
        std::fs::read_to_string(folder.join("result.txt")).unwrap(),
        "written by the agent\n"
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("terminal.txt")).unwrap(),
        "from-terminal\n"
    );
    assert!(
        folder.join("fetched.txt").exists(),
        "the allowed command ran: {terminals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_in_ask_mode_asks_for_edits_and_commands_and_runs_them_once_allowed() {
    let computer = Computer::start().await;
    let job_id = computer.create("ask", true, everyday_work(&computer)).await;
    let (job, asked) = computer.run(&job_id, |_| Answer::Allow).await;
    check_everyday_work(&computer, &job);
    // Ask mode: the write, the command that changes the folder and the command reaching
    // the server asked; reading did not; the allowed command was not asked twice.
    let kinds: Vec<&str> = asked.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["write", "command", "command"], "{asked:#?}");
    assert!(
        asked[2]["question"].as_str().unwrap().contains("curl"),
        "{asked:#?}"
    );
}

/// A write question carries the change it would make, with saved values hidden: from
/// `fs/write_text_file` and from a permission request whose tool call has a `diff`; and the
/// output printed before a question is on the timeline before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_write_question_shows_the_change_with_saved_values_hidden() {
    const SECRET: &str = "tok-3c1d-preview-secret";
    let computer = Computer::start().await;
    let device = computer
        .web
        .wait_for_device(&computer.device_id, |device| device.seal_key.is_some())
        .await;
    save_secret(
        &computer.web,
        computer.home.path(),
        &computer.device_id,
        &device.seal_key.unwrap(),
        ("NOTES_TOKEN", SECRET),
        None,
    )
    .await;
    let folder = computer.folder();
    let notes = format!("hello notes\nsecond line with {SECRET}\nthird\n");
    let steps = json!([
        {"terminal": {"command": "echo one-$((1+1))"}},
        {"write": {"path": "notes.txt", "content": notes}},
        {"permission": {
            "toolCall": {"toolCallId": "plan-1", "title": "Write plan.md", "kind": "edit",
                         "locations": [{"path": folder.join("plan.md")}],
                         "content": [{"type": "diff", "path": folder.join("plan.md"),
                                      "oldText": null, "newText": "# Plan\n- ship it\n"}]},
            "options": [
                {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                {"optionId": "yes", "name": "Allow", "kind": "allow_once"}
            ]
        }},
        {"write": {"path": "plan.md", "content": "# Plan\n- ship it\n", "ifAllowed": "plan-1"}},
        {"say": "Done."}
    ]);
    let job_id = computer.create("ask", false, steps).await;
    let (job, asked) = computer.run(&job_id, |_| Answer::Allow).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}");
    let kinds: Vec<&str> = asked.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["command", "write", "write"], "{asked:#?}");
    // A command shows no preview; its argument vector is in the action.
    assert_eq!(asked[0].get("preview"), None, "{asked:#?}");
    assert_eq!(
        asked[0]["action"]["argv"],
        json!(["sh", "-c", "echo one-$((1+1))"])
    );
    let preview = asked[1]["preview"].as_str().unwrap();
    assert_eq!(
        preview,
        "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n hello notes\n-second line\n\
         +second line with [hidden]\n third\n"
    );
    assert!(!preview.contains(SECRET));
    assert_eq!(
        asked[2]["preview"].as_str().unwrap(),
        "--- /dev/null\n+++ b/plan.md\n@@ -0,0 +1,2 @@\n+# Plan\n+- ship it\n"
    );
    // The file holds what was proposed; the answered questions keep no file text.
    assert_eq!(
        std::fs::read_to_string(folder.join("notes.txt")).unwrap(),
        notes
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("plan.md")).unwrap(),
        "# Plan\n- ship it\n"
    );
    assert!(
        job.decisions.iter().all(|d| d.preview.is_none()),
        "{job:#?}"
    );
    // The command's output came before the write's question on the timeline.
    let at = |found: &dyn Fn(&tether_protocol::jobs::JobEvent) -> bool| {
        job.events
            .iter()
            .position(found)
            .unwrap_or_else(|| panic!("{job:#?}"))
    };
    let printed = at(&|event| event.kind == "output" && event.text == "term-1: exit code 0");
    let waiting = at(&|event| event.text == "Waiting for an answer (write question).");
    assert!(printed < waiting, "{:#?}", job.events);
}

/// What the agent's commands print reaches the job's output while they run, each line
/// `term-N: …` under its `$` line on the timeline: saved values hidden, a long output cut
/// (its first lines, a note, its last lines), a command that did not start saying why, and
/// the commands after it still under their own `$` lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_command_output_is_shown_under_its_command_as_it_runs() {
    const SECRET: &str = "tok-8e2f-terminal-secret";
    let computer = Computer::start().await;
    let device = computer
        .web
        .wait_for_device(&computer.device_id, |device| device.seal_key.is_some())
        .await;
    save_secret(
        &computer.web,
        computer.home.path(),
        &computer.device_id,
        &device.seal_key.unwrap(),
        ("TERMINAL_TOKEN", SECRET),
        None,
    )
    .await;
    // The first command prints, then waits (a minute at most) for the test to see the line.
    let waiting = "echo first-line; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; \
                   i=$((i+1)); done; echo second-line";
    let steps = json!([
        {"terminal": {"command": waiting}},
        {"terminal": {"command": format!("echo 'the token is {SECRET}'; echo 'exit code 0'")}},
        {"terminal": {"command": "seq 1 3000"}},
        {"terminal": {"command": "true", "cwd": "missing"}},
        {"terminal": {"command": "echo after >&2"}},
        {"say": "Done."}
    ]);
    let job_id = computer.create("unattended", false, steps).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = loop {
        let job = computer.web.job(&job_id).await;
        if has_line(&job, "term-1: first-line") || job.state.is_final() {
            break job;
        }
        assert!(
            Instant::now() < deadline,
            "the command's first line never showed while it ran: {:#?}",
            job.events
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    std::fs::write(computer.folder().join("go"), "").unwrap();
    assert_eq!(running.state, JobState::Running, "{running:#?}");
    assert!(!has_line(&running, "term-1: second-line"), "{running:#?}");
    assert!(!has_line(&running, "term-1: exit code 0"), "{running:#?}");
    let (job, _) = computer.run(&job_id, |_| Answer::Allow).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}");
    let lines = output_lines(&job);
    let of = |n: usize| -> Vec<&str> {
        let prefix = format!("term-{n}: ");
        lines
            .iter()
            .filter_map(|line| line.strip_prefix(&prefix))
            .collect()
    };
    assert_eq!(of(1), ["first-line", "second-line", "exit code 0"]);
    // Hidden like every line; a printed line that reads like an exit is not taken for it.
    assert_eq!(
        of(2),
        ["the token is [hidden]", " exit code 0", "exit code 0"]
    );
    assert!(
        job.events.iter().all(|event| !event.text.contains(SECRET)),
        "{job:#?}"
    );
    let long = of(3);
    assert_eq!(long.len(), 2000 + 1 + 1 + 100 + 1, "{long:?}");
    assert_eq!(long[..3], ["1", "2", "3"]);
    assert_eq!(long[1999], "2000");
    assert!(
        long[2000].starts_with("… output cut: a command shows its first 2000 lines"),
        "{}",
        long[2000]
    );
    assert_eq!(long[2001], "… 900 lines of output left out …");
    assert_eq!(long[2002], "2901");
    assert_eq!(long[2101..], ["3000", "exit code 0"]);
    let refused = of(4);
    assert!(
        refused.len() == 2
            && refused[0].starts_with("not started: ")
            && refused[0].contains("does not exist")
            && refused[1] == "ended",
        "{refused:?}"
    );
    assert_eq!(of(5), ["after", "exit code 0"]);
    // The timeline puts each command's lines under its own `$` line.
    let commands: Vec<i64> = job
        .events
        .iter()
        .filter(|event| event.kind == "output" && event.text.starts_with("$ "))
        .map(|event| event.seq)
        .collect();
    assert_eq!(commands.len(), 5, "{:#?}", job.events);
    for event in job
        .events
        .iter()
        .filter(|event| event.text.starts_with("term-"))
    {
        let n: usize = event.text["term-".len()..]
            .split(':')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap();
        let entry = event.entry.unwrap_or_else(|| panic!("{event:?}"));
        assert_eq!(
            (entry.kind, entry.group),
            (TimelineKind::Command, Some(commands[n - 1])),
            "{event:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_in_review_mode_works_in_its_folder_and_asks_beyond_it() {
    let computer = Computer::start().await;
    let steps = everyday_work(&computer);
    // Terminals: a kill, an output kept within the byte limit the agent asked for, a folder
    // inside the job's, one outside it, the environment the agent gives.
    std::fs::create_dir(computer.folder().join("sub")).unwrap();
    let extra = json!([
        {"terminal": {"command": "sleep", "args": ["30"], "kill": true}},
        {"terminal": {"command": "head -c 100000 /dev/zero | tr '\\0' x", "outputByteLimit": 1000}},
        {"terminal": {"command": "pwd > here.txt", "cwd": "sub"}},
        {"terminal": {"command": "true", "cwd": "/"}},
        {"terminal": {"command": "echo \"$GREETING\"", "env": {"GREETING": "hi there"}}}
    ]);
    let steps = before_last(before_last(steps, extra), evidence_steps());
    let job_id = computer.create("review", true, steps).await;
    let (job, asked) = computer.run(&job_id, |_| Answer::Allow).await;
    check_everyday_work(&computer, &job);
    check_evidence(&computer, &job).await;
    // Review mode: only the command reaching another computer asked.
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(asked[0]["kind"], "command");
    let terminals = reports(&job, "terminal");
    assert_eq!(terminals.len(), 8, "{terminals:?}");
    assert_eq!(terminals[2]["exit"]["signal"], "SIGKILL", "{terminals:?}");
    let kept = terminals[3]["output"].as_str().unwrap();
    assert_eq!(
        (kept.len(), terminals[3]["truncated"].clone()),
        (1000, json!(true))
    );
    let sub = computer.folder().join("sub");
    assert_eq!(
        std::fs::read_to_string(sub.join("here.txt"))
            .unwrap()
            .trim(),
        sub.to_str().unwrap()
    );
    assert!(
        terminals[5]["error"]
            .as_str()
            .unwrap()
            .contains("outside the job's folder"),
        "{terminals:?}"
    );
    assert_eq!(terminals[6]["output"], "hi there\n", "{terminals:?}");
}

/// The same work under bubblewrap: the agent's input, its program, its terminals and the
/// evidence folder work through the strong backend too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_in_review_mode_under_bubblewrap() {
    if !backend_works("bwrap").await {
        return;
    }
    let computer = Computer::start_with("bwrap").await;
    let steps = before_last(everyday_work(&computer), evidence_steps());
    let job_id = computer.create("review", true, steps).await;
    let (job, asked) = computer.run(&job_id, |_| Answer::Allow).await;
    check_everyday_work(&computer, &job);
    check_evidence(&computer, &job).await;
    assert_eq!(asked.len(), 1, "{asked:#?}");
}

/// "Allow for this run" on another folder reaches the run's commands too: once the owner
/// allowed the agent's write there for the run, a later terminal command writes there as
/// well. The same command in a run without the grant (its question answered for once)
/// cannot, and a follow-up that continues the granted run starts with the grant.
/// A folder for the second folder of a grant: it must lie outside every temporary folder,
/// where review mode goes ahead without asking, and outside the system folders. The build's
/// own scratch folder is one only when the checkout is not itself under `/tmp`; otherwise
/// `/srv/tether-tests`.
fn outside_temporary_folders() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let base = if ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .any(|temporary| target.starts_with(temporary))
    {
        PathBuf::from("/srv/tether-tests")
    } else {
        target
    };
    std::fs::create_dir_all(&base).unwrap_or_else(|err| panic!("{}: {err}", base.display()));
    base
}

async fn check_a_folder_allowed_for_the_run(backend: &str) {
    let computer = Computer::start_with(backend).await;
    let scratch = tempfile::tempdir_in(outside_temporary_folders()).unwrap();
    // A repository of its own, so the question names exactly this folder.
    let second = scratch.path().canonicalize().unwrap().join("second");
    std::fs::create_dir_all(second.join(".git")).unwrap();
    let command_writing = |name: &str| json!({"terminal": {"command": format!("echo {name} > {}", second.join(name).display())}});

    let steps = json!([
        {"write": {"path": second.join("agent.txt"), "content": "from the agent\n"}},
        command_writing("granted.txt"),
        {"say": "Wrote in the second folder."}
    ]);
    let granted_id = computer.create("review", false, steps).await;
    let (granted, asked) = computer
        .run_answering_for(&granted_id, "session", |_| Answer::Allow)
        .await;
    let daemon_said = || computer.daemon.stderr();
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(asked[0]["kind"], "folder", "{asked:#?}");
    assert_eq!(
        std::fs::read_to_string(second.join("agent.txt")).unwrap(),
        "from the agent\n"
    );
    assert_eq!(
        std::fs::read_to_string(second.join("granted.txt")).ok(),
        Some("granted.txt\n".to_owned()),
        "{granted:#?}\n{}",
        daemon_said()
    );
    assert_eq!(granted.state, JobState::Succeeded, "{granted:#?}");

    // Without the grant the same command cannot write there, even with its own question
    // (if any) allowed once: once is not for the run.
    let steps = json!([command_writing("ungranted.txt"), {"say": "Tried."}]);
    let ungranted_id = computer.create("review", false, steps).await;
    let (ungranted, _) = computer
        .run_answering_for(&ungranted_id, "once", |_| Answer::Allow)
        .await;
    assert!(!second.join("ungranted.txt").exists(), "{ungranted:#?}");
    let terminals = reports(&ungranted, "terminal");
    assert_eq!(terminals.len(), 1, "{ungranted:#?}");
    assert_ne!(terminals[0]["exit"]["exitCode"], json!(0), "{terminals:?}");

    // A follow-up of the granted run (unattended: it asks nobody) writes there too.
    let steps = json!([command_writing("follow-up.txt"), {"say": "Continued."}]);
    let follow_up_id = computer.create_follow_up(&granted_id, steps).await;
    let (follow_up, asked) = computer.run(&follow_up_id, |_| Answer::Deny).await;
    assert!(asked.is_empty(), "{asked:#?}");
    assert_eq!(
        std::fs::read_to_string(second.join("follow-up.txt")).ok(),
        Some("follow-up.txt\n".to_owned()),
        "{follow_up:#?}\n{}",
        daemon_said()
    );
    assert_eq!(follow_up.state, JobState::Succeeded, "{follow_up:#?}");
    assert!(
        has_line(
            &follow_up,
            &format!(
                "allowed for this run, as for the run it continues: changes inside {}",
                second.display()
            )
        ),
        "{follow_up:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_folder_allowed_for_the_run_is_writable_by_its_commands() {
    check_a_folder_allowed_for_the_run("landlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_folder_allowed_for_the_run_is_writable_by_its_commands_under_bubblewrap() {
    if !backend_works("bwrap").await {
        return;
    }
    check_a_folder_allowed_for_the_run("bwrap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_in_unattended_mode_never_waits_and_lists_what_it_took() {
    let computer = Computer::start().await;
    let outside = PathBuf::from(format!("/srv/tether-e2e-acp-{}", std::process::id()));
    let mut steps = everyday_work(&computer);
    let last = steps.as_array_mut().unwrap().pop().unwrap();
    // A write to another folder: unattended takes the recommended answer, deny.
    steps
        .as_array_mut()
        .unwrap()
        .push(json!({"write": {"path": outside.join("x.txt"), "content": "no"}}));
    steps.as_array_mut().unwrap().push(last);
    let job_id = computer.create("unattended", true, steps).await;
    let (job, asked) = computer.run(&job_id, |_| Answer::Deny).await;
    assert!(asked.is_empty(), "unattended never asks: {asked:#?}");
    let writes = reports(&job, "write");
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        writes[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("refused: "),
        "{writes:?}"
    );
    assert!(!outside.exists());
    // The rest is as in every mode; the write unattended mode refused makes the job
    // blocked, not a success (refused by the run's rule, not by the owner), and the choices
    // it took are listed in the result.
    check_everyday_steps(&computer, &job);
    assert_eq!(job.state, JobState::Blocked, "{job:#?}");
    let outcome = job.outcome.clone().unwrap();
    assert!(
        outcome.summary.starts_with(&format!(
            "stopped after Tether refused: write {}\nAll done: result.txt",
            outside.join("x.txt").display()
        )),
        "{outcome:?}"
    );
    assert!(
        outcome
            .summary
            .contains("Taken without asking (unattended):"),
        "{outcome:?}"
    );
    assert!(
        outcome.summary.contains("allowed without asking"),
        "{outcome:?}"
    );
    assert!(
        outcome.summary.contains("denied without asking"),
        "{outcome:?}"
    );
    let choices = outcome
        .summary
        .split("Taken without asking (unattended):")
        .nth(1);
    let choices = choices.map(|list| list.matches("\n- ").count());
    assert_eq!(choices, Some(2), "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_denied_command_does_not_run_even_if_the_agent_tries() {
    let computer = Computer::start().await;
    let fetch = format!("curl -s -o fetched.txt {}", computer.readyz());
    let steps = json!([
        {"permission": {
            "toolCall": {"toolCallId": "fetch-1", "title": "Fetch the server's status",
                         "kind": "execute", "rawInput": {"command": fetch}},
            "options": [
                {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                {"optionId": "no", "name": "Reject", "kind": "reject_once"}
            ]
        }},
        {"terminal": {"command": fetch, "ifAllowed": "fetch-1"}},
        // An agent that runs it anyway is asked again, and refused.
        {"terminal": {"command": fetch}},
        {"say": "I was told no."}
    ]);
    let job_id = computer.create("review", true, steps).await;
    let (job, asked) = computer.run(&job_id, |_| Answer::Deny).await;
    // What the owner denied is why the job did not do its work: blocked, naming it.
    assert_eq!(job.state, JobState::Blocked, "{job:#?}");
    let outcome = job.outcome.clone().unwrap();
    assert_eq!(
        outcome.summary,
        "stopped after you denied: Fetch the server's status and 1 more\nI was told no."
    );
    assert_eq!(asked.len(), 2, "{asked:#?}");
    assert_eq!(
        reports(&job, "permission"),
        [json!({"toolCallId": "fetch-1", "answer": {"selected": "no"}})]
    );
    let terminals = reports(&job, "terminal");
    assert_eq!(terminals[0]["skipped"], "fetch-1 was not allowed");
    assert!(
        terminals[1]["error"].as_str().unwrap().contains("denied"),
        "{terminals:?}"
    );
    assert!(!computer.folder().join("fetched.txt").exists());
    let decisions: Vec<Option<Answer>> = job.decisions.iter().map(|d| d.answer).collect();
    assert_eq!(decisions, [Some(Answer::Deny), Some(Answer::Deny)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_protected_paths_and_the_hard_floor_are_refused_before_anyone_is_asked() {
    let computer = Computer::start().await;
    let data_dir = computer.home.path().canonicalize().unwrap();
    let steps = json!([
        {"read": {"path": data_dir.join("device-token")}},
        {"write": {"path": data_dir.join("stolen.txt"), "content": "x"}},
        {"write": {"path": "../escape.txt", "content": "x"}},
        {"terminal": {"command": "sudo id > floor.txt"}},
        {"terminal": {"command": "rm", "args": ["-rf", "/"]}},
        {"say": "Nothing got through."}
    ]);
    // Ask mode asks about everything it may ask about; none of these may be asked.
    let job_id = computer.create("ask", false, steps).await;
    let (job, asked) = computer.run(&job_id, |_| Answer::Allow).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}");
    assert!(asked.is_empty(), "{asked:#?}");
    assert!(job.decisions.is_empty(), "{:#?}", job.decisions);
    let refused = |value: &Value| {
        value["error"]
            .as_str()
            .is_some_and(|error| error.starts_with("refused: ") || error.contains(".."))
    };
    let reads = reports(&job, "read");
    assert!(reads.iter().all(refused), "{reads:?}");
    let writes = reports(&job, "write");
    assert_eq!(writes.len(), 2);
    assert!(writes.iter().all(refused), "{writes:?}");
    let terminals = reports(&job, "terminal");
    assert_eq!(terminals.len(), 2);
    assert!(
        terminals
            .iter()
            .all(|t| t["error"].as_str().unwrap().contains("hard floor")),
        "{terminals:?}"
    );
    assert!(!data_dir.join("stolen.txt").exists());
    assert!(!computer.folder().join("floor.txt").exists());
    assert!(!computer
        .work
        .path()
        .parent()
        .unwrap()
        .join("escape.txt")
        .exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_cancel_from_the_web_becomes_session_cancel() {
    let computer = Computer::start().await;
    let steps = json!([
        {"say": "Working on it.\n"},
        {"tool": {"toolCallId": "long-1", "title": "A long task", "kind": "other", "status": "in_progress"}},
        "waitForCancel"
    ]);
    let job_id = computer.create("review", false, steps).await;
    let running = computer
        .web
        .wait_for_job(&job_id, Duration::from_secs(60), |job| {
            has_line(job, "tool: A long task (other) running")
        })
        .await;
    let pid = u32::try_from(reports(&running, "pid")[0].as_u64().unwrap()).unwrap();
    assert!(process_alive(pid));
    let res = computer
        .web
        .post(&format!("/api/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert!(res.status().is_success(), "cancel: {}", res.status());
    let job = computer
        .web
        .wait_until_ended(&job_id, Duration::from_secs(30))
        .await;
    assert_eq!(job.state, JobState::Cancelled, "{job:#?}");
    let outcome = job.outcome.clone().unwrap();
    assert_eq!(
        outcome.summary, "cancelled",
        "the agent ended its turn itself"
    );
    assert_eq!(reports(&job, "session/cancel").len(), 1);
    assert_eq!(reports(&job, "stop"), [json!("cancelled")]);
    wait_until(Duration::from_secs(5), || !process_alive(pid)).await;
    assert!(!process_alive(pid), "the agent outlived its run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_cancel_while_a_decision_is_open_withdraws_it_and_answers_cancelled() {
    let computer = Computer::start().await;
    let steps = json!([
        {"permission": {
            "toolCall": {"toolCallId": "cmd-1", "title": "Change something",
                         "kind": "execute", "rawInput": {"command": "touch changed.txt"}},
            "options": [
                {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                {"optionId": "no", "name": "Reject", "kind": "reject_once"}
            ]
        }},
        {"terminal": {"command": "touch changed.txt", "ifAllowed": "cmd-1"}},
        {"say": "Should not get here."}
    ]);
    let job_id = computer.create("ask", false, steps).await;
    // The job's row and its decisions are two reads: wait for both to show the question.
    let waiting = computer
        .web
        .wait_for_job(&job_id, Duration::from_secs(60), |job| {
            job.state == JobState::Waiting
                && job
                    .decisions
                    .iter()
                    .any(|decision| decision.state == DecisionState::Pending)
        })
        .await;
    assert_eq!(waiting.state, JobState::Waiting, "{waiting:#?}");
    // `status` counts it among the questions waiting on this computer.
    let status = agent_json(computer.home.path(), &["status", "--json"]).await;
    assert_eq!(status["decisionsWaiting"], 1, "{status}");
    let res = computer
        .web
        .post(&format!("/api/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert!(res.status().is_success(), "cancel: {}", res.status());
    let job = computer
        .web
        .wait_until_ended(&job_id, Duration::from_secs(30))
        .await;
    assert_eq!(job.state, JobState::Cancelled, "{job:#?}");
    assert_eq!(job.outcome.as_ref().unwrap().summary, "cancelled");
    assert_eq!(
        reports(&job, "permission"),
        [json!({"toolCallId": "cmd-1", "answer": {"outcome": "cancelled"}})]
    );
    assert_eq!(reports(&job, "stop"), [json!("cancelled")]);
    let states: Vec<DecisionState> = job.decisions.iter().map(|d| d.state).collect();
    assert_eq!(states, [DecisionState::Withdrawn]);
    // The question offered on the computer went with it.
    let pending = computer.home.path().join("decisions/pending");
    let left: Vec<_> = std::fs::read_dir(&pending)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    let status = agent_json(computer.home.path(), &["status", "--json"]).await;
    assert_eq!(status["decisionsWaiting"], 0, "{status}");
    assert!(!computer.folder().join("changed.txt").exists());
    assert!(!has_line(&job, "Should not get here."));
}

/// Also: what the agent left as evidence before it fell over is delivered all the same, and
/// with `evidence off` it is held on the computer, only its description sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_an_agent_that_crashes_fails_the_job_saying_so() {
    let computer = Computer::start().await;
    let home = computer.home.path();
    agent_ok(home, &["evidence", "off"]).await;
    let status = agent_json(home, &["status", "--json"]).await;
    assert_eq!(
        (
            status["evidenceUpload"].clone(),
            status["acceptWebApprovals"].clone()
        ),
        (json!(false), json!(true))
    );
    // A second engine published after the switch shows the daemon read the new setting.
    let agent = scripted_agent();
    agent_ok(
        home,
        &[
            "engine",
            "add",
            "later",
            "--acp",
            "--",
            agent.to_str().unwrap(),
        ],
    )
    .await;
    computer
        .web
        .wait_for_device(&computer.device_id, |device| {
            device
                .capabilities
                .as_ref()
                .is_some_and(|caps| caps.engines.iter().any(|engine| engine.name == "later"))
        })
        .await;
    let steps = json!([
        {"say": "About to fall over.\n"},
        {"evidence": {"name": "crash.log", "content": "last words\n"}},
        {"crash": 3}
    ]);
    let job_id = computer.create("unattended", false, steps).await;
    let (job, _) = computer.run(&job_id, |_| Answer::Deny).await;
    let evidence_root = home.with_file_name(format!(
        "{}-evidence",
        home.file_name().unwrap().to_string_lossy()
    ));
    let held_id = job
        .evidence
        .first()
        .map(|item| item.id.clone())
        .unwrap_or_default();
    let kept = evidence_root.join("held").join(&job_id).join(held_id);
    let kept_bytes = std::fs::read(&kept);
    let _ = std::fs::remove_dir_all(&evidence_root);
    assert_eq!(kept_bytes.unwrap(), b"last words\n");
    let listed: Vec<(&str, u64, bool)> = job
        .evidence
        .iter()
        .map(|item| (item.name.as_str(), item.size, item.held))
        .collect();
    assert_eq!(listed, [("crash.log", 11, true)], "{job:#?}");
    assert!(
        output_lines(&job)
            .iter()
            .any(|line| line.contains("1 held on this computer")),
        "{:#?}",
        output_lines(&job)
    );
    assert_eq!(job.state, JobState::Failed, "{job:#?}");
    let outcome = job.outcome.clone().unwrap();
    assert_eq!(outcome.outcome, Outcome::Failed);
    assert!(
        outcome
            .summary
            .starts_with("the agent did not finish the turn: the agent exited (exit code 3)"),
        "{outcome:?}"
    );
    assert!(outcome.summary.contains("scripted: crash 3"), "{outcome:?}");
    assert!(has_line(&job, "About to fall over."));
}

/// The agent message the scripted agent replays while it loads a session (`REPLAYED` there).
const REPLAYED: &str = "Replayed from the earlier session.";

/// The steps the scripted agent reported, in order, from `steps` only.
fn steps_in_order(job: &Job, steps: &[&str]) -> Vec<String> {
    output_lines(job)
        .iter()
        .filter_map(|line| line.strip_prefix("stderr: scripted: "))
        .filter_map(|rest| rest.split_once(' ').map(|(step, _)| step.to_owned()))
        .filter(|step| steps.contains(&step.as_str()))
        .collect()
}

/// Runs `job_id` to its end, unattended; it must succeed.
async fn succeeded(computer: &Computer, job_id: &str) -> Job {
    let (job, _) = computer.run(job_id, |_| Answer::Deny).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        computer.daemon.stderr()
    );
    job
}

/// Continue with an agent that advertises `loadSession`: the follow-up loads the first run's
/// session (what the agent replays is not shown), then prompts the follow-up's request; a
/// follow-up of the follow-up loads the same session again; a session the agent refuses to
/// load falls back to a new one told of the earlier run. (A job is continued once, so each
/// follow-up continues the one before.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_follow_up_loads_the_agents_earlier_session() {
    let computer = Computer::start_configured("landlock", &["--load-session"], |_| {}).await;
    let first_id = computer
        .create(
            "unattended",
            false,
            json!([{"say": "The parser is fixed."}]),
        )
        .await;
    let first = succeeded(&computer, &first_id).await;
    let made = reports(&first, "session/new")[0]["sessionId"].clone();
    assert!(
        made.as_str().unwrap().starts_with("scripted-session-"),
        "{made}"
    );
    let stored = std::fs::read_to_string(computer.home.path().join("acp-sessions.json")).unwrap();
    assert!(stored.contains(made.as_str().unwrap()), "{stored}");

    let follow_up = json!([{"say": "The lexer is fixed too."}]);
    let second_id = computer
        .create_follow_up(&first_id, follow_up.clone())
        .await;
    let second = succeeded(&computer, &second_id).await;
    let folder = computer.folder();
    assert_loaded(&reports(&second, "load"), &made, &folder);
    assert_eq!(
        steps_in_order(&second, &["session/new", "load", "prompt"]),
        ["load", "prompt"]
    );
    assert_eq!(
        reports(&second, "prompt"),
        [json!({"text": json!({"steps": follow_up}).to_string()})]
    );
    assert!(has_line(&second, "Continuing the agent's earlier session"));
    let lines = output_lines(&second);
    assert!(
        !lines.iter().any(|line| line.contains(REPLAYED)),
        "{lines:#?}"
    );
    assert_eq!(
        second.outcome.as_ref().unwrap().summary,
        "The lexer is fixed too."
    );

    // A follow-up of the follow-up: the session was stored for the second job too.
    let third_id = computer
        .create_follow_up(&second_id, json!([{"say": "And the docs."}]))
        .await;
    let third = succeeded(&computer, &third_id).await;
    assert_eq!(reports(&third, "load")[0]["sessionId"], made);

    // The agent refuses a session it does not know: a new session, told of the earlier run.
    let file = computer.home.path().join("acp-sessions.json");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace(made.as_str().unwrap(), "unknown-session"),
    )
    .unwrap();
    let fourth_id = computer
        .create_follow_up(&third_id, json!([{"say": "Fresh start."}]))
        .await;
    let fourth = succeeded(&computer, &fourth_id).await;
    assert_eq!(reports(&fourth, "load")[0]["sessionId"], "unknown-session");
    assert_eq!(
        steps_in_order(&fourth, &["session/new", "load", "prompt"]),
        ["load", "session/new", "prompt"]
    );
    assert!(
        output_lines(&fourth)
            .iter()
            .any(|line| line.starts_with("the agent did not load its earlier session: ")),
        "{:#?}",
        output_lines(&fourth)
    );
    assert!(has_line(
        &fourth,
        "Starting a new session with a summary of the earlier run"
    ));
    let prompt = reports(&fourth, "prompt")[0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.starts_with("This is a follow-up of an earlier job in this folder."),
        "{prompt}"
    );
    assert!(!output_lines(&fourth)
        .iter()
        .any(|line| line.contains(REPLAYED)));
}

/// Continue with an agent that cannot load sessions: a new session, whose prompt starts with
/// the earlier request and how it ended, marked as such, then the follow-up's request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_follow_up_without_load_session_is_told_of_the_earlier_run() {
    let computer = Computer::start().await;
    let earlier = json!([{"say": "The parser is fixed."}]);
    let first_id = computer.create("unattended", false, earlier.clone()).await;
    succeeded(&computer, &first_id).await;
    let follow_up = json!([{"say": "The lexer is fixed too."}]);
    let second_id = computer
        .create_follow_up(&first_id, follow_up.clone())
        .await;
    let second = succeeded(&computer, &second_id).await;
    assert!(reports(&second, "load").is_empty());
    assert_eq!(reports(&second, "session/new").len(), 1);
    assert!(has_line(
        &second,
        "Starting a new session with a summary of the earlier run"
    ));
    let expected = format!(
        "This is a follow-up of an earlier job in this folder. Its session could not be \
         continued, so here is what it was asked and how it ended.\n\
         --- earlier request ---\n{}\n\
         --- how it ended: succeeded ---\nThe parser is fixed.\n\
         --- follow-up request ---\n{}",
        json!({"steps": earlier}),
        json!({"steps": follow_up})
    );
    assert_eq!(reports(&second, "prompt"), [json!({"text": expected})]);
    assert_eq!(
        second.outcome.as_ref().unwrap().summary,
        "The lexer is fixed too."
    );
}

/// The owner deletes a stopped job's agent session from the web: the agent is asked
/// `session/delete`, this computer's record goes, and a follow-up starts a new session told
/// of the earlier run instead of loading it. A session the agent refuses to delete is said
/// so, and kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_deleted_session_is_never_loaded_again() {
    let args = ["--load-session", "--delete-sessions"];
    let computer = Computer::start_configured("landlock", &args, |_| {}).await;
    let first_id = computer
        .create(
            "unattended",
            false,
            json!([{"say": "The parser is fixed."}]),
        )
        .await;
    let first = succeeded(&computer, &first_id).await;
    let made = reports(&first, "session/new")[0]["sessionId"].clone();
    let made = made.as_str().unwrap().to_owned();
    let file = computer.home.path().join("acp-sessions.json");
    assert!(std::fs::read_to_string(&file).unwrap().contains(&made));

    let res = computer
        .web
        .delete(&format!("/api/jobs/{first_id}/session"))
        .await;
    assert_eq!(res.status(), 204, "{}", computer.daemon.stderr());
    assert!(!std::fs::read_to_string(&file).unwrap().contains(&made));
    let said = computer.daemon.stderr();
    assert!(
        said.contains("session deleted: the agent deleted its copy (session/delete)"),
        "{said}"
    );

    let second_id = computer
        .create_follow_up(&first_id, json!([{"say": "The lexer is fixed too."}]))
        .await;
    let second = succeeded(&computer, &second_id).await;
    assert!(reports(&second, "load").is_empty(), "{second:#?}");
    assert!(has_line(
        &second,
        "Starting a new session with a summary of the earlier run"
    ));
    let prompt = reports(&second, "prompt")[0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.starts_with("This is a follow-up of an earlier job in this folder."),
        "{prompt}"
    );

    // The agent refuses: the owner reads why, and the session stays for a follow-up.
    let text = std::fs::read_to_string(&file).unwrap();
    let kept = reports(&second, "session/new")[0]["sessionId"].clone();
    let kept = kept.as_str().unwrap();
    std::fs::write(&file, text.replace(kept, "undeletable-session")).unwrap();
    let res = computer
        .web
        .delete(&format!("/api/jobs/{second_id}/session"))
        .await;
    assert_eq!(res.status(), 409);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "device_refused", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the agent did not delete its session")
            && message.contains("cannot delete undeletable-session"),
        "{message}"
    );
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("undeletable-session"));
}

/// `kill -9` of the daemon mid-run: the restarted daemon carries the run on, loading the
/// agent's session from before the restart and telling it why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_run_lost_to_a_restart_loads_its_session_again() {
    let mut computer = Computer::start_configured("landlock", &["--load-session"], |config| {
        config.lease_secs = 3;
    })
    .await;
    let steps = json!([
        {"unlessLoaded": [{"say": "Starting.\n"}, {"sleep": 120_000}]},
        {"say": "Finished after the restart."}
    ]);
    let job_id = computer.create("unattended", false, steps.clone()).await;
    let running = computer
        .web
        .wait_for_job(&job_id, Duration::from_secs(60), |job| {
            has_line(job, "Starting.")
        })
        .await;
    let made = reports(&running, "session/new")[0]["sessionId"].clone();
    let first_agent = u32::try_from(reports(&running, "pid")[0].as_u64().unwrap()).unwrap();
    let first = computer.restart_after_kill().await;
    let job = computer
        .web
        .wait_for_job(&job_id, Duration::from_secs(90), |job| {
            job.attempt >= 2 && job.state.is_final()
        })
        .await;
    assert_eq!(
        (job.state, job.attempt),
        (JobState::Succeeded, 2),
        "{job:#?}\n--- first agent:\n{first}\n--- second agent:\n{}",
        computer.daemon.stderr()
    );
    assert!(
        !process_alive(first_agent),
        "the first run's agent lived on"
    );
    assert_loaded(&reports(&job, "load"), &made, &computer.folder());
    assert!(has_line(
        &job,
        "Continuing the agent's session from before the restart"
    ));
    let prompts = reports(&job, "prompt");
    let carried_on = prompts.last().unwrap()["text"].as_str().unwrap();
    assert_eq!(
        carried_on,
        format!(
            "Tether restarted on this computer while you were working (carry-on 1). Continue \
             the task where you left off; the original request was:\n{}",
            json!({"steps": steps})
        )
    );
    assert!(!output_lines(&job)
        .iter()
        .any(|line| line.contains(REPLAYED)));
    assert_eq!(
        job.outcome.as_ref().unwrap().summary,
        "Finished after the restart."
    );
}

/// An agent built on the official TypeScript SDK (`@agentclientprotocol/sdk`, installed
/// from its committed lock and copied into the job's folder, where the sandbox lets node
/// read it).
const TS_AGENT: &str = r#"
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const log = (step, value) => process.stderr.write(`ts-agent: ${step} ${JSON.stringify(value)}\n`);
let cwd = ".";
const app = acp
  .agent({ name: "ts-agent" })
  .onRequest(acp.methods.agent.initialize, ({ params }) => {
    log("initialize", params.clientCapabilities);
    return {
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: {},
      authMethods: [],
      agentInfo: { name: "ts-agent", version: "1.0.0" },
    };
  })
  .onRequest(acp.methods.agent.session.new, ({ params }) => {
    cwd = params.cwd;
    return { sessionId: "ts-session" };
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const sessionId = params.sessionId;
    const update = (update) => client.notify(acp.methods.client.session.update, { sessionId, update });
    const text = (text) => update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text } });
    await text("Hello from TypeScript.\n");
    await update({ sessionUpdate: "plan", entries: [{ content: "check the notes", priority: "high", status: "in_progress" }] });
    const read = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: `${cwd}/notes.txt`, line: 1, limit: 1 });
    log("read", read);
    await client.request(acp.methods.client.fs.writeTextFile, { sessionId, path: `${cwd}/ts.txt`, content: "from typescript\n" });
    const command = "echo ts-terminal > ts-terminal.txt; echo ts-printed";
    await update({ sessionUpdate: "tool_call", toolCallId: "ts-cmd", title: "Write with a command", kind: "execute", status: "pending", rawInput: { command } });
    const permission = await client.request(acp.methods.client.session.requestPermission, {
      sessionId,
      toolCall: { toolCallId: "ts-cmd" },
      options: [
        { optionId: "no", name: "Reject", kind: "reject_once" },
        { optionId: "ok", name: "Allow", kind: "allow_once" },
      ],
    });
    log("permission", permission.outcome);
    if (permission.outcome.outcome === "selected" && permission.outcome.optionId === "ok") {
      const terminal = await client.createTerminal({ sessionId, command, cwd });
      const exit = await terminal.waitForExit();
      const output = await terminal.currentOutput();
      await terminal.release();
      log("terminal", { exit, output });
    }
    await update({ sessionUpdate: "tool_call_update", toolCallId: "ts-cmd", status: "completed" });
    await text("Done in TypeScript.");
    return { stopReason: "end_turn" };
  });
const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
"#;

/// Puts the TypeScript SDK (from `tests/acp-sdk-agent`'s lock) and [`TS_AGENT`] into `dir`;
/// node, or `None` (after saying why) when node or the SDK is not available here.
async fn install_ts_agent(dir: &Path) -> Option<PathBuf> {
    let node = PathBuf::from("/usr/bin/node");
    if !node.exists() {
        external::unavailable("node is not installed at /usr/bin/node");
        return None;
    }
    let installed = npm::ACP_SDK_AGENT.installed().await?;
    std::fs::create_dir_all(dir).unwrap();
    // Copied, not linked: the sandbox lets node read the job's folder, not `target/`.
    let copied = std::process::Command::new("cp")
        .arg("-R")
        .arg(installed.join("node_modules"))
        .arg(installed.join("package.json"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        copied.status.success(),
        "{}",
        String::from_utf8_lossy(&copied.stderr)
    );
    std::fs::write(dir.join("agent.mjs"), TS_AGENT).unwrap();
    Some(node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_an_agent_on_the_official_typescript_sdk_works_too() {
    let computer = Computer::start().await;
    let folder = computer.folder();
    let agent_dir = folder.join(".ts-agent");
    let Some(node) = install_ts_agent(&agent_dir).await else {
        return;
    };
    let script = agent_dir.join("agent.mjs");
    agent_ok(
        computer.home.path(),
        &[
            "engine",
            "add",
            "ts",
            "--acp",
            "--",
            node.to_str().unwrap(),
            script.to_str().unwrap(),
        ],
    )
    .await;
    computer
        .web
        .wait_for_device(&computer.device_id, |device| {
            device
                .capabilities
                .as_ref()
                .is_some_and(|caps| caps.engines.iter().any(|engine| engine.name == "ts"))
        })
        .await;
    let body = json!({
        "deviceId": computer.device_id, "title": "typescript", "prompt": "do the usual",
        "folder": "work", "engine": "ts", "mode": "ask", "network": false, "timeoutMinutes": 5,
    });
    let res = computer.web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), reqwest::StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let (job, asked) = computer.run(job.id.as_str(), |_| Answer::Allow).await;
    let said = |step: &str| -> Vec<Value> {
        let prefix = format!("stderr: ts-agent: {step} ");
        output_lines(&job)
            .iter()
            .filter_map(|line| line.strip_prefix(&prefix))
            .map(|json| serde_json::from_str(json).unwrap())
            .collect()
    };
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        computer.daemon.stderr()
    );
    assert_eq!(job.outcome.as_ref().unwrap().summary, "Done in TypeScript.");
    assert_eq!(
        said("initialize"),
        [json!({
            "fs": {"readTextFile": true, "writeTextFile": true},
            "terminal": true,
            "auth": {"terminal": false}
        })]
    );
    assert_eq!(said("read"), [json!({"content": "hello notes\n"})]);
    assert_eq!(
        said("permission"),
        [json!({"outcome": "selected", "optionId": "ok"})]
    );
    let terminal = said("terminal");
    assert_eq!(terminal[0]["exit"], json!({"exitCode": 0}), "{terminal:?}");
    for expected in [
        "agent: ts-agent 1.0.0",
        "Hello from TypeScript.",
        "  [~] check the notes",
        "tool: Write with a command (execute) pending",
        "wrote ts.txt",
        "$ sh -c 'echo ts-terminal > ts-terminal.txt; echo ts-printed'",
        "term-1: ts-printed",
        "term-1: exit code 0",
        "tool: Write with a command done",
    ] {
        assert!(
            has_line(&job, expected),
            "{expected:?} not in {:#?}",
            output_lines(&job)
        );
    }
    // Ask mode: the write and the command asked, once each.
    let kinds: Vec<&str> = asked.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["write", "command"], "{asked:#?}");
    assert_eq!(
        std::fs::read_to_string(folder.join("ts.txt")).unwrap(),
        "from typescript\n"
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("ts-terminal.txt")).unwrap(),
        "ts-terminal\n"
    );
}

/// An engine job naming `engine` instead of `scripted`, unattended.
async fn create_for(computer: &Computer, engine: &str, steps: Value) -> String {
    let body = json!({
        "deviceId": computer.device_id, "title": format!("acp {engine}"),
        "prompt": json!({ "steps": steps }).to_string(),
        "folder": "work", "engine": engine, "mode": "unattended", "network": false,
        "timeoutMinutes": 5,
    });
    computer.create_from(&body).await
}

/// Signing in: an agent listing an `env_var` method whose variable its engine was given is
/// sent `authenticate` before `session/new`; without the variable, its job is blocked (not
/// failed) naming the agent's methods and what to run on the computer. `engine check` says
/// the same, keeps it, and the heartbeat publishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_an_agent_needing_a_sign_in_is_signed_in_from_its_environment_or_blocked() {
    let computer = Computer::start().await;
    let home = computer.home.path();
    let agent = scripted_agent();
    let agent = agent.to_str().unwrap();
    let auth = ["--auth", "SCRIPTED_ACCOUNT"];
    let signed = [
        "engine",
        "add",
        "signed",
        "--acp",
        "--env",
        "SCRIPTED_ACCOUNT=ann",
        "--",
        agent,
    ];
    agent_ok(home, &[&signed[..], &auth[..]].concat()).await;
    let unsigned = ["engine", "add", "unsigned", "--acp", "--", agent];
    agent_ok(home, &[&unsigned[..], &auth[..]].concat()).await;
    computer
        .web
        .wait_for_device(&computer.device_id, |device| {
            device
                .capabilities
                .as_ref()
                .is_some_and(|caps| caps.engines.iter().any(|engine| engine.name == "unsigned"))
        })
        .await;

    let job_id = create_for(&computer, "signed", json!([{"say": "Signed in and done."}])).await;
    let job = succeeded(&computer, &job_id).await;
    assert_eq!(
        reports(&job, "authenticate"),
        [json!({"methodId": "scripted-key", "hasKey": true})]
    );
    assert_eq!(job.outcome.unwrap().summary, "Signed in and done.");

    let job_id = create_for(&computer, "unsigned", json!([{"say": "Never said."}])).await;
    let (job, _) = computer.run(&job_id, |_| Answer::Deny).await;
    assert_eq!(job.state, JobState::Blocked, "{job:#?}");
    assert!(
        reports(&job, "authenticate").is_empty(),
        "no key, no authenticate"
    );
    let summary = job.outcome.unwrap().summary;
    assert!(
        summary.starts_with(
            "the agent needs a sign-in first; it offers: Use SCRIPTED_ACCOUNT (Reads \
             SCRIPTED_ACCOUNT), which needs SCRIPTED_ACCOUNT in the engine's environment; Log \
             in to the scripted agent (Run `scripted-acp-agent login` in the terminal)."
        ) && summary.ends_with(
            "sign the agent in on this computer as its documentation says, then run \
             `tether-agent engine check unsigned` and run the job again"
        ),
        "{summary}"
    );

    // `engine check` starts each as a run would and says whether a session starts.
    let said = agent_ok(home, &["engine", "check", "signed"]).await;
    assert!(
        said.starts_with(
            "signed: ok — scripted-acp-agent 1.0.0, ACP 1, no session loading, sign-in: Use \
             SCRIPTED_ACCOUNT (env_var), Log in to the scripted agent (agent)\n"
        ),
        "{said}"
    );
    let output = super::agent(home, &["engine", "check", "unsigned", "--json"]).await;
    assert_eq!(output.status.code(), Some(1));
    let check: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(check["ok"], false);
    assert_eq!(check["protocolVersion"], 1);
    assert_eq!(
        check["authMethods"],
        json!([
            {"id": "scripted-key", "name": "Use SCRIPTED_ACCOUNT", "kind": "env_var"},
            {"id": "scripted-login", "name": "Log in to the scripted agent", "kind": "agent"}
        ])
    );
    assert!(
        check["problem"]
            .as_str()
            .unwrap()
            .starts_with("the agent needs a sign-in first"),
        "{check}"
    );
    let kept = std::fs::read_to_string(home.join("engine-checks.json")).unwrap();
    assert!(
        kept.contains("\"signed\"") && kept.contains("\"unsigned\""),
        "{kept}"
    );
    let device = computer
        .web
        .wait_for_device(&computer.device_id, |device| {
            device.capabilities.as_ref().is_some_and(|caps| {
                caps.engines
                    .iter()
                    .filter(|engine| engine.check.is_some())
                    .count()
                    == 2
            })
        })
        .await;
    let engines = device.capabilities.unwrap().engines;
    let ok: Vec<(String, Option<bool>)> = engines
        .iter()
        .map(|engine| (engine.name.clone(), engine.check.as_ref().map(|c| c.ok)))
        .collect();
    assert_eq!(
        ok,
        [
            ("scripted".to_owned(), None),
            ("signed".to_owned(), Some(true)),
            ("unsigned".to_owned(), Some(false))
        ]
    );
}
