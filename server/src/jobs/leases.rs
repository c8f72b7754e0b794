//! The fenced lease protocol of devices: heartbeat, claim, progress, complete, and the
//! outage recovery of a run: reattach (the run kept going) and resume (it was lost).
//!
//! A claim hands the device a random lease token (stored as a hash) with an expiry.
//! Heartbeats and progress extend only a lease the device still holds; every write about a
//! run names its lease, and a wrong, old or expired one is 409 `stale_lease`. The rows
//! change through [`crate::store::job_rows`]; this module decides which change a call earns.
//!
//! **Invariant:** a device only ever reads or writes its own jobs (another device's job is
//! `not_found`), and only the holder of the current, unexpired lease moves a run forward.

use serde_json::json;
use tether_protocol::capabilities::{Capabilities, EngineCheck};
use tether_protocol::changes::Changes;
use tether_protocol::devices::{
    HeartbeatParams, HeartbeatResponse, HeldLease, Intervals, LeaseStatus,
};
use tether_protocol::jobs::{
    ClaimedJob, CompleteParams, EarlierRun, Job, JobOutcome, JobState, LeaseGrant, Outcome,
    ProgressParams, ProgressResponse, MAX_AUTO_RESUMES, MAX_EARLIER_TEXT_CHARS,
    MAX_LINES_PER_PROGRESS, MAX_LINE_AGE_MS, MAX_LINE_BYTES, RESUME_WINDOW_SECS,
};
use tether_protocol::report::{ObservedRun, WorkerReport};
use tether_protocol::text::{self, TextKind};
use tether_protocol::{Code, JobId, LeaseToken};

use crate::clock::{secs, to_time, Millis};
use crate::config::Config;
use crate::credentials;
use crate::devices::presence::{self, Presence};
use crate::devices::{self, DeviceIdentity};
use crate::error::ApiError;
use crate::jobs;
use crate::jobs::claim_gates::ClaimGates;
use crate::jobs::delivery::{self, ReportedDelivery};
use crate::jobs::live::NewLines;
use crate::jobs::task_context::{self, EarlierJob};
use crate::store::job_rows::in_one_call::Claimed;
use crate::store::job_rows::{self, truncate, EndCause, JobRow, OpenDecisions};
use crate::store::ledger::{self, LedgerKind};
use crate::store::{stored_id, InTx, Store, Tx};

/// Most held runs one heartbeat may report.
pub const MAX_RUNNING_PER_HEARTBEAT: usize = 100;
/// Longest completion summary, in characters.
pub const MAX_SUMMARY_CHARS: usize = 10_000;

/// A checked [`HeartbeatParams`]: the device's report and at most
/// [`MAX_RUNNING_PER_HEARTBEAT`] runs it holds.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    capabilities: Capabilities,
    running: Vec<HeldLease>,
}

impl TryFrom<HeartbeatParams> for Heartbeat {
    type Error = ApiError;

    fn try_from(params: HeartbeatParams) -> Result<Heartbeat, ApiError> {
        if params.running.len() > MAX_RUNNING_PER_HEARTBEAT {
            return Err(ApiError::invalid_field(
                "running",
                "at most 100 runs per heartbeat.",
            ));
        }
        let mut capabilities = params.capabilities;
        // An engine check is advice from the device: kept, but cut to its bounds, so a
        // hostile device cannot store megabytes in it.
        for engine in &mut capabilities.engines {
            engine.check = engine.check.take().map(EngineCheck::bounded);
        }
        Ok(Heartbeat {
            capabilities,
            running: params.running,
        })
    }
}

/// A checked [`ProgressParams`]: the batch number, its output lines and a status, each cut
/// to [`MAX_LINE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressReport {
    seq: i64,
    lines: Vec<String>,
    /// Absent when the device sent none or an empty one.
    status: Option<String>,
    /// How long before the call each line was printed, in milliseconds, at most
    /// [`MAX_LINE_AGE_MS`]; empty when the device did not say.
    ages: Vec<Millis>,
    /// What the attempt used, bounded; absent when the device said nothing new.
    observed: Option<ObservedRun>,
}

