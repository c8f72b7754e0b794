//! Reviewing a run in a real headless Chromium, as a phone (390 × 844) and as a desktop
//! window (1280 × 900): a recipe edits files of a git folder, `package.json` among them;
//! the job page lists the changes with their counts and a warning on `package.json`, a tap
//! shows a file's coloured diff, the Files view browses the folder, Run again and Continue
//! each make a new job and go to it, and the chain reads both ways.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tether_protocol::changes::ChangeStatus;
use tether_protocol::jobs::{Job, JobState};

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, pair, spawn_server, Daemon, Web};

/// A line long enough to need sideways scrolling on a phone.
const LONG: &str = "a line far longer than a phone is wide, so that the diff scrolls sideways inside its own box and never the page itself: 0123456789 0123456789 0123456789";

/// What the recipe does: `package.json` gains a script (runs later), `README.md` has a line
/// changed, `notes.txt` is new; a prompt saying "slowly" waits first (long enough for a page
/// to open on a busy machine), so a page can watch it.
const EDIT: &str = r#"case "$TETHER_TASK_PROMPT" in *slowly*) sleep 8;; esac
printf '{\n  "name": "app",\n  "scripts": { "test": "true", "postinstall": "node setup.js" }\n}\n' > package.json
printf '# App\nnew line\n%s\n' "$LONG" > README.md
echo "made by the run" > notes.txt
echo edited"#;

fn git(dir: &Path, args: &[&str]) {
    let output = std::process::Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A git folder with `README.md`, `package.json` and `src/lib.txt`, all committed.
fn git_folder() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    std::fs::write(dir.join("README.md"), "# App\nold line\n").unwrap();
    std::fs::write(dir.join("package.json"), "{ \"name\": \"app\" }\n").unwrap();
    std::fs::create_dir(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.txt"), "library text\n").unwrap();
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "start"]);
    work
}

async fn finished(web: &Web, job_id: &str) -> Job {
    web.wait_until_ended(job_id, Duration::from_secs(60)).await
}

/// The id in `/jobs/{id}` once the page went to a job other than `from`.
async fn went_to_another_job(browser: &mut Browser, from: &str) -> String {
    browser
        .wait_for(&format!(
            "location.pathname.startsWith('/jobs/') && location.pathname !== {} && document.readyState === 'complete'",
            json!(format!("/jobs/{from}"))
        ))
        .await;
    let path = browser.eval("location.pathname").await;
    path.as_str()
        .and_then(|path| path.strip_prefix("/jobs/"))
        .unwrap()
        .to_owned()
}

/// The diff panel of `path`'s button in Changes, as a selector.
async fn diff_panel(browser: &mut Browser, path: &str) -> String {
    let button = format!("button[data-diff-path={}]", json!(path));
    let panel = browser
        .eval(&format!(
            "document.querySelector({}).getAttribute('aria-controls')",
            json!(button)
        ))
        .await;
    browser.click(&button).await;
    format!("#{}", panel.as_str().unwrap())
}

/// A screenshot (see `Browser::screenshot`) with `selector` scrolled to the top.
async fn screenshot_at(browser: &mut Browser, name: &str, selector: &str) {
    let script = format!(
        "document.querySelector({}).scrollIntoView()",
        json!(selector)
    );
    browser.eval(&script).await;
    browser.screenshot(name).await;
}

