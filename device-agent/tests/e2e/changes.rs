//! What a run changed, end to end: a recipe edits, adds, deletes and renames files in a git
//! repository with uncommitted work of its owner's; the finished job lists exactly the
//! run's changes (flags included), and `GET /api/jobs/{id}/diff?path=` answers one file's
//! unified diff as text, to its owner only, refusing paths the file view refuses. A job's
//! diff is its run's start against its run's end: a later job, a commit and a gc in the
//! repository change nothing of it; `against=now` compares with the folder now.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use tether_protocol::changes::{ChangeBaseKind, ChangeStatus, FLAG_RUNS_LATER};
use tether_protocol::jobs::JobState;

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, pair, spawn_server, Daemon, Web};

const RECIPE: &str = r#"printf 'a line the run added\n' >> edited.txt
rm deleted.txt
mv old-name.txt new-name.txt
printf 'brand new\n' > added.txt
printf '{"name": "app", "scripts": {"postinstall": "./setup.sh"}}\n' > package.json
echo done"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_lists_its_changes_and_answers_diffs() {
    if !crate::external::git() {
        return;
    }
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let head = dirty_repository(work.path());
    let device_id = pair(&server.base, &web, home.path()).await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "edits", "--", "sh", "-c", RECIPE],
    )
    .await;
    let daemon = Daemon::start(home.path());
    web.wait_for_device(&device_id, |device| {
        device.online && device.capabilities.is_some()
    })
    .await;

    let job = web.create_job(&device_id, "edits", "change things").await;
    let job_id = job.id.to_string();
    let job = web.wait_until_ended(&job_id, Duration::from_secs(60)).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let changes = job
        .changes
        .clone()
        .unwrap_or_else(|| panic!("no changes: {job:#?}\n{}", daemon.stderr()));
    assert_eq!(changes.base.kind, ChangeBaseKind::Git);
    assert_eq!(changes.base.head.as_deref(), Some(head.as_str()));
    let listed: Vec<(&str, ChangeStatus, Option<&str>, u64, u64)> = changes
        .files
        .iter()
        .map(|file| {
            (
                file.path.as_str(),
                file.status,
                file.from.as_deref(),
                file.additions,
                file.deletions,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("added.txt", ChangeStatus::Added, None, 1, 0),
            ("deleted.txt", ChangeStatus::Deleted, None, 0, 2),
            ("edited.txt", ChangeStatus::Modified, None, 1, 0),
            (
                "new-name.txt",
                ChangeStatus::Renamed,
                Some("old-name.txt"),
                0,
                0
            ),
            ("package.json", ChangeStatus::Modified, None, 1, 1),
        ],
        "the owner's uncommitted work is no part of the run's changes"
    );
    let package = changes
        .files
        .iter()
        .find(|file| file.path == "package.json");
    assert_eq!(
        package.map(|file| file.flags.clone()),
        Some(vec![FLAG_RUNS_LATER.to_owned()])
    );
    assert_eq!(changes.totals.files, 5);
    assert!(!changes.truncated);

    // One file's diff, as text.
    let res = web
        .get(&format!("/api/jobs/{job_id}/diff?path=edited.txt"))
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{}", daemon.stderr());
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert_eq!(
        res.text().await.unwrap(),
        concat!(
            "--- a/edited.txt\n+++ b/edited.txt\n@@ -1,3 +1,4 @@\n",
            " edited line 1\n edited line 2\n edited line 3\n+a line the run added\n"
        )
    );
    let res = web
        .get(&format!("/api/jobs/{job_id}/diff?path=dirty.txt"))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.text().await.unwrap(), "", "unchanged by the run");

    // Paths the file view refuses are refused here too.
    for path in ["../outside.txt", "/etc/passwd", ".git/config", ".env"] {
        let res = web
            .get(&format!("/api/jobs/{job_id}/diff?path={path}"))
            .await;
        let status = res.status();
        assert!(
            status == StatusCode::FORBIDDEN || status == StatusCode::UNPROCESSABLE_ENTITY,
            "{path}: {status} {}",
            res.text().await.unwrap_or_default()
        );
    }

    // Another account's job does not exist for it.
    let other = sign_up_other(&server.base).await;
    let res = other
        .get(&format!("/api/jobs/{job_id}/diff?path=edited.txt"))
        .await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    eprintln!("--- tether-agent run said:\n{}", daemon.stderr());
}

