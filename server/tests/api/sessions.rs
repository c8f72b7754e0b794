//! A person's own security: changing the password and signing out everywhere end every
//! other session at once (a password change also the API tokens, unless kept); the sessions
//! list says where and when each was last used, coarsely, and ends one.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::auth::Session;

use crate::both_backends;
use crate::helpers::{assert_error, query_i64, spawn_app, two_replicas, TestApp, WebClient};

const PASSWORD: &str = "correct horse battery";
const FIREFOX_LINUX: &str =
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
const SAFARI_IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) \
    AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";

/// A browser with its own cookies, sending `user_agent`.
fn browser(app: &TestApp, user_agent: &str) -> WebClient {
    WebClient {
        base: app.base.clone(),
        http: reqwest::Client::builder()
            .cookie_store(true)
            .user_agent(user_agent)
            .build()
            .unwrap(),
        csrf: None,
    }
}

/// Ann signed up in one browser and signed in from a second.
async fn two_sessions(app: &TestApp) -> (WebClient, WebClient) {
    let mut first = browser(app, FIREFOX_LINUX);
    let res = first.signup("ann@example.com", PASSWORD, "Ann").await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let mut second = browser(app, SAFARI_IPHONE);
    let res = second.login("ann@example.com", PASSWORD).await;
    assert_eq!(res.status(), StatusCode::OK);
    (first, second)
}

async fn make_token(web: &WebClient) -> String {
    let res = web.post("/api/tokens", &json!({ "name": "ci" })).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let created: Value = res.json().await.unwrap();
    created["token"].as_str().unwrap().to_owned()
}

async fn me_with_token(app: &TestApp, token: &str) -> StatusCode {
    reqwest::Client::new()
        .get(format!("{}/api/me", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
}

/// Whether `res`, a stream, ends (rather than sends more or stays open) within `within`.
async fn ends_within(res: &mut reqwest::Response, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, res.chunk()).await {
            Err(_) => return false,
            Ok(Ok(None) | Err(_)) => return true,
            Ok(Ok(Some(_))) => {}
        }
    }
}

