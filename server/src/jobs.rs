//! Jobs as the web sees them: create, list, read, cancel; and the shared job-row helpers
//! the lease protocol ([`crate::leases`]) and the sweeper build on.
//!
//! Pages call [`create`], [`list`], [`get`] and [`cancel`].
//!
//! **Invariant:** a job never moves to another device, and a job of another account is
//! `not_found`. Every end of a job goes through `finish`, which writes the outcome, a
//! `system` event and the `job.ended` ledger entry in the caller's transaction.

use serde_json::json;
use tether_protocol::jobs::{Job, JobEvent, JobOutcome, JobSpec, JobState, NewJobParams, Outcome};
use tether_protocol::{AccountId, Code, DeviceId, JobId};

use crate::accounts::parse_name;
use crate::decisions::Settlement;
use crate::devices;
use crate::error::ApiError;
use crate::ledger::{self, LedgerKind};
use crate::store::{now_millis, on_read, on_tx, stored_id, to_time, Millis, Store, Tx};

/// Longest prompt, in characters.
pub const MAX_PROMPT_CHARS: usize = 20_000;
/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Most jobs one list answer holds (newest first).
pub const LIST_LIMIT: i64 = 200;

/// Which jobs `GET /api/jobs` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub device_id: Option<DeviceId>,
    pub state: Option<JobState>,
}

/// Queues a job for a device of `account_id`, checking the engine and folder against the
/// device's last capability report.
///
/// # Errors
/// 422 `invalid_field`, 404 for a device not of this account or revoked, 422
/// `unknown_engine` / `unknown_folder` (also before the device reported anything).
pub async fn create(
    store: &Store,
    account_id: &AccountId,
    params: NewJobParams,
) -> Result<Job, ApiError> {
    let device_id = params.device_id.clone();
    let spec = parse_spec(params)?;
    let now = now_millis();
    let mut tx = store.begin().await?;
    let capabilities = devices::usable_capabilities(&mut tx, account_id, &device_id).await?;
    let engine_known = capabilities
        .as_ref()
        .is_some_and(|caps| caps.engines.iter().any(|engine| engine.name == spec.engine));
    if !engine_known {
        return Err(ApiError::new(
            Code::UnknownEngine,
            format!(
                "engine: the device does not publish an engine named {:?}.",
                spec.engine
            ),
        ));
    }
    let folder_known = capabilities
        .as_ref()
        .is_some_and(|caps| caps.folders.contains(&spec.folder));
    if !folder_known {
        return Err(ApiError::new(
            Code::UnknownFolder,
            format!(
                "folder: the device does not share a folder labelled {:?}.",
                spec.folder
            ),
        ));
    }
    let job_id = JobId::generate();
    let sql = "INSERT INTO jobs (id, account_id, device_id, title, spec_json, state, created_at) \
               VALUES ($1, $2, $3, $4, $5, 'queued', $6)";
    on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .bind(device_id.as_str())
        .bind(&spec.title)
        .bind(serde_json::to_string(&spec)?)
        .bind(now)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    let detail = json!({ "jobId": job_id, "deviceId": device_id, "engine": spec.engine,
                         "folder": spec.folder, "mode": spec.mode });
    ledger::record(
        &mut tx,
        account_id,
        now,
        LedgerKind::JobCreated,
        job_id.as_str(),
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, device_id = %device_id, "job queued");
    get(store, account_id, &job_id).await
}

/// The account's jobs, newest first, without events.
///
/// # Errors
/// A database error.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    filter: JobFilter,
) -> Result<Vec<Job>, ApiError> {
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE account_id = $1 \
         AND ($2 = '' OR device_id = $2) AND ($3 = '' OR state = $3) \
         ORDER BY created_at DESC, id DESC LIMIT $4"
    );
    let device = filter.device_id.as_ref().map_or("", DeviceId::as_str);
    let state = filter.state.map_or("", JobState::as_str);
    let rows = on_read!(store, |pool| sqlx::query_as::<_, JobRow>(&sql)
        .bind(account_id.as_str())
        .bind(device)
        .bind(state)
        .bind(LIST_LIMIT)
        .fetch_all(pool)
        .await)?;
    rows.into_iter()
        .map(|row| row.into_job(Vec::new()))
        .collect()
}

/// One job of `account_id` with its timeline.
///
/// # Errors
/// 404 `not_found` for an unknown job or another account's.
pub async fn get(store: &Store, account_id: &AccountId, job_id: &JobId) -> Result<Job, ApiError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND account_id = $2");
    let row = on_read!(store, |pool| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    let row = row.ok_or_else(|| ApiError::not_found("job"))?;
    let events = on_read!(store, |pool| sqlx::query_as::<_, EventRow>(
        "SELECT seq, at, kind, text FROM job_events WHERE job_id = $1 ORDER BY seq"
    )
    .bind(job_id.as_str())
    .fetch_all(pool)
    .await)?;
    let mut job = row.into_job(events.into_iter().map(EventRow::into_event).collect())?;
    job.evidence = crate::evidence::list(store, account_id, job_id).await?;
    job.decisions = crate::decisions::for_job(store, account_id, job_id).await?;
    Ok(job)
}

