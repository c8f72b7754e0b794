//! Decisions end to end: a run's [`Gate`] asks the real server and waits; the owner answers
//! on the web (the answer reaches the gate through the real event stream) or on the computer
//! with the real `tether-agent decisions` command.
//!
//! The gate runs in this process, driven directly (engines that use it have their own
//! tests): the test plays the daemon's part around it (heartbeats with the run's lease,
//! `job.cancel` raising the run's stop, `decision.answered` routed to the hub), with the
//! agent's own event-stream client. Polling is slowed to a minute, so an answer that arrives
//! in seconds came by the frame.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_agent::local::journal::Journal;
use tether_agent::local::seal_key::SealKeyPair;
use tether_agent::local::state::DataDir;
use tether_agent::policy::gate::{Gate, Passage};
use tether_agent::policy::{zones, Action, RunPolicy, RunSettings};
use tether_agent::remote::client::{DeviceClient, ServerClient};
use tether_agent::remote::events::{self, EventSink, FileRequest};
use tether_agent::run::decisions::{Asker, DecisionHub, Timings};
use tether_agent::run::lease::{LeasePeriod, RunLease};
use tether_agent::run::{RunStop, StopReason};
use tether_protocol::capabilities::{
    Capabilities, Engine, EngineKind, SandboxReport, SandboxStrength,
};
use tether_protocol::decisions::{AnsweredBy, Decision, DecisionState};
use tether_protocol::devices::{HeartbeatParams, HeldLease};
use tether_protocol::jobs::{CompleteParams, Job, JobState, Outcome};
use tether_protocol::{DecisionId, JobId, PROTOCOL_VERSION};
use tokio::task::JoinHandle;

