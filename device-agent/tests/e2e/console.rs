//! The owner's console end to end: a real Chromium with a virtual authenticator (user
//! verification on) registers a passkey and unlocks; the console page opens a channel
//! sealed to the real agent's key through the real server, runs commands under bubblewrap
//! on a pseudo-terminal (output live, colours, a destructive command confirmed, Ctrl-C
//! ending a tree of sleeps), edits a file in the Code tab (a save, then a conflict with a
//! change made meanwhile), and locks: by Lock now, and after 30 idle minutes on the
//! server's test clock.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tether_server::clock::ManualClock;

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, backend_works, pair, start_daemon, Web};

/// What the computer shares as `work`.
fn fill_folder(work: &Path) {
    std::fs::write(work.join("hello.txt"), "hello\n").unwrap();
    std::fs::create_dir(work.join("build")).unwrap();
    std::fs::write(work.join("build/out.o"), "object").unwrap();
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(marker) {
            found.push(text);
        }
    }
    found
}

/// Types `line` into the terminal and runs it.
async fn run(browser: &mut Browser, line: &str) {
    browser
        .wait_for("!document.querySelector('#terminal-line').disabled")
        .await;
    browser.fill("#terminal-line", line).await;
    browser.click("#terminal-form button[type=submit]").await;
}

