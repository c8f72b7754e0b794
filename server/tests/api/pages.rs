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
        assert!(text.contains(r#"data-redirect="/""#), "{text}");
    }

    async fn sign_in_and_up_never_send_the_browser_off_site(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::new();
        // Browsers drop tab, CR and LF and read a backslash as a slash: each of these would
        // be //evil.example, another site.
        let hostile = [
            "/%09/evil.example", "/%0a/evil.example", "/%0d/evil.example", "/%0d%0a/evil.example",
            "%09//evil.example", "//evil.example", "/%5Cevil.example", "%5C%5Cevil.example",
            "https://evil.example", "https:evil.example", "/%20/evil.example", "%20//evil.example",
            "/%00/evil.example", "/%0b/evil.example", "/%0c/evil.example", "/%C2%A0/evil.example",
            "/jobs//evil.example", "javascript:alert(1)", "evil.example",
        ];
        for page in ["/signin", "/signup"] {
            for next in hostile {
                let res = http.get(format!("{}{page}?next={next}", app.base)).send().await.unwrap();
                assert_eq!(res.status().as_u16(), 200, "{page}?next={next}");
                let text = res.text().await.unwrap();
                assert!(text.contains(r#"data-redirect="/""#), "{page}?next={next}: {text}");
                assert!(!text.contains("evil.example"), "{page}?next={next}: {text}");
            }
            // A path of this site is kept, query and all.
            let res = http.get(format!("{}{page}?next=/link%3Fcode%3DBCDF-GHJK", app.base)).send().await.unwrap();
            let text = res.text().await.unwrap();
            assert!(text.contains(r#"data-redirect="/link?code=BCDF-GHJK""#), "{text}");
        }
    }

    async fn account_page_lists_tokens_but_never_their_secret(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
        let res = http.get(format!("{}/account", app.base)).send().await.unwrap();
        assert_eq!(res.status().as_u16(), 303);
        assert_eq!(res.headers()["location"], "/signin?next=/account");
        let ann = app.user("ann@example.com").await;
        let (status, text) = html(&ann, "/account").await;
        assert_eq!(status, 200);
        assert!(text.contains("No token yet.") && text.contains(r#"data-api="/api/tokens""#), "{text}");
        assert!(text.contains(r#"<a href="/account">Account</a>"#), "the navigation links it: {text}");
        let res = ann.post("/api/tokens", &json!({ "name": "deploy <bot>", "expiresInDays": 30 })).await;
        assert_eq!(res.status().as_u16(), 201);
        let created: Value = res.json().await.unwrap();
        let (_, text) = html(&ann, "/account").await;
        assert!(text.contains("deploy &lt;bot&gt;"), "{text}");
        assert!(text.contains(&format!(r#"data-api="/api/tokens/{}" data-method="DELETE""#, created["id"].as_str().unwrap())), "{text}");
        let secret = created["token"].as_str().unwrap();
        assert!(!text.contains(secret) && !text.contains(&secret[4..20]), "the page never shows a token");
        // Another person sees none of Ann's tokens.
        let bob = app.user("bob@example.com").await;
        let (_, text) = html(&bob, "/account").await;
        assert!(text.contains("No token yet.") && !text.contains("deploy"), "{text}");
    }

    async fn sign_up_page_shows_why_a_password_is_refused(backend) {
        let app = spawn_app(backend).await;
        let web = app.web();
        let (_, text) = html(&web, "/signup").await;
        // The form posts JSON through app.js, which puts the error's message in the alert.
        assert!(text.contains(r#"data-api="/api/auth/signup""#) && text.contains(r#"<p class="error" role="alert">"#), "{text}");
        let script = web.get("/assets/app.js").await.text().await.unwrap();
        assert!(script.contains("data?.error?.message") && script.contains("slot.textContent = inWords(form, message)"), "{script}");
        let res = web.post("/api/auth/signup", &json!({ "email": "ann@example.com", "password": "password", "name": "Ann" })).await;
        assert_eq!(res.status().as_u16(), 422);
        let body: Value = res.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("password: is too easy to guess."), "{message}");
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

    async fn the_admin_page_is_the_platform_admins_alone(backend) {
        let app = spawn_app(backend).await;
        let admin = app.user("admin@example.com").await;
        let bob = app.user("bob@example.com").await;
        let bobs = app.device(&bob, "install-bob").await;
        let admins = app.device(&admin, "install-admin").await;

        // Anyone else: 403, as the API answers, and no link to it.
        let (status, text) = html(&bob, "/admin").await;
        assert_eq!(status, 403, "{text}");
        assert!(!text.contains(&bobs.device_id), "{text}");
        let (_, computers) = html(&bob, "/computers").await;
        assert!(!computers.contains(r#"href="/admin""#), "{computers}");
        let signed_out = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
        let res = signed_out.get(format!("{}/admin", app.base)).send().await.unwrap();
        assert_eq!(res.headers()["location"], "/signin?next=/admin");

        // The admin: every account's computers with their account, each revocable through
        // the admin API after a confirmation.
        let (_, computers) = html(&admin, "/computers").await;
        assert!(computers.contains(r#"<a href="/admin">Admin</a>"#), "{computers}");
        let (status, text) = html(&admin, "/admin").await;
        assert_eq!(status, 200, "{text}");
        for device in [&bobs, &admins] {
            assert!(text.contains(&format!(r#"id="device-{}""#, device.device_id)), "{text}");
            assert!(text.contains(&format!(r#"data-revoke="/api/admin/devices/{}""#, device.device_id)), "{text}");
        }
        assert!(text.contains(r#"<th scope="col" data-sort="account"><button class="sort" type="button">Account"#), "{text}");
        assert!(text.contains(r#"<dialog id="revoke-dialog""#), "{text}");
        let bob_account = bob.me().await.account.id;
        assert!(text.contains(&format!("<code>{bob_account}</code>")), "{text}");
        // Revoked ones leave the list.
        app.advance(std::time::Duration::from_secs(1));
        assert_eq!(admin.delete(&format!("/api/admin/devices/{}", bobs.device_id)).await.status().as_u16(), 204);
        let (_, text) = html(&admin, "/admin").await;
        assert!(!text.contains(&format!(r#"id="device-{}""#, bobs.device_id)), "{text}");

        // The ledger, every account's, newest first.
        let entries = |text: &str| -> Vec<(String, String)> {
            let table = &text[text.find(r#"<table class="ledger">"#).map_or(text.len(), |at| at)..];
            table.split(r#"<tr data-kind=""#).skip(1).map(|row| {
                let kind = row[..row.find('"').unwrap()].to_owned();
                let subject = row.split("data-label=\"Subject\"><code>").nth(1).map_or("", |rest| &rest[..rest.find('<').unwrap()]).to_owned();
                (kind, subject)
            }).collect()
        };
        let all = entries(&text);
        assert_eq!(all.first().map(|e| e.0.as_str()), Some("device.revoked"), "{all:?}");
        assert!(all.iter().any(|e| e.0 == "device.paired" && e.1 == admins.device_id), "{all:?}");
        // By account.
        let (_, text) = html(&admin, &format!("/admin?account={bob_account}")).await;
        let bobs_entries = entries(&text);
        assert!(!bobs_entries.is_empty() && bobs_entries.iter().all(|e| e.1 != admins.device_id), "{bobs_entries:?}");
        // By computer: its own entries and its jobs'.
        app.advance(std::time::Duration::from_secs(1));
        let job = admin.create_job(&admins.device_id).await;
        let (_, text) = html(&admin, &format!("/admin?device={}", admins.device_id)).await;
        let kinds: Vec<(String, String)> = entries(&text);
        assert_eq!(kinds, vec![("job.created".to_owned(), job.id.to_string()), ("device.paired".to_owned(), admins.device_id.clone())]);
        // By action.
        let (_, text) = html(&admin, "/admin?action=device.paired").await;
        let paired = entries(&text);
        assert_eq!(paired.len(), 2, "{paired:?}");
        assert!(paired.iter().all(|e| e.0 == "device.paired"), "{paired:?}");
        assert!(text.contains(r#"<option value="device.paired" selected>"#), "{text}");
        // By time: today holds them all, tomorrow none, and the day before none.
        let today = app.now().date_naive();
        let day = |offset: i64| (today + chrono::Duration::days(offset)).format("%Y-%m-%d").to_string();
        let (_, text) = html(&admin, &format!("/admin?since={}&until={}", day(0), day(0))).await;
        assert_eq!(entries(&text).len(), all.len() + 1, "{text}");
        let (_, text) = html(&admin, &format!("/admin?since={}", day(1))).await;
        assert!(entries(&text).is_empty() && text.contains("No entry matches."), "{text}");
        let (_, text) = html(&admin, &format!("/admin?until={}", day(-1))).await;
        assert!(entries(&text).is_empty(), "{text}");
        // A filter that is not an id or a date is refused, naming it.
        let (status, text) = html(&admin, "/admin?device=%3Cscript%3E").await;
        assert_eq!(status, 422, "{text}");
        assert!(text.contains("device") && !text.contains("<script>"), "{text}");
        let (status, _) = html(&admin, "/admin?since=yesterday").await;
        assert_eq!(status, 422);
    }
}
