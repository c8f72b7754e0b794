//! A computer's pairing over the agent's life, with the real binary and server: a packaged
//! agent whose program is removed unpairs itself (after its grace, also with the server out
//! of reach, and not when the program comes back in time), and the device token rests in
//! the OS keyring, here GNOME Keyring on a private session bus.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::proxy::Proxy;
use super::*;

const UNINSTALLED_MESSAGE: &str = "The agent was uninstalled (its program stayed missing), so this computer left its server and forgot its pairing";
const NOT_TOLD: &str = "The server could not be reached: remove this computer on the web too.";
/// `exit_code::UNINSTALLED`.
const UNINSTALLED_CODE: i32 = 4;

/// A copy of the agent's binary where a package would have installed it.
struct Installed {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Installed {
    fn new() -> Installed {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tether-agent");
        std::fs::copy(AGENT, &path).unwrap();
        Installed { _dir: dir, path }
    }

    fn remove(&self) {
        std::fs::remove_file(&self.path).unwrap();
    }

    fn restore(&self) {
        std::fs::copy(AGENT, &self.path).unwrap();
    }

    /// `tether-agent run` as the package's launcher starts it, with a short grace.
    fn daemon(&self, home: &Path, grace_secs: u32) -> Daemon {
        let mut command = agent_command(home);
        command
            .env("TETHER_INSTALL_PATH", &self.path)
            .env("TETHER_UNINSTALL_GRACE_SECS", grace_secs.to_string());
        Daemon::spawn(command)
    }
}

fn token_files_gone(home: &Path) {
    for name in ["device-token", "seal-key.json"] {
        assert!(!home.join(name).exists(), "{name} is still there");
    }
}

/// Uninstalled mid-run: once the program stayed missing for the grace, the run is killed,
/// the server revokes the computer (its job ends `interrupted`), the token and seal key are
/// gone and `run` exits 4; the install id, folders and recipes stay for a later pairing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstalled_agent_removes_itself_from_its_server() {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let install_id = agent_json(home.path(), &["status", "--json"]).await["installId"].clone();
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
    let installed = Installed::new();
    let mut daemon = installed.daemon(home.path(), 3);
    web.wait_for_engines(&device_id, &["sleepy"]).await;

    let (job_id, child) = sleepy_child(&web, &device_id).await;

    installed.remove();
    let removed = Instant::now();
    let code = daemon.wait(Duration::from_secs(60)).await;
    let stderr = daemon.stderr();
    assert_eq!(code, Some(UNINSTALLED_CODE), "{stderr}");
    assert!(
        removed.elapsed() >= Duration::from_secs(3),
        "unpaired before the grace ran out\n{stderr}"
    );
    assert!(stderr.contains("is missing"), "{stderr}");
    assert!(stderr.contains(UNINSTALLED_MESSAGE), "{stderr}");
    assert!(!stderr.contains(NOT_TOLD), "{stderr}");
    eprintln!("--- tether-agent run said:\n{stderr}");

    let device = web
        .wait_for_device(&device_id, |device| device.revoked_at.is_some())
        .await;
    assert!(!device.online);
    let job = web.wait_until_ended(&job_id, Duration::from_secs(30)).await;
    assert_eq!(job.state, JobState::Interrupted, "{job:#?}");
    wait_until(Duration::from_secs(5), || !process_alive(child)).await;
    assert!(!process_alive(child), "the run's child {child} survived");

    token_files_gone(home.path());
    let status = agent_json(home.path(), &["status", "--json"]).await;
    assert_eq!(status["paired"], false);
    assert_eq!(status["tokenStore"], Value::Null);
    assert_eq!(status["installId"], install_id);
    assert_eq!(status["folders"][0]["label"], "work");
    assert_eq!(status["recipes"][0]["name"], "sleepy");
}

