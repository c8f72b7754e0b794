//! What the work hands back in its own words: the worker's report of a completion (kept,
//! shown first on the job page, or dropped with a timeline line, never failing the job),
//! what each attempt used (`observed`, per attempt and bounded), and the report's schema in
//! the OpenAPI document.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::jobs::{Job, JobState};

use crate::both_backends;
use crate::helpers::{job_body, spawn_app, DeviceClient, WebClient};

fn report() -> Value {
    json!({
        "summary": "Added the export button.\nIt writes CSV.",
        "done": ["the button", "a <b>CSV</b> writer"],
        "tested": [{ "command": "npm test", "outcome": "passed" },
                   { "command": "npm run e2e", "outcome": "failed", "detail": "1 flaky" },
                   { "command": "npm run lint", "outcome": "skipped" }],
        "notDone": ["PDF export"],
        "risks": ["large tables are slow"],
        "links": ["http://127.0.0.1:3000/export"],
    })
}

/// Queues a job, claims it and answers the job and its lease.
async fn start(ann: &WebClient, device: &DeviceClient) -> (String, String) {
    let res = ann.post("/api/jobs", &job_body(&device.device_id)).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let claimed = device.claim_job().await;
    assert_eq!(claimed.id, job.id);
    (job.id.to_string(), claimed.lease_token.expose().to_owned())
}

async fn finish(device: &DeviceClient, job_id: &str, lease: &str, extra: Value) {
    let mut done = json!({ "outcome": "succeeded", "summary": "ok", "exitCode": 0 });
    for (key, value) in extra.as_object().unwrap() {
        done[key] = value.clone();
    }
    let res = device.complete(job_id, lease, &done).await;
    assert_eq!(
        res.status(),
        StatusCode::OK,
        "{}",
        res.text().await.unwrap()
    );
}

/// The smallest valid PNG: one transparent pixel.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";

/// `POST …/evidence` of `meta` (its size and digest from `bytes`) under `lease`, with the
/// bytes unless it is held.
async fn evidence(device: &DeviceClient, job_id: &str, lease: &str, mut meta: Value, bytes: &[u8]) {
    let digest: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    meta["size"] = json!(bytes.len());
    meta["sha256"] = json!(digest);
    let held = meta["held"] == json!(true);
    let mut request = device
        .http
        .post(format!(
            "{}/api/devices/self/jobs/{job_id}/evidence",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease)
        .header(
            "x-tether-evidence",
            URL_SAFE_NO_PAD.encode(meta.to_string()),
        );
    if !held {
        request = request
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec());
    }
    let res = request.send().await.unwrap();
    assert_eq!(
        res.status(),
        StatusCode::CREATED,
        "{meta}: {}",
        res.text().await.unwrap()
    );
}

fn dropped_lines(job: &Job) -> Vec<String> {
    let lines = job
        .events
        .iter()
        .filter(|e| e.text.starts_with("The worker's report was dropped"));
    lines.map(|e| e.text.clone()).collect()
}

