//! A private Redis for tests, started once per test process.
//!
//! Self-contained (std only, and `external.rs` included beside it), like `postgres.rs`, so
//! other crates' tests can include it with
//! `#[path = "…/server/tests/support/redis.rs"] mod redis;`.
//!
//! [`url`] starts the machine's `redis-server` (`/usr/bin/redis-server`, else the one on
//! `PATH`) on a free loopback port, without persistence, under a shell watchdog that stops it
//! once the test process is gone.
//!
//! Without Redis it prints why and returns `None`, unless `TETHER_REQUIRE_EXTERNAL=1`, where
//! it panics instead.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::external;

static SERVER: OnceLock<Result<u16, String>> = OnceLock::new();

/// `redis://127.0.0.1:PORT/` of the private server, or `None` (with a printed reason) when
/// Redis is unavailable and not required.
///
/// # Panics
/// When `TETHER_REQUIRE_EXTERNAL=1` and the server cannot be started.
pub fn url() -> Option<String> {
    match SERVER.get_or_init(start) {
        Ok(port) => Some(format!("redis://127.0.0.1:{port}/")),
        Err(why) => {
            external::unavailable(&format!("Redis is unavailable: {why}"));
            None
        }
    }
}

fn start() -> Result<u16, String> {
    let binary = find_binary().ok_or("no redis-server binary found")?;
    let port = free_port()?;
    spawn_with_watchdog(&binary, port)?;
    wait_ready(port)?;
    Ok(port)
}

fn find_binary() -> Option<PathBuf> {
    let fixed = PathBuf::from("/usr/bin/redis-server");
    if fixed.is_file() {
        return Some(fixed);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
}

/// Starts `redis-server` under a shell that stops it once this test process has exited,
/// however it exits.
fn spawn_with_watchdog(binary: &Path, port: u16) -> Result<(), String> {
    let script = format!(
        "'{binary}' --port {port} --bind 127.0.0.1 --save '' --appendonly no \
         --protected-mode no --loglevel warning > /dev/null 2>&1 &\n\
         server=$!\n\
         while kill -0 {test_pid} 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 1; done\n\
         kill $server 2>/dev/null\n",
        binary = binary.display(),
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
        .map_err(|e| format!("starting redis-server: {e}"))
}

fn wait_ready(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if ping(port) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "redis-server on port {port} did not answer within 20 s"
    ))
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("finding a free port: {e}"))
}
