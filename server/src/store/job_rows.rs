//! The rows of `jobs` and every change to them: a job's states, its attempts and its lease.
//!
//! This is the only module that writes `jobs`, so each transition is stored in one place:
//! queue ([`insert_queued`]), claim ([`claim`]), progress ([`record_progress`]), extend a
//! lease ([`extend_lease`], and the outage grace [`extend_running_leases`]), wait for a
//! decision and back ([`start_waiting`], [`resume_if_idle`]), cancel requested
//! ([`request_cancel`]), revive ([`revive`], for reattach and resume), and end ([`finish`],
//! settling the run's open decisions with [`settle_open`]). The callers (`jobs`, `leases`,
//! `decisions`, `evidence`, `devices`, the sweeper) decide *whether* a transition is
//! allowed; this module knows how each is stored.
//!
//! **Invariant:** every end of a job goes through [`finish`], which writes the outcome, a
//! `system` event, settles the run's pending decisions and records `job.ended`, all in the
//! caller's transaction.
//!
//! **Invariant:** a transaction that changes a job or its decisions first locks the job's
//! row ([`lock_for_device`], [`lock_for_account`], [`fenced`], [`oldest_queued`],
//! [`expired_leases`]), so such transactions never wait on each other in opposite orders.

use serde_json::json;
use tether_protocol::changes::Changes;
use tether_protocol::decisions::DecisionState;
use tether_protocol::git::DeliveryReport;
use tether_protocol::jobs::{Job, JobEvent, JobOutcome, JobSpec, JobState, Outcome};
use tether_protocol::report::{ObservedAttempt, ObservedRun};
use tether_protocol::{AccountId, Code, DeviceId, JobId, LeaseToken};

use crate::clock::{to_time, Millis};
use crate::credentials;
use crate::error::ApiError;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_reads, on_tx, stored_id, ReadSource, Store, Tx};

mod in_one;
pub(crate) mod in_one_call;
pub(crate) use in_one::Line;
use in_one::{update_with_lines, update_with_timed_lines, Clause};

const JOB_COLUMNS: &str = "id, account_id, device_id, title, spec_json, state, attempt, \
    cancel_requested, outcome_json, lease_token_hash, lease_expires_at, progress_seq, \
    created_at, started_at, ended_at, last_lease_hash, end_cause, resumes, continues, changes_json, delivery_json, \
    rerun_of, chain_root, chain_run, observed_json, space_id";

/// Most attempts whose [`ObservedRun`] a job keeps (the latest ones).
const MAX_OBSERVED_ATTEMPTS: usize = 8;

/// A `jobs` row. Not `Serialize`: [`JobRow::into_job`] builds the wire type. Only this
/// module reads or writes one; the fields are for callers' decisions.
#[derive(sqlx::FromRow)]
pub(crate) struct JobRow {
    pub(crate) id: String,
    pub(crate) account_id: String,
    pub(crate) device_id: String,
    pub(crate) title: String,
    pub(crate) spec_json: String,
    pub(crate) state: String,
    pub(crate) attempt: i64,
    pub(crate) cancel_requested: i64,
    pub(crate) outcome_json: Option<String>,
    pub(crate) lease_token_hash: Option<String>,
    pub(crate) lease_expires_at: Option<i64>,
    pub(crate) progress_seq: i64,
    pub(crate) created_at: i64,
    pub(crate) started_at: Option<i64>,
    pub(crate) ended_at: Option<i64>,
    pub(crate) last_lease_hash: Option<String>,
    pub(crate) end_cause: Option<String>,
    pub(crate) resumes: i64,
    /// The earlier job this one follows up.
    pub(crate) continues: Option<String>,
    /// The [`Changes`] its computer reported, checked before it was stored.
    pub(crate) changes_json: Option<String>,
    /// The [`DeliveryReport`] its computer reported, checked before it was stored.
    pub(crate) delivery_json: Option<String>,
    /// The earlier job this one runs again.
    pub(crate) rerun_of: Option<String>,
    /// The first job of its chain of re-runs and follow-ups; `None` on that job itself.
    pub(crate) chain_root: Option<String>,
    /// Its run number in that chain.
    pub(crate) chain_run: Option<i64>,
    /// What each attempt used ([`ObservedAttempt`]s), bounded before it was stored.
    pub(crate) observed_json: Option<String>,
    /// The space the job belongs to; `None` for a personal job.
    pub(crate) space_id: Option<String>,
}

impl JobRow {
    pub(crate) fn state(&self) -> Result<JobState, ApiError> {
        JobState::parse(&self.state)
            .ok_or_else(|| ApiError::internal(&format_args!("stored job state {:?}", self.state)))
    }

    pub(crate) fn spec(&self) -> Result<JobSpec, ApiError> {
        Ok(serde_json::from_str(&self.spec_json)?)
    }

    pub(crate) fn account_id(&self) -> Result<AccountId, ApiError> {
        stored_id(self.account_id.clone())
    }

    /// What each attempt used, oldest attempt first; a row that no longer parses shows none.
    pub(crate) fn observed(&self) -> Vec<ObservedAttempt> {
        self.observed_json
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default()
    }