/// A repository with a commit, then uncommitted work of its owner's (a changed file, an
/// untracked one, a `.env`); `HEAD`'s commit.
fn dirty_repository(work: &Path) -> String {
    let write = |name: &str, text: &str| std::fs::write(work.join(name), text).unwrap();
    write(
        "edited.txt",
        "edited line 1\nedited line 2\nedited line 3\n",
    );
    write("deleted.txt", "deleted 1\ndeleted 2\n");
    let moved: String = (1..=20).map(|n| format!("moved line {n}\n")).collect();
    write("old-name.txt", &moved);
    write("dirty.txt", "committed\n");
    write("package.json", "{\"name\": \"app\"}\n");
    write(".gitignore", ".env\n");
    git(work, &["init", "-q"]);
    git(work, &["add", "-A"]);
    git(work, &["commit", "-q", "-m", "first"]);
    write("dirty.txt", "committed\nand changed by the owner\n");
    write("untracked.txt", "the owner's\n");
    write(".env", "TOKEN=x\n");
    git(work, &["rev-parse", "HEAD"])
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "user.name=Owner",
            "-c",
            "user.email=owner@example.com",
        ])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A second account, with an API token of its own.
async fn sign_up_other(base: &str) -> Web {
    Web::sign_up_as(base, "other@example.com").await
}

/// The diff's body through the web API, and what the computer says it compared with.
async fn diff_of(web: &Web, job_id: &str, query: &str) -> (String, String) {
    let res = web.get(&format!("/api/jobs/{job_id}/diff?{query}")).await;
    assert_eq!(res.status(), StatusCode::OK, "{query}");
    let against = res
        .headers()
        .get("x-tether-diff-against")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (res.text().await.unwrap(), against)
}