both_backends! {
    async fn a_report_is_kept_and_leads_the_job_page(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = start(&ann, &device).await;
        finish(&device, &job_id, &lease, json!({ "report": report() })).await;

        let job = ann.job(&job_id).await;
        assert_eq!(job.state, JobState::Succeeded);
        let kept = serde_json::to_value(job.outcome.unwrap().report.unwrap()).unwrap();
        assert_eq!(kept, report());
        assert!(dropped_lines(&ann.job(&job_id).await).is_empty());

        let page = ann.get(&format!("/jobs/{job_id}")).await.text().await.unwrap();
        let report_at = page.find("The worker&#39;s report").or_else(|| page.find("The worker's report")).unwrap();
        assert!(report_at < page.find("id=\"log\"").unwrap(), "the report leads");
        assert!(page.contains("✓ passed</span> <code>npm test</code>"), "{page}");
        assert!(page.contains("✗ failed</span> <code>npm run e2e</code>"), "{page}");
        assert!(page.contains("– skipped</span>"), "{page}");
        assert!(page.contains("a &lt;b&gt;CSV&lt;/b&gt; writer"), "text, never markup");
        assert!(page.contains(r#"<a href="http://127.0.0.1:3000/export" rel="noopener noreferrer">"#), "{page}");
        assert!(page.contains("Not done") && page.contains("PDF export"), "{page}");
        assert!(page.contains("href=\"#report\""), "{page}");
    }

    async fn a_bad_report_is_dropped_with_a_line_and_null_is_none(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let cases = [
            (json!({ "summary": "s", "done": vec!["x"; 31] }), "done: at most 30 entries"),
            (json!({ "summary": "x".repeat(2_001) }), "summary: at most 2000 characters"),
            (json!({ "summary": "s", "links": ["javascript:alert(1)"] }), "links"),
            (json!({ "summary": "bell \u{7}" }), "summary"),
            (json!({ "failing": 2 }), "not a report"),
        ];
        for (bad, why) in cases {
            let (job_id, lease) = start(&ann, &device).await;
            finish(&device, &job_id, &lease, json!({ "report": bad })).await;
            let job = ann.job(&job_id).await;
            assert_eq!(job.state, JobState::Succeeded, "never fails the job");
            assert!(job.outcome.as_ref().unwrap().report.is_none());
            let lines = dropped_lines(&job);
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].contains(why), "{lines:?} {why}");
            assert!(!lines[0].contains('\u{7}'), "made visible");
        }
        let (job_id, lease) = start(&ann, &device).await;
        finish(&device, &job_id, &lease, json!({ "report": null })).await;
        let job = ann.job(&job_id).await;
        assert!(job.outcome.unwrap().report.is_none() && dropped_lines(&ann.job(&job_id).await).is_empty());
        let page = ann.get(&format!("/jobs/{job_id}")).await.text().await.unwrap();
        assert!(!page.contains("id=\"report\""), "no report section without one");
    }

    async fn what_each_attempt_used_is_kept_bounded_and_shown(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = start(&ann, &device).await;
        let observed = json!({ "engine": "claude-code-acp", "model": "m".repeat(300), "mode": " " });
        let res = device.progress(&job_id, &lease, &json!({ "seq": 1, "lines": ["hi"], "observed": observed })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let job: Value = ann.get(&format!("/api/jobs/{job_id}")).await.json().await.unwrap();
        assert_eq!(job["observed"], json!([{ "attempt": 1, "engine": "claude-code-acp", "model": "m".repeat(200) }]));

        // The completion's word replaces the attempt's entry; an empty one changes nothing.
        let res = device.progress(&job_id, &lease, &json!({ "seq": 2, "lines": [], "observed": {} })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let used = json!({ "engine": "claude-code-acp", "engineVersion": "0.4.1", "model": "sonnet", "effort": "high" });
        finish(&device, &job_id, &lease, json!({ "observed": used })).await;
        let job: Value = ann.get(&format!("/api/jobs/{job_id}")).await.json().await.unwrap();
        assert_eq!(job["observed"], json!([{ "attempt": 1, "engine": "claude-code-acp", "engineVersion": "0.4.1",
                                             "model": "sonnet", "effort": "high" }]));

        let page = ann.get(&format!("/jobs/{job_id}")).await.text().await.unwrap();
        assert!(page.contains("What the run used"), "{page}");
        assert!(page.contains("<dd>0.4.1</dd>") && page.contains("<dd>sonnet</dd>"), "{page}");
        assert!(page.contains("<dt>Mode</dt><dd><span class=\"muted\">not reported</span></dd>"), "{page}");

        // A job that says nothing lists nothing, and its page says "not reported".
        let (quiet, lease) = start(&ann, &device).await;
        finish(&device, &quiet, &lease, json!({})).await;
        let job: Value = ann.get(&format!("/api/jobs/{quiet}")).await.json().await.unwrap();
        assert!(job.get("observed").is_none(), "{job}");
        let page = ann.get(&format!("/jobs/{quiet}")).await.text().await.unwrap();
        assert!(page.contains("Not reported: a coding agent says"), "{page}");
        assert!(!page.contains("<dt>Model</dt>"), "{page}");
    }

    async fn the_page_shows_a_gallery_and_the_held_files(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = start(&ann, &device).await;
        let shot = json!({ "id": "shot", "kind": "screenshot", "name": "home.png", "caption": "The home page",
                           "details": { "width": 1280, "height": 800 } });
        evidence(&device, &job_id, &lease, shot, PNG).await;
        let small = json!({ "id": "shot-small", "kind": "screenshot", "name": "home-small.png",
                            "variantOf": "shot", "variant": "preview", "details": { "width": 320, "height": 200 } });
        evidence(&device, &job_id, &lease, small, PNG).await;
        evidence(&device, &job_id, &lease, json!({ "id": "pic", "kind": "image", "name": "logo.png" }), PNG).await;
        let kept = json!({ "id": "kept", "kind": "screenshot", "name": "secret-page.png", "held": true });
        evidence(&device, &job_id, &lease, kept, PNG).await;
        finish(&device, &job_id, &lease, json!({})).await;

        let page = ann.get(&format!("/jobs/{job_id}")).await.text().await.unwrap();
        let base = format!("/api/jobs/{job_id}/evidence");
        // The screenshot's thumbnail is its preview variant; the image without one shows itself.
        assert!(page.contains(&format!(r#"<a href="{base}/shot" target="_blank" rel="noopener"><img src="{base}/shot-small" alt="The home page" loading="lazy" width="320" height="200">"#)), "{page}");
        assert!(page.contains(&format!(r#"<a href="{base}/pic" target="_blank" rel="noopener"><img src="{base}/pic" alt="logo.png""#)), "{page}");
        assert!(!page.contains("home-small.png"), "a variant is not listed on its own");
        // The held file: on this computer, with its three buttons and where they post.
        assert!(page.contains(&format!(r#"data-held="kept" data-url="{base}/kept""#)), "{page}");
        for action in ["preview", "release", "discard"] {
            assert!(page.contains(&format!(r#"data-held-action="{action}""#)), "{page}");
        }
        assert!(page.contains("secret-page.png") && page.contains("on this computer"), "{page}");
        assert!(!page.contains(&format!(r#"href="{base}/kept""#)), "nothing to download yet");
        assert!(page.contains(r#"<script src="/assets/results.js" defer>"#), "{page}");
        let script = ann.get("/assets/results.js").await;
        assert_eq!(script.status(), StatusCode::OK);
        assert!(script.text().await.unwrap().contains("x-tether-csrf"));
    }

    async fn a_follow_up_reads_the_earlier_report(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let (job_id, lease) = start(&ann, &device).await;
        finish(&device, &job_id, &lease, json!({ "report": report() })).await;
        let mut follow = job_body(&device.device_id);
        follow["continues"] = json!(job_id);
        assert_eq!(ann.post("/api/jobs", &follow).await.status(), StatusCode::CREATED);
        let context = device.claim_job().await.context.unwrap();
        for part in ["Worker's report:\nAdded the export button.\nIt writes CSV.\n", "Done:\n- the button\n",
                     "Tested:\n- passed: npm test\n- failed: npm run e2e (1 flaky)\n- skipped: npm run lint\n",
                     "Not done:\n- PDF export\n", "Risks:\n- large tables are slow\n",
                     "Links:\n- http://127.0.0.1:3000/export\n"] {
            assert!(context.contains(part), "{part:?} in {context}");
        }
    }
}

#[tokio::test]
async fn the_openapi_document_describes_the_report() {
    let app = spawn_app(crate::helpers::Backend::Sqlite).await;
    let res = reqwest::get(format!("{}/api/openapi.json", app.base))
        .await
        .unwrap();
    let document: Value = res.json().await.unwrap();
    let schemas = &document["components"]["schemas"];
    let report = &schemas["WorkerReport"];
    assert_eq!(report["required"], json!(["summary"]), "{report}");
    assert_eq!(
        report["properties"]["summary"]["maxLength"], 2000,
        "{report}"
    );
    assert_eq!(report["properties"]["done"]["maxItems"], 30, "{report}");
    assert!(schemas["TestedCommand"].is_object() && schemas["ObservedRun"].is_object());
    let complete = schemas["CompleteParams"]["properties"]["report"].to_string();
    assert!(
        complete.contains("#/components/schemas/WorkerReport"),
        "{complete}"
    );
}