/// A program missing for less than the grace (an upgrade swapping it) changes nothing: the
/// daemon says so, keeps running, and the computer stays paired and online.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_back_within_its_grace_stays_paired() {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let installed = Installed::new();
    let mut daemon = installed.daemon(home.path(), 4);
    web.wait_for_device(&device_id, |device| device.online)
        .await;

    installed.remove();
    let removed = Instant::now();
    let deadline = removed + Duration::from_secs(30);
    while !daemon.stderr().contains("is missing") {
        assert!(Instant::now() < deadline, "{}", daemon.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    installed.restore();
    while !daemon.stderr().contains("is back") {
        assert!(Instant::now() < deadline, "{}", daemon.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Well past the grace from the first missing look.
    tokio::time::sleep(
        (removed + Duration::from_secs(7)).saturating_duration_since(Instant::now()),
    )
    .await;

    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "{}",
        daemon.stderr()
    );
    assert!(!daemon.stderr().contains(UNINSTALLED_MESSAGE));
    let device = web
        .wait_for_device(&device_id, |device| device.online)
        .await;
    assert!(device.revoked_at.is_none());
    assert!(home.path().join("device-token").exists());
    assert_eq!(
        agent_json(home.path(), &["status", "--json"]).await["paired"],
        true
    );

    daemon.signal("TERM").await;
    assert_eq!(daemon.wait(Duration::from_secs(30)).await, Some(0));
}

/// Uninstalled while the server is out of reach: the pairing is forgotten on this computer
/// all the same, and `run` says the computer must be removed on the web too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstalled_agent_cut_off_from_its_server_still_forgets_its_pairing() {
    let server = spawn_server(None).await;
    let proxy = Proxy::start(&server.base).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&proxy.base, &web, home.path()).await;
    let install_id = agent_json(home.path(), &["status", "--json"]).await["installId"].clone();
    let installed = Installed::new();
    let mut daemon = installed.daemon(home.path(), 2);
    web.wait_for_device(&device_id, |device| device.online)
        .await;

    proxy.cut();
    installed.remove();
    let code = daemon.wait(Duration::from_secs(60)).await;
    let stderr = daemon.stderr();
    assert_eq!(code, Some(UNINSTALLED_CODE), "{stderr}");
    assert!(stderr.contains(UNINSTALLED_MESSAGE), "{stderr}");
    assert!(stderr.contains(NOT_TOLD), "{stderr}");
    eprintln!("--- tether-agent run said:\n{stderr}");

    token_files_gone(home.path());
    let status = agent_json(home.path(), &["status", "--json"]).await;
    assert_eq!(status["paired"], false);
    assert_eq!(status["installId"], install_id);
    // The server never heard of it: the owner removes the computer on the web.
    let device = web
        .wait_for_device(&device_id, |device| !device.online)
        .await;
    assert!(device.revoked_at.is_none());
}

/// With `TETHER_TOKEN_STORE=keyring` and no keyring to reach, pairing still keeps the token
/// (in its file) and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyring_out_of_reach_keeps_the_token_in_its_file() {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let nobody = tempfile::tempdir().unwrap();
    let dead_bus = format!("unix:path={}", nobody.path().join("bus").display());
    let command = |home: &Path| {
        let mut command = agent_command(home);
        command
            .env("TETHER_TOKEN_STORE", "keyring")
            .env("DBUS_SESSION_BUS_ADDRESS", &dead_bus);
        command
    };
    let (device_id, said) = pair_with(command(home.path()), &server.base, &web).await;
    assert!(
        said.contains("cannot keep the device token in the keyring"),
        "{said}"
    );
    let status = command(home.path())
        .args(["status", "--json"])
        .output()
        .await
        .unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (status["paired"].clone(), status["tokenStore"].clone()),
        (json!(true), json!("file"))
    );
    assert_token_is_private(home.path());
    assert_eq!(status["deviceId"], device_id.as_str());
}

