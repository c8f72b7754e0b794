//! Pages read at a glance: the Computers cards in words, Assign's warning for an offline
//! computer, the pairing page's hidden form, and 404 as a page for a browser.

use std::time::Duration;

use serde_json::{json, Value};
use tether_protocol::capabilities::{
    CheckedAgent, CheckedAuthMethod, Engine, EngineCheck, EngineKind, GitCapability,
    SandboxStrength, MAX_CHECK_AUTH_METHODS, MAX_CHECK_TEXT_CHARS,
};

use crate::both_backends;
use crate::helpers::{spawn_app, spawn_app_with, WebClient};
use crate::secrets::{seal_for, sealed_device, send_and_save};

const BROWSER_ACCEPT: &str =
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8";

async fn html(web: &WebClient, path: &str) -> (u16, String) {
    let res = web.get(path).await;
    let status = res.status().as_u16();
    (status, res.text().await.unwrap())
}

/// `path` fetched by `web` with `accept`: the status, the content type and the body.
async fn fetch_accepting(web: &WebClient, path: &str, accept: &str) -> (u16, String, String) {
    let res = web
        .http
        .get(format!("{}{path}", web.base))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let content_type = res.headers()["content-type"].to_str().unwrap().to_owned();
    (status, content_type, res.text().await.unwrap())
}

