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
    /// Revoked devices by id.
    revocations: Mutex<HashMap<String, RevocationTimes>>,
    /// Assignments the server refused because their device had just been revoked.
    refused_after_revocation: Mutex<u64>,
}

/// When the owner's revocation of one device was answered, and when the device noticed.
#[derive(Debug, Default, Clone, Copy)]
pub struct RevocationTimes {
    /// When the `DELETE` was sent, once it answered 204.
    pub sent: Option<Instant>,
    /// Set once the `DELETE` answered 204.
    pub answered: Option<Instant>,
    /// The first `device.revoked` frame or 401 `revoked` the device saw.
    pub noticed: Option<Instant>,
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

    /// The owner decided to revoke this device: web users stop assigning to it.
    pub fn revoking(&self, device_id: &str) {
        lock(&self.revocations)
            .entry(device_id.to_owned())
            .or_default();
    }

    pub fn revoke_answered(&self, device_id: &str, sent: Instant, answered: Instant) {
        let mut revocations = lock(&self.revocations);
        let times = revocations.entry(device_id.to_owned()).or_default();
        times.sent = Some(sent);
        times.answered = Some(answered);
    }

    /// The device saw its revocation; only the first sighting counts.
    pub fn noticed_revocation(&self, device_id: &str) {
        let mut revocations = lock(&self.revocations);
        let times = revocations.entry(device_id.to_owned()).or_default();
        times.noticed.get_or_insert_with(Instant::now);
    }

    pub fn is_revoked(&self, device_id: &str) -> bool {
        lock(&self.revocations).contains_key(device_id)
    }

    pub fn revocations(&self) -> HashMap<String, RevocationTimes> {
        lock(&self.revocations).clone()
    }

    pub fn refused_after_revocation(&self) {
        *lock(&self.refused_after_revocation) += 1;
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
    /// Jobs of revoked devices that the revocation ended `interrupted`.
    pub interrupted_by_revocation: usize,
    /// Jobs of revoked devices that the revocation ended `cancelled` before they started.
    pub cancelled_by_revocation: usize,
    /// Jobs not accounted for: a live device's job not `succeeded`, or a revoked device's
    /// job left `queued` or `running` (or unreadable).
    pub lost: usize,
    /// Jobs that needed more than one attempt.
    pub rerun: usize,
}

impl Audit {
    pub fn ended_by_revocation(&self) -> usize {
        self.interrupted_by_revocation + self.cancelled_by_revocation
    }
}

/// The revocation scenario's results: how fast revoked devices noticed, and whether any
/// revoked token still worked.
#[derive(Debug, Clone)]
pub struct RevocationSummary {
    /// Revocations the server answered 204.
    pub revoked: usize,
    /// Revoked devices connected to another replica than the one that revoked them.
    pub on_other_replica: usize,
    /// From the `DELETE`'s answer to the device's first `device.revoked` frame or 401
    /// `revoked` (0 when the device noticed before the answer arrived).
    pub noticed: Percentiles,
    /// From sending the `DELETE` to the device noticing: the whole path through the server
    /// (and Redis, across replicas).
    pub sent_to_noticed: Percentiles,
    pub noticed_before_answer: usize,
    /// Revoked devices that had not noticed 10 s after the answer.
    pub never_noticed: usize,
    /// Revoked tokens whose probe heartbeat was not refused with 401 `revoked`.
    pub tokens_still_working: usize,
    /// Assignments already on their way when the device was revoked, refused with 404.
    pub refused_assignments: u64,
}

/// How long a revoked device may take to notice before it counts as never noticing.
pub const NOTICE_LIMIT: Duration = Duration::from_secs(10);

impl RevocationSummary {
    pub fn build(
        recorder: &Recorder,
        on_other_replica: usize,
        tokens_still_working: usize,
    ) -> RevocationSummary {
        let revocations = recorder.revocations();
        let answered: Vec<(Instant, Option<Instant>)> = revocations
            .values()
            .filter_map(|times| Some((times.answered?, times.noticed)))
            .collect();
        let latencies: Vec<Duration> = answered
            .iter()
            .filter_map(|(answered, noticed)| {
                Some(noticed.as_ref()?.saturating_duration_since(*answered))
            })
            .collect();
        let from_sent: Vec<Duration> = revocations
            .values()
            .filter_map(|times| Some(times.noticed?.saturating_duration_since(times.sent?)))
            .collect();
        RevocationSummary {
            revoked: answered.len(),
            on_other_replica,
            noticed_before_answer: answered
                .iter()
                .filter(|(answered, noticed)| noticed.is_some_and(|at| at < *answered))
                .count(),
            never_noticed: answered.len()
                - latencies
                    .iter()
                    .filter(|latency| **latency <= NOTICE_LIMIT)
                    .count(),
            noticed: Percentiles::of(latencies),
            sent_to_noticed: Percentiles::of(from_sent),
            tokens_still_working,
            refused_assignments: *lock(&recorder.refused_after_revocation),
        }
    }
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
    revocation: Option<RevocationSummary>,
    cpu: CpuUse,
    /// CPU seconds the database server's process tree used in the window (PostgreSQL's
    /// postmaster and its backends, `--database-pid`); unset when it was not given.
    database_secs: Option<f64>,
    /// What the jobs cost, for the CPU cell's milliseconds per job.
    job_cost: JobCost,
}

/// CPU seconds the server and the database used from the window's start until every job
/// was done, and the jobs done by then: the cost per job. Counted to the last completion
/// rather than to the window's end, so that a server that falls behind is charged for the
/// jobs it finishes after the window, and not only for those it finished in it.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobCost {
    pub server_secs: Option<f64>,
    /// The database server's process tree ([`process_tree_cpu_secs`]).
    pub database_secs: Option<f64>,
    pub jobs: usize,
}