    /// `observed_json` with `used` as what this row's attempt used (replacing what that
    /// attempt said before); `None` when `used` says nothing.
    pub(crate) fn observed_with(&self, used: ObservedRun) -> Result<Option<String>, ApiError> {
        let used = used.bounded();
        if used.is_empty() {
            return Ok(None);
        }
        let attempt = u32::try_from(self.attempt).unwrap_or(u32::MAX);
        let mut all = self.observed();
        all.retain(|entry| entry.attempt != attempt);
        all.push(ObservedAttempt { attempt, used });
        all.sort_by_key(|entry| entry.attempt);
        // Attempts are few (resumes are bounded); keep the latest handful regardless.
        let extra = all.len().saturating_sub(MAX_OBSERVED_ATTEMPTS);
        all.drain(..extra);
        Ok(Some(serde_json::to_string(&all)?))
    }

    /// The wire job with `events`; its decisions, evidence, follow-up and queue reason are
    /// the caller's to add.
    pub(crate) fn into_job(self, events: Vec<JobEvent>) -> Result<Job, ApiError> {
        // Stored only after `Changes::check`; a row that no longer parses shows none.
        let changes = self
            .changes_json
            .as_deref()
            .and_then(|json| serde_json::from_str::<Changes>(json).ok());
        let delivery = self
            .delivery_json
            .as_deref()
            .and_then(|json| serde_json::from_str::<DeliveryReport>(json).ok());
        let continues = self.continues.clone().map(stored_id).transpose()?;
        let rerun_of = self.rerun_of.clone().map(stored_id).transpose()?;
        let run_number = self.chain_run.and_then(|run| u32::try_from(run).ok());
        let observed = self.observed();
        let space_id = self.space_id.clone().map(stored_id).transpose()?;
        Ok(Job {
            space_id,
            shared_view: false,
            changes,
            continues,
            rerun_of,
            run_number,
            reruns: Vec::new(),
            observed,
            state: self.state()?,
            spec: self.spec()?,
            id: stored_id(self.id)?,
            device_id: stored_id(self.device_id)?,
            title: self.title,
            attempt: u32::try_from(self.attempt).unwrap_or(u32::MAX),
            cancel_requested: self.cancel_requested != 0,
            outcome: match self.outcome_json {
                Some(json) => Some(serde_json::from_str(&json)?),
                None => None,
            },
            created_at: to_time(self.created_at),
            started_at: self.started_at.map(to_time),
            ended_at: self.ended_at.map(to_time),
            events,
            decisions: Vec::new(),
            evidence: Vec::new(),
            continued_by: None,
            queued_because: None,
            delivery,
        })
    }
}

/// Who or what ended a job, stored as `jobs.end_cause`: reattach and resume revive only a
/// run whose lease expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndCause {
    /// The device completed it.
    Device,
    /// The owner cancelled it before it started.
    Owner,
    /// The sweeper found its lease expired.
    LeaseExpired,
    /// Its device was revoked or removed.
    Revoked,
}

impl EndCause {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EndCause::Device => "device",
            EndCause::Owner => "owner",
            EndCause::LeaseExpired => "lease_expired",
            EndCause::Revoked => "revoked",
        }
    }
}

/// What becomes of a run's pending decisions when it no longer waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenDecisions {
    /// Its lease ran out: nobody answered in time.
    Expire,
    /// It ended otherwise, was cancelled, or goes on as a new attempt.
    Withdraw,
}

/// An outcome recorded by the server or the device.
pub(crate) fn outcome(outcome: Outcome, summary: &str) -> JobOutcome {
    JobOutcome {
        outcome,
        summary: summary.to_owned(),
        exit_code: None,
        report: None,
    }
}

/// 409 `stale_lease`: the device must stop this run's side effects.
pub(crate) fn stale_lease() -> ApiError {
    ApiError::new(
        Code::StaleLease,
        "This lease is wrong, old or expired; stop this run's side effects.",
    )
}

/// Whether `lease` is the job's current, unexpired lease on a running or waiting job.
pub(crate) fn holds_lease(job: &JobRow, lease: &LeaseToken, now: Millis) -> bool {
    let live = matches!(job.state(), Ok(JobState::Running | JobState::Waiting))
        && job.lease_expires_at.is_some_and(|expires| expires > now);
    live && is_hash_of(job.lease_token_hash.as_deref(), lease)
}

/// Whether `stored` is the hash of `lease` (compared in constant time).
pub(crate) fn is_hash_of(stored: Option<&str>, lease: &LeaseToken) -> bool {
    let presented = credentials::hash_token(lease.expose());
    stored.is_some_and(|hash| credentials::hashes_match(hash, &presented))
}

/// Cuts `text` to at most `max_bytes`, on a character boundary (event lines, messages).
pub fn truncate(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

// ---- Reads outside a transaction ----

/// One job of `account_id`, or `None`.
///
/// # Errors
/// A database error.
pub(crate) async fn read_for_account(
    mut source: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Option<JobRow>, ApiError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND account_id = $2");
    let row = on_reads!(source, |pool| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    Ok(row)
}

/// A space job that `account_id` may see as a member of its space (not its own), or `None`.
///
/// # Errors
/// A database error.
pub(crate) async fn read_in_member_spaces(
    mut source: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Option<JobRow>, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 \
         AND space_id IN (SELECT space_id FROM space_members WHERE account_id = $2)"
    );
    let row = on_reads!(source, |pool| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    Ok(row)
}

/// A job of the space `space_id`, or `None`.
///
/// # Errors
/// A database error.
pub(crate) async fn read_in_space(
    mut source: impl ReadSource,
    space_id: &str,
    job_id: &JobId,
) -> Result<Option<JobRow>, ApiError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND space_id = $2");
    let row = on_reads!(source, |pool| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(space_id)
        .fetch_optional(pool)
        .await)?;
    Ok(row)
}

/// A space job in a list, with who assigned it and where it runs.
#[derive(sqlx::FromRow)]
pub(crate) struct SpaceJobRow {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) state: String,
    pub(crate) owner_name: String,
    pub(crate) computer_name: String,
    pub(crate) created_at: i64,
    pub(crate) ended_at: Option<i64>,
}