/// With a Secret Service on the session bus the token rests there and nowhere else: `status`
/// says `keyring`, no `device-token` file exists, `secret-tool` finds it under the data dir,
/// the daemon heartbeats with it, and `unpair` takes it out. `TETHER_TOKEN_STORE=file` never
/// looks there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_token_rests_in_the_keyring() {
    let Some(keyring) = SecretService::start().await else {
        return;
    };
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let user = home.path().canonicalize().unwrap();
    let user = user.to_str().unwrap();
    let command = |home: &Path| {
        let mut command = agent_command(home);
        command
            .env("TETHER_TOKEN_STORE", "auto")
            .env("DBUS_SESSION_BUS_ADDRESS", &keyring.address);
        command
    };
    let json_of = |output: std::process::Output| -> Value {
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    };

    let (device_id, said) = pair_with(command(home.path()), &server.base, &web).await;
    assert!(!said.contains("keyring"), "{said}");
    let status = json_of(
        command(home.path())
            .args(["status", "--json"])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(
        (status["paired"].clone(), status["tokenStore"].clone()),
        (json!(true), json!("keyring"))
    );
    assert!(!home.path().join("device-token").exists());
    let token = keyring.lookup(user).await.expect("no token in the keyring");
    assert!(token.starts_with("tdt_"), "{token}");
    let text = command(home.path()).arg("status").output().await.unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Device token: in the keyring (service tether-agent)"),
        "{text}"
    );
    // The file store does not look in the keyring.
    let in_file = agent_json(home.path(), &["status", "--json"]).await;
    assert_eq!(
        (in_file["paired"].clone(), in_file["tokenStore"].clone()),
        (json!(false), Value::Null)
    );

    // The daemon authenticates with the token from the keyring.
    let mut daemon = Daemon::spawn(command(home.path()));
    web.wait_for_device(&device_id, |device| device.online)
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemon.stderr().contains("event stream connected") {
        assert!(Instant::now() < deadline, "{}", daemon.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.signal("TERM").await;
    assert_eq!(daemon.wait(Duration::from_secs(30)).await, Some(0));

    let unpaired = command(home.path()).arg("unpair").output().await.unwrap();
    let said = String::from_utf8_lossy(&unpaired.stdout);
    assert!(
        unpaired.status.success() && said.contains("Unpaired test-box"),
        "{unpaired:?}"
    );
    assert_eq!(keyring.lookup(user).await, None);
    assert!(!home.path().join("device-token").exists());
    web.wait_for_device(&device_id, |device| device.revoked_at.is_some())
        .await;
    let status = json_of(
        command(home.path())
            .args(["status", "--json"])
            .output()
            .await
            .unwrap(),
    );
    assert_eq!(
        (status["paired"].clone(), status["tokenStore"].clone()),
        (json!(false), Value::Null)
    );
}

/// Pairs through the printed code with `command`; the device id and what `pair` said on
/// stderr.
async fn pair_with(command: Command, base: &str, web: &Web) -> (String, String) {
    let mut pending = start_pairing_with(command, base, "test-box").await;
    let res = web
        .post("/api/devices/link", &json!({ "userCode": pending.code }))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let linked: Value = res.json().await.unwrap();
    pending.wait_paired("test-box").await;
    let mut said = String::new();
    if let Some(mut stderr) = pending.child.stderr.take() {
        stderr.read_to_string(&mut said).await.unwrap();
    }
    (linked["deviceId"].as_str().unwrap().to_owned(), said)
}

/// GNOME Keyring serving the Secret Service, unlocked, on a session bus of its own, with a
/// home of its own: nothing of the computer's own keyring is touched. Both processes end
/// with it.
struct SecretService {
    /// The bus, for `DBUS_SESSION_BUS_ADDRESS`.
    address: String,
    // Dropped in this order: the processes, then their folder.
    _keyring: Child,
    _bus: Child,
    dir: tempfile::TempDir,
}

impl SecretService {
    /// `None` (after saying why) when the programs are not installed; under
    /// `TETHER_REQUIRE_EXTERNAL=1` that fails instead.
    async fn start() -> Option<SecretService> {
        let missing: Vec<&str> = [
            "dbus-daemon",
            "dbus-send",
            "gnome-keyring-daemon",
            "secret-tool",
        ]
        .into_iter()
        .filter(|program| !on_path(program))
        .collect();
        if !missing.is_empty() {
            external::unavailable(&format!(
                "{} not installed (Debian: gnome-keyring dbus-x11 libsecret-tools)",
                missing.join(", ")
            ));
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        for sub in ["home", "run"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let socket = dir.path().join("run/bus");
        let mut bus = SecretService::isolated(dir.path(), "dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
            .arg(format!("--address=unix:path={}", socket.display()))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(bus.stdout.take().unwrap()).lines();
        let address = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
            .await
            .expect("dbus-daemon printed no address")
            .unwrap()
            .expect("dbus-daemon ended");
        let mut keyring = SecretService::isolated(dir.path(), "gnome-keyring-daemon")
            .args(["--foreground", "--unlock", "--components=secrets"])
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        // The new login keyring's password; closing stdin ends it.
        let mut stdin = keyring.stdin.take().unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stdin, b"tether-test")
            .await
            .unwrap();
        drop(stdin);
        let service = SecretService {
            address,
            dir,
            _bus: bus,
            _keyring: keyring,
        };
        service.wait_until_served().await;
        Some(service)
    }

    /// `program` with this keyring's home, runtime dir and bus, and nothing of the test's.
    fn isolated(dir: &Path, program: &str) -> Command {
        let home = dir.join("home");
        let mut command = Command::new(program);
        command
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", dir.join("run"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        command
    }

    fn command(&self, program: &str) -> Command {
        let mut command = SecretService::isolated(self.dir.path(), program);
        command.env("DBUS_SESSION_BUS_ADDRESS", &self.address);
        command
    }

    /// Until GNOME Keyring owns `org.freedesktop.secrets` (asked before, the bus would start
    /// another, locked one).
    async fn wait_until_served(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let asked = self
                .command("dbus-send")
                .args([
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner",
                    "string:org.freedesktop.secrets",
                ])
                .stdout(Stdio::piped())
                .output()
                .await
                .unwrap();
            if String::from_utf8_lossy(&asked.stdout).contains("boolean true") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "GNOME Keyring never served the Secret Service"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The agent's token for the data dir `user`, as `secret-tool` finds it.
    async fn lookup(&self, user: &str) -> Option<String> {
        let found = self
            .command("secret-tool")
            .args(["lookup", "service", "tether-agent", "username", user])
            .stdout(Stdio::piped())
            .output()
            .await
            .unwrap();
        let token = String::from_utf8_lossy(&found.stdout).trim().to_owned();
        (found.status.success() && !token.is_empty()).then_some(token)
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
