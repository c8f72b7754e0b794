//! The fenced lease protocol of devices: heartbeat, claim, progress, complete, and the
//! outage recovery of a run: reattach (the run kept going) and resume (it was lost).
//!
//! A claim hands the device a random lease token (stored as a hash) with an expiry.
//! Heartbeats and progress extend only a lease the device still holds; every write about a
//! run names its lease, and a wrong, old or expired one is 409 `stale_lease`.
//!
//! **Invariant:** a device only ever reads or writes its own jobs (another device's job is
//! `not_found`), and only the holder of the current, unexpired lease moves a run forward.

use serde_json::json;
use tether_protocol::devices::{HeartbeatParams, HeartbeatResponse, Intervals, LeaseStatus};
use tether_protocol::jobs::{
    ClaimedJob, CompleteParams, Job, JobOutcome, JobState, LeaseGrant, Outcome, ProgressParams,
    ProgressResponse, ReattachParams, ResumeParams, MAX_AUTO_RESUMES, MAX_LINES_PER_PROGRESS,
    MAX_LINE_BYTES, RESUME_WINDOW_SECS,
};
use tether_protocol::{AccountId, Code, JobId};

use crate::auth::DeviceCaller;
use crate::config::Config;
use crate::credentials;
use crate::decisions::{self, Settlement};
use crate::devices;
use crate::error::ApiError;
use crate::jobs::{self, append_events, finish, truncate, EndCause, JobRow, JOB_COLUMNS};
use crate::ledger::{self, LedgerKind};
use crate::presence::{self, Presence};
use crate::store::{now_millis, on_read, on_tx, secs, to_time, Millis, Store, Tx};

/// Most held runs one heartbeat may report.
pub const MAX_RUNNING_PER_HEARTBEAT: usize = 100;
/// Longest completion summary, in characters.
pub const MAX_SUMMARY_CHARS: usize = 10_000;

/// Records the device's report and extends the leases it still holds; the rest are `lost`.
///
/// # Errors
/// 422 when more than [`MAX_RUNNING_PER_HEARTBEAT`] runs are reported, or a database error.
pub async fn heartbeat(
    store: &Store,
    presence: &Presence,
    device: &DeviceCaller,
    params: HeartbeatParams,
    config: &Config,
) -> Result<HeartbeatResponse, ApiError> {
    if params.running.len() > MAX_RUNNING_PER_HEARTBEAT {
        return Err(ApiError::invalid_field(
            "running",
            "at most 100 runs per heartbeat.",
        ));
    }
    let now = now_millis();
    let lease_until = now + secs(config.lease_secs);
    let device_id = device.device_id.as_str();
    let report_json = serde_json::to_string(&params.capabilities)?;
    let report = presence::digest(&report_json);
    let write_report = presence.needs_report(device_id, &report, now);
    if params.running.is_empty() && !write_report {
        // "Still here" only: no write now (see `presence`).
        presence.saw(device_id, now);
        let queued = count_queued_now(store, device).await?;
        return Ok(heartbeat_answer(
            now,
            Vec::new(),
            Vec::new(),
            queued,
            config,
        ));
    }
    let mut tx = store.begin().await?;
    if write_report {
        devices::record_report(&mut tx, device, &params.capabilities, &report_json, now).await?;
    } else {
        presence.saw(device_id, now);
    }
    let mut leases = Vec::new();
    let mut lost = Vec::new();
    for held in params.running {
        let job = device_job(&mut tx, device, &held.job_id).await?;
        match job.filter(|job| holds_lease(job, &held.lease_token, now)) {
            Some(job) => {
                extend_lease(&mut tx, &job.id, lease_until).await?;
                leases.push(LeaseStatus {
                    job_id: held.job_id,
                    lease_expires_at: to_time(lease_until),
                    cancel_requested: job.cancel_requested != 0,
                });
            }
            None => lost.push(held.job_id),
        }
    }
    let queued = count_queued(&mut tx, device).await?;
    tx.commit().await?;
    if write_report {
        presence.wrote_report(device_id, report, now);
    }
    Ok(heartbeat_answer(now, leases, lost, queued, config))
}

