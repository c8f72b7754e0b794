//! Another account's objects are a 404 on every route.

use serde_json::{json, Value};
use tether_protocol::jobs::JobState;

use crate::both_backends;
use crate::helpers::{assert_error, job_body, spawn_app};

both_backends! {
    async fn another_accounts_devices_and_jobs_are_not_found(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let eve = app.user("eve@example.com").await;
        let anns = app.device(&ann, "install-1").await;
        let eves = app.device(&eve, "install-1").await;
        let job = ann.create_job(&anns.device_id).await;
        let claimed = anns.claim_job().await;
        let job_id = job.id.as_str();
        let device_path = format!("/api/devices/{}", anns.device_id);

        assert_error(eve.get(&format!("/api/jobs/{job_id}")).await, 404, "not_found").await;
        assert_error(eve.post_empty(&format!("/api/jobs/{job_id}/cancel")).await, 404, "not_found").await;
        assert_error(eve.get(&format!("/api/jobs/{job_id}/events")).await, 404, "not_found").await;
        assert_error(eve.patch(&device_path, &json!({ "name": "mine" })).await, 404, "not_found").await;
        assert_error(eve.delete(&device_path).await, 404, "not_found").await;
        assert_error(eve.post("/api/jobs", &job_body(&anns.device_id)).await, 404, "not_found").await;
        let listed: Vec<Value> = eve.get("/api/jobs").await.json().await.unwrap();
        assert!(listed.is_empty());
        let listed: Vec<Value> = eve.get(&format!("/api/jobs?deviceId={}", anns.device_id)).await.json().await.unwrap();
        assert!(listed.is_empty());
        assert_eq!(eve.devices().await.len(), 1);
        assert_eq!(eve.devices().await[0].id.as_str(), eves.device_id);

        // Eve's device cannot touch Ann's job, even holding the lease.
        assert_error(eves.progress(job_id, claimed.lease_token.expose(), &json!({ "seq": 1 })).await, 404, "not_found").await;
        assert_error(eves.complete(job_id, claimed.lease_token.expose(), &json!({ "outcome": "failed", "summary": "" })).await, 404, "not_found").await;
        let beat: Value = eves.heartbeat(&[(job_id, claimed.lease_token.expose())]).await.json().await.unwrap();
        assert_eq!(beat["lost"], json!([job_id]));

        // Nothing changed for Ann.
        let mine = ann.job(job_id).await;
        assert_eq!(mine.state, JobState::Running);
        assert!(!mine.cancel_requested);
        assert_eq!(ann.devices().await[0].name, "laptop");
    }
}

both_backends! {
    async fn another_spaces_objects_are_not_found(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let made: Value = ann.post("/api/spaces", &json!({ "name": "Ann's team" })).await.json().await.unwrap();
        let anns_space = made["id"].as_str().unwrap().to_owned();
        let made: Value = bob.post("/api/spaces", &json!({ "name": "Bob's team" })).await.json().await.unwrap();
        let bobs_space = made["id"].as_str().unwrap().to_owned();
        let bobs = app.device(&bob, "install-1").await;
        let mut body = job_body(&bobs.device_id);
        body["spaceId"] = json!(bobs_space);
        let job: Value = bob.post("/api/jobs", &body).await.json().await.unwrap();
        let job_id = job["id"].as_str().unwrap();
        let ann_id = ann.me().await.account.id.to_string();
        let bob_id = bob.me().await.account.id.to_string();

        // Ann owns a space, not Bob's: every route of his answers as if it did not exist.
        for path in ["", "/ledger", "/jobs", "/events"] {
            assert_error(ann.get(&format!("/api/spaces/{bobs_space}{path}")).await, 404, "not_found").await;
        }
        let invite = ann.post(&format!("/api/spaces/{bobs_space}/invitations"), &json!({ "role": "owner" })).await;
        assert_error(invite, 404, "not_found").await;
        let promote = ann.patch(&format!("/api/spaces/{bobs_space}/members/{ann_id}"), &json!({ "role": "owner" })).await;
        assert_error(promote, 404, "not_found").await;
        assert_error(ann.delete(&format!("/api/spaces/{bobs_space}/members/{bob_id}")).await, 404, "not_found").await;
        assert_error(ann.get(&format!("/api/jobs/{job_id}")).await, 404, "not_found").await;
        // Her own computer, his space: not found either.
        let anns = app.device(&ann, "install-1").await;
        let mut body = job_body(&anns.device_id);
        body["spaceId"] = json!(bobs_space);
        assert_error(ann.post("/api/jobs", &body).await, 404, "not_found").await;
        // Bob's space job is not in hers, whatever her role there.
        let listed: Vec<Value> = ann.get(&format!("/api/spaces/{anns_space}/jobs")).await.json().await.unwrap();
        assert!(listed.is_empty());
        let spaces: Vec<Value> = ann.get("/api/spaces").await.json().await.unwrap();
        assert_eq!(spaces.len(), 1);
        assert_eq!(spaces[0]["id"], anns_space.as_str());
    }
}