impl ProgressReport {
    /// Each line's time: `now` less its age, in the order printed, never after `now`.
    /// Without ages, none: the lines take the time they were received.
    fn line_times(&self, now: Millis) -> Vec<Millis> {
        let mut earliest = Millis::MIN;
        self.ages
            .iter()
            .map(|age| {
                earliest = earliest.max(now - age);
                earliest
            })
            .collect()
    }
}

impl TryFrom<ProgressParams> for ProgressReport {
    type Error = ApiError;

    fn try_from(params: ProgressParams) -> Result<ProgressReport, ApiError> {
        if params.lines.len() > MAX_LINES_PER_PROGRESS {
            return Err(ApiError::invalid_field(
                "lines",
                "at most 200 lines per call.",
            ));
        }
        let seq = i64::try_from(params.seq)
            .map_err(|_| ApiError::invalid_field("seq", "is too large."))?;
        let ages = params.line_ages_ms.unwrap_or_default();
        if !ages.is_empty() && ages.len() != params.lines.len() {
            return Err(ApiError::invalid_field(
                "lineAgesMs",
                "must have one age per line.",
            ));
        }
        Ok(ProgressReport {
            ages: ages
                .iter()
                .map(|age| Millis::try_from((*age).min(MAX_LINE_AGE_MS)).unwrap_or(0))
                .collect(),
            seq,
            lines: params
                .lines
                .iter()
                .map(|line| truncate(line, MAX_LINE_BYTES))
                .collect(),
            status: params
                .status
                .as_deref()
                .filter(|status| !status.is_empty())
                .map(|status| truncate(status, MAX_LINE_BYTES)),
            observed: params
                .observed
                .map(ObservedRun::bounded)
                .filter(|observed| !observed.is_empty()),
        })
    }
}

/// A checked [`CompleteParams`]: how the device says the run ended (never `interrupted`),
/// and what it changed when the list it sent is well formed.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    outcome: JobOutcome,
    changes: ReportedChanges,
    delivery: ReportedDelivery,
    /// Why the worker's report was dropped, when it was.
    report_dropped: Option<String>,
    /// What the attempt used, bounded; absent when the device said nothing.
    observed: Option<ObservedRun>,
}

/// The worker's report as it may be kept, or why it was dropped. A `null` is none.
fn check_report(raw: Option<serde_json::Value>) -> Result<Option<WorkerReport>, String> {
    let Some(raw) = raw.filter(|raw| !raw.is_null()) else {
        return Ok(None);
    };
    let mut report = WorkerReport::parse(raw)
        .map_err(|why| truncate(&text::sanitize(&why.0, TextKind::Name), 300))?;
    // Checked already; made visible as summaries are, in case the rules ever part.
    report.map_text(|text| text::sanitize(text, TextKind::MultiLine).into_owned());
    Ok(Some(report))
}

/// The change list of a completion.
#[derive(Debug, Clone, PartialEq)]
enum ReportedChanges {
    None,
    Checked(Changes),
    /// Of the wrong shape: dropped, and the timeline says why.
    Dropped(String),
}

impl ReportedChanges {
    fn check(raw: Option<serde_json::Value>) -> ReportedChanges {
        let Some(raw) = raw.filter(|raw| !raw.is_null()) else {
            return ReportedChanges::None;
        };
        let parsed = serde_json::from_value::<Changes>(raw).map_err(|err| err.to_string());
        match parsed.and_then(|changes| changes.check().map(|()| changes).map_err(|e| e.0)) {
            Ok(changes) => ReportedChanges::Checked(changes),
            Err(why) => ReportedChanges::Dropped(truncate(&why, 300)),
        }
    }
}

impl TryFrom<CompleteParams> for Completion {
    type Error = ApiError;

