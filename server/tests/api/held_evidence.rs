//! Held evidence: files the computer keeps for its owner, described without bytes, and the
//! owner's Preview, Release and Discard relayed to a device on its real event stream, which
//! answers at its single-use upload id.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::evidence::{EvidenceAction, EvidenceHold, EvidenceSettings};
use tether_protocol::frames::ServerFrame;
use tokio::task::JoinHandle;

use crate::both_backends;
use crate::helpers::{
    assert_error, next_frame, spawn_app, spawn_app_with, Backend, DeviceClient, Events, TestApp,
    WebClient,
};
use crate::redis;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";
const SMALL_PNG: &[u8] = b"\x89PNG\r\n\x1a\nsmall";
const SOON: Duration = Duration::from_secs(5);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A held file's description.
fn held(id: &str, bytes: &[u8]) -> Value {
    json!({ "id": id, "kind": "screenshot", "name": format!("{id}.png"), "size": bytes.len(),
            "sha256": hex(&Sha256::digest(bytes)), "held": true })
}

/// A running job with a held screenshot `shot` and its held preview variant `shot-small`.
struct Held {
    app: TestApp,
    owner: WebClient,
    device: DeviceClient,
    events: Events,
    job_id: String,
    lease: String,
}

async fn holding(app: TestApp) -> Held {
    let owner = app.user("ann@example.com").await;
    let device = app.device(&owner, "install-1").await;
    let job = owner.create_job(&device.device_id).await;
    let lease = device.claim_job().await.lease_token.expose().to_owned();
    let events = device.events().await;
    let held_run = Held {
        app,
        owner,
        device,
        events,
        job_id: job.id.to_string(),
        lease,
    };
    assert_eq!(
        held_run.describe(&held("shot", PNG)).await.status(),
        StatusCode::CREATED
    );
    let mut small = held("shot-small", SMALL_PNG);
    small["variantOf"] = json!("shot");
    small["variant"] = json!("preview");
    small["details"] = json!({ "width": 320, "height": 200 });
    assert_eq!(
        held_run.describe(&small).await.status(),
        StatusCode::CREATED
    );
    held_run
}

fn copy(web: &WebClient) -> WebClient {
    WebClient {
        base: web.base.clone(),
        http: web.http.clone(),
        csrf: web.csrf.clone(),
    }
}

impl Held {
    async fn describe(&self, meta: &Value) -> Response {
        self.device
            .http
            .post(format!(
                "{}/api/devices/self/jobs/{}/evidence",
                self.device.base, self.job_id
            ))
            .bearer_auth(&self.device.token)
            .header("x-tether-protocol", "1")
            .header("x-tether-lease", &self.lease)
            .header(
                "x-tether-evidence",
                URL_SAFE_NO_PAD.encode(meta.to_string()),
            )
            .send()
            .await
            .unwrap()
    }

    fn path(&self, id: &str, action: &str) -> String {
        format!("/api/jobs/{}/evidence/{id}/{action}", self.job_id)
    }

    /// The owner asks in the background; the test answers as the device.
    fn ask(&self, id: &str, action: &str) -> JoinHandle<Response> {
        let (web, path) = (copy(&self.owner), self.path(id, action));
        tokio::spawn(async move { web.post_empty(&path).await })
    }

    /// The next `evidence.request`: (upload id, evidence id, action).
    async fn request(&mut self) -> (String, String, EvidenceAction) {
        loop {
            match next_frame(&mut self.events, SOON).await {
                Some(ServerFrame::EvidenceRequest {
                    upload_id,
                    evidence_id,
                    action,
                    job_id,
                    ..
                }) => {
                    assert_eq!(job_id.as_str(), self.job_id);
                    return (upload_id, evidence_id, action);
                }
                Some(_) => continue,
                None => panic!("no evidence.request frame"),
            }
        }
    }
}

