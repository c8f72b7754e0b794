//! API tokens: listed without their secret, revoked, expiring on the server's clock, their
//! last use noted at most once a minute, and never able to make more tokens.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::auth::ApiToken;

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app, TestApp, WebClient};

/// Makes a token through the session; `(id, token)`.
async fn make_token(web: &WebClient, body: Value) -> (String, String) {
    let res = web.post("/api/tokens", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(res.headers()["cache-control"], "no-store");
    let created: Value = res.json().await.unwrap();
    (
        created["id"].as_str().unwrap().to_owned(),
        created["token"].as_str().unwrap().to_owned(),
    )
}

async fn tokens(web: &WebClient) -> Vec<ApiToken> {
    let res = web.get("/api/tokens").await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

/// `GET /api/me` with a bearer token.
async fn me_with(app: &TestApp, token: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}/api/me", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

both_backends! {
    async fn tokens_are_listed_without_their_secret_and_revoked(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (first_id, first) = make_token(&ann, json!({ "name": "ci" })).await;
        app.advance(Duration::from_secs(1));
        let (second_id, second) = make_token(&ann, json!({ "name": "deploy", "expiresInDays": 30 })).await;

        let res = ann.get("/api/tokens").await;
        let text = res.text().await.unwrap();
        assert!(!text.contains(&first) && !text.contains(&second), "never the token: {text}");
        assert!(!text.contains("\"token\"") && !text.contains("hash"), "{text}");
        let listed: Vec<Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(listed[0]["id"], second_id.as_str(), "newest first");
        let mut keys: Vec<&String> = listed[0].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["createdAt", "expiresAt", "id", "lastUsedAt", "name"]);
        let listed = tokens(&ann).await;
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].name, "ci");
        assert_eq!(listed[1].expires_at, None);
        let expires = listed[0].expires_at.unwrap();
        assert_eq!(millis(expires) - millis(listed[0].created_at), 30 * 24 * 3600 * 1000);

        // Another person can neither see nor revoke them.
        let bob = app.user("bob@example.com").await;
        assert!(tokens(&bob).await.is_empty());
        assert_error(bob.delete(&format!("/api/tokens/{first_id}")).await, 404, "not_found").await;
        assert_eq!(me_with(&app, &first).await.status(), StatusCode::OK);

        assert_eq!(ann.delete(&format!("/api/tokens/{first_id}")).await.status(), StatusCode::NO_CONTENT);
        assert_error(me_with(&app, &first).await, 401, "unauthorized").await;
        assert_eq!(me_with(&app, &second).await.status(), StatusCode::OK);
        assert_eq!(tokens(&ann).await.len(), 1);
        assert_error(ann.delete(&format!("/api/tokens/{first_id}")).await, 404, "not_found").await;
        for bad in ["nope", "..%2F..", "%00", &"x".repeat(65)] {
            assert_error(ann.delete(&format!("/api/tokens/{bad}")).await, 404, "not_found").await;
        }
        // A token may revoke (itself included), just not make tokens.
        let res = reqwest::Client::new().delete(format!("{}/api/tokens/{second_id}", app.base))
            .bearer_auth(&second).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert_error(me_with(&app, &second).await, 401, "unauthorized").await;
    }

    async fn tokens_cannot_make_tokens(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_, token) = make_token(&ann, json!({ "name": "ci" })).await;
        let http = reqwest::Client::new();
        let res = http.post(format!("{}/api/tokens", app.base)).bearer_auth(&token)
            .json(&json!({ "name": "more" })).send().await.unwrap();
        let message = assert_error(res, 403, "forbidden").await;
        assert!(message.contains("cannot make tokens"), "{message}");
        // It still lists them.
        let res = http.get(format!("{}/api/tokens", app.base)).bearer_auth(&token).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let listed: Vec<ApiToken> = res.json().await.unwrap();
        assert_eq!(listed.len(), 1);
        // Signing out ends the session only; the token goes on until revoked.
        assert_eq!(ann.post_empty("/api/auth/logout").await.status(), StatusCode::NO_CONTENT);
        assert_eq!(me_with(&app, &token).await.status(), StatusCode::OK);
    }

    async fn tokens_expire_on_the_server_clock(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        for days in [json!(0), json!(366), json!(-1), json!(i64::MAX)] {
            let res = ann.post("/api/tokens", &json!({ "name": "x", "expiresInDays": days })).await;
            let message = assert_error(res, 422, "invalid_field").await;
            assert!(message.starts_with("expiresInDays:"), "{days}: {message}");
        }
        for days in [json!("7"), json!(1.5), json!(u64::MAX)] {
            let res = ann.post("/api/tokens", &json!({ "name": "x", "expiresInDays": days })).await;
            assert_error(res, 400, "invalid_request").await;
        }
        assert!(tokens(&ann).await.is_empty(), "refusals made nothing");
        let (id, token) = make_token(&ann, json!({ "name": "short", "expiresInDays": 1 })).await;
        let (_, forever) = make_token(&ann, json!({ "name": "forever", "expiresInDays": null })).await;
        app.advance(Duration::from_secs(24 * 3600 - 1));
        assert_eq!(me_with(&app, &token).await.status(), StatusCode::OK);
        app.advance(Duration::from_secs(1));
        assert_error(me_with(&app, &token).await, 401, "unauthorized").await;
        assert_eq!(me_with(&app, &forever).await.status(), StatusCode::OK);
        // Still listed, so its owner sees it ended.
        let listed = tokens(&ann).await;
        let short = listed.iter().find(|t| t.id.as_str() == id).unwrap();
        assert!(short.expires_at.unwrap() <= app.now());
    }

    async fn last_use_is_noted_at_most_once_a_minute(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_, token) = make_token(&ann, json!({ "name": "ci" })).await;
        assert_eq!(tokens(&ann).await[0].last_used_at, None);
        let first_use = app.now();
        assert_eq!(me_with(&app, &token).await.status(), StatusCode::OK);
        let noted = tokens(&ann).await[0].last_used_at.unwrap();
        assert_eq!(millis(noted), millis(first_use));
        // Uses within the minute write nothing.
        app.advance(Duration::from_secs(59));
        for _ in 0..3 {
            assert_eq!(me_with(&app, &token).await.status(), StatusCode::OK);
        }
        assert_eq!(tokens(&ann).await[0].last_used_at, Some(noted));
        app.advance(Duration::from_secs(1));
        assert_eq!(me_with(&app, &token).await.status(), StatusCode::OK);
        let later = tokens(&ann).await[0].last_used_at.unwrap();
        assert_eq!(millis(later) - millis(noted), 60_000);
    }
}