/// The space's jobs, newest first, at most `limit`.
///
/// # Errors
/// A database error.
pub(crate) async fn list_in_space(
    mut source: impl ReadSource,
    space_id: &str,
    limit: i64,
) -> Result<Vec<SpaceJobRow>, ApiError> {
    let rows = on_reads!(source, |pool| sqlx::query_as::<_, SpaceJobRow>(
        "SELECT j.id, j.title, j.state, a.name AS owner_name, d.name AS computer_name, \
         j.created_at, j.ended_at FROM jobs j JOIN accounts a ON a.id = j.account_id \
         JOIN devices d ON d.id = j.device_id WHERE j.space_id = $1 \
         ORDER BY j.created_at DESC, j.id DESC LIMIT $2"
    )
    .bind(space_id)
    .bind(limit)
    .fetch_all(pool)
    .await)?;
    Ok(rows)
}

/// The queued jobs `account_id` assigned in a space, for cancelling when it leaves.
///
/// # Errors
/// A database error.
pub(crate) async fn queued_in_space(
    store: &Store,
    account_id: &AccountId,
    space_id: &str,
) -> Result<Vec<String>, ApiError> {
    let ids = on_read!(store, |pool| sqlx::query_scalar::<_, String>(
        "SELECT id FROM jobs WHERE space_id = $1 AND account_id = $2 AND state = 'queued'"
    )
    .bind(space_id)
    .bind(account_id.as_str())
    .fetch_all(pool)
    .await)?;
    Ok(ids)
}

/// Puts a job just queued in the caller's transaction into a space.
///
/// # Errors
/// A database error.
pub(crate) async fn set_space(tx: &mut Tx, job_id: &JobId, space_id: &str) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET space_id = $2 WHERE id = $1"
    )
    .bind(job_id.as_str())
    .bind(space_id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// The account's jobs, newest first, at most `limit`; `device` and `state` filter.
///
/// # Errors
/// A database error.
pub(crate) async fn list_for_account(
    store: &Store,
    account_id: &AccountId,
    device: Option<&DeviceId>,
    state: Option<JobState>,
    limit: i64,
) -> Result<Vec<JobRow>, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE account_id = $1 \
         AND ($2 = '' OR device_id = $2) AND ($3 = '' OR state = $3) \
         ORDER BY created_at DESC, id DESC LIMIT $4"
    );
    let rows = on_read!(store, |pool| sqlx::query_as::<_, JobRow>(&sql)
        .bind(account_id.as_str())
        .bind(device.map_or("", DeviceId::as_str))
        .bind(state.map_or("", JobState::as_str))
        .bind(limit)
        .fetch_all(pool)
        .await)?;
    Ok(rows)
}

/// A job's timeline, in order.
///
/// # Errors
/// A database error.
pub(crate) async fn events(
    mut source: impl ReadSource,
    job_id: &JobId,
) -> Result<Vec<JobEvent>, ApiError> {
    let rows = on_reads!(source, |pool| sqlx::query_as::<_, EventRow>(
        "SELECT seq, at, kind, text FROM job_events WHERE job_id = $1 ORDER BY seq"
    )
    .bind(job_id.as_str())
    .fetch_all(pool)
    .await)?;
    Ok(rows.into_iter().map(EventRow::into_event).collect())
}

/// At most `limit` lines of a job of `account_id` after line `after`, in order: a long log
/// read a page at a time.
///
/// # Errors
/// A database error.
pub async fn events_page(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
    after: i64,
    limit: i64,
) -> Result<Vec<JobEvent>, ApiError> {
    let rows = on_read!(store, |pool| sqlx::query_as::<_, EventRow>(
        "SELECT seq, at, kind, text FROM job_events \
         WHERE job_id = $1 AND account_id = $2 AND seq > $3 ORDER BY seq LIMIT $4"
    )
    .bind(job_id.as_str())
    .bind(account_id.as_str())
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await)?;
    Ok(rows.into_iter().map(EventRow::into_event).collect())
}

/// The devices of `account_id` with queued jobs: the ones to wake when a run slot frees.
///
/// # Errors
/// A database error.
pub async fn devices_with_queued_work(
    store: &Store,
    account_id: &AccountId,
) -> Result<Vec<DeviceId>, ApiError> {
    let rows = on_read!(store, |pool| sqlx::query_scalar::<_, String>(
        "SELECT DISTINCT device_id FROM jobs WHERE account_id = $1 AND state = 'queued'"
    )
    .bind(account_id.as_str())
    .fetch_all(pool)
    .await)?;
    rows.into_iter().map(stored_id).collect()
}

