//! What a run hands back, end to end with the real server, daemon and sandbox:
//!
//! - the real Claude Code ACP adapter (scripted model) calls `tether_screenshot` of a page
//!   served on loopback and then `tether_report`: the job carries the report, the
//!   screenshot is held on the computer (the default), and once released through the API
//!   it is a real PNG of that page (a pixel has the colour the page sets);
//! - a recipe takes two screenshots with `tether-agent tool screenshot` and leaves
//!   `.tether/result.json`: in Chromium the job page leads with the report, and the held
//!   screenshots go through Preview, Release and Discard, the discarded one deleted on the
//!   computer with its preview.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tether_protocol::decisions::Answer;
use tether_protocol::jobs::{Evidence, Job, JobState};

use super::acp::follow_answering;
use super::coding_agents::{coding_agents, one_at_a_time};
use super::model_server::Script;
use super::presets::{Agent, Computer};
use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, backend_works, output_lines, pair, spawn_server, start_daemon, Web};

/// The colour the test page paints itself: rgb(58, 123, 213).
const PAGE_COLOUR: [u8; 3] = [58, 123, 213];

/// Serves one page, painted [`PAGE_COLOUR`], on loopback for as long as the test runs;
/// its address.
fn serve_page() -> String {
    crate::capture::serve(
        "<!doctype html><title>Built</title>\
         <body style=\"margin:0;background:rgb(58,123,213)\"><h1>Built</h1></body>"
            .to_owned(),
    )
}

/// The job's evidence of `kind` that is not a variant.
fn originals<'a>(job: &'a Job, kind: &str) -> Vec<&'a Evidence> {
    job.evidence
        .iter()
        .filter(|item| item.kind == kind && item.variant_of.is_none())
        .collect()
}

/// The variants made from `original`.
fn variants<'a>(job: &'a Job, original: &Evidence) -> Vec<&'a Evidence> {
    job.evidence
        .iter()
        .filter(|item| item.variant_of.as_deref() == Some(original.id.as_str()))
        .collect()
}

/// The colour of the pixel at (`x`, `y`) of a PNG.
fn pixel(png_bytes: &[u8], x: usize, y: usize) -> [u8; 3] {
    crate::capture::decode(png_bytes, x, y).2
}

