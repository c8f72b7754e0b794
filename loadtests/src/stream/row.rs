//! The run's markdown row.

use std::collections::BTreeMap;

use crate::audit::Audit;
use crate::usage::Spent;

/// A generator busier than this share of one core is named saturated: its own delays are
/// then in the latencies.
const GENERATOR_BUSY_CORES: f64 = 0.9;

/// p50/p95/p99/max of samples in microseconds, in milliseconds.
#[derive(Debug, Default, Clone, Copy)]
pub struct Millis {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Millis {
    pub fn of(mut micros: Vec<u32>) -> Millis {
        if micros.is_empty() {
            return Millis::default();
        }
        micros.sort_unstable();
        let at = |q: f64| {
            let index = ((micros.len() as f64 * q).ceil() as usize).clamp(1, micros.len()) - 1;
            f64::from(micros[index]) / 1000.0
        };
        Millis {
            p50: at(0.5),
            p95: at(0.95),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// Everything the row says.
#[derive(Debug)]
pub struct Row {
    pub label: String,
    pub jobs: usize,
    pub watchers: usize,
    /// Lines per second the schedule asks of the whole fleet.
    pub target_per_sec: f64,
    pub lines_sent: u64,
    pub lines_accepted: u64,
    pub lines_rejected: u64,
    pub errors: BTreeMap<String, u64>,
    pub progress: Millis,
    pub latency: Millis,
    /// The senders' wake-up lateness.
    pub lag: Millis,
    /// Half a batch period, in milliseconds.
    pub lag_limit_ms: f64,
    pub audit: Audit,
    pub spent: Spent,
    pub rss_bytes: Option<u64>,
    pub load_average: Option<f64>,
}

impl Row {
    pub fn header() -> &'static str {
        "| run | jobs | watchers | lines/s target / sent / accepted | rejected lines / errors | progress ms p50/p99 | send→receive ms p50/p95/p99/max | stream lost / dup / seq gaps+repeats | stored lost / dup | CPU s per 1,000 lines server / database / generator | server RSS MiB | load avg | notes |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|"
    }

    pub fn markdown(&self) -> String {
        let secs = self.spent.secs.max(0.001);
        let per_thousand = |cpu: Option<f64>| {
            cpu.map_or("-".to_owned(), |cpu| {
                format!("{:.2}", cpu * 1000.0 / self.lines_accepted.max(1) as f64)
            })
        };
        let audit = &self.audit;
        format!(
            "| {} | {} | {} | {:.0} / {:.0} / {:.0} | {} / {} | {:.1} / {:.1} | {:.1} / {:.1} / {:.1} / {:.1} | {} / {} / {} | {} / {} | {} / {} / {} | {} | {} | {} |",
            self.label,
            self.jobs,
            self.watchers,
            self.target_per_sec,
            self.lines_sent as f64 / secs,
            self.lines_accepted as f64 / secs,
            self.lines_rejected,
            self.errors.values().sum::<u64>(),
            self.progress.p50,
            self.progress.p99,
            self.latency.p50,
            self.latency.p95,
            self.latency.p99,
            self.latency.max,
            audit.stream_lost,
            audit.stream_repeated,
            audit.seq_gaps + audit.seq_repeats,
            audit.stored_lost,
            audit.stored_repeated,
            per_thousand(self.spent.server),
            per_thousand(self.spent.database),
            per_thousand(self.spent.generator),
            self.rss_bytes
                .map_or("-".to_owned(), |bytes| format!("{:.0}", bytes as f64 / 1048576.0)),
            self.load_average
                .map_or("-".to_owned(), |load| format!("{load:.1}")),
            self.notes().join("; "),
        )
    }

    /// What a reader needs to judge the row: who was busy, and anything that went wrong.
    fn notes(&self) -> Vec<String> {
        let secs = self.spent.secs.max(0.001);
        let cores =
            |cpu: Option<f64>| cpu.map_or("-".to_owned(), |cpu| format!("{:.2}", cpu / secs));
        let mut notes = vec![format!(
            "{:.0} s; cores server {} / database {} / generator {}",
            self.spent.secs,
            cores(self.spent.server),
            cores(self.spent.database),
            cores(self.spent.generator)
        )];
        let busy = self
            .spent
            .generator
            .is_some_and(|cpu| cpu / secs >= GENERATOR_BUSY_CORES);
        if busy {
            notes.push("generator saturated".to_owned());
        }
        // Waking late without being busy: the machine had no core free for it, and receipts
        // were timed late by as much.
        if self.lag.p99 > self.lag_limit_ms {
            notes.push(format!(
                "generator woke late: p99 {:.0} ms{}",
                self.lag.p99,
                if busy {
                    ""
                } else {
                    " (not busy: no core free)"
                }
            ));
        }
        let audit = &self.audit;
        if audit.not_ended > 0 {
            notes.push(format!("{} streams never saw the job end", audit.not_ended));
        }
        if audit.reconnects > 0 {
            notes.push(format!("{} stream reconnects", audit.reconnects));
        }
        if audit.unreadable > 0 {
            notes.push(format!("{} jobs unreadable", audit.unreadable));
        }
        notes.extend(
            self.errors
                .iter()
                .map(|(what, count)| format!("{count}× {what}")),
        );
        notes
    }
}
