//! A secret from the browser to a real agent: the Computers page seals it in headless
//! Chromium for the computer's pinned key, the agent opens and stores it, a job assigned on
//! the Assign page with it ticked gets it as an environment variable, and what the job prints
//! arrives `[hidden]`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, spawn_server, start_pairing, Daemon};

const VALUE: &str = "tok-3f9a1c-very-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_sent_from_the_browser_is_used_by_a_job_and_hidden_in_its_output() {
    let Some(chromium) = chromium_or_skip("the browser secrets test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let mut browser = Browser::launch(&chromium).await;

    browser
        .sign_up(&base, "Secret User", "secret@example.com")
        .await;

    let home = tempfile::tempdir().unwrap();
    let mut pairing = start_pairing(&base, home.path(), "secret-box").await;
    browser.goto(&pairing.link).await;
    browser
        .wait_for("document.querySelector('[data-field=name]')")
        .await;
    browser
        .click("form[data-api='/api/devices/link'] button")
        .await;
    browser
        .wait_for("!document.getElementById('done').hidden")
        .await;
    pairing.wait_paired("secret-box").await;

    let work = tempfile::tempdir().unwrap();
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &[
            "recipe",
            "add",
            "show",
            "--",
            "sh",
            "-c",
            "echo \"token=$API_TOKEN\"; echo \"other=${OTHER:-unset}\"",
        ],
    )
    .await;
    let _daemon = Daemon::start(home.path());

    // The form appears once the computer reported (and the server pinned) its seal key.
    let ready = browser
        .reload_until(
            &format!("{base}/computers"),
            "document.querySelector('form[data-seal-device]')",
        )
        .await;
    assert!(ready, "no secret form: {}", browser.text("main").await);
    browser
        .fill("form[data-seal-device] input[name=name]", "API_TOKEN")
        .await;
    browser
        .fill("form[data-seal-device] input[name=value]", VALUE)
        .await;
    browser.click("form[data-seal-device] button").await;
    browser
        .wait_for("document.querySelector('form[data-seal-device] .status').textContent.includes('Sent API_TOKEN')")
        .await;

    // The agent saved it; the CLI and the page show the name only.
    let mut listed = String::new();
    for _ in 0..60 {
        listed = agent_ok(home.path(), &["secrets", "list"]).await;
        if listed.contains("API_TOKEN") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        listed.contains("API_TOKEN") && !listed.contains(VALUE),
        "{listed}"
    );
    browser.goto(&format!("{base}/computers")).await;
    let main = browser.text("main").await;
    assert!(
        main.contains("API_TOKEN") && !main.contains(VALUE),
        "{main}"
    );

    // A job assigned on the Assign page with the secret ticked gets it, and its output
    // arrives hidden.
    let job = assign_with_secret(&mut browser, &base, "API_TOKEN").await;
    assert_eq!(job["outcome"]["outcome"], "succeeded", "{job}");
    let text = job.to_string();
    assert!(!text.contains(VALUE), "the value left the computer: {text}");
    let lines: Vec<&str> = job["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["kind"] == "output")
        .filter_map(|event| event["text"].as_str())
        .collect();
    assert!(lines.contains(&"token=[hidden]"), "{lines:?}");
    assert!(lines.contains(&"other=unset"), "{lines:?}");

    // A job that does not name it does not get it (created from the Computers page, which
    // knows the computer's id).
    browser.goto(&format!("{base}/computers")).await;
    browser
        .wait_for("document.querySelector('form[data-seal-device]')")
        .await;
    let job = run_job(&mut browser, &[]).await;
    let lines = job["events"].to_string();
    assert!(
        lines.contains("token=\"") || lines.contains("token="),
        "{lines}"
    );
    assert!(
        !lines.contains("[hidden]") && !lines.contains(VALUE),
        "{lines}"
    );

    // A named secret the computer does not hold blocks the job, naming it.
    let job = run_job(&mut browser, &["MISSING_ONE"]).await;
    assert_eq!(job["outcome"]["outcome"], "blocked", "{job}");
    assert!(
        job["outcome"]["summary"]
            .as_str()
            .unwrap()
            .contains("MISSING_ONE"),
        "{job}"
    );

    // Forgotten on the computer: gone from its list.
    agent_ok(home.path(), &["secrets", "forget", "API_TOKEN"]).await;
    assert!(!agent_ok(home.path(), &["secrets", "list"])
        .await
        .contains("API_TOKEN"));
}

/// Assigns a job on the Assign page with the secret `name` ticked, and waits for its outcome.
async fn assign_with_secret(browser: &mut Browser, base: &str, name: &str) -> Value {
    let checkbox = format!("input[name=secrets][value={name}]");
    let ready = browser
        .reload_until(
            &format!("{base}/assign"),
            &format!("document.querySelector('{checkbox}')"),
        )
        .await;
    assert!(ready, "no secret to tick: {}", browser.text("main").await);
    browser
        .fill("form[data-api='/api/jobs'] input[name=title]", "Show")
        .await;
    browser.click(&checkbox).await;
    browser
        .click("form[data-api='/api/jobs'] button[type=submit]")
        .await;
    browser
        .wait_for("location.pathname.startsWith('/jobs/')")
        .await;
    let path = browser.eval("location.pathname").await;
    let id = path
        .as_str()
        .unwrap()
        .trim_start_matches("/jobs/")
        .to_owned();
    follow_job(browser, &id).await
}

/// Creates a job through the API from the signed-in page and waits for its outcome.
async fn run_job(browser: &mut Browser, secrets: &[&str]) -> Value {
    let body = json!({
        "deviceId": null, "title": "Show", "prompt": "show", "folder": "work", "engine": "show",
        "mode": "review", "network": false, "timeoutMinutes": 5, "secrets": secrets,
    });
    let script = format!(
        "(async () => {{ const csrf = document.querySelector('meta[name=\"csrf-token\"]').content; \
         const device = document.querySelector('form[data-seal-device]').dataset.sealDevice; \
         const body = {body}; body.deviceId = device; \
         const res = await fetch('/api/jobs', {{ method: 'POST', credentials: 'same-origin', \
           headers: {{ 'content-type': 'application/json', 'x-tether-csrf': csrf }}, body: JSON.stringify(body) }}); \
         return await res.json(); }})()"
    );
    let created = browser.eval(&script).await;
    let id = created["id"]
        .as_str()
        .or_else(|| created["job"]["id"].as_str())
        .unwrap_or_else(|| panic!("no job: {created}"))
        .to_owned();
    follow_job(browser, &id).await
}

/// Polls the job from the signed-in page until it has an outcome.
async fn follow_job(browser: &mut Browser, id: &str) -> Value {
    for _ in 0..120 {
        let job = browser
            .eval(&format!(
                "(async () => {{ const res = await fetch('/api/jobs/{id}', {{ credentials: 'same-origin' }}); \
                 return await res.json(); }})()"
            ))
            .await;
        let job = if job.get("job").is_some() {
            job["job"].clone()
        } else {
            job
        };
        if !job["outcome"].is_null() {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("job {id} never ended");
}
