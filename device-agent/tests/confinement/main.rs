//! The live escape-test suite: every attempt of `../shared/research/confinement.md` §3, run
//! under `bwrap` and again under `landlock`, through the same layer jobs use
//! (`Sandbox::prepare` + `engines::recipe::supervise`, with the real `tether-agent` as the
//! launcher).
//!
//! Each test checks the HOST after the attempt (files, listeners, processes), never only an
//! exit code: a write that "succeeded" into a private tmpfs left the host untouched, and a
//! refused one that left a file behind did not.
//!
//! The attempts that hold whatever the network (files, processes, the terminal) run a third
//! time per backend through the owner's console's terminal (`console::terminal::run`: the
//! console's own sandbox policy, network on, on a pseudo-terminal), with the same outcomes
//! asserted (`console_bwrap`, `console_landlock`).
//!
//! A backend that does not work on this machine skips its tests with a message, unless
//! `TETHER_REQUIRE_EXTERNAL=1`, which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../../server/tests/support/external.rs"]
mod external;

use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use tether_agent::console::terminal;
use tether_agent::engines::recipe::{supervise, Ended};
use tether_agent::local::origins::Origin;
use tether_agent::policy::guard::Guard;
use tether_agent::policy::hard_floor;
use tether_agent::run::environment;
use tether_agent::run::model_network::ModelNetwork;
use tether_agent::run::{RunStop, StopReason};
use tether_agent::sandbox;
use tether_agent::sandbox::{Forward, Input, Policy, Sandbox, Settings, Start};
use tether_protocol::console::ConsoleReply;
use tokio::sync::mpsc;

const AGENT: &str = env!("CARGO_BIN_EXE_tether-agent");
const SECRET: &str = "TETHER-SECRET-6f1d0c";

/// The sandbox for `choice`, or `None` (with a message) when it does not work here.
fn sandbox_for(choice: &str) -> Option<Sandbox> {
    let sandbox = Sandbox::probe(&Settings {
        choice: choice.to_owned(),
        bwrap: PathBuf::from("/usr/bin/bwrap"),
        launcher: PathBuf::from(AGENT),
        allow_unsandboxed: false,
    });
    if sandbox.report().backend == choice {
        return Some(sandbox);
    }
    let why = sandbox.report().reasons.join("; ");
    external::unavailable(&format!("the {choice} backend does not work here: {why}"));
    None
}

/// A fake user: a home with keys and sign-ins, the agent's data dir, a shared work folder with
/// a git repository, and a folder outside everything.
struct Fixture {
    /// `None` once dropped. Never deleted while anything is mounted below it: a sandbox that
    /// failed open could have bind-mounted a host folder there, and deleting the fixture would
    /// then delete the host's files through the mount.
    tmp: Option<tempfile::TempDir>,
    root: PathBuf,
    home: PathBuf,
    work: PathBuf,
    outside: PathBuf,
    data_dir: PathBuf,
    guard: Guard,
    /// Unique per fixture, for host-side markers (files in /etc, process command lines).
    id: String,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let home = root.join("home");
        let work = home.join("projects/app");
        let outside = root.join("outside");
        let data_dir = home.join(".local/share/tether-agent");
        for dir in [
            work.join(".git/hooks"),
            work.join("vendor/lib/.git/hooks"),
            work.join("src"),
            home.join(".ssh"),
            home.join(".aws"),
            data_dir.clone(),
            outside.clone(),
        ] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let secret = |path: PathBuf| std::fs::write(path, format!("{SECRET}\n")).unwrap();
        secret(home.join(".ssh/id_ed25519"));
        secret(home.join(".aws/credentials"));
        secret(home.join(".bashrc"));
        secret(data_dir.join("seal-key.json"));
        secret(data_dir.join("local.key"));
        secret(data_dir.join("device-token"));
        std::fs::write(work.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(work.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        std::fs::write(work.join("vendor/lib/.git/config"), "[core]\n").unwrap();
        std::fs::write(work.join("src/main.rs"), "fn main() {}\n").unwrap();
        let guard = Guard::new(Some(home.clone()), &data_dir);
        let id = format!("{:08x}", rand_id());
        Fixture {
            tmp: Some(tmp),
            root,
            home,
            work,
            outside,
            data_dir,
            guard,
            id,
        }
    }

    fn policy(&self, network: bool) -> Policy {
        let mut env = environment::scrub(std::env::vars_os());
        env.retain(|(name, _)| name != "HOME" && name != "PATH");
        env.push(("HOME".into(), self.home.display().to_string()));
        env.push((
            "PATH".into(),
            "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into(),
        ));
        env.push(("W".into(), self.work.display().to_string()));
        env.push(("OUT".into(), self.outside.display().to_string()));
        env.push(("ID".into(), self.id.clone()));
        Policy {
            work_folder: self.work.clone(),
            writable: Vec::new(),
            readable: Vec::new(),
            denied: Vec::new(),
            network,
            env,
        }
    }

    /// Every file in the work folder and every output line that holds the secret.
    fn leaks(&self, run: &Run) -> Vec<String> {
        let mut found: Vec<String> = run
            .lines
            .iter()
            .filter(|line| line.contains(SECRET))
            .cloned()
            .collect();
        walk(&self.work, &mut |path| {
            if std::fs::read(path)
                .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(SECRET))
            {
                found.push(path.display().to_string());
            }
        });
        found
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Markers an escape would have left in /etc (each test asserts they are absent).
        for kind in ["escape", "link", "made", "su", "ns"] {
            let _ = std::fs::remove_file(format!("/etc/tether-{kind}-{}", self.id));
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let root = self.root.display().to_string();
        let mounted = mounts.lines().any(|line| {
            line.split(' ')
                .nth(1)
                .is_some_and(|at| at.starts_with(&root))
        });
        if let Some(tmp) = self.tmp.take() {
            if mounted {
                eprintln!("something is mounted under {root}: leaving it in place instead of deleting through the mount");
                std::mem::forget(tmp);
            }
        }
    }
}

fn rand_id() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => walk(&path, visit),
            Ok(kind) if kind.is_file() => visit(&path),
            _ => {}
        }
    }
}

struct Run {
    ended: Ended,
    lines: Vec<String>,
}

impl Run {
    fn said(&self) -> String {
        format!("{:?}\n{}", self.ended, self.lines.join("\n"))
    }
}