/// Releases a held file through the API; its stored bytes.
async fn release(web: &Web, job_id: &str, evidence_id: &str) -> Vec<u8> {
    let path = format!("/api/jobs/{job_id}/evidence/{evidence_id}/release");
    let res = web.post(&path, &json!({})).await;
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    let released: Evidence = serde_json::from_str(&text).unwrap();
    assert!(!released.held, "{released:?}");
    let res = web
        .get(&format!("/api/jobs/{job_id}/evidence/{evidence_id}"))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    res.bytes().await.unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_screenshots_a_page_and_reports_through_mcp() {
    if !backend_works("bwrap").await || chromium_or_skip("the screenshot tool").is_none() {
        return;
    }
    let _turn = one_at_a_time().await;
    let Some(agents) = coding_agents().await else {
        return;
    };
    let page = serve_page();
    let computer = Computer::start(Agent::ClaudeCode, &agents, "bwrap", "model", &[], |_| {}).await;
    let report = json!({
        "summary": "Built the page.\nIt is blue.",
        "done": ["the page"],
        "tested": [{"command": "tether_screenshot", "outcome": "passed"}],
        "notDone": ["dark mode"],
    });
    let shot = json!({ "url": page, "width": 640, "height": 480 });
    computer.model.set_script(
        Script::call_tool("tether_screenshot", shot, "shot1")
            .then_call_tool("tether_report", report.clone()),
    );
    let body = json!({
        "deviceId": computer.device_id, "title": "Build the page",
        "prompt": "Do what the model says.", "folder": "work", "engine": "agent",
        "mode": "unattended", "network": false, "timeoutMinutes": 5,
    });
    let res = computer.web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let job_id = job.id.to_string();
    let (job, _) =
        follow_answering(&computer.web, &computer.daemon, &job_id, |_| Answer::Deny).await;
    let requests = computer.model.requests();
    let context = format!(
        "{job:#?}\n{:#?}\n{requests:#?}\n{}",
        output_lines(&job),
        computer.daemon.stderr()
    );
    assert_eq!(job.state, JobState::Succeeded, "{context}");
    for tool in [
        "tool mcp__tether__tether_screenshot",
        "tool mcp__tether__tether_report",
    ] {
        assert!(
            requests.iter().any(|request| request.answer == tool),
            "{tool}: {context}"
        );
    }
    // The report came back as the worker gave it.
    let kept = job
        .outcome
        .as_ref()
        .and_then(|outcome| outcome.report.clone());
    let kept = kept.unwrap_or_else(|| panic!("no report: {context}"));
    assert_eq!(kept.summary, report["summary"]);
    assert_eq!(kept.not_done, ["dark mode"]);
    // What the run used, as Claude Code said it.
    assert!(
        job.observed.iter().any(|used| used.used.engine.is_some()),
        "{context}"
    );
    // The screenshot is held (the default), with its preview, sized as asked.
    let shots = originals(&job, "screenshot");
    assert_eq!(shots.len(), 1, "{context}");
    let shot = shots[0];
    assert!(shot.held, "{shot:?}");
    let details = shot.details.unwrap();
    assert_eq!((details.width, details.height), (Some(640), Some(480)));
    let previews = variants(&job, shot);
    assert_eq!(previews.len(), 1, "{context}");
    // Held, so the server has no bytes to tell its type from: the name says it.
    assert!(
        previews[0].held && previews[0].name.ends_with("-preview.jpg"),
        "{:?}",
        previews[0]
    );
    // Released, it is a real picture of that page.
    let bytes = release(&computer.web, &job_id, &shot.id).await;
    let colour = pixel(&bytes, 320, 400);
    assert!(crate::capture::close(colour, PAGE_COLOUR), "{colour:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_screenshots_are_previewed_released_and_discarded_from_the_job_page() {
    let Some(chromium) = chromium_or_skip("the held evidence page test") else {
        return;
    };
    if !backend_works("bwrap").await {
        return;
    }
    let page = serve_page();
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let web = Web::sign_up_as(&base, "owner@example.com").await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&base, &web, home.path()).await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    let result = json!({
        "summary": "Painted the page blue.",
        "tested": [{"command": "curl -s $PAGE", "outcome": "passed"}],
        "risks": ["the blue is bright"],
    });
    let script = format!(
        "set -e\n\
         \"$TETHER_AGENT\" tool screenshot {page} --width 400 --height 300\n\
         \"$TETHER_AGENT\" tool screenshot {page} --width 300 --height 200 --full-page\n\
         mkdir -p .tether\n\
         printf '%s' '{result}' > .tether/result.json\n\
         echo shot"
    );
    agent_ok(
        home.path(),
        &["recipe", "add", "shoot", "--", "sh", "-c", &script],
    )
    .await;
    let _daemon = start_daemon(home.path(), "bwrap");
    web.wait_for_engines(&device_id, &["shoot"]).await;
    let body = json!({
        "deviceId": device_id, "title": "Paint the page", "prompt": "Paint it blue.",
        "folder": "work", "engine": "shoot", "mode": "unattended", "network": false,
        "timeoutMinutes": 5,
    });
    let res = web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let job_id = job.id.to_string();
    let job = web
        .wait_for_job(&job_id, Duration::from_secs(90), |job| job.state.is_final())
        .await;
    assert_eq!(job.state, JobState::Succeeded, "{:#?}", output_lines(&job));
    let shots = originals(&job, "screenshot");
    assert_eq!(shots.len(), 2, "{job:#?}");
    assert!(shots.iter().all(|shot| shot.held), "{job:#?}");
    let named = |name: &str| *shots.iter().find(|shot| shot.name == name).unwrap();
    let (wide, narrow) = (named("screenshot.png"), named("screenshot-2.png"));
    assert_eq!(wide.details.unwrap().width, Some(400));
    let (kept, dropped) = (wide.id.clone(), narrow.id.clone());
    let dropped_preview = variants(&job, narrow)[0].id.clone();

    let mut browser = Browser::launch(&chromium).await;
    browser.phone_viewport().await;
    browser
        .sign_in(&base, "owner@example.com", &format!("/jobs/{job_id}"))
        .await;
    // The page leads with the worker's report.
    browser
        .wait_for(
            "document.querySelector('#job-report')?.innerText.includes('Painted the page blue.')",
        )
        .await;
    let report = browser.text("#job-report").await;
    assert!(report.contains("curl -s $PAGE"), "{report}");
    assert!(report.contains("the blue is bright"), "{report}");

    // Preview: the picture comes from the computer and shows in place.
    let held = |id: &str| format!("li[data-held='{id}']");
    browser
        .click(&format!("{} button[data-held-action=preview]", held(&kept)))
        .await;
    browser
        .wait_for(&format!(
            "[...document.querySelectorAll(\"{} img\")].some(img => img.complete && img.naturalWidth === 400)",
            held(&kept)
        ))
        .await;
    // Release: stored like any evidence, it leaves the held list for the gallery.
    browser
        .click(&format!("{} button[data-held-action=release]", held(&kept)))
        .await;
    browser
        .wait_for(&format!(
            "!document.querySelector(\"{}\") && [...document.querySelectorAll(\"li[data-picture='{kept}'] img\")].some(img => img.complete && img.naturalWidth > 0)",
            held(&kept)
        ))
        .await;
    // Discard: gone from the page, the job and the computer, with its preview.
    browser.eval("window.confirm = () => true").await;
    browser
        .click(&format!(
            "{} button[data-held-action=discard]",
            held(&dropped)
        ))
        .await;
    browser
        .wait_for(&format!("!document.querySelector(\"{}\")", held(&dropped)))
        .await;
    let job = web.job(&job_id).await;
    let released = job.evidence.iter().find(|item| item.id == kept).unwrap();
    assert!(!released.held && released.mime.as_deref() == Some("image/png"));
    assert!(
        job.evidence
            .iter()
            .all(|item| item.id != dropped && item.id != dropped_preview),
        "{job:#?}"
    );
    let left = files_under(&held_root(home.path()));
    assert!(
        left.iter()
            .all(|path| !path.to_string_lossy().contains(&dropped)
                && !path.to_string_lossy().contains(&dropped_preview)),
        "{left:?}"
    );
    assert!(
        left.iter()
            .any(|path| path.to_string_lossy().contains(&kept)),
        "the released file stays on the computer, marked released: {left:?}"
    );
}

/// `<data dir>-evidence/held`, where the agent keeps held files.
fn held_root(home: &Path) -> PathBuf {
    let name = home.file_name().unwrap().to_string_lossy();
    home.with_file_name(format!("{name}-evidence")).join("held")
}

/// Every file under `folder`, at any depth.
fn files_under(folder: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}