/// Issue 26, defect 1: two jobs in sequence on one repository; after the second ran, and
/// after its work was committed and the repository collected with `git gc --prune=now`,
/// the first job's diff still shows only the first job's work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_jobs_diff_shows_only_its_own_work_after_later_jobs_and_a_gc() {
    if !crate::external::git() {
        return;
    }
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let readme: String = (1..=3).map(|n| format!("readme line {n}\n")).collect();
    std::fs::write(work.path().join("README.md"), &readme).unwrap();
    git(work.path(), &["init", "-q"]);
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-q", "-m", "first"]);
    let device_id = pair(&server.base, &web, home.path()).await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    let first = "printf 'first job 1\\nfirst job 2\\n' >> README.md; echo done";
    let later = "for n in 1 2 3 4 5 6 7 8 9; do echo \"later job $n\" >> README.md; done; \\
                 echo later > later.txt; echo done";
    agent_ok(
        home.path(),
        &["recipe", "add", "first", "--", "sh", "-c", first],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "later", "--", "sh", "-c", later],
    )
    .await;
    let daemon = Daemon::start(home.path());
    web.wait_for_device(&device_id, |device| {
        device.online && device.capabilities.is_some()
    })
    .await;

    let job = web.create_job(&device_id, "first", "add two lines").await;
    let first_id = job.id.to_string();
    let first_job = web
        .wait_until_ended(&first_id, Duration::from_secs(60))
        .await;
    assert_eq!(
        first_job.state,
        JobState::Succeeded,
        "{first_job:#?}\n{}",
        daemon.stderr()
    );
    // While nothing else ran, the end and now are the same.
    let (diff, _) = diff_of(&web, &first_id, "path=README.md").await;
    let expected = concat!(
        "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,5 @@\n",
        " readme line 1\n readme line 2\n readme line 3\n+first job 1\n+first job 2\n"
    );
    assert_eq!(diff, expected, "{}", daemon.stderr());

    let job = web.create_job(&device_id, "later", "add more").await;
    let later_id = job.id.to_string();
    let later_job = web
        .wait_until_ended(&later_id, Duration::from_secs(60))
        .await;
    assert_eq!(later_job.state, JobState::Succeeded, "{}", daemon.stderr());
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-q", "-m", "both jobs"]);
    git(work.path(), &["reflog", "expire", "--expire=now", "--all"]);
    git(work.path(), &["gc", "-q", "--prune=now", "--aggressive"]);

    // The first job: its own two lines, its listing as reported, nothing of the later job.
    let (diff, against) = diff_of(&web, &first_id, "path=README.md").await;
    assert_eq!(diff, expected, "{}", daemon.stderr());
    assert_eq!(against, "end");
    let (diff, _) = diff_of(&web, &first_id, "path=later.txt").await;
    assert_eq!(
        diff, "",
        "the later job's file is no part of the first's diff"
    );
    let first_again = web.job(&first_id).await;
    assert_eq!(first_again.changes, first_job.changes);
    let listed = first_job.changes.as_ref().map(|changes| {
        changes
            .files
            .iter()
            .map(|file| (file.path.clone(), file.additions, file.deletions))
            .collect::<Vec<_>>()
    });
    assert_eq!(listed, Some(vec![("README.md".to_owned(), 2, 0)]));

    // The later job: its own nine lines.
    let (diff, _) = diff_of(&web, &later_id, "path=README.md").await;
    assert_eq!(diff.matches("\n+later job").count(), 9, "{diff}");
    assert!(!diff.contains("+first job"), "{diff}");

    // Asked to compare with the folder now: everything since the first job's start.
    let (diff, against) = diff_of(&web, &first_id, "path=README.md&against=now").await;
    assert_eq!(against, "now");
    assert!(
        diff.contains("+first job 2\n") && diff.contains("+later job 9\n"),
        "{diff}"
    );
    let res = web
        .get(&format!(
            "/api/jobs/{first_id}/diff?path=README.md&against=later"
        ))
        .await;
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // The job page: the diff says it runs to the run's end; the button beside it compares
    // with the folder now, and back.
    if let Some(chromium) = chromium_or_skip("the job page's diff") {
        let mut browser = Browser::launch(&chromium).await;
        browser.phone_viewport().await;
        let job_path = format!("/jobs/{first_id}");
        browser
            .sign_in(&server.base, "owner@example.com", &job_path)
            .await;
        let button = "button[data-diff-path='README.md']";
        browser
            .wait_for(&format!("document.querySelector({button:?})"))
            .await;
        let panel = browser
            .eval(&format!(
                "'#' + document.querySelector({button:?}).getAttribute('aria-controls')"
            ))
            .await;
        let panel = panel.as_str().unwrap().to_owned();
        browser.click(button).await;
        let added = |panel: &str| {
            format!("document.querySelectorAll('{panel} .diff-body .line.add').length")
        };
        browser.wait_for(&format!("{} === 2", added(&panel))).await;
        let caption = browser.text(&format!("{panel} .diff-caption")).await;
        assert!(caption.contains("to its end"), "{caption}");
        let compare = format!("{panel} button[data-diff-against]");
        assert_eq!(
            browser.text(&compare).await.trim(),
            "Compare with the folder now"
        );
        browser.click(&compare).await;
        browser.wait_for(&format!("{} === 11", added(&panel))).await;
        let caption = browser.text(&format!("{panel} .diff-caption")).await;
        assert!(caption.contains("as it is now"), "{caption}");
        assert_eq!(
            browser.text(&compare).await.trim(),
            "Show what the run changed"
        );
        browser.click(&compare).await;
        browser.wait_for(&format!("{} === 2", added(&panel))).await;
    }
    eprintln!("--- tether-agent run said:\n{}", daemon.stderr());
}