async fn page_fits(browser: &mut Browser) -> bool {
    browser
        .eval("document.documentElement.scrollWidth <= window.innerWidth")
        .await
        == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_reviewed_browsed_run_again_and_continued() {
    let Some(chromium) = chromium_or_skip("the review test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let web = Web::sign_up(&base).await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&base, &web, home.path()).await;
    let work = git_folder();
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    let script = EDIT.replace("$LONG", LONG);
    agent_ok(
        home.path(),
        &["recipe", "add", "edit", "--", "sh", "-c", &script],
    )
    .await;
    let mut daemon = Daemon::start(home.path());
    web.wait_for_device(&device_id, |device| {
        device.online
            && device
                .capabilities
                .as_ref()
                .is_some_and(|caps| !caps.engines.is_empty())
    })
    .await;

    let job = web.create_job(&device_id, "edit", "make the change").await;
    let job_id = job.id.to_string();
    let job = finished(&web, &job_id).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let changes = job
        .changes
        .clone()
        .unwrap_or_else(|| panic!("no changes: {job:#?}"));
    let package = changes
        .files
        .iter()
        .find(|file| file.path == "package.json")
        .unwrap();
    assert_eq!(package.status, ChangeStatus::Modified);
    assert!(
        package.flags.iter().any(|flag| flag == "runs_later"),
        "{package:?}"
    );

    let mut browser = Browser::launch(&chromium).await;
    browser.phone_viewport().await;
    let job_path = format!("/jobs/{job_id}");
    browser.sign_in(&base, "owner@example.com", &job_path).await;
    assert_eq!(browser.eval("window.innerWidth").await, json!(390));
    review_changes(&mut browser, changes.totals.files).await;
    browse_files(&mut browser).await;
    assert!(
        page_fits(&mut browser).await,
        "the phone page scrolls sideways"
    );
    browser.screenshot("review-phone").await;
    screenshot_at(&mut browser, "review-phone-changes", "section.changes").await;
    screenshot_at(
        &mut browser,
        "review-phone-diff",
        "li[data-change-path='README.md']",
    )
    .await;
    screenshot_at(&mut browser, "review-phone-files", "section.files").await;

    browser.desktop_viewport().await;
    browser.goto(&format!("{base}{job_path}")).await;
    assert_eq!(browser.eval("window.innerWidth").await, json!(1280));
    review_changes(&mut browser, changes.totals.files).await;
    assert!(page_fits(&mut browser).await);
    screenshot_at(&mut browser, "review-desktop", "h1").await;
    screenshot_at(&mut browser, "review-desktop-changes", "section.changes").await;
    screenshot_at(&mut browser, "review-desktop-next", "#run-again-heading").await;

    // Run again, with a new prompt: a new job of the same spec, and the page goes to it.
    browser
        .fill(
            "form[data-api$='/rerun'] textarea[name=prompt]",
            "make it again, slowly",
        )
        .await;
    browser
        .click("form[data-api$='/rerun'] button[type=submit]")
        .await;
    let again_id = went_to_another_job(&mut browser, &job_id).await;
    // The page follows the new run; once it ends, its Changes and Run again appear
    // without a reload.
    browser.eval("window.__sameDocument = true").await;
    let at_first = browser
        .eval("document.querySelector('section.changes') === null && !['succeeded', 'failed'].includes(document.querySelector('[data-field=state]').textContent)")
        .await;
    assert_eq!(
        at_first,
        json!(true),
        "the page opened on the job before it ended"
    );
    browser
        .wait_for("document.querySelector('[data-field=state]').textContent === 'succeeded' && document.querySelector('section.changes') && document.querySelector('#run-again-heading')")
        .await;
    assert_eq!(
        browser.eval("window.__sameDocument === true").await,
        json!(true)
    );
    assert!(
        browser
            .eval("document.querySelector('[data-since]') === null")
            .await
            == json!(true)
    );
    let again = web.job(&again_id).await;
    assert_eq!(
        (again.title.as_str(), again.spec.prompt.as_str()),
        ("run edit", "make it again, slowly")
    );
    assert_eq!(
        (again.spec.engine.as_str(), again.spec.folder.as_str()),
        ("edit", "work")
    );

    // Continue: a follow-up of the same computer and folder that names the earlier job.
    browser.goto(&format!("{base}{job_path}")).await;
    browser
        .fill(
            "form[data-api='/api/jobs'] textarea[name=prompt]",
            "now tidy up",
        )
        .await;
    browser
        .click("form[data-api='/api/jobs'] button[type=submit]")
        .await;
    let follow_up_id = went_to_another_job(&mut browser, &job_id).await;
    assert_ne!(follow_up_id, again_id);
    let continues = browser.text("[data-field=continues]").await;
    // The first job is run 1 of its chain; the follow-up names it by number and title.
    assert_eq!(continues, "continues #1 run edit");
    let follow_up = web.job(&follow_up_id).await;
    assert_eq!(follow_up.continues.as_ref(), Some(&job.id));
    assert_eq!(follow_up.title, "Follow-up: run edit");
    assert_eq!(follow_up.spec.prompt, "now tidy up");
    browser.screenshot("follow-up").await;
    browser.goto(&format!("{base}{job_path}")).await;
    let continued_by = browser.text("[data-field=continued-by]").await;
    assert!(
        continued_by.starts_with("Continued by #")
            && continued_by.ends_with(" Follow-up: run edit"),
        "{continued_by}"
    );
    for id in [&again_id, &follow_up_id] {
        let ended = finished(&web, id).await;
        assert_eq!(
            ended.state,
            JobState::Succeeded,
            "{ended:#?}\n{}",
            daemon.stderr()
        );
    }

    // With the computer gone, a diff says so in words.
    daemon.signal("TERM").await;
    daemon.wait(Duration::from_secs(30)).await;
    browser.goto(&format!("{base}{job_path}")).await;
    let panel = diff_panel(&mut browser, "package.json").await;
    browser
        .wait_for(&format!("document.querySelector('{panel} p.error')"))
        .await;
    let said = browser.text(&format!("{panel} p.error")).await;
    assert!(said.contains("The computer is offline"), "{said}");
}

/// The Changes section: totals, the warning, `package.json`'s badge, and `README.md`'s diff
/// coloured by line in a box that scrolls sideways on its own.
async fn review_changes(browser: &mut Browser, files: u64) {
    browser
        .wait_for("document.querySelector('section.changes')")
        .await;
    let totals = browser.text("section.changes .totals").await;
    assert!(
        totals.starts_with(&format!("{files} files changed, +")),
        "{totals}"
    );
    let warning = browser.text("section.changes .warning").await;
    assert!(
        warning.contains("Review before you build or run."),
        "{warning}"
    );
    assert!(
        warning.contains("hooks, build scripts, task and CI files"),
        "{warning}"
    );
    let package = browser.text("li[data-change-path='package.json']").await;
    assert!(
        package.contains("Review before you build or run"),
        "{package}"
    );
    assert!(package.contains("modified"), "{package}");
    let readme = browser.text("li[data-change-path='README.md']").await;
    assert!(
        readme.contains("+2") && readme.contains("\u{2212}1"),
        "{readme}"
    );

    let panel = diff_panel(browser, "README.md").await;
    browser
        .wait_for(&format!("document.querySelector('{panel} .line.add')"))
        .await;
    let colours: Value = browser
        .eval(&format!(
            "(() => {{ const style = (kind) => getComputedStyle(document.querySelector('{panel} .line.' + kind)); \
             return {{ add: style('add').backgroundColor, del: style('del').backgroundColor, hunk: style('hunk').color, \
                       muted: getComputedStyle(document.querySelector('.muted')).color, \
                       text: getComputedStyle(document.body).color, \
                       added: document.querySelector('{panel} .line.add').textContent }}; }})()"
        ))
        .await;
    assert_eq!(colours["add"], "rgba(31, 157, 85, 0.2)", "{colours}");
    assert_eq!(colours["del"], "rgba(214, 69, 69, 0.2)", "{colours}");
    // Hunk headers are muted like the page's other secondary text.
    assert_eq!(colours["hunk"], colours["muted"], "{colours}");
    assert_ne!(colours["hunk"], colours["text"], "{colours}");
    assert_eq!(colours["added"], "+new line", "{colours}");
    let scrolls = browser
        .eval(&format!(
            "(() => {{ const pre = document.querySelector('{panel} pre'); return pre.scrollWidth > pre.clientWidth; }})()"
        ))
        .await;
    assert_eq!(
        scrolls,
        json!(true),
        "the long line scrolls inside its own box"
    );
    assert_eq!(
        browser
            .eval("document.querySelector(\"button[data-diff-path='README.md']\").getAttribute('aria-expanded')")
            .await,
        json!("true")
    );
}

/// Files: the folder's entries, into `src/`, and a file's text.
async fn browse_files(browser: &mut Browser) {
    browser.click("button[data-files-toggle]").await;
    browser
        .wait_for("[...document.querySelectorAll('#files-browser .tree li')].some((li) => li.textContent.startsWith('package.json'))")
        .await;
    let listed = browser.text("#files-browser .tree").await;
    for name in ["src/", "README.md", "notes.txt"] {
        assert!(listed.contains(name), "{listed}");
    }
    browser.click("#files-browser button[data-dir='src']").await;
    browser
        .wait_for("document.querySelector(\"#files-browser button[data-file='src/lib.txt']\")")
        .await;
    let crumbs = browser.text("#files-browser .breadcrumbs").await;
    assert!(
        crumbs.contains("work") && crumbs.contains("src"),
        "{crumbs}"
    );
    browser
        .click("#files-browser button[data-file='src/lib.txt']")
        .await;
    browser
        .wait_for("document.querySelector('#files-browser pre.file-text')")
        .await;
    let text = browser.text("#files-browser pre.file-text").await;
    assert_eq!(text.trim_end(), "library text");
}
