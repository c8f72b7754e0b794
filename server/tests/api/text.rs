//! Text the server stores (`tether_protocol::text`): names and emails refuse control
//! characters, direction overrides, invisible and blank characters, noncharacters, every
//! separator but the plain space, private-use characters and more than 3 combining marks on
//! a character; multi-line text (prompts) keeps newlines and tabs and refuses every other
//! control character. Each refusal is 422 `invalid_field` naming the field, and changes
//! nothing. Text a computer reports (questions, summaries) is kept with those characters
//! replaced by U+FFFD.

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tether_protocol::jobs::JobState;
use tether_server::rate_limits::RateLimitConfig;

use crate::both_backends;
use crate::helpers::{
    assert_error, exec_sql, job_body, query_i64, seal_key, spawn_app_with, Backend, TestApp,
};

/// What a name may not hold, as the probe sent it: a right-to-left override, a byte-order
/// mark, a noncharacter, a NUL, a zero-width space and a newline.
const BAD_NAMES: [&str; 6] = [
    "evil\u{202E}gpj.exe",
    "\u{FEFF}laptop",
    "laptop\u{FFFF}",
    "lap\u{0}top",
    "lap\u{200B}top",
    "lap\ntop",
];

/// What names refuse beyond the invisible: a line separator, a braille blank (`laptop⠀`
/// reads as `laptop`), an ideographic space, a private-use character and five combining
/// marks stacked on one letter.
const BLANK_AND_STACKED: [&str; 5] = [
    "lap\u{2028}top",
    "laptop\u{2800}",
    "lap\u{3000}top",
    "laptop\u{E000}",
    "Z\u{301}\u{302}\u{303}\u{304}\u{305}",
];

/// Names in other scripts: an accent (composed, and as a combining mark), Japanese, Cyrillic,
/// an emoji, and Devanagari with its combining virama and vowel sign.
const OTHER_SCRIPTS: [&str; 6] = [
    "Café",
    "Cafe\u{301}",
    "東京のノート",
    "ноутбук",
    "🚀",
    "नमस्ते",
];

/// Emails that would pass for `ann@example.com`: a right-to-left override, an isolate, a
/// zero-width space, a tag, a noncharacter, a braille blank.
const BAD_EMAILS: [&str; 6] = [
    "ann\u{202E}@example.com",
    "ann\u{2066}@example.com",
    "ann\u{200B}@example.com",
    "ann@example.com\u{E0041}",
    "ann@example.com\u{FFFF}",
    "ann\u{2800}@example.com",
];

/// Asserts a 422 `invalid_field` whose message names `field`.
async fn refused(res: Response, field: &str) {
    let message = assert_error(res, 422, "invalid_field").await;
    assert!(message.starts_with(&format!("{field}:")), "{message}");
}

/// Without rate limits: each refusal below is one more request from the same address.
async fn unlimited(backend: Backend) -> TestApp {
    spawn_app_with(backend, |config| {
        config.rate_limits = RateLimitConfig::off()
    })
    .await
}

async fn pair_with(app: &TestApp, change: Value) -> Response {
    let mut body = json!({
        "name": "laptop", "platform": "linux", "installId": "install-9",
        "agentVersion": "0.1.0", "sealKey": seal_key(),
    });
    for (key, value) in change.as_object().unwrap() {
        body[key] = value.clone();
    }
    reqwest::Client::new()
        .post(format!("{}/api/devices/pair", app.base))
        .header("x-tether-protocol", "1")
        .json(&body)
        .send()
        .await
        .unwrap()
}

