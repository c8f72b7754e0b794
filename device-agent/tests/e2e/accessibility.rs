//! Every page checked with axe-core (from npm) in a real headless Chromium, as a phone in
//! light and dark mode and as a desktop window: any `serious` or `critical` violation
//! fails the test, naming the rule and the elements.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, npm, pair, spawn_server, Daemon, Web};

/// Runs axe on the page and answers its serious and critical violations, in short.
const RUN_AXE: &str = r#"axe.run(document).then((result) => ({
    passes: result.passes.length,
    problems: result.violations.filter((v) => v.impact === "serious" || v.impact === "critical")
        .map((v) => `${v.id} (${v.impact}): ${v.help}\n` + v.nodes.map((n) =>
            `    ${n.target.join(" ")}: ${n.failureSummary.replace(/\s+/g, " ")}`).join("\n")),
}))"#;

/// axe-core's script, from `tests/axe-core`'s lock; `None` (after saying why) when it cannot
/// be installed here.
async fn axe_source() -> Option<String> {
    let dir = npm::AXE_CORE.installed().await?;
    Some(std::fs::read_to_string(dir.join("node_modules/axe-core/axe.min.js")).unwrap())
}

/// The serious and critical violations on the page at `url`, each as one text.
async fn violations(browser: &mut Browser, axe: &str, url: &str) -> Vec<String> {
    browser.goto(url).await;
    // Scripts that fill the page in (the badge, the Notifications status) settle first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let path = url.split_once("//").map_or(url, |(_, rest)| rest);
    let path = &path[path.find('/').unwrap_or(path.len())..];
    // A fragment is no part of where the page landed (an invitation's secret leaves it).
    let path = path.split('#').next().unwrap_or(path);
    let landed = browser.eval("location.pathname + location.search").await;
    assert_eq!(landed, json!(path), "the page is not the one meant");
    browser.eval(axe).await;
    let result = browser.eval(RUN_AXE).await;
    assert!(
        result["passes"].as_u64() > Some(10),
        "axe ran on {url}: {result}"
    );
    let found = result["problems"].as_array().cloned().unwrap_or_default();
    found
        .iter()
        .map(|v| format!("{url}: {}", v.as_str().unwrap_or_default()))
        .collect()
}

/// Looks at the pages in three ways: a phone, the phone in dark mode, a desktop.
async fn check_all(browser: &mut Browser, axe: &str, urls: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for look in ["phone", "dark", "desktop"] {
        match look {
            "phone" => browser.phone_viewport().await,
            "desktop" => browser.desktop_viewport().await,
            _ => {}
        }
        let scheme = if look == "dark" { "dark" } else { "light" };
        browser
            .page_call(
                "Emulation.setEmulatedMedia",
                json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
            )
            .await;
        for url in urls {
            for violation in violations(browser, axe, url).await {
                found.push(format!("[{look}] {violation}"));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_passes_axe() {
    let Some(chromium) = chromium_or_skip("the accessibility test") else {
        return;
    };
    let Some(axe) = axe_source().await else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let web = Web::sign_up(&base).await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&base, &web, home.path()).await;
    let work = tempfile::tempdir().unwrap();
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    agent_ok(
        home.path(),
        &["recipe", "add", "greet", "--", "sh", "-c", "echo hello"],
    )
    .await;
    let _daemon = Daemon::start(home.path());
    web.wait_for_device(&device_id, |device| {
        device
            .capabilities
            .as_ref()
            .is_some_and(|c| c.engines.iter().any(|e| e.name == "greet"))
    })
    .await;
    let job = web.create_job(&device_id, "greet", "say hello").await;
    web.wait_until_ended(job.id.as_ref(), Duration::from_secs(60))
        .await;
    let (space_id, space_job, invitation) = shared_space(&base, &web, &device_id).await;

    let mut browser = Browser::launch(&chromium).await;
    let signed_out = [
        format!("{base}/signin"),
        format!("{base}/signup"),
        format!("{base}/invitations#{invitation}"),
    ];
    let mut found = check_all(&mut browser, &axe, &signed_out).await;
    browser
        .sign_in(&base, "owner@example.com", "/computers")
        .await;
    let signed_in: Vec<String> = [
        "/computers",
        "/assign",
        "/jobs",
        &format!("/jobs/{}", job.id),
        "/needs-me",
        "/account",
        "/account/notifications",
        &format!("/computers/{device_id}/console"),
        "/link",
        "/link?code=ABCD-EFGH",
        // The owner is the platform admin (the first to sign up).
        "/admin",
        "/computers?q=test&show=online&sort=-agent",
        // The error page: a job that is not there.
        "/jobs/01900000-0000-7000-8000-000000000000",
        "/assets/offline.html",
        "/spaces",
        &format!("/spaces/{space_id}"),
        // An invitation opened by someone in its space already: what it joins, and Accept.
        &format!("/invitations#{invitation}"),
        "/invitations",
    ]
    .iter()
    .map(|path| format!("{base}{path}"))
    .collect();
    found.extend(check_all(&mut browser, &axe, &signed_in).await);
    // A member of the space: the space as they see it, and the space job's member page.
    browser.call(None, "Storage.clearCookies", json!({})).await;
    browser
        .sign_in(&base, "member@example.com", "/spaces")
        .await;
    let as_member: Vec<String> = [format!("/spaces/{space_id}"), format!("/jobs/{space_job}")]
        .iter()
        .map(|path| format!("{base}{path}"))
        .collect();
    found.extend(check_all(&mut browser, &axe, &as_member).await);
    assert!(
        found.is_empty(),
        "axe found serious or critical problems:\n{}",
        found.join("\n")
    );
}

/// A space of the owner's with a member, a space job of the owner's that ran, and an
/// invitation link's secret still unused. Answers their ids and the secret.
async fn shared_space(base: &str, owner: &Web, device_id: &str) -> (String, String, String) {
    let res = owner
        .post("/api/spaces", &json!({ "name": "Web team" }))
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let space: Value = res.json().await.unwrap();
    let space_id = space["id"].as_str().unwrap().to_owned();
    let invite = |role: &'static str| {
        let path = format!("/api/spaces/{space_id}/invitations");
        async move {
            let res = owner.post(&path, &json!({ "role": role })).await;
            assert_eq!(res.status(), StatusCode::CREATED);
            let made: Value = res.json().await.unwrap();
            made["token"].as_str().unwrap().to_owned()
        }
    };
    let member = Web::sign_up_as(base, "member@example.com").await;
    let token = invite("member").await;
    let res = member
        .post("/api/invitations/accept", &json!({ "token": token }))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let body = json!({
        "deviceId": device_id, "title": "Say hello to the team", "prompt": "say hello",
        "folder": "work", "engine": "greet", "mode": "unattended", "network": false,
        "timeoutMinutes": 5, "spaceId": space_id,
    });
    let res = owner.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Value = res.json().await.unwrap();
    let job_id = job["id"].as_str().unwrap().to_owned();
    owner
        .wait_until_ended(&job_id, Duration::from_secs(60))
        .await;
    let waiting = invite("viewer").await;
    (space_id, job_id, waiting)
}
