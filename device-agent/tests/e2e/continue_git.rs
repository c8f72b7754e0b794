//! Continue of a Commit job commits, in a real headless Chromium on a phone (390 × 844),
//! with real git and the real agent: a job that commits on a new branch runs, Continue on
//! its page shows that job's settings (Commit, going on with the branch it made), and the
//! follow-up's work is committed on the same branch too.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tether_protocol::git::{BranchChoice, Delivery};
use tether_protocol::jobs::{Job, JobState};

use crate::chromium::{chromium_or_skip, Browser};
use crate::delivery::git;
use crate::{agent_command, agent_ok, backend_works, pair, spawn_server, Daemon, Web};

/// Appends the prompt to `notes.txt` in the job's folder.
const NOTES: &str = r#"printf '%s\n' "$TETHER_TASK_PROMPT" >> notes.txt
echo done"#;
/// The Continue form on a job page.
const CONTINUE: &str = "section[aria-labelledby=continue-heading] form";
/// The Run again form on a job page.
const RERUN: &str = "section[aria-labelledby=run-again-heading] form";
/// axe's serious and critical violations on the page, each named with its elements.
const RUN_AXE: &str = r#"axe.run(document).then((result) => result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id}: ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`))"#;

/// What axe-core (from npm, as the accessibility test installs it) finds on the page;
/// nothing, after saying why, when it cannot be installed here.
async fn axe_problems(browser: &mut Browser) -> Vec<serde_json::Value> {
    let Some(dir) = crate::npm::AXE_CORE.installed().await else {
        return Vec::new();
    };
    let axe = std::fs::read_to_string(dir.join("node_modules/axe-core/axe.min.js")).unwrap();
    browser.eval(&axe).await;
    let found = browser.eval(RUN_AXE).await;
    found.as_array().cloned().unwrap()
}

async fn is(browser: &mut Browser, expression: &str) -> bool {
    browser.eval(&format!("!!({expression})")).await == json!(true)
}

/// The computer's home folder: the git identity Tether commits as.
fn person_home(home: &Path) {
    std::fs::create_dir_all(home).unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = Person\n\temail = person@example.com\n",
    )
    .unwrap();
}

