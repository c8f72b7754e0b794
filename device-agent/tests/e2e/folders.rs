//! Parallel runs and shared folders, end to end with `run --max-runs 2`: two jobs in one
//! folder never run at the same time (the second waits, saying so, and can be cancelled
//! while it waits), and a job asking for a worktree while the folder is busy runs at once in
//! its own worktree on its own branch, leaving the shared checkout untouched. Also: what
//! `recipe add` refuses, and a running agent publishing a new recipe and folder at once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::jobs::{Job, JobState};

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use crate::{
    agent, agent_command, agent_ok, backend_works, collect, output_lines, pair, spawn_server,
    spawn_server_with, start_daemon, Daemon, Web,
};

/// Notes its start and end in the folder's `runs.log`, sleeping the prompt's seconds between.
const LOGGED: &str = r#"echo "start $TETHER_JOB_ID" >> runs.log
sleep "$TETHER_TASK_PROMPT"
echo "end $TETHER_JOB_ID" >> runs.log
echo done"#;

/// Prints when it starts and ends and its branch, leaves a file, and in a worktree (whose
/// `.git` is a file) commits inside the sandbox.
const IN_WORKTREE: &str = r#"echo "start $(date +%s%N)"
echo "branch $(git rev-parse --abbrev-ref HEAD)"
if [ -f .git ]; then git -c user.name=Recipe -c user.email=recipe@example.com commit -q --allow-empty -m probe && echo COMMITTED; fi
printf 'made\n' > "made-$TETHER_JOB_ID.txt"
sleep "$TETHER_TASK_PROMPT"
echo "end $(date +%s%N)""#;

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=Owner",
            "-c",
            "user.email=owner@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

async fn create_job(web: &Web, device_id: &str, seconds: &str, git: Option<Value>) -> Job {
    let mut body = json!({
        "deviceId": device_id, "title": "sleepy", "prompt": seconds, "folder": "work",
        "engine": "sleepy", "mode": "unattended", "network": false, "timeoutMinutes": 5,
    });
    if let Some(git) = git {
        body["git"] = git;
    }
    let res = web.post("/api/jobs", &body).await;
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{text}");
    serde_json::from_str(&text).unwrap()
}

async fn finished(web: &Web, job: &Job, daemon: &Daemon) -> Job {
    let job = web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(90))
        .await;
    assert!(job.outcome.is_some(), "{job:#?}\n{}", daemon.stderr());
    job
}

fn statuses(job: &Job) -> Vec<String> {
    job.events
        .iter()
        .filter(|event| event.kind == "status")
        .map(|event| event.text.clone())
        .collect()
}

