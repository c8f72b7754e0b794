//! Signup, login, logout, me, API tokens, CSRF.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app};

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
        let res = http.post(format!("{}/api/tokens", app.base)).bearer_auth(token)
            .json(&json!({ "name": "second" })).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);

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
}
