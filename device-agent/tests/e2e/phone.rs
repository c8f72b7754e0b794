//! The person's side of a coding agent's question, in a real headless Chromium sized like a
//! phone: a run of the `acp` engine asks before a command its mode does not allow, the
//! question appears live on "Needs me", and the tap decides whether the command runs.

use std::time::Duration;

use serde_json::{json, Value};
use tether_protocol::jobs::{Job, JobState};

use crate::acp::Computer;
use crate::chromium::{chromium_or_skip, Browser};
use crate::output_lines;

/// A coding agent that runs one command changing its folder (which `ask` mode asks about).
fn make_a_file(name: &str) -> Value {
    json!([
        {"say": "Making the change."},
        {"terminal": {"command": format!("echo approved > {name}")}},
        {"say": "Finished."}
    ])
}

const ALLOW_ONCE: &str = "#needs-me-list button[data-answer=\"allow-once\"]";
const DENY: &str = "#needs-me-list button[data-answer=\"deny\"]";

async fn finished(computer: &Computer, job_id: &str) -> Job {
    computer
        .web
        .wait_until_ended(job_id, Duration::from_secs(60))
        .await
}

/// The screen a test looks through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Screen {
    /// 390×844, touch.
    Phone,
    /// 1280×900.
    Desktop,
}

