//! End to end: the real server in this process, the real `tether-agent` binary as a child.
//!
//! One scenario, run on SQLite and on PostgreSQL: sign up, pair through the printed code,
//! share a folder, add recipes, run the daemon, then a job that succeeds, one that fails,
//! one cancelled mid-run (its whole process group must die), and a revocation that ends the
//! daemon with its message and leaves no token behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod accessibility;
mod acp;
mod attach_page;
mod attachments;
mod browser;
mod capture;
mod changes;
mod chromium;
mod coding_agents;
mod confined;
mod console;
mod continue_git;
mod decisions;
mod delivery;
mod engine_setup;
mod evidence;
#[path = "../../../server/tests/support/external.rs"]
mod external;
mod folders;
mod git_assign;
mod handback;
mod installable;
mod lifetime;
mod lighthouse;
mod log_viewer;
mod machines;
#[path = "../support/model_server.rs"]
mod model_server;
mod npm;
mod phone;
#[path = "../../../server/tests/support/postgres.rs"]
mod postgres;
mod presets;
mod proxy;
mod recovery;
mod redirect;
mod review;
mod seal;
mod secret_http;
mod secrets;
mod spaces;
mod tool_channel;
mod worker_report;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::devices::Device;
use tether_protocol::jobs::{Job, JobState, Outcome};
use tether_server::{Application, Config};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const AGENT: &str = env!("CARGO_BIN_EXE_tether-agent");
const REVOKED_MESSAGE: &str =
    "This computer was revoked from the server; pair it again with `tether-agent pair URL`";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walking_skeleton_sqlite() {
    walking_skeleton(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walking_skeleton_postgres() {
    // Skips (with a printed reason) when PostgreSQL is not installed, unless
    // TETHER_REQUIRE_EXTERNAL=1.
    if let Some(url) = postgres::fresh_database_url() {
        walking_skeleton(Some(url)).await;
    }
}

/// Setup a run would refuse is refused when it is made, exit 2 with the reason; re-sharing a
/// label says what it replaces; a daemon stopped with SIGTERM shows the computer offline at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_setup_and_a_clean_stop() {
    // An online window longer than the test: only the agent's goodbye can show it offline.
    let server = spawn_server_with(None, |config| config.online_secs = 3600).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    for (args, says) in [
        (&["folders", "share", "root", "/"][..], "blocked root"),
        (
            &["recipe", "add", "root", "--", "sudo", "ls"],
            "rule privilege",
        ),
        (
            &["recipe", "add", "wipe", "--", "rm", "-rf", "/"],
            "rule delete-system-or-home",
        ),
        (
            &["folders", "share", "data", home.path().to_str().unwrap()],
            "the agent's own data",
        ),
    ] {
        let output = agent(home.path(), args).await;
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    let other = tempfile::tempdir().unwrap();
    let said = agent_ok(
        home.path(),
        &["folders", "share", "work", other.path().to_str().unwrap()],
    )
    .await;
    let (now, was) = (
        other.path().canonicalize().unwrap(),
        work.path().canonicalize().unwrap(),
    );
    assert_eq!(
        said.trim(),
        format!("work: now {} (was {})", now.display(), was.display())
    );

    let device_id = pair(&server.base, &web, home.path()).await;
    let mut daemon = Daemon::start(home.path());
    web.wait_for_device(&device_id, |device| device.online)
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemon.stderr().contains("event stream connected") {
        assert!(Instant::now() < deadline, "{}", daemon.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.signal("TERM").await;
    assert_eq!(daemon.wait(Duration::from_secs(30)).await, Some(0));
    assert!(daemon.stderr().contains("Stopped."), "{}", daemon.stderr());
    let device = web
        .wait_for_device(&device_id, |device| !device.online)
        .await;
    assert!(device.last_seen_at.is_some());
}

/// A computer that sleeps through its lease (SIGSTOP here) finds its job interrupted when it
/// wakes: the server says the lease is lost, the agent kills the run's whole group at once,
/// reports nothing more for it, and goes on claiming new work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lease_was_lost_is_killed() {
    let server = spawn_server_with(None, |config| config.lease_secs = 3).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    let sleepy = r#"sleep 60 & echo "child $!"; wait"#;
    agent_ok(
        home.path(),
        &["recipe", "add", "sleepy", "--", "sh", "-c", sleepy],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "tests", "--", "sh", "-c", "echo done"],
    )
    .await;
    let mut daemon = Daemon::start(home.path());
    web.wait_for_device(&device_id, |device| {
        device.online
            && device
                .capabilities
                .as_ref()
                .is_some_and(|caps| caps.engines.len() == 2)
    })
    .await;

    let (job_id, child) = sleepy_child(&web, &device_id).await;

    daemon.signal("STOP").await;
    let job = web.wait_until_ended(&job_id, Duration::from_secs(30)).await;
    assert_eq!(job.state, JobState::Interrupted, "{job:#?}");
    assert!(
        process_alive(child),
        "the run goes on while the agent sleeps"
    );
    daemon.signal("CONT").await;

    wait_until(Duration::from_secs(10), || !process_alive(child)).await;
    assert!(
        !process_alive(child),
        "the run survived its lost lease\n{}",
        daemon.stderr()
    );
    assert_eq!(web.job(&job_id).await.state, JobState::Interrupted);
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "{}",
        daemon.stderr()
    );

    let job = web.create_job(&device_id, "tests", "again").await;
    let job = web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(30))
        .await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    eprintln!("--- tether-agent run said:\n{}", daemon.stderr());
}

