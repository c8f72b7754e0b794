//! The web pages: sign-in redirects, tenancy, escaping, security headers.

use reqwest::redirect::Policy;
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{job_body, seal_key, spawn_app, WebClient};
use tether_protocol::jobs::Job;

async fn html(web: &WebClient, path: &str) -> (u16, String) {
    let res = web.get(path).await;
    let status = res.status().as_u16();
    (status, res.text().await.unwrap())
}

both_backends! {
    async fn pages_send_signed_out_visitors_to_sign_in(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
        for (path, next) in [("/computers", "/computers"), ("/assign", "/assign"), ("/jobs", "/jobs")] {
            let res = http.get(format!("{}{path}", app.base)).send().await.unwrap();
            assert_eq!(res.status().as_u16(), 303, "{path}");
            assert_eq!(res.headers()["location"], format!("/signin?next={next}").as_str());
        }
        let res = http.get(format!("{}/link?code=bcdf-ghjk", app.base)).send().await.unwrap();
        assert_eq!(res.headers()["location"], "/signin?next=/link%3Fcode%3DBCDF-GHJK");
        // A `next` that leaves the site is ignored.
        let page = http.get(format!("{}/signin?next=//evil.example", app.base)).send().await.unwrap();
        let text = page.text().await.unwrap();
        assert!(text.contains(r#"data-redirect="/computers""#), "{text}");
    }

    async fn pages_carry_csrf_and_security_headers(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let res = ann.get("/computers").await;
        assert_eq!(res.status().as_u16(), 200);
        let csp = res.headers()["content-security-policy"].to_str().unwrap().to_owned();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(res.headers()["cache-control"], "no-store");
        let text = res.text().await.unwrap();
        let csrf = ann.csrf.clone().unwrap();
        assert!(text.contains(&format!(r#"<meta name="csrf-token" content="{csrf}">"#)));
        assert!(text.contains(&format!("tether-agent pair {}", app.base)));
    }

    async fn pages_escape_what_devices_and_users_send(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let hostile = "<script>alert(1)</script>";
        let res = ann.patch(&format!("/api/devices/{}", device.device_id), &json!({ "name": hostile })).await;
        assert_eq!(res.status().as_u16(), 200);
        let (_, text) = html(&ann, "/computers").await;
        assert!(!text.contains(hostile));
        assert!(text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    async fn link_page_shows_the_waiting_computer(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let key = seal_key();
        let paired: Value = app.pair("install-9", &key).await.json().await.unwrap();
        let code = paired["userCode"].as_str().unwrap();
        let (status, text) = html(&ann, &format!("/link?code={}", code.to_lowercase())).await;
        assert_eq!(status, 200);
        assert!(text.contains(code) && text.contains("laptop") && text.contains(&key.fingerprint), "{text}");
        let (_, text) = html(&ann, "/link?code=BCDF-GHJK").await;
        assert!(text.contains("unknown or has expired"), "{text}");
        assert!(!text.contains("Pair laptop"));
    }

    async fn another_accounts_job_page_is_not_found(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let eve = app.user("eve@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let res = device.heartbeat(&[]).await;
        assert_eq!(res.status().as_u16(), 200);
        let job = ann.create_job(&device.device_id).await;
        let (status, text) = html(&ann, &format!("/jobs/{}", job.id)).await;
        assert_eq!(status, 200);
        assert!(text.contains(&job.title));
        assert!(text.contains("Network off"), "{text}");
        // The secrets a job names are shown by name on its page.
        let mut body = job_body(&device.device_id);
        body["secrets"] = json!(["API_KEY", "DEPLOY_TOKEN"]);
        let res = ann.post("/api/jobs", &body).await;
        assert_eq!(res.status().as_u16(), 201);
        let named: Job = res.json().await.unwrap();
        let (_, text) = html(&ann, &format!("/jobs/{}", named.id)).await;
        assert!(text.contains("secrets: <code>API_KEY</code>, <code>DEPLOY_TOKEN</code>"), "{text}");
        let (status, text) = html(&eve, &format!("/jobs/{}", job.id)).await;
        assert_eq!(status, 404);
        assert!(!text.contains(&job.title) && text.contains("Not found"), "{text}");
        let (status, _) = html(&ann, "/jobs/..%2Fetc").await;
        assert_eq!(status, 404);
        let (_, list) = html(&eve, "/jobs").await;
        assert!(!list.contains(&job.title));
        let (_, assign) = html(&eve, &format!("/assign?device={}", device.device_id)).await;
        assert!(!assign.contains(&device.device_id), "{assign}");
    }

    async fn assign_offers_what_the_device_published(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        device.heartbeat(&[]).await;
        let (_, after) = html(&ann, "/assign").await;
        for folder in &device.capabilities().folders {
            assert!(after.contains(&format!(r#"<option value="{folder}">"#)), "{after}");
        }
        for engine in &device.capabilities().engines {
            assert!(after.contains(&format!(r#"<option value="{}">"#, engine.name)), "{after}");
        }
    }

    async fn computers_page_offers_a_sealed_secret_form_and_lists_names(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (status, text) = html(&ann, "/computers").await;
        assert_eq!(status, 200);
        assert!(text.contains(&format!(r#"data-seal-device="{}""#, device.device_id)), "{text}");
        assert!(text.contains(&device.seal_key.kid));
        assert!(text.contains(r#"<script type="module" src="/assets/secrets.js">"#), "{text}");
        assert!(text.contains("none saved"));
        let res = ann.get("/assets/secrets.js").await;
        assert_eq!(res.status().as_u16(), 200);
        assert!(res.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
        let script = res.text().await.unwrap();
        assert!(script.contains("import { sealSecret") && script.contains("{ name, sealed }"));
    }
}