/// A paired computer sharing `work` with the recipe `sleepy`, its daemon holding 2 runs.
async fn rig(work: &Path, recipe: &str) -> (crate::Server, Web, tempfile::TempDir, String, Daemon) {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "sleepy", "--", "sh", "-c", recipe],
    )
    .await;
    let daemon = two_runs(home.path());
    web.wait_for_device(&device_id, |device| {
        device.online && device.capabilities.is_some()
    })
    .await;
    (server, web, home, device_id, daemon)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_in_one_folder_waits_for_the_first() {
    if !backend_works("landlock").await {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (_server, web, _home, device_id, daemon) = rig(work.path(), LOGGED).await;

    let first = create_job(&web, &device_id, "4", None).await;
    web.wait_for_job(first.id.as_str(), Duration::from_secs(30), |job| {
        job.state == JobState::Running
    })
    .await;
    // The second waits, says so, and a cancel ends it while it waits.
    let cancelled = create_job(&web, &device_id, "0", None).await;
    let waiting = format!("waiting for the folder work, used by job {}", first.id);
    let seen = web
        .wait_for_job(cancelled.id.as_str(), Duration::from_secs(30), |job| {
            statuses(job).contains(&waiting)
        })
        .await;
    assert_eq!(seen.state, JobState::Running, "{seen:#?}");
    let res = web
        .post(&format!("/api/jobs/{}/cancel", cancelled.id), &json!({}))
        .await;
    assert!(res.status().is_success(), "{}", res.status());
    let cancelled = finished(&web, &cancelled, &daemon).await;
    assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:#?}");
    assert!(
        web.job(first.id.as_str()).await.state == JobState::Running,
        "the first run went on"
    );
    // The next waits, then starts once the first ended.
    let second = create_job(&web, &device_id, "0", None).await;
    let first = finished(&web, &first, &daemon).await;
    let second = finished(&web, &second, &daemon).await;
    for job in [&first, &second] {
        assert_eq!(
            job.state,
            JobState::Succeeded,
            "{job:#?}\n{}",
            daemon.stderr()
        );
    }
    assert!(statuses(&second).contains(&waiting), "{second:#?}");
    let log = std::fs::read_to_string(work.path().join("runs.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            format!("start {}", first.id),
            format!("end {}", first.id),
            format!("start {}", second.id),
            format!("end {}", second.id),
        ],
        "the cancelled run never started"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_a_worktree_goes_on_at_once_and_leaves_the_checkout_alone() {
    if !crate::external::git() || !backend_works("landlock").await {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    git(work.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(work.path().join("a.txt"), "a\n").unwrap();
    git(work.path(), &["add", "a.txt"]);
    git(work.path(), &["commit", "-q", "-m", "first"]);
    let head = git(work.path(), &["rev-parse", "HEAD"]);
    let (_server, web, home, device_id, daemon) = rig(work.path(), IN_WORKTREE).await;

    // The first holds the folder; the second, asking for a worktree, does not wait for it.
    let options = json!({ "delivery": "local", "worktree": true });
    let first = create_job(&web, &device_id, "4", Some(options.clone())).await;
    web.wait_for_job(first.id.as_str(), Duration::from_secs(30), |job| {
        output_lines(job)
            .iter()
            .any(|line| line.starts_with("start "))
    })
    .await;
    let second = create_job(&web, &device_id, "1", Some(options)).await;
    let first = finished(&web, &first, &daemon).await;
    let second = finished(&web, &second, &daemon).await;
    for job in [&first, &second] {
        assert_eq!(
            job.state,
            JobState::Succeeded,
            "{job:#?}\n{}",
            daemon.stderr()
        );
    }
    let (one, two) = (output_lines(&first), output_lines(&second));
    assert!(one.contains(&"branch main".to_owned()), "{one:?}");
    let id = second.id.as_str();
    let branch = format!("branch tether/{}", &id[id.len() - 8..]);
    assert!(two.contains(&branch), "{two:?}");
    assert!(two.contains(&"COMMITTED".to_owned()), "{two:?}");
    let worktrees = worktrees_root(home.path());
    let kept = worktrees.join(id);
    let says_kept = format!("the worktree is kept at {}", kept.display());
    assert!(
        two.iter().any(|line| line.starts_with(&says_kept)),
        "{two:?}"
    );
    assert!(kept.join(format!("made-{id}.txt")).is_file());
    let (started, ended) = (stamp(&two, "start"), stamp(&two, "end"));
    assert!(
        started < stamp(&one, "end") && stamp(&one, "start") < ended,
        "the runs did not overlap: {one:?} {two:?}"
    );
    // The file view reads the worktree the second ran in.
    let res = web
        .get(&format!("/api/jobs/{id}/file?path=made-{id}.txt"))
        .await;
    assert_eq!(res.status(), StatusCode::OK, "{}", daemon.stderr());
    // The shared checkout: same branch, same commit, only the first run's file.
    assert_eq!(
        git(work.path(), &["symbolic-ref", "--short", "HEAD"]),
        "main"
    );
    assert_eq!(git(work.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(
        git(work.path(), &["status", "--porcelain"]),
        format!("?? made-{}.txt", first.id)
    );
    let _ = std::fs::remove_dir_all(worktrees);
}

/// `tether-agent run --max-runs 2`, its output collected.
fn two_runs(home: &Path) -> Daemon {
    let mut child = agent_command(home)
        .args(["run", "--max-runs", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    tokio::spawn(collect(child.stderr.take().unwrap(), stderr.clone()));
    tokio::spawn(collect(child.stdout.take().unwrap(), stderr.clone()));
    Daemon { child, stderr }
}

/// Where the agent of `home` (its data dir) puts worktrees: beside it.
fn worktrees_root(home: &Path) -> PathBuf {
    let home = home.canonicalize().unwrap();
    let mut name = home.file_name().unwrap().to_os_string();
    name.push("-worktrees");
    home.with_file_name(name)
}

/// The nanoseconds after `label ` in the run's output.
fn stamp(lines: &[String], label: &str) -> u128 {
    lines
        .iter()
        .find_map(|line| line.strip_prefix(&format!("{label} "))?.parse().ok())
        .unwrap_or_else(|| panic!("no {label} in {lines:?}"))
}

/// A running agent tells the server at once when a recipe, folder or engine is added (not
/// at its next heartbeat, here an hour away), and says it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_agent_publishes_a_new_recipe_at_once() {
    let server = spawn_server_with(None, |config| {
        config.heartbeat_secs = 3600;
        config.online_secs = 3600;
    })
    .await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let mut daemon = start_daemon(home.path(), "landlock");
    // Capabilities come with the first heartbeat, whose answer sets the hour-long pace.
    web.wait_for_device(&device_id, |device| device.capabilities.is_some())
        .await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "late", "--", "sh", "-c", "echo late"],
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let res = web.get("/api/devices").await;
        let devices: Vec<Value> = res.json().await.unwrap();
        let device = devices
            .iter()
            .find(|device| device["id"] == device_id.as_str())
            .unwrap();
        let caps = &device["capabilities"];
        let has_recipe = caps["engines"]
            .as_array()
            .is_some_and(|engines| engines.iter().any(|engine| engine["name"] == "late"));
        if has_recipe && caps["folders"] == json!(["work"]) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never heard of the new recipe: {device:#}\n{}",
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        daemon
            .stderr()
            .contains("the local configuration changed: sending this computer's capabilities now"),
        "{}",
        daemon.stderr()
    );
    daemon.signal("TERM").await;
    let _ = daemon.wait(Duration::from_secs(10)).await;
}

/// Runs the agent with `args`, which must be refused (exit 2, one line) saying each of `says`.
async fn refused(home: &Path, args: &[&str], says: Vec<String>) {
    let output = agent(home, args).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    for said in says {
        assert!(stderr.contains(&said), "{args:?}: {stderr}");
    }
}

/// `recipe add` of a program a job's sandbox could not see is refused at once (exit 2, one
/// line naming the path and what to do), and accepted once the program is in a shared folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_add_refuses_a_program_the_sandbox_cannot_see() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let tools_path = tools.path().canonicalize().unwrap();
    let program = tools_path.join("check.sh");
    std::fs::write(&program, "#!/bin/sh\necho checked\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = program.to_str().unwrap();
    refused(
        home.path(),
        &["recipe", "add", "check", "--", program],
        vec![
            format!(
                "recipe \"check\" would never start: {program}, which a job's sandbox cannot see"
            ),
            "Move it into a shared folder".to_owned(),
            "install it system-wide".to_owned(),
        ],
    )
    .await;
    refused(
        home.path(),
        &[
            "recipe",
            "add",
            "nothing",
            "--",
            "tether-no-such-program",
            "x",
        ],
        vec!["tether-no-such-program is not on PATH".to_owned()],
    )
    .await;
    let listed = agent_ok(home.path(), &["recipe", "list"]).await;
    assert!(!listed.contains("check"), "{listed}");
    agent_ok(
        home.path(),
        &["folders", "share", "tools", tools_path.to_str().unwrap()],
    )
    .await;
    let said = agent_ok(home.path(), &["recipe", "add", "check", "--", program]).await;
    assert!(said.contains("Recipe \"check\""), "{said}");
    agent_ok(
        home.path(),
        &["recipe", "add", "greet", "--", "sh", "-c", "echo hi"],
    )
    .await;
}