async fn walking_skeleton(database_url: Option<String>) {
    let server = spawn_server(database_url).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();

    let device_id = pair(&server.base, &web, home.path()).await;
    let status = agent_json(home.path(), &["status", "--json"]).await;
    assert_eq!(status["paired"], true);
    assert_eq!(status["deviceId"], device_id.as_str());
    assert_eq!(status["name"], "test-box");
    let install_id = status["installId"].clone();
    assert_token_is_private(home.path());

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
            "tests",
            "--",
            "sh",
            "-c",
            r#"echo "$TETHER_TASK_PROMPT"; echo done"#,
        ],
    )
    .await;
    agent_ok(
        home.path(),
        &[
            "recipe",
            "add",
            "fails",
            "--",
            "sh",
            "-c",
            "echo failing; exit 3",
        ],
    )
    .await;
    agent_ok(
        home.path(),
        &[
            "recipe",
            "add",
            "sleepy",
            "--",
            "sh",
            "-c",
            r#"sleep 60 & echo "child $!"; wait"#,
        ],
    )
    .await;
    // These tests ask for Landlock (see `agent_command`): it works on the CI kernel and keeps
    // host pids meaningful; `confined.rs` runs both backends.
    let sandbox = agent_json(home.path(), &["sandbox", "status", "--json"]).await;
    assert_eq!(sandbox["backend"], "landlock", "{sandbox}");
    assert_eq!(sandbox["strength"], "reduced");

    let mut daemon = Daemon::start(home.path());
    let device = web
        .wait_for_device(&device_id, |device| {
            let Some(capabilities) = &device.capabilities else {
                return false;
            };
            device.online
                && capabilities.folders == ["work"]
                && capabilities
                    .engines
                    .iter()
                    .any(|engine| engine.name == "sleepy")
        })
        .await;
    let capabilities = device.capabilities.unwrap();
    assert_eq!(
        serde_json::to_value(&capabilities.sandbox).unwrap(),
        sandbox
    );
    assert_eq!(Some(&capabilities.seal_key), device.seal_key.as_ref());

    // A job that succeeds and prints its prompt.
    let job = web
        .create_job(&device_id, "tests", "hello from the web")
        .await;
    let job = web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(60))
        .await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let outcome = job.outcome.clone().unwrap();
    assert_eq!(
        (outcome.outcome, outcome.exit_code),
        (Outcome::Succeeded, Some(0))
    );
    let output = output_lines(&job);
    assert!(
        output.contains(&"hello from the web".to_owned()),
        "{output:?}"
    );
    assert!(output.contains(&"done".to_owned()), "{output:?}");

    // A job that fails with exit code 3.
    let job = web.create_job(&device_id, "fails", "fail please").await;
    let job = web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(60))
        .await;
    assert_eq!(job.state, JobState::Failed, "{job:#?}");
    let outcome = job.outcome.clone().unwrap();
    assert_eq!(
        (outcome.exit_code, outcome.summary.as_str()),
        (Some(3), "exit code 3")
    );
    assert!(output_lines(&job).contains(&"failing".to_owned()));

    // A job cancelled while it runs: it ends `cancelled`, not with its 60 s sleep, and its
    // group dies.
    let (job_id, child) = sleepy_child(&web, &device_id).await;
    assert!(
        process_alive(child),
        "the run's child {child} should be running"
    );
    let res = web
        .post(&format!("/api/jobs/{job_id}/cancel"), &json!({}))
        .await;
    assert!(res.status().is_success(), "cancel: {}", res.status());
    let job = web.wait_until_ended(&job_id, Duration::from_secs(20)).await;
    assert_eq!(
        job.state,
        JobState::Cancelled,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    assert_eq!(job.outcome.unwrap().summary, "cancelled");
    wait_until(Duration::from_secs(5), || !process_alive(child)).await;
    assert!(
        !process_alive(child),
        "the cancelled run's child {child} survived"
    );

    // Revocation: the daemon stops with its message and a non-zero code, the token is gone.
    let res = web.delete(&format!("/api/devices/{device_id}")).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let code = daemon.wait(Duration::from_secs(30)).await;
    assert_eq!(code, Some(3), "{}", daemon.stderr());
    assert!(
        daemon.stderr().contains(REVOKED_MESSAGE),
        "{}",
        daemon.stderr()
    );
    eprintln!("--- tether-agent run said:\n{}", daemon.stderr());
    assert!(!home.path().join("device-token").exists());
    assert!(!home.path().join("seal-key.json").exists());
    let status = agent_json(home.path(), &["status", "--json"]).await;
    assert_eq!(status["paired"], false);
    // The install id, folders and recipes survive, for pairing again.
    assert_eq!(status["folders"][0]["label"], "work");

    // `run` on a computer that is not paired says so and exits 2.
    let output = agent(home.path(), &["run"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not paired"));

    // Pairing again from the same installation is the same computer, with a new seal key.
    let first_fingerprint = capabilities.seal_key.fingerprint;
    let again = pair(&server.base, &web, home.path()).await;
    assert_eq!(again, device_id);
    let status = agent_json(home.path(), &["status", "--json"]).await;
    assert_eq!(status["installId"], install_id);
    assert_ne!(status["sealKeyFingerprint"], first_fingerprint.as_str());

    // `unpair` removes it on the server and forgets token and key, keeping the install id.
    let said = agent_ok(home.path(), &["unpair"]).await;
    assert!(said.contains("Unpaired test-box"), "{said}");
    assert!(!home.path().join("device-token").exists());
    assert!(!home.path().join("seal-key.json").exists());
    let device = web
        .wait_for_device(&device_id, |device| device.revoked_at.is_some())
        .await;
    assert!(!device.online);
    let status = agent_json(home.path(), &["status", "--json"]).await;
    assert_eq!(
        (status["paired"].clone(), status["installId"].clone()),
        (json!(false), install_id)
    );
}

struct Server {
    base: String,
    _data_dir: tempfile::TempDir,
}

/// The real server on a free port, with short timings so heartbeats and sweeps are quick.
async fn spawn_server(database_url: Option<String>) -> Server {
    spawn_server_with(database_url, |_| {}).await
}

/// Like [`spawn_server`], letting the test change the configuration first.
async fn spawn_server_with(
    database_url: Option<String>,
    tweak: impl FnOnce(&mut Config),
) -> Server {
    spawn_server_on(database_url, tweak, tether_server::Clock::system()).await
}

/// Like [`spawn_server`], reading every "now" from `clock`, which the test advances.
async fn spawn_server_with_clock(
    database_url: Option<String>,
    clock: tether_server::clock::ManualClock,
) -> Server {
    spawn_server_on(database_url, |_| {}, clock.into()).await
}

async fn spawn_server_on(
    database_url: Option<String>,
    tweak: impl FnOnce(&mut Config),
    clock: tether_server::Clock,
) -> Server {
    let data_dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(data_dir.path().to_path_buf());
    config.listen = "127.0.0.1:0".to_owned();
    config.database_url = database_url;
    config.http_workers = 1;
    config.db_max_connections = 4;
    config.heartbeat_secs = 1;
    config.online_secs = 5;
    config.lease_secs = 15;
    config.sweep_secs = 1;
    // The agent polls `register` at least once a second; no slow_down in tests.
    config.pairing_interval_secs = 0;
    tweak(&mut config);
    let app = Application::build_with_clock(config, clock).await.unwrap();
    let base = app.base_url();
    tokio::spawn(app.run_until_stopped());
    Server {
        base,
        _data_dir: data_dir,
    }
}

/// `tether-agent pair` as the person runs it, once it has printed its code and link.
struct PendingPairing {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    /// `XXXX-XXXX` as printed.
    code: String,
    /// The `/link?code=…` address as printed.
    link: String,
    printed: Vec<String>,
}

/// Starts `tether-agent pair BASE --name NAME` and reads until it has printed the code.
async fn start_pairing(base: &str, home: &Path, name: &str) -> PendingPairing {
    start_pairing_with(agent_command(home), base, name).await
}

/// Like [`start_pairing`], with `command` (an [`agent_command`] the test changed).
async fn start_pairing_with(mut command: Command, base: &str, name: &str) -> PendingPairing {
    let mut child = command
        .args(["pair", base, "--name", name])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let code = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("pair printed no code in time")
            .unwrap()
            .unwrap_or_else(|| panic!("pair ended before printing a code: {printed:?}"));
        printed.push(line.clone());
        if is_user_code(line.trim()) {
            break line.trim().to_owned();
        }
    };
    let link = printed
        .iter()
        .map(|line| line.trim())
        .find(|line| line.contains("/link?code="))
        .unwrap_or_else(|| panic!("no link printed: {printed:?}"))
        .to_owned();
    PendingPairing {
        child,
        stdout,
        code,
        link,
        printed,
    }
}

impl PendingPairing {
    /// Waits for `pair` to exit 0 saying "Paired as NAME".
    async fn wait_paired(&mut self, name: &str) {
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("pair did not finish: {:?}", self.printed))
            .unwrap();
        while let Ok(Some(line)) = self.stdout.next_line().await {
            self.printed.push(line);
        }
        assert!(status.success(), "pair failed: {:?}", self.printed);
        let expected = format!("Paired as {name}");
        assert!(self.printed.contains(&expected), "{:?}", self.printed);
    }
}

