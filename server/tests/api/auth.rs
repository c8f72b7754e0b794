//! Signup, login, logout, me, API tokens, CSRF.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tether_server::rate_limits::Rate;

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app, spawn_app_with};

/// The `Retry-After` seconds of an answer.
fn retry_after(res: &Response) -> u64 {
    res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

both_backends! {
    async fn first_user_is_admin_and_each_signup_makes_an_account(backend) {
        let app = spawn_app(backend).await;
        let mut first = app.web();
        let res = first.signup("Ann@Example.com", "correct horse", "Ann").await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let cookie = res.headers().get_all("set-cookie").iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .find(|c| c.starts_with("tether_session=")).unwrap();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/"));
        assert!(!cookie.contains("Secure"));
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["user"]["email"], "ann@example.com");
        assert_eq!(body["user"]["isAdmin"], true);
        assert_eq!(body["account"]["name"], "Ann");
        let me = first.me().await;
        assert_eq!(me.user.name, "Ann");
        assert!(me.user.is_admin);

        let second = app.user("bob@example.com").await;
        let second_me = second.me().await;
        assert!(!second_me.user.is_admin);
        assert_ne!(second_me.account.id, me.account.id);
    }

    async fn signup_validates_and_refuses_taken_emails(backend) {
        let app = spawn_app(backend).await;
        let _ann = app.user("ann@example.com").await;
        let mut web = app.web();
        let message = assert_error(web.signup("not-an-email", "correct horse", "X").await, 422, "invalid_field").await;
        assert!(message.contains("email"));
        let message = assert_error(web.signup("x@example.com", "short", "X").await, 422, "invalid_field").await;
        assert!(message.contains("password"));
        let message = assert_error(web.signup("x@example.com", "correct horse", "   ").await, 422, "invalid_field").await;
        assert!(message.contains("name"));
        let long_name = "n".repeat(10_000);
        assert_error(web.signup("x@example.com", "correct horse", &long_name).await, 422, "invalid_field").await;
        assert_error(web.signup("ANN@example.com", "correct horse", "Ann").await, 409, "email_taken").await;
    }

    async fn login_logout_and_wrong_credentials(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let mut web = app.web();
        assert_error(web.login("ann@example.com", "wrong password").await, 401, "invalid_credentials").await;
        assert_error(web.login("nobody@example.com", "correct horse battery").await, 401, "invalid_credentials").await;
        let res = web.login("ann@example.com", "correct horse battery").await;
        assert_eq!(res.status(), StatusCode::OK);
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["user"]["email"], "ann@example.com");
        assert_eq!(web.me().await.user.id, ann.me().await.user.id);

        assert_eq!(web.post_empty("/api/auth/logout").await.status(), StatusCode::NO_CONTENT);
        assert_error(web.get("/api/me").await, 401, "unauthorized").await;
        // The other session is untouched.
        assert_eq!(ann.get("/api/me").await.status(), StatusCode::OK);
    }

    async fn api_tokens_authenticate_without_csrf(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let res = ann.post("/api/tokens", &json!({ "name": "ci" })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let created: Value = res.json().await.unwrap();
        let token = created["token"].as_str().unwrap();
        assert!(token.starts_with("tut_"));
        assert_eq!(created["name"], "ci");

        let http = reqwest::Client::new();
        let res = http.get(format!("{}/api/me", app.base)).bearer_auth(token).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let me: Value = res.json().await.unwrap();
        assert_eq!(me["user"]["email"], "ann@example.com");
        // A token cannot make more tokens: only a browser session can.
        let res = http.post(format!("{}/api/tokens", app.base)).bearer_auth(token)
            .json(&json!({ "name": "second" })).send().await.unwrap();
        assert_error(res, 403, "forbidden").await;

        for bad in ["tut_nope", "tdt_nope", "garbage"] {
            let res = http.get(format!("{}/api/me", app.base)).bearer_auth(bad).send().await.unwrap();
            assert_error(res, 401, "unauthorized").await;
        }
        assert_error(ann.post("/api/tokens", &json!({ "name": "" })).await, 422, "invalid_field").await;
    }

    async fn cookie_changes_need_the_csrf_header(backend) {
        let app = spawn_app(backend).await;
        let mut ann = app.user("ann@example.com").await;
        let good = ann.csrf.take();
        assert_error(ann.post("/api/tokens", &json!({ "name": "x" })).await, 403, "csrf_rejected").await;
        ann.csrf = Some("wrong".to_owned());
        assert_error(ann.post("/api/tokens", &json!({ "name": "x" })).await, 403, "csrf_rejected").await;
        ann.csrf = good;
        assert_eq!(ann.post("/api/tokens", &json!({ "name": "x" })).await.status(), StatusCode::CREATED);
        // GET /api/me hands the token to pages that lost it.
        let res = ann.get("/api/me").await;
        assert_eq!(res.headers().get("x-tether-csrf").unwrap().to_str().unwrap(), ann.csrf.as_deref().unwrap());

        let res = reqwest::Client::new()
            .post(format!("{}/api/auth/signup", app.base))
            .header("origin", "https://evil.example")
            .json(&json!({ "email": "eve@example.com", "password": "correct horse", "name": "Eve" }))
            .send().await.unwrap();
        assert_error(res, 403, "csrf_rejected").await;
        let res = reqwest::Client::new()
            .post(format!("{}/api/auth/login", app.base))
            .header("origin", app.base.clone())
            .json(&json!({ "email": "ann@example.com", "password": "correct horse battery" }))
            .send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }

    async fn common_and_trivial_passwords_are_refused_with_the_reason(backend) {
        let app = spawn_app(backend).await;
        let mut web = app.web();
        for weak in ["password", "12345678", "        ", "qwertyuiop", "iloveyou2024", "ann@example.com"] {
            let message = assert_error(web.signup("ann@example.com", weak, "Ann").await, 422, "invalid_field").await;
            assert!(message.starts_with("password: is too easy to guess."), "{weak:?}: {message}");
        }
        // Built from the person's own name and email.
        let message = assert_error(web.signup("margaret.hamilton@example.com", "margarethamilton", "Margaret Hamilton").await, 422, "invalid_field").await;
        assert!(message.starts_with("password:"), "{message}");
        // Nothing was made by the refusals.
        assert_eq!(web.signup("ann@example.com", "correct horse battery", "Ann").await.status(), StatusCode::CREATED);
    }

    async fn sign_in_backs_off_per_email(backend) {
        let app = spawn_app(backend).await;
        let _ann = app.user("ann@example.com").await;
        let mut web = app.web();
        for _ in 0..5 {
            assert_error(web.login("ann@example.com", "wrong password").await, 401, "invalid_credentials").await;
        }
        // The fifth failure blocks the next attempt for 2 s, even with the right password,
        // and however the email is typed.
        let res = web.login(" ANN@example.com ", "correct horse battery").await;
        assert_eq!(retry_after(&res), 2);
        let message = assert_error(res, 429, "rate_limited").await;
        assert!(message.contains("try again in 2 s"), "{message}");
        // Another email is not held up by Ann's.
        assert_error(web.login("bob@example.com", "wrong password").await, 401, "invalid_credentials").await;
        // Each further failure doubles the wait.
        app.advance(Duration::from_secs(2));
        assert_error(web.login("ann@example.com", "wrong password").await, 401, "invalid_credentials").await;
        let res = web.login("ann@example.com", "correct horse battery").await;
        assert_eq!(retry_after(&res), 4);
        assert_error(res, 429, "rate_limited").await;
        app.advance(Duration::from_secs(3));
        assert_eq!(retry_after(&web.login("ann@example.com", "correct horse battery").await), 1);
        app.advance(Duration::from_secs(1));
        // The right password, once the wait is over, signs in and clears the count.
        assert_eq!(web.login("ann@example.com", "correct horse battery").await.status(), StatusCode::OK);
        for _ in 0..5 {
            assert_error(web.login("ann@example.com", "wrong password").await, 401, "invalid_credentials").await;
        }
        assert_error(web.login("ann@example.com", "wrong password").await, 429, "rate_limited").await;
        // An unknown email is treated exactly the same: its answers tell nothing.
        for _ in 0..5 {
            assert_error(web.login("nobody@example.com", "wrong password").await, 401, "invalid_credentials").await;
        }
        let res = web.login("nobody@example.com", "wrong password").await;
        assert_eq!(retry_after(&res), 2);
        assert_error(res, 429, "rate_limited").await;
        // The waits stop growing at 15 minutes, and the count is forgotten after a day.
        for _ in 0..12 {
            app.advance(Duration::from_secs(15 * 60));
            assert_error(web.login("nobody@example.com", "wrong password").await, 401, "invalid_credentials").await;
        }
        assert_eq!(retry_after(&web.login("nobody@example.com", "x").await), 15 * 60);
        app.advance(Duration::from_secs(24 * 3600 + 1));
        for _ in 0..5 {
            assert_error(web.login("nobody@example.com", "wrong password").await, 401, "invalid_credentials").await;
        }
    }

    async fn sign_up_and_sign_in_are_limited_per_address(backend) {
        let app = spawn_app_with(backend, |config| {
            config.rate_limits.signup = Rate::per_hour(2);
            config.rate_limits.login = Rate::per_minute(3);
        }).await;
        let mut web = app.web();
        assert_eq!(web.signup("ann@example.com", "correct horse battery", "Ann").await.status(), StatusCode::CREATED);
        // A refused signup counts too: it is how emails would be probed.
        assert_error(web.signup("ann@example.com", "correct horse battery", "Ann").await, 409, "email_taken").await;
        let res = web.signup("bob@example.com", "correct horse battery", "Bob").await;
        let retry = retry_after(&res);
        assert!((1..=1800).contains(&retry), "{retry}");
        let message = assert_error(res, 429, "rate_limited").await;
        assert!(message.contains("signup"), "{message}");

        for email in ["ann@example.com", "a@example.com", "b@example.com"] {
            assert_ne!(web.login(email, "correct horse battery").await.status(), StatusCode::TOO_MANY_REQUESTS);
        }
        let res = web.login("ann@example.com", "correct horse battery").await;
        assert!((1..=20).contains(&retry_after(&res)));
        let message = assert_error(res, 429, "rate_limited").await;
        assert!(message.contains("login"), "{message}");
    }

    async fn a_full_hashing_queue_answers_503_with_retry_after(backend) {
        let app = spawn_app_with(backend, |config| {
            config.password_slots = 1;
            config.password_queue = 0;
        }).await;
        let _ann = app.user("ann@example.com").await;
        let attempts = (0..12).map(|n| {
            let mut web = app.web();
            async move { web.login(&format!("user{n}@example.com"), "wrong password").await }
        });
        let answers = futures_util::future::join_all(attempts).await;
        let mut busy = 0;
        for res in answers {
            match res.status().as_u16() {
                401 => {}
                503 => {
                    busy += 1;
                    assert_eq!(retry_after(&res), 1);
                    assert_error(res, 503, "unavailable").await;
                }
                other => panic!("answered {other}"),
            }
        }
        assert!((1..12).contains(&busy), "{busy} of 12 found the queue full");
        // Once it drained, sign-in works again.
        let mut web = app.web();
        assert_eq!(web.login("ann@example.com", "correct horse battery").await.status(), StatusCode::OK);
    }
}
