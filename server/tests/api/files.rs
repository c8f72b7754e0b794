//! Live files of a job, relayed to a fake device over its real event stream and answered
//! over HTTP.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::files::FileOp;
use tether_protocol::frames::ServerFrame;

use crate::both_backends;
use crate::helpers::{assert_error, next_frame, spawn_app, spawn_app_with, DeviceClient, Events};

/// Answers file requests like a device sharing a folder with `README.md` and `src/`,
/// refusing `.env` and never answering `slow`. Returns when the stream ends.
pub async fn fake_device(device: DeviceClient, mut events: Events) {
    while let Some(frame) = next_frame(&mut events, Duration::from_secs(30)).await {
        let ServerFrame::FileRequest { id, op, path, .. } = frame else {
            continue;
        };
        let answer = match (op, path.as_str()) {
            (_, "slow") => continue,
            (_, ".env") => json!({ "error": { "code": "path_refused", "message": "a secret" } }),
            (FileOp::Tree, "") => json!({ "tree": { "path": "", "entries": [
                { "name": "README.md", "kind": "file", "size": 6 },
                { "name": "src", "kind": "dir", "size": 0 },
            ] } }),
            (FileOp::File, "README.md") => json!({ "file": {
                "path": "README.md", "size": 6, "binary": false, "truncated": false, "text": "hello\n",
            } }),
            (FileOp::Diff, "README.md") => json!({ "diff": {
                "path": "README.md", "truncated": false,
                "text": "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-hi\n+hello\n",
            } }),

            _ => json!({ "error": { "code": "not_found", "message": "no such file" } }),
        };
        let res = device.answer_file(&id, &answer).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
    }
}

fn clone_device(device: &DeviceClient) -> DeviceClient {
    DeviceClient {
        base: device.base.clone(),
        http: reqwest::Client::new(),
        token: device.token.clone(),
        device_id: device.device_id.clone(),
        install_id: device.install_id.clone(),
        seal_key: device.seal_key.clone(),
    }
}

both_backends! {
    async fn tree_and_file_round_trip_through_the_device(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let events = device.events().await;
        tokio::spawn(fake_device(clone_device(&device), events));

        let res = ann.get(&format!("/api/jobs/{}/tree?path=", job.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let tree: Value = res.json().await.unwrap();
        assert_eq!(tree["entries"][0]["name"], "README.md");
        assert_eq!(tree["entries"][1]["kind"], "dir");
        let res = ann.get(&format!("/api/jobs/{}/file?path=README.md", job.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let file: Value = res.json().await.unwrap();
        assert_eq!(file["text"], "hello\n");
        assert_error(ann.get(&format!("/api/jobs/{}/file?path=.env", job.id)).await, 403, "path_refused").await;
        assert_error(ann.get(&format!("/api/jobs/{}/file?path=missing", job.id)).await, 404, "not_found").await;

        // A diff is text, never cached; the device's refusals pass as for files.
        let res = ann.get(&format!("/api/jobs/{}/diff?path=README.md", job.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(res.headers()["cache-control"], "no-store");
        assert_eq!(res.text().await.unwrap(), "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-hi\n+hello\n");
        assert_error(ann.get(&format!("/api/jobs/{}/diff?path=.env", job.id)).await, 403, "path_refused").await;
        assert_error(ann.get(&format!("/api/jobs/{}/diff?path=../x", job.id)).await, 422, "invalid_field").await;

        // Also after the job ended.
        let claimed = device.claim_job().await;
        let done = json!({ "outcome": "succeeded", "summary": "ok" });
        assert_eq!(device.complete(job.id.as_str(), claimed.lease_token.expose(), &done).await.status(), StatusCode::OK);
        let res = ann.get(&format!("/api/jobs/{}/file?path=README.md", job.id)).await;
        assert_eq!(res.status(), StatusCode::OK);

        // Only the owner asks.
        let bob = app.user("bob@example.com").await;
        assert_error(bob.get(&format!("/api/jobs/{}/tree?path=", job.id)).await, 404, "not_found").await;
        assert_error(app.web().get(&format!("/api/jobs/{}/tree?path=", job.id)).await, 401, "unauthorized").await;
    }

    async fn bad_paths_are_refused_before_relaying(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        // No stream is open: a relayed request would be a 409, so a 422 proves the order.
        let long = "a".repeat(4097);
        for path in ["/etc/passwd", "../up", "src/../../up", "a%00b", long.as_str()] {
            let message = assert_error(ann.get(&format!("/api/jobs/{}/file?path={path}", job.id)).await, 422, "invalid_field").await;
            assert!(message.starts_with("path"), "{message}");
        }
    }

    async fn offline_timeout_and_other_devices_answers(backend) {
        let app = spawn_app_with(backend, |config| config.relay_timeout_secs = 1).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other = app.device(&ann, "install-2").await;
        let job = ann.create_job(&device.device_id).await;
        let tree = format!("/api/jobs/{}/tree?path=", job.id);
        assert_error(ann.get(&tree).await, 409, "device_offline").await;

        // Connected but silent: 504 after the relay timeout.
        let mut events = device.events().await;
        let started = std::time::Instant::now();
        assert_error(ann.get(&format!("/api/jobs/{}/tree?path=slow", job.id)).await, 504, "device_timeout").await;
        assert!(started.elapsed() >= Duration::from_secs(1));
        let Some(ServerFrame::FileRequest { id: late_id, .. }) = next_frame(&mut events, Duration::from_secs(1)).await else {
            panic!("no file.request frame");
        };
        let answer = json!({ "tree": { "path": "", "entries": [] } });
        assert_error(device.answer_file(&late_id, &answer).await, 404, "not_found").await;

        // Another device cannot answer; the right one then can, once.
        let web = ann;
        let job_id = job.id.clone();
        let pending = tokio::spawn(async move { web.get(&format!("/api/jobs/{job_id}/tree?path=src")).await });
        let Some(ServerFrame::FileRequest { id, job_id: asked_for, op, path, .. }) = next_frame(&mut events, Duration::from_secs(1)).await else {
            panic!("no file.request frame");
        };
        assert_eq!((asked_for, op, path.as_str()), (job.id.clone(), FileOp::Tree, "src"));
        assert_error(other.answer_file(&id, &answer).await, 404, "not_found").await;
        assert_error(device.answer_file("frq_unknown", &answer).await, 404, "not_found").await;
        assert_error(device.answer_file(&id, &json!({})).await, 422, "invalid_field").await;
        assert_eq!(device.answer_file(&id, &answer).await.status(), StatusCode::NO_CONTENT);
        assert_error(device.answer_file(&id, &answer).await, 404, "not_found").await;
        let res = pending.await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let listed: Value = res.json().await.unwrap();
        assert_eq!(listed["entries"], json!([]));
    }
}
