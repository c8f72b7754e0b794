//! Engine sessions deleted on request: the owner's `DELETE /api/jobs/{id}/session` relayed
//! to the job's computer as a `session.delete` frame on its real event stream, which
//! answers at its single-use request id; only `deleted: true` is done.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tether_protocol::capabilities::{Capabilities, Engine as EngineCap, EngineKind};
use tether_protocol::frames::ServerFrame;
use tether_server::store::ledger;
use tokio::task::JoinHandle;

use crate::both_backends;
use crate::helpers::{
    assert_error, job_body, next_frame, spawn_app, spawn_app_with, two_replicas, DeviceClient,
    Events, TestApp, WebClient,
};

const SOON: Duration = Duration::from_secs(5);

/// The test device's capabilities, with the ACP engine `coder` beside the recipe `echo`.
fn with_agent(device: &DeviceClient) -> Capabilities {
    let mut capabilities = device.capabilities();
    capabilities.engines.push(EngineCap {
        name: "coder".to_owned(),
        kind: EngineKind::Acp,
        check: None,
    });
    capabilities
}

fn copy(web: &WebClient) -> WebClient {
    WebClient {
        base: web.base.clone(),
        http: web.http.clone(),
        csrf: web.csrf.clone(),
    }
}

/// An owner whose computer publishes `coder`, with its event stream open.
struct Owner {
    app: TestApp,
    web: WebClient,
    device: DeviceClient,
    events: Events,
}

