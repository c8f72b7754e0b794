//! Decisions: the device asks, reads and closes; the owner lists, answers and follows them
//! live; runs ending settle them; the "Needs me" page.

use std::time::Duration;

use reqwest::redirect::Policy;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tether_protocol::decisions::{Decision, DecisionState, DeviceDecision};
use tether_protocol::frames::ServerFrame;
use tether_protocol::jobs::JobState;
use tether_protocol::DecisionId;
use tether_server::jobs::decisions;
use tether_server::store::ledger;
use tether_server::sweeper;

use crate::both_backends;
use crate::helpers::{
    assert_error, next_frame, query_i64, spawn_app, spawn_app_with, two_replicas, DeviceClient,
    SseStream, TestApp, WebClient,
};

const SOON: Duration = Duration::from_secs(2);
const HASH: &str = "9f86d081884c7d659a2feb8e8bfa6ac5c9f4b8b2c4c53e1f1e0c6e8d2b1a3f40";

/// A claimed run of `device`: (job id, lease token).
async fn running(ann: &WebClient, device: &DeviceClient) -> (String, String) {
    let job = ann.create_job(&device.device_id).await;
    let claimed = device.claim_job().await;
    assert_eq!(claimed.id, job.id);
    (job.id.to_string(), claimed.lease_token.expose().to_owned())
}

fn question(kind: &str, action: Value, expires_in_secs: i64) -> Value {
    json!({
        "kind": kind, "question": "Run the test suite?", "action": action,
        "actionHash": HASH, "expiresInSecs": expires_in_secs,
    })
}

fn command(argv: &[&str]) -> Value {
    json!({ "command": argv, "folder": "work" })
}

fn device_request(
    device: &DeviceClient,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    device
        .http
        .request(method, format!("{}{path}", device.base))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
}

async fn ask(device: &DeviceClient, job_id: &str, lease: &str, body: &Value) -> Response {
    device_request(
        device,
        reqwest::Method::POST,
        &format!("/api/devices/self/jobs/{job_id}/ask"),
    )
    .header("x-tether-lease", lease)
    .json(body)
    .send()
    .await
    .unwrap()
}