async fn ended(web: &Web, job_id: &str, daemon: &Daemon) -> Job {
    let job = web.wait_until_ended(job_id, Duration::from_secs(90)).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_of_a_commit_job_commits() {
    let Some(chromium) = chromium_or_skip("the Continue of a Commit job test") else {
        return;
    };
    if !crate::external::git() || !backend_works("landlock").await {
        return;
    }
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let (data, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (work, person) = (tmp.path().join("work"), tmp.path().join("person"));
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("notes.txt"), "notes\n").unwrap();
    git(&work, &["add", "notes.txt"]);
    git(&work, &["commit", "-q", "-m", "first"]);
    person_home(&person);
    let device_id = pair(&server.base, &web, data.path()).await;
    let work_path = work.to_str().unwrap();
    agent_ok(data.path(), &["folders", "share", "work", work_path]).await;
    agent_ok(
        data.path(),
        &["recipe", "add", "notes", "--", "sh", "-c", NOTES],
    )
    .await;
    let mut command = agent_command(data.path());
    command.env("HOME", &person);
    let daemon = Daemon::spawn(command);
    web.wait_for_device(&device_id, |device| {
        device.capabilities.as_ref().is_some_and(|caps| {
            caps.git.is_some() && caps.engines.iter().any(|e| e.name == "notes")
        })
    })
    .await;

    // The first job commits on a new branch.
    let body = json!({
        "deviceId": device_id, "title": "Write the notes", "prompt": "first line",
        "folder": "work", "engine": "notes", "mode": "unattended", "network": false,
        "timeoutMinutes": 5,
        "git": { "delivery": "commit", "branch": { "new": "tether/notes" } },
    });
    let res = web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), reqwest::StatusCode::CREATED);
    let first: Job = res.json().await.unwrap();
    let first = ended(&web, first.id.as_str(), &daemon).await;
    assert_eq!(
        first.delivery.as_ref().map(|d| d.commits.len()),
        Some(1),
        "{first:#?}"
    );
    assert_eq!(
        git(&work, &["rev-list", "--count", "main..tether/notes"]),
        "1"
    );

    // Its page on a phone: Continue shows the same settings, Commit on the branch it made.
    let mut browser = Browser::launch(&chromium).await;
    browser.phone_viewport().await;
    let page = format!("/jobs/{}", first.id);
    browser
        .sign_in(&server.base, "owner@example.com", &page)
        .await;
    browser
        .click(&format!("{CONTINUE} details.settings summary"))
        .await;
    assert!(is(&mut browser, &format!("document.querySelector('{CONTINUE} input[name=git-delivery][value=commit]').checked")).await);
    assert!(is(&mut browser, &format!("document.querySelector('{CONTINUE} input[name=git-branch][value=existing]').checked")).await);
    assert_eq!(
        browser
            .eval(&format!(
                "document.querySelector('{CONTINUE} input[data-git=existing]').value"
            ))
            .await,
        json!("tether/notes")
    );
    assert!(
        is(
            &mut browser,
            &format!(
                "document.querySelector('{CONTINUE} select[name=mode]').value === 'unattended'"
            )
        )
        .await
    );
    assert!(
        is(
            &mut browser,
            "document.querySelector('main').scrollWidth <= screen.width"
        )
        .await,
        "the page is wider than a phone"
    );
    browser
        .eval(&format!(
            "document.querySelector('{CONTINUE}').scrollIntoView()"
        ))
        .await;
    browser.screenshot("continue-commit-phone").await;
    browser
        .eval(&format!(
            "document.querySelector('{CONTINUE} fieldset.git').scrollIntoView()"
        ))
        .await;
    browser.screenshot("continue-commit-phone-git").await;
    // Both forms opened, every setting on show, pass axe as a phone.
    browser
        .click(&format!("{RERUN} details.settings summary"))
        .await;
    let problems = axe_problems(&mut browser).await;
    assert!(problems.is_empty(), "axe: {problems:#?}");
    browser
        .fill(&format!("{CONTINUE} textarea[name=prompt]"), "second line")
        .await;
    browser
        .click(&format!("{CONTINUE} button[type=submit]"))
        .await;
    browser
        .wait_for(&format!(
            "location.pathname.startsWith('/jobs/') && location.pathname !== '{page}' && document.readyState === 'complete'"
        ))
        .await;
    let path = browser.eval("location.pathname").await;
    let later_id = path
        .as_str()
        .unwrap()
        .trim_start_matches("/jobs/")
        .to_owned();

    // The follow-up's work is committed too, on the same branch, after the first one's.
    let later = ended(&web, &later_id, &daemon).await;
    assert_eq!(later.continues.as_ref(), Some(&first.id));
    let git_options = later.spec.git.clone().unwrap();
    assert_eq!(git_options.delivery, Delivery::Commit);
    assert_eq!(
        git_options.branch,
        Some(BranchChoice::Existing("tether/notes".into()))
    );
    let delivery = later
        .delivery
        .clone()
        .expect("the follow-up reports its delivery");
    assert_eq!(
        (delivery.branch.as_str(), delivery.commits.len()),
        ("tether/notes", 1),
        "{delivery:?}"
    );
    assert_eq!(
        git(&work, &["rev-list", "--count", "main..tether/notes"]),
        "2"
    );
    assert_eq!(
        git(&work, &["log", "-1", "--format=%an %s", "tether/notes"]),
        "Person Follow-up: Write the notes"
    );
    assert_eq!(
        git(&work, &["show", "tether/notes:notes.txt"]),
        "notes\nfirst line\nsecond line"
    );
    assert_eq!(git(&work, &["status", "--porcelain"]), "");

    // The follow-up's page names it run 2, continuing run 1.
    browser
        .wait_for("document.querySelector('[data-field=run]')")
        .await;
    let run = browser.text("[data-field=run]").await;
    assert!(
        run.starts_with("Run 2 · continues #1 Write the notes"),
        "{run}"
    );
}
