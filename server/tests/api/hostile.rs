//! Hostile input always answers the error body: never a 500, never a panic.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app};

both_backends! {
    async fn malformed_bodies_are_400_big_ones_413_and_other_types_415(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let http = reqwest::Client::new();
        let post_raw = |path: &str, body: &'static str| {
            http.post(format!("{}{path}", app.base)).header("content-type", "application/json").body(body).send()
        };
        for body in ["{", "null", "[]", "\"x\"", "{\"email\": 5}", "{\"email\":\"a@b.co\"}", ""] {
            assert_error(post_raw("/api/auth/signup", body).await.unwrap(), 400, "invalid_request").await;
        }
        let res = http.post(format!("{}/api/auth/login", app.base)).header("content-type", "text/plain")
            .body("email=a").send().await.unwrap();
        assert_error(res, 415, "unsupported_media_type").await;
        let huge = json!({ "email": "a@b.co", "password": "x".repeat(300 * 1024), "name": "n" });
        assert_error(http.post(format!("{}/api/auth/signup", app.base)).json(&huge).send().await.unwrap(), 413, "payload_too_large").await;
        let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let res = http.post(format!("{}/api/devices/pair", app.base)).header("content-type", "application/json")
            .body(nested).send().await.unwrap();
        assert_error(res, 400, "invalid_request").await;
        // A device sending garbage is refused the same way.
        let res = device.http.post(format!("{}/api/devices/self/heartbeat", app.base))
            .bearer_auth(&device.token).header("content-type", "application/json").body("{\"capabilities\": 1}")
            .send().await.unwrap();
        assert_error(res, 400, "invalid_request").await;
        let long_password = json!({ "email": "ann@example.com", "password": "p".repeat(200_000) });
        let res = http.post(format!("{}/api/auth/login", app.base)).json(&long_password).send().await.unwrap();
        assert_error(res, 401, "invalid_credentials").await;
    }

    async fn bad_paths_methods_and_ids(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        for path in ["/api/jobs/a%20b", "/api/jobs/..%2F..%2Fetc", &format!("/api/jobs/{}", "x".repeat(65)), "/api/jobs/%00", "/api/nope", "/api", "/nope"] {
            assert_error(ann.get(path).await, 404, "not_found").await;
        }
        assert_error(ann.post_empty("/api/jobs/%E2%80%AE/cancel").await, 404, "not_found").await;
        assert_error(ann.get("/api/auth/login").await, 405, "method_not_allowed").await;
        assert_error(ann.delete("/api/jobs").await, 405, "method_not_allowed").await;
        let res = reqwest::Client::new().get(format!("{}/api/devices", app.base)).send().await.unwrap();
        assert_error(res, 401, "unauthorized").await;
    }

    async fn request_ids_are_echoed_or_made(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::new();
        let res = http.get(format!("{}/healthz", app.base)).header("x-request-id", "abc-123").send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["x-request-id"], "abc-123");
        let res = http.get(format!("{}/healthz", app.base)).header("x-request-id", "bad id\u{7f}").send().await;
        if let Ok(res) = res {
            let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
            assert_eq!(id.len(), 32);
        }
        let res = http.get(format!("{}/api/nope", app.base)).send().await.unwrap();
        assert_eq!(res.headers()["x-request-id"].len(), 32);
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found");
    }
}
