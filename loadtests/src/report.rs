//! What a run measured, and its table row.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::json;

/// Timestamps of one job, as the web user and the device saw them.
#[derive(Debug, Default)]
struct JobTimes {
    assigned: Option<Instant>,
    claims: Vec<Instant>,
    completed: Option<Instant>,
}

/// Shared by every simulated device and user.
#[derive(Debug, Default)]
pub struct Recorder {
    jobs: Mutex<HashMap<String, JobTimes>>,
    heartbeats: Mutex<Vec<(Instant, Duration)>>,
    errors: Mutex<BTreeMap<String, u64>>,
    window: Mutex<Option<Instant>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Recorder {
    pub fn assigned(&self, job_id: &str, at: Instant) {
        lock(&self.jobs)
            .entry(job_id.to_owned())
            .or_default()
            .assigned = Some(at);
    }

    pub fn claimed(&self, job_id: &str) {
        lock(&self.jobs)
            .entry(job_id.to_owned())
            .or_default()
            .claims
            .push(Instant::now());
    }

    pub fn completed(&self, job_id: &str) {
        lock(&self.jobs)
            .entry(job_id.to_owned())
            .or_default()
            .completed = Some(Instant::now());
    }

    pub fn is_completed(&self, job_id: &str) -> bool {
        lock(&self.jobs)
            .get(job_id)
            .is_some_and(|times| times.completed.is_some())
    }

    pub fn heartbeat(&self, latency: Duration) {
        lock(&self.heartbeats).push((Instant::now(), latency));
    }

    pub fn error(&self, what: &str) {
        *lock(&self.errors).entry(what.to_owned()).or_default() += 1;
    }

    pub fn start_window(&self) {
        *lock(&self.window) = Some(Instant::now());
    }

    /// Ends the measuring window; returns its start and length.
    pub fn stop_window(&self) -> (Instant, Duration) {
        let start = lock(&self.window).unwrap_or_else(Instant::now);
        (start, start.elapsed())
    }
}

/// What the database says about the assigned jobs.
#[derive(Debug, Default, Clone, Copy)]
pub struct Audit {
    pub jobs: usize,
    pub succeeded: usize,
    pub not_succeeded: usize,
    /// Jobs that needed more than one attempt.
    pub rerun: usize,
}

/// Percentiles in milliseconds.
#[derive(Debug, Default, Clone, Copy)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(mut samples: Vec<Duration>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort();
        let at = |q: f64| {
            let index = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[index].as_secs_f64() * 1000.0
        };
        Percentiles {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            max: at(1.0),
        }
    }

    fn cell(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1}",
            self.p50, self.p95, self.p99, self.max
        )
    }
}

/// The results of one run.
#[derive(Debug)]
pub struct Report {
    label: String,
    devices: usize,
    connect_secs: f64,
    claim: Percentiles,
    completion: Percentiles,
    heartbeat: Percentiles,
    heartbeats_per_sec: f64,
    jobs_per_sec: f64,
    duplicated_claims: usize,
    audit: Audit,
    settled: usize,
    errors: BTreeMap<String, u64>,
    rss_per_device_kib: Option<f64>,
    rss_mib: Option<f64>,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        label: &str,
        recorder: &Recorder,
        devices: usize,
        (window_start, window): (Instant, Duration),
        connect_secs: f64,
        settled: usize,
        audit: Audit,
        rss: Option<u64>,
    ) -> Report {
        let jobs = lock(&recorder.jobs);
        let mut claim = Vec::new();
        let mut completion = Vec::new();
        let mut duplicated_claims = 0;
        let mut completed_in_window = 0usize;
        for times in jobs.values() {
            duplicated_claims += times.claims.len().saturating_sub(1);
            let Some(assigned) = times.assigned else {
                continue;
            };
            if let Some(first) = times.claims.first() {
                claim.push(first.saturating_duration_since(assigned));
            }
            if let Some(done) = times.completed {
                completion.push(done.saturating_duration_since(assigned));
                completed_in_window += 1;
            }
        }
        let heartbeats = lock(&recorder.heartbeats);
        let in_window: Vec<Duration> = heartbeats
            .iter()
            .filter(|(at, _)| *at >= window_start)
            .map(|(_, latency)| *latency)
            .collect();
        let seconds = window.as_secs_f64().max(0.001);
        Report {
            label: label.to_owned(),
            devices,
            connect_secs,
            claim: Percentiles::of(claim),
            completion: Percentiles::of(completion),
            heartbeats_per_sec: in_window.len() as f64 / seconds,
            heartbeat: Percentiles::of(in_window),
            jobs_per_sec: completed_in_window as f64 / seconds,
            duplicated_claims,
            audit,
            settled,
            errors: lock(&recorder.errors).clone(),
            rss_per_device_kib: rss.map(|bytes| bytes as f64 / 1024.0 / devices.max(1) as f64),
            rss_mib: rss.map(|bytes| bytes as f64 / 1024.0 / 1024.0),
        }
    }

    pub fn table_header() -> &'static str {
        "| run | devices | connect s | assign→claim ms p50/p95/p99/max | assign→done ms p50/p95/p99/max | heartbeat ms p50/p95/p99/max | heartbeats/s | jobs/s | jobs ok/assigned | lost | rerun | dup claims | errors | RSS MiB | RSS/device KiB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    }

    pub fn table_row(&self) -> String {
        let errors: u64 = self.errors.values().sum();
        format!(
            "| {} | {} | {:.1} | {} | {} | {} | {:.0} | {:.0} | {}/{} | {} | {} | {} | {} | {} | {} |",
            self.label,
            self.devices,
            self.connect_secs,
            self.claim.cell(),
            self.completion.cell(),
            self.heartbeat.cell(),
            self.heartbeats_per_sec,
            self.jobs_per_sec,
            self.audit.succeeded,
            self.audit.jobs,
            self.audit.not_succeeded,
            self.audit.rerun,
            self.duplicated_claims,
            errors,
            self.rss_mib.map_or("-".to_owned(), |mib| format!("{mib:.0}")),
            self.rss_per_device_kib.map_or("-".to_owned(), |kib| format!("{kib:.1}")),
        )
    }

    pub fn to_json(&self) -> String {
        let cell =
            |p: &Percentiles| json!({"p50": p.p50, "p95": p.p95, "p99": p.p99, "max": p.max});
        json!({
            "label": self.label, "devices": self.devices, "connectSecs": self.connect_secs,
            "assignToClaimMs": cell(&self.claim), "assignToDoneMs": cell(&self.completion),
            "heartbeatMs": cell(&self.heartbeat), "heartbeatsPerSec": self.heartbeats_per_sec,
            "jobsPerSec": self.jobs_per_sec, "jobs": self.audit.jobs, "succeeded": self.audit.succeeded,
            "lost": self.audit.not_succeeded, "rerun": self.audit.rerun, "settled": self.settled,
            "duplicatedClaims": self.duplicated_claims, "errors": self.errors,
            "rssMib": self.rss_mib, "rssPerDeviceKib": self.rss_per_device_kib,
        })
        .to_string()
    }
}

/// Resident memory of a process, from `/proc/PID/status` (Linux).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