/// CPU seconds spent during the assignment window by the load generator itself and by the
/// server, beside the window's length: on a machine with N cores, a side near N × window is
/// the one that saturated.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    pub window_secs: f64,
    pub generator_secs: Option<f64>,
    pub server_secs: Option<f64>,
}

impl CpuUse {
    fn cell(&self) -> String {
        let secs = |value: Option<f64>| value.map_or("-".to_owned(), |v| format!("{v:.1}"));
        format!(
            "{} / {} of {:.0}",
            secs(self.generator_secs),
            secs(self.server_secs),
            self.window_secs
        )
    }
}

/// User plus system CPU seconds of a process so far, from `/proc/PID/stat` (Linux; the
/// kernel reports them in USER_HZ, 100 per second). `None` reads this process.
pub fn cpu_secs(pid: Option<u32>) -> Option<f64> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_owned(),
        |pid| format!("/proc/{pid}/stat"),
    );
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name may hold spaces; the fields after it are space-separated.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// CPU seconds a process tree has used so far (Linux `/proc`): the process's own user and
/// system time, the time of the children it has reaped (`cutime` and `cstime`: a PostgreSQL
/// backend that ended lands there), and the user and system time of its live children. For
/// PostgreSQL's postmaster that is the whole database server: backends, autovacuum, the
/// WAL writer and the checkpointer.
pub fn process_tree_cpu_secs(pid: u32) -> Option<f64> {
    let live: f64 = child_pids(pid)
        .into_iter()
        .filter_map(|child| cpu_secs(Some(child)))
        .sum();
    // The parent is read last: a child that ends in between is then counted in its
    // cutime/cstime (at worst twice, for the instant it takes) rather than not at all.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    // utime, stime, cutime and cstime: fields 14 to 17 of the line, 12 to 15 after the name.
    let own = ticks(11)? + ticks(12)? + ticks(13)? + ticks(14)?;
    Some(own as f64 / 100.0 + live)
}