/// The device's answer at its upload id.
async fn answer(
    device: &DeviceClient,
    upload_id: &str,
    meta: Option<&Value>,
    refused: Option<&str>,
    body: &[u8],
) -> Response {
    let mut request = device
        .http
        .post(format!(
            "{}/api/devices/self/evidence-uploads/{upload_id}",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .body(body.to_vec());
    if let Some(meta) = meta {
        request = request.header(
            "x-tether-evidence",
            URL_SAFE_NO_PAD.encode(meta.to_string()),
        );
    }
    if let Some(refused) = refused {
        request = request.header("x-tether-evidence-refused", refused);
    }
    request.send().await.unwrap()
}

fn listed(job: &Value, id: &str) -> Option<Value> {
    job["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["id"] == id)
        .cloned()
}

both_backends! {
    async fn held_files_are_listed_and_previewed_for_a_while(backend) {
        let mut run = holding(spawn_app(backend).await).await;
        let job: Value = run.owner.get(&format!("/api/jobs/{}", run.job_id)).await.json().await.unwrap();
        let shot = listed(&job, "shot").unwrap();
        assert_eq!((shot["held"].clone(), shot["local"].clone()), (json!(true), json!(false)));
        let small = listed(&job, "shot-small").unwrap();
        assert_eq!(small["variantOf"], "shot");
        assert_eq!(small["variant"], "preview");
        assert_eq!(small["details"], json!({ "width": 320, "height": 200 }));
        assert_error(run.owner.get(&format!("/api/jobs/{}/evidence/shot", run.job_id)).await, 409, "invalid_state").await;
        // A variant names a file of this job stored before it.
        let mut orphan = held("orphan", SMALL_PNG);
        orphan["variantOf"] = json!("nope");
        let message = assert_error(run.describe(&orphan).await, 400, "invalid_request").await;
        assert!(message.contains("variantOf"), "{message}");

        // Preview: the device sends the described bytes; the owner reads them for 5 minutes.
        let pending = run.ask("shot", "preview");
        let (upload_id, evidence_id, action) = run.request().await;
        assert_eq!((evidence_id.as_str(), action), ("shot", EvidenceAction::Preview));
        let res = answer(&run.device, &upload_id, Some(&held("shot", PNG)), None, PNG).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        let res = pending.await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let ready: Value = res.json().await.unwrap();
        assert_eq!((ready["size"].clone(), ready["mime"].clone()), (json!(PNG.len()), json!("image/png")));
        let url = ready["url"].as_str().unwrap().to_owned();
        assert_eq!(url, run.path("shot", "preview"));
        let res = run.owner.get(&url).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["cache-control"], "private, no-store");
        assert_eq!(res.headers()["x-content-type-options"], "nosniff");
        assert_eq!(res.headers()["content-type"], "image/png");
        assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);
        // The upload id was single use.
        assert_error(answer(&run.device, &upload_id, Some(&held("shot", PNG)), None, PNG).await, 410, "upload_gone").await;
        // Nobody else reads or asks.
        let bob = run.app.user("bob@example.com").await;
        assert_error(bob.get(&url).await, 404, "not_found").await;
        for action in ["preview", "release", "discard"] {
            assert_error(bob.post_empty(&run.path("shot", action)).await, 404, "not_found").await;
        }
        run.app.advance(Duration::from_secs(301));
        assert_error(run.owner.get(&url).await, 404, "not_found").await;
        // The still-held file is still held; a variant is previewed the same way.
        let pending = run.ask("shot-small", "preview");
        let (upload_id, evidence_id, _) = run.request().await;
        assert_eq!(evidence_id, "shot-small");
        let small = held("shot-small", SMALL_PNG);
        assert_eq!(answer(&run.device, &upload_id, Some(&small), None, SMALL_PNG).await.status(), StatusCode::NO_CONTENT);
        assert_eq!(pending.await.unwrap().status(), StatusCode::OK);
    }

    async fn release_keeps_the_file_unless_upload_is_off(backend) {
        let mut run = holding(spawn_app(backend).await).await;
        let pending = run.ask("shot", "release");
        let (upload_id, _, action) = run.request().await;
        assert_eq!(action, EvidenceAction::Release);
        // Hostile answers are refused and leave the id usable.
        let other = run.app.device(&run.owner, "install-2").await;
        assert_error(answer(&other, &upload_id, Some(&held("shot", PNG)), None, PNG).await, 404, "not_found").await;
        assert_error(answer(&run.device, "eup_unknown", Some(&held("shot", PNG)), None, PNG).await, 404, "not_found").await;
        assert_error(answer(&run.device, &upload_id, Some(&held("shot", PNG)), None, SMALL_PNG).await, 400, "invalid_request").await;
        assert_error(answer(&run.device, &upload_id, Some(&held("shot-small", SMALL_PNG)), None, SMALL_PNG).await, 400, "invalid_request").await;
        assert_error(answer(&run.device, &upload_id, None, None, PNG).await, 400, "invalid_request").await;
        let mut text = held("shot", b"plain text");
        text["kind"] = json!("screenshot");
        assert_error(answer(&run.device, &upload_id, Some(&text), None, b"plain text").await, 400, "invalid_request").await;
        let res = answer(&run.device, &upload_id, Some(&held("shot", PNG)), None, PNG).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        let res = pending.await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let item: Value = res.json().await.unwrap();
        assert_eq!((item["held"].clone(), item["mime"].clone()), (json!(false), json!("image/png")));
        let res = run.owner.get(&format!("/api/jobs/{}/evidence/shot", run.job_id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);
        let job: Value = run.owner.get(&format!("/api/jobs/{}", run.job_id)).await.json().await.unwrap();
        assert_eq!(listed(&job, "shot").unwrap()["held"], false);
        // Released: no longer held, so nothing more to ask.
        assert_error(run.owner.post_empty(&run.path("shot", "release")).await, 409, "invalid_state").await;

        // With upload off on the computer, a release is refused at once.
        let mut caps = run.device.capabilities();
        caps.evidence = Some(EvidenceSettings { upload: false, hold: EvidenceHold::All });
        let running = [(run.job_id.as_str(), run.lease.as_str())];
        assert_eq!(run.device.heartbeat_with(caps, &running).await.status(), StatusCode::OK);
        assert_error(run.owner.post_empty(&run.path("shot-small", "release")).await, 409, "evidence_kept").await;
    }

    async fn discard_deletes_the_file_and_its_variants_and_refusals_pass(backend) {
        let mut run = holding(spawn_app(backend).await).await;
        let pending = run.ask("shot", "discard");
        let (upload_id, _, action) = run.request().await;
        assert_eq!(action, EvidenceAction::Discard);
        assert_eq!(answer(&run.device, &upload_id, None, Some("no%20such%20file"), b"").await.status(), StatusCode::NO_CONTENT);
        let message = assert_error(pending.await.unwrap(), 409, "invalid_state").await;
        assert!(message.contains("no such file"), "{message}");

        let pending = run.ask("shot", "release");
        let (upload_id, _, _) = run.request().await;
        let kept = "code%3Devidence_kept%3A%20upload%20is%20off";
        assert_eq!(answer(&run.device, &upload_id, None, Some(kept), b"").await.status(), StatusCode::NO_CONTENT);
        assert_error(pending.await.unwrap(), 409, "evidence_kept").await;

        let pending = run.ask("shot", "discard");
        let (upload_id, _, _) = run.request().await;
        assert_error(answer(&run.device, &upload_id, None, None, b"bytes").await, 400, "invalid_request").await;
        assert_eq!(answer(&run.device, &upload_id, None, None, b"").await.status(), StatusCode::NO_CONTENT);
        assert_eq!(pending.await.unwrap().status(), StatusCode::NO_CONTENT);
        let job: Value = run.owner.get(&format!("/api/jobs/{}", run.job_id)).await.json().await.unwrap();
        assert!(listed(&job, "shot").is_none() && listed(&job, "shot-small").is_none(), "{job}");
        assert_error(run.owner.post_empty(&run.path("shot", "discard")).await, 404, "not_found").await;
    }

    async fn an_upload_id_is_bound_and_gone_once_its_request_gave_up(backend) {
        let app = spawn_app_with(backend, |config| config.evidence_wait_secs = 3).await;
        let mut run = holding(app).await;
        // Another account's device cannot use it.
        let bob = run.app.user("bob@example.com").await;
        let bobs = run.app.device(&bob, "install-b").await;
        let pending = run.ask("shot", "preview");
        let (upload_id, _, _) = run.request().await;
        assert_error(answer(&bobs, &upload_id, Some(&held("shot", PNG)), None, PNG).await, 404, "not_found").await;
        // Over the preview limit, by description.
        let mut huge = held("shot", PNG);
        huge["size"] = json!(32_000_001_u64);
        assert_error(answer(&run.device, &upload_id, Some(&huge), None, PNG).await, 413, "payload_too_large").await;
        let mut bad = held("shot", PNG);
        bad["sha256"] = json!("0".repeat(64));
        assert_error(answer(&run.device, &upload_id, Some(&bad), None, PNG).await, 400, "invalid_request").await;
        // Nobody answers: the owner is told 504, and the id is gone for a late answer.
        assert_error(pending.await.unwrap(), 504, "device_timeout").await;
        assert_error(answer(&run.device, &upload_id, Some(&held("shot", PNG)), None, PNG).await, 410, "upload_gone").await;
        // Without a stream the owner is told at once.
        let Held { owner, events, job_id, .. } = run;
        drop(events);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let path = format!("/api/jobs/{job_id}/evidence/shot/preview");
        assert_error(owner.post_empty(&path).await, 409, "device_offline").await;
    }
}

/// With Redis and two replicas, the owner waits on A while the device's upload lands on B.
#[tokio::test]
async fn an_upload_on_another_replica_reaches_the_waiting_request() {
    let Some(redis_url) = redis::url() else {
        return;
    };
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let a = spawn_app_with(backend, |config| {
        config.redis_url = Some(redis_url);
        config.relay_timeout_secs = 5;
    })
    .await;
    let b = a.another().await;
    let mut run = holding(a).await;
    let device_b = DeviceClient {
        base: b.base.clone(),
        http: reqwest::Client::new(),
        token: run.device.token.clone(),
        device_id: run.device.device_id.clone(),
        install_id: run.device.install_id.clone(),
        seal_key: run.device.seal_key.clone(),
    };
    let pending = run.ask("shot", "preview");
    let (upload_id, _, _) = run.request().await;
    let res = answer(&device_b, &upload_id, Some(&held("shot", PNG)), None, PNG).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let ready: Value = pending.await.unwrap().json().await.unwrap();
    // Either replica serves the preview.
    let mut owner_b = copy(&run.owner);
    owner_b.base = b.base.clone();
    let res = owner_b.get(ready["url"].as_str().unwrap()).await;
    assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);
    assert_error(
        answer(&run.device, &upload_id, Some(&held("shot", PNG)), None, PNG).await,
        410,
        "upload_gone",
    )
    .await;

    let pending = run.ask("shot", "release");
    let (upload_id, _, _) = run.request().await;
    assert_eq!(
        answer(&device_b, &upload_id, Some(&held("shot", PNG)), None, PNG)
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    let item: Value = pending.await.unwrap().json().await.unwrap();
    assert_eq!(item["held"], false);
}