async fn owner(app: TestApp) -> Owner {
    let web = app.user("ann@example.com").await;
    let device = app.device(&web, "install-1").await;
    let res = device.heartbeat_with(with_agent(&device), &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let events = device.events().await;
    Owner {
        app,
        web,
        device,
        events,
    }
}

impl Owner {
    /// A job of `engine`, claimed; its id and lease.
    async fn claimed(&self, engine: &str) -> (String, String) {
        let mut body = job_body(&self.device.device_id);
        body["engine"] = json!(engine);
        let res = self.web.post("/api/jobs", &body).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let claimed = self.device.claim_job().await;
        (
            claimed.id.to_string(),
            claimed.lease_token.expose().to_owned(),
        )
    }

    /// A job of `coder` that ran and stopped.
    async fn stopped(&self) -> String {
        let (job_id, lease) = self.claimed("coder").await;
        let done = json!({ "outcome": "succeeded", "summary": "Done." });
        let res = self.device.complete(&job_id, &lease, &done).await;
        assert_eq!(res.status(), StatusCode::OK);
        job_id
    }

    /// The owner asks in the background; the test answers as the device.
    fn ask(&self, job_id: &str) -> JoinHandle<Response> {
        let (web, path) = (copy(&self.web), path(job_id));
        tokio::spawn(async move { web.delete(&path).await })
    }

    /// The next `session.delete`: its request id, after checking its job and timeout.
    async fn request(&mut self, job_id: &str) -> String {
        loop {
            match next_frame(&mut self.events, SOON).await {
                Some(ServerFrame::SessionDelete {
                    id,
                    job_id: asked,
                    timeout_ms,
                }) => {
                    assert_eq!(asked.as_str(), job_id);
                    assert!(timeout_ms.is_some_and(|ms| ms >= 1000), "{timeout_ms:?}");
                    return id;
                }
                Some(_) => continue,
                None => panic!("no session.delete frame"),
            }
        }
    }

    async fn deletions_in_ledger(&self, job_id: &str) -> usize {
        let account_id = self.web.me().await.account.id;
        let entries = ledger::list(&self.app.store, &account_id).await.unwrap();
        entries
            .iter()
            .filter(|entry| entry.kind == "session.deleted" && entry.subject == job_id)
            .count()
    }
}

fn path(job_id: &str) -> String {
    format!("/api/jobs/{job_id}/session")
}

/// The device's answer at its request id, as raw JSON text.
async fn answer_raw(device: &DeviceClient, request_id: &str, body: &str) -> Response {
    device
        .http
        .post(format!(
            "{}/api/devices/self/session-deletions/{request_id}",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

async fn answer(device: &DeviceClient, request_id: &str, body: &Value) -> Response {
    answer_raw(device, request_id, &body.to_string()).await
}

both_backends! {
    async fn the_owner_deletes_a_stopped_jobs_session_on_its_computer(backend) {
        let mut ann = owner(spawn_app(backend).await).await;
        // While it runs, the session is in use.
        let (running, lease) = ann.claimed("coder").await;
        let message = assert_error(ann.web.delete(&path(&running)).await, 409, "job_active").await;
        assert!(message.contains("running"), "{message}");
        let done = json!({ "outcome": "failed", "summary": "No." });
        assert_eq!(ann.device.complete(&running, &lease, &done).await.status(), StatusCode::OK);

        let pending = ann.ask(&running);
        let request_id = ann.request(&running).await;
        let res = answer(&ann.device, &request_id, &json!({ "deleted": true })).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert_eq!(pending.await.unwrap().status(), StatusCode::NO_CONTENT);
        assert_eq!(ann.deletions_in_ledger(&running).await, 1);
        // The request id was single use.
        assert_error(answer(&ann.device, &request_id, &json!({ "deleted": true })).await, 410, "upload_gone").await;
        // Asking again asks the computer again (it says whether anything is left).
        let pending = ann.ask(&running);
        let again = ann.request(&running).await;
        assert_ne!(again, request_id);
        assert_eq!(answer(&ann.device, &again, &json!({ "deleted": true })).await.status(), StatusCode::NO_CONTENT);
        assert_eq!(pending.await.unwrap().status(), StatusCode::NO_CONTENT);

        // Nobody else asks: another account's job is not found, and nothing is sent.
        let bob = ann.app.user("bob@example.com").await;
        assert_error(bob.delete(&path(&running)).await, 404, "not_found").await;
        assert_error(ann.web.delete(&path("no-such-job")).await, 404, "not_found").await;
        assert!(next_frame(&mut ann.events, Duration::from_millis(300)).await.is_none());
        // A queued job is not stopped either.
        let mut body = job_body(&ann.device.device_id);
        body["engine"] = json!("coder");
        let queued: Value = ann.web.post("/api/jobs", &body).await.json().await.unwrap();
        let queued = queued["id"].as_str().unwrap();
        let message = assert_error(ann.web.delete(&path(queued)).await, 409, "job_active").await;
        assert!(message.contains("queued"), "{message}");
        // A cookie session's change needs the page's CSRF token.
        let forged = WebClient { csrf: None, ..copy(&ann.web) };
        assert_error(forged.delete(&path(&running)).await, 403, "csrf_rejected").await;
    }

    async fn a_refusal_is_said_never_reported_done(backend) {
        let mut ann = owner(spawn_app(backend).await).await;
        let job_id = ann.stopped().await;
        let pending = ann.ask(&job_id);
        let request_id = ann.request(&job_id).await;
        let refused = json!({ "deleted": false,
                              "error": "the agent did not delete its session: disk full\u{1b}[0m" });
        assert_eq!(answer(&ann.device, &request_id, &refused).await.status(), StatusCode::NO_CONTENT);
        let message = assert_error(pending.await.unwrap(), 409, "device_refused").await;
        assert!(message.contains("the agent did not delete its session: disk full"), "{message}");
        assert!(!message.contains('\u{1b}'), "{message}");
        assert_eq!(ann.deletions_in_ledger(&job_id).await, 0);
        // Without a reason it still says it was not done.
        let pending = ann.ask(&job_id);
        let request_id = ann.request(&job_id).await;
        assert_eq!(answer(&ann.device, &request_id, &json!({ "deleted": false })).await.status(), StatusCode::NO_CONTENT);
        let message = assert_error(pending.await.unwrap(), 409, "device_refused").await;
        assert!(message.contains("did not delete"), "{message}");
    }

    async fn a_recipe_keeps_no_session(backend) {
        let ann = owner(spawn_app(backend).await).await;
        let (job_id, lease) = ann.claimed("echo").await;
        let done = json!({ "outcome": "succeeded", "summary": "ok" });
        assert_eq!(ann.device.complete(&job_id, &lease, &done).await.status(), StatusCode::OK);
        let message = assert_error(ann.web.delete(&path(&job_id)).await, 409, "no_session").await;
        assert!(message.contains("echo"), "{message}");
    }

    async fn hostile_answers_are_refused_and_leave_the_id_usable(backend) {
        let mut ann = owner(spawn_app(backend).await).await;
        let job_id = ann.stopped().await;
        let pending = ann.ask(&job_id);
        let request_id = ann.request(&job_id).await;
        let device = &ann.device;
        assert_error(answer_raw(device, &request_id, "{not json").await, 400, "invalid_request").await;
        assert_error(answer_raw(device, &request_id, "[]").await, 400, "invalid_request").await;
        assert_error(answer(device, &request_id, &json!({ "deleted": true, "engine": "x" })).await, 400, "invalid_request").await;
        assert_error(answer(device, &request_id, &json!({ "error": "x" })).await, 400, "invalid_request").await;
        assert_error(answer(device, &request_id, &json!({ "deleted": "yes" })).await, 400, "invalid_request").await;
        let long = json!({ "deleted": false, "error": "x".repeat(501) });
        assert_error(answer(device, &request_id, &long).await, 422, "invalid_field").await;
        let huge = json!({ "deleted": false, "error": "x".repeat(100_000) });
        assert_error(answer(device, &request_id, &huge).await, 413, "payload_too_large").await;
        let both = json!({ "deleted": true, "error": "but not really" });
        assert_error(answer(device, &request_id, &both).await, 422, "invalid_field").await;
        // Another device, of this account or another, and an unknown id: not found.
        let other = ann.app.device(&ann.web, "install-2").await;
        assert_error(answer(&other, &request_id, &json!({ "deleted": true })).await, 404, "not_found").await;
        let bob = ann.app.user("bob@example.com").await;
        let bobs = ann.app.device(&bob, "install-b").await;
        assert_error(answer(&bobs, &request_id, &json!({ "deleted": true })).await, 404, "not_found").await;
        assert_error(answer(device, "sdl_unknown", &json!({ "deleted": true })).await, 404, "not_found").await;
        assert_error(answer(device, &"x".repeat(300), &json!({ "deleted": true })).await, 404, "not_found").await;
        // Without the device's token, nothing.
        let res = reqwest::Client::new()
            .post(format!("{}/api/devices/self/session-deletions/{request_id}", device.base))
            .header("x-tether-protocol", "1")
            .json(&json!({ "deleted": true }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        // None of that took the id.
        assert_eq!(answer(device, &request_id, &json!({ "deleted": true })).await.status(), StatusCode::NO_CONTENT);
        assert_eq!(pending.await.unwrap().status(), StatusCode::NO_CONTENT);
    }

    async fn the_job_page_offers_it_for_a_stopped_agent_job_only(backend) {
        let ann = owner(spawn_app(backend).await).await;
        let page = |job_id: String| {
            let web = copy(&ann.web);
            async move { web.get(&format!("/jobs/{job_id}")).await.text().await.unwrap() }
        };
        let action = "data-session-delete";
        let (running, lease) = ann.claimed("coder").await;
        assert!(!page(running.clone()).await.contains(action));
        let done = json!({ "outcome": "succeeded", "summary": "Done." });
        assert_eq!(ann.device.complete(&running, &lease, &done).await.status(), StatusCode::OK);
        let html = page(running.clone()).await;
        assert!(html.contains(action), "{html}");
        assert!(html.contains(&format!("data-session-url=\"/api/jobs/{running}/session\"")), "{html}");
        assert!(html.contains("/assets/results.js"));
        // A recipe keeps no session.
        let (recipe, lease) = ann.claimed("echo").await;
        assert_eq!(ann.device.complete(&recipe, &lease, &done).await.status(), StatusCode::OK);
        assert!(!page(recipe).await.contains(action));
        let script = ann.web.get("/assets/results.js").await.text().await.unwrap();
        assert!(script.contains("[data-session-delete]") && script.contains("\"DELETE\""));
    }

    async fn a_computer_that_does_not_answer_is_said_so(backend) {
        let app = spawn_app_with(backend, |config| config.evidence_wait_secs = 2).await;
        let mut ann = owner(app).await;
        let job_id = ann.stopped().await;
        let pending = ann.ask(&job_id);
        let request_id = ann.request(&job_id).await;
        assert_error(pending.await.unwrap(), 504, "device_timeout").await;
        // A late answer finds nobody waiting, and nothing is recorded.
        assert_error(answer(&ann.device, &request_id, &json!({ "deleted": true })).await, 410, "upload_gone").await;
        assert_eq!(ann.deletions_in_ledger(&job_id).await, 0);
        // Without a stream the owner is told at once.
        let Owner { web, events, .. } = ann;
        drop(events);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_error(web.delete(&path(&job_id)).await, 409, "device_offline").await;
    }
}

/// With Redis and two replicas, the owner waits on A while the device answers on B.
#[tokio::test]
async fn an_answer_on_another_replica_reaches_the_waiting_request() {
    let Some((a, b)) = two_replicas(|_| {}).await else {
        return;
    };
    let mut ann = owner(a).await;
    let device_b = DeviceClient {
        base: b.base.clone(),
        http: reqwest::Client::new(),
        token: ann.device.token.clone(),
        device_id: ann.device.device_id.clone(),
        install_id: ann.device.install_id.clone(),
        seal_key: ann.device.seal_key.clone(),
    };
    let job_id = ann.stopped().await;
    let pending = ann.ask(&job_id);
    let request_id = ann.request(&job_id).await;
    // Another device cannot take it there either.
    let other = b.device(&ann.web, "install-2").await;
    assert_error(
        answer(&other, &request_id, &json!({ "deleted": true })).await,
        404,
        "not_found",
    )
    .await;
    let res = answer(&device_b, &request_id, &json!({ "deleted": true })).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(pending.await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(ann.deletions_in_ledger(&job_id).await, 1);
    assert_error(
        answer(&ann.device, &request_id, &json!({ "deleted": true })).await,
        410,
        "upload_gone",
    )
    .await;

    // A refusal crosses replicas as it is.
    let pending = ann.ask(&job_id);
    let request_id = ann.request(&job_id).await;
    let refused = json!({ "deleted": false, "error": "no room" });
    let res = answer(&device_b, &request_id, &refused).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let message = assert_error(pending.await.unwrap(), 409, "device_refused").await;
    assert!(message.contains("no room"), "{message}");
}