both_backends! {
    async fn pairing_refuses_invisible_and_control_characters(backend) {
        let app = unlimited(backend).await;
        for name in BAD_NAMES {
            refused(pair_with(&app, json!({ "name": name })).await, "name").await;
            refused(pair_with(&app, json!({ "platform": name })).await, "platform").await;
        }
        for version in ["0.1.0\u{202E}", "0.1.0\u{0}", "0.1 .0"] {
            refused(pair_with(&app, json!({ "agentVersion": version })).await, "agentVersion").await;
        }
        refused(pair_with(&app, json!({ "installId": "install\u{FEFF}" })).await, "installId").await;
        // Every visible script is a name.
        let res = pair_with(&app, json!({ "name": "Bürorechner ноутбук 笔记本 🚀" })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    async fn device_renames_user_and_token_names_refuse_them_too(backend) {
        let app = unlimited(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let path = format!("/api/devices/{}", device.device_id);
        for name in BAD_NAMES {
            refused(ann.patch(&path, &json!({ "name": name })).await, "name").await;
            refused(ann.post("/api/tokens", &json!({ "name": name })).await, "name").await;
            let mut web = app.web();
            refused(web.signup("bob@example.com", "correct horse battery", name).await, "name").await;
        }
        assert_eq!(ann.devices().await[0].name, "laptop");
        let res = ann.patch(&path, &json!({ "name": "Büro 🚀" })).await;
        assert_eq!(res.status(), StatusCode::OK);
    }

    async fn names_refuse_separators_blanks_private_use_and_stacked_marks(backend) {
        let app = unlimited(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let path = format!("/api/devices/{}", device.device_id);
        let titled = |title: &str| {
            let mut body = job_body(&device.device_id);
            body["title"] = json!(title);
            body
        };
        for name in BLANK_AND_STACKED {
            refused(pair_with(&app, json!({ "name": name })).await, "name").await;
            refused(ann.patch(&path, &json!({ "name": name })).await, "name").await;
            refused(ann.post("/api/jobs", &titled(name)).await, "title").await;
            refused(ann.post("/api/tokens", &json!({ "name": name })).await, "name").await;
            let mut web = app.web();
            refused(web.signup("bob@example.com", "correct horse battery", name).await, "name").await;
        }
        assert_eq!(ann.devices().await[0].name, "laptop");
        let jobs: Vec<Value> = ann.get("/api/jobs").await.json().await.unwrap();
        assert!(jobs.is_empty(), "nothing was queued: {jobs:?}");
        assert_eq!(query_i64(&app.store, "SELECT COUNT(*) FROM users").await, Some(1));

        for (i, name) in OTHER_SCRIPTS.into_iter().enumerate() {
            let res = pair_with(&app, json!({ "name": name, "installId": format!("install-{}", i + 2) })).await;
            assert_eq!(res.status(), StatusCode::CREATED, "{name}");
            let res = ann.patch(&path, &json!({ "name": name })).await;
            assert_eq!(res.status(), StatusCode::OK, "{name}");
            let res = ann.post("/api/jobs", &titled(name)).await;
            assert_eq!(res.status(), StatusCode::CREATED, "{name}");
            let mut web = app.web();
            let res = web.signup(&format!("user{i}@example.com"), "correct horse battery", name).await;
            assert_eq!(res.status(), StatusCode::CREATED, "{name}");
            assert_eq!(web.me().await.account.name, name);
        }
    }

    async fn signup_refuses_emails_with_invisible_characters(backend) {
        let app = unlimited(backend).await;
        for email in BAD_EMAILS {
            let mut web = app.web();
            refused(web.signup(email, "correct horse battery", "Ann").await, "email").await;
        }
        assert_eq!(query_i64(&app.store, "SELECT COUNT(*) FROM users").await, Some(0));
        let res = app.web().signup("ann@example.com", "correct horse battery", "Ann").await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    async fn sign_in_with_an_invisible_character_in_the_email_matches_no_one(backend) {
        let app = unlimited(backend).await;
        app.user("ann@example.com").await;
        // As an address stored before the rule: it would pass for Ann's.
        exec_sql(&app.store, "UPDATE users SET email = 'ann\u{200B}@example.com'").await;
        let res = app.web().login("ann\u{200B}@example.com", "correct horse battery").await;
        assert_error(res, 401, "invalid_credentials").await;
    }

    async fn job_titles_are_names_and_prompts_refuse_nul(backend) {
        let app = unlimited(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let with = |field: &str, value: &str| {
            let mut body = job_body(&device.device_id);
            body[field] = json!(value);
            body
        };
        for title in BAD_NAMES {
            refused(ann.post("/api/jobs", &with("title", title)).await, "title").await;
        }
        for prompt in ["fix\u{0}it", "bell\u{7}", "escape \u{1B}[31mred", "x\u{FFFE}", "next\u{85}line"] {
            refused(ann.post("/api/jobs", &with("prompt", prompt)).await, "prompt").await;
        }
        let res = ann.get("/api/jobs").await;
        let jobs: Vec<Value> = res.json().await.unwrap();
        assert!(jobs.is_empty(), "nothing was queued: {jobs:?}");
        // A prompt keeps its layout, and joiners (U+200D) inside emoji.
        let prompt = "fix it\n\tthen run\r\nthe tests 👨\u{200D}👩\u{200D}👧 \u{202E}quoted";
        let res = ann.post("/api/jobs", &with("prompt", prompt)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    async fn questions_and_summaries_from_the_computer_are_kept_made_visible(backend) {
        let app = unlimited(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let lease = claimed.lease_token.expose().to_owned();
        let ask = |question: &str| {
            device
                .http
                .post(format!("{}/api/devices/self/jobs/{}/ask", app.base, job.id))
                .bearer_auth(&device.token)
                .header("x-tether-protocol", "1")
                .header("x-tether-lease", &lease)
                .json(&json!({
                    "kind": "command", "question": question,
                    "action": { "command": ["ls"], "folder": "work" },
                    "actionHash": "9f86d081884c7d659a2feb8e8bfa6ac5c9f4b8b2c4c53e1f1e0c6e8d2b1a3f40",
                    "expiresInSecs": 600,
                }))
                .send()
        };
        // A run words its question from the command: refusing it would leave the run unable
        // to ask, so what a name may not hold is replaced, visibly.
        let res = ask("Run `rm evil\u{202E}gpj.exe`\tnow?").await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let job_id = job.id.to_string();
        let asked = ann.job(&job_id).await;
        assert_eq!(asked.decisions[0].question, "Run `rm evil\u{FFFD}gpj.exe`\u{FFFD}now?");
        // A summary with a terminal colour code must not cost the run its outcome.
        let res = device
            .complete(&job_id, &lease, &json!({ "outcome": "failed", "summary": "\u{1B}[31mred\u{1B}[0m\n\t2 failed\u{0}" }))
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        let ended = ann.job(&job_id).await;
        assert_eq!(ended.state, JobState::Failed);
        let outcome = ended.outcome.unwrap();
        assert_eq!(outcome.summary, "\u{FFFD}[31mred\u{FFFD}[0m\n\t2 failed\u{FFFD}");
    }
}