/// Asks and expects 201; the decision's id.
async fn asked(device: &DeviceClient, job_id: &str, lease: &str, body: &Value) -> String {
    let res = ask(device, job_id, lease, body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let answer: Value = res.json().await.unwrap();
    answer["decisionId"].as_str().unwrap().to_owned()
}

async fn read(device: &DeviceClient, decision_id: &str) -> Response {
    device_request(
        device,
        reqwest::Method::GET,
        &format!("/api/devices/self/decisions/{decision_id}"),
    )
    .send()
    .await
    .unwrap()
}

async fn read_ok(device: &DeviceClient, decision_id: &str) -> DeviceDecision {
    let res = read(device, decision_id).await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

async fn close(device: &DeviceClient, decision_id: &str, body: &Value) -> Response {
    device_request(
        device,
        reqwest::Method::POST,
        &format!("/api/devices/self/decisions/{decision_id}/close"),
    )
    .json(body)
    .send()
    .await
    .unwrap()
}

async fn answer(web: &WebClient, decision_id: &str, answer: &str, scope: &str) -> Response {
    web.post(
        &format!("/api/decisions/{decision_id}/answer"),
        &json!({ "answer": answer, "scope": scope }),
    )
    .await
}

async fn list(web: &WebClient, query: &str) -> Vec<Decision> {
    let res = web.get(&format!("/api/decisions{query}")).await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

/// Another client of the same signed-in person.
fn same_person(web: &WebClient) -> WebClient {
    WebClient {
        base: web.base.clone(),
        http: web.http.clone(),
        csrf: web.csrf.clone(),
    }
}

async fn ledger_kinds(app: &TestApp, web: &WebClient) -> Vec<ledger::LedgerEntry> {
    let account_id = web.me().await.account.id;
    ledger::list(&app.store, &account_id).await.unwrap()
}

/// An open `GET /api/decisions/events` stream.
struct Sse(SseStream);

impl Sse {
    async fn open(web: &WebClient) -> Sse {
        Sse(SseStream::new(web.get("/api/decisions/events").await))
    }

    /// The data of the next event within `within`, skipping comments; `None` when none came.
    async fn next(&mut self, within: Duration) -> Option<Value> {
        let event = self.0.next(within).await.ok()??;
        assert_eq!(event.name, "decisions", "{event:?}");
        Some(event.data)
    }
}

async fn html(web: &WebClient, path: &str) -> (u16, String) {
    let res = web.get(path).await;
    let status = res.status().as_u16();
    (status, res.text().await.unwrap())
}

both_backends! {
    async fn asking_puts_the_job_waiting_and_checks_every_field(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;

        let good = question("command", command(&["cargo", "test"]), 600);
        let decision_id = asked(&device, &job_id, &lease, &good).await;
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Waiting);
        assert_eq!(job.decisions.len(), 1);
        assert_eq!(job.decisions[0].id.as_str(), decision_id);
        assert_eq!(job.decisions[0].state, DecisionState::Pending);
        assert!(job.events.iter().any(|e| e.kind == "system" && e.text.contains("Waiting for an answer")));
        let entries = ledger_kinds(&app, &ann).await;
        let entry = entries.iter().find(|e| e.kind == "decision.asked").unwrap();
        assert_eq!(entry.subject, decision_id);
        assert!(!entry.detail_json.contains("cargo") && !entry.detail_json.contains("Run the test"));

        let bad = [
            ("kind", question("sudo", command(&["ls"]), 60)),
            ("kind", question("", command(&["ls"]), 60)),
            ("question", json!({ "kind": "command", "question": "  ", "action": {}, "actionHash": HASH, "expiresInSecs": 60 })),
            ("question", json!({ "kind": "command", "question": "x".repeat(501), "action": {}, "actionHash": HASH, "expiresInSecs": 60 })),
            ("action", question("command", json!(["cargo", "test"]), 60)),
            ("action", question("command", json!("cargo test"), 60)),
            ("action", question("command", json!({ "command": "x".repeat(17 * 1024) }), 60)),
            ("actionHash", json!({ "kind": "command", "question": "q", "action": {}, "actionHash": HASH.to_uppercase(), "expiresInSecs": 60 })),
            ("actionHash", json!({ "kind": "command", "question": "q", "action": {}, "actionHash": "abc", "expiresInSecs": 60 })),
            ("expiresInSecs", question("command", json!({}), 0)),
            ("expiresInSecs", question("command", json!({}), 86_401)),
        ];
        for (field, body) in bad {
            let message = assert_error(ask(&device, &job_id, &lease, &body).await, 422, "invalid_field").await;
            assert!(message.starts_with(field), "{field}: {message}");
        }
        // A question of exactly 500 characters and a day's wait are fine.
        let longest = json!({ "kind": "write", "question": "é".repeat(500), "action": { "file": "a.txt" },
                              "actionHash": HASH, "expiresInSecs": 86_400 });
        asked(&device, &job_id, &lease, &longest).await;

        // The lease fences asking like any write about the run.
        assert_error(ask(&device, &job_id, "wrong-lease", &good).await, 409, "stale_lease").await;
        let res = device_request(&device, reqwest::Method::POST, &format!("/api/devices/self/jobs/{job_id}/ask"))
            .json(&good).send().await.unwrap();
        assert_error(res, 400, "invalid_request").await;
        // Another device of the same account cannot ask about this job.
        let other = app.device(&ann, "install-2").await;
        assert_error(ask(&other, &job_id, &lease, &good).await, 404, "not_found").await;
        assert_error(ask(&device, "0192f0c1a2b37c3d8e9f", &lease, &good).await, 404, "not_found").await;
        assert_eq!(ann.job(&job_id).await.decisions.len(), 2);
    }

    async fn an_expired_lease_cannot_ask(backend) {
        let app = spawn_app_with(backend, |config| config.lease_secs = 1).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        app.advance(Duration::from_millis(1200));
        let body = question("command", command(&["ls"]), 60);
        assert_error(ask(&device, &job_id, &lease, &body).await, 409, "stale_lease").await;
        assert!(ann.job(&job_id).await.decisions.is_empty());
    }

    async fn a_device_reads_only_its_own_decisions(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let eve = app.user("eve@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let sibling = app.device(&ann, "install-2").await;
        let stranger = app.device(&eve, "install-3").await;
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;

        let decision = read_ok(&device, &decision_id).await;
        assert_eq!(decision.id.as_str(), decision_id);
        assert_eq!(decision.state, DecisionState::Pending);
        assert_eq!(decision.answer, None);
        assert_eq!(decision.scope, None);
        assert_eq!(decision.action_hash, HASH);
        assert_error(read(&sibling, &decision_id).await, 404, "not_found").await;
        assert_error(read(&stranger, &decision_id).await, 404, "not_found").await;
        assert_error(read(&device, "0192f0c1a2b37c3d8e9f").await, 404, "not_found").await;
        assert_error(read(&device, "..%2Fetc").await, 404, "not_found").await;
        // Closing another device's decision is 404 too, and changes nothing.
        assert_error(close(&sibling, &decision_id, &json!({ "reason": "withdrawn" })).await, 404, "not_found").await;
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Pending);
    }

    async fn the_web_sees_and_answers_only_its_own_decisions(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let eve = app.user("eve@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["cargo", "test"]), 600)).await;

        let pending = list(&ann, "?state=pending").await;
        assert_eq!(pending.len(), 1);
        let decision = &pending[0];
        assert_eq!(decision.id.as_str(), decision_id);
        assert_eq!(decision.job_id.as_str(), job_id);
        assert_eq!(decision.device_id.as_str(), device.device_id);
        assert_eq!(decision.kind, "command");
        assert_eq!(decision.question, "Run the test suite?");
        assert_eq!(decision.action, command(&["cargo", "test"]));
        assert_eq!(decision.job_title, "Run the tests");
        assert_eq!(decision.device_name, "laptop");
        assert!(decision.web_answers);
        assert_eq!(decision.answered_by, None);
        assert!(decision.expires_at > app.now() + chrono::Duration::seconds(590));
        assert_eq!(list(&ann, "").await.len(), 1);
        assert!(list(&ann, "?state=answered").await.is_empty());
        assert_error(ann.get("/api/decisions?state=maybe").await, 422, "invalid_field").await;

        // Another account sees nothing and cannot answer or read it.
        assert!(list(&eve, "").await.is_empty());
        assert!(list(&eve, "?state=pending").await.is_empty());
        assert_error(answer(&eve, &decision_id, "allow", "once").await, 404, "not_found").await;
        assert_error(answer(&ann, "0192f0c1a2b37c3d8e9f", "allow", "once").await, 404, "not_found").await;
        let (status, _) = html(&eve, &format!("/jobs/{job_id}")).await;
        assert_eq!(status, 404);
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Pending);
        // Signed out, the list is a 401.
        let res = reqwest::get(format!("{}/api/decisions", app.base)).await.unwrap();
        assert_error(res, 401, "unauthorized").await;
    }

    async fn answers_allow_once_or_for_the_run_and_the_first_one_wins(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let once = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        let session = asked(&device, &job_id, &lease, &question("network", json!({ "host": "crates.io" }), 600)).await;
        let denied = asked(&device, &job_id, &lease, &question("write", json!({ "file": "a.txt" }), 600)).await;

        let res = answer(&ann, &once, "allow", "once").await;
        assert_eq!(res.status(), StatusCode::OK);
        let decision: Decision = res.json().await.unwrap();
        assert_eq!(decision.state, DecisionState::Answered);
        assert_eq!(decision.answer, Some(tether_protocol::decisions::Answer::Allow));
        assert_eq!(decision.scope, Some(tether_protocol::decisions::Scope::Once));
        assert_eq!(decision.answered_by, Some(tether_protocol::decisions::AnsweredBy::Web));
        assert!(decision.answered_at.is_some());
        let seen = read_ok(&device, &once).await;
        assert_eq!((seen.state, seen.answer, seen.scope), (decision.state, decision.answer, decision.scope));
        // Two more are pending: still waiting.
        assert_eq!(ann.job(&job_id).await.state, JobState::Waiting);

        // A second answer is refused, whatever it says.
        assert_error(answer(&ann, &once, "deny", "once").await, 409, "already_answered").await;
        assert_error(answer(&ann, &once, "allow", "once").await, 409, "already_answered").await;
        assert_eq!(read_ok(&device, &once).await.answer, Some(tether_protocol::decisions::Answer::Allow));

        // Deny answers once: deny for the session is refused and changes nothing.
        let message = assert_error(answer(&ann, &denied, "deny", "session").await, 422, "invalid_field").await;
        assert!(message.starts_with("scope"), "{message}");
        assert_eq!(read_ok(&device, &denied).await.state, DecisionState::Pending);
        let res = answer(&ann, &denied, "deny", "once").await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(read_ok(&device, &denied).await.answer, Some(tether_protocol::decisions::Answer::Deny));

        let res = answer(&ann, &session, "allow", "session").await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(read_ok(&device, &session).await.scope, Some(tether_protocol::decisions::Scope::Session));
        // Nothing is pending any more: the run goes on.
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Running);
        assert!(job.decisions.iter().all(|d| d.state == DecisionState::Answered));
        assert!(job.events.iter().any(|e| e.text.contains("Answered on the web: allow session")));

        let entries = ledger_kinds(&app, &ann).await;
        let answered: Vec<_> = entries.iter().filter(|e| e.kind == "decision.answered").collect();
        assert_eq!(answered.len(), 3);
        assert!(answered.iter().all(|e| !e.detail_json.contains("crates.io") && !e.detail_json.contains("a.txt")));
        assert!(answered.iter().any(|e| e.subject == once && e.detail_json.contains(r#""by":"web""#)));
        assert!(list(&ann, "?state=pending").await.is_empty());
        assert_eq!(list(&ann, "?state=answered").await.len(), 3);
    }

    async fn racing_answers_give_exactly_one_winner(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["make"]), 600)).await;

        let racers: Vec<_> = (0..8)
            .map(|n| {
                let web = same_person(&ann);
                let decision_id = decision_id.clone();
                let (verdict, scope) = if n % 2 == 0 { ("allow", "session") } else { ("deny", "once") };
                tokio::spawn(async move { answer(&web, &decision_id, verdict, scope).await.status().as_u16() })
            })
            .collect();
        let mut statuses = Vec::new();
        for racer in racers {
            statuses.push(racer.await.unwrap());
        }
        statuses.sort_unstable();
        assert_eq!(statuses, vec![200, 409, 409, 409, 409, 409, 409, 409]);
        let entries = ledger_kinds(&app, &ann).await;
        assert_eq!(entries.iter().filter(|e| e.kind == "decision.answered").count(), 1);
        assert_eq!(ann.job(&job_id).await.state, JobState::Running);
    }

    async fn an_expired_decision_cannot_be_answered(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 1)).await;
        app.advance(Duration::from_millis(1200));

        assert_error(answer(&ann, &decision_id, "allow", "once").await, 409, "already_answered").await;
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Expired);
        assert!(list(&ann, "?state=pending").await.is_empty());
        let expired = list(&ann, "?state=expired").await;
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].answer, None);
        // An answer from the computer after the expiry is too late as well.
        let late = json!({ "reason": "answered_locally", "answer": "allow", "scope": "once" });
        assert_error(close(&device, &decision_id, &late).await, 409, "already_answered").await;

        // The sweeper writes it down and the run goes on.
        let settled = decisions::expire_overdue(&app.store, app.now().timestamp_millis()).await.unwrap();
        assert_eq!(settled.len(), 1);
        assert_eq!(settled[0].decision_id.as_str(), decision_id);
        assert!(decisions::expire_overdue(&app.store, app.now().timestamp_millis()).await.unwrap().is_empty());
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Running);
        assert_eq!(job.decisions[0].state, DecisionState::Expired);
        assert_error(close(&device, &decision_id, &json!({ "reason": "expired" })).await, 409, "already_answered").await;
    }

    async fn the_device_closes_what_was_answered_on_the_computer(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;

        for (body, field) in [
            (json!({ "reason": "answered_locally" }), "answer"),
            (json!({ "reason": "answered_locally", "answer": "deny", "scope": "session" }), "scope"),
            (json!({ "reason": "withdrawn", "answer": "allow" }), "answer"),
        ] {
            let message = assert_error(close(&device, &decision_id, &body).await, 422, "invalid_field").await;
            assert!(message.starts_with(field), "{message}");
        }
        assert_error(close(&device, &decision_id, &json!({ "reason": "later" })).await, 400, "invalid_request").await;
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Pending);

        let res = close(&device, &decision_id, &json!({ "reason": "answered_locally", "answer": "allow", "scope": "session" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let closed: DeviceDecision = res.json().await.unwrap();
        assert_eq!(closed.state, DecisionState::Answered);
        assert_eq!(closed.scope, Some(tether_protocol::decisions::Scope::Session));
        let decision = &list(&ann, "").await[0];
        assert_eq!(decision.answered_by, Some(tether_protocol::decisions::AnsweredBy::Computer));
        assert_eq!(ann.job(&job_id).await.state, JobState::Running);

        // The web comes too late, and so does a second close; the state stays.
        assert_error(answer(&ann, &decision_id, "deny", "once").await, 409, "already_answered").await;
        assert_error(close(&device, &decision_id, &json!({ "reason": "withdrawn" })).await, 409, "already_answered").await;
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Answered);
        let entries = ledger_kinds(&app, &ann).await;
        assert!(entries.iter().any(|e| e.kind == "decision.answered" && e.detail_json.contains(r#""by":"computer""#)));

        // Closing as expired or withdrawn needs no answer.
        let second = asked(&device, &job_id, &lease, &question("read", json!({ "file": "b" }), 600)).await;
        let res = close(&device, &second, &json!({ "reason": "expired" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(read_ok(&device, &second).await.state, DecisionState::Expired);
    }

    async fn a_computer_with_approvals_off_keeps_answers_to_itself(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut capabilities = device.capabilities();
        capabilities.accept_web_approvals = false;
        assert_eq!(device.heartbeat_with(capabilities, &[]).await.status(), StatusCode::OK);
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;

        assert!(!list(&ann, "?state=pending").await[0].web_answers);
        let message = assert_error(answer(&ann, &decision_id, "allow", "once").await, 409, "invalid_state").await;
        assert!(message.contains("waits on the computer") && message.contains("tether-agent decisions allow"), "{message}");
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Pending);
        let res = close(&device, &decision_id, &json!({ "reason": "answered_locally", "answer": "deny" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(read_ok(&device, &decision_id).await.scope, Some(tether_protocol::decisions::Scope::Once));
    }

    async fn heartbeats_keep_a_waiting_run_and_its_end_settles_what_is_left(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let first = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        let second = asked(&device, &job_id, &lease, &question("command", command(&["pwd"]), 600)).await;

        let beat: Value = device.heartbeat(&[(&job_id, &lease)]).await.json().await.unwrap();
        assert_eq!(beat["leases"][0]["jobId"], job_id.as_str());
        assert_eq!(beat["lost"], json!([]));
        let res = device.progress(&job_id, &lease, &json!({ "seq": 1, "lines": ["waiting"] })).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(ann.job(&job_id).await.state, JobState::Waiting);

        // Closing one leaves the other pending: still waiting.
        assert_eq!(close(&device, &first, &json!({ "reason": "withdrawn" })).await.status(), StatusCode::OK);
        assert_eq!(ann.job(&job_id).await.state, JobState::Waiting);
        assert_eq!(read_ok(&device, &first).await.state, DecisionState::Withdrawn);
        assert_eq!(answer(&ann, &second, "allow", "once").await.status(), StatusCode::OK);
        assert_eq!(ann.job(&job_id).await.state, JobState::Running);

        // Asking again waits again; completing withdraws what is still pending.
        let third = asked(&device, &job_id, &lease, &question("write", json!({ "file": "c" }), 600)).await;
        assert_eq!(ann.job(&job_id).await.state, JobState::Waiting);
        let done = json!({ "outcome": "succeeded", "summary": "Done." });
        assert_eq!(device.complete(&job_id, &lease, &done).await.status(), StatusCode::OK);
        assert_eq!(read_ok(&device, &third).await.state, DecisionState::Withdrawn);
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Succeeded);
        let states: Vec<_> = job.decisions.iter().map(|d| d.state).collect();
        assert_eq!(states, vec![DecisionState::Withdrawn, DecisionState::Answered, DecisionState::Withdrawn]);
        assert_error(ask(&device, &job_id, &lease, &question("command", json!({}), 60)).await, 409, "stale_lease").await;
    }

    async fn a_swept_lease_expires_the_runs_decisions(backend) {
        let app = spawn_app_with(backend, |config| config.lease_secs = 1).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        app.advance(Duration::from_millis(1300));

        let swept = sweeper::try_expire_leases(&app.store, app.now()).await.unwrap();
        assert_eq!(swept.interrupted.len(), 1);
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Interrupted);
        assert_eq!(job.decisions[0].state, DecisionState::Expired);
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Expired);
        assert_error(answer(&ann, &decision_id, "allow", "once").await, 409, "already_answered").await;
        // The run may come back after the outage; its old question stays expired.
        let res = device.reattach(&job_id, 1, &lease).await;
        assert_eq!(res.status(), StatusCode::OK);
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Running);
        assert_eq!(job.decisions[0].state, DecisionState::Expired);
    }

    async fn cancel_revoke_and_resume_withdraw_pending_decisions(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;

        // Cancel: withdrawn, and the stopping run asks nothing new.
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        assert_eq!(ann.post_empty(&format!("/api/jobs/{job_id}/cancel")).await.status(), StatusCode::OK);
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Withdrawn);
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Running);
        assert!(job.cancel_requested);
        let message = assert_error(ask(&device, &job_id, &lease, &question("command", json!({}), 60)).await, 409, "invalid_state").await;
        assert!(message.contains("stop"), "{message}");
        let done = json!({ "outcome": "cancelled", "summary": "Stopped." });
        assert_eq!(device.complete(&job_id, &lease, &done).await.status(), StatusCode::OK);

        // Resume after a restart: the lost attempt's question goes with it.
        let (job_id, lease) = running(&ann, &device).await;
        let lost = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        let res = device.resume(&job_id, 1).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(read_ok(&device, &lost).await.state, DecisionState::Withdrawn);
        assert_eq!(ann.job(&job_id).await.state, JobState::Running);
        let resumed: Value = res.json().await.unwrap();
        let lease = resumed["job"]["leaseToken"].as_str().unwrap().to_owned();

        // Revoke: the run ends interrupted and its question is withdrawn.
        let last = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        assert_eq!(ann.delete(&format!("/api/devices/{}", device.device_id)).await.status(), StatusCode::NO_CONTENT);
        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Interrupted);
        let decision = job.decisions.iter().find(|d| d.id.as_str() == last).unwrap();
        assert_eq!(decision.state, DecisionState::Withdrawn);
        assert!(list(&ann, "?state=pending").await.is_empty());
    }

    async fn a_web_answer_reaches_the_device_stream(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let mut events = device.events().await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        assert_eq!(answer(&ann, &decision_id, "allow", "once").await.status(), StatusCode::OK);
        assert_eq!(
            next_frame(&mut events, SOON).await,
            Some(ServerFrame::DecisionAnswered { decision_id: DecisionId::parse(&decision_id).unwrap() })
        );
    }

    async fn the_decisions_stream_tells_the_page_about_every_change(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let eve = app.user("eve@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let mut stream = Sse::open(&ann).await;
        let mut eves = Sse::open(&eve).await;
        assert_eq!(stream.next(SOON).await, Some(json!({ "change": "sync", "decisionId": null, "pending": 0 })));
        assert_eq!(eves.next(SOON).await.unwrap()["pending"], 0);

        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        assert_eq!(stream.next(SOON).await, Some(json!({ "change": "asked", "decisionId": decision_id, "pending": 1 })));
        assert_eq!(answer(&ann, &decision_id, "allow", "once").await.status(), StatusCode::OK);
        assert_eq!(stream.next(SOON).await, Some(json!({ "change": "answered", "decisionId": decision_id, "pending": 0 })));

        let second = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        assert_eq!(stream.next(SOON).await.unwrap()["pending"], 1);
        assert_eq!(ann.post_empty(&format!("/api/jobs/{job_id}/cancel")).await.status(), StatusCode::OK);
        let withdrawn = stream.next(SOON).await.unwrap();
        assert_eq!((withdrawn["change"].as_str(), withdrawn["pending"].as_u64()), (Some("withdrawn"), Some(0)));
        assert_eq!(read_ok(&device, &second).await.state, DecisionState::Withdrawn);

        // Another account's stream heard nothing.
        assert_eq!(eves.next(Duration::from_millis(300)).await, None);
        // Signed out, the stream is a 401.
        let res = reqwest::get(format!("{}/api/decisions/events", app.base)).await.unwrap();
        assert_error(res, 401, "unauthorized").await;
    }

    async fn hostile_input_is_refused_without_harm(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;

        let huge = question("command", json!({ "blob": "x".repeat(400 * 1024) }), 60);
        assert_error(ask(&device, &job_id, &lease, &huge).await, 413, "payload_too_large").await;
        let nested = (0..200).fold(json!("deep"), |inner, _| json!({ "a": inner }));
        let res = ask(&device, &job_id, &lease, &question("command", nested, 60)).await;
        assert!(res.status().is_client_error() || res.status() == StatusCode::CREATED, "{}", res.status());
        for body in [
            json!({}),
            json!({ "kind": "command", "question": "q", "action": {}, "actionHash": HASH, "expiresInSecs": -1 }),
            json!({ "kind": "command", "question": "q", "action": {}, "actionHash": HASH, "expiresInSecs": 1e12 }),
            json!({ "kind": 7, "question": "q", "action": {}, "actionHash": HASH, "expiresInSecs": 60 }),
            json!([1, 2, 3]),
        ] {
            assert_error(ask(&device, &job_id, &lease, &body).await, 400, "invalid_request").await;
        }
        // The computer words the question: a control character in it is shown as U+FFFD.
        let nul = json!({ "kind": "command", "question": "a\u{0}b", "action": { "c": "d" }, "actionHash": HASH, "expiresInSecs": 60 });
        let nul_question = asked(&device, &job_id, &lease, &nul).await;
        assert_eq!(list(&ann, "?state=pending").await.iter().find(|d| d.id.as_str() == nul_question).unwrap().question, "a\u{FFFD}b");
        let nul_action = json!({ "kind": "command", "question": "q", "action": { "c\u{0}": "\u{0}" }, "actionHash": HASH, "expiresInSecs": 60 });
        let nul_id = asked(&device, &job_id, &lease, &nul_action).await;
        assert_eq!(list(&ann, "?state=pending").await.iter().find(|d| d.id.as_str() == nul_id).unwrap().action, nul_action["action"]);

        for bad in ["..", "%00", "a%20b", &"x".repeat(80)] {
            assert_error(read(&device, bad).await, 404, "not_found").await;
            assert_error(close(&device, bad, &json!({ "reason": "withdrawn" })).await, 404, "not_found").await;
            assert_error(answer(&ann, bad, "allow", "once").await, 404, "not_found").await;
        }
        for body in [json!({}), json!({ "answer": "maybe", "scope": "once" }), json!({ "answer": "allow", "scope": "forever" }), json!("allow")] {
            let res = ann.post(&format!("/api/decisions/{decision_id}/answer"), &body).await;
            assert_error(res, 400, "invalid_request").await;
        }
        // Without the page's CSRF token a cookie-authenticated answer is refused.
        let res = ann.http.post(format!("{}/api/decisions/{decision_id}/answer", app.base))
            .json(&json!({ "answer": "allow", "scope": "once" })).send().await.unwrap();
        assert_error(res, 403, "csrf_rejected").await;
        // A web token is not a device token, and the other way round.
        let res = ann.http.get(format!("{}/api/devices/self/decisions/{decision_id}", app.base)).send().await.unwrap();
        assert_error(res, 401, "unauthorized").await;
        let res = device_request(&device, reqwest::Method::GET, "/api/decisions").send().await.unwrap();
        assert_error(res, 401, "unauthorized").await;
        assert_eq!(read_ok(&device, &decision_id).await.state, DecisionState::Pending);
    }

    async fn a_run_has_a_limited_number_of_open_questions(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let body = question("command", command(&["ls"]), 600);
        for _ in 0..decisions::MAX_PENDING_PER_JOB {
            asked(&device, &job_id, &lease, &body).await;
        }
        assert_error(ask(&device, &job_id, &lease, &body).await, 409, "invalid_state").await;
    }

    async fn metrics_count_pending_decisions_and_their_waits(backend) {
        let app = spawn_app_with(backend, |config| config.metrics_listen = Some("127.0.0.1:0".to_owned())).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let first = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        assert_eq!(answer(&ann, &first, "allow", "once").await.status(), StatusCode::OK);
        let text = app.metrics_text().await;
        assert!(text.contains("tether_pending_decisions 1"), "{text}");
        assert!(text.contains(r#"tether_decision_wait_seconds_count{how="answered_web"} 1"#), "{text}");
    }

    async fn needs_me_requires_sign_in(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
        let res = http.get(format!("{}/needs-me", app.base)).send().await.unwrap();
        assert_eq!(res.status().as_u16(), 303);
        assert_eq!(res.headers()["location"], "/signin?next=/needs-me");
        let script = http.get(format!("{}/assets/needs_me.js", app.base)).send().await.unwrap();
        assert_eq!(script.status().as_u16(), 200);
        assert!(script.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
        let text = script.text().await.unwrap();
        assert!(!text.contains(".innerHTML") && !text.contains("insertAdjacentHTML"));
        // Signed-out pages neither load the script nor show the badge.
        let (_, signin) = html(&app.web(), "/signin").await;
        assert!(!signin.contains("needs-me-badge") && !signin.contains("needs_me.js"));
    }

    async fn needs_me_lists_pending_decisions_escaped_with_their_answers(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;

        let (_, empty) = html(&ann, "/needs-me").await;
        assert!(empty.contains(r#"id="needs-me-list""#));
        assert!(empty.contains(r#"<span class="count" id="needs-me-badge" hidden>0</span>"#), "{empty}");

        let hostile = "<script>alert(1)</script>";
        let body = json!({
            "kind": "command", "question": format!("Run {hostile}?"),
            "action": { "command": ["sh", "-c", format!("echo {hostile}")], "folder": "work" },
            "actionHash": HASH, "expiresInSecs": 600,
        });
        let decision_id = asked(&device, &job_id, &lease, &body).await;
        let (status, text) = html(&ann, "/needs-me").await;
        assert_eq!(status, 200);
        assert!(!text.contains(hostile), "{text}");
        assert!(text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(text.contains(r#"<span class="count" id="needs-me-badge">1</span>"#), "{text}");
        assert!(text.contains(&format!(r#"data-decision-id="{decision_id}""#)));
        for answer in ["allow-once", "allow-session", "deny"] {
            assert!(text.contains(&format!(r#"data-decision-id="{decision_id}" data-answer="{answer}""#)), "{answer}");
        }
        assert!(text.contains(&format!(r#"href="/jobs/{job_id}""#)) && text.contains("Run the tests") && text.contains("laptop"));
        assert!(text.contains("min left"));
        assert!(text.contains(r#"<script src="/assets/needs_me.js" defer></script>"#));

        // Answered, it leaves the list; the job page shows who answered.
        assert_eq!(answer(&ann, &decision_id, "allow", "session").await.status(), StatusCode::OK);
        let (_, text) = html(&ann, "/needs-me").await;
        assert!(!text.contains(&format!(r#"data-decision-id="{decision_id}""#)));
        let (_, job_page) = html(&ann, &format!("/jobs/{job_id}")).await;
        assert!(job_page.contains(&format!(r#"data-decision-id="{decision_id}""#)));
        assert!(job_page.contains("Allowed for this run on the web"), "{job_page}");
        // When, as every list says it: a <time> app.js keeps current.
        assert!(job_page.contains(r#"Allowed for this run on the web, <time datetime=""#), "{job_page}");
        assert!(job_page.contains(r#"data-ago>just now</time>"#), "{job_page}");
        assert!(!job_page.contains(hostile));
    }

    async fn a_writes_preview_shows_escaped_while_open_and_goes_once_settled(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let eve = app.user("eve@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let stored = || query_i64(&app.store, "SELECT COUNT(*) FROM decisions WHERE preview IS NOT NULL");
        let preview = "--- a/notes.md\n+++ b/notes.md\n@@ -1,2 +1,2 @@\n same\n-<b>old</b>\n+<script>alert(1)</script>\n+bell\u{7}\n";
        let write = |preview: &str| json!({
            "kind": "write", "question": "Change `notes.md` in /w?",
            "action": { "kind": "write", "path": "/w/notes.md" },
            "actionHash": HASH, "expiresInSecs": 600, "preview": preview,
        });
        let decision_id = asked(&device, &job_id, &lease, &write(preview)).await;
        let shown = list(&ann, "?state=pending").await;
        let kept = shown[0].preview.clone().unwrap_or_default();
        assert!(kept.starts_with("--- a/notes.md\n+++ b/notes.md\n@@ -1,2 +1,2 @@\n"), "{kept}");
        // A control character of the file's text is made visible, not stored.
        assert!(kept.ends_with("+bell\u{fffd}\n"), "{kept}");
        let (_, text) = html(&ann, "/needs-me").await;
        assert!(!text.contains("<script>alert(1)</script>"), "{text}");
        assert!(text.contains(r#"<details class="preview" open><summary>Proposed change (7 lines)</summary>"#), "{text}");
        assert!(text.contains(r#"<span class="line meta">--- a/notes.md</span>"#), "{text}");
        assert!(text.contains(r#"<span class="line hunk">@@ -1,2 +1,2 @@</span>"#), "{text}");
        assert!(text.contains(r#"<span class="line del">-&lt;b&gt;old&lt;/b&gt;</span>"#), "{text}");
        assert!(text.contains(r#"<span class="line add">+&lt;script&gt;alert(1)&lt;/script&gt;</span>"#), "{text}");
        assert!(text.contains("Change <code>notes.md</code> in /w?"), "{text}");
        let (_, job_page) = html(&ann, &format!("/jobs/{job_id}")).await;
        assert!(job_page.contains(r#"<span class="line add">+&lt;script&gt;"#), "{job_page}");
        // Another account sees nothing of it.
        assert!(list(&eve, "").await.is_empty());
        assert_error(answer(&eve, &decision_id, "allow", "once").await, 404, "not_found").await;
        let (_, theirs) = html(&eve, "/needs-me").await;
        assert!(!theirs.contains("notes.md"));

        // Answered: the file text is gone from the server.
        assert_eq!(stored().await, Some(1));
        assert_eq!(answer(&ann, &decision_id, "allow", "once").await.status(), StatusCode::OK);
        assert_eq!(stored().await, Some(0));
        assert_eq!(ann.job(&job_id).await.decisions[0].preview, None);
        let (_, job_page) = html(&ann, &format!("/jobs/{job_id}")).await;
        assert!(!job_page.contains("class=\"preview\""), "{job_page}");

        // Withdrawn by the device, expired by the sweeper, settled by the run's end: gone too.
        let withdrawn = asked(&device, &job_id, &lease, &write(preview)).await;
        let body = json!({ "reason": "withdrawn" });
        assert_eq!(close(&device, &withdrawn, &body).await.status(), StatusCode::OK);
        assert_eq!(stored().await, Some(0));
        let mut short = write(preview);
        short["expiresInSecs"] = json!(1);
        asked(&device, &job_id, &lease, &short).await;
        app.advance(Duration::from_millis(1500));
        assert!(list(&ann, "?state=expired").await.iter().all(|d| d.preview.is_none()));
        decisions::expire_overdue(&app.store, app.now().timestamp_millis()).await.unwrap();
        assert_eq!(stored().await, Some(0));
        asked(&device, &job_id, &lease, &write(preview)).await;
        assert_eq!(stored().await, Some(1));
        let done = json!({ "outcome": "succeeded", "summary": "Done." });
        assert_eq!(device.complete(&job_id, &lease, &done).await.status(), StatusCode::OK);
        assert_eq!(stored().await, Some(0));
    }

    async fn a_preview_past_its_bounds_is_refused(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &device).await;
        let write = |preview: String| json!({
            "kind": "write", "question": "Change notes.md?", "action": { "path": "notes.md" },
            "actionHash": HASH, "expiresInSecs": 600, "preview": preview,
        });
        let too_long = "+x\n".repeat(401);
        let too_large = format!("+{}\n", "x".repeat(32 * 1024));
        for preview in [too_long, too_large] {
            let message = assert_error(ask(&device, &job_id, &lease, &write(preview)).await, 422, "invalid_field").await;
            assert!(message.starts_with("preview"), "{message}");
        }
        // At the bounds, and without one, it is asked.
        asked(&device, &job_id, &lease, &write("+x\n".repeat(400))).await;
        asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;
        let pending = list(&ann, "?state=pending").await;
        assert_eq!(pending.iter().filter(|d| d.preview.is_some()).count(), 1);
    }

    async fn needs_me_says_when_only_the_computer_can_answer(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut capabilities = device.capabilities();
        capabilities.accept_web_approvals = false;
        assert_eq!(device.heartbeat_with(capabilities, &[]).await.status(), StatusCode::OK);
        let (job_id, lease) = running(&ann, &device).await;
        let decision_id = asked(&device, &job_id, &lease, &question("command", command(&["ls"]), 600)).await;

        let (_, text) = html(&ann, "/needs-me").await;
        assert!(text.contains("Waiting on the computer"));
        assert!(text.contains(&format!("tether-agent decisions allow {decision_id}")));
        assert!(!text.contains("data-answer="));
        // The job page shows the run waiting, with the same card.
        let (_, job_page) = html(&ann, &format!("/jobs/{job_id}")).await;
        assert!(job_page.contains(r#"data-state="waiting""#));
        assert!(job_page.contains("Waiting on the computer"));
        assert!(job_page.contains(&format!(r#"data-job-decisions="/api/jobs/{job_id}""#)));
    }
}

/// The account's stream on one replica hears a question asked and answered through the
/// other, through Redis.
#[tokio::test]
async fn the_decisions_stream_works_across_replicas() {
    let Some((a, b)) = two_replicas(|_| {}).await else {
        return;
    };
    let ann = a.user("ann@example.com").await;
    let device = a.device(&ann, "install-1").await;
    let (job_id, lease) = running(&ann, &device).await;

    let mut ann_on_b = same_person(&ann);
    ann_on_b.base = b.base.clone();
    let mut stream = Sse::open(&ann_on_b).await;
    assert_eq!(stream.next(SOON).await.unwrap()["pending"], 0);
    let decision_id = asked(
        &device,
        &job_id,
        &lease,
        &question("command", command(&["ls"]), 600),
    )
    .await;
    let event = stream.next(SOON).await.unwrap();
    assert_eq!(
        (event["change"].as_str(), event["pending"].as_u64()),
        (Some("asked"), Some(1))
    );
    // The answer through A reaches the device's stream held by B, too.
    let device_on_b = DeviceClient {
        base: b.base.clone(),
        http: reqwest::Client::new(),
        token: device.token.clone(),
        device_id: device.device_id.clone(),
        install_id: device.install_id.clone(),
        seal_key: device.seal_key.clone(),
    };
    let mut frames = device_on_b.events().await;
    assert_eq!(
        answer(&ann, &decision_id, "allow", "once").await.status(),
        StatusCode::OK
    );
    let event = stream.next(SOON).await.unwrap();
    assert_eq!(
        (event["change"].as_str(), event["pending"].as_u64()),
        (Some("answered"), Some(0))
    );
    assert_eq!(
        next_frame(&mut frames, SOON).await,
        Some(ServerFrame::DecisionAnswered {
            decision_id: DecisionId::parse(&decision_id).unwrap()
        })
    );
}
