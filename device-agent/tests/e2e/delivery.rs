//! Git delivery end to end, with real git and the real agent under Landlock: a bare
//! repository on disk as `origin` (a new branch pushed with the computer's own sign-in,
//! `local` undoing a recipe's own commit, a branch someone else moved left alone and the job
//! `blocked`), and one served by `git daemon` on loopback with a GitHub API double, where a
//! pull request is opened and merged once its checks pass. The run itself never reads the
//! computer's `~/.git-credentials` or `~/.ssh`, which the agent's own HOME holds.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tether_protocol::git::PullRequestState;
use tether_protocol::jobs::{Job, JobState};
use tokio::io::AsyncWriteExt;

#[path = "../support/github_double.rs"]
mod github_double;

use crate::{
    agent_command, agent_ok, backend_works, output_lines, pair, spawn_server, Daemon, Web,
};
use github_double::GithubDouble;

const TOKEN: &str = "ghp_e2edoubletoken0123456789";

/// Appends a line to the file the prompt names, then tries to read the computer's sign-ins.
const EDITS: &str = r#"printf 'a line\n' >> "$TETHER_TASK_PROMPT"
cat "$HOME/.git-credentials" && echo READ-CREDENTIALS
cat "$HOME/.ssh/id_ed25519" && echo READ-SSH
echo done"#;
/// Appends a line and commits it itself (the computer's `~/.gitconfig` is out of a run's
/// sight).
const COMMITS: &str = r#"export GIT_CONFIG_GLOBAL=/dev/null
printf 'committed\n' >> "$TETHER_TASK_PROMPT" && git add -A && git -c user.name=Recipe -c user.email=recipe@example.com commit -qm 'the recipe commits'
echo done"#;

/// Runs git in `dir` as the owner, with no configuration of this machine's; its output.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Owner")
        .env("GIT_AUTHOR_EMAIL", "owner@example.com")
        .env("GIT_COMMITTER_NAME", "Owner")
        .env("GIT_COMMITTER_EMAIL", "owner@example.com")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A bare `origin` at `bare` with `main` holding one commit, and a clone of it at `work`.
fn origin_and_clone(bare: &Path, work: &Path) {
    std::fs::create_dir_all(bare).unwrap();
    git(bare, &["init", "-q", "--bare", "-b", "main"]);
    let parent = work.parent().unwrap();
    let name = work.file_name().unwrap().to_str().unwrap();
    git(parent, &["clone", "-q", bare.to_str().unwrap(), name]);
    std::fs::write(work.join("a.txt"), "one\n").unwrap();
    git(work, &["add", "a.txt"]);
    git(work, &["commit", "-q", "-m", "first"]);
    git(work, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
}

/// The computer's home folder: a git identity and sign-ins the run must never read.
fn user_home(home: &Path) {
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "FAKE-PRIVATE-KEY\n").unwrap();
    std::fs::write(
        home.join(".git-credentials"),
        "https://person:FAKE-PASSWORD@example.com\n",
    )
    .unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[user]\n\tname = Person\n\temail = person@example.com\n",
    )
    .unwrap();
}

async fn create_job(
    web: &Web,
    device_id: &str,
    folder: &str,
    engine: &str,
    prompt: &str,
    git: Value,
) -> Job {
    // A pull request reaches GitHub: the server asks for the network on.
    let network = git["delivery"] == "pull_request";
    let body = json!({
        "deviceId": device_id, "title": format!("Deliver {prompt}"), "prompt": prompt,
        "folder": folder, "engine": engine, "mode": "unattended", "network": network,
        "timeoutMinutes": 5, "git": git,
    });
    let res = web.post("/api/jobs", &body).await;
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, reqwest::StatusCode::CREATED, "{text}");
    serde_json::from_str(&text).unwrap()
}

async fn finished(web: &Web, job: &Job) -> Job {
    web.wait_until_ended(job.id.as_str(), Duration::from_secs(90))
        .await
}