    fn try_from(params: CompleteParams) -> Result<Completion, ApiError> {
        if params.outcome == Outcome::Interrupted {
            return Err(ApiError::invalid_field(
                "outcome",
                "must be succeeded, failed, blocked or cancelled; only the server interrupts.",
            ));
        }
        if params.summary.chars().count() > MAX_SUMMARY_CHARS {
            return Err(ApiError::invalid_field(
                "summary",
                "must be at most 10000 characters.",
            ));
        }
        // What the computer reports is kept, made visible, never refused: a refused
        // completion would cost the run its outcome.
        let summary = text::sanitize(&params.summary, TextKind::MultiLine).into_owned();
        let (report, report_dropped) = match check_report(params.report) {
            Ok(report) => (report, None),
            Err(why) => (None, Some(why)),
        };
        Ok(Completion {
            outcome: JobOutcome {
                outcome: params.outcome,
                summary,
                exit_code: params.exit_code,
                report,
            },
            changes: ReportedChanges::check(params.changes),
            delivery: ReportedDelivery::check(params.delivery),
            report_dropped,
            observed: params
                .observed
                .map(ObservedRun::bounded)
                .filter(|observed| !observed.is_empty()),
        })
    }
}

/// Records the device's report and extends the leases it still holds; the rest are `lost`.
///
/// A device that holds no run and whose event stream is open on this replica (`streaming`)
/// is asked to heartbeat at the idle pace: its pings on the stream keep its contact time
/// meanwhile, so a heartbeat only carries its report and a claim's safety net. The agent
/// heartbeats at once when it claims a run, and is then asked for the busy pace again.
///
/// # Errors
/// A database error.
pub async fn heartbeat(
    store: &Store,
    presence: &Presence,
    device: &DeviceIdentity,
    beat: Heartbeat,
    streaming: bool,
    config: &Config,
) -> Result<HeartbeatResponse, ApiError> {
    let pace = if beat.running.is_empty() && streaming && pings_keep_online(config) {
        config.idle_heartbeat_secs
    } else {
        config.heartbeat_secs
    };
    let now = store.now();
    let lease_until = now + secs(config.lease_secs);
    let device_id = device.device_id.as_str();
    let report_json = serde_json::to_string(&beat.capabilities)?;
    let report = presence::digest(&report_json);
    let write_report = presence.needs_report(device_id, &report, now);
    if beat.running.is_empty() && !write_report {
        // "Still here" only: no write now, and no read when its queue is known empty (see
        // `presence`).
        presence.saw(device_id, now);
        let queued = if presence.queue_known_empty(device_id, now) {
            0
        } else {
            let generation = presence.queue_generation();
            let queued = job_rows::count_queued_now(store, &device.device_id).await?;
            presence.counted_queue(device_id, queued, generation, now);
            queued
        };
        return Ok(heartbeat_answer(
            now,
            Vec::new(),
            Vec::new(),
            queued,
            pace,
            config,
        ));
    }
    let mut tx = store.begin().await?;
    if write_report {
        devices::record_report(&mut tx, device, &beat.capabilities, &report_json, now).await?;
    } else {
        presence.saw(device_id, now);
    }
    let mut leases = Vec::new();
    let mut lost = Vec::new();
    for held in beat.running {
        let job = job_rows::lock_for_device(&mut tx, &device.device_id, &held.job_id).await?;
        match job.filter(|job| job_rows::holds_lease(job, &held.lease_token, now)) {
            Some(job) => {
                job_rows::extend_lease(&mut tx, &job, lease_until).await?;
                leases.push(LeaseStatus {
                    job_id: held.job_id,
                    lease_expires_at: to_time(lease_until),
                    cancel_requested: job.cancel_requested != 0,
                });
            }
            None => lost.push(held.job_id),
        }
    }
    let queued = job_rows::count_queued(&mut tx, &device.device_id).await?;
    tx.commit().await?;
    if write_report {
        presence.wrote_report(device_id, report, now);
    }
    Ok(heartbeat_answer(now, leases, lost, queued, pace, config))
}

/// Whether a stream's traffic alone keeps its device online: the device pings it, or the
/// server does every `events_ping_secs` and hears the pong, and that contact is noted at most
/// once per heartbeat interval; both must fit twice in the online window.
fn pings_keep_online(config: &Config) -> bool {
    config.online_secs >= 2 * config.events_ping_secs.max(config.heartbeat_secs)
}

fn heartbeat_answer(
    now: Millis,
    leases: Vec<LeaseStatus>,
    lost: Vec<JobId>,
    queued: i64,
    heartbeat_secs: u64,
    config: &Config,
) -> HeartbeatResponse {
    HeartbeatResponse {
        server_time: to_time(now),
        leases,
        lost,
        queued: u64::try_from(queued).unwrap_or(0),
        intervals: Intervals {
            heartbeat_secs,
            lease_secs: config.lease_secs,
        },
    }
}

