//! A private PostgreSQL for tests, started once per test process.
//!
//! Self-contained (std only, and `external.rs` included beside it) so other crates' tests can
//! include it with `#[path = "…/server/tests/support/postgres.rs"] mod postgres;`.
//!
//! [`fresh_database_url`] finds the server binaries (`pg_config --bindir`, else the newest
//! `/usr/lib/postgresql/*/bin`), runs `initdb` into a temporary directory, starts `postgres`
//! on a free loopback port, and creates one new database per call. As root, `initdb` and
//! `postgres` run as the `postgres` user through `runuser`. A shell watchdog stops the
//! server and deletes the directory once the test process is gone.
//!
//! Without PostgreSQL it prints why and returns `None`, unless `TETHER_REQUIRE_EXTERNAL=1`,
//! where it panics instead.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::external;

/// A running test cluster.
pub struct Cluster {
    pub port: u16,
    pub bindir: PathBuf,
    pub dir: PathBuf,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);

/// The URL of a new, empty database on the private cluster, or `None` (with a printed
/// reason) when PostgreSQL is unavailable and not required.
///
/// # Panics
/// When `TETHER_REQUIRE_EXTERNAL=1` and the cluster cannot be started, or when creating the
/// database fails.
pub fn fresh_database_url() -> Option<String> {
    let cluster = match CLUSTER.get_or_init(start_cluster) {
        Ok(cluster) => cluster,
        Err(why) => {
            external::unavailable(&format!("PostgreSQL is unavailable: {why}"));
            return None;
        }
    };
    let name = format!(
        "tether_{}_{}",
        std::process::id(),
        NEXT_DATABASE.fetch_add(1, Ordering::SeqCst)
    );
    let status = Command::new(cluster.bindir.join("createdb"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &cluster.port.to_string(),
            "-U",
            "postgres",
            &name,
        ])
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() => {}
        other => panic!("createdb {name} failed: {other:?}"),
    }
    Some(format!(
        "postgres://postgres@127.0.0.1:{}/{name}",
        cluster.port
    ))
}

fn start_cluster() -> Result<Cluster, String> {
    let bindir = find_bindir().ok_or("no PostgreSQL server binaries (initdb, postgres) found")?;
    let dir = std::env::temp_dir().join(format!("tether-pg-{}-{}", std::process::id(), nanos()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let as_root = is_root();
    if as_root {
        run(Command::new("chown").arg("-R").arg("postgres:").arg(&dir))?;
    }
    let data = dir.join("data");
    let mut initdb = as_postgres(as_root, &bindir.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
    run(&mut initdb)?;
    let port = free_port()?;
    spawn_with_watchdog(&bindir, &dir, port, as_root)?;
    wait_ready(&bindir, port)?;
    Ok(Cluster { port, bindir, dir })
}

/// Starts `postgres` under a shell that stops it (fast shutdown) and deletes `dir` once this
/// test process has exited, however it exits.
fn spawn_with_watchdog(bindir: &Path, dir: &Path, port: u16, as_root: bool) -> Result<(), String> {
    let prefix = if as_root {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let data = dir.join("data");
    let script = format!(
        "{prefix}'{postgres}' -D '{data}' -k '{dir}' -p {port} -c listen_addresses=127.0.0.1 \
         -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
         > '{dir}/postgres.log' 2>&1 &\n\
         while kill -0 {test_pid} 2>/dev/null; do sleep 1; done\n\
         kill -INT \"$(head -n 1 '{data}/postmaster.pid' 2>/dev/null)\" 2>/dev/null\n\
         sleep 3\n\
         rm -rf '{dir}'\n",
        postgres = bindir.join("postgres").display(),
        data = data.display(),
        dir = dir.display(),
        test_pid = std::process::id(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("starting postgres: {e}"))
}

fn wait_ready(bindir: &Path, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let ready = Command::new(bindir.join("pg_isready"))
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
            ])
            .status()
            .is_ok_and(|status| status.success());
        if ready {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "postgres on port {port} did not become ready within 60 s"
    ))
}

fn find_bindir() -> Option<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|dir| has_server(dir)) {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_server(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn as_postgres(as_root: bool, program: &Path) -> Command {
    if as_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos())
}
