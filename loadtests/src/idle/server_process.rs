//! The server process, read from `/proc` (Linux): memory, CPU, open descriptors, and how
//! many connections its open-files limit lets it serve.

use std::time::Duration;

use anyhow::Context;

use crate::report;

/// Descriptors the server keeps for itself (routes/edge.rs `FILES_KEPT`).
const FILES_KEPT: u64 = 256;
/// The server's connection cap when `TETHER_MAX_CONNECTIONS` is not set (config.rs).
const DEFAULT_MAX_CONNECTIONS: u64 = 20_000;

#[derive(Debug, Clone, Copy)]
pub struct ServerProcess {
    pub pid: u32,
}

impl ServerProcess {
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        report::rss_bytes(self.pid).context("cannot read the server's memory")
    }

    pub fn cpu_secs(&self) -> anyhow::Result<f64> {
        report::cpu_secs(Some(self.pid)).context("cannot read the server's CPU time")
    }

    /// Descriptors open now: its connections, and a few files.
    pub fn open_fds(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/fd", self.pid))?.count())
    }

    /// The connections it serves before answering 503: `TETHER_MAX_CONNECTIONS`, lowered to
    /// three quarters of what its open-files limit leaves (routes/edge.rs
    /// `connection_limits`).
    pub fn connection_cap(&self) -> anyhow::Result<u64> {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.pid))?;
        let open_files: u64 = limits
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .and_then(|line| line.split_whitespace().nth(3))
            .and_then(|soft| soft.parse().ok())
            .unwrap_or(u64::MAX);
        let budget = open_files.saturating_sub(FILES_KEPT);
        Ok(self.configured_cap().min(budget / 4 * 3))
    }

    /// `TETHER_MAX_CONNECTIONS` from its environment, when readable.
    fn configured_cap(&self) -> u64 {
        std::fs::read(format!("/proc/{}/environ", self.pid))
            .ok()
            .and_then(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .filter_map(|entry| std::str::from_utf8(entry).ok())
                    .find_map(|entry| entry.strip_prefix("TETHER_MAX_CONNECTIONS="))
                    .and_then(|value| value.parse().ok())
            })
            .unwrap_or(DEFAULT_MAX_CONNECTIONS)
    }

    /// Waits until its open descriptors stop falling (the connections of the setup closed;
    /// the server drops idle ones after its keep-alive of a few seconds), at most `limit`.
    pub async fn wait_connections_closed(&self, limit: Duration) -> anyhow::Result<usize> {
        let started = tokio::time::Instant::now();
        let mut last = self.open_fds()?;
        let mut steady = 0;
        while started.elapsed() < limit && steady < 3 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.open_fds()?;
            steady = if now >= last { steady + 1 } else { 0 };
            last = now;
        }
        Ok(last)
    }
}

/// This machine's load average over the last minute.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