async fn screen(browser: &mut Browser) -> String {
    browser.text("#terminal-screen").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_unlocks_with_a_passkey_and_works_in_the_console() {
    let Some(chromium) = chromium_or_skip("the console test") else {
        return;
    };
    if !backend_works("bwrap").await {
        return;
    }
    let clock = ManualClock::starting_at(chrono::Utc::now());
    let server = crate::spawn_server_with_clock(None, clock.clone()).await;
    // WebAuthn takes a host name, never an address.
    let base = server.base.replacen("127.0.0.1", "localhost", 1);
    let web = Web::sign_up_as(&base, "owner@example.com").await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    fill_folder(work.path());
    let device_id = pair(&base, &web, home.path()).await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    let _daemon = start_daemon(home.path(), "bwrap");
    web.wait_for_device(&device_id, |device| {
        device.online
            && device
                .capabilities
                .as_ref()
                .is_some_and(|caps| caps.console == Some(true))
    })
    .await;

    let mut browser = Browser::launch(&chromium).await;
    browser.page_call("WebAuthn.enable", json!({})).await;
    browser
        .page_call(
            "WebAuthn.addVirtualAuthenticator",
            json!({"options": {
                "protocol": "ctap2", "transport": "internal", "hasResidentKey": true,
                "hasUserVerification": true, "isUserVerified": true,
                "automaticPresenceSimulation": true,
            }}),
        )
        .await;
    browser
        .sign_in(&base, "owner@example.com", "/account")
        .await;
    let added = browser
        .eval(
            "tetherPasskeys.register('This laptop').then(p => p.name, e => 'failed: ' + e.message)",
        )
        .await;
    assert_eq!(added, json!("This laptop"));

    let console = format!("{base}/computers/{device_id}/console");
    browser.goto(&console).await;
    browser
        .wait_for("!document.querySelector('#console-unlock').hidden")
        .await;
    browser.click("#console-unlock").await;
    browser
        .wait_for("document.querySelector('#console').dataset.session === 'open'")
        .await;
    browser
        .wait_for("[...document.querySelectorAll('#console-folder option')].some(o => o.value === 'work')")
        .await;

    // `ls`: output live from the computer.
    run(&mut browser, "ls").await;
    browser
        .wait_for("document.querySelector('#console').dataset.last === 'exit-0'")
        .await;
    let shown = screen(&mut browser).await;
    assert!(
        shown.contains("hello.txt") && shown.contains("build"),
        "{shown}"
    );

    // Colours reach the page as colours: the program saw a terminal.
    run(
        &mut browser,
        "test -t 1 && printf '\\033[31mred\\033[0m on a tty\\n'",
    )
    .await;
    browser
        .wait_for("[...document.querySelectorAll('#terminal-screen span')].some(s => s.textContent.includes('red') && s.style.color === 'rgb(204, 51, 51)')")
        .await;

    // A destructive command asks first; confirmed, it runs.
    run(&mut browser, "rm -rf build").await;
    browser
        .wait_for("!document.querySelector('#terminal-confirm').hidden")
        .await;
    assert!(
        work.path().join("build").exists(),
        "nothing ran before the confirmation"
    );
    browser.click("#terminal-confirm-run").await;
    browser
        .wait_for("document.querySelector('#console').dataset.last === 'exit-0' && document.querySelector('#terminal-confirm').hidden")
        .await;
    assert!(!work.path().join("build").exists());

    // Ctrl-C ends the command and every process it started.
    run(&mut browser, "sh -c 'sleep 607 & sleep 607; wait'").await;
    // A shell line could do anything: it asks too.
    browser
        .wait_for("!document.querySelector('#terminal-confirm').hidden")
        .await;
    browser.click("#terminal-confirm-run").await;
    let mut started = false;
    for _ in 0..100 {
        if processes_with("sleep 607").len() >= 2 {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = browser
        .eval("document.querySelector('#console').dataset.last + ' | ' + document.querySelector('#terminal-screen').innerText + ' | ' + document.querySelector('#terminal-confirm-reason').innerText")
        .await;
    assert!(
        started,
        "the sleeps started: {:?} {page}",
        processes_with("sleep 607")
    );
    browser.click("#terminal-stop").await;
    browser
        .wait_for("document.querySelector('#console').dataset.last === 'interrupted'")
        .await;
    let mut left = processes_with("sleep 607");
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_with("sleep 607");
    }
    assert!(left.is_empty(), "left running: {left:?}");

    // The Code tab: open, edit, save; a change made meanwhile is a conflict, not overwritten.
    browser.click("#tab-code").await;
    browser
        .wait_for("[...document.querySelectorAll('#code-listing button')].some(b => b.textContent === 'hello.txt')")
        .await;
    browser
        .eval("[...document.querySelectorAll('#code-listing button')].find(b => b.textContent === 'hello.txt').click()")
        .await;
    browser
        .wait_for("document.querySelector('#code-editor').value === 'hello\\n' && !document.querySelector('#code-save').disabled")
        .await;
    browser.fill("#code-editor", "hello, edited\n").await;
    browser.click("#code-save").await;
    browser
        .wait_for("document.querySelector('#console').dataset.file === 'saved'")
        .await;
    assert_eq!(
        std::fs::read_to_string(work.path().join("hello.txt")).unwrap(),
        "hello, edited\n"
    );
    std::fs::write(work.path().join("hello.txt"), "changed on the computer\n").unwrap();
    browser.fill("#code-editor", "hello, edited twice\n").await;
    browser.click("#code-save").await;
    browser
        .wait_for("document.querySelector('#console').dataset.file === 'conflict'")
        .await;
    assert_eq!(
        std::fs::read_to_string(work.path().join("hello.txt")).unwrap(),
        "changed on the computer\n"
    );

    // Lock now ends the session and the unlock.
    browser.click("#console-lock").await;
    browser
        .wait_for("document.querySelector('#console').dataset.session === 'closed' && !document.querySelector('#console-unlock').hidden")
        .await;
    let status = browser
        .eval("fetch('/api/console').then(r => r.json())")
        .await;
    assert_eq!(status["unlocked"], json!(false), "{status}");

    // Unlocked again, 30 idle minutes on the server's clock lock it: the page says so.
    browser.click("#console-unlock").await;
    browser
        .wait_for("document.querySelector('#console').dataset.session === 'open'")
        .await;
    clock.advance(Duration::from_secs(31 * 60));
    browser
        .wait_for("document.querySelector('#console').dataset.closed === 'console_locked'")
        .await;
    let status: Value = browser
        .eval("fetch('/api/console').then(r => r.json())")
        .await;
    assert_eq!(status["unlocked"], json!(false), "{status}");
}