fn heartbeat_answer(
    now: Millis,
    leases: Vec<LeaseStatus>,
    lost: Vec<JobId>,
    queued: i64,
    config: &Config,
) -> HeartbeatResponse {
    HeartbeatResponse {
        server_time: to_time(now),
        leases,
        lost,
        queued: u64::try_from(queued).unwrap_or(0),
        intervals: Intervals {
            heartbeat_secs: config.heartbeat_secs,
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
    device: &DeviceCaller,
    config: &Config,
) -> Result<Option<ClaimedJob>, ApiError> {
    let now = now_millis();
    let mut tx = store.begin().await?;
    // Serialises claims of one account on PostgreSQL, so the limit holds across devices.
    let lock = format!("SELECT id FROM accounts WHERE id = $1{}", tx.lock_clause());
    on_tx!(&mut tx, |conn| sqlx::query(&lock)
        .bind(device.account_id.as_str())
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    if running_in_account(&mut tx, device).await? >= i64::from(config.max_running_per_account) {
        return Ok(None);
    }
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE device_id = $1 AND state = 'queued' \
         ORDER BY created_at, id LIMIT 1{}",
        tx.skip_locked_clause()
    );
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(device.device_id.as_str())
        .fetch_optional(conn)
        .await)?;
    let Some(job) = row else {
        return Ok(None);
    };
    let lease_token = credentials::random_token("");
    let lease_until = now + secs(config.lease_secs);
    let attempt = job.attempt + 1;
    let sql = "UPDATE jobs SET state = 'running', attempt = $1, lease_token_hash = $2, \
               last_lease_hash = $2, lease_expires_at = $3, \
               started_at = COALESCE(started_at, $4), progress_seq = 0 WHERE id = $5";
    on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(attempt)
        .bind(credentials::hash_token(&lease_token))
        .bind(lease_until)
        .bind(now)
        .bind(&job.id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    let text = format!("Claimed by the device (attempt {attempt}).");
    append_events(&mut tx, &job, now, "system", &[text]).await?;
    tx.commit().await?;
    tracing::info!(job_id = %job.id, attempt, "job claimed");
    Ok(Some(ClaimedJob {
        id: crate::store::stored_id(job.id.clone())?,
        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
        lease_token,
        lease_expires_at: to_time(lease_until),
        spec: job.spec()?,
        resumed: None,
    }))
}

/// Appends output lines and a status, and extends the lease. A `seq` at or below the last
/// applied one changes nothing but the lease, so retries are safe.
///
/// # Errors
/// 422 for too many lines, 404 for a job not of this device, 409 `stale_lease`.
pub async fn progress(
    store: &Store,
    device: &DeviceCaller,
    job_id: &JobId,
    lease_token: &str,
    params: ProgressParams,
    config: &Config,
) -> Result<ProgressResponse, ApiError> {
    if params.lines.len() > MAX_LINES_PER_PROGRESS {
        return Err(ApiError::invalid_field(
            "lines",
            "at most 200 lines per call.",
        ));
    }
    let seq =
        i64::try_from(params.seq).map_err(|_| ApiError::invalid_field("seq", "is too large."))?;
    let now = now_millis();
    let lease_until = now + secs(config.lease_secs);
    let mut tx = store.begin().await?;
    let job = fenced_job(&mut tx, device, job_id, lease_token, now).await?;
    if seq > job.progress_seq {
        let lines: Vec<String> = params
            .lines
            .iter()
            .map(|line| truncate(line, MAX_LINE_BYTES))
            .collect();
        append_events(&mut tx, &job, now, "output", &lines).await?;
        if let Some(status) = params.status.as_deref().filter(|status| !status.is_empty()) {
            append_events(
                &mut tx,
                &job,
                now,
                "status",
                &[truncate(status, MAX_LINE_BYTES)],
            )
            .await?;
        }
        on_tx!(&mut tx, |conn| sqlx::query(
            "UPDATE jobs SET progress_seq = $1 WHERE id = $2"
        )
        .bind(seq)
        .bind(&job.id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    }
    extend_lease(&mut tx, &job.id, lease_until).await?;
    tx.commit().await?;
    Ok(ProgressResponse {
        lease_expires_at: to_time(lease_until),
        cancel_requested: job.cancel_requested != 0,
    })
}

/// Records how the run ended and releases the lease. The same call again with the same
/// lease answers the recorded job.
///
/// # Errors
/// 422 for `interrupted` or a too long summary, 404 for a job not of this device, 409
/// `stale_lease`.
pub async fn complete(
    store: &Store,
    device: &DeviceCaller,
    job_id: &JobId,
    lease_token: &str,
    params: CompleteParams,
) -> Result<Job, ApiError> {
    let outcome = parse_outcome(params)?;
    let now = now_millis();
    let mut tx = store.begin().await?;
    let job = device_job(&mut tx, device, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    if job.state()?.is_final() {
        let same_lease = job.lease_token_hash.as_deref().is_some_and(|hash| {
            credentials::hashes_match(hash, &credentials::hash_token(lease_token))
        });
        drop(tx);
        return if same_lease {
            jobs::get(store, &device.account_id, job_id).await
        } else {
            Err(stale_lease())
        };
    }
    if !holds_lease(&job, lease_token, now) {
        return Err(stale_lease());
    }
    finish(&mut tx, &job, &outcome, EndCause::Device, now).await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, outcome = outcome.outcome.state().as_str(), "job completed");
    jobs::get(store, &device.account_id, job_id).await
}

/// Gives a run that kept going through an outage a new lease for the same attempt. Allowed
/// when `leaseToken` is the last lease issued for that attempt, the attempt is the job's
/// latest, and the job is still running or waiting, or was interrupted only because its
/// lease expired (not cancelled by its owner, not by a revocation). An interrupted job runs
/// again.
///
/// # Errors
/// 404 for a job not of this device, 409 `stale_lease` otherwise.
pub async fn reattach(
    store: &Store,
    device: &DeviceCaller,
    job_id: &JobId,
    params: ReattachParams,
    config: &Config,
) -> Result<LeaseGrant, ApiError> {
    let now = now_millis();
    let mut tx = store.begin().await?;
    let job = device_job(&mut tx, device, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    let presented = credentials::hash_token(&params.lease_token);
    let last_lease = job
        .last_lease_hash
        .as_deref()
        .is_some_and(|hash| credentials::hashes_match(hash, &presented));
    if job.attempt != i64::from(params.attempt) || !last_lease {
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
    let lease_token = credentials::random_token("");
    let lease_until = now + secs(config.lease_secs);
    revive(&mut tx, &job, &lease_token, lease_until, None).await?;
    let text = if state == JobState::Interrupted {
        format!(
            "Reattached by the device after an outage (attempt {}); running again.",
            job.attempt
        )
    } else {
        format!(
            "Reattached by the device after an outage (attempt {}).",
            job.attempt
        )
    };
    append_events(&mut tx, &job, now, "system", &[text]).await?;
    let account_id: AccountId = crate::store::stored_id(job.account_id.clone())?;
    let detail = json!({ "jobId": job.id, "deviceId": job.device_id, "attempt": job.attempt,
                         "wasInterrupted": state == JobState::Interrupted });
    ledger::record(
        &mut tx,
        &account_id,
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
        attempt: params.attempt,
        lease_token,
        lease_expires_at: to_time(lease_until),
    })
}

/// Carries on a run the device lost to a restart: a new attempt of the same job (same spec
/// and folder) with a new lease. Allowed when the lost attempt is the job's latest, the job
/// is running or waiting or was interrupted only because its lease expired, at most
/// [`MAX_AUTO_RESUMES`] times per job, within [`RESUME_WINDOW_SECS`] of the interruption,
/// and never for a run its owner cancelled.
///
/// # Errors
/// 404 for a job not of this device, 409 `resume_refused` naming the reason.
pub async fn resume(
    store: &Store,
    device: &DeviceCaller,
    job_id: &JobId,
    params: ResumeParams,
    config: &Config,
) -> Result<ClaimedJob, ApiError> {
    let now = now_millis();
    let mut tx = store.begin().await?;
    let job = device_job(&mut tx, device, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    let refused = |why: String| ApiError::new(Code::ResumeRefused, why);
    if job.attempt != i64::from(params.attempt) {
        return Err(refused(format!(
            "Attempt {} is not the job's latest (it is at attempt {}).",
            params.attempt, job.attempt
        )));
    }
    if job.cancel_requested != 0 {
        return Err(refused("Its owner cancelled the job.".to_owned()));
    }
    let state = job.state()?;
    match state {
        JobState::Running | JobState::Waiting => {}
        JobState::Interrupted if lease_expired_only(&job) => {
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
                ended_why(&job, state)
            )))
        }
    }
    if job.resumes >= i64::from(MAX_AUTO_RESUMES) {
        return Err(refused(format!(
            "The job was carried on {MAX_AUTO_RESUMES} times already; run it again instead."
        )));
    }
    let lease_token = credentials::random_token("");
    let lease_until = now + secs(config.lease_secs);
    let attempt = job.attempt + 1;
    let resumes = job.resumes + 1;
    // The lost attempt's questions die with it; the new attempt asks its own.
    decisions::settle_open(&mut tx, &job, Settlement::Withdrawn, now).await?;
    revive(
        &mut tx,
        &job,
        &lease_token,
        lease_until,
        Some((attempt, resumes)),
    )
    .await?;
    let text = format!(
        "Resumed by the device after a restart (attempt {attempt}, carry-on \
         {resumes}/{MAX_AUTO_RESUMES})."
    );
    append_events(&mut tx, &job, now, "system", &[text]).await?;
    let account_id: AccountId = crate::store::stored_id(job.account_id.clone())?;
    let detail = json!({ "jobId": job.id, "deviceId": job.device_id, "attempt": attempt,
                         "lostAttempt": job.attempt, "resumed": resumes });
    ledger::record(
        &mut tx,
        &account_id,
        now,
        LedgerKind::JobResumed,
        &job.id,
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, attempt, resumes, "run resumed");
    Ok(ClaimedJob {
        id: job_id.clone(),
        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
        lease_token,
        lease_expires_at: to_time(lease_until),
        spec: job.spec()?,
        resumed: Some(u32::try_from(resumes).unwrap_or(u32::MAX)),
    })
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

/// Puts `job` back to running (a waiting job stays waiting) under a new lease; with
/// `new_attempt` = `(attempt, resumes)`, as a new attempt.
async fn revive(
    tx: &mut Tx,
    job: &JobRow,
    lease_token: &str,
    lease_until: Millis,
    new_attempt: Option<(i64, i64)>,
) -> Result<(), ApiError> {
    let (attempt, resumes, progress_seq) = match new_attempt {
        Some((attempt, resumes)) => (attempt, resumes, 0),
        None => (job.attempt, job.resumes, job.progress_seq),
    };
    let sql = "UPDATE jobs SET state = CASE WHEN state = 'waiting' AND $1 = 0 THEN 'waiting' \
               ELSE 'running' END, attempt = $2, resumes = $3, progress_seq = $4, \
               lease_token_hash = $5, last_lease_hash = $5, lease_expires_at = $6, \
               outcome_json = NULL, ended_at = NULL, end_cause = NULL WHERE id = $7";
    on_tx!(tx, |conn| sqlx::query(sql)
        .bind(i64::from(new_attempt.is_some()))
        .bind(attempt)
        .bind(resumes)
        .bind(progress_seq)
        .bind(credentials::hash_token(lease_token))
        .bind(lease_until)
        .bind(&job.id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

fn parse_outcome(params: CompleteParams) -> Result<JobOutcome, ApiError> {
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
    Ok(JobOutcome {
        outcome: params.outcome,
        summary: params.summary,
        exit_code: params.exit_code,
        report: params.report,
    })
}

fn stale_lease() -> ApiError {
    ApiError::new(
        Code::StaleLease,
        "This lease is wrong, old or expired; stop this run's side effects.",
    )
}

/// Whether `lease_token` is the job's current, unexpired lease on a running or waiting job.
fn holds_lease(job: &JobRow, lease_token: &str, now: Millis) -> bool {
    let live = matches!(job.state(), Ok(JobState::Running | JobState::Waiting))
        && job.lease_expires_at.is_some_and(|expires| expires > now);
    live && job
        .lease_token_hash
        .as_deref()
        .is_some_and(|hash| credentials::hashes_match(hash, &credentials::hash_token(lease_token)))
}

/// The job if it is this device's and `lease_token` holds it.
pub(crate) async fn fenced_job(
    tx: &mut Tx,
    device: &DeviceCaller,
    job_id: &JobId,
    lease_token: &str,
    now: Millis,
) -> Result<JobRow, ApiError> {
    let job = device_job(tx, device, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    if holds_lease(&job, lease_token, now) {
        Ok(job)
    } else {
        Err(stale_lease())
    }
}

/// A job of this device, row-locked on PostgreSQL.
async fn device_job(
    tx: &mut Tx,
    device: &DeviceCaller,
    job_id: &JobId,
) -> Result<Option<JobRow>, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND device_id = $2{}",
        tx.lock_clause()
    );
    let row = on_tx!(tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(device.device_id.as_str())
        .fetch_optional(conn)
        .await)?;
    Ok(row)
}

async fn extend_lease(tx: &mut Tx, job_id: &str, until: Millis) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET lease_expires_at = $1 WHERE id = $2"
    )
    .bind(until)
    .bind(job_id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// `count_queued` outside a transaction (on SQLite, from the read pool, not the writer).
async fn count_queued_now(store: &Store, device: &DeviceCaller) -> Result<i64, ApiError> {
    let count = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM jobs WHERE device_id = $1 AND state = 'queued'"
    )
    .bind(device.device_id.as_str())
    .fetch_one(pool)
    .await)?;
    Ok(count)
}

async fn count_queued(tx: &mut Tx, device: &DeviceCaller) -> Result<i64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM jobs WHERE device_id = $1 AND state = 'queued'"
    )
    .bind(device.device_id.as_str())
    .fetch_one(conn)
    .await)?;
    Ok(count)
}

async fn running_in_account(tx: &mut Tx, device: &DeviceCaller) -> Result<i64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM jobs WHERE account_id = $1 AND state IN ('running', 'waiting')"
    )
    .bind(device.account_id.as_str())
    .fetch_one(conn)
    .await)?;
    Ok(count)
}
