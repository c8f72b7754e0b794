//! CPU seconds of the three sides of a run (the server, the database as its postmaster's
//! process tree, this generator), read from `/proc` (Linux) at the start and end of the
//! window.

use std::time::Instant;

use crate::report::{cpu_secs, process_tree_cpu_secs};

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
            database: database_pid.and_then(process_tree_cpu_secs),
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