async fn sessions(web: &WebClient) -> Vec<Session> {
    let res = web.get("/api/auth/sessions").await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

async fn change(
    web: &WebClient,
    current: &str,
    new: &str,
    keep: Option<bool>,
) -> reqwest::Response {
    let mut body = json!({ "currentPassword": current, "newPassword": new });
    if let Some(keep) = keep {
        body["keepApiTokens"] = json!(keep);
    }
    web.post("/api/auth/password", &body).await
}

/// Sessions end at once on every replica: no replica remembers one, and the streams a
/// session holds open on another replica are told through Redis.
#[tokio::test]
async fn sessions_end_at_once_on_every_replica() {
    let Some((a, b)) = two_replicas(|_| {}).await else {
        return;
    };
    let (first, mut second) = two_sessions(&a).await;
    second.base = b.base.clone();
    assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
    let mut stream = second.get("/api/decisions/events").await;
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(!ends_within(&mut stream, Duration::from_millis(300)).await);

    assert_eq!(
        first
            .post_empty("/api/auth/sessions/end-others")
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_error(second.get("/api/me").await, 401, "unauthorized").await;
    assert!(
        ends_within(&mut stream, Duration::from_secs(5)).await,
        "B's stream of the ended session ends"
    );
    let mut on_b = first;
    on_b.base = b.base.clone();
    assert_eq!(on_b.get("/api/me").await.status(), StatusCode::OK);
}

/// A replica believes an API token it checked recently without reading it again; one
/// revoked, or all of them ended by a password change, on another replica is refused at once.
#[tokio::test]
async fn api_tokens_end_at_once_on_every_replica() {
    let Some((a, b)) = two_replicas(|_| {}).await else {
        return;
    };
    let (first, _) = two_sessions(&a).await;
    let res = first
        .post("/api/tokens", &json!({ "name": "revoked" }))
        .await;
    let created: Value = res.json().await.unwrap();
    let (revoked_id, revoked) = (
        created["id"].as_str().unwrap(),
        created["token"].as_str().unwrap(),
    );
    let by_password = make_token(&first).await;
    for token in [revoked, &by_password] {
        // Twice each, so B answers the second from its memory.
        assert_eq!(me_with_token(&b, token).await, StatusCode::OK);
        assert_eq!(me_with_token(&b, token).await, StatusCode::OK);
    }
    let res = first.delete(&format!("/api/tokens/{revoked_id}")).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(me_with_token(&b, revoked).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        me_with_token(&b, &by_password).await,
        StatusCode::OK,
        "only the revoked one"
    );

    let res = change(&first, PASSWORD, "purple walrus umbrella", None).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        me_with_token(&b, &by_password).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        me_with_token(&a, &by_password).await,
        StatusCode::UNAUTHORIZED
    );
}

both_backends! {
    async fn changing_the_password_ends_other_sessions_and_tokens_but_not_this_one(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let token = make_token(&first).await;
        // Used, so this replica remembers it.
        assert_eq!(me_with_token(&app, &token).await, StatusCode::OK);

        let res = change(&first, PASSWORD, "purple walrus umbrella", None).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        // The other browser is out at once; this one goes on.
        assert_error(second.get("/api/me").await, 401, "unauthorized").await;
        assert_eq!(first.get("/api/me").await.status(), StatusCode::OK);
        assert_eq!(first.post("/api/tokens", &json!({ "name": "after" })).await.status(), StatusCode::CREATED);
        // The token was revoked (keepApiTokens left out means false).
        assert_eq!(me_with_token(&app, &token).await, StatusCode::UNAUTHORIZED);
        // Only the new password signs in.
        let mut again = app.web();
        assert_error(again.login("ann@example.com", PASSWORD).await, 401, "invalid_credentials").await;
        assert_eq!(again.login("ann@example.com", "purple walrus umbrella").await.status(), StatusCode::OK);
    }

    async fn changing_the_password_keeps_tokens_when_asked(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let token = make_token(&first).await;
        let res = change(&first, PASSWORD, "purple walrus umbrella", Some(true)).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert_eq!(me_with_token(&app, &token).await, StatusCode::OK);
        assert_error(second.get("/api/me").await, 401, "unauthorized").await;
    }

    async fn a_wrong_current_password_or_a_weak_new_one_changes_nothing(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let token = make_token(&first).await;

        let message = assert_error(
            change(&first, "not my password", "purple walrus umbrella", None).await,
            401,
            "invalid_credentials",
        )
        .await;
        assert!(message.contains("current password"), "{message}");
        let message = assert_error(change(&first, PASSWORD, "password", None).await, 422, "invalid_field").await;
        assert!(message.starts_with("newPassword: is too easy to guess."), "{message}");
        let message = assert_error(change(&first, PASSWORD, "short", None).await, 422, "invalid_field").await;
        assert!(message.starts_with("newPassword: must be at least 8"), "{message}");
        // A wrong current password with a weak new one is the wrong password.
        assert_error(change(&first, "not my password", "password", None).await, 401, "invalid_credentials").await;
        let res = first.post("/api/auth/password", &json!({ "newPassword": "purple walrus umbrella" })).await;
        assert_error(res, 400, "invalid_request").await;

        // Nothing changed: both sessions, the token and the old password work.
        assert_eq!(first.get("/api/me").await.status(), StatusCode::OK);
        assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
        assert_eq!(me_with_token(&app, &token).await, StatusCode::OK);
        assert_eq!(app.web().login("ann@example.com", PASSWORD).await.status(), StatusCode::OK);

        // Guesses count against the email like sign-in's: past a few, 429 even for the right one.
        for _ in 0..10 {
            let res = change(&first, "not my password", "purple walrus umbrella", None).await;
            if res.status() == StatusCode::TOO_MANY_REQUESTS {
                break;
            }
            assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        }
        let res = change(&first, PASSWORD, "purple walrus umbrella", None).await;
        assert_error(res, 429, "rate_limited").await;
        assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
    }

    async fn an_api_token_cannot_change_the_password_or_end_sessions(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let token = make_token(&first).await;
        let http = reqwest::Client::new();
        let res = http.post(format!("{}/api/auth/password", app.base)).bearer_auth(&token)
            .json(&json!({ "currentPassword": PASSWORD, "newPassword": "purple walrus umbrella" }))
            .send().await.unwrap();
        assert_error(res, 403, "forbidden").await;
        let res = http.post(format!("{}/api/auth/sessions/end-others", app.base)).bearer_auth(&token)
            .send().await.unwrap();
        assert_error(res, 403, "forbidden").await;
        let res = http.get(format!("{}/api/auth/sessions", app.base)).bearer_auth(&token)
            .send().await.unwrap();
        assert_error(res, 403, "forbidden").await;
        assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
    }

    async fn signing_out_everywhere_else_ends_the_other_sessions_only(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let mut third = app.web();
        assert_eq!(third.login("ann@example.com", PASSWORD).await.status(), StatusCode::OK);
        let bob = app.user("bob@example.com").await;
        let token = make_token(&first).await;

        assert_eq!(second.post_empty("/api/auth/sessions/end-others").await.status(), StatusCode::NO_CONTENT);
        assert_error(first.get("/api/me").await, 401, "unauthorized").await;
        assert_error(third.get("/api/me").await, 401, "unauthorized").await;
        assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
        // Not another person's, and not the tokens.
        assert_eq!(bob.get("/api/me").await.status(), StatusCode::OK);
        assert_eq!(me_with_token(&app, &token).await, StatusCode::OK);
        assert_eq!(sessions(&second).await.len(), 1);
        // Without the CSRF header the cookie alone ends nothing.
        let res = second.http.post(format!("{}/api/auth/sessions/end-others", app.base)).send().await.unwrap();
        assert_error(res, 403, "csrf_rejected").await;
    }

    async fn an_ended_sessions_open_event_stream_ends_too(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let mut third = app.web();
        assert_eq!(third.login("ann@example.com", PASSWORD).await.status(), StatusCode::OK);
        let mut kept = first.get("/api/decisions/events").await;
        let mut ended = second.get("/api/decisions/events").await;
        assert_eq!(ended.status(), StatusCode::OK);
        assert!(!ends_within(&mut ended, Duration::from_millis(300)).await, "open while its session holds");
        let third_id = sessions(&third).await.into_iter().find(|session| session.current).unwrap().id;
        let mut third_stream = third.get("/api/decisions/events").await;

        // One ended by id, then the rest by signing out everywhere else.
        let res = first.delete(&format!("/api/auth/sessions/{third_id}")).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert!(ends_within(&mut third_stream, Duration::from_secs(5)).await, "the ended session's stream ends");
        assert!(!ends_within(&mut ended, Duration::from_millis(300)).await, "another session's goes on");
        assert_eq!(first.post_empty("/api/auth/sessions/end-others").await.status(), StatusCode::NO_CONTENT);
        assert!(ends_within(&mut ended, Duration::from_secs(5)).await, "the ended session's stream ends");
        assert!(!ends_within(&mut kept, Duration::from_millis(300)).await, "the asking session's goes on");
    }

    async fn the_sessions_list_says_where_and_when_and_ends_one(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;

        let res = first.get("/api/auth/sessions").await;
        assert_eq!(res.headers()["cache-control"], "no-store");
        let text = res.text().await.unwrap();
        assert!(!text.contains("hash") && !text.contains("csrf") && !text.contains("token"), "{text}");
        let listed: Vec<Value> = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<&String> = listed[0].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["address", "browser", "createdAt", "current", "id", "lastUsedAt", "platform"]);

        let listed = sessions(&first).await;
        assert_eq!(listed.len(), 2, "{listed:?}");
        let mine = listed.iter().find(|session| session.current).unwrap();
        let other = listed.iter().find(|session| !session.current).unwrap();
        assert_eq!(listed.iter().filter(|session| session.current).count(), 1);
        assert_eq!((mine.browser.as_str(), mine.platform.as_str()), ("Firefox", "Linux"));
        assert_eq!((other.browser.as_str(), other.platform.as_str()), ("Safari", "iOS"));
        // Loopback, coarsened to its network.
        assert_eq!(mine.address, "127.0.0.0/24");
        // Seen from the other browser, the marks swap.
        let theirs = sessions(&second).await;
        assert!(theirs.iter().any(|session| session.current && session.id == other.id));

        // Last use moves at most once a minute.
        let used = other.last_used_at;
        app.advance(Duration::from_secs(30));
        assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
        let listed = sessions(&first).await;
        assert_eq!(listed.iter().find(|session| session.id == other.id).unwrap().last_used_at, used);
        app.advance(Duration::from_secs(31));
        assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
        let listed = sessions(&first).await;
        let moved = listed.iter().find(|session| session.id == other.id).unwrap().last_used_at;
        assert_eq!(moved.timestamp_millis(), app.now().timestamp_millis(), "written at the request's time");
        assert_eq!(listed[0].id, other.id, "the most recently used first");

        assert_eq!(first.delete(&format!("/api/auth/sessions/{}", other.id)).await.status(), StatusCode::NO_CONTENT);
        assert_error(second.get("/api/me").await, 401, "unauthorized").await;
        assert_eq!(first.get("/api/me").await.status(), StatusCode::OK);
        assert_eq!(sessions(&first).await.len(), 1);
        assert_error(first.delete(&format!("/api/auth/sessions/{}", other.id)).await, 404, "not_found").await;
        for bad in ["nope", "..%2F..", &"x".repeat(65)] {
            assert_error(first.delete(&format!("/api/auth/sessions/{bad}")).await, 404, "not_found").await;
        }

        // Ending this browser's own session signs it out.
        let res = first.delete(&format!("/api/auth/sessions/{}", mine.id)).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert!(res.headers().get_all("set-cookie").iter().count() >= 2);
        assert_error(first.get("/api/me").await, 401, "unauthorized").await;
    }

    async fn another_accounts_session_is_not_found(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let bob = app.user("bob@example.com").await;
        let listed = sessions(&first).await;
        assert!(!sessions(&bob).await.iter().any(|session| listed.iter().any(|mine| mine.id == session.id)));
        for session in &listed {
            assert_error(bob.delete(&format!("/api/auth/sessions/{}", session.id)).await, 404, "not_found").await;
        }
        assert_eq!(first.get("/api/me").await.status(), StatusCode::OK);
        assert_eq!(second.get("/api/me").await.status(), StatusCode::OK);
        assert_eq!(
            query_i64(&app.store, "SELECT COUNT(*) FROM sessions").await,
            Some(3),
        );
    }

    async fn the_account_page_shows_the_password_form_and_the_sessions(backend) {
        let app = spawn_app(backend).await;
        let (first, second) = two_sessions(&app).await;
        let other = sessions(&second).await.into_iter().find(|session| session.current).unwrap();
        let text = first.get("/account").await.text().await.unwrap();
        assert!(text.contains(r#"data-api="/api/auth/password""#), "{text}");
        assert!(text.contains(r#"name="currentPassword""#) && text.contains(r#"name="newPassword""#), "{text}");
        assert!(text.contains(r#"<input type="checkbox" name="keepApiTokens">"#), "unticked by default: {text}");
        assert!(text.contains(r#"data-api="/api/auth/sessions/end-others""#), "{text}");
        assert!(text.contains("Firefox on Linux") && text.contains("Safari on iOS"), "{text}");
        assert!(text.contains("this browser"), "{text}");
        assert!(text.contains("127.0.0.0/24"), "{text}");
        // An End button for the other session only.
        assert!(text.contains(&format!(r#"data-api="/api/auth/sessions/{}""#, other.id)), "{text}");
        assert_eq!(text.matches(r#"data-api="/api/auth/sessions/"#).count(), 2, "end-others and one End: {text}");
    }
}
