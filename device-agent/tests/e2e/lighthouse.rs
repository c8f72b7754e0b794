//! Lighthouse (from npm, `tests/lighthouse`) on the pages people use most — Jobs, a job
//! page, Computers and Needs me — signed in, in the machine's Chromium: each must score at
//! least 0.95 for accessibility and for best practices. The failing audits are named.

use std::time::Duration;

use serde_json::Value;

use crate::chromium::chromium_or_skip;
use crate::{agent_ok, npm, pair, spawn_server, Daemon, Web};

/// The lowest score a page may have in either category.
const LEAST_SCORE: f64 = 0.95;

/// The `Cookie` header of a fresh session of `email` (the password every e2e account has).
async fn session_cookie(base: &str, email: &str) -> String {
    let res = reqwest::Client::new()
        .post(format!("{base}/api/auth/login"))
        .json(&serde_json::json!({ "email": email, "password": "correct horse battery" }))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "sign-in: {}", res.status());
    res.cookies()
        .map(|cookie| format!("{}={}", cookie.name(), cookie.value()))
        .collect::<Vec<_>>()
        .join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_pages_score_well_in_lighthouse() {
    let Some(chromium) = chromium_or_skip("the Lighthouse test") else {
        return;
    };
    let Some(lighthouse) = npm::LIGHTHOUSE.installed().await else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let web = Web::sign_up(&base).await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&base, &web, home.path()).await;
    let work = tempfile::tempdir().unwrap();
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    // A failing run with a long log: the job page at its heaviest.
    let script =
        "for i in $(seq 1 300); do echo \"step $i\"; done; echo 'error: it broke' >&2; exit 1";
    agent_ok(
        home.path(),
        &["recipe", "add", "build", "--", "sh", "-c", script],
    )
    .await;
    let _daemon = Daemon::start(home.path());
    web.wait_for_device(&device_id, |device| {
        device
            .capabilities
            .as_ref()
            .is_some_and(|c| c.engines.iter().any(|e| e.name == "build"))
    })
    .await;
    let job = web.create_job(&device_id, "build", "build it").await;
    web.wait_until_ended(job.id.as_ref(), Duration::from_secs(60))
        .await;

    let script = lighthouse.join("run.mjs");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/lighthouse/run.mjs"),
        &script,
    )
    .unwrap();
    let cookie = session_cookie(&base, "owner@example.com").await;
    let urls: Vec<String> = [
        "/jobs",
        &format!("/jobs/{}", job.id),
        "/computers",
        "/needs-me",
    ]
    .iter()
    .map(|path| format!("{base}{path}"))
    .collect();
    let output = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new("node")
            .arg(&script)
            .arg(&chromium)
            .arg(&cookie)
            .args(&urls)
            .current_dir(&lighthouse)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("Lighthouse ran for more than 10 minutes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "Lighthouse failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut low = Vec::new();
    let mut seen = 0;
    for line in stdout.lines().filter(|line| line.starts_with('{')) {
        let page: Value = serde_json::from_str(line).unwrap();
        seen += 1;
        println!("lighthouse: {line}");
        let url = page["url"].as_str().unwrap_or_default();
        assert_eq!(
            page["landed"], page["url"],
            "{url} was not the page measured"
        );
        for category in ["accessibility", "best-practices"] {
            let score = page["scores"][category].as_f64().unwrap_or(0.0);
            if score < LEAST_SCORE {
                low.push(format!("{url}: {category} {score} ({})", page["failing"]));
            }
        }
    }
    assert_eq!(seen, urls.len(), "one result per page: {stdout}");
    assert!(
        low.is_empty(),
        "pages below {LEAST_SCORE}:\n{}",
        low.join("\n")
    );
}