/// Cancels a job: a queued one ends `cancelled` at once; a running or waiting one gets
/// `cancelRequested`, and its device completes it `cancelled`.
///
/// # Errors
/// 404 for a job not of this account, 409 `invalid_state` for a job that already ended.
pub async fn cancel(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Job, ApiError> {
    let now = now_millis();
    let mut tx = store.begin().await?;
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND account_id = $2{}",
        tx.lock_clause()
    );
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, JobRow>(&sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(conn)
        .await)?;
    let job = row.ok_or_else(|| ApiError::not_found("job"))?;
    match job.state()? {
        JobState::Queued => {
            let outcome = outcome(Outcome::Cancelled, "Cancelled before it started.");
            finish(&mut tx, &job, &outcome, EndCause::Owner, now).await?;
        }
        JobState::Running | JobState::Waiting => {
            // The run is stopping: nothing it asked needs an answer any more.
            crate::decisions::settle_open(&mut tx, &job, Settlement::Withdrawn, now).await?;
            if job.cancel_requested == 0 {
                on_tx!(&mut tx, |conn| sqlx::query(
                    "UPDATE jobs SET cancel_requested = 1 WHERE id = $1"
                )
                .bind(job_id.as_str())
                .execute(conn)
                .await
                .map(|done| done.rows_affected()))?;
                append_events(
                    &mut tx,
                    &job,
                    now,
                    "system",
                    &["Cancel requested.".to_owned()],
                )
                .await?;
            }
        }
        ended => {
            return Err(ApiError::new(
                Code::InvalidState,
                format!("The job already ended ({}).", ended.as_str()),
            ))
        }
    }
    tx.commit().await?;
    get(store, account_id, job_id).await
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

/// Ends `job` with `outcome`: state, outcome, end time, cause, lease expiry cleared, a
/// `system` event, its pending decisions settled and the ledger entry. The lease token hash is kept only for a device's own
/// completion (so it can be answered again); other ends clear it. `last_lease_hash` is kept
/// either way, for reattach.
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
    let sql = "UPDATE jobs SET state = $1, outcome_json = $2, ended_at = $3, \
               lease_expires_at = NULL, \
               lease_token_hash = CASE WHEN $4 = 1 THEN lease_token_hash ELSE NULL END, \
               end_cause = $5 WHERE id = $6";
    on_tx!(tx, |conn| sqlx::query(sql)
        .bind(state.as_str())
        .bind(serde_json::to_string(outcome)?)
        .bind(now)
        .bind(i64::from(keep_lease))
        .bind(cause.as_str())
        .bind(&job.id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    let text = format!("Ended {}: {}", state.as_str(), outcome.summary);
    append_events(tx, job, now, "system", &[truncate(&text, 4096)]).await?;
    let open_decisions = if cause == EndCause::LeaseExpired {
        Settlement::Expired
    } else {
        Settlement::Withdrawn
    };
    crate::decisions::settle_open(tx, job, open_decisions, now).await?;
    let account_id: AccountId = stored_id(job.account_id.clone())?;
    let detail = json!({ "jobId": job.id, "deviceId": job.device_id, "outcome": state.as_str(),
                         "attempt": job.attempt });
    ledger::record(tx, &account_id, now, LedgerKind::JobEnded, &job.id, detail).await
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

/// Cuts `text` to at most `max_bytes`, on a character boundary.
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

fn parse_spec(params: NewJobParams) -> Result<JobSpec, ApiError> {
    let title = parse_name("title", &params.title, MAX_TITLE_CHARS)?;
    // An empty prompt is fine: a recipe such as `cargo test` needs none.
    if params.prompt.chars().count() > MAX_PROMPT_CHARS {
        return Err(ApiError::invalid_field(
            "prompt",
            "must be at most 20000 characters.",
        ));
    }
    let folder = parse_name("folder", &params.folder, 100)?;
    let engine = parse_name("engine", &params.engine, 100)?;
    if !(1..=1440).contains(&params.timeout_minutes) {
        return Err(ApiError::invalid_field(
            "timeoutMinutes",
            "must be 1 to 1440.",
        ));
    }
    check_secret_names(&params.secrets)?;
    Ok(JobSpec {
        title,
        prompt: params.prompt,
        folder,
        engine,
        mode: params.mode,
        network: params.network,
        timeout_minutes: params.timeout_minutes,
        secrets: params.secrets,
    })
}

fn check_secret_names(names: &[String]) -> Result<(), ApiError> {
    if names.len() > 32 {
        return Err(ApiError::invalid_field("secrets", "at most 32 names."));
    }
    let shape_ok = |name: &String| {
        !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if !names.iter().all(shape_ok) {
        return Err(ApiError::invalid_field(
            "secrets",
            "each name is 1 to 64 letters, digits, '_', '-' or '.'.",
        ));
    }
    Ok(())
}

pub(crate) const JOB_COLUMNS: &str =
    "id, account_id, device_id, title, spec_json, state, attempt, \
    cancel_requested, outcome_json, lease_token_hash, lease_expires_at, progress_seq, \
    created_at, started_at, ended_at, last_lease_hash, end_cause, resumes";

/// A `jobs` row. Not `Serialize`: [`JobRow::into_job`] builds the wire type.
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
}

impl JobRow {
    pub(crate) fn state(&self) -> Result<JobState, ApiError> {
        JobState::parse(&self.state)
            .ok_or_else(|| ApiError::internal(&format_args!("stored job state {:?}", self.state)))
    }

    pub(crate) fn spec(&self) -> Result<JobSpec, ApiError> {
        Ok(serde_json::from_str(&self.spec_json)?)
    }

    pub(crate) fn into_job(self, events: Vec<JobEvent>) -> Result<Job, ApiError> {
        Ok(Job {
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
        })
    }
}

#[derive(sqlx::FromRow)]
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
        }
    }
}