/// Pairs through the printed code, linking it as the web user. Returns the device id.
async fn pair(base: &str, web: &Web, home: &Path) -> String {
    let mut pending = start_pairing(base, home, "test-box").await;
    assert!(
        pending
            .link
            .ends_with(&format!("/link?code={}", pending.code)),
        "{}",
        pending.link
    );
    let res = web
        .post("/api/devices/link", &json!({ "userCode": pending.code }))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let linked: Value = res.json().await.unwrap();
    assert_eq!(linked["name"], "test-box");
    pending.wait_paired("test-box").await;
    linked["deviceId"].as_str().unwrap().to_owned()
}

fn is_user_code(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 9
        && bytes[4] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || b.is_ascii_uppercase())
}

#[cfg(unix)]
fn assert_token_is_private(home: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for name in ["device-token", "seal-key.json", "local.key", "config.json"] {
        let mode = std::fs::metadata(home.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{name}");
    }
}

fn agent_command(home: &Path) -> Command {
    let mut command = Command::new(AGENT);
    command
        .env("TETHER_AGENT_HOME", home)
        // Landlock, not bubblewrap: bubblewrap's PID namespace renumbers the pids recipes
        // print, which these tests compare with the host's. `confined.rs` runs both.
        .env("TETHER_SANDBOX", "landlock")
        .env_remove("TETHER_BWRAP")
        .env_remove("RUST_LOG")
        // The device token in its file, whatever keyring the test's computer has: the tests
        // look at the file, and leave nothing in a person's keyring. `lifetime.rs` tests the
        // keyring on a private session bus.
        .env("TETHER_TOKEN_STORE", "file")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn agent(home: &Path, args: &[&str]) -> std::process::Output {
    agent_command(home).args(args).output().await.unwrap()
}

async fn agent_ok(home: &Path, args: &[&str]) -> String {
    let output = agent(home, args).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{args:?}: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

async fn agent_json(home: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&agent_ok(home, args).await).unwrap()
}

/// `tether-agent run` in the background, its stderr collected.
struct Daemon {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Daemon {
    fn start(home: &Path) -> Daemon {
        Daemon::spawn(agent_command(home))
    }

    /// `command run`, its stdout and stderr collected.
    fn spawn(mut command: Command) -> Daemon {
        let mut child = command
            .args(["run"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        tokio::spawn(collect(child.stderr.take().unwrap(), stderr.clone()));
        tokio::spawn(collect(child.stdout.take().unwrap(), stderr.clone()));
        Daemon { child, stderr }
    }

    /// Sends `kill -SIGNAL` to the agent process.
    async fn signal(&self, signal: &str) {
        let pid = self.child.id().unwrap().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    async fn wait(&mut self, limit: Duration) -> Option<i32> {
        let status = tokio::time::timeout(limit, self.child.wait()).await;
        let status = status
            .unwrap_or_else(|_| panic!("run did not exit: {}", self.stderr()))
            .unwrap();
        // Let the collectors take the last lines.
        tokio::time::sleep(Duration::from_millis(200)).await;
        status.code()
    }
}

/// `tether-agent run` under the sandbox `backend`, its output collected.
fn start_daemon(home: &Path, backend: &str) -> Daemon {
    let mut command = agent_command(home);
    command.env("TETHER_SANDBOX", backend);
    Daemon::spawn(command)
}

/// Whether the sandbox `backend` works here; when it does not, says so (and fails under
/// `TETHER_REQUIRE_EXTERNAL=1`).
async fn backend_works(backend: &str) -> bool {
    let probe = agent_command(Path::new("/nonexistent-home"))
        .env("TETHER_SANDBOX", backend)
        .args(["sandbox", "status", "--json"])
        .output()
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&probe.stdout).unwrap();
    if report["backend"] == backend {
        return true;
    }
    external::unavailable(&format!(
        "the {backend} backend does not work here: {report}"
    ));
    false
}

/// Seals `value` as `name` for the device's pinned key, as the browser does (limited to
/// `allow` when given), and waits until the agent saved it.
async fn save_secret(
    web: &Web,
    home: &Path,
    device_id: &str,
    seal_key: &tether_protocol::capabilities::SealKey,
    (name, value): (&str, &str),
    allow: Option<&[&str]>,
) {
    use tether_seal::{self as seal, Aad, Jti, Recipient};
    let recipient = Recipient::from_seal_key(seal_key).unwrap();
    let device = tether_protocol::DeviceId::parse(device_id).unwrap();
    let mut aad = Aad::secret(
        device.clone(),
        recipient.kid().clone(),
        None,
        name.to_owned(),
        chrono::Utc::now().timestamp() + 300,
        Jti::random(&mut rand::thread_rng()),
    );
    let allow: Option<Vec<String>> =
        allow.map(|sites| sites.iter().map(|s| (*s).to_owned()).collect());
    aad.allow.clone_from(&allow);
    let envelope = seal::seal(
        &recipient,
        &device,
        &aad.to_bytes(),
        value.as_bytes(),
        &mut rand::thread_rng(),
    )
    .unwrap();
    let body = json!({ "name": name, "sealed": envelope, "allow": allow });
    let res = web
        .post(&format!("/api/devices/{device_id}/secrets"), &body)
        .await;
    assert_eq!(
        res.status(),
        StatusCode::ACCEPTED,
        "{}",
        res.text().await.unwrap()
    );
    for _ in 0..120 {
        if agent_ok(home, &["secrets", "list"])
            .await
            .lines()
            .any(|line| line.split('\t').next() == Some(name))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the agent never saved the secret {name}");
}

async fn collect(pipe: impl AsyncRead + Unpin, into: Arc<Mutex<String>>) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut text = into.lock().unwrap();
        text.push_str(&line);
        text.push('\n');
    }
}

/// The web user, through an API token (so no CSRF header is needed).
struct Web {
    base: String,
    http: reqwest::Client,
    token: String,
}

impl Web {
    async fn sign_up(base: &str) -> Web {
        Web::sign_up_as(base, "owner@example.com").await
    }

    /// Signs `email` up and makes it an API token.
    async fn sign_up_as(base: &str, email: &str) -> Web {
        let browser = reqwest::Client::builder()
            .cookie_store(true)
            .build()
            .unwrap();
        let res = browser
            .post(format!("{base}/api/auth/signup"))
            .json(&json!({ "email": email, "password": "correct horse battery", "name": "Owner" }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let csrf = res
            .headers()
            .get("x-tether-csrf")
            .map(|value| value.to_str().unwrap().to_owned());
        let mut request = browser
            .post(format!("{base}/api/tokens"))
            .json(&json!({ "name": "e2e" }));
        if let Some(csrf) = csrf {
            request = request.header("x-tether-csrf", csrf);
        }
        let res = request.send().await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let created: Value = res.json().await.unwrap();
        Web {
            base: base.to_owned(),
            http: reqwest::Client::new(),
            token: created["token"].as_str().unwrap().to_owned(),
        }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        request.json(body).send().await.unwrap()
    }

    async fn delete(&self, path: &str) -> reqwest::Response {
        self.http
            .delete(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    async fn create_job(&self, device_id: &str, engine: &str, prompt: &str) -> Job {
        self.create_job_in(device_id, engine, prompt, "work").await
    }

    /// Like [`Web::create_job`], in the shared folder `folder`.
    async fn create_job_in(
        &self,
        device_id: &str,
        engine: &str,
        prompt: &str,
        folder: &str,
    ) -> Job {
        let body = json!({
            "deviceId": device_id, "title": format!("run {engine}"), "prompt": prompt,
            "folder": folder, "engine": engine, "mode": "unattended", "network": false,
            "timeoutMinutes": 5,
        });
        let res = self.post("/api/jobs", &body).await;
        let status = res.status();
        let text = res.text().await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{text}");
        serde_json::from_str(&text).unwrap()
    }

    async fn job(&self, job_id: &str) -> Job {
        let res = self.get(&format!("/api/jobs/{job_id}")).await;
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }

    /// Polls the job until it ended (any final state), failing past `limit`.
    async fn wait_until_ended(&self, job_id: &str, limit: Duration) -> Job {
        self.wait_for_job(job_id, limit, |job| job.state.is_final())
            .await
    }

    async fn wait_for_job(
        &self,
        job_id: &str,
        limit: Duration,
        done: impl Fn(&Job) -> bool,
    ) -> Job {
        let deadline = Instant::now() + limit;
        loop {
            let job = self.job(job_id).await;
            if done(&job) {
                return job;
            }
            assert!(Instant::now() < deadline, "job never got there: {job:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the device is online and publishes every engine of `names`.
    async fn wait_for_engines(&self, device_id: &str, names: &[&str]) -> Device {
        self.wait_for_device(device_id, |device| {
            device.online
                && device.capabilities.as_ref().is_some_and(|caps| {
                    names
                        .iter()
                        .all(|name| caps.engines.iter().any(|engine| engine.name == *name))
                })
        })
        .await
    }

    async fn wait_for_device(&self, device_id: &str, ready: impl Fn(&Device) -> bool) -> Device {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let res = self.get("/api/devices").await;
            assert_eq!(res.status(), StatusCode::OK);
            let devices: Vec<Device> = res.json().await.unwrap();
            let device = devices
                .into_iter()
                .find(|device| device.id.as_str() == device_id)
                .unwrap();
            if ready(&device) {
                return device;
            }
            assert!(
                Instant::now() < deadline,
                "device never got ready: {device:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Starts the `sleepy` recipe on `device_id` and waits for the pid of the child it says it
/// started: `(job id, pid)`.
async fn sleepy_child(web: &Web, device_id: &str) -> (String, u32) {
    let job = web.create_job(device_id, "sleepy", "sleep").await;
    let job_id = job.id.to_string();
    let job = web
        .wait_for_job(&job_id, Duration::from_secs(60), |job| {
            output_lines(job)
                .iter()
                .any(|line| line.starts_with("child "))
        })
        .await;
    let child = output_lines(&job)
        .iter()
        .find_map(|line| line.strip_prefix("child "))
        .and_then(|pid| pid.parse().ok())
        .unwrap();
    (job_id, child)
}

fn output_lines(job: &Job) -> Vec<String> {
    job.events
        .iter()
        .filter(|event| event.kind == "output")
        .map(|event| event.text.clone())
        .collect()
}

/// Alive and not a zombie waiting to be reaped.
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn wait_until(limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
