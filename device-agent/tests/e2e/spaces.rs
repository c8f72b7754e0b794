//! Shared spaces in two real Chromiums: Ann makes a space and an invitation link on the
//! pages; Bob, signed out in his own browser, opens the link, signs up from there, comes
//! back to it and accepts. Ann assigns a space job from Assign to her paired, sandboxed
//! computer; Bob's space page follows it live, and his job page of it follows it too,
//! showing its timeline and never a line of its command output, nor its log or files.

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::jobs::{Job, JobState};

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, pair, spawn_server, Daemon, Web};

/// Prints a line only the owner may read (made at run time, so the recipe's own text never
/// holds it), then waits for the test's go-ahead (`go` in the folder) and leaves a file.
const RECIPE: &str = r#"echo "output-only-$((6*7))"
while [ ! -e go ]; do sleep 0.1; done
echo "more output-only-$((6*7))"
echo done >> result.txt"#;
const PRIVATE: &str = "output-only-42";

/// The job's row on a space page, by a selector inside it.
fn row(job_id: &str, inside: &str) -> String {
    format!("document.querySelector('[data-job=\"{job_id}\"] {inside}')")
}

/// Lets the recipe in `work` go on, once.
fn go(work: &Path) {
    std::fs::write(work.join("go"), "").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_shares_a_job_live_and_keeps_its_output_private() {
    let Some(chromium) = chromium_or_skip("the spaces test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();

    // Ann's computer: paired, sandboxed (Landlock), a recipe that prints as it goes.
    let ann_api = Web::sign_up_as(&base, "ann@example.com").await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&base, &ann_api, home.path()).await;
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    agent_ok(
        home.path(),
        &["recipe", "add", "build", "--", "sh", "-c", RECIPE],
    )
    .await;
    let daemon = Daemon::start(home.path());
    ann_api.wait_for_engines(&device_id, &["build"]).await;

    // Ann makes a space on /spaces, then an invitation link, shown once.
    let mut ann = Browser::launch(&chromium).await;
    ann.sign_in(&base, "ann@example.com", "/spaces").await;
    assert!(ann.text("main").await.contains("You are in no space yet"));
    ann.fill("#new-space input[name=name]", "Web team").await;
    ann.click("#new-space button[type=submit]").await;
    ann.wait_for(
        "/^\\/spaces\\/[0-9a-f-]+$/.test(location.pathname) && document.readyState === 'complete'",
    )
    .await;
    let space_id = ann
        .eval("location.pathname.split('/')[2]")
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(ann.text("h1").await, "Web team");
    ann.click("form[data-invite] button[type=submit]").await;
    ann.wait_for("!document.getElementById('invitation-made').hidden")
        .await;
    let link = ann
        .eval("document.getElementById('invitation-link').value")
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        link.starts_with(&format!("{base}/invitations#tsi_")),
        "{link}"
    );
    assert!(ann
        .text("#invitation-expiry")
        .await
        .starts_with("It works once, for a member, until "));
    assert_eq!(
        ann.eval("document.querySelectorAll('#pending-invitations li').length")
            .await,
        json!(1)
    );
    ann.screenshot("space-owner").await;

    // Bob, signed out in his own browser, opens the link: the secret leaves the address
    // bar and waits in the tab while he signs up, and the page he comes back to has it.
    let mut bob = Browser::launch(&chromium).await;
    bob.goto(&link).await;
    bob.wait_for("document.querySelector('[data-invitation-signed-out]') && location.hash === ''")
        .await;
    assert_eq!(
        bob.eval("sessionStorage.getItem('tether-invitation')?.startsWith('tsi_')")
            .await,
        json!(true)
    );
    bob.click("a[href='/signup?next=/invitations']").await;
    bob.wait_for("location.pathname === '/signup' && document.readyState === 'complete'")
        .await;
    bob.fill("input[name=name]", "Bob").await;
    bob.fill("input[name=email]", "bob@example.com").await;
    bob.fill("input[name=password]", "correct horse battery")
        .await;
    bob.click("form[data-api] button[type=submit]").await;
    bob.wait_for("location.pathname === '/invitations' && !document.getElementById('invitation-offer').hidden")
        .await;
    assert_eq!(
        bob.text("#invitation-text").await,
        "Owner invited you to Web team as a member."
    );
    bob.screenshot("invitation").await;
    bob.click("[data-accept]").await;
    let space_path = format!("/spaces/{space_id}");
    bob.wait_for(&format!(
        "location.pathname === {} && document.readyState === 'complete'",
        json!(space_path)
    ))
    .await;
    assert!(bob
        .text("[data-field=role]")
        .await
        .starts_with("You are a member here · 2 members"));
    assert_eq!(
        bob.eval("sessionStorage.getItem('tether-invitation')")
            .await,
        Value::Null
    );
    // The link worked once.
    bob.goto(&link).await;
    bob.wait_for(
        "document.getElementById('invitation-status').textContent.includes('used already')",
    )
    .await;

    // Ann makes a second link and revokes it: it leaves her list and stops working.
    ann.goto(&format!("{base}{space_path}")).await;
    ann.wait_for("document.querySelectorAll('#pending-invitations li').length === 0")
        .await;
    ann.click("form[data-invite] button[type=submit]").await;
    ann.wait_for("document.querySelectorAll('#pending-invitations li').length === 1")
        .await;
    let second = ann
        .eval("document.getElementById('invitation-link').value.split('#')[1]")
        .await;
    ann.click("#pending-invitations button[data-revoke]").await;
    ann.wait_for("document.querySelectorAll('#pending-invitations li').length === 0")
        .await;
    let looked_up = ann
        .eval(&format!(
            "fetch('/api/invitations/lookup', {{method: 'POST', headers: {{'content-type': \
             'application/json', 'x-tether-csrf': document.querySelector('meta[name=csrf-token]')\
             .content}}, body: JSON.stringify({{token: {second}}})}}).then((r) => r.status)"
        ))
        .await;
    assert_eq!(looked_up, json!(410));

    // Bob watches the space; Ann assigns a space job from Assign.
    bob.goto(&format!("{base}{space_path}")).await;
    bob.eval("window.stayed = true").await;
    ann.goto(&format!("{base}/assign")).await;
    ann.wait_for("document.querySelector('select[name=spaceId]')")
        .await;
    ann.eval(
        "(() => { const select = document.querySelector('select[name=spaceId]'); \
         select.value = [...select.options].find((o) => o.textContent === 'Web team').value; \
         document.querySelector('select[name=engine]').value = 'build'; })()",
    )
    .await;
    ann.fill("input[name=title]", "Build the site").await;
    ann.fill("textarea[name=prompt]", "build it").await;
    ann.click("form[data-api='/api/jobs'] button[type=submit]")
        .await;
    ann.wait_for("location.pathname.startsWith('/jobs/')").await;
    let job_id = ann
        .eval("location.pathname.split('/')[2]")
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        ann.text("[data-field=space]").await,
        "in Web team",
        "the owner's page names the space"
    );

    // Bob's page shows it arrive and run, then end, without a reload.
    bob.wait_for(&format!(
        "{}?.textContent === 'running'",
        row(&job_id, "[data-field=state]")
    ))
    .await;
    let shown = bob.text(&format!("[data-job=\"{job_id}\"]")).await;
    assert!(
        shown.contains("Build the site") && shown.contains("by Owner on test-box"),
        "{shown}"
    );
    bob.screenshot("space-member").await;
    go(work.path());
    bob.wait_for(&format!(
        "{}?.textContent === 'succeeded' && window.stayed",
        row(&job_id, "[data-field=state]")
    ))
    .await;
    let job = ann_api
        .wait_until_ended(&job_id, Duration::from_secs(30))
        .await;
    assert_eq!(job.state, JobState::Succeeded, "{}", daemon.stderr());
    std::fs::remove_file(work.path().join("go")).unwrap();

    // A second space job; Bob opens its page while it runs and it follows the run to its
    // end for him too.
    let body = json!({
        "deviceId": device_id, "title": "Build it again", "prompt": "again",
        "folder": "work", "engine": "build", "mode": "unattended", "network": false,
        "timeoutMinutes": 5, "spaceId": space_id,
    });
    let res = ann_api.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let again: Job = res.json().await.unwrap();
    let again_id = again.id.to_string();
    ann_api
        .wait_for_job(&again_id, Duration::from_secs(30), |job| {
            job.state == JobState::Running
        })
        .await;
    bob.wait_for(&format!(
        "{}?.textContent === 'running'",
        row(&again_id, "[data-field=state]")
    ))
    .await;
    bob.click(&format!("[data-job=\"{again_id}\"] a")).await;
    bob.wait_for(&format!(
        "location.pathname === '/jobs/{again_id}' && document.readyState === 'complete'"
    ))
    .await;
    bob.wait_for("document.querySelector('section.shared-job')")
        .await;
    bob.eval("window.stayed = true").await;
    go(work.path());
    bob.wait_for(
        "document.querySelector('[data-field=state]').textContent === 'succeeded' && window.stayed",
    )
    .await;
    // What the ended run brings arrives with the page's regions, as on the owner's page.
    bob.wait_for("document.getElementById('job-changes').textContent.includes('result.txt')")
        .await;
    bob.screenshot("member-job").await;
    assert!(bob.text("#job-run").await.contains("Claimed by the device"));
    assert_eq!(
        bob.eval(&format!(
            "document.documentElement.outerHTML.includes({})",
            json!(PRIVATE)
        ))
        .await,
        json!(false),
        "command output on a member's page"
    );
    assert_eq!(
        bob.eval(
            "['.log', '[data-log]', '[data-files]', '[data-changes]', '[data-diff-path]', \
             '[data-job-decisions]', '[data-while-active]', '[data-held]'] \
             .filter((selector) => document.querySelector(selector))"
        )
        .await,
        json!([]),
        "the owner's parts on a member's page"
    );
    // What the page would read for them is the owner's alone.
    let seen = bob
        .eval(&format!(
            "Promise.all([fetch('/api/jobs/{again_id}/lines').then((r) => r.status), \
             fetch('/api/jobs/{again_id}').then((r) => r.json())]) \
             .then(([lines, job]) => ({{ lines, shared: job.sharedView, \
             private: JSON.stringify(job).includes({}) }}))",
            json!(PRIVATE)
        ))
        .await;
    assert_eq!(
        seen,
        json!({ "lines": 404, "shared": true, "private": false })
    );

    // Ann's own page has it all.
    ann.goto(&format!("{base}/jobs/{again_id}")).await;
    ann.wait_for(&format!(
        "document.querySelector('.log-rows')?.textContent.includes({})",
        json!(PRIVATE)
    ))
    .await;
    drop(daemon);
}