/// The live children of a process: from `/proc/PID/task/*/children` where the kernel has
/// it, else by scanning `/proc` for processes whose parent is `pid`.
fn child_pids(pid: u32) -> Vec<u32> {
    let listed: Option<Vec<u32>> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()
        .and_then(|tasks| {
            let lists: Vec<String> = tasks
                .flatten()
                .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
                .collect();
            (!lists.is_empty()).then(|| {
                lists
                    .iter()
                    .flat_map(|list| list.split_whitespace())
                    .filter_map(|child| child.parse().ok())
                    .collect()
            })
        });
    if let Some(children) = listed {
        return children;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|candidate| {
            std::fs::read_to_string(format!("/proc/{candidate}/stat"))
                .ok()
                .and_then(|stat| {
                    // The parent's pid is the second field after the name.
                    let parent = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
                    parent.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
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
        revocation: Option<RevocationSummary>,
        cpu: CpuUse,
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
            revocation,
            cpu,
            database_secs: None,
            job_cost: JobCost::default(),
        }
    }

    /// The report with the CPU seconds the database server used in the window
    /// ([`process_tree_cpu_secs`] of its postmaster) and what the jobs cost.
    pub fn with_costs(self, database_secs: Option<f64>, job_cost: JobCost) -> Report {
        Report {
            database_secs,
            job_cost,
            ..self
        }
    }

    /// CPU milliseconds per job done ([`JobCost`]): the server's, the database's and their
    /// sum (unset where a side was not measured; on SQLite the database is inside the
    /// server, so the server's figure is the whole cost).
    fn cpu_ms_per_job(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        let jobs = self.job_cost.jobs;
        let per_job = |secs: Option<f64>| {
            secs.filter(|_| jobs > 0)
                .map(|secs| secs * 1000.0 / jobs as f64)
        };
        let server = per_job(self.job_cost.server_secs);
        let database = per_job(self.job_cost.database_secs);
        (
            server,
            database,
            server
                .zip(database)
                .map(|(server, database)| server + database),
        )
    }

    fn cpu_cell(&self) -> String {
        let (server, database, total) = self.cpu_ms_per_job();
        let ms = |value: Option<f64>| value.map_or("-".to_owned(), |v| format!("{v:.2}"));
        format!(
            "{}; {} / {} / {} ms/job",
            self.cpu.cell(),
            ms(server),
            ms(database),
            ms(total)
        )
    }

    pub fn table_header() -> &'static str {
        "| run | devices | connect s | assign→claim ms p50/p95/p99/max | assign→done ms p50/p95/p99/max | heartbeat ms p50/p95/p99/max | heartbeats/s | jobs/s | jobs ok/assigned | lost | rerun | dup claims | errors | RSS MiB | RSS/device KiB | CPU s load / server of window s; CPU ms per job done server / database / total |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    }

    pub fn table_row(&self) -> String {
        let errors: u64 = self.errors.values().sum();
        format!(
            "| {} | {} | {:.1} | {} | {} | {} | {:.0} | {:.0} | {}/{} | {} | {} | {} | {} | {} | {} | {} |",
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
            self.audit.lost,
            self.audit.rerun,
            self.duplicated_claims,
            errors,
            self.rss_mib.map_or("-".to_owned(), |mib| format!("{mib:.0}")),
            self.rss_per_device_kib.map_or("-".to_owned(), |kib| format!("{kib:.1}")),
            self.cpu_cell(),
        )
    }

    /// The line printed after the row when devices were revoked: the table keeps its columns
    /// for every scenario.
    pub fn revocation_line(&self) -> Option<String> {
        let revocation = self.revocation.as_ref()?;
        Some(format!(
            "revocation ({}): {} devices revoked ({} on another replica than the revoking one); \
             revoke→noticed ms p50/p95/p99/max {} ({} noticed before the DELETE answered; \
             from sending the DELETE: {}); \
             never noticed within {} s: {}; jobs ended by revocation: {} ({} interrupted, {} cancelled); \
             assignments refused after revocation: {}; revoked tokens still working: {}",
            self.label,
            revocation.revoked,
            revocation.on_other_replica,
            revocation.noticed.cell(),
            revocation.noticed_before_answer,
            revocation.sent_to_noticed.cell(),
            NOTICE_LIMIT.as_secs(),
            revocation.never_noticed,
            self.audit.ended_by_revocation(),
            self.audit.interrupted_by_revocation,
            self.audit.cancelled_by_revocation,
            revocation.refused_assignments,
            revocation.tokens_still_working,
        ))
    }

    pub fn to_json(&self) -> String {
        let (server_ms, database_ms, total_ms) = self.cpu_ms_per_job();
        let cell =
            |p: &Percentiles| json!({"p50": p.p50, "p95": p.p95, "p99": p.p99, "max": p.max});
        let revocation = self.revocation.as_ref().map(|revocation| {
            json!({
                "revoked": revocation.revoked, "onOtherReplica": revocation.on_other_replica,
                "revokeToNoticedMs": cell(&revocation.noticed),
                "noticedBeforeAnswer": revocation.noticed_before_answer,
                "sentToNoticedMs": cell(&revocation.sent_to_noticed),
                "neverNoticed": revocation.never_noticed,
                "endedByRevocation": self.audit.ended_by_revocation(),
                "interrupted": self.audit.interrupted_by_revocation,
                "cancelled": self.audit.cancelled_by_revocation,
                "refusedAssignments": revocation.refused_assignments,
                "tokensStillWorking": revocation.tokens_still_working,
            })
        });
        json!({
            "label": self.label, "devices": self.devices, "connectSecs": self.connect_secs,
            "assignToClaimMs": cell(&self.claim), "assignToDoneMs": cell(&self.completion),
            "heartbeatMs": cell(&self.heartbeat), "heartbeatsPerSec": self.heartbeats_per_sec,
            "jobsPerSec": self.jobs_per_sec, "jobs": self.audit.jobs, "succeeded": self.audit.succeeded,
            "lost": self.audit.lost, "rerun": self.audit.rerun, "settled": self.settled,
            "duplicatedClaims": self.duplicated_claims, "errors": self.errors,
            "rssMib": self.rss_mib, "rssPerDeviceKib": self.rss_per_device_kib,
            "revocation": revocation,
            "cpuSecs": { "window": self.cpu.window_secs, "generator": self.cpu.generator_secs,
                         "server": self.cpu.server_secs, "database": self.database_secs },
            "jobCost": { "jobs": self.job_cost.jobs, "serverSecs": self.job_cost.server_secs,
                         "databaseSecs": self.job_cost.database_secs },
            "cpuMsPerJob": { "server": server_ms, "database": database_ms, "total": total_ms },
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

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn this_process_cpu_time_is_read_and_grows() {
        let before = cpu_secs(None).unwrap_or(-1.0);
        assert!(before >= 0.0);
        let mut spin = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            spin = spin.wrapping_add(std::hint::black_box(1));
        }
        assert!(spin > 0);
        assert!(cpu_secs(None).unwrap_or(0.0) > before);
        assert_eq!(cpu_secs(Some(u32::MAX)), None);
    }

    #[test]
    fn a_process_tree_counts_its_reaped_and_live_children() {
        // Shell arithmetic only: no grandchildren, whose time would reach the child's cutime
        // only when it ends.
        let spin = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";
        let me = std::process::id();
        let before = process_tree_cpu_secs(me).unwrap_or(-1.0);
        assert!(before >= cpu_secs(None).unwrap_or(f64::MAX));
        // A child that spins and is reaped: its time lands in our cutime/cstime.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(spin)
            .status();
        assert!(status.is_ok_and(|status| status.success()));
        let after = process_tree_cpu_secs(me).unwrap_or(0.0);
        assert!(after - before >= 0.05, "{before} → {after}");
        // A live child's time is counted too.
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{spin}; sleep 30"))
            .spawn();
        let Ok(mut child) = child else {
            panic!("sh did not start");
        };
        let started = std::time::Instant::now();
        while cpu_secs(Some(child.id())).unwrap_or(0.0) < 0.1 && started.elapsed().as_secs() < 20 {
            std::thread::sleep(Duration::from_millis(50));
        }
        let listed = child_pids(me).contains(&child.id());
        let live = process_tree_cpu_secs(me).unwrap_or(0.0);
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed);
        assert!(live - after >= 0.05, "{after} → {live}");
        assert_eq!(process_tree_cpu_secs(u32::MAX), None);
    }
}
