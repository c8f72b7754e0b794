//! `Idempotency-Key`: a retried creation answers the first result, the key is bound to one
//! route and body, per account, one creation however many arrive at once, and free again
//! after a day.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tether_protocol::jobs::Job;
use tether_server::store::idempotency;

use crate::both_backends;
use crate::helpers::{assert_error, job_body, query_i64, seal_key, spawn_app, TestApp, WebClient};

const KEY: &str = "c1d2e3f4-retry-of-the-same-job";

/// `POST path` with `body` and `Idempotency-Key: key`.
async fn post_keyed(web: &WebClient, path: &str, key: &str, body: &Value) -> Response {
    let mut request = web
        .http
        .post(format!("{}{path}", web.base))
        .header("idempotency-key", key)
        .json(body);
    if let Some(csrf) = &web.csrf {
        request = request.header("x-tether-csrf", csrf);
    }
    request.send().await.unwrap()
}

async fn job_ids(web: &WebClient) -> Vec<String> {
    let res = web.get("/api/jobs").await;
    assert_eq!(res.status(), StatusCode::OK);
    let jobs: Vec<Job> = res.json().await.unwrap();
    jobs.into_iter().map(|job| job.id.to_string()).collect()
}

/// What the sweeper's housekeeping does to the keys, at the server's now.
async fn sweep_keys(app: &TestApp) {
    let mut tx = app.store.begin().await.unwrap();
    idempotency::delete_stale(&mut tx, app.now().timestamp_millis())
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

both_backends! {
    async fn a_retried_job_creation_answers_the_first_job(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);

        let first = post_keyed(&ann, "/api/jobs", KEY, &body).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        assert!(first.headers().get("idempotent-replayed").is_none());
        let first: Value = first.json().await.unwrap();

        let again = post_keyed(&ann, "/api/jobs", KEY, &body).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.headers()["content-type"], "application/json");
        let again: Value = again.json().await.unwrap();
        assert_eq!(again, first, "the first answer, as it was");
        assert_eq!(job_ids(&ann).await, vec![first["id"].as_str().unwrap().to_owned()]);

        // Without the key each request creates, as before.
        ann.create_job(&device.device_id).await;
        assert_eq!(job_ids(&ann).await.len(), 2);
    }

    async fn the_key_with_another_body_or_route_is_422(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let res = post_keyed(&ann, "/api/jobs", KEY, &body).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let job: Job = res.json().await.unwrap();

        let mut other = body.clone();
        other["prompt"] = json!("cargo test --release");
        let message = assert_error(post_keyed(&ann, "/api/jobs", KEY, &other).await, 422, "invalid_field").await;
        assert!(message.contains("Idempotency-Key"), "{message}");

        let res = ann.post_empty(&format!("/api/jobs/{}/cancel", job.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let rerun = format!("/api/jobs/{}/rerun", job.id);
        let message = assert_error(post_keyed(&ann, &rerun, KEY, &json!({})).await, 422, "invalid_field").await;
        assert!(message.contains("Idempotency-Key"), "{message}");
        let message = assert_error(post_keyed(&ann, "/api/tokens", KEY, &json!({ "name": "ci" })).await, 422, "invalid_field").await;
        assert!(message.contains("Idempotency-Key"), "{message}");
        assert_eq!(job_ids(&ann).await.len(), 1, "nothing more was made");
    }

    async fn a_key_must_be_visible_ascii_of_bounded_length(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let long = "k".repeat(256);
        for key in ["", "two words", "tab\there", long.as_str()] {
            let message = assert_error(post_keyed(&ann, "/api/jobs", key, &body).await, 400, "invalid_request").await;
            assert!(message.contains("Idempotency-Key"), "{key:?}: {message}");
        }
        assert!(job_ids(&ann).await.is_empty());
        let longest = "k".repeat(255);
        let res = post_keyed(&ann, "/api/jobs", &longest, &body).await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    async fn another_accounts_key_is_its_own(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let anns = app.device(&ann, "install-1").await;
        let bobs = app.device(&bob, "install-2").await;
        let res = post_keyed(&ann, "/api/jobs", KEY, &job_body(&anns.device_id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let res = post_keyed(&bob, "/api/jobs", KEY, &job_body(&bobs.device_id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert!(res.headers().get("idempotent-replayed").is_none());
        assert_eq!(job_ids(&ann).await.len(), 1);
        assert_eq!(job_ids(&bob).await.len(), 1);
    }

    async fn a_failed_request_leaves_the_key_free(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut body = job_body(&device.device_id);
        body["engine"] = json!("nope");
        assert_error(post_keyed(&ann, "/api/jobs", KEY, &body).await, 422, "unknown_engine").await;
        let res = post_keyed(&ann, "/api/jobs", KEY, &job_body(&device.device_id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert!(res.headers().get("idempotent-replayed").is_none());
    }

    async fn a_rerun_a_token_and_an_approval_retried_make_one(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let ended = ann.create_job(&device.device_id).await;
        let res = ann.post_empty(&format!("/api/jobs/{}/cancel", ended.id)).await;
        assert_eq!(res.status(), StatusCode::OK);

        let rerun = format!("/api/jobs/{}/rerun", ended.id);
        let prompt = json!({ "prompt": "again" });
        let first = post_keyed(&ann, &rerun, "rerun-1", &prompt).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        let first: Value = first.json().await.unwrap();
        let again = post_keyed(&ann, &rerun, "rerun-1", &prompt).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(again.json::<Value>().await.unwrap()["id"], first["id"]);
        assert_eq!(job_ids(&ann).await.len(), 2, "the job and one rerun");

        let name = json!({ "name": "ci" });
        let first = post_keyed(&ann, "/api/tokens", "token-1", &name).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        let first: Value = first.json().await.unwrap();
        let again = post_keyed(&ann, "/api/tokens", "token-1", &name).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(again.headers()["cache-control"], "no-store");
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["id"], first["id"]);
        assert_eq!(again["token"], first["token"], "the same token works");
        let token = first["token"].as_str().unwrap();
        let in_clear = format!(
            "SELECT COUNT(*) FROM idempotency_keys WHERE answer LIKE '%{token}%' OR idem_key = 'token-1'"
        );
        assert_eq!(query_i64(&app.store, &in_clear).await, Some(0), "neither the token nor the key in the clear");
        assert_eq!(query_i64(&app.store, "SELECT COUNT(*) FROM idempotency_keys WHERE answer IS NOT NULL").await, Some(2), "the rerun and the token");
        let tokens: Vec<Value> = ann.get("/api/tokens").await.json().await.unwrap();
        assert_eq!(tokens.len(), 1);

        // A second approval of a code already used is 404; the retried one is the first's.
        let paired: Value = app.pair("install-2", &seal_key()).await.json().await.unwrap();
        let code = json!({ "userCode": paired["userCode"] });
        let first = post_keyed(&ann, "/api/devices/link", "link-1", &code).await;
        assert_eq!(first.status(), StatusCode::OK);
        let first: Value = first.json().await.unwrap();
        let again = post_keyed(&ann, "/api/devices/link", "link-1", &code).await;
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(again.json::<Value>().await.unwrap(), first);
        assert_error(ann.post("/api/devices/link", &code).await, 404, "unknown_code").await;
    }

    async fn ten_requests_at_once_with_one_key_make_one_job(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let answers = futures_util::future::join_all(
            (0..10).map(|_| post_keyed(&ann, "/api/jobs", KEY, &body)),
        )
        .await;
        let mut created = Vec::new();
        for res in answers {
            match res.status() {
                StatusCode::CREATED => {
                    created.push(res.json::<Value>().await.unwrap()["id"].clone());
                }
                _ => {
                    let message = assert_error(res, 409, "invalid_state").await;
                    assert!(message.contains("in progress"), "{message}");
                }
            }
        }
        let jobs = job_ids(&ann).await;
        assert_eq!(jobs.len(), 1, "one creation");
        assert!(!created.is_empty());
        assert!(created.iter().all(|id| *id == json!(jobs[0])), "{created:?}");
        // Once answered, every retry gets the job.
        let res = post_keyed(&ann, "/api/jobs", KEY, &body).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert_eq!(res.json::<Value>().await.unwrap()["id"], json!(jobs[0]));
    }

    async fn after_a_day_the_key_is_free(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let res = post_keyed(&ann, "/api/jobs", KEY, &body).await;
        assert_eq!(res.status(), StatusCode::CREATED);

        app.advance(Duration::from_secs(23 * 60 * 60));
        sweep_keys(&app).await;
        let res = post_keyed(&ann, "/api/jobs", KEY, &body).await;
        assert_eq!(res.headers()["idempotent-replayed"], "true", "kept for a day");
        assert_eq!(job_ids(&ann).await.len(), 1);

        app.advance(Duration::from_secs(60 * 60 + 1));
        sweep_keys(&app).await;
        let mut other = body.clone();
        other["prompt"] = json!("another day, another job");
        let res = post_keyed(&ann, "/api/jobs", KEY, &other).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert!(res.headers().get("idempotent-replayed").is_none());
        assert_eq!(job_ids(&ann).await.len(), 2);
    }
}

#[tokio::test]
async fn every_creating_route_documents_the_header() {
    let app = spawn_app(crate::helpers::Backend::Sqlite).await;
    let res = app.web().get("/api/openapi.json").await;
    assert_eq!(res.status(), StatusCode::OK);
    let document: Value = res.json().await.unwrap();
    for path in [
        "/api/jobs",
        "/api/jobs/{id}/rerun",
        "/api/tokens",
        "/api/devices/link",
    ] {
        let operation = &document["paths"][path]["post"];
        let header = operation["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|parameter| parameter["name"] == "Idempotency-Key")
            .unwrap_or_else(|| panic!("{path} documents Idempotency-Key"));
        assert_eq!(header["in"], "header");
        assert_eq!(header["required"], false);
        for status in ["400", "409", "422"] {
            assert!(
                operation["responses"][status].is_object(),
                "{path} {status}"
            );
        }
    }
    // A route that creates nothing does not take it.
    let cancel = &document["paths"]["/api/jobs/{id}/cancel"]["post"]["parameters"];
    assert!(cancel
        .as_array()
        .unwrap()
        .iter()
        .all(|parameter| parameter["name"] != "Idempotency-Key"));
}