fn summary(job: &Job) -> String {
    job.outcome
        .as_ref()
        .map(|o| o.summary.clone())
        .unwrap_or_default()
}

/// A free loopback port (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_is_pushed_with_the_computers_sign_in_and_never_forced() {
    if !crate::external::git() || !backend_works("landlock").await {
        return;
    }
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let (data, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (bare, work, person) = (
        tmp.path().join("origin.git"),
        tmp.path().join("work"),
        tmp.path().join("person"),
    );
    origin_and_clone(&bare, &work);
    user_home(&person);
    let device_id = pair(&server.base, &web, data.path()).await;
    agent_ok(
        data.path(),
        &["folders", "share", "work", work.to_str().unwrap()],
    )
    .await;
    agent_ok(
        data.path(),
        &["recipe", "add", "edits", "--", "sh", "-c", EDITS],
    )
    .await;
    agent_ok(
        data.path(),
        &["recipe", "add", "commits", "--", "sh", "-c", COMMITS],
    )
    .await;
    let mut command = agent_command(data.path());
    command.env("HOME", &person);
    let daemon = Daemon::spawn(command);
    let device = web
        .wait_for_device(&device_id, |device| {
            device
                .capabilities
                .as_ref()
                .is_some_and(|caps| caps.git.is_some())
        })
        .await;
    assert!(device
        .capabilities
        .unwrap()
        .git
        .unwrap()
        .version
        .starts_with('2'));

    // A new branch, committed by Tether as the person and pushed with their sign-in.
    let git_push = json!({ "delivery": "push", "branch": { "new": "tether/one" } });
    let job = create_job(&web, &device_id, "work", "edits", "b.txt", git_push).await;
    let job = finished(&web, &job).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let output = output_lines(&job).join("\n");
    assert!(
        !output.contains("READ-") && !output.contains("FAKE-"),
        "{output}"
    );
    let pushed = git(&bare, &["rev-parse", "refs/heads/tether/one"]);
    assert_eq!(pushed, git(&work, &["rev-parse", "HEAD"]));
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%an <%ae> %s", "tether/one"]),
        "Person <person@example.com> Deliver b.txt"
    );
    assert!(
        summary(&job).contains("Pushed tether/one"),
        "{}",
        summary(&job)
    );
    let delivery = job
        .delivery
        .as_ref()
        .expect("a pushed job reports its delivery");
    assert_eq!(
        (delivery.pushed, delivery.branch.as_str()),
        (true, "tether/one"),
        "{delivery:?}"
    );
    let [commit] = delivery.commits.as_slice() else {
        panic!("one commit: {delivery:?}");
    };
    assert_eq!(commit.subject, "Deliver b.txt", "{delivery:?}");
    assert!(pushed.starts_with(&commit.sha), "{pushed} {delivery:?}");

    // Local only: the recipe's own commit is undone, its change stays.
    let start = git(&work, &["rev-parse", "HEAD"]);
    let job = create_job(
        &web,
        &device_id,
        "work",
        "commits",
        "c.txt",
        json!({ "delivery": "local" }),
    )
    .await;
    let job = finished(&web, &job).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    assert_eq!(git(&work, &["rev-parse", "HEAD"]), start);
    assert_eq!(
        std::fs::read_to_string(work.join("c.txt")).unwrap(),
        "committed\n"
    );
    assert!(summary(&job).contains("Undid 1 commit"), "{job:#?}");

    // Someone else moves the branch on origin: the push is refused, nothing overwritten.
    let other = tmp.path().join("other");
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "-b",
            "tether/one",
            bare.to_str().unwrap(),
            "other",
        ],
    );
    std::fs::write(other.join("theirs.txt"), "theirs\n").unwrap();
    git(&other, &["add", "theirs.txt"]);
    git(&other, &["commit", "-q", "-m", "theirs"]);
    git(&other, &["push", "-q", "origin", "tether/one"]);
    let theirs = git(&other, &["rev-parse", "HEAD"]);
    let job = create_job(
        &web,
        &device_id,
        "work",
        "edits",
        "d.txt",
        json!({ "delivery": "push" }),
    )
    .await;
    let job = finished(&web, &job).await;
    assert_eq!(
        job.state,
        JobState::Blocked,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    assert!(
        summary(&job).contains("someone else pushed"),
        "{}",
        summary(&job)
    );
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/tether/one"]), theirs);
    assert_eq!(
        git(&work, &["log", "-1", "--format=%s"]),
        "Deliver d.txt",
        "the commit stays local"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_is_opened_and_merged_once_its_checks_pass() {
    if !crate::external::git() || !backend_works("landlock").await {
        return;
    }
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let (data, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (root, work, person) = (
        tmp.path().join("served"),
        tmp.path().join("work"),
        tmp.path().join("person"),
    );
    let bare = root.join("owner/repo.git");
    origin_and_clone(&bare, &work);
    user_home(&person);
    let port = free_port();
    let mut daemon_git = tokio::process::Command::new("git")
        .args([
            "daemon",
            "--export-all",
            "--enable=receive-pack",
            "--reuseaddr",
            &format!("--base-path={}", root.display()),
            "--listen=127.0.0.1",
            &format!("--port={port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("git://127.0.0.1:{port}/owner/repo.git");
    git(&work, &["remote", "set-url", "origin", &url]);
    let double = GithubDouble::start(TOKEN).await.unwrap();
    double.with(|state| {
        state
            .check_runs
            .push(("build".into(), "completed".into(), Some("success".into())));
    });

    let device_id = pair(&server.base, &web, data.path()).await;
    agent_ok(
        data.path(),
        &["folders", "share", "work", work.to_str().unwrap()],
    )
    .await;
    agent_ok(
        data.path(),
        &["recipe", "add", "edits", "--", "sh", "-c", EDITS],
    )
    .await;
    let host = format!("127.0.0.1:{port}");
    let mut add = agent_command(data.path());
    add.args(["github", "add", &host, "--api-url", &double.url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = add.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{TOKEN}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let added = child.wait_with_output().await.unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&added.stdout),
        String::from_utf8_lossy(&added.stderr)
    );
    assert!(added.status.success() && !said.contains(TOKEN), "{said}");
    let listed = agent_ok(data.path(), &["github", "list"]).await;
    assert!(
        listed.contains(&host) && !listed.contains(TOKEN),
        "{listed}"
    );

    let mut command = agent_command(data.path());
    command.env("HOME", &person);
    let daemon = Daemon::spawn(command);
    web.wait_for_device(&device_id, |device| {
        device
            .capabilities
            .as_ref()
            .and_then(|caps| caps.git.as_ref())
            .is_some_and(|git| git.github_hosts.contains(&host))
    })
    .await;

    let git_pr =
        json!({ "delivery": "pull_request", "branch": { "new": "tether/pr" }, "merge": "auto" });
    let job = create_job(&web, &device_id, "work", "edits", "e.txt", git_pr).await;
    let job = finished(&web, &job).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let pushed = git(&bare, &["rev-parse", "refs/heads/tether/pr"]);
    let pulls = double.with(|state| state.pulls.clone());
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(
        (pulls[0].head.as_str(), pulls[0].base.as_str()),
        ("tether/pr", "main")
    );
    assert_eq!(pulls[0].merged_sha.as_deref(), Some(pushed.as_str()));
    assert!(summary(&job).contains("merged"), "{}", summary(&job));
    let delivery = job
        .delivery
        .as_ref()
        .expect("a merged job reports its delivery");
    assert_eq!(
        (delivery.pushed, delivery.branch.as_str()),
        (true, "tether/pr"),
        "{delivery:?}"
    );
    let pull_request = delivery.pull_request.as_ref().expect("its pull request");
    assert_eq!(
        (pull_request.number, pull_request.state),
        (1, PullRequestState::Merged),
        "{delivery:?}"
    );
    let everything = format!("{job:?}{}", daemon.stderr());
    assert!(!everything.contains(TOKEN), "the token leaked");
    let _ = daemon_git.kill().await;
}
