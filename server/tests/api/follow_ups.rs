//! What a run changed (`changes` on complete), running a job again (`rerun`) and following
//! it up (`continues`): the shapes accepted, the order follow-ups are claimed in, and
//! another account's job a 404 everywhere.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::jobs::{Job, JobState};

use crate::both_backends;
use crate::helpers::{assert_error, job_body, spawn_app, DeviceClient, WebClient};

fn changes() -> Value {
    json!({
        "base": { "kind": "git", "head": "4b825dc642cb6eb9a060e54bf8d69288fbee4904" },
        "files": [
            { "path": "package.json", "status": "modified", "additions": 2, "deletions": 1,
              "binary": false, "flags": ["runs_later"] },
            { "path": "src/new.rs", "status": "renamed", "from": "src/old.rs",
              "additions": 0, "deletions": 0, "binary": false, "flags": [] },
            { "path": "logo.png", "status": "added", "additions": 0, "deletions": 0,
              "binary": true, "flags": [] },
        ],
        "totals": { "files": 3, "additions": 2, "deletions": 1 },
        "truncated": false,
    })
}

/// Queues `body`, claims it and completes it `succeeded` with `extra` merged in.
async fn run_to_end(ann: &WebClient, device: &DeviceClient, body: &Value, extra: Value) -> Job {
    let res = ann.post("/api/jobs", body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let claimed = device.claim_job().await;
    assert_eq!(claimed.id, job.id);
    let mut done = json!({ "outcome": "succeeded", "summary": "Done: all green." });
    if let (Some(done), Some(extra)) = (done.as_object_mut(), extra.as_object()) {
        done.extend(extra.clone());
    }
    let res = device
        .complete(job.id.as_str(), claimed.lease_token.expose(), &done)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    ann.job(job.id.as_str()).await
}

both_backends! {
    async fn changes_are_stored_as_reported_and_a_bad_list_is_dropped(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);

        let job = run_to_end(&ann, &device, &body, json!({ "changes": changes() })).await;
        assert_eq!(job.state, JobState::Succeeded);
        let listed = serde_json::to_value(job.changes.as_ref().unwrap()).unwrap();
        assert_eq!(listed, changes());

        // Each bad shape: the job completes, the list is dropped, the timeline says why.
        let mut outside = changes();
        outside["files"][0]["path"] = json!("../../etc/passwd");
        let mut undercounted = changes();
        undercounted["totals"]["files"] = json!(1);
        let mut unknown_flag = changes();
        unknown_flag["files"][0]["flags"] = json!(["<img src=x>"]);
        for bad in [json!("nonsense"), json!({ "files": 3 }), outside, undercounted, unknown_flag] {
            let job = run_to_end(&ann, &device, &body, json!({ "changes": bad })).await;
            assert_eq!(job.state, JobState::Succeeded, "{bad}");
            assert!(job.changes.is_none(), "{bad}");
            assert!(
                job.events.iter().any(|e| e.kind == "system" && e.text.contains("list of changes was dropped")),
                "{:?}", job.events
            );
        }
        // Without a list, nothing is said.
        let job = run_to_end(&ann, &device, &body, json!({})).await;
        assert!(job.changes.is_none());
        assert!(!job.events.iter().any(|e| e.text.contains("list of changes")));
    }

    async fn a_finished_job_runs_again_with_its_spec(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut body = job_body(&device.device_id);
        body["secrets"] = json!(["API_KEY"]);
        body["network"] = json!(true);
        let first = run_to_end(&ann, &device, &body, json!({})).await;

        let res = ann.post_empty(&format!("/api/jobs/{}/rerun", first.id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let again: Job = res.json().await.unwrap();
        assert_ne!(again.id, first.id);
        assert_eq!(again.state, JobState::Queued);
        assert_eq!(again.spec, first.spec);
        assert!(again.continues.is_none());

        let res = ann.post(&format!("/api/jobs/{}/rerun", first.id), &json!({ "prompt": "cargo test -p x" })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let with_prompt: Job = res.json().await.unwrap();
        assert_eq!(with_prompt.spec.prompt, "cargo test -p x");
        assert_eq!(with_prompt.spec.folder, first.spec.folder);

        // A job that has not ended is not run again; bad bodies are refused.
        assert_error(ann.post_empty(&format!("/api/jobs/{}/rerun", again.id)).await, 409, "invalid_state").await;
        let path = format!("/api/jobs/{}/rerun", first.id);
        assert_error(ann.post(&path, &json!({ "prompt": 7 })).await, 400, "invalid_request").await;
        assert_error(ann.post(&path, &json!({ "prompt": "x".repeat(20_001) })).await, 422, "invalid_field").await;
        assert_error(ann.post(&path, &json!({ "prompt": "a\u{0}b" })).await, 422, "invalid_field").await;
    }

    async fn a_follow_up_waits_for_the_job_it_continues(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let first: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let claimed = device.claim_job().await;

        let mut follow = body.clone();
        follow["prompt"] = json!("now fix the failing test");
        follow["continues"] = json!(first.id);
        let res = ann.post("/api/jobs", &follow).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let second: Job = res.json().await.unwrap();
        assert_eq!(second.continues.as_ref(), Some(&first.id));
        // Queued behind a running job, and says so.
        let seen = ann.job(second.id.as_str()).await;
        assert!(seen.queued_because.as_deref().unwrap_or("").contains("has not ended"), "{:?}", seen.queued_because);
        assert_eq!(ann.job(first.id.as_str()).await.continued_by.as_ref(), Some(&second.id));
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);

        // One follow-up per job.
        assert_error(ann.post("/api/jobs", &follow).await, 409, "invalid_state").await;

        let done = json!({ "outcome": "failed", "summary": "2 tests failed", "exitCode": 1 });
        let res = device.complete(first.id.as_str(), claimed.lease_token.expose(), &done).await;
        assert_eq!(res.status(), StatusCode::OK);
        let next = device.claim_job().await;
        assert_eq!(next.id, second.id);
        let earlier = next.continues.unwrap();
        assert_eq!(earlier.job_id, first.id);
        assert_eq!(earlier.prompt, "cargo test");
        assert_eq!(earlier.summary, "2 tests failed");
        assert_eq!(earlier.outcome, Some(tether_protocol::jobs::Outcome::Failed));
    }

    async fn a_follow_up_names_the_same_computer_and_folder(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other_device = app.device(&ann, "install-2").await;
        let first = run_to_end(&ann, &device, &job_body(&device.device_id), json!({})).await;

        let mut elsewhere = job_body(&other_device.device_id);
        elsewhere["continues"] = json!(first.id);
        let message = assert_error(ann.post("/api/jobs", &elsewhere).await, 422, "invalid_field").await;
        assert!(message.contains("deviceId"), "{message}");

        let mut with_caps = device.capabilities();
        with_caps.folders.push("other".into());
        device.heartbeat_with(with_caps, &[]).await;
        let mut other_folder = job_body(&device.device_id);
        other_folder["folder"] = json!("other");
        other_folder["continues"] = json!(first.id);
        let message = assert_error(ann.post("/api/jobs", &other_folder).await, 422, "invalid_field").await;
        assert!(message.contains("folder"), "{message}");

        let mut unknown = job_body(&device.device_id);
        unknown["continues"] = json!("not-a-job");
        assert_error(ann.post("/api/jobs", &unknown).await, 404, "not_found").await;
        unknown["continues"] = json!(tether_protocol::JobId::generate());
        assert_error(ann.post("/api/jobs", &unknown).await, 404, "not_found").await;
    }

    async fn another_accounts_job_is_not_found_on_every_new_route(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let bobs_device = app.device(&bob, "install-b").await;
        let job = run_to_end(&ann, &device, &job_body(&device.device_id), json!({ "changes": changes() })).await;

        assert_error(bob.post_empty(&format!("/api/jobs/{}/rerun", job.id)).await, 404, "not_found").await;
        assert_error(bob.get(&format!("/api/jobs/{}/diff?path=package.json", job.id)).await, 404, "not_found").await;
        let mut follow = job_body(&bobs_device.device_id);
        follow["continues"] = json!(job.id);
        assert_error(bob.post("/api/jobs", &follow).await, 404, "not_found").await;
        // Nothing of Ann's job changed.
        assert!(ann.job(job.id.as_str()).await.continued_by.is_none());
    }

    async fn a_queued_job_says_why_it_waits(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let first: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let waiting = ann.job(first.id.as_str()).await;
        assert!(waiting.queued_because.as_deref().unwrap_or("").contains("Waiting for"), "{:?}", waiting.queued_because);
        device.claim_job().await;
        let second: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let busy = ann.job(second.id.as_str()).await;
        assert!(busy.queued_because.as_deref().unwrap_or("").contains("busy"), "{:?}", busy.queued_because);
        assert!(ann.job(first.id.as_str()).await.queued_because.is_none());

        app.advance(std::time::Duration::from_secs(3600));
        let offline = ann.job(second.id.as_str()).await;
        assert!(offline.queued_because.as_deref().unwrap_or("").contains("offline"), "{:?}", offline.queued_because);
    }
}