/// The device a job of `account_id` belongs to.
///
/// # Errors
/// 404 `not_found` for an unknown job or another account's.
pub async fn device_of(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<DeviceId, ApiError> {
    let row = on_read!(store, |pool| sqlx::query_scalar::<_, String>(
        "SELECT device_id FROM jobs WHERE id = $1 AND account_id = $2"
    )
    .bind(job_id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(pool)
    .await)?;
    stored_id(row.ok_or_else(|| ApiError::not_found("job"))?)
}

/// The follow-up of a job of `account_id`, if there is one.
///
/// # Errors
/// A database error.
pub(crate) async fn follow_up_of(
    mut source: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Option<JobId>, ApiError> {
    let row = on_reads!(source, |pool| sqlx::query_scalar::<_, String>(
        "SELECT id FROM jobs WHERE continues = $1 AND account_id = $2"
    )
    .bind(job_id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(pool)
    .await)?;
    row.map(stored_id).transpose()
}

/// The re-runs of a job of `account_id`, oldest first (at most 100).
///
/// # Errors
/// A database error.
pub(crate) async fn reruns_of(
    mut source: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Vec<JobId>, ApiError> {
    let rows = on_reads!(source, |pool| sqlx::query_scalar::<_, String>(
        "SELECT id FROM jobs WHERE rerun_of = $1 AND account_id = $2 \
         ORDER BY chain_run, created_at, id LIMIT 100"
    )
    .bind(job_id.as_str())
    .bind(account_id.as_str())
    .fetch_all(pool)
    .await)?;
    rows.into_iter().map(stored_id).collect()
}

/// The highest run number given in the chain that starts at `root`, in the caller's
/// transaction (which holds `root` locked, so two new runs never share a number).
///
/// # Errors
/// A database error.
pub(crate) async fn last_run_in_chain(tx: &mut Tx, root: &str) -> Result<Option<i64>, ApiError> {
    let last = on_tx!(tx, |conn| sqlx::query_scalar::<_, Option<i64>>(
        "SELECT MAX(chain_run) FROM jobs WHERE chain_root = $1"
    )
    .bind(root)
    .fetch_one(conn)
    .await)?;
    Ok(last)
}

/// Records where a new job stands in its chain: the job it runs again (if it does), the
/// chain's first job and its run number.
///
/// # Errors
/// A database error.
pub(crate) async fn set_chain(
    tx: &mut Tx,
    job_id: &JobId,
    rerun_of: Option<&JobId>,
    root: &str,
    run: i64,
) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET rerun_of = $2, chain_root = $3, chain_run = $4 WHERE id = $1"
    )
    .bind(job_id.as_str())
    .bind(rerun_of.map(JobId::as_str))
    .bind(root)
    .bind(run)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// The follow-up of a job, in the caller's transaction.
///
/// # Errors
/// A database error.
pub(crate) async fn follow_up_in_tx(
    tx: &mut Tx,
    job_id: &JobId,
) -> Result<Option<String>, ApiError> {
    let row = on_tx!(tx, |conn| sqlx::query_scalar::<_, String>(
        "SELECT id FROM jobs WHERE continues = $1"
    )
    .bind(job_id.as_str())
    .fetch_optional(conn)
    .await)?;
    Ok(row)
}

/// Another job of this device, read in the caller's transaction without locking it (the
/// earlier job a claimed follow-up continues).
///
/// # Errors
/// A database error.
pub(crate) async fn read_for_device(
    tx: &mut Tx,
    device_id: &str,
    job_id: &str,
) -> Result<Option<JobRow>, ApiError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND device_id = $2");
    let row = on_tx!(tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id)
        .bind(device_id)
        .fetch_optional(conn)
        .await)?;
    Ok(row)
}

/// How many runs are going (running or waiting) in the account, and on the device.
///
/// # Errors
/// A database error.
pub(crate) async fn running_counts(
    store: &Store,
    account_id: &AccountId,
    device_id: &DeviceId,
) -> Result<(i64, i64), ApiError> {
    let row = on_read!(store, |pool| sqlx::query_as::<_, (i64, i64)>(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN device_id = $2 THEN 1 ELSE 0 END), 0) \
         FROM jobs WHERE account_id = $1 AND state IN ('running', 'waiting')"
    )
    .bind(account_id.as_str())
    .bind(device_id.as_str())
    .fetch_one(pool)
    .await)?;
    Ok(row)
}

/// [`count_queued`] outside a transaction (on SQLite, from the read pool, not the writer).
///
/// # Errors
/// A database error.
pub(crate) async fn count_queued_now(store: &Store, device_id: &DeviceId) -> Result<i64, ApiError> {
    let count = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM jobs WHERE device_id = $1 AND state = 'queued'"
    )
    .bind(device_id.as_str())
    .fetch_one(pool)
    .await)?;
    Ok(count)
}

// ---- Reads in a transaction (locking the rows they return on PostgreSQL) ----

/// A job of this device, row-locked.
///
/// # Errors
/// A database error.
pub(crate) async fn lock_for_device(
    tx: &mut Tx,
    device_id: &DeviceId,
    job_id: &JobId,
) -> Result<Option<JobRow>, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND device_id = $2{}",
        tx.lock_clause()
    );
    let row = on_tx!(tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(device_id.as_str())
        .fetch_optional(conn)
        .await)?;
    Ok(row)
}

/// A job of this account, row-locked.
///
/// # Errors
/// A database error.
pub(crate) async fn lock_for_account(
    tx: &mut Tx,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Option<JobRow>, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND account_id = $2{}",
        tx.lock_clause()
    );
    let row = on_tx!(tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(conn)
        .await)?;
    Ok(row)
}

