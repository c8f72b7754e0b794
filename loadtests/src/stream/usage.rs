//! CPU seconds of the three sides of a run (the server, the database, this generator),
//! read from `/proc` (Linux) at the start and end of the window.

use std::time::Instant;

use crate::report::cpu_secs;

/// The kernel's tick (USER_HZ), as `report::cpu_secs` assumes.
const TICKS_PER_SEC: f64 = 100.0;

/// CPU seconds of a process tree: the process's own user and system time, what its
/// children that ended used (`cutime`, `cstime`), and the user and system time of its live
/// children. PostgreSQL's work is done by backends the postmaster forks per connection.
pub fn tree_cpu_secs(pid: u32) -> Option<f64> {
    let own = stat_fields(pid)?;
    let ticks = |fields: &[String], index: usize| {
        fields
            .get(index)
            .and_then(|field| field.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After the name: utime, stime, cutime, cstime are fields 11..=14 (0-based).
    let mut total = (11..=14).map(|index| ticks(&own, index)).sum::<u64>();
    for child in children(pid) {
        if let Some(fields) = stat_fields(child) {
            total += ticks(&fields, 11) + ticks(&fields, 12);
        }
    }
    Some(total as f64 / TICKS_PER_SEC)
}

/// The fields of `/proc/PID/stat` after the command name (field 3, the state, first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    Some(after_name.split_whitespace().map(str::to_owned).collect())
}

/// Live processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|candidate| {
            // The parent is field 4 of the line, 1 after the name.
            stat_fields(*candidate).and_then(|fields| fields.get(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}

/// CPU seconds used so far by each side, and when they were read.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    at: Instant,
    generator: Option<f64>,
    server: Option<f64>,
    database: Option<f64>,
}

/// CPU seconds each side used between two readings.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spent {
    pub secs: f64,
    pub generator: Option<f64>,
    pub server: Option<f64>,
    pub database: Option<f64>,
}

impl Usage {
    pub fn read(server_pid: Option<u32>, database_pid: Option<u32>) -> Usage {
        Usage {
            at: Instant::now(),
            generator: cpu_secs(None),
            server: server_pid.and_then(|pid| cpu_secs(Some(pid))),
            database: database_pid.and_then(tree_cpu_secs),
        }
    }

    pub fn since(&self, start: &Usage) -> Spent {
        let spent = |now: Option<f64>, before: Option<f64>| Some(now? - before?);
        Spent {
            secs: self.at.duration_since(start.at).as_secs_f64(),
            generator: spent(self.generator, start.generator),
            server: spent(self.server, start.server),
            database: spent(self.database, start.database),
        }
    }
}

/// The one-minute load average, from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_counts_what_a_child_used() {
        let me = std::process::id();
        let before = tree_cpu_secs(me).unwrap_or(f64::MAX);
        // Busy in the shell, not here: this process only waits.
        let status = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status();
        assert!(status.is_ok_and(|status| status.success()));
        assert!(tree_cpu_secs(me).unwrap_or(0.0) - before >= 0.1);
        assert_eq!(tree_cpu_secs(u32::MAX), None);
    }
}