/// Claims the device's oldest queued job, unless the account is at its concurrent-run limit.
///
/// # Errors
/// A database error.
pub async fn claim(
    store: &Store,
    gates: &ClaimGates,
    presence: &Presence,
    device: &DeviceIdentity,
    config: &Config,
) -> Result<Option<ClaimedJob>, ApiError> {
    let device_id = device.device_id.as_str();
    // A device asks again after every run; when its last claim took the only queued job
    // (and nothing was queued since), there is nothing to read.
    if presence.queue_known_empty(device_id, store.now()) {
        return Ok(None);
    }
    let generation = presence.queue_generation();
    let lease_token = credentials::new_lease_token()?;
    let lease_until = store.now() + secs(config.lease_secs);
    let claimed = match store.postgres_pool() {
        Some(pool) => {
            // This replica's claims of one account take turns (see `claim_gates`): a burst
            // for one freed slot then waits here, not on the account's lock with a
            // connection each.
            let _turn = gates.enter(&device.account_id).await;
            let hash = credentials::hash_token(lease_token.expose());
            let limit = config.max_running_per_account;
            let (device_id, account_id) = (&device.device_id, &device.account_id);
            let now = store.now();
            job_rows::in_one_call::claim(
                pool,
                device_id,
                account_id,
                limit,
                &hash,
                lease_until,
                now,
            )
            .await?
        }
        None => claim_on_sqlite(store, device, &lease_token, lease_until, config).await?,
    };
    let Some(Claimed { row: job, drained }) = claimed else {
        return Ok(None);
    };
    if drained {
        presence.counted_queue(device_id, 0, generation, store.now());
    }
    tracing::info!(job_id = %job.id, attempt = job.attempt, "job claimed");
    let (chain, continues) = chain_of(store, &job).await?;
    let spec = job.spec()?;
    let context = task_context::section(device, &job, &spec, &chain);
    Ok(Some(ClaimedJob {
        id: stored_id(job.id.clone())?,
        attempt: u32::try_from(job.attempt).unwrap_or(u32::MAX),
        lease_token,
        lease_expires_at: to_time(lease_until),
        spec,
        resumed: None,
        continues,
        context: Some(context),
    }))
}

/// A claim on SQLite, after a read that most claims stop at. Answers the row as claimed.
async fn claim_on_sqlite(
    store: &Store,
    device: &DeviceIdentity,
    lease_token: &LeaseToken,
    lease_until: Millis,
    config: &Config,
) -> Result<Option<Claimed>, ApiError> {
    let limit = config.max_running_per_account;
    let (device_id, account_id) = (&device.device_id, &device.account_id);
    // Claims come with every heartbeat, wake-up and stream connect; most find nothing, and
    // then they must not wait for the writer.
    if job_rows::may_claim(store, device_id, account_id, limit)
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let hash = credentials::hash_token(lease_token.expose());
    let now = store.now();
    job_rows::in_one_call::claim_sqlite(
        store,
        device_id,
        account_id,
        limit,
        &hash,
        lease_until,
        now,
    )
    .await
}

/// A claimed job's earlier runs and the one it continues, for its context section: read
/// only for a job that continues or runs again another (most are alone and read nothing).
async fn chain_of(
    store: &Store,
    job: &JobRow,
) -> Result<(Vec<EarlierJob>, Option<EarlierRun>), ApiError> {
    if !task_context::is_chained(job) && job.continues.is_none() {
        return Ok((Vec::new(), None));
    }
    let mut tx = store.begin().await?;
    let chain = earlier_runs(&mut tx, job, store.now()).await?;
    let continues = earlier_run(&mut tx, job, &chain).await?;
    Ok((chain, continues))
}

/// The earlier runs of a claimed job's chain, newest first, for its context section: one
/// statement for a job that continues or runs again another, none for one alone.
async fn earlier_runs(tx: &mut Tx, job: &JobRow, now: Millis) -> Result<Vec<EarlierJob>, ApiError> {
    if !task_context::is_chained(job) {
        return Ok(Vec::new());
    }
    let reads = InTx { tx, now };
    task_context::earlier_runs(reads, job, task_context::SECTION_RUNS).await
}

