//! The job page's log in a real headless Chromium, as a phone (390×844) and a desktop window
//! (1280×900): a failed recipe of 1,500 lines opens at its error, colours drawn and no
//! escape shown; search steps through its hits; `#L123` and `#L10-L20` link to lines; a
//! running job's log follows its end until the reader scrolls up; 100,000 lines keep only
//! the lines on screen in the page.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_protocol::jobs::Job;

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, pair, spawn_server, Daemon, Server, Web};

/// A paired computer running the agent with `recipes` (name, shell script), signed in.
struct Setup {
    server: Server,
    web: Web,
    device_id: String,
    _home: tempfile::TempDir,
    _work: tempfile::TempDir,
    _daemon: Daemon,
}

async fn computer_with(recipes: &[(&str, &str)]) -> Setup {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let work = tempfile::tempdir().unwrap();
    share(home.path(), work.path()).await;
    for (name, script) in recipes {
        agent_ok(
            home.path(),
            &["recipe", "add", name, "--", "sh", "-c", script],
        )
        .await;
    }
    let daemon = Daemon::start(home.path());
    let names: Vec<String> = recipes.iter().map(|(name, _)| (*name).to_owned()).collect();
    web.wait_for_device(&device_id, |device| {
        device.capabilities.as_ref().is_some_and(|c| {
            names
                .iter()
                .all(|name| c.engines.iter().any(|e| &e.name == name))
        })
    })
    .await;
    Setup {
        server,
        web,
        device_id,
        _home: home,
        _work: work,
        _daemon: daemon,
    }
}

async fn share(home: &Path, work: &Path) {
    agent_ok(home, &["folders", "share", "work", work.to_str().unwrap()]).await;
}

/// Waits until the job ended, reading the list (no lines), so a long log is not read
/// again and again.
async fn wait_ended(web: &Web, job_id: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let jobs: Vec<Value> = web.get("/api/jobs").await.json().await.unwrap();
        let state = jobs
            .iter()
            .find(|job| job["id"] == json!(job_id))
            .and_then(|job| job["state"].as_str())
            .unwrap_or_default()
            .to_owned();
        if ["succeeded", "failed", "blocked", "cancelled", "interrupted"].contains(&state.as_str())
        {
            return state;
        }
        assert!(Instant::now() < deadline, "the job never ended: {state}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn browser_for(setup: &Setup, chromium: &std::path::PathBuf) -> Browser {
    let mut browser = Browser::launch(chromium).await;
    browser
        .sign_in(&setup.server.base, "owner@example.com", "/jobs")
        .await;
    browser
}

/// Whether the row of line `n` is on the screen, inside the log's box.
fn line_in_view(n: i64) -> String {
    format!(
        "(() => {{ const row = document.querySelector('.log-line[data-line=\"{n}\"]'); \
         if (!row) return false; const r = row.getBoundingClientRect(); \
         const box = document.querySelector('.log-scroll').getBoundingClientRect(); \
         return r.top >= Math.max(0, box.top) - 1 && r.bottom <= Math.min(innerHeight, box.bottom) + 1; }})()"
    )
}

async fn set_screen(browser: &mut Browser, phone: bool) {
    if phone {
        browser.phone_viewport().await;
    } else {
        browser.desktop_viewport().await;
    }
}

/// The contrast of each coloured span of the error line against the log's background.
const CONTRASTS: &str = r#"(() => {
    const rgb = (css) => css.match(/[\d.]+/g).slice(0, 3).map(Number);
    const lum = (c) => { const [r, g, b] = c.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
    const page = rgb(getComputedStyle(document.body).backgroundColor);
    const tint = rgb(getComputedStyle(document.querySelector('.log-scroll')).backgroundColor.replace(/rgba?\(/, '').replace(/\)/, ''));
    const alpha = Number((getComputedStyle(document.querySelector('.log-scroll')).backgroundColor.match(/[\d.]+/g)[3]) ?? 1);
    const back = page.map((v, i) => v + (tint[i] - v) * alpha);
    return [...document.querySelectorAll('.log-line.log-error .log-text span')].map((s) => {
        const [a, b] = [lum(rgb(getComputedStyle(s).color)), lum(back)].sort((x, y) => y - x);
        return (a + 0.05) / (b + 0.05);
    });
})()"#;