use crate::{agent, agent_json, agent_ok, pair, spawn_server, Server, Web};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_answer_reaches_the_waiting_gate_by_the_frame() {
    let harness = Harness::start().await;
    let run = harness.claim_run().await;
    let cargo_test = command(&["cargo", "test"]);

    // Allow once: the gate goes ahead, the job is back to running, and the same action asks
    // again.
    let waiting = run.check(cargo_test.clone());
    let decision = harness.wait_for_pending(&run.job_id).await;
    assert_eq!(decision.kind, "command");
    assert!(
        decision.question.starts_with("Run `cargo test` in "),
        "{}",
        decision.question
    );
    assert_eq!(decision.action["argv"], json!(["cargo", "test"]));
    assert_eq!(
        harness.web.job(run.job_id.as_str()).await.state,
        JobState::Waiting
    );
    harness
        .answer(&decision.id, "allow", "once", StatusCode::OK)
        .await;
    // The gate reads the server once a minute (see `claim_run`), after `wait_passage` gives
    // up: only the frame can bring the answer in time.
    let passage = wait_passage(waiting).await;
    assert_eq!(
        passage,
        Passage::Allowed {
            note: Some("allowed once on the web".into())
        }
    );
    let job = harness.web.job(run.job_id.as_str()).await;
    assert_eq!(job.state, JobState::Running, "{job:#?}");

    // Allow for this run: the next identical action goes ahead without a question.
    let waiting = run.check(cargo_test.clone());
    let decision = harness.wait_for_pending(&run.job_id).await;
    harness
        .answer(&decision.id, "allow", "session", StatusCode::OK)
        .await;
    assert_eq!(
        wait_passage(waiting).await,
        Passage::Allowed {
            note: Some("allowed for this run on the web".into())
        }
    );
    let passage = run.gate.check(cargo_test).await;
    assert!(
        matches!(passage, Passage::Allowed { note: Some(ref note) } if note.contains("allow for this run")),
        "{passage:?}"
    );
    let decisions = harness.web.job(run.job_id.as_str()).await.decisions;
    assert_eq!(decisions.len(), 2, "{decisions:#?}");
    // Nothing of that became local trust.
    assert!(harness.config()["trusted"]
        .as_array()
        .is_none_or(Vec::is_empty));
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_deny_refuses_and_counts_once() {
    let harness = Harness::start().await;
    let run = harness.claim_run().await;
    let waiting = run.check(command(&["make", "install"]));
    let decision = harness.wait_for_pending(&run.job_id).await;
    // A deny cannot be given for the whole run.
    harness
        .answer(
            &decision.id,
            "deny",
            "session",
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
    harness
        .answer(&decision.id, "deny", "once", StatusCode::OK)
        .await;
    let passage = wait_passage(waiting).await;
    assert!(
        matches!(&passage, Passage::Refused { reason } if reason.starts_with("the owner denied it on the web")),
        "{passage:?}"
    );
    // The first answer won.
    harness
        .answer(&decision.id, "allow", "once", StatusCode::CONFLICT)
        .await;
    // Asking again is a new question.
    let waiting = run.check(command(&["make", "install"]));
    let again = harness.wait_for_pending(&run.job_id).await;
    assert_ne!(again.id, decision.id);
    run.stop.raise(StopReason::Cancel);
    assert!(matches!(
        wait_passage(waiting).await,
        Passage::Refused { .. }
    ));
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_never_allows() {
    let harness = Harness::start().await;
    let run = harness
        .claim_run_with(Timings {
            expires: Duration::from_secs(3),
            poll: Duration::from_secs(60),
            local_poll: Duration::from_millis(250),
        })
        .await;
    let waiting = run.check(command(&["make", "deploy"]));
    let decision = harness.wait_for_pending(&run.job_id).await;
    let passage = wait_passage(waiting).await;
    assert!(
        matches!(&passage, Passage::Refused { reason } if reason.starts_with("nobody answered in time")),
        "{passage:?}"
    );
    let settled = harness.decision(&run.job_id, &decision.id).await;
    assert_eq!(settled.state, DecisionState::Expired, "{settled:#?}");
    assert_eq!(settled.answer, None);
    // Too late: an answer after the expiry changes nothing.
    harness
        .answer(&decision.id, "allow", "once", StatusCode::CONFLICT)
        .await;
    assert!(
        harness.local_files().is_empty(),
        "{:?}",
        harness.local_files()
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_on_the_computer_wins_through_the_real_command() {
    let harness = Harness::start().await;
    let run = harness.claim_run().await;
    let waiting = run.check(command(&["cargo", "publish"]));
    let decision = harness.wait_for_pending(&run.job_id).await;

    let listed = agent_ok(harness.home(), &["decisions", "list"]).await;
    assert!(listed.contains(decision.id.as_str()), "{listed}");
    assert!(listed.contains("Run `cargo publish`"), "{listed}");
    let listed: Value =
        serde_json::from_str(&agent_ok(harness.home(), &["decisions", "list", "--json"]).await)
            .unwrap();
    assert_eq!(listed[0]["id"], decision.id.as_str());
    assert_eq!(listed[0]["actionHash"].as_str().map(str::len), Some(64));

    // An unknown id, and deny for the run, are refused by the command.
    let unknown = agent(harness.home(), &["decisions", "allow", "nope"]).await;
    assert!(!unknown.status.success());
    let allowed = agent_ok(
        harness.home(),
        &["decisions", "allow", decision.id.as_str(), "--for-run"],
    )
    .await;
    assert!(
        allowed.starts_with("Allowed for the rest of the run: Run `cargo publish`"),
        "{allowed}"
    );
    assert_eq!(
        wait_passage(waiting).await,
        Passage::Allowed {
            note: Some("allowed for this run on this computer".into())
        }
    );
    let settled = harness.decision(&run.job_id, &decision.id).await;
    assert_eq!(
        (
            settled.state,
            settled.answered_by,
            settled.scope.map(|scope| scope.as_str())
        ),
        (
            DecisionState::Answered,
            Some(AnsweredBy::Computer),
            Some("session")
        ),
        "{settled:#?}"
    );
    assert!(
        harness.local_files().is_empty(),
        "{:?}",
        harness.local_files()
    );
    let listed = agent_ok(harness.home(), &["decisions", "list"]).await;
    assert!(listed.starts_with("No decisions are waiting"), "{listed}");
    // The run rule holds: no second question.
    assert!(matches!(
        run.gate.check(command(&["cargo", "publish"])).await,
        Passage::Allowed { .. }
    ));
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_approvals_off_web_answers_never_count() {
    let harness = Harness::start().await;
    let run = harness.claim_run().await;
    let said = agent_ok(harness.home(), &["approvals", "off"]).await;
    assert!(said.starts_with("Approvals off"), "{said}");
    assert_eq!(harness.config()["acceptWebApprovals"], false);

    // The server has not heard yet (the last report still says on), so it takes a web
    // answer; the gate ignores it and keeps waiting for the computer.
    let waiting = run.check(command(&["terraform", "apply"]));
    let decision = harness.wait_for_pending(&run.job_id).await;
    harness
        .answer(&decision.id, "allow", "once", StatusCode::OK)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiting.is_finished(),
        "a web answer counted with approvals off"
    );
    // Only the computer can answer now; the web's allow was never taken.
    assert!(harness
        .local_files()
        .iter()
        .any(|name| name.contains(decision.id.as_str())));
    run.stop.raise(StopReason::Cancel);
    let passage = wait_passage(waiting).await;
    assert!(matches!(passage, Passage::Refused { .. }), "{passage:?}");
    harness.finish(&run).await;

    // Once the heartbeat reports it, the server refuses web answers itself (409), and the
    // question is still answered on the computer.
    harness.accept_web.store(false, Ordering::SeqCst);
    harness.heartbeat_now().await;
    let run = harness.claim_run().await;
    let waiting = run.check(command(&["terraform", "destroy"]));
    let decision = harness.wait_for_pending(&run.job_id).await;
    harness
        .answer(&decision.id, "allow", "once", StatusCode::CONFLICT)
        .await;
    agent_ok(harness.home(), &["decisions", "deny", decision.id.as_str()]).await;
    let passage = wait_passage(waiting).await;
    assert!(
        matches!(&passage, Passage::Refused { reason } if reason.starts_with("the owner denied it on this computer")),
        "{passage:?}"
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_while_waiting_withdraws_the_question() {
    let harness = Harness::start().await;
    let run = harness.claim_run().await;
    let waiting = run.check(command(&["rm", "-rf", "build"]));
    let decision = harness.wait_for_pending(&run.job_id).await;
    let res = harness
        .web
        .post(&format!("/api/jobs/{}/cancel", run.job_id), &json!({}))
        .await;
    assert!(res.status().is_success(), "{}", res.status());
    let passage = wait_passage(waiting).await;
    assert!(
        matches!(&passage, Passage::Refused { reason } if reason.contains("cancelled")),
        "{passage:?}"
    );
    let settled = harness.decision(&run.job_id, &decision.id).await;
    assert_eq!(settled.state, DecisionState::Withdrawn, "{settled:#?}");
    harness
        .answer(&decision.id, "allow", "once", StatusCode::CONFLICT)
        .await;
    assert!(
        harness.local_files().is_empty(),
        "{:?}",
        harness.local_files()
    );
    harness.stop().await;
}

/// `explain`, `trust` and `approvals` as the owner types them (no server needed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_trust_and_approvals_on_the_command_line() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let work_path = work.path().to_str().unwrap();
    let asked = explain(
        home.path(),
        work_path,
        &["--run", "cargo", "test", "--release"],
    )
    .await;
    assert_eq!(
        (asked["verdict"].as_str(), asked["rule"].as_str()),
        (Some("ask"), Some("ask-mode-command")),
        "{asked}"
    );
    assert_eq!(
        asked["action"]["argv"],
        json!(["cargo", "test", "--release"])
    );
    assert_eq!(asked["recommended"], "allow");
    let trusted = explain(
        home.path(),
        work_path,
        &["--trusted", "--run", "cargo", "test"],
    )
    .await;
    assert_eq!(trusted["rule"], "trusted-folder", "{trusted}");
    let reading = explain(home.path(), work_path, &["--run", "git", "status"]).await;
    assert_eq!(
        (reading["verdict"].as_str(), reading["rule"].as_str()),
        (Some("allow"), Some("read-only-command"))
    );
    let agent_data = home.path().join("seal-key.json");
    let keys = explain(
        home.path(),
        work_path,
        &["--read", agent_data.to_str().unwrap()],
    )
    .await;
    assert_eq!(
        (keys["verdict"].as_str(), keys["rule"].as_str()),
        (Some("refuse"), Some("guard")),
        "{keys}"
    );
    let system = explain(
        home.path(),
        work_path,
        &["--mode", "review", "--write", "/etc/hosts"],
    )
    .await;
    assert_eq!(system["rule"], "system-folder", "{system}");
    let text = agent_ok(
        home.path(),
        &["explain", "--folder", work_path, "--run", "sudo", "ls"],
    )
    .await;
    assert!(
        text.starts_with("REFUSE\n  rule:     hard-floor:privilege\n"),
        "{text}"
    );

    // Trust, refused where it would be too broad, then taken into account.
    let root = agent(home.path(), &["trust", "add", "/"]).await;
    assert!(!root.status.success());
    let own_data = agent(
        home.path(),
        &["trust", "add", home.path().to_str().unwrap()],
    )
    .await;
    assert!(
        !own_data.status.success(),
        "the agent's data dir was trusted"
    );
    agent_ok(home.path(), &["trust", "add", work_path]).await;
    let listed = agent_ok(home.path(), &["trust", "list"]).await;
    assert!(
        listed.contains(&work.path().canonicalize().unwrap().display().to_string()),
        "{listed}"
    );
    let quiet = explain(home.path(), work_path, &["--run", "cargo", "test"]).await;
    assert_eq!(quiet["rule"], "trusted-folder", "{quiet}");
    agent_ok(home.path(), &["trust", "remove", work_path]).await;
    let asked = explain(home.path(), work_path, &["--run", "cargo", "test"]).await;
    assert_eq!(asked["rule"], "ask-mode-command", "{asked}");

    let shown = agent_ok(home.path(), &["approvals"]).await;
    assert!(shown.starts_with("Approvals on"), "{shown}");
    agent_ok(home.path(), &["approvals", "off"]).await;
    let shown = agent_ok(home.path(), &["approvals"]).await;
    assert!(shown.starts_with("Approvals off"), "{shown}");
    agent_ok(home.path(), &["approvals", "on"]).await;
}

/// `tether-agent explain --folder FOLDER --json EXTRA…`.
async fn explain(home: &Path, folder: &str, extra: &[&str]) -> Value {
    let mut args = vec!["explain", "--folder", folder, "--json"];
    args.extend_from_slice(extra);
    agent_json(home, &args).await
}

fn command(argv: &[&str]) -> Action {
    Action::Command {
        argv: argv.iter().map(|word| (*word).to_owned()).collect(),
        cwd: PathBuf::from("."),
    }
}

async fn wait_passage(waiting: JoinHandle<Passage>) -> Passage {
    tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the gate never decided")
        .unwrap()
}

/// A paired computer sharing a folder, the server, the web user, and the daemon's part.
struct Harness {
    _server: Server,
    web: Web,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    device_id: String,
    data_dir: DataDir,
    client: DeviceClient,
    hub: Arc<DecisionHub>,
    journal: Arc<Journal>,
    /// What the heartbeat reports as `acceptWebApprovals`.
    accept_web: Arc<AtomicBool>,
    runs: Runs,
    tasks: Vec<JoinHandle<()>>,
}

/// A run's lease and stop signal, as the daemon keeps them.
type HeldRun = (Arc<RunLease>, RunStop);
/// The runs in progress, by job.
type Runs = Arc<Mutex<HashMap<JobId, HeldRun>>>;

/// One claimed job with its gate (ask mode, in the shared folder).
struct Run {
    job_id: JobId,
    stop: RunStop,
    gate: Arc<Gate>,
}

impl Run {
    fn check(&self, action: Action) -> JoinHandle<Passage> {
        let gate = self.gate.clone();
        tokio::spawn(async move { gate.check(action).await })
    }
}

/// The daemon's side of the event stream: answers to the hub, cancels to the runs.
struct Sink {
    hub: Arc<DecisionHub>,
    runs: Runs,
}

impl EventSink for Sink {
    fn wake(&self) {}
    fn cancel(&self, job_id: &JobId) {
        if let Some((_, stop)) = self.runs.lock().unwrap().get(job_id) {
            stop.raise(StopReason::Cancel);
        }
    }
    fn revoked(&self) {}
    fn file_request(&self, _request: FileRequest) {}
    fn decision_answered(&self, decision_id: &DecisionId) {
        self.hub.answered(decision_id);
    }
}

impl Harness {
    async fn start() -> Harness {
        let server = spawn_server(None).await;
        let web = Web::sign_up(&server.base).await;
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let device_id = pair(&server.base, &web, home.path()).await;
        agent_ok(
            home.path(),
            &["folders", "share", "work", work.path().to_str().unwrap()],
        )
        .await;
        let data_dir = DataDir::resolve(Some(home.path().to_path_buf())).unwrap();
        let token = data_dir.load_token().unwrap().unwrap();
        let client = DeviceClient::new(ServerClient::new(&server.base).unwrap(), token);
        let hub = DecisionHub::new(Some(data_dir.clone()));
        let runs = Arc::new(Mutex::new(HashMap::new()));
        let mut harness = Harness {
            _server: server,
            web,
            journal: Arc::new(Journal::new(&data_dir)),
            home,
            work,
            device_id,
            data_dir,
            client,
            hub,
            accept_web: Arc::new(AtomicBool::new(true)),
            runs,
            tasks: Vec::new(),
        };
        let sink = Arc::new(Sink {
            hub: harness.hub.clone(),
            runs: harness.runs.clone(),
        });
        // Stopped by aborting the task.
        let (_, never) = tokio::sync::watch::channel(false);
        harness.tasks.push(tokio::spawn(events::run(
            harness.client.clone(),
            sink,
            never,
        )));
        harness.heartbeat_now().await;
        let heartbeat = harness.heartbeat_task();
        harness.tasks.push(heartbeat);
        harness
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    fn config(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.home().join("config.json")).unwrap()).unwrap()
    }

    /// What the daemon reports: the shared folder, one engine, the approvals setting.
    fn heartbeat_params(&self) -> HeartbeatParams {
        heartbeat_params(
            &self.data_dir,
            self.accept_web.load(Ordering::SeqCst),
            &self.runs.lock().unwrap(),
        )
    }

    async fn heartbeat_now(&self) {
        self.client
            .heartbeat(&self.heartbeat_params())
            .await
            .unwrap();
    }

    /// Heartbeats every second with the runs' leases, and raises a run's stop when the
    /// server says its cancel was requested, as the daemon does.
    fn heartbeat_task(&self) -> JoinHandle<()> {
        let (client, data_dir, accept_web, runs) = (
            self.client.clone(),
            self.data_dir.clone(),
            self.accept_web.clone(),
            self.runs.clone(),
        );
        tokio::spawn(async move {
            loop {
                let params = heartbeat_params(
                    &data_dir,
                    accept_web.load(Ordering::SeqCst),
                    &runs.lock().unwrap(),
                );
                if let Ok(answer) = client.heartbeat(&params).await {
                    for lease in answer.leases.iter().filter(|lease| lease.cancel_requested) {
                        if let Some((_, stop)) = runs.lock().unwrap().get(&lease.job_id) {
                            stop.raise(StopReason::Cancel);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }

    async fn claim_run(&self) -> Run {
        self.claim_run_with(Timings {
            expires: Duration::from_secs(60),
            // Slower than any test waits: answers arrive by the frame or not at all.
            poll: Duration::from_secs(60),
            local_poll: Duration::from_millis(250),
        })
        .await
    }

    /// Assigns an ask-mode job to the computer, claims it and builds its gate.
    async fn claim_run_with(&self, timings: Timings) -> Run {
        let body = json!({
            "deviceId": self.device_id, "title": "decisions", "prompt": "work",
            "folder": "work", "engine": "agent", "mode": "ask", "network": false,
            "timeoutMinutes": 5,
        });
        let res = self.web.post("/api/jobs", &body).await;
        let status = res.status();
        let text = res.text().await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{text}");
        let job: Job = serde_json::from_str(&text).unwrap();
        let claimed = self
            .client
            .claim()
            .await
            .unwrap()
            .expect("nothing to claim");
        assert_eq!(claimed.id, job.id);
        let lease = RunLease::new(
            self.client.clone(),
            self.journal.clone(),
            Arc::new(LeasePeriod::new()),
            &claimed,
        );
        let stop = RunStop::new();
        self.runs
            .lock()
            .unwrap()
            .insert(claimed.id.clone(), (lease.clone(), stop.clone()));
        let policy = RunPolicy::new(RunSettings {
            mode: claimed.spec.mode,
            folder: self.work.path().to_path_buf(),
            trusted: Vec::new(),
            network: claimed.spec.network,
            sandbox: SandboxStrength::Strong,
            guard: tether_agent::policy::guard::Guard::for_user(self.home()),
            temporary: zones::temporary_folders(),
            delivery: None,
        });
        let asker = Asker {
            client: self.client.clone(),
            job_id: claimed.id.clone(),
            lease,
            stop: stop.clone(),
            hub: self.hub.clone(),
            accept_web_approvals: true,
            timings,
            flusher: None,
        };
        Run {
            job_id: claimed.id,
            stop,
            gate: Arc::new(Gate::new(policy, Some(Box::new(asker)))),
        }
    }

    /// The job's one pending decision, once the gate asked.
    async fn wait_for_pending(&self, job_id: &JobId) -> Decision {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let job = self.web.job(job_id.as_str()).await;
            if let Some(decision) = job
                .decisions
                .iter()
                .find(|decision| decision.state == DecisionState::Pending)
            {
                // The computer offers it too.
                let offered = self.local_files();
                if offered
                    .iter()
                    .any(|name| name.contains(decision.id.as_str()))
                {
                    return decision.clone();
                }
            }
            assert!(Instant::now() < deadline, "no question was asked: {job:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ends a run on the server (cancelled), freeing the account's run slot.
    async fn finish(&self, run: &Run) {
        let lease = self.runs.lock().unwrap().remove(&run.job_id).unwrap().0;
        let params = CompleteParams {
            outcome: Outcome::Cancelled,
            summary: "cancelled".into(),
            exit_code: None,
            report: None,
            observed: None,
            changes: None,
            delivery: None,
        };
        self.client
            .complete(&run.job_id, &lease.token(), &params)
            .await
            .unwrap();
    }

    async fn decision(&self, job_id: &JobId, decision_id: &DecisionId) -> Decision {
        let job = self.web.job(job_id.as_str()).await;
        job.decisions
            .into_iter()
            .find(|decision| &decision.id == decision_id)
            .unwrap_or_else(|| panic!("no decision {decision_id}"))
    }

    async fn answer(
        &self,
        decision_id: &DecisionId,
        answer: &str,
        scope: &str,
        expected: StatusCode,
    ) {
        let res = self
            .web
            .post(
                &format!("/api/decisions/{decision_id}/answer"),
                &json!({ "answer": answer, "scope": scope }),
            )
            .await;
        let status = res.status();
        let text = res.text().await.unwrap();
        assert_eq!(status, expected, "{answer} {scope}: {text}");
    }

    /// The decision files in the data dir (pending and answers).
    fn local_files(&self) -> Vec<String> {
        ["decisions/pending", "decisions/answers"]
            .iter()
            .flat_map(|dir| self.data_dir.list_dir(dir).unwrap())
            .collect()
    }

    async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn heartbeat_params(
    data_dir: &DataDir,
    accept_web_approvals: bool,
    runs: &HashMap<JobId, HeldRun>,
) -> HeartbeatParams {
    let config = data_dir.load_config().unwrap().unwrap();
    let seal_key = SealKeyPair::load(data_dir).unwrap().unwrap();
    HeartbeatParams {
        capabilities: Capabilities {
            protocol: PROTOCOL_VERSION,
            agent_version: tether_agent::AGENT_VERSION.to_owned(),
            install_id: config.install_id,
            engines: vec![Engine {
                name: "agent".into(),
                kind: EngineKind::Acp,
                check: None,
            }],
            folders: vec!["work".into()],
            sandbox: SandboxReport {
                backend: "bwrap".into(),
                strength: SandboxStrength::Strong,
                guarantees: Default::default(),
                reasons: Vec::new(),
            },
            seal_key: seal_key.public().clone(),
            accept_web_approvals,
            git: None,
            evidence: None,
            console: None,
        },
        running: runs
            .iter()
            .map(|(job_id, (lease, _))| HeldLease {
                job_id: job_id.clone(),
                lease_token: lease.token(),
            })
            .collect(),
    }
}