/// The job, row-locked, if it is this device's and `lease` holds it: the fence every write
/// about a run passes.
///
/// # Errors
/// 404 for a job not of this device, 409 `stale_lease`.
pub(crate) async fn fenced(
    tx: &mut Tx,
    device_id: &DeviceId,
    job_id: &JobId,
    lease: &LeaseToken,
    now: Millis,
) -> Result<JobRow, ApiError> {
    let job = lock_for_device(tx, device_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    if holds_lease(&job, lease, now) {
        Ok(job)
    } else {
        Err(stale_lease())
    }
}

/// The device's (`$1`) jobs a claim may take: queued, and a follow-up only once the job it
/// continues ended.
const CLAIMABLE: &str = "device_id = $1 AND state = 'queued' \
    AND (continues IS NULL OR NOT EXISTS (SELECT 1 FROM jobs AS earlier \
    WHERE earlier.id = jobs.continues AND earlier.state IN ('queued', 'running', 'waiting')))";

/// Whether a claim of the device may find something: it has a job a claim may take and its
/// account runs fewer than `limit`. Answers how many the account runs then, `None` when
/// the claim would find nothing. Read without a transaction (on SQLite from the read
/// pool), because most claims find nothing and then must take no lock. A stale "full" is
/// safe: the end that frees the slot wakes the account's devices.
///
/// # Errors
/// A database error.
pub(crate) async fn may_claim(
    store: &Store,
    device_id: &DeviceId,
    account_id: &AccountId,
    limit: u32,
) -> Result<Option<i64>, ApiError> {
    let sql = format!(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM jobs WHERE {CLAIMABLE}) THEN \
         (SELECT COUNT(*) FROM jobs WHERE account_id = $2 AND state IN ('running', 'waiting')) \
         ELSE $3 END"
    );
    let running = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(&sql)
        .bind(device_id.as_str())
        .bind(account_id.as_str())
        .bind(i64::from(limit))
        .fetch_one(pool)
        .await)?;
    Ok((running < i64::from(limit)).then_some(running))
}

/// Running or waiting jobs whose lease expired at or before `now`, oldest expiry first, at
/// most `limit`, skipping rows another sweeper holds.
///
/// # Errors
/// A database error.
pub(crate) async fn expired_leases(
    tx: &mut Tx,
    now: Millis,
    limit: i64,
) -> Result<Vec<JobRow>, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ('running', 'waiting') \
         AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2{}",
        tx.skip_locked_clause()
    );
    let rows = on_tx!(tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(now)
        .bind(limit)
        .fetch_all(conn)
        .await)?;
    Ok(rows)
}

/// How many jobs wait for this device.
///
/// # Errors
/// A database error.
pub(crate) async fn count_queued(tx: &mut Tx, device_id: &DeviceId) -> Result<i64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM jobs WHERE device_id = $1 AND state = 'queued'"
    )
    .bind(device_id.as_str())
    .fetch_one(conn)
    .await)?;
    Ok(count)
}

/// How many runs of the account are going (running or waiting).
///
/// # Errors
/// A database error.
pub(crate) async fn running_in_account(
    tx: &mut Tx,
    account_id: &AccountId,
) -> Result<i64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM jobs WHERE account_id = $1 AND state IN ('running', 'waiting')"
    )
    .bind(account_id.as_str())
    .fetch_one(conn)
    .await)?;
    Ok(count)
}

// ---- Transitions ----

/// Stores a new `queued` job.
///
/// # Errors
/// A database error.
pub(crate) async fn insert_queued(
    tx: &mut Tx,
    job_id: &JobId,
    account_id: &AccountId,
    device_id: &DeviceId,
    spec: &JobSpec,
    continues: Option<&JobId>,
    now: Millis,
) -> Result<(), ApiError> {
    let sql = "INSERT INTO jobs (id, account_id, device_id, title, spec_json, state, created_at, \
               continues) VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7)";
    let spec_json = serde_json::to_string(spec)?;
    on_tx!(tx, |conn| sqlx::query(sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .bind(device_id.as_str())
        .bind(&spec.title)
        .bind(&spec_json)
        .bind(now)
        .bind(continues.map(JobId::as_str))
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Stores a new `queued` job and its ledger `entry` on PostgreSQL in one statement, without
/// a transaction, if its device is this account's and not revoked. Answers whether it was
/// stored.
///
/// # Errors
/// A database error.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn queue_alone(
    pool: &sqlx::PgPool,
    job_id: &JobId,
    account_id: &AccountId,
    device_id: &DeviceId,
    spec: &JobSpec,
    now: Millis,
    entry: ledger::Entry,
    checked: bool,
) -> Result<bool, ApiError> {
    // With `checked` false, the device must also publish the spec's engine and share its
    // folder, as its last capability report says (what `jobs::create` checks otherwise
    // with a read first).
    let sql = format!(
        "WITH device AS (SELECT id FROM devices WHERE id = $3 AND account_id = $2 \
         AND revoked_at IS NULL AND ($11 OR ((capabilities_json::jsonb -> 'engines') \
         @> jsonb_build_array(jsonb_build_object('name', $12::text)) \
         AND (capabilities_json::jsonb -> 'folders') ? $13))), \
         job AS (INSERT INTO jobs (id, account_id, device_id, title, spec_json, state, created_at) \
         SELECT $1, $2, device.id, $4, $5, 'queued', $6 FROM device RETURNING id), \
         entry AS (INSERT INTO ledger ({}) SELECT $7, $2, $6, $8, $9, $10 FROM job) \
         SELECT COUNT(*) FROM job",
        ledger::Entry::COLUMNS
    );
    let spec_json = serde_json::to_string(spec)?;
    let stored = sqlx::query_scalar::<_, i64>(&sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .bind(device_id.as_str())
        .bind(&spec.title)
        .bind(&spec_json)
        .bind(now)
        .bind(&entry.id)
        .bind(entry.kind.as_str())
        .bind(&entry.subject)
        .bind(&entry.detail_json)
        .bind(checked)
        .bind(&spec.engine)
        .bind(&spec.folder)
        .fetch_one(pool)
        .await?;
    Ok(stored == 1)
}

/// Stores what each attempt used ([`JobRow::observed_with`]), with a completion.
///
/// # Errors
/// A database error.
pub(crate) async fn store_observed(tx: &mut Tx, job: &JobRow, json: &str) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET observed_json = $1 WHERE id = $2"
    )
    .bind(json)
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Stores what the run changed (checked by the caller), with its completion.
///
/// # Errors
/// A database error.
pub(crate) async fn store_changes(
    tx: &mut Tx,
    job: &JobRow,
    changes: &Changes,
) -> Result<(), ApiError> {
    let json = serde_json::to_string(changes)?;
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET changes_json = $1 WHERE id = $2"
    )
    .bind(&json)
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Stores what became of the run's work in git (checked by the caller), with its
/// completion.
///
/// # Errors
/// A database error.
pub(crate) async fn store_delivery(
    tx: &mut Tx,
    job: &JobRow,
    report: &DeliveryReport,
) -> Result<(), ApiError> {
    let json = serde_json::to_string(report)?;
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET delivery_json = $1 WHERE id = $2"
    )
    .bind(&json)
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Notes the last progress batch applied (`seq`, when this one applied), so a retried one
/// changes nothing, moves the lease expiry to `lease_until` and, when given, keeps what the
/// attempt used ([`JobRow::observed_with`]), in one statement.
///
/// # Errors
/// A database error.
pub(crate) async fn record_progress(
    tx: &mut Tx,
    job: &JobRow,
    seq: Option<i64>,
    lease_until: Millis,
    observed_json: Option<&str>,
) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET progress_seq = COALESCE($1, progress_seq), lease_expires_at = $2, \
         observed_json = COALESCE($3, observed_json) WHERE id = $4"
    )
    .bind(seq)
    .bind(lease_until)
    .bind(observed_json)
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Where a progress batch's lines were stored: numbered after `base`, each at its time
/// (`now` past the end of the times given), never before `floor`. The caller tells the
/// lines as stored from it without reading them back (a job's live feed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    base: i64,
    floor: Option<Millis>,
}