/// What a claimed follow-up is told of the job it continues: from its chain's earlier runs
/// when they hold it (no statement of its own), else read.
async fn earlier_run(
    tx: &mut Tx,
    job: &JobRow,
    chain: &[EarlierJob],
) -> Result<Option<EarlierRun>, ApiError> {
    let Some(earlier_id) = &job.continues else {
        return Ok(None);
    };
    let (id, prompt, outcome) = match chain.iter().find(|run| &run.id == earlier_id) {
        Some(run) => (run.id.clone(), run.prompt.clone(), run.outcome.clone()),
        None => {
            let read = job_rows::read_for_device(tx, &job.device_id, earlier_id).await?;
            let Some(earlier) = read else {
                return Ok(None);
            };
            let outcome: Option<JobOutcome> = match &earlier.outcome_json {
                Some(json) => Some(serde_json::from_str(json)?),
                None => None,
            };
            let prompt = earlier.spec()?.prompt;
            (earlier.id, prompt, outcome)
        }
    };
    let cut = |text: &str| {
        text.chars()
            .take(MAX_EARLIER_TEXT_CHARS)
            .collect::<String>()
    };
    Ok(Some(EarlierRun {
        job_id: stored_id(id)?,
        prompt: cut(&prompt),
        summary: outcome
            .as_ref()
            .map_or_else(String::new, |o| cut(&o.summary)),
        outcome: outcome.map(|o| o.outcome),
    }))
}

/// What a progress call did: the device's answer, and the lines it appended.
pub struct Progressed {
    pub answer: ProgressResponse,
    /// For the job's live feed; none when the batch was a retry already applied.
    pub lines: Option<NewLines>,
}