/// 1,497 lines of progress, then the error in colour and one more line; exit 3.
const FAILING: &str = "i=1; while [ $i -le 1497 ]; do echo \"step $i ok\"; i=$((i+1)); done; \
    printf '\\033[1;31merror:\\033[0m the build broke at \\033[38;5;208mstep 1498\\033[0m \\033[38;2;10;120;200mhere\\033[0m\\033]0;title\\007\\n'; \
    echo 'the end'; exit 3";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_recipes_log_opens_at_its_error_with_colours_search_and_links() {
    let Some(chromium) = chromium_or_skip("the log viewer test") else {
        return;
    };
    let setup = computer_with(&[("build", FAILING)]).await;
    let job = setup
        .web
        .create_job(&setup.device_id, "build", "build it")
        .await;
    let job_id = job.id.to_string();
    assert_eq!(
        wait_ended(&setup.web, &job_id, Duration::from_secs(60)).await,
        "failed"
    );
    let ended: Job = setup.web.job(&job_id).await;
    let error = ended
        .events
        .iter()
        .find(|event| event.text.contains("the build broke"))
        .map(|event| event.seq)
        .expect("the error line was recorded");
    assert!(error > 1490, "{error}");
    let page = format!("{}/jobs/{job_id}", setup.server.base);
    let mut browser = browser_for(&setup, &chromium).await;

    for phone in [true, false] {
        set_screen(&mut browser, phone).await;
        browser.goto(&page).await;
        browser
            .wait_for("document.querySelector('.log-line')")
            .await;
        // The error is on the first screen, in the log's box, marked; the header names the
        // failing step and links to it.
        assert_eq!(
            browser.eval(&line_in_view(error)).await,
            json!(true),
            "the error is not on the first screen (phone: {phone})"
        );
        browser
            .screenshot(&format!(
                "log-failed-{}",
                if phone { "phone" } else { "desktop" }
            ))
            .await;
        let marked = browser.text(".log-line.log-error .log-text").await;
        assert_eq!(marked, "error: the build broke at step 1498 here");
        let failing = browser.text(".failing").await;
        assert!(
            failing.contains("Stopped at build") && failing.contains("exit code 3"),
            "{failing}"
        );
        assert_eq!(
            browser
                .eval("document.querySelector('.failing a').getAttribute('href')")
                .await,
            json!(format!("#L{error}"))
        );
        // Colours are spans (a program's own 256 and 24-bit colours kept readable against
        // the log's background); no escape is shown.
        let spans = browser
            .eval(
                "[...document.querySelectorAll('.log-line.log-error .log-text span')]\
                 .map((s) => [s.className, s.style.color !== '', s.textContent])",
            )
            .await;
        assert_eq!(
            spans,
            json!([
                ["ansi-bold ansi-fg-1", false, "error:"],
                ["", true, "step 1498"],
                ["", true, "here"]
            ])
        );
        let ratios = browser.eval(CONTRASTS).await;
        assert!(
            ratios
                .as_array()
                .unwrap()
                .iter()
                .all(|ratio| ratio.as_f64().unwrap() >= 4.5),
            "{ratios}"
        );
        let red = browser
            .eval("getComputedStyle(document.querySelector('.log-error .ansi-fg-1')).color")
            .await;
        let plain = browser
            .eval("getComputedStyle(document.querySelector('.log-error .log-text')).color")
            .await;
        assert_ne!(red, plain, "the red is drawn");
        assert_eq!(
            browser
                .eval("/[\\x1b\\x07]|\\[1;31m|\\]0;/.test(document.querySelector('.log-rows').textContent)")
                .await,
            json!(false),
            "an escape is shown"
        );
        assert_eq!(
            browser
                .eval("document.documentElement.scrollWidth <= innerWidth")
                .await,
            json!(true),
            "the page scrolls sideways (phone: {phone})"
        );
        // The section bar's links are thumb-sized.
        let small = browser
            .eval(
                "[...document.querySelectorAll('nav.section-links a, .log-tools button, a.log-download')]\
                 .filter((a) => { const r = a.getBoundingClientRect(); return r.height < 44 || r.width < 44; })\
                 .map((a) => a.textContent)",
            )
            .await;
        assert_eq!(small, json!([]), "targets under 44 px (phone: {phone})");
    }

    // Search: every line holding "step 14", stepped through both ways.
    let expected = ended
        .events
        .iter()
        .filter(|event| event.kind == "output" && event.text.contains("step 14"))
        .count();
    assert_eq!(expected, 1 + 10 + 98 + 1);
    browser
        .fill(".log-tools input[type=search]", "STEP 14")
        .await;
    browser
        .wait_for(&format!(
            "document.querySelector('.log-count').textContent === '1 of {expected}'"
        ))
        .await;
    let current = "document.querySelector('mark.log-current')";
    assert_eq!(
        browser
            .eval(&format!("{current}.closest('.log-line').dataset.line"))
            .await,
        json!("15"),
        "the first hit: step 14 is line 15 (line 1 is the claim)"
    );
    browser.click("[data-log-next]").await;
    browser
        .wait_for(&format!(
            "document.querySelector('.log-count').textContent === '2 of {expected}'"
        ))
        .await;
    assert_eq!(
        browser
            .eval(&format!("{current}.closest('.log-line').dataset.line"))
            .await,
        json!("141")
    );
    assert_eq!(browser.eval(&line_in_view(141)).await, json!(true));
    browser.click("[data-log-previous]").await;
    browser.click("[data-log-previous]").await;
    browser
        .wait_for(&format!(
            "document.querySelector('.log-count').textContent === '{expected} of {expected}'"
        ))
        .await;
    assert_eq!(
        browser.eval(&format!("{current}.textContent")).await,
        json!("step 14"),
        "the last hit is in the error's coloured words"
    );
    assert_eq!(browser.eval(&line_in_view(error)).await, json!(true));

    // Links to a line and to a range, opened at both sizes.
    for phone in [true, false] {
        set_screen(&mut browser, phone).await;
        // Opened afresh, as a link from elsewhere is (not a jump within the page).
        browser.goto("about:blank").await;
        browser.goto(&format!("{page}#L123")).await;
        browser
            .wait_for("document.querySelector('.log-line')")
            .await;
        assert_eq!(
            browser.eval(&line_in_view(123)).await,
            json!(true),
            "#L123 (phone: {phone})"
        );
        let selected = browser
            .eval("[...document.querySelectorAll('.log-line.log-selected')].map((r) => r.dataset.line)")
            .await;
        assert_eq!(selected, json!(["123"]));
        assert_eq!(
            browser.text(".log-line.log-selected .log-text").await,
            "step 122 ok"
        );
        browser.goto("about:blank").await;
        browser.goto(&format!("{page}#L10-L20")).await;
        browser
            .wait_for("document.querySelector('.log-line')")
            .await;
        let selected = browser
            .eval("[...document.querySelectorAll('.log-line.log-selected')].map((r) => Number(r.dataset.line))")
            .await;
        assert_eq!(
            selected,
            json!((10..=20).collect::<Vec<_>>()),
            "(phone: {phone})"
        );
        assert_eq!(browser.eval(&line_in_view(10)).await, json!(true));
    }
    // A click on a line's number links to it; a shift-click makes a range.
    browser.click(".log-line[data-line=\"12\"] a.log-n").await;
    assert_eq!(browser.eval("location.hash").await, json!("#L12"));
    browser
        .eval(
            "document.querySelector('.log-line[data-line=\"15\"] a.log-n')\
             .dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, shiftKey: true}))",
        )
        .await;
    assert_eq!(browser.eval("location.hash").await, json!("#L12-L15"));
    assert_eq!(
        browser
            .eval("document.querySelectorAll('.log-line.log-selected').length")
            .await,
        json!(4)
    );

    // The raw log to download, as printed.
    let href = browser
        .eval("document.querySelector('a.log-download').getAttribute('href')")
        .await;
    assert_eq!(href, json!(format!("/api/jobs/{job_id}/log")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_log_follows_its_end_until_the_reader_scrolls_up() {
    let Some(chromium) = chromium_or_skip("the log following test") else {
        return;
    };
    let script = "i=1; while [ $i -le 3000 ]; do echo \"tick $i\"; i=$((i+1)); sleep 0.02; done; \
                  echo 'error: the ticks ran out'; exit 4";
    let setup = computer_with(&[("ticks", script)]).await;
    let job = setup
        .web
        .create_job(&setup.device_id, "ticks", "tick")
        .await;
    let page = format!("{}/jobs/{}", setup.server.base, job.id);
    let mut browser = browser_for(&setup, &chromium).await;
    let lines = "Number(document.querySelector('.log-scroll').getAttribute('aria-label').replace(/\\D/g, ''))";
    let at_end = "(() => { const s = document.querySelector('.log-scroll'); \
                  return s.scrollTop + s.clientHeight >= s.scrollHeight - 30; })()";
    for phone in [true, false] {
        set_screen(&mut browser, phone).await;
        browser.goto(&page).await;
        browser.wait_for(&format!("{lines} > 60")).await;
        // Following: as lines come, the end stays in view.
        let seen = browser.eval(lines).await.as_u64().unwrap();
        browser.wait_for(&format!("{lines} > {seen} + 40")).await;
        assert_eq!(
            browser.eval(at_end).await,
            json!(true),
            "not following (phone: {phone})"
        );
        assert_eq!(
            browser
                .eval("document.querySelector('[data-log-jump]').hidden")
                .await,
            json!(true)
        );
        browser
            .screenshot(&format!(
                "log-following-{}",
                if phone { "phone" } else { "desktop" }
            ))
            .await;
        // Scrolled up, it stays where the reader is, and offers the way back.
        browser
            .eval("document.querySelector('.log-scroll').scrollTop = 0; true")
            .await;
        browser
            .wait_for("!document.querySelector('[data-log-jump]').hidden")
            .await;
        let seen = browser.eval(lines).await.as_u64().unwrap();
        browser.wait_for(&format!("{lines} > {seen} + 40")).await;
        assert_eq!(
            browser
                .eval("document.querySelector('.log-scroll').scrollTop")
                .await,
            json!(0),
            "it moved while the reader was reading (phone: {phone})"
        );
        assert_eq!(
            browser
                .eval("document.querySelector('.log-line[data-line=\"1\"]') !== null")
                .await,
            json!(true)
        );
        // Jump to latest: at the end again, and following.
        browser.click("[data-log-jump]").await;
        browser.wait_for(at_end).await;
        let seen = browser.eval(lines).await.as_u64().unwrap();
        browser.wait_for(&format!("{lines} > {seen} + 40")).await;
        assert_eq!(
            browser.eval(at_end).await,
            json!(true),
            "not following again (phone: {phone})"
        );
        // Read in one go: lines arrive as they are printed, so two reads may straddle some.
        let drawn = format!(
            "[Math.max(...[...document.querySelectorAll('.log-line')].map((r) => Number(r.dataset.line))), {lines}]"
        );
        let drawn = browser.eval(&drawn).await;
        assert_eq!(drawn[0], drawn[1], "the newest line is drawn");
    }
    // It fails while watched: the last lines come, the error is marked, Cancel goes.
    let job_id = job.id.to_string();
    assert_eq!(
        wait_ended(&setup.web, &job_id, Duration::from_secs(240)).await,
        "failed"
    );
    browser
        .wait_for("document.querySelector('.log-line.log-error .log-text')?.textContent === 'error: the ticks ran out'")
        .await;
    assert_eq!(
        browser.eval(at_end).await,
        json!(true),
        "the end is in view"
    );
    assert_eq!(
        browser
            .eval("document.querySelector('[data-while-active]') === null")
            .await,
        json!(true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_of_100000_lines_keeps_only_the_lines_on_screen_in_the_page() {
    let Some(chromium) = chromium_or_skip("the long log test") else {
        return;
    };
    let setup = computer_with(&[("long", "seq 1 100000")]).await;
    let job = setup
        .web
        .create_job(&setup.device_id, "long", "count")
        .await;
    let job_id = job.id.to_string();
    assert_eq!(
        wait_ended(&setup.web, &job_id, Duration::from_secs(240)).await,
        "succeeded"
    );
    let page = format!("{}/jobs/{job_id}", setup.server.base);
    let mut browser = browser_for(&setup, &chromium).await;
    for phone in [true, false] {
        set_screen(&mut browser, phone).await;
        browser.goto(&page).await;
        browser
            .wait_for("document.querySelector('.log-line')")
            .await;
        // Every line is known (the earlier ones read a page at a time)...
        browser
            .wait_for("document.querySelector('.log-scroll').getAttribute('aria-label').startsWith('Log, 1000')")
            .await;
        browser
            .wait_for("document.querySelector('.log-status').textContent === ''")
            .await;
        // ...yet only those on screen are in the page, wherever the reader is.
        for (line, text) in [(50_001_i64, "50000"), (2, "1"), (99_000, "98999")] {
            browser
                .eval(&format!(
                    "(() => {{ const s = document.querySelector('.log-scroll'); \
                     const h = document.querySelector('.log-line').getBoundingClientRect().height; \
                     s.scrollTop = ({line} - 1) * h; s.dispatchEvent(new Event('scroll')); return true; }})()"
                ))
                .await;
            browser
                .wait_for(&format!(
                    "document.querySelector('.log-line[data-line=\"{line}\"] .log-text')?.textContent === '{text}'"
                ))
                .await;
            let rows = browser
                .eval("document.querySelectorAll('.log-line').length")
                .await;
            assert!(
                rows.as_u64().unwrap() <= 120,
                "{rows} rows in the page at line {line}"
            );
            let all = browser
                .eval("document.getElementsByTagName('*').length")
                .await;
            assert!(all.as_u64().unwrap() < 3000, "{all} elements in the page");
        }
        // Search reaches the whole of it.
        browser.fill(".log-tools input[type=search]", "77777").await;
        browser
            .wait_for("document.querySelector('.log-count').textContent === '1 of 1'")
            .await;
        browser
            .wait_for("document.querySelector('mark.log-current')?.closest('.log-line').dataset.line === '77778'")
            .await;
    }
}