/// Runs `script` with bash under `sandbox`, as the recipe engine runs a recipe.
async fn run_with(
    sandbox: &Sandbox,
    fx: &Fixture,
    policy: &Policy,
    script: &str,
    timeout: Duration,
    stop: RunStop,
) -> Run {
    run_forwarded(sandbox, fx, policy, &[], script, timeout, stop).await
}

/// [`run_with`], with loopback ports forwarded to Unix sockets outside.
async fn run_forwarded(
    sandbox: &Sandbox,
    fx: &Fixture,
    policy: &Policy,
    forwards: &[Forward],
    script: &str,
    timeout: Duration,
    stop: RunStop,
) -> Run {
    if THROUGH_CONSOLE.try_with(|on| *on).unwrap_or(false) && forwards.is_empty() {
        return run_in_console(sandbox, fx, policy, script, timeout).await;
    }
    let argv = vec!["/bin/bash".to_owned(), "-c".to_owned(), script.to_owned()];
    let mut prepared = sandbox
        .prepare_forwarded(&fx.guard, policy, &Start::new(&argv), forwards)
        .unwrap();
    let command = std::mem::replace(&mut prepared.command, tokio::process::Command::new("true"));
    let (sender, mut receiver) = mpsc::channel(1024);
    let collector = tokio::spawn(async move {
        let mut lines = Vec::new();
        while let Some(line) = receiver.recv().await {
            lines.push(line);
        }
        lines
    });
    // The run's own limit ends it; this one only keeps a supervisor that never returns from
    // hanging the suite.
    let ended = tokio::time::timeout(
        timeout + Duration::from_secs(60),
        supervise(command, timeout, &stop, sender, |_| {}),
    )
    .await
    .expect("the supervisor outlived the run's limit by a minute");
    let mut lines = collector.await.unwrap();
    lines.extend(prepared.finish());
    Run { ended, lines }
}

tokio::task_local! {
    /// Whether the attempt runs through the console's terminal.
    static THROUGH_CONSOLE: bool;
}

/// Runs `script` as the console runs a line a person confirmed: `terminal::run` in the work
/// folder on a pseudo-terminal, with the console's own sandbox policy; the attempt's
/// variables (`HOME`, `PATH`, `W`, `OUT`, `ID`) exported first, as a person could type them.
async fn run_in_console(
    sandbox: &Sandbox,
    fx: &Fixture,
    policy: &Policy,
    script: &str,
    timeout: Duration,
) -> Run {
    let exports: String = policy
        .env
        .iter()
        .filter(|(name, _)| ["HOME", "PATH", "W", "OUT", "ID"].contains(&name.as_str()))
        .map(|(name, value)| format!("export {name}={}; ", shell_quote(value)))
        .collect();
    let approved = terminal::Approved {
        argv: vec![
            "/bin/bash".to_owned(),
            "-c".to_owned(),
            format!("{exports}\n{script}"),
        ],
        folder: fx.work.clone(),
        label: "work".to_owned(),
        program: "bash".to_owned(),
    };
    let (output, mut printed) = mpsc::channel(1024);
    let collector = tokio::spawn(async move {
        let mut bytes = Vec::new();
        while let Some(reply) = printed.recv().await {
            if let ConsoleReply::Output { data, .. } = reply {
                bytes.extend(STANDARD.decode(data).unwrap());
            }
        }
        bytes
    });
    let limits = terminal::Limits {
        time: timeout,
        output: terminal::Limits::DEFAULT.output,
    };
    let kill = Arc::new(tokio::sync::Notify::new());
    let exit = tokio::time::timeout(
        timeout + Duration::from_secs(60),
        terminal::run(
            sandbox,
            &fx.guard,
            &approved,
            1,
            (120, 40),
            limits,
            kill,
            output,
        ),
    )
    .await
    .expect("the console's command outlived its limit by a minute");
    let bytes = collector.await.unwrap();
    let lines = String::from_utf8_lossy(&bytes)
        .split('\n')
        .map(|line| line.trim_end_matches('\r').to_owned())
        .filter(|line| !line.is_empty())
        .collect();
    let ended = match exit {
        ConsoleReply::Exit {
            timed_out: true, ..
        } => Ended::TimedOut,
        ConsoleReply::Exit {
            interrupted: true, ..
        } => Ended::Stopped(StopReason::Cancel),
        ConsoleReply::Exit {
            code: Some(code), ..
        } => Ended::Exited(std::os::unix::process::ExitStatusExt::from_raw(code << 8)),
        ConsoleReply::Exit { code: None, .. } => Ended::Exited(
            std::os::unix::process::ExitStatusExt::from_raw(libc_sigkill()),
        ),
        other => Ended::SpawnFailed(format!("{other:?}")),
    };
    Run { ended, lines }
}

/// A status killed by SIGKILL, as `from_raw` takes it.
fn libc_sigkill() -> i32 {
    9
}

async fn run(sandbox: &Sandbox, fx: &Fixture, script: &str) -> Run {
    run_with(
        sandbox,
        fx,
        &fx.policy(false),
        script,
        Duration::from_secs(30),
        RunStop::new(),
    )
    .await
}

/// A loopback TCP listener on the host that counts connections.
fn tcp_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stream.is_ok() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (port, count)
}

/// A Unix listener (pathname or abstract) on the host that counts connections.
fn unix_listener(listener: UnixListener) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stream.is_ok() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    count
}

/// Host processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