impl Appended {
    /// `lines` (kind, text), appended with `ats` at `now`, as they were stored.
    pub(crate) fn events(
        self,
        lines: Vec<(&'static str, String)>,
        ats: &[Millis],
        now: Millis,
    ) -> Vec<JobEvent> {
        let floor = self.floor.unwrap_or(Millis::MIN);
        (self.base + 1..)
            .zip(lines)
            .enumerate()
            .map(|(index, (seq, (kind, text)))| JobEvent {
                seq,
                at: to_time(ats.get(index).copied().unwrap_or(now).max(floor)),
                kind: kind.to_owned(),
                text,
                entry: None,
            })
            .collect()
    }
}

/// A progress batch on PostgreSQL as one statement without a transaction: its lines, its
/// `seq` and the lease extension, fenced in the `WHERE` (this device's job, running or
/// waiting, under the unexpired `lease`, `seq` not applied yet). Answers the job's
/// `cancel_requested` and where the lines went when the batch applied; `None` on SQLite or
/// when it did not, and then nothing was written (the caller's transaction tells a retry
/// from a stale lease).
///
/// # Errors
/// A database error.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn progress_in_one(
    store: &Store,
    device_id: &DeviceId,
    job_id: &JobId,
    lease: &LeaseToken,
    seq: i64,
    lines: &[Line<'_>],
    ats: &[Millis],
    lease_until: Millis,
    now: Millis,
) -> Result<Option<(bool, Appended)>, ApiError> {
    let Some(pool) = store.postgres_pool() else {
        return Ok(None);
    };
    let hash = credentials::hash_token(lease.expose());
    let device = device_id.as_str().to_owned();
    let set: Clause = Box::new(move |query| {
        query.push(", progress_seq = ").push_bind(seq);
        query.push(", lease_expires_at = ").push_bind(lease_until);
    });
    let filter: Clause = Box::new(move |query| {
        query.push(" AND device_id = ").push_bind(device);
        query.push(" AND state IN ('running', 'waiting') AND lease_expires_at > ");
        query.push_bind(now);
        query.push(" AND lease_token_hash = ").push_bind(hash);
        query.push(" AND progress_seq < ").push_bind(seq);
    });
    let matched = update_with_timed_lines(
        pool,
        job_id.as_str(),
        now,
        lines,
        ats,
        Some(set),
        Some(filter),
    )
    .await?;
    Ok(matched.map(|matched| (matched.cancel_requested != 0, appended(matched))))
}

fn appended(matched: in_one::Matched) -> Appended {
    Appended {
        base: matched.base,
        floor: matched.floor,
    }
}

/// Moves the job's lease expiry to `until`.
///
/// # Errors
/// A database error.
pub(crate) async fn extend_lease(tx: &mut Tx, job: &JobRow, until: Millis) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET lease_expires_at = $1 WHERE id = $2"
    )
    .bind(until)
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// The outage grace: every running or waiting lease that would expire before `until` runs
/// until then. Returns how many were extended.
///
/// # Errors
/// A database error.
pub(crate) async fn extend_running_leases(tx: &mut Tx, until: Millis) -> Result<u64, ApiError> {
    let extended = on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET lease_expires_at = $1 \
         WHERE state IN ('running', 'waiting') AND lease_expires_at < $1"
    )
    .bind(until)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(extended)
}