both_backends! {
    async fn a_computer_card_says_in_words_what_it_is_and_does(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut capabilities = device.capabilities();
        capabilities.agent_version = "0.4.2".to_owned();
        capabilities.sandbox.strength = SandboxStrength::Reduced;
        capabilities.folders = vec!["work".to_owned(), "site".to_owned()];
        capabilities.engines.push(Engine { name: "claude".to_owned(), kind: EngineKind::Acp, check: None });
        capabilities.git = Some(GitCapability { version: "2.43.0".to_owned(), github_hosts: vec!["github.com".to_owned()] });
        assert_eq!(device.heartbeat_with(capabilities, &[]).await.status().as_u16(), 200);

        let (status, text) = html(&ann, "/computers").await;
        assert_eq!(status, 200);
        assert!(text.contains("online · last contact just now"), "{text}");
        assert!(text.contains("tether-agent 0.4.2"), "{text}");
        assert!(text.contains(r#"<span class="strength-reduced">reduced</span>"#), "{text}");
        assert!(text.contains("<code>work</code>, <code>site</code>"), "{text}");
        assert!(text.contains(r#"<code>echo</code> <span class="muted">(recipe)</span>"#), "{text}");
        assert!(text.contains(r#"<code>claude</code> <span class="muted">(ACP agent)</span>"#), "{text}");
        assert!(text.contains("git 2.43.0") && text.contains("pull requests on github.com"), "{text}");
        assert!(text.contains("No job running."), "{text}");

        // The running job is a link on its computer's card; eve never sees it.
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, job.id);
        let (_, text) = html(&ann, "/computers").await;
        assert!(text.contains(&format!(r#"<a href="/jobs/{}">Run the tests</a>"#, job.id)), "{text}");
        assert!(text.contains(r#"<span class="badge state-running">running</span>"#), "{text}");
        let eve = app.user("eve@example.com").await;
        let (_, theirs) = html(&eve, "/computers").await;
        assert!(!theirs.contains(&job.id.to_string()) && !theirs.contains("Run the tests"), "{theirs}");

        // Heard from no more: offline, and since when, in words.
        app.advance(Duration::from_secs(5 * 60));
        let (_, text) = html(&ann, "/computers").await;
        assert!(text.contains("offline · last seen 5 min ago"), "{text}");
        assert!(text.contains(r#"class="presence presence-offline""#), "{text}");
    }

    async fn an_engine_check_is_kept_shown_escaped_and_bounded(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let checked_at = app.now().timestamp_millis();
        let hostile = EngineCheck {
            checked_at,
            ok: true,
            agent: Some(CheckedAgent { name: "<script>alert(1)</script>".to_owned(), version: "0.16.2".to_owned() }),
            protocol_version: Some(1),
            load_session: true,
            auth_methods: Vec::new(),
            problem: None,
            took_ms: 900,
        };
        let method = CheckedAuthMethod { id: "m".to_owned(), name: "Sign in".to_owned(), kind: "agent".to_owned() };
        let oversized = EngineCheck {
            ok: false,
            agent: None,
            auth_methods: vec![method; 50],
            problem: Some("x".repeat(100_000)),
            ..hostile.clone()
        };
        let mut capabilities = device.capabilities();
        capabilities.engines.extend([
            Engine { name: "claude".to_owned(), kind: EngineKind::Acp, check: Some(hostile) },
            Engine { name: "codex".to_owned(), kind: EngineKind::Acp, check: None },
            Engine { name: "gemini".to_owned(), kind: EngineKind::Acp, check: Some(oversized) },
        ]);
        assert_eq!(device.heartbeat_with(capabilities, &[]).await.status().as_u16(), 200);

        // Stored, cut to its bounds.
        let listed = ann.devices().await;
        let engines = &listed[0].capabilities.as_ref().unwrap().engines;
        let kept = engines.iter().find(|e| e.name == "gemini").and_then(|e| e.check.clone()).unwrap();
        assert_eq!(kept.auth_methods.len(), MAX_CHECK_AUTH_METHODS);
        assert_eq!(kept.problem.as_deref().map(|p| p.chars().count()), Some(MAX_CHECK_TEXT_CHARS + 1));
        assert_eq!(engines.iter().find(|e| e.name == "claude").and_then(|e| e.check.as_ref()).map(|c| c.ok), Some(true));

        let (_, text) = html(&ann, "/computers").await;
        assert!(!text.contains("<script>alert(1)</script>"), "{text}");
        assert!(text.contains("checked just now: ok, &lt;script&gt;alert(1)&lt;/script&gt; 0.16.2"), "{text}");
        assert!(text.contains(r#"<code>codex</code> <span class="muted">(ACP agent)</span> <span class="muted engine-check">· never checked</span>"#), "{text}");
        assert!(text.contains("checked just now: not ok, xxx"), "{text}");
        assert!(!text.contains(&"x".repeat(MAX_CHECK_TEXT_CHARS + 1)), "the problem is cut");
        // A recipe is never checked, and says nothing of it.
        assert!(text.contains(r#"<code>echo</code> <span class="muted">(recipe)</span>,"#), "{text}");

        app.advance(Duration::from_secs(5 * 60));
        let (_, text) = html(&ann, "/computers").await;
        assert!(text.contains("checked 5 min ago: ok, &lt;script&gt;"), "{text}");
    }

    async fn a_computer_not_reported_yet_says_so(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        app.device_with_key(&ann, "install-1", crate::helpers::seal_key()).await;
        let (_, text) = html(&ann, "/computers").await;
        assert!(text.contains("offline · not seen yet"), "{text}");
        assert!(text.contains("It has not reported what it can do yet"), "{text}");
    }

    async fn secrets_are_folded_with_their_names_in_the_summary(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_key, device) = sealed_device(&app, &ann, "install-1").await;
        let (_, text) = html(&ann, "/computers").await;
        assert!(text.contains(r#"<details class="secrets"><summary><strong>Secrets</strong><span class="muted"> · none saved</span></summary>"#), "{text}");
        // The form is inside the fold, closed until opened.
        let fold = &text[text.find(r#"<details class="secrets">"#).unwrap()..];
        let fold = &fold[..fold.find("</details>").unwrap()];
        assert!(fold.contains(&format!(r#"data-seal-device="{}""#, device.device_id)), "{fold}");

        for name in ["API_KEY", "DEPLOY_TOKEN"] {
            send_and_save(&ann, &device, &json!({ "name": name, "sealed": seal_for(&device, name, "v") })).await;
        }
        let (_, text) = html(&ann, "/computers").await;
        let listed: Value = ann.get(&format!("/api/devices/{}/secrets", device.device_id)).await.json().await.unwrap();
        let names: Vec<&str> = listed["names"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
        let summary = format!(
            r#"<summary><strong>Secrets</strong><span class="muted"> · 2 saved: </span><code>{}</code>, <code>{}</code></summary>"#,
            names[0], names[1]
        );
        assert!(text.contains(&summary), "{text}");
    }

    async fn assign_warns_before_queuing_to_an_offline_computer(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let path = format!("/assign?device={}", device.device_id);
        let (_, text) = html(&ann, &path).await;
        assert!(text.contains(r#"<p class="warning" id="device-offline" role="status" hidden></p>"#), "{text}");
        assert!(!text.contains("data-offline"), "{text}");

        app.advance(Duration::from_secs(3 * 60));
        let (_, text) = html(&ann, &path).await;
        let warning = "laptop is offline (last seen 3 min ago); the job will wait until it is back.";
        assert!(text.contains(&format!(r#"<p class="warning" id="device-offline" role="status">{warning}</p>"#)), "{text}");
        // Each offline option carries its own warning, for assign.js to show on a change.
        assert!(text.contains(&format!(r#"data-offline="{warning}""#)), "{text}");
        assert!(text.contains(r#"<script src="/assets/assign.js" defer>"#), "{text}");
        let script = ann.get("/assets/assign.js").await.text().await.unwrap();
        assert!(script.contains("device-offline") && script.contains("dataset.offline"), "{script}");
        // It can still be assigned.
        assert!(text.contains(r#"<button type="submit">Assign to laptop</button>"#), "{text}");
        let job = ann.create_job(&device.device_id).await;
        assert_eq!(job.state.as_str(), "queued");
    }

    async fn hidden_is_hidden_whatever_the_class(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let css = ann.get("/assets/app.css").await.text().await.unwrap();
        assert!(css.contains("[hidden] { display: none !important; }"), "{css}");
        let script = ann.get("/assets/app.js").await.text().await.unwrap();
        assert!(script.contains("form.hidden = true;") && script.contains(r#"if ("sent" in form.dataset) return;"#), "{script}");
    }

    async fn an_unknown_page_is_a_page_for_a_browser_and_json_for_the_api(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (status, content_type, body) = fetch_accepting(&ann, "/nope", BROWSER_ACCEPT).await;
        assert_eq!(status, 404);
        assert!(content_type.starts_with("text/html"), "{content_type}");
        assert!(body.contains("<h1>Not found</h1>") && body.contains("<code>/nope</code>"), "{body}");
        assert!(body.contains(r#"<a href="/">Back to Computers</a>"#), "{body}");
        assert!(body.contains(r#"<a href="/computers">Computers</a>"#), "the layout's navigation: {body}");

        // Signed out, the same page offers to sign in.
        let (status, _, body) = fetch_accepting(&app.web(), "/nope", BROWSER_ACCEPT).await;
        assert_eq!(status, 404);
        assert!(body.contains(r#"<a href="/">Sign in</a>"#), "{body}");

        for (path, accept) in [("/api/x", BROWSER_ACCEPT), ("/nope", "application/json"), ("/nope", "*/*")] {
            let (status, content_type, body) = fetch_accepting(&ann, path, accept).await;
            assert_eq!(status, 404, "{path} {accept}");
            assert!(content_type.starts_with("application/json"), "{path} {accept}: {content_type}");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"]["code"], "not_found", "{body}");
        }
    }

    async fn the_computers_table_has_a_column_for_each_fact(backend) {
        let app = spawn_app_with(backend, |config| config.latest_agent_version = Some("0.5.0".to_owned())).await;
        let ann = app.user("ann@example.com").await;
        // None yet: the pairing steps are the page, open.
        let (_, text) = html(&ann, "/computers").await;
        assert!(text.contains("<h2>Pair a computer</h2>") && !text.contains("pair-help"), "{text}");

        let old = app.device(&ann, "install-1").await;
        let mut capabilities = old.capabilities();
        capabilities.agent_version = "0.4.2".to_owned();
        capabilities.sandbox.strength = SandboxStrength::Strong;
        assert_eq!(old.heartbeat_with(capabilities, &[]).await.status().as_u16(), 200);
        let new = app.device(&ann, "install-2").await;
        let mut capabilities = new.capabilities();
        capabilities.agent_version = "0.5.0".to_owned();
        assert_eq!(new.heartbeat_with(capabilities, &[]).await.status().as_u16(), 200);

        let (status, text) = html(&ann, "/computers").await;
        assert_eq!(status, 200);
        for (key, label) in [("name", "Name"), ("state", "State"), ("platform", "Platform"), ("agent", "Agent"), ("sandbox", "Sandbox"), ("job", "Current job")] {
            assert!(text.contains(&format!(r#"<th scope="col" data-sort="{key}"><button class="sort" type="button">{label}"#)), "{label}: {text}");
        }
        assert!(text.contains(&format!(r#"<tbody class="machine" id="device-{}""#, old.device_id)), "{text}");
        let old_row = row_of(&text, &old.device_id);
        assert!(old_row.contains(r#"data-state="online""#) && old_row.contains(r#"data-online="1""#), "{old_row}");
        assert!(old_row.contains("<code>0.4.2</code>") && old_row.contains(">update available</span>"), "{old_row}");
        assert!(old_row.contains(r#"<td class="m-sandbox" data-label="Sandbox"><span class="strength-strong">strong</span></td>"#), "{old_row}");
        assert!(old_row.contains(r#"<td class="m-platform" data-label="Platform">linux</td>"#), "{old_row}");
        assert!(old_row.contains("last contact <time"), "{old_row}");
        let new_row = row_of(&text, &new.device_id);
        assert!(new_row.contains("<code>0.5.0</code>") && !new_row.contains("update available"), "{new_row}");
        // Revoke is in the row's menu, behind the one confirmation dialog.
        assert!(old_row.contains(&format!(r#"data-revoke="/api/devices/{}""#, old.device_id)), "{old_row}");
        assert!(!text.contains("data-confirm"), "{text}");
        assert!(text.contains(r#"<dialog id="revoke-dialog""#), "{text}");
        // Two computers: each card folded, and the pairing steps too.
        assert!(old_row.contains(&format!(r#"<tr class="machine-detail" id="detail-{}" hidden>"#, old.device_id)), "{old_row}");
        assert!(text.contains(r#"<details class="pair-help"><summary>Pair another computer</summary>"#), "{text}");
        assert!(text.contains(r#"<script src="/assets/lists.js" defer>"#), "{text}");

        // Busy: the running job is linked in its row.
        let job = ann.create_job(&old.device_id).await;
        assert_eq!(old.claim_job().await.id, job.id);
        let (_, page) = html(&ann, "/computers").await;
        let old_row = row_of(&page, &old.device_id);
        assert!(old_row.contains(r#"data-state="busy""#) && old_row.contains(r#"data-busy="1""#), "{old_row}");
        assert!(old_row.contains(&format!(r#"<span class="badge state-running">running</span> <a href="/jobs/{}">Run the tests</a>"#, job.id)), "{old_row}");

        // Unheard of: offline, last seen.
        app.advance(Duration::from_secs(5 * 60));
        let (_, text) = html(&ann, "/computers").await;
        let new_row = row_of(&text, &new.device_id);
        assert!(new_row.contains(r#"data-state="offline""#) && new_row.contains("last seen <time"), "{new_row}");
        assert!(new_row.contains(">5 min ago</time>"), "{new_row}");
    }

    async fn lists_answer_304_until_what_they_show_changes(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        for path in ["/computers", "/jobs"] {
            let (status, etag) = conditional(&ann, path, None).await;
            assert_eq!(status, 200, "{path}");
            let etag = etag.unwrap_or_else(|| panic!("{path} has no ETag"));
            assert_eq!(conditional(&ann, path, Some(&etag)).await, (304, Some(etag.clone())), "{path}");
            // Another person's copy is not this one's.
            let eve = app.user(&format!("eve{}@example.com", path.len())).await;
            assert_eq!(conditional(&eve, path, Some(&etag)).await.0, 200, "{path}");
        }
        let (_, computers) = conditional(&ann, "/computers", None).await;
        let (_, jobs) = conditional(&ann, "/jobs", None).await;
        // A job assigned and taken: both lists change.
        let job = ann.create_job(&device.device_id).await;
        let (status, after) = conditional(&ann, "/jobs", jobs.as_deref()).await;
        assert_eq!(status, 200);
        assert_ne!(after, jobs);
        assert_eq!(device.claim_job().await.id, job.id);
        let (status, busy) = conditional(&ann, "/computers", computers.as_deref()).await;
        assert_eq!(status, 200);
        // The computer going quiet changes Computers again.
        assert_eq!(conditional(&ann, "/computers", busy.as_deref()).await.0, 304);
        app.advance(Duration::from_secs(5 * 60));
        assert_eq!(conditional(&ann, "/computers", busy.as_deref()).await.0, 200);
    }
}

/// A row of the Computers table, from its `<tbody>` to its end.
fn row_of(text: &str, device_id: &str) -> String {
    let start = text
        .find(&format!(r#"id="device-{device_id}""#))
        .unwrap_or_else(|| panic!("no row for {device_id}: {text}"));
    text[start..start + text[start..].find("</tbody>").unwrap()].to_owned()
}

/// `path` asked for with `If-None-Match: etag`: the status and the ETag answered.
async fn conditional(web: &WebClient, path: &str, etag: Option<&str>) -> (u16, Option<String>) {
    let mut request = web.http.get(format!("{}{path}", web.base));
    if let Some(etag) = etag {
        request = request.header("if-none-match", etag);
    }
    let res = request.send().await.unwrap();
    let tag = res
        .headers()
        .get("etag")
        .map(|value| value.to_str().unwrap().to_owned());
    (res.status().as_u16(), tag)
}