async fn no_process_with(marker: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = processes_with(marker);
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------
// The attempts. Each takes the backend's name; the macro at the end runs each under both.
// ---------------------------------------------------------------------------------------

/// Attempt 1: Writes to /etc and to the home folder fail, and the host files are unchanged.
async fn t01_write_system_and_home(sandbox: Sandbox) {
    let fx = Fixture::new();
    let etc = PathBuf::from(format!("/etc/tether-escape-{}", fx.id));
    let script = format!(
        "echo pwned > {etc}; echo pwned > \"$HOME/x\"; echo pwned >> \"$HOME/.bashrc\"; echo pwned > \"$OUT/x\"; echo done",
        etc = etc.display()
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(!etc.exists(), "{} was written", etc.display());
    assert!(!fx.home.join("x").exists());
    assert!(!fx.outside.join("x").exists());
    assert_eq!(
        std::fs::read_to_string(fx.home.join(".bashrc")).unwrap(),
        format!("{SECRET}\n")
    );
}

/// Attempt 2: Writes in the work folder succeed and are visible on the host.
async fn t02_write_work_folder(sandbox: Sandbox) {
    let fx = Fixture::new();
    let run = run(&sandbox, &fx, "echo made > \"$W/made.txt\" && mkdir -p \"$W/new/dir\" && echo ok > \"$W/new/dir/f\" && rm \"$W/src/main.rs\"").await;
    assert!(
        matches!(run.ended, Ended::Exited(status) if status.success()),
        "{}",
        run.said()
    );
    assert_eq!(
        std::fs::read_to_string(fx.work.join("made.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(fx.work.join("new/dir/f")).unwrap(),
        "ok\n"
    );
    assert!(!fx.work.join("src/main.rs").exists());
}

/// Attempt 3: Keys, cloud credentials, the agent's key files and data dir cannot be read.
async fn t03_read_keys(sandbox: Sandbox) {
    let fx = Fixture::new();
    let data = fx.data_dir.display();
    let script = format!(
        "cat \"$HOME/.ssh/id_ed25519\"; cat \"$HOME/.aws/credentials\"; cat {data}/seal-key.json {data}/local.key {data}/device-token; ls {data}; \
         cat \"$HOME/.ssh/id_ed25519\" > \"$W/leak1\"; cp -r \"$HOME/.ssh\" \"$W/leak2\"; tar cf \"$W/leak3.tar\" \"$HOME\"; echo done"
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(
        fx.leaks(&run).is_empty(),
        "leaked: {:?}\n{}",
        fx.leaks(&run),
        run.said()
    );
    assert!(
        !run.lines
            .iter()
            .any(|line| line.contains("seal-key.json") && !line.contains(':')),
        "{}",
        run.said()
    );
}

/// Attempt 4: Links in the work folder (made inside or planted before) do not reach outside.
async fn t04_symlinks(sandbox: Sandbox) {
    let fx = Fixture::new();
    std::os::unix::fs::symlink(fx.home.join(".ssh/id_ed25519"), fx.work.join("planted")).unwrap();
    let etc = format!("/etc/tether-link-{}", fx.id);
    std::os::unix::fs::symlink(&etc, fx.work.join("planted-etc")).unwrap();
    let script = "ln -s \"$HOME/.ssh/id_ed25519\" \"$W/made\"; cat \"$W/made\" > \"$W/out1\"; cat \"$W/planted\" > \"$W/out2\"; \
         echo pwned > \"$W/planted-etc\"; ln -s /etc/tether-made-$ID \"$W/made-etc\"; echo pwned > \"$W/made-etc\"; echo done";
    let run = run(&sandbox, &fx, script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(fx.leaks(&run).is_empty(), "leaked: {:?}", fx.leaks(&run));
    assert!(!Path::new(&etc).exists());
    assert!(!PathBuf::from(format!("/etc/tether-made-{}", fx.id)).exists());
}

/// Attempt 5: A protected file cannot be hard-linked into the work folder.
async fn t05_hardlink(sandbox: Sandbox) {
    let fx = Fixture::new();
    let run = run(
        &sandbox,
        &fx,
        "ln \"$HOME/.ssh/id_ed25519\" \"$W/hl\"; ln /etc/passwd \"$W/pw\"; echo done",
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(!fx.work.join("hl").exists(), "hard link made");
    // A link to a system file would let a later write change it.
    if let Ok(meta) = std::fs::metadata(fx.work.join("pw")) {
        use std::os::unix::fs::MetadataExt;
        assert_ne!(
            meta.ino(),
            std::fs::metadata("/etc/passwd").unwrap().ino(),
            "hard link to /etc/passwd"
        );
    }
}

/// Attempt 6: Protected folders and their ancestors cannot be renamed; nothing moves out of the work
/// folder.
async fn t06_rename(sandbox: Sandbox) {
    let fx = Fixture::new();
    let run = run(
        &sandbox,
        &fx,
        "mv \"$HOME/.ssh\" \"$HOME/.ssh2\"; mv \"$HOME\" \"$HOME-moved\"; mv \"$W/src/main.rs\" \"$OUT/main.rs\"; mv \"$W\" \"$OUT/app\"; echo done",
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(fx.home.join(".ssh/id_ed25519").exists());
    assert!(!fx.home.join(".ssh2").exists());
    assert!(fx.work.join("src/main.rs").exists());
    assert!(!fx.outside.join("main.rs").exists() && !fx.outside.join("app").exists());
}

/// Attempt 7: Git hooks and config (top-level and nested repositories) stay as they were.
async fn t07_git_hooks(sandbox: Sandbox) {
    let fx = Fixture::new();
    let run = run(
        &sandbox,
        &fx,
        "echo evil > \"$W/.git/hooks/pre-commit\"; chmod +x \"$W/.git/hooks/pre-commit\"; \
         printf '[core]\\n\\tfsmonitor = evil\\n' >> \"$W/.git/config\"; \
         echo evil > \"$W/vendor/lib/.git/hooks/post-checkout\"; echo x >> \"$W/vendor/lib/.git/config\"; \
         rm -rf \"$W/.git/hooks\"; echo done",
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(
        !fx.work.join(".git/hooks/pre-commit").exists(),
        "{}",
        run.said()
    );
    assert!(fx.work.join(".git/hooks/pre-commit.sample").exists());
    assert_eq!(
        std::fs::read_to_string(fx.work.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!fx.work.join("vendor/lib/.git/hooks/post-checkout").exists());
    assert_eq!(
        std::fs::read_to_string(fx.work.join("vendor/lib/.git/config")).unwrap(),
        "[core]\n"
    );
}

/// Attempt 8: A protected path that does not exist yet cannot be created (`.git/hooks` of a repository
/// that has none).
async fn t08_create_missing_protected(sandbox: Sandbox) {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.work.join("other/.git")).unwrap();
    let run = run(
        &sandbox,
        &fx,
        "mkdir -p \"$W/other/.git/hooks\"; echo evil > \"$W/other/.git/hooks/pre-push\"; echo done",
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(
        !fx.work.join("other/.git/hooks/pre-push").exists(),
        "{}",
        run.said()
    );
}

/// Attempt 9: TCP to a port open on the host's loopback is not reached.
async fn t09_tcp_loopback(sandbox: Sandbox) {
    let fx = Fixture::new();
    let (port, count) = tcp_listener();
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected >&3; curl -s -m 3 http://127.0.0.1:{port}/; echo done"
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "the host listener was reached\n{}",
        run.said()
    );
}

/// Attempt 10: UDP to the host's loopback is not delivered.
async fn t10_udp(sandbox: Sandbox) {
    let fx = Fixture::new();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let port = socket.local_addr().unwrap().port();
    let script = format!(
        "echo datagram > /dev/udp/127.0.0.1/{port}; perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(PeerAddr => \"127.0.0.1:{port}\", Proto => \"udp\") or die \"refused: $!\\n\"; $s->send(\"x\")'; echo done"
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    let mut buffer = [0u8; 64];
    let received = socket.recv(&mut buffer);
    assert!(
        received.is_err(),
        "a datagram reached the host\n{}",
        run.said()
    );
}

/// Attempt 11: Network programs fail (and are present: a missing one would prove nothing).
async fn t11_network_programs(sandbox: Sandbox) {
    for program in ["curl", "ssh", "bash"] {
        assert!(
            ["/usr/bin", "/bin"]
                .iter()
                .any(|dir| Path::new(dir).join(program).exists()),
            "{program} is not installed: this test cannot prove anything"
        );
    }
    let fx = Fixture::new();
    let (port, count) = tcp_listener();
    let script = format!(
        "curl -s -m 3 http://127.0.0.1:{port}/; echo \"curl=$?\"; \
         ssh -o BatchMode=yes -o ConnectTimeout=3 -o StrictHostKeyChecking=no -p {port} 127.0.0.1 true 2>/dev/null; echo \"ssh=$?\"; \
         (echo x > /dev/tcp/127.0.0.1/{port}) 2>/dev/null; echo \"devtcp=$?\""
    );
    let run = run(&sandbox, &fx, &script).await;
    for name in ["curl", "ssh", "devtcp"] {
        let line = run
            .lines
            .iter()
            .find(|line| line.starts_with(&format!("{name}=")))
            .cloned()
            .unwrap_or_default();
        let code: i32 = line
            .split('=')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(-1);
        assert!(code != 0 && code != 127, "{name}: {line}\n{}", run.said());
    }
    assert_eq!(count.load(Ordering::SeqCst), 0, "{}", run.said());
}

/// Attempt 12: A pathname Unix socket created outside (a fake docker.sock) is not reached.
async fn t12_pathname_unix_socket(sandbox: Sandbox) {
    let fx = Fixture::new();
    let path = fx.outside.join("docker.sock");
    let count = unix_listener(UnixListener::bind(&path).unwrap());
    let script = format!(
        "curl -s -m 3 --unix-socket {} http://localhost/; echo done",
        path.display()
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count.load(Ordering::SeqCst), 0, "{}", run.said());
}

/// Attempt 13: An abstract Unix socket created outside is not reached.
async fn t13_abstract_unix_socket(sandbox: Sandbox) {
    use std::os::linux::net::SocketAddrExt;
    let fx = Fixture::new();
    let name = format!("tether-escape-{}", fx.id);
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let count = unix_listener(UnixListener::bind_addr(&address).unwrap());
    let script = format!("curl -s -m 3 --abstract-unix-socket {name} http://localhost/; echo done");
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count.load(Ordering::SeqCst), 0, "{}", run.said());
}

/// Attempt 14: Host processes cannot be signalled, nor their environment or root read.
async fn t14_host_processes(sandbox: Sandbox) {
    let fx = Fixture::new();
    let mut victim = std::process::Command::new("sleep")
        .arg("300")
        .env("VICTIM_SECRET", SECRET)
        .spawn()
        .unwrap();
    let pid = victim.id();
    let script = format!(
        "kill -TERM {pid}; kill -KILL {pid}; cat /proc/{pid}/environ > \"$W/env\"; tr '\\0' '\\n' < /proc/{pid}/environ; \
         cat /proc/1/root{key} > \"$W/root\"; cat /proc/{pid}/root{key}; echo done",
        key = fx.home.join(".ssh/id_ed25519").display()
    );
    let run = run(&sandbox, &fx, &script).await;
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(alive, "the host process was killed\n{}", run.said());
    assert!(
        fx.leaks(&run).is_empty(),
        "leaked: {:?}\n{}",
        fx.leaks(&run),
        run.said()
    );
}

/// Attempt 15: TIOCSTI and TIOCLINUX on a terminal (under `script`) are refused.
async fn t15_terminal_injection(sandbox: Sandbox) {
    let fx = Fixture::new();
    let perl = "open(my $t, \"+<\", \"/dev/tty\") or die \"no tty: $!\\n\"; \
                for my $req (0x5412, 0x541C) { my $c = \"x\"; my $r = ioctl($t, $req, $c); \
                printf(\"ioctl %x: %s\\n\", $req, $r ? \"ALLOWED\" : \"refused ($!)\"); }";
    let script = format!(
        "script -qec {} /dev/null; echo done",
        shell_quote(&format!("perl -e {}", shell_quote(perl)))
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    let results: Vec<&String> = run
        .lines
        .iter()
        .filter(|line| line.contains("ioctl "))
        .collect();
    assert_eq!(results.len(), 2, "the probe did not run\n{}", run.said());
    assert!(
        results.iter().all(|line| line.contains("refused")),
        "{}",
        run.said()
    );
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Attempt 16: The environment holds none of the agent's credentials or its own variables.
async fn t16_environment(sandbox: Sandbox) {
    let fx = Fixture::new();
    let seeded: Vec<(std::ffi::OsString, std::ffi::OsString)> = [
        "GITHUB_TOKEN",
        "MY_API_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_PROFILE",
        "SSH_AUTH_SOCK",
        "TETHER_AGENT_HOME",
        "OPENAI_API_KEY",
        "DB_PASSWORD",
    ]
    .iter()
    .map(|name| ((*name).into(), SECRET.into()))
    .chain([("PATH".into(), "/usr/bin:/bin".into())])
    .collect();
    let mut policy = fx.policy(false);
    policy.env = environment::scrub(seeded);
    policy.env.push(("W".into(), fx.work.display().to_string()));
    let run = run_with(
        &sandbox,
        &fx,
        &policy,
        "env > \"$W/env.txt\"; cat /proc/self/environ > \"$W/self-environ\"; ls -a \"$TMPDIR\"; cat \"$TMPDIR/.tether-launch.json\"; cat /proc/$PPID/environ > \"$W/parent-environ\"; echo done",
        Duration::from_secs(30),
        RunStop::new(),
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(
        fx.leaks(&run).is_empty(),
        "leaked: {:?}\n{}",
        fx.leaks(&run),
        run.said()
    );
    let env = std::fs::read_to_string(fx.work.join("env.txt")).unwrap();
    assert!(
        !env.contains("TETHER_AGENT_HOME") && !env.contains("AWS_"),
        "{env}"
    );
    assert!(
        !run.lines.iter().any(|line| line.contains("\"layer\"")),
        "the launch spec outlived the start\n{}",
        run.said()
    );
}

/// Attempt 17: A setuid copy and `su` give nothing: no new privileges, no capabilities.
async fn t17_setuid(sandbox: Sandbox) {
    let fx = Fixture::new();
    let etc = format!("/etc/tether-su-{}", fx.id);
    let script = format!(
        "cp /usr/bin/su \"$W/mysu\" && chmod u+s \"$W/mysu\"; \"$W/mysu\" -c 'touch {etc}' root </dev/null; su -c 'touch {etc}' root </dev/null; \
         grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd):' /proc/self/status; echo done"
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(!Path::new(&etc).exists(), "su wrote {etc}");
    let field = |name: &str| {
        run.lines
            .iter()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .map(|value| value.trim().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(field("NoNewPrivs"), "1", "{}", run.said());
    assert_eq!(field("CapEff"), "0000000000000000", "{}", run.said());
    assert_eq!(field("CapPrm"), "0000000000000000", "{}", run.said());
}

/// Attempt 18: No new namespaces, no nested sandbox, no mounts.
async fn t18_namespaces_and_mounts(sandbox: Sandbox) {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.work.join("mnt")).unwrap();
    let etc = format!("/etc/tether-ns-{}", fx.id);
    let script = format!(
        "unshare -Ur sh -c 'echo pwned > {etc}'; unshare -m sh -c 'echo pwned > {etc}'; \
         bwrap --bind / / sh -c 'echo pwned > {etc}'; \
         mount -t tmpfs none \"$W/mnt\" && echo mounted; mount --bind \"$OUT\" \"$W/mnt\" && echo mounted; echo done"
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(!run.lines.contains(&"mounted".to_owned()), "{}", run.said());
    assert!(!Path::new(&etc).exists(), "{}", run.said());
}

/// Attempt 19: No device nodes; named pipes in the work folder are fine.
async fn t19_mknod(sandbox: Sandbox) {
    let fx = Fixture::new();
    let run = run(
        &sandbox,
        &fx,
        "mknod \"$W/sda\" b 8 0; mknod \"$W/mem\" c 1 1; mkfifo \"$W/fifo\"; echo done",
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(!fx.work.join("sda").exists() && !fx.work.join("mem").exists());
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(fx.work.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
}

/// Attempt 20: `setsid` and double-forked processes die with a timeout; partial output is kept.
async fn t20_timeout_kills_the_tree(sandbox: Sandbox) {
    let fx = Fixture::new();
    let marker = format!(
        "99{}",
        fx.id
            .chars()
            .filter(char::is_ascii_digit)
            .take(5)
            .collect::<String>()
    );
    let script = format!(
        "echo partial; setsid sleep {marker}1 & (sleep {marker}2 &) ; (setsid sh -c 'sleep {marker}3 & sleep {marker}3') & \
         trap '' TERM; sleep {marker}4"
    );
    let run = run_with(
        &sandbox,
        &fx,
        &fx.policy(false),
        &script,
        Duration::from_secs(2),
        RunStop::new(),
    )
    .await;
    assert!(matches!(run.ended, Ended::TimedOut), "{}", run.said());
    assert!(run.lines.contains(&"partial".to_owned()), "{}", run.said());
    let left = no_process_with(&format!("sleep {marker}")).await;
    assert!(left.is_empty(), "survivors: {left:?}");
}

/// Attempt 20b: A cancel and a lost lease kill the tree the same way.
async fn t20b_cancel_and_lost_lease(sandbox: Sandbox) {
    for reason in [StopReason::Cancel, StopReason::LeaseLost] {
        let fx = Fixture::new();
        let marker = format!(
            "98{}",
            fx.id
                .chars()
                .filter(char::is_ascii_digit)
                .take(5)
                .collect::<String>()
        );
        let stop = RunStop::new();
        let raiser = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            raiser.raise(reason);
        });
        let script =
            format!("echo started; setsid sleep {marker}1 & (sleep {marker}2 &); sleep {marker}3");
        let run = run_with(
            &sandbox,
            &fx,
            &fx.policy(false),
            &script,
            Duration::from_secs(60),
            stop,
        )
        .await;
        assert!(
            matches!(run.ended, Ended::Stopped(r) if r == reason),
            "{}",
            run.said()
        );
        assert!(run.lines.contains(&"started".to_owned()), "{}", run.said());
        let left = no_process_with(&format!("sleep {marker}")).await;
        assert!(left.is_empty(), "{reason:?}: survivors: {left:?}");
    }
}

/// Attempt 21: What a program leaves running when it exits is killed (the agent's own SIGKILL is in
/// the e2e suite, with the real daemon).
async fn t21_leftovers_die(sandbox: Sandbox) {
    let fx = Fixture::new();
    let marker = format!(
        "97{}",
        fx.id
            .chars()
            .filter(char::is_ascii_digit)
            .take(5)
            .collect::<String>()
    );
    let script = format!(
        "setsid sleep {marker}1 >/dev/null 2>&1 & (sleep {marker}2 >/dev/null 2>&1 &); echo bye"
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(
        matches!(run.ended, Ended::Exited(status) if status.success()),
        "{}",
        run.said()
    );
    let left = no_process_with(&format!("sleep {marker}")).await;
    assert!(left.is_empty(), "survivors: {left:?}");
}

/// Attempt 22: io_uring cannot be set up.
async fn t22_io_uring(sandbox: Sandbox) {
    let fx = Fixture::new();
    let nr = if cfg!(target_arch = "x86_64") || cfg!(target_arch = "aarch64") {
        425
    } else {
        return;
    };
    let script = format!(
        "perl -e 'my $p = \"\\0\" x 120; my $r = syscall({nr}, 8, $p); print $r >= 0 ? \"io_uring ALLOWED\\n\" : \"io_uring refused: $!\\n\"'; echo done"
    );
    let run = run(&sandbox, &fx, &script).await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(
        run.lines
            .iter()
            .any(|line| line.starts_with("io_uring refused: Operation not permitted")),
        "{}",
        run.said()
    );
}

/// Attempt 23: The hard floor refuses its commands before anything runs (also wrapped). The job-level
/// check (the job ends `blocked`, nothing ran) is in the e2e suite.
async fn t23_hard_floor(_sandbox: Sandbox) {
    for argv in [
        &["rm", "-rf", "~"][..],
        &["dd", "if=/dev/zero", "of=/dev/sda"],
        &["mkfs.ext4", "/dev/sda1"],
        &["sh", "-c", ":(){ :|:& };:"],
        &["shutdown", "now"],
        &["sudo", "id"],
        &["su", "-"],
        &["crontab", "-e"],
        &["pkill", "-f", "x"],
        &["killall", "x"],
        &["bash", "-lc", "cd /tmp && sudo id"],
        &["env", "X=1", "reboot"],
        &["sh", "-c", "echo $(doas id)"],
        &["timeout", "5", "nohup", "nice", "-n", "5", "killall", "x"],
        &["xargs", "rm", "-rf", "/"],
    ] {
        let argv: Vec<String> = argv.iter().map(|w| (*w).to_owned()).collect();
        let evaluation = hard_floor::check(&argv);
        assert_eq!(
            evaluation.decision,
            hard_floor::Decision::Forbidden,
            "{argv:?}"
        );
    }
}

/// Attempt 24: With the backend taken away, a confined spawn is refused and the report says why.
async fn t24_backend_unavailable(sandbox: Sandbox) {
    let name = sandbox.report().backend.clone();
    let taken_away = Sandbox::probe(&Settings {
        choice: name.clone(),
        bwrap: PathBuf::from("/nonexistent/bwrap"),
        launcher: PathBuf::from("/nonexistent/tether-agent"),
        allow_unsandboxed: false,
    });
    let report = taken_away.report();
    assert_eq!(
        (report.backend.as_str(), report.strength),
        (
            "none",
            tether_protocol::capabilities::SandboxStrength::Advisory
        )
    );
    assert!(
        report
            .reasons
            .iter()
            .any(|reason| reason.contains("/nonexistent")),
        "{report:?}"
    );
    let fx = Fixture::new();
    let refused = taken_away.prepare(
        &fx.guard,
        &fx.policy(false),
        &Start::new(&["true".to_owned()]),
    );
    assert!(
        matches!(&refused, Err(refused) if refused.0.contains("no working sandbox")),
        "{refused:?}"
    );
    // The command line tells the same story.
    let output = std::process::Command::new(AGENT)
        .args(["sandbox", "status", "--json"])
        .env("TETHER_SANDBOX", &name)
        .env("TETHER_BWRAP", "/nonexistent/bwrap")
        .env("TETHER_AGENT_HOME", &fx.data_dir)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    if name == "bwrap" {
        assert_eq!(json["backend"], "none", "{json}");
        assert!(
            json["reasons"][0]
                .as_str()
                .unwrap_or("")
                .contains("/nonexistent/bwrap"),
            "{json}"
        );
    }
}

/// Attempt 25: The reported strength is what the probe found, and `sandbox status --json` prints the
/// same object the heartbeat sends.
async fn t25_report_matches(sandbox: Sandbox) {
    let report = sandbox.report().clone();
    let name = report.backend.clone();
    let expected = match name.as_str() {
        "bwrap" => tether_protocol::capabilities::SandboxStrength::Strong,
        _ => tether_protocol::capabilities::SandboxStrength::Reduced,
    };
    assert_eq!(report.strength, expected, "{report:?}");
    assert_eq!(report.guarantees.seccomp, Some(true));
    assert_eq!(report.guarantees.pid_namespace, Some(name == "bwrap"));
    let fx = Fixture::new();
    let output = std::process::Command::new(AGENT)
        .args(["sandbox", "status", "--json"])
        .env("TETHER_SANDBOX", &name)
        .env("TETHER_AGENT_HOME", &fx.data_dir)
        .output()
        .unwrap();
    let printed: tether_protocol::capabilities::SandboxReport =
        serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(printed, report);
}

/// Attempt 26: A job asking for the network gets it only when allowed (bwrap: the host's network;
/// landlock: no socket filter), and a graceful stop lets the program clean up.
async fn t26_network_on_and_graceful_stop(sandbox: Sandbox) {
    let fx = Fixture::new();
    let (port, count) = tcp_listener();
    let script = format!("curl -s -m 3 http://127.0.0.1:{port}/ >/dev/null; echo done");
    let run = run_with(
        &sandbox,
        &fx,
        &fx.policy(true),
        &script,
        Duration::from_secs(30),
        RunStop::new(),
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "network on reaches the host\n{}",
        run.said()
    );

    let stop = RunStop::new();
    let raiser = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        raiser.raise(StopReason::Cancel);
    });
    let run = run_with(
        &sandbox,
        &fx,
        &fx.policy(false),
        "trap 'echo cleaned > \"$W/cleaned\"; exit 0' TERM; echo ready; while :; do sleep 0.1; done",
        Duration::from_secs(60),
        stop,
    )
    .await;
    assert!(
        matches!(run.ended, Ended::Stopped(StopReason::Cancel)),
        "{}",
        run.said()
    );
    // Under bubblewrap a stop ends the namespace at once; under Landlock the launcher passes
    // SIGTERM on first.
    if sandbox.report().backend == "landlock" {
        assert!(fx.work.join("cleaned").exists(), "{}", run.said());
    }
}

/// The guard refuses protected and too-broad folders before any spawn.
async fn t27_guard(sandbox: Sandbox) {
    let fx = Fixture::new();
    let mut policy = fx.policy(false);
    for bad in [
        fx.home.join(".ssh"),
        fx.data_dir.clone(),
        fx.home.join(".aws/credentials"),
    ] {
        policy.readable = vec![bad.clone()];
        assert!(
            sandbox
                .prepare(&fx.guard, &policy, &Start::new(&["true".to_owned()]))
                .is_err(),
            "{bad:?}"
        );
    }
    for root in ["/", "/etc", "/tmp"] {
        assert!(fx.guard.check_folder(Path::new(root)).is_err(), "{root}");
    }
    assert!(fx.guard.check_folder(&fx.home).is_err());
    assert!(fx.guard.check_folder(&fx.work).is_ok());
}

/// Attempt 28: A program given a pipe as its input (an ACP agent) reads exactly what the agent
/// writes and sees its end, and starts in the folder inside the work folder it was given; one
/// given nothing reads `/dev/null`; a working folder outside the work folder is refused.
async fn t28_input_and_working_folder(sandbox: Sandbox) {
    use tokio::io::AsyncWriteExt;
    let fx = Fixture::new();
    let script = r#"while read -r line; do echo "got $line"; done; echo "end of input"; pwd"#;
    let start = Start {
        argv: vec!["/bin/bash".to_owned(), "-c".to_owned(), script.to_owned()],
        cwd: Some(fx.work.join("src")),
        stdin: Input::Pipe,
    };
    let mut prepared = sandbox
        .prepare(&fx.guard, &fx.policy(false), &start)
        .unwrap();
    let mut child = prepared.command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"one\ntwo\n").await.unwrap();
    drop(input);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let here = fx.work.join("src").display().to_string();
    assert_eq!(
        lines,
        ["got one", "got two", "end of input", here.as_str()],
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success());
    assert!(prepared.finish().is_empty());

    let run = run(
        &sandbox,
        &fx,
        r#"readlink /proc/self/fd/0; cat; echo "read nothing""#,
    )
    .await;
    assert_eq!(run.lines, ["/dev/null", "read nothing"], "{}", run.said());

    for outside in [fx.outside.clone(), fx.work.join("../..")] {
        let start = Start {
            cwd: Some(outside),
            ..Start::new(&["true".to_owned()])
        };
        let refused = sandbox.prepare(&fx.guard, &fx.policy(false), &start);
        assert!(
            refused
                .as_ref()
                .is_err_and(|refused| refused.0.contains("not inside the work folder")),
            "{refused:?}"
        );
    }
}

/// The launcher runs nothing for an agent that is already gone: a spec naming another process
/// as the agent (this one is the launcher's parent) is refused before the program starts.
#[test]
fn the_launcher_refuses_a_run_whose_agent_is_gone() {
    use tether_agent::sandbox::{LaunchSpec, Layer};
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().canonicalize().unwrap();
    let launch = |agent_pid: u32, marker: &str| {
        let spec = LaunchSpec {
            layer: Layer::Unconfined,
            network: false,
            read: Vec::new(),
            write: Vec::new(),
            devices: Vec::new(),
            probe: false,
            argv: vec!["/usr/bin/touch".to_owned(), marker.to_owned()],
            cwd: work.clone(),
            env: Vec::new(),
            stdin: Input::Null,
            agent_pid: Some(agent_pid),
            forwards: Vec::new(),
        };
        let spec_file = work.join(format!("{marker}.json"));
        std::fs::write(&spec_file, serde_json::to_vec(&spec).unwrap()).unwrap();
        std::process::Command::new(AGENT)
            .args(["sandbox-exec", "--spec-file"])
            .arg(&spec_file)
            .env_clear()
            .output()
            .unwrap()
    };
    let ours = launch(std::process::id(), "ran");
    assert!(ours.status.success(), "{ours:?}");
    assert!(work.join("ran").exists());
    let orphan = launch(1, "orphan");
    assert_eq!(
        orphan.status.code(),
        Some(sandbox::SANDBOX_FAILED),
        "{orphan:?}"
    );
    assert!(
        String::from_utf8_lossy(&orphan.stderr).contains("the agent that started this run is gone")
    );
    assert!(!work.join("orphan").exists());
}

/// Attempt 29: Git and GitHub sign-ins stay out of reach: `~/.git-credentials`,
/// `~/.config/gh` and `~/.ssh` cannot be read, a credential helper finds nothing, and no
/// agent socket, askpass program or token variable reaches the environment.
async fn t29_git_sign_ins(sandbox: Sandbox) {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.home.join(".config/gh")).unwrap();
    std::fs::write(
        fx.home.join(".git-credentials"),
        format!("https://me:{SECRET}@github.com\n"),
    )
    .unwrap();
    std::fs::write(
        fx.home.join(".config/gh/hosts.yml"),
        format!("github.com:\n  oauth_token: {SECRET}\n"),
    )
    .unwrap();
    let seeded: Vec<(std::ffi::OsString, std::ffi::OsString)> = [
        "SSH_AUTH_SOCK",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "GH_TOKEN",
        "GITHUB_TOKEN",
        "GIT_SSH_COMMAND",
    ]
    .iter()
    .map(|name| ((*name).into(), SECRET.into()))
    .chain([("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())])
    .collect();
    let mut policy = fx.policy(false);
    policy.env = environment::scrub(seeded);
    policy.env.extend([
        ("HOME".into(), fx.home.display().to_string()),
        ("W".into(), fx.work.display().to_string()),
        ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
    ]);
    let script = "cat \"$HOME/.git-credentials\"; cat \"$HOME/.config/gh/hosts.yml\"; cat \"$HOME/.ssh/id_ed25519\"; \
         printf 'protocol=https\\nhost=github.com\\n\\n' | GIT_TERMINAL_PROMPT=0 git -c credential.helper=store credential fill && echo FILLED; \
         command -v gh >/dev/null && gh auth token; \
         env | grep -E '^(SSH_AUTH_SOCK|GIT_ASKPASS|SSH_ASKPASS|GH_TOKEN|GITHUB_TOKEN|GIT_SSH_COMMAND)=' && echo SEEN; echo done";
    let run = run_with(
        &sandbox,
        &fx,
        &policy,
        script,
        Duration::from_secs(30),
        RunStop::new(),
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(
        fx.leaks(&run).is_empty(),
        "leaked: {:?}\n{}",
        fx.leaks(&run),
        run.said()
    );
    for never in ["FILLED", "SEEN"] {
        assert!(!run.lines.contains(&never.to_owned()), "{}", run.said());
    }
}

/// A loopback HTTP server on the host answering every request with `body`, counting
/// connections.
async fn http_responder(body: &'static str) -> (u16, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 512];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => head.extend_from_slice(&chunk[..read]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, count)
}

/// Attempt 30: An engine limited to its model endpoints (`model` network) reaches exactly
/// them: under bubblewrap a forwarded loopback endpoint answers, while another host port,
/// directly or through the proxy, is never reached; Landlock refuses such a run.
async fn t30_model_network(sandbox: Sandbox) {
    let fx = Fixture::new();
    let (model_port, model_count) = http_responder("from-the-model").await;
    let (other_port, other_count) = http_responder("from-elsewhere").await;
    let origins = [
        Origin::parse(&format!("http://127.0.0.1:{model_port}")).unwrap(),
        Origin::parse("https://model.invalid").unwrap(),
    ];
    let network = ModelNetwork::start(&origins, &fx.root.join("runs/model")).unwrap();
    let mut policy = fx.policy(false);
    policy.env.extend(network.env());
    let enforced = sandbox.report().guarantees.network_model_enforced;
    if sandbox.report().backend != "bwrap" {
        assert_eq!(enforced, Some(false));
        let argv = ["true".to_owned()];
        let refused =
            sandbox.prepare_forwarded(&fx.guard, &policy, &Start::new(&argv), &network.forwards());
        assert!(
            matches!(&refused, Err(why) if why.0.contains("cannot limit an engine to its model endpoints")),
            "{refused:?}"
        );
        return;
    }
    assert_eq!(enforced, Some(true));
    let script = format!(
        "curl -s -m 5 http://127.0.0.1:{model_port}/; echo; \
         curl -s -m 3 http://127.0.0.1:{other_port}/ || echo direct-refused; \
         NO_PROXY= no_proxy= curl -s -m 3 -p http://127.0.0.1:{other_port}/ || echo proxy-refused; \
         curl -s -m 3 https://model.invalid:444/ || echo port-refused; echo done"
    );
    let run = run_forwarded(
        &sandbox,
        &fx,
        &policy,
        &network.forwards(),
        &script,
        Duration::from_secs(30),
        RunStop::new(),
    )
    .await;
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    assert!(
        run.lines.contains(&"from-the-model".to_owned()),
        "{}",
        run.said()
    );
    for refused in ["direct-refused", "proxy-refused", "port-refused"] {
        assert!(run.lines.contains(&refused.to_owned()), "{}", run.said());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(model_count.load(Ordering::SeqCst), 1, "{}", run.said());
    assert_eq!(other_count.load(Ordering::SeqCst), 0, "{}", run.said());
    assert_eq!(
        network.refused(),
        [
            format!("127.0.0.1:{other_port}"),
            "model.invalid:444".to_owned()
        ],
        "{}",
        run.said()
    );
}

/// Attempt 31 (the console's own): the command's terminal is a real one, and what would
/// push input into it (`TIOCSTI`) or read the screen (`TIOCLINUX`) is refused on it.
async fn t31_console_terminal_injection(sandbox: Sandbox) {
    let fx = Fixture::new();
    let perl = "for my $req (0x5412, 0x541C) { my $c = \"x\"; my $r = ioctl(STDIN, $req, $c); \
                printf(\"ioctl %x: %s\\n\", $req, $r ? \"ALLOWED\" : \"refused ($!)\"); }";
    let script = format!(
        "test -t 0 && test -t 1 && echo tty; perl -e {}; echo done",
        shell_quote(perl)
    );
    let run = THROUGH_CONSOLE
        .scope(true, async { run(&sandbox, &fx, &script).await })
        .await;
    assert!(run.lines.contains(&"tty".to_owned()), "{}", run.said());
    assert!(run.lines.contains(&"done".to_owned()), "{}", run.said());
    let results: Vec<&String> = run
        .lines
        .iter()
        .filter(|line| line.contains("ioctl "))
        .collect();
    assert_eq!(results.len(), 2, "the probe did not run\n{}", run.said());
    assert!(
        results.iter().all(|line| line.contains("refused")),
        "{}",
        run.said()
    );
}

/// Runs the attempts named through the console's terminal under both backends.
macro_rules! through_the_console {
    ($($name:ident),* $(,)?) => {
        mod console_bwrap {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(sandbox) = super::sandbox_for("bwrap") {
                        super::THROUGH_CONSOLE.scope(true, super::$name(sandbox)).await;
                    }
                }
            )*
        }
        mod console_landlock {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(sandbox) = super::sandbox_for("landlock") {
                        super::THROUGH_CONSOLE.scope(true, super::$name(sandbox)).await;
                    }
                }
            )*
        }
    };
}

through_the_console!(
    t01_write_system_and_home,
    t02_write_work_folder,
    t03_read_keys,
    t04_symlinks,
    t05_hardlink,
    t06_rename,
    t07_git_hooks,
    t08_create_missing_protected,
    t14_host_processes,
    t15_terminal_injection,
    t17_setuid,
    t18_namespaces_and_mounts,
    t19_mknod,
    t21_leftovers_die,
    t22_io_uring,
    t31_console_terminal_injection,
);

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod bwrap {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(sandbox) = super::sandbox_for("bwrap") {
                        super::$name(sandbox).await;
                    }
                }
            )*
        }
        mod landlock {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(sandbox) = super::sandbox_for("landlock") {
                        super::$name(sandbox).await;
                    }
                }
            )*
        }
    };
}

on_both_backends!(
    t01_write_system_and_home,
    t02_write_work_folder,
    t03_read_keys,
    t04_symlinks,
    t05_hardlink,
    t06_rename,
    t07_git_hooks,
    t08_create_missing_protected,
    t09_tcp_loopback,
    t10_udp,
    t11_network_programs,
    t12_pathname_unix_socket,
    t13_abstract_unix_socket,
    t14_host_processes,
    t15_terminal_injection,
    t16_environment,
    t17_setuid,
    t18_namespaces_and_mounts,
    t19_mknod,
    t20_timeout_kills_the_tree,
    t20b_cancel_and_lost_lease,
    t21_leftovers_die,
    t22_io_uring,
    t23_hard_floor,
    t24_backend_unavailable,
    t25_report_matches,
    t26_network_on_and_graceful_stop,
    t27_guard,
    t28_input_and_working_folder,
    t29_git_sign_ins,
    t30_model_network,
);