impl Screen {
    fn width(self) -> u32 {
        match self {
            Screen::Phone => 390,
            Screen::Desktop => 1280,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Screen::Phone => "phone",
            Screen::Desktop => "desktop",
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_allows_or_denies_a_coding_agents_command() {
    allows_or_denies_on(Screen::Phone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_allows_or_denies_a_coding_agents_command() {
    allows_or_denies_on(Screen::Desktop).await;
}

/// Needs me and the job's timeline on `screen`: a command and a write asked, allowed or
/// denied from their cards, the write's diff coloured, nothing scrolling sideways.
async fn allows_or_denies_on(screen: Screen) {
    let Some(chromium) = chromium_or_skip("the approval test") else {
        return;
    };
    let computer = Computer::start().await;
    let mut browser = Browser::launch(&chromium).await;
    match screen {
        Screen::Phone => browser.phone_viewport().await,
        Screen::Desktop => browser.desktop_viewport().await,
    }
    browser
        .sign_in(&computer.server.base, "owner@example.com", "/needs-me")
        .await;
    assert_eq!(
        browser.eval("window.innerWidth").await,
        json!(screen.width())
    );

    // The page is open before the run asks: the question must arrive without a reload.
    let job_id = computer
        .create("ask", false, make_a_file("approved.txt"))
        .await;
    browser
        .wait_for(&format!("document.querySelector({})", json!(ALLOW_ONCE)))
        .await;
    let card = browser.text("#needs-me-list [data-decision-id]").await;
    assert!(card.contains("echo approved > approved.txt"), "{card}");
    let words = browser
        .eval(
            "[...document.querySelectorAll('#needs-me-list dl.action code.word')]\
             .map((word) => word.textContent)",
        )
        .await;
    assert_eq!(words, json!(["sh", "-c", "echo approved > approved.txt"]));
    assert!(
        !browser.text("#needs-me-list .question").await.contains('`'),
        "{card}"
    );
    assert!(
        card.contains("acp ask"),
        "the job's title is on the card: {card}"
    );
    assert_eq!(browser.text("#needs-me-badge").await.trim(), "1");
    let fits = browser
        .eval("document.documentElement.scrollWidth <= window.innerWidth")
        .await;
    assert_eq!(
        fits,
        json!(true),
        "the page scrolls sideways on a {screen:?}"
    );
    browser
        .screenshot(&format!("needs-me-{}", screen.name()))
        .await;
    assert_eq!(
        computer.web.job(&job_id).await.state,
        JobState::Waiting,
        "the job shows it waits"
    );

    browser.click(ALLOW_ONCE).await;
    let job = finished(&computer, &job_id).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}");
    let made = computer.folder().join("approved.txt");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "approved\n");
    browser
        .wait_for("!document.querySelector('#needs-me-list [data-answer]')")
        .await;

    // Deny: the command never runs, and the agent is told so.
    let job_id = computer
        .create("ask", false, make_a_file("denied.txt"))
        .await;
    browser
        .wait_for(&format!("document.querySelector({})", json!(DENY)))
        .await;
    browser.click(DENY).await;
    let job = finished(&computer, &job_id).await;
    assert!(
        !computer.folder().join("denied.txt").exists(),
        "a denied command ran: {:#?}",
        output_lines(&job)
    );
    assert!(
        output_lines(&job)
            .iter()
            .any(|line| line.contains("scripted: terminal") && line.contains("error")),
        "the agent heard the refusal: {:#?}",
        output_lines(&job)
    );

    // A write shows the change it would make, coloured line by line, in a box that
    // scrolls on its own (a long line does not widen the page); the program and each
    // argument of a command are their own code elements.
    let wide = "w".repeat(300);
    let steps = json!([
        {"write": {"path": "notes.txt", "content": format!("hello notes\n{wide}\nthird\n")}},
        {"say": "Finished."}
    ]);
    let job_id = computer.create("ask", false, steps).await;
    let added = "#needs-me-list details.preview[open] pre.diff-text span.line.add";
    browser
        .wait_for(&format!("document.querySelector({})", json!(added)))
        .await;
    let lines = browser
        .eval(
            "[...document.querySelectorAll('#needs-me-list details.preview span.line')]\
             .map((line) => line.className + ' ' + line.textContent)",
        )
        .await;
    assert_eq!(
        lines,
        json!([
            "line meta --- a/notes.txt",
            "line meta +++ b/notes.txt",
            "line hunk @@ -1,3 +1,3 @@",
            "line context  hello notes",
            "line del -second line",
            format!("line add +{wide}"),
            "line context  third"
        ])
    );
    let coloured = browser
        .eval(&format!(
            "getComputedStyle(document.querySelector({})).backgroundColor",
            json!(added)
        ))
        .await;
    assert_ne!(
        coloured,
        json!("rgba(0, 0, 0, 0)"),
        "the added line is coloured"
    );
    let question = browser.text("#needs-me-list .question").await;
    assert!(!question.contains('`'), "{question}");
    // On a phone the long line scrolls inside the diff's box; on a desktop it may fit.
    let inside = if screen == Screen::Phone {
        "box.scrollWidth > box.clientWidth && "
    } else {
        ""
    };
    let fits = browser
        .eval(&format!(
            "document.documentElement.scrollWidth <= window.innerWidth && \
             (() => {{ const box = document.querySelector('#needs-me-list pre.diff-text'); \
             return {inside}box.getBoundingClientRect().right <= window.innerWidth; }})()"
        ))
        .await;
    assert_eq!(
        fits,
        json!(true),
        "the diff stays inside its box on a {screen:?}"
    );
    browser
        .screenshot(&format!("needs-me-write-{}", screen.name()))
        .await;
    browser.click(ALLOW_ONCE).await;
    assert_eq!(
        finished(&computer, &job_id).await.state,
        JobState::Succeeded
    );
    browser
        .wait_for("!document.querySelector('#needs-me-list [data-answer]')")
        .await;

    // On the job page, the question stands on the run's timeline; allowed there, the
    // command appears live, its exit under it, and the page still fits the phone.
    let job_id = computer
        .create("ask", false, make_a_file("timeline.txt"))
        .await;
    browser
        .goto(&format!("{}/jobs/{job_id}", computer.server.base))
        .await;
    let allow = "ol.timeline li.entry-decision button[data-answer=\"allow-once\"]";
    browser
        .wait_for(&format!("document.querySelector({})", json!(allow)))
        .await;
    browser.click(allow).await;
    // The answered card says who answered and when, the time as every list shows it.
    browser
        .wait_for(
            "(() => { const settled = document.querySelector('ol.timeline li.entry-decision .settled'); \
             return settled && settled.textContent.startsWith('Allowed once on the web, ') \
             && settled.querySelector('time[data-ago]'); })()",
        )
        .await;
    browser
        .wait_for(
            "[...document.querySelectorAll('ol.timeline li.entry-command')].some((entry) => \
             entry.querySelector('code.command-line').textContent.includes('timeline.txt') && \
             entry.querySelector('[data-field=exit]').textContent === 'exit code 0')",
        )
        .await;
    let ordered = browser
        .eval(
            "(() => { const items = [...document.querySelectorAll('ol.timeline > li')]; \
             const at = (selector) => items.findIndex((item) => item.matches(selector)); \
             return at('.entry-decision') >= 0 && at('.entry-decision') < at('.entry-command') \
             && items.every((item) => item.querySelector('time[data-clock]')); })()",
        )
        .await;
    assert_eq!(
        ordered,
        json!(true),
        "{}",
        browser.text("ol.timeline").await
    );
    let fits = browser
        .eval("document.documentElement.scrollWidth <= window.innerWidth")
        .await;
    assert_eq!(
        fits,
        json!(true),
        "the job page scrolls sideways on a {screen:?}"
    );
    browser
        .screenshot(&format!("job-timeline-{}", screen.name()))
        .await;
    assert_eq!(
        finished(&computer, &job_id).await.state,
        JobState::Succeeded
    );
}
