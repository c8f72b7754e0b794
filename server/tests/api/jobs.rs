//! Creating and listing jobs.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{assert_error, job_body, seal_key, spawn_app};

both_backends! {
    async fn create_checks_fields_engine_and_folder(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let id = device.device_id.as_str();
        let with = |field: &str, value: Value| {
            let mut body = job_body(id);
            body[field] = value;
            body
        };
        for (field, value, code) in [
            ("engine", json!("rm -rf /"), "unknown_engine"),
            ("folder", json!("/home/ann"), "unknown_folder"),
            ("title", json!(""), "invalid_field"),
            ("title", json!("t".repeat(201)), "invalid_field"),
            ("prompt", json!("p".repeat(20_001)), "invalid_field"),
            ("timeoutMinutes", json!(0), "invalid_field"),
            ("timeoutMinutes", json!(1441), "invalid_field"),
            ("secrets", json!(["ok", "not ok"]), "invalid_field"),
        ] {
            let message = assert_error(ann.post("/api/jobs", &with(field, value)).await, 422, code).await;
            assert!(message.contains(field), "{message}");
        }
        for (field, value) in [("mode", json!("yolo")), ("network", json!("yes")), ("timeoutMinutes", json!(-1))] {
            assert_error(ann.post("/api/jobs", &with(field, value)).await, 400, "invalid_request").await;
        }
        let res = ann.post("/api/jobs", &with("secrets", json!(["GITHUB_TOKEN"]))).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let job: Value = res.json().await.unwrap();
        assert_eq!(job["spec"]["secrets"], json!(["GITHUB_TOKEN"]));
        assert_eq!(job["state"], "queued");
        assert_eq!(job["events"], json!([]));
        assert_eq!(job["decisions"], json!([]));

        // A device that never reported capabilities knows no engine.
        let silent = app.device_with_key(&ann, "install-2", seal_key()).await;
        assert_error(ann.post("/api/jobs", &job_body(&silent.device_id)).await, 422, "unknown_engine").await;
        assert_error(ann.post("/api/jobs", &job_body("no-such-device")).await, 404, "not_found").await;
    }

    async fn list_filters_newest_first(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let one = app.device(&ann, "install-1").await;
        let two = app.device(&ann, "install-2").await;
        let first = ann.create_job(&one.device_id).await;
        let second = ann.create_job(&two.device_id).await;
        let third = ann.create_job(&one.device_id).await;
        one.claim_job().await;

        let all: Vec<Value> = ann.get("/api/jobs").await.json().await.unwrap();
        let ids: Vec<&str> = all.iter().map(|j| j["id"].as_str().unwrap()).collect();
        assert_eq!(ids, [third.id.as_str(), second.id.as_str(), first.id.as_str()]);
        assert!(all.iter().all(|j| j["events"] == json!([])));
        let on_one: Vec<Value> = ann.get(&format!("/api/jobs?deviceId={}", one.device_id)).await.json().await.unwrap();
        assert_eq!(on_one.len(), 2);
        let running: Vec<Value> = ann.get("/api/jobs?state=running").await.json().await.unwrap();
        assert_eq!(running.len(), 1);
        assert_eq!(running[0]["id"], json!(first.id));
        let queued_on_one: Vec<Value> = ann.get(&format!("/api/jobs?deviceId={}&state=queued", one.device_id)).await.json().await.unwrap();
        assert_eq!(queued_on_one.len(), 1);
        assert_error(ann.get("/api/jobs?state=exploded").await, 422, "invalid_field").await;
        assert_error(ann.get("/api/jobs?deviceId=../etc").await, 422, "invalid_field").await;
        let empty: Vec<Value> = ann.get("/api/jobs?deviceId=&state=").await.json().await.unwrap();
        assert_eq!(empty.len(), 3);
    }
}