/// The run asked a question: `running` → `waiting`, the lease extended to `lease_until`
/// like by progress.
///
/// # Errors
/// A database error.
pub(crate) async fn start_waiting(
    tx: &mut Tx,
    job: &JobRow,
    lease_until: Millis,
) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET state = 'waiting', lease_expires_at = $1 WHERE id = $2"
    )
    .bind(lease_until)
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// A waiting job with nothing pending (and unexpired) any more is running again.
///
/// # Errors
/// A database error.
pub(crate) async fn resume_if_idle(tx: &mut Tx, job: &JobRow, now: Millis) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET state = 'running' WHERE id = $1 AND state = 'waiting' \
         AND NOT EXISTS (SELECT 1 FROM decisions WHERE account_id = $2 AND job_id = $1 \
         AND state = 'pending' AND expires_at > $3)"
    )
    .bind(&job.id)
    .bind(&job.account_id)
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// The owner asked a running or waiting job to stop; its device completes it `cancelled`.
///
/// # Errors
/// A database error.
pub(crate) async fn request_cancel(tx: &mut Tx, job: &JobRow) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE jobs SET cancel_requested = 1 WHERE id = $1"
    )
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Puts `job` back to running (a waiting job stays waiting) under `lease` until
/// `lease_until`; with `new_attempt` = `(attempt, resumes)`, as a new attempt.
///
/// # Errors
/// A database error.
pub(crate) async fn revive(
    tx: &mut Tx,
    job: &JobRow,
    lease: &LeaseToken,
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
        .bind(credentials::hash_token(lease.expose()))
        .bind(lease_until)
        .bind(&job.id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Ends `job` with `outcome`: state, outcome, end time, cause, lease expiry cleared, a
/// `system` event, its pending decisions settled and the ledger entry. The lease token hash
/// is kept only for a device's own completion (so it can be answered again); other ends
/// clear it. `last_lease_hash` is kept either way, for reattach.
///
/// # Errors
/// A database error.
pub(crate) async fn finish(
    tx: &mut Tx,
    job: &JobRow,
    outcome: &JobOutcome,
    cause: EndCause,
    now: Millis,
) -> Result<(), ApiError> {
    let state = outcome.outcome.state();
    // Only the device completes with something other than `interrupted`; a queued job has
    // no lease hash to keep.
    let keep_lease = outcome.outcome != Outcome::Interrupted;
    let outcome_json = serde_json::to_string(outcome)?;
    let text = truncate(
        &format!("Ended {}: {}", state.as_str(), outcome.summary),
        4096,
    );
    if let Tx::Postgres(tx) = tx {
        let set: Clause = Box::new(move |query| {
            query.push(", state = ").push_bind(state.as_str());
            query.push(", outcome_json = ").push_bind(outcome_json);
            query.push(", ended_at = ").push_bind(now);
            query.push(", lease_expires_at = NULL");
            if !keep_lease {
                query.push(", lease_token_hash = NULL");
            }
            query.push(", end_cause = ").push_bind(cause.as_str());
        });
        let lines = [("system", text.as_str())];
        update_with_lines(&mut **tx, &job.id, now, &lines, Some(set), None).await?;
    } else {
        let sql = "UPDATE jobs SET state = $1, outcome_json = $2, ended_at = $3, \
                   lease_expires_at = NULL, \
                   lease_token_hash = CASE WHEN $4 = 1 THEN lease_token_hash ELSE NULL END, \
                   end_cause = $5 WHERE id = $6";
        on_tx!(tx, |conn| sqlx::query(sql)
            .bind(state.as_str())
            .bind(&outcome_json)
            .bind(now)
            .bind(i64::from(keep_lease))
            .bind(cause.as_str())
            .bind(&job.id)
            .execute(conn)
            .await
            .map(|done| done.rows_affected()))?;
        append_events(tx, job, now, "system", &[text]).await?;
    }
    let open_decisions = if cause == EndCause::LeaseExpired {
        OpenDecisions::Expire
    } else {
        OpenDecisions::Withdraw
    };
    settle_open(tx, job, open_decisions, now).await?;
    let detail = json!({ "jobId": job.id, "deviceId": job.device_id, "outcome": state.as_str(),
                         "attempt": job.attempt });
    ledger::record(
        tx,
        &job.account_id()?,
        now,
        LedgerKind::JobEnded,
        &job.id,
        detail,
    )
    .await
}

/// Ends every unfinished job of a revoked device: running and waiting ones `interrupted`,
/// queued ones `cancelled`. Returns how many ended.
///
/// # Errors
/// A database error.
pub(crate) async fn end_for_revoked_device(
    tx: &mut Tx,
    device_id: &DeviceId,
    now: Millis,
) -> Result<usize, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE device_id = $1 \
         AND state IN ('queued', 'running', 'waiting') ORDER BY created_at{}",
        tx.lock_clause()
    );
    let rows = on_tx!(tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(device_id.as_str())
        .fetch_all(conn)
        .await)?;
    for job in &rows {
        let ended = if job.state()? == JobState::Queued {
            outcome(
                Outcome::Cancelled,
                "The device was revoked before the job started.",
            )
        } else {
            outcome(
                Outcome::Interrupted,
                "The device was revoked while the job ran.",
            )
        };
        finish(tx, job, &ended, EndCause::Revoked, now).await?;
    }
    Ok(rows.len())
}

