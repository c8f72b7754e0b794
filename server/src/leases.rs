//! The fenced lease protocol of devices: heartbeat, claim, progress, complete.
//!
//! A claim hands the device a random lease token (stored as a hash) with an expiry.
//! Heartbeats and progress extend only a lease the device still holds; every write about a
//! run names its lease, and a wrong, old or expired one is 409 `stale_lease`.
//!
//! **Invariant:** a device only ever reads or writes its own jobs (another device's job is
//! `not_found`), and only the holder of the current, unexpired lease moves a run forward.

use tether_protocol::devices::{HeartbeatParams, HeartbeatResponse, Intervals, LeaseStatus};
use tether_protocol::jobs::{
    ClaimedJob, CompleteParams, Job, JobOutcome, JobState, Outcome, ProgressParams,
    ProgressResponse, MAX_LINES_PER_PROGRESS, MAX_LINE_BYTES,
};
use tether_protocol::{Code, JobId};

use crate::auth::DeviceCaller;
use crate::config::Config;
use crate::credentials;
use crate::devices;
use crate::error::ApiError;
use crate::jobs::{self, append_events, finish, truncate, JobRow, JOB_COLUMNS};
use crate::store::{now_millis, on_tx, secs, to_time, Millis, Store, Tx};

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
    let mut tx = store.begin().await?;
    devices::record_report(&mut tx, device, &params.capabilities, now).await?;
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
    Ok(HeartbeatResponse {
        server_time: to_time(now),
        leases,
        lost,
        queued: u64::try_from(queued).unwrap_or(0),
        intervals: Intervals {
            heartbeat_secs: config.heartbeat_secs,
            lease_secs: config.lease_secs,
        },
    })
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
               lease_expires_at = $3, started_at = COALESCE(started_at, $4), progress_seq = 0 \
               WHERE id = $5";
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
    finish(&mut tx, &job, &outcome, now).await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, outcome = outcome.outcome.state().as_str(), "job completed");
    jobs::get(store, &device.account_id, job_id).await
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
async fn fenced_job(
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