/// Appends output lines and a status, and extends the lease. A `seq` at or below the last
/// applied one changes nothing but the lease, so retries are safe.
///
/// # Errors
/// 404 for a job not of this device, 409 `stale_lease`.
pub async fn progress(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    lease: &LeaseToken,
    report: ProgressReport,
    config: &Config,
) -> Result<Progressed, ApiError> {
    let now = store.now();
    let lease_until = now + secs(config.lease_secs);
    let ats = report.line_times(now);
    let ProgressReport {
        seq,
        lines: texts,
        status,
        observed,
        ages: _,
    } = report;
    let mut owned: Vec<(&'static str, String)> =
        texts.into_iter().map(|text| ("output", text)).collect();
    owned.extend(status.map(|status| ("status", status)));
    let lines: Vec<job_rows::Line> = owned
        .iter()
        .map(|(kind, text)| (*kind, text.as_str()))
        .collect();
    let answer = |cancel_requested| ProgressResponse {
        lease_expires_at: to_time(lease_until),
        cancel_requested,
    };
    // What the attempt used merges into the stored list, so it takes the transaction.
    let applied = if observed.is_some() {
        None
    } else {
        job_rows::progress_in_one(
            store,
            &device.device_id,
            job_id,
            lease,
            seq,
            &lines,
            &ats,
            lease_until,
            now,
        )
        .await?
    };
    if let Some((cancel_requested, appended)) = applied {
        drop(lines);
        return Ok(Progressed {
            answer: answer(cancel_requested),
            lines: Some(NewLines::new(appended, owned, ats, now)),
        });
    }
    let mut tx = store.begin().await?;
    let job = job_rows::fenced(&mut tx, &device.device_id, job_id, lease, now).await?;
    let applies = seq > job.progress_seq;
    let appended = if applies && !lines.is_empty() {
        Some(job_rows::append_timed_events(&mut tx, &job, now, &lines, &ats).await?)
    } else {
        None
    };
    drop(lines);
    let observed = match observed.filter(|_| applies) {
        Some(used) => job.observed_with(used)?,
        None => None,
    };
    let seq = applies.then_some(seq);
    job_rows::record_progress(&mut tx, &job, seq, lease_until, observed.as_deref()).await?;
    tx.commit().await?;
    Ok(Progressed {
        answer: answer(job.cancel_requested != 0),
        lines: appended.map(|appended| NewLines::new(appended, owned, ats, now)),
    })
}

/// How a run's end went, for [`crate::notices::Notices::run_ended`].
#[derive(Debug, Clone, Copy)]
pub struct RunEnd {
    /// False when the device repeated a completion already recorded.
    pub first_end: bool,
    /// The account was at its concurrent-run limit before this end.
    pub freed_full_account: bool,
}

/// A completed job and how its end went.
pub struct Completed {
    pub job: Job,
    /// What [`crate::notices::Notices::run_ended`] needs to know of this end.
    pub end: RunEnd,
}

/// Records how the run ended and releases the lease. The same call again with the same
/// lease answers the recorded job (with `end.first_end` false).
///
/// # Errors
/// 404 for a job not of this device, 409 `stale_lease`.
pub async fn complete(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    lease: &LeaseToken,
    completion: Completion,
    config: &Config,
) -> Result<Completed, ApiError> {
    let Completion {
        outcome,
        changes,
        delivery,
        report_dropped,
        observed,
    } = completion;
    let now = store.now();
    let plain = matches!(delivery, ReportedDelivery::None)
        && !matches!(changes, ReportedChanges::Dropped(_))
        && report_dropped.is_none()
        && observed.is_none();
    if plain {
        let changes_json = match &changes {
            ReportedChanges::Checked(changes) => Some(serde_json::to_string(changes)?),
            _ => None,
        };
        let device_id = &device.device_id;
        let ended = match store.postgres_pool() {
            Some(pool) => {
                let end = job_rows::in_one_call::end;
                end(pool, device_id, job_id, lease, &outcome, changes_json, now).await?
            }
            None => {
                let end = job_rows::in_one_call::end_sqlite;
                end(store, device_id, job_id, lease, &outcome, changes_json, now).await?
            }
        };
        if let Some(ended) = ended {
            return answer_ended(store, device, ended, config).await;
        }
    }
    let mut tx = store.begin().await?;
    let job = job_rows::lock_for_device(&mut tx, &device.device_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    if job.state()?.is_final() {
        let same_lease = job_rows::is_hash_of(job.lease_token_hash.as_deref(), lease);
        drop(tx);
        return if same_lease {
            let job = jobs::get(store, &device.account_id, job_id).await?;
            let end = RunEnd {
                first_end: false,
                freed_full_account: false,
            };
            Ok(Completed { job, end })
        } else {
            Err(job_rows::stale_lease())
        };
    }
    if !job_rows::holds_lease(&job, lease, now) {
        return Err(job_rows::stale_lease());
    }
    // What was dropped is said in the timeline, all in one statement.
    let mut dropped = Vec::new();
    match &changes {
        ReportedChanges::None => {}
        ReportedChanges::Checked(changes) => {
            job_rows::store_changes(&mut tx, &job, changes).await?
        }
        ReportedChanges::Dropped(why) => {
            dropped.push(format!(
                "The computer's list of changes was dropped: {why}."
            ));
        }
    }
    match &delivery {
        ReportedDelivery::None => {}
        ReportedDelivery::Checked(report) => {
            job_rows::store_delivery(&mut tx, &job, report).await?;
            let account_id = job.account_id()?;
            delivery::record(&mut tx, &account_id, &job.id, report, now).await?;
        }
        ReportedDelivery::Dropped(why) => {
            dropped.push(format!(
                "The computer's delivery report was dropped: {why}."
            ));
        }
    }
    if let Some(why) = &report_dropped {
        dropped.push(format!("The worker's report was dropped: {why}."));
    }
    if !dropped.is_empty() {
        job_rows::append_events(&mut tx, &job, now, "system", &dropped).await?;
    }
    if let Some(json) = observed
        .map(|used| job.observed_with(used))
        .transpose()?
        .flatten()
    {
        job_rows::store_observed(&mut tx, &job, &json).await?;
    }
    job_rows::finish(&mut tx, &job, &outcome, EndCause::Device, now).await?;
    // Read after this run ended: with one fewer than the limit going, the account was full
    // before, so a claim may have been held back. Of two ends at once, at least one sees it
    // (each counts the other's run as still going until it commits).
    let still_running = job_rows::running_in_account(&mut tx, &device.account_id).await?;
    // On PostgreSQL the answer is read on the transaction's connection, before it commits
    // (one pooled use fewer); SQLite's one writer is not held for it.
    let answer = if matches!(tx, Tx::Postgres(_)) {
        let reads = InTx { tx: &mut tx, now };
        Some(jobs::read(reads, &device.account_id, job_id).await?)
    } else {
        None
    };
    tx.commit().await?;
    tracing::info!(job_id = %job_id, outcome = outcome.outcome.state().as_str(), "job completed");
    let job = match answer {
        Some(job) => job,
        None => jobs::get(store, &device.account_id, job_id).await?,
    };
    let end = RunEnd {
        first_end: true,
        freed_full_account: still_running + 1 >= i64::from(config.max_running_per_account),
    };
    Ok(Completed { job, end })
}

/// The answer to a run ended in one statement: the job as that statement read it, or
/// read again in full when it has decisions, evidence or later runs.
async fn answer_ended(
    store: &Store,
    device: &DeviceIdentity,
    ended: job_rows::in_one_call::Ended,
    config: &Config,
) -> Result<Completed, ApiError> {
    let job_id = stored_id(ended.row.id.clone())?;
    let state = ended.row.state()?;
    tracing::info!(job_id = %job_id, outcome = state.as_str(), "job completed");
    let job = if ended.has_more {
        jobs::get(store, &device.account_id, &job_id).await?
    } else {
        let mut events = ended.events;
        crate::jobs::timeline::read_all(&mut events);
        ended.row.into_job(events)?
    };
    let end = RunEnd {
        first_end: true,
        freed_full_account: ended.going_before >= i64::from(config.max_running_per_account),
    };
    Ok(Completed { job, end })
}

/// Gives a run that kept going through an outage a new lease for the same attempt. Allowed
/// when `lease` is the last lease issued for that attempt, the attempt is the job's
/// latest, and the job is still running or waiting, or was interrupted only because its
/// lease expired (not cancelled by its owner, not by a revocation). An interrupted job runs
/// again.
///
/// # Errors
/// 404 for a job not of this device, 409 `stale_lease` otherwise.
pub async fn reattach(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    attempt: u32,
    lease: &LeaseToken,
    config: &Config,
) -> Result<LeaseGrant, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let job = job_rows::lock_for_device(&mut tx, &device.device_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    let last_lease = job_rows::is_hash_of(job.last_lease_hash.as_deref(), lease);
    if job.attempt != i64::from(attempt) || !last_lease {
        return Err(ApiError::new(
            Code::StaleLease,
            "This is not the last lease of the job's latest attempt; stop this run.",
        ));
    }
    let state = job.state()?;
    let revivable = match state {
        JobState::Running | JobState::Waiting => true,
        JobState::Interrupted => lease_expired_only(&job),
        _ => false,
    };
    if !revivable {
        return Err(ApiError::new(
            Code::StaleLease,
            format!(
                "The job ended ({}) and cannot be taken back; stop this run.",
                ended_why(&job, state)
            ),
        ));
    }
    let lease_token = credentials::new_lease_token()?;
    let lease_until = now + secs(config.lease_secs);
    job_rows::revive(&mut tx, &job, &lease_token, lease_until, None).await?;
    let again = if state == JobState::Interrupted {
        "; running again"
    } else {
        ""
    };
    let text = format!(
        "Reattached by the device after an outage (attempt {}){again}.",
        job.attempt
    );
    job_rows::append_events(&mut tx, &job, now, "system", &[text]).await?;
    let detail = json!({ "jobId": job.id, "deviceId": job.device_id, "attempt": job.attempt,
                         "wasInterrupted": state == JobState::Interrupted });
    ledger::record(
        &mut tx,
        &job.account_id()?,
        now,
        LedgerKind::JobReattached,
        &job.id,
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, attempt = job.attempt, "run reattached");
    Ok(LeaseGrant {
        job_id: job_id.clone(),
        attempt,
        lease_token,
        lease_expires_at: to_time(lease_until),
    })
}

/// Carries on a run the device lost to a restart: a new attempt of the same job (same spec
/// and folder) with a new lease. Allowed when the lost `attempt` is the job's latest, the
/// job is running or waiting or was interrupted only because its lease expired, at most
/// [`MAX_AUTO_RESUMES`] times per job, within [`RESUME_WINDOW_SECS`] of the interruption,
/// and never for a run its owner cancelled.
///
/// # Errors
/// 404 for a job not of this device, 409 `resume_refused` naming the reason.
pub async fn resume(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    attempt: u32,
    config: &Config,
) -> Result<ClaimedJob, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let job = job_rows::lock_for_device(&mut tx, &device.device_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    check_resumable(&job, attempt, now)?;
    let lease_token = credentials::new_lease_token()?;
    let lease_until = now + secs(config.lease_secs);
    let attempt = job.attempt + 1;
    let resumes = job.resumes + 1;
    // The lost attempt's questions die with it; the new attempt asks its own.
    job_rows::settle_open(&mut tx, &job, OpenDecisions::Withdraw, now).await?;
    let new_attempt = Some((attempt, resumes));
    job_rows::revive(&mut tx, &job, &lease_token, lease_until, new_attempt).await?;
    let text = format!(
        "Resumed by the device after a restart (attempt {attempt}, carry-on \
         {resumes}/{MAX_AUTO_RESUMES})."
    );
    job_rows::append_events(&mut tx, &job, now, "system", &[text]).await?;
    let detail = json!({ "jobId": job.id, "deviceId": job.device_id, "attempt": attempt,
                         "lostAttempt": job.attempt, "resumed": resumes });
    ledger::record(
        &mut tx,
        &job.account_id()?,
        now,
        LedgerKind::JobResumed,
        &job.id,
        detail,
    )
    .await?;
    let chain = earlier_runs(&mut tx, &job, now).await?;
    let continues = earlier_run(&mut tx, &job, &chain).await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, attempt, resumes, "run resumed");
    let spec = job.spec()?;
    let context = task_context::section(device, &job, &spec, &chain);
    Ok(ClaimedJob {
        id: job_id.clone(),
        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
        lease_token,
        lease_expires_at: to_time(lease_until),
        spec,
        resumed: Some(u32::try_from(resumes).unwrap_or(u32::MAX)),
        continues,
        context: Some(context),
    })
}

/// Whether the lost `attempt` of `job` may be carried on now.
///
/// # Errors
/// 409 `resume_refused` naming the reason.
fn check_resumable(job: &JobRow, attempt: u32, now: Millis) -> Result<(), ApiError> {
    let refused = |why: String| ApiError::new(Code::ResumeRefused, why);
    if job.attempt != i64::from(attempt) {
        return Err(refused(format!(
            "Attempt {attempt} is not the job's latest (it is at attempt {}).",
            job.attempt
        )));
    }
    if job.cancel_requested != 0 {
        return Err(refused("Its owner cancelled the job.".to_owned()));
    }
    let state = job.state()?;
    match state {
        JobState::Running | JobState::Waiting => {}
        JobState::Interrupted if lease_expired_only(job) => {
            let interrupted_at = job.ended_at.unwrap_or(now);
            if now - interrupted_at > RESUME_WINDOW_SECS.saturating_mul(1000) {
                return Err(refused(
                    "The run was interrupted more than 24 hours ago; run it again instead."
                        .to_owned(),
                ));
            }
        }
        _ => {
            return Err(refused(format!(
                "The job ended ({}) and is not carried on.",
                ended_why(job, state)
            )))
        }
    }
    if job.resumes >= i64::from(MAX_AUTO_RESUMES) {
        return Err(refused(format!(
            "The job was carried on {MAX_AUTO_RESUMES} times already; run it again instead."
        )));
    }
    Ok(())
}

/// Whether an interrupted job was interrupted only by its lease expiring.
fn lease_expired_only(job: &JobRow) -> bool {
    job.end_cause.as_deref() == Some(EndCause::LeaseExpired.as_str()) && job.cancel_requested == 0
}

/// How an ended job ended, for refusals.
fn ended_why(job: &JobRow, state: JobState) -> String {
    match job.end_cause.as_deref() {
        Some("revoked") => format!("{}, because its device was revoked", state.as_str()),
        Some("owner") => format!("{}, by its owner", state.as_str()),
        _ if job.cancel_requested != 0 => {
            format!("{}, after its owner cancelled it", state.as_str())
        }
        _ => state.as_str().to_owned(),
    }
}
