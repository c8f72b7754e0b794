//! The walking skeleton in a real headless Chromium: sign up, approve a pairing code on
//! `/link`, assign a job on the Assign page, and watch the job page follow it to success.

use serde_json::json;

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, spawn_server, start_pairing, Daemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_pairs_assigns_and_follows_a_job() {
    let Some(chromium) = chromium_or_skip("the browser test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let mut browser = Browser::launch(&chromium).await;

    // Sign up; the page lands on Computers, which explains how to pair.
    browser
        .sign_up(&base, "Browser User", "browser@example.com")
        .await;
    assert!(browser
        .text("main")
        .await
        .contains(&format!("tether-agent pair {base}")));
    browser.screenshot("computers-empty").await;

    // The agent prints a code; the person opens the link, sees the computer, presses Pair.
    let home = tempfile::tempdir().unwrap();
    let mut pairing = start_pairing(&base, home.path(), "browser-box").await;
    browser.goto(&pairing.link).await;
    browser
        .wait_for("document.querySelector('[data-field=name]')")
        .await;
    assert_eq!(browser.text("[data-field=name]").await, "browser-box");
    let fingerprint = browser.text("[data-field=fingerprint]").await;
    assert!(fingerprint.starts_with("SHA256:"), "{fingerprint}");
    browser.screenshot("link").await;
    browser
        .click("form[data-api='/api/devices/link'] button")
        .await;
    browser
        .wait_for("!document.getElementById('done').hidden")
        .await;
    assert!(browser.text("#done").await.contains("Paired browser-box"));
    // Paired once: the form is gone, so Pair cannot be pressed again.
    assert_eq!(
        browser
            .eval("getComputedStyle(document.querySelector(\"form[data-api='/api/devices/link']\")).display")
            .await,
        json!("none")
    );
    pairing.wait_paired("browser-box").await;

    // Share a folder and a recipe, start the agent.
    let work = tempfile::tempdir().unwrap();
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    agent_ok(
        home.path(),
        &[
            "recipe",
            "add",
            "greet",
            "--",
            "sh",
            "-c",
            "echo \"asked: $TETHER_TASK_PROMPT\"",
        ],
    )
    .await;
    let _daemon = Daemon::start(home.path());

    // Assign once the computer has published its folder and engine.
    let published = browser
        .reload_until(
            &format!("{base}/assign"),
            "document.querySelector('select[name=engine]')",
        )
        .await;
    assert!(
        published,
        "the computer never published its engines: {}",
        browser.text("main").await
    );
    browser.screenshot("assign").await;
    browser
        .eval("document.querySelector('select[name=engine]').value = 'greet'")
        .await;
    browser.fill("input[name=title]", "Say hello").await;
    browser
        .fill("textarea[name=prompt]", "hello from the browser")
        .await;
    browser
        .click("form[data-api='/api/jobs'] button[type=submit]")
        .await;
    browser
        .wait_for("location.pathname.startsWith('/jobs/')")
        .await;

    // The job page updates itself until the job succeeds, with the output and exit code.
    browser
        .wait_for("document.querySelector('[data-field=state]').textContent === 'succeeded'")
        .await;
    browser.wait_for("document.querySelector('.log-rows').textContent.includes('asked: hello from the browser')").await;
    assert!(browser
        .text("[data-field=outcome]")
        .await
        .contains("exit code 0"));
    // It followed the job on its stream (GET /api/jobs/{id}/events), which ended with it.
    let streamed = "performance.getEntriesByType('resource')\
        .some((entry) => /^\\/api\\/jobs\\/[^/]+\\/events$/.test(new URL(entry.name).pathname))";
    assert_eq!(browser.eval(streamed).await, json!(true));
    browser.screenshot("job").await;
    // The Computers list on a phone: the card in words, the secrets folded, nothing wider
    // than the screen.
    browser.phone_viewport().await;
    browser.goto(&format!("{base}/computers")).await;
    let card = browser.text("section.computer").await;
    assert!(card.contains("online · last contact"), "{card}");
    assert!(
        card.contains("greet (recipe)") && card.contains("Sandbox"),
        "{card}"
    );
    assert!(card.contains("Secrets · none saved"), "{card}");
    assert_eq!(
        browser
            .eval("document.querySelector('form[data-seal-device]').checkVisibility()")
            .await,
        json!(false),
        "the secrets form is folded away"
    );
    assert_eq!(
        browser
            .eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await,
        json!(true)
    );
    browser.screenshot("computers").await;
    // The Cancel button goes away once the job has ended.
    assert_eq!(
        browser
            .eval("!!document.querySelector('[data-while-active]')")
            .await,
        json!(false)
    );

    // A browser without EventSource follows a job by polling it, to the same end.
    let no_streams = json!({ "source": "delete window.EventSource;" });
    browser.page_call("Page.enable", json!({})).await;
    browser
        .page_call("Page.addScriptToEvaluateOnNewDocument", no_streams)
        .await;
    browser.desktop_viewport().await;
    browser.goto(&format!("{base}/assign")).await;
    browser
        .eval("document.querySelector('select[name=engine]').value = 'greet'")
        .await;
    browser.fill("input[name=title]", "Say hello again").await;
    browser.fill("textarea[name=prompt]", "polled").await;
    browser
        .click("form[data-api='/api/jobs'] button[type=submit]")
        .await;
    browser
        .wait_for("location.pathname.startsWith('/jobs/') && !('EventSource' in window)")
        .await;
    browser
        .wait_for("document.querySelector('[data-field=state]').textContent === 'succeeded'")
        .await;
    browser
        .wait_for("document.querySelector('.log-rows').textContent.includes('asked: polled')")
        .await;
    let followed =
        "performance.getEntriesByType('resource').map((entry) => new URL(entry.name).pathname)\
        .filter((path) => /^\\/api\\/jobs\\/[^/]+(\\/events)?$/.test(path))\
        .map((path) => path.endsWith('/events') ? 'stream' : 'poll')";
    let followed = browser.eval(followed).await;
    let followed = followed.as_array().unwrap();
    assert!(followed.contains(&json!("poll")), "{followed:?}");
    assert!(!followed.contains(&json!("stream")), "{followed:?}");
}