/// Settles every pending decision of `job` (expired or withdrawn) and puts a waiting job
/// back to running. The caller holds the job's row lock. Returns how many it settled.
///
/// # Errors
/// A database error.
pub(crate) async fn settle_open(
    tx: &mut Tx,
    job: &JobRow,
    how: OpenDecisions,
    now: Millis,
) -> Result<u64, ApiError> {
    let state = match how {
        OpenDecisions::Expire => DecisionState::Expired,
        OpenDecisions::Withdraw => DecisionState::Withdrawn,
    };
    let settled = on_tx!(tx, |conn| sqlx::query(
        "UPDATE decisions SET state = $1, answered_at = $2 \
         WHERE account_id = $3 AND job_id = $4 AND state = 'pending'"
    )
    .bind(state.as_str())
    .bind(now)
    .bind(&job.account_id)
    .bind(&job.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if settled > 0 {
        resume_if_idle(tx, job, now).await?;
    }
    Ok(settled)
}

/// Appends timeline lines of one kind, numbering them after the job's last event.
///
/// # Errors
/// A database error.
pub(crate) async fn append_events(
    tx: &mut Tx,
    job: &JobRow,
    now: Millis,
    kind: &str,
    texts: &[String],
) -> Result<(), ApiError> {
    if texts.is_empty() {
        return Ok(());
    }
    if let Tx::Postgres(tx) = tx {
        let lines: Vec<Line> = texts.iter().map(|text| (kind, text.as_str())).collect();
        update_with_lines(&mut **tx, &job.id, now, &lines, None, None).await?;
        return Ok(());
    }
    let count = i64::try_from(texts.len()).unwrap_or(i64::MAX);
    // The UPDATE also locks the job row, so concurrent appends cannot reuse a seq.
    let last = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "UPDATE jobs SET event_seq = event_seq + $1 WHERE id = $2 RETURNING event_seq"
    )
    .bind(count)
    .bind(&job.id)
    .fetch_one(conn)
    .await)?;
    let first = last - count + 1;
    let mut sql =
        String::from("INSERT INTO job_events (job_id, account_id, at, kind, seq, text) VALUES ");
    for index in 0..texts.len() {
        let param = 5 + 2 * index;
        if index > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("($1, $2, $3, $4, ${param}, ${})", param + 1));
    }
    on_tx!(tx, |conn| {
        let mut query = sqlx::query(&sql)
            .bind(&job.id)
            .bind(&job.account_id)
            .bind(now)
            .bind(kind);
        for (offset, text) in (0_i64..).zip(texts) {
            query = query.bind(first + offset).bind(text);
        }
        query.execute(conn).await.map(|done| done.rows_affected())
    })?;
    Ok(())
}

/// Appends a progress batch's lines (output, then its status), each at its own time in
/// `ats` (`now` past its end), never before the job's last line already stored. Answers
/// where they went.
///
/// # Errors
/// A database error.
pub(crate) async fn append_timed_events(
    tx: &mut Tx,
    job: &JobRow,
    now: Millis,
    lines: &[Line<'_>],
    ats: &[Millis],
) -> Result<Appended, ApiError> {
    if let Tx::Postgres(tx) = tx {
        let matched =
            update_with_timed_lines(&mut **tx, &job.id, now, lines, ats, None, None).await?;
        return matched
            .map(appended)
            .ok_or_else(|| ApiError::internal(&format_args!("job {} has no row", job.id)));
    }
    let last_at = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT at FROM job_events WHERE job_id = $1 ORDER BY seq DESC LIMIT 1"
    )
    .bind(&job.id)
    .fetch_optional(conn)
    .await)?;
    let count = i64::try_from(lines.len()).unwrap_or(i64::MAX);
    // The UPDATE also locks the job row, so concurrent appends cannot reuse a seq.
    let last = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "UPDATE jobs SET event_seq = event_seq + $1 WHERE id = $2 RETURNING event_seq"
    )
    .bind(count)
    .bind(&job.id)
    .fetch_one(conn)
    .await)?;
    let stored = Appended {
        base: last - count,
        floor: last_at,
    };
    if lines.is_empty() {
        return Ok(stored);
    }
    let mut sql =
        String::from("INSERT INTO job_events (job_id, account_id, kind, seq, at, text) VALUES ");
    for index in 0..lines.len() {
        let param = 3 + 4 * index;
        if index > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "($1, $2, ${param}, ${}, ${}, ${})",
            param + 1,
            param + 2,
            param + 3
        ));
    }
    let floor = last_at.unwrap_or(Millis::MIN);
    on_tx!(tx, |conn| {
        let mut query = sqlx::query(&sql).bind(&job.id).bind(&job.account_id);
        for (index, (kind, text)) in lines.iter().enumerate() {
            let at = ats.get(index).copied().unwrap_or(now);
            query = query
                .bind(*kind)
                .bind(stored.base + 1 + i64::try_from(index).unwrap_or(i64::MAX))
                .bind(at.max(floor))
                .bind(*text);
        }
        query.execute(conn).await.map(|done| done.rows_affected())
    })?;
    Ok(stored)
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct EventRow {
    seq: i64,
    at: i64,
    kind: String,
    text: String,
}

impl EventRow {
    fn into_event(self) -> JobEvent {
        JobEvent {
            seq: self.seq,
            at: to_time(self.at),
            kind: self.kind,
            text: self.text,
            entry: None,
        }
    }
}
