//! A claim and a plain end in as few statements as each backend allows.
//!
//! On PostgreSQL each is one statement in its own transaction: the claim calls
//! `tether_claim` (migration 0023), the end is one fenced `UPDATE` that also writes its
//! timeline line and ledger entry, counts the account's going runs and reads the job's
//! answer. On SQLite, whose one writer takes transactions in turn, each is a short write
//! transaction: the claim's `UPDATE` picks the job and checks the run limit itself, the end's
//! is fenced, and a line, a ledger entry and one read follow.
//!
//! The number of statements a job costs, not the rows they touch, sets its CPU: on
//! PostgreSQL each is a round trip that wakes a backend and the server, on SQLite a hand-off
//! to the connection's thread and back. The end falls back to the general path (a
//! transaction that reads the row first) for what it does not cover.

use serde_json::Value;
use sqlx::{PgPool, Row};
use tether_protocol::jobs::{JobEvent, JobOutcome, Outcome};
use tether_protocol::{AccountId, DeviceId, JobId, LeaseToken};

use super::{truncate, EventRow, JobRow, CLAIMABLE, JOB_COLUMNS};
use crate::clock::Millis;
use crate::credentials;
use crate::error::ApiError;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{Store, Tx};

/// A job a claim took.
pub(crate) struct Claimed {
    /// The row as claimed (state `running`, its new attempt).
    pub row: JobRow,
    /// Nothing else was queued for the device when it was claimed: its next claim has
    /// nothing to find unless a job is queued meanwhile.
    pub drained: bool,
}

/// The `drained` column: whether the device (`$1`) has no queued job besides the one the
/// claiming statement names `claimed`.
fn drained_column(claimed: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM jobs queued WHERE queued.device_id = $1 \
         AND queued.state = 'queued' AND queued.id <> {claimed}.id) AS drained"
    )
}

/// Claims the device's oldest claimable job if its account runs fewer than `limit`, under
/// a new lease (`lease_hash`) until `lease_until`. `None` when nothing was claimed.
///
/// # Errors
/// A database error.
pub(crate) async fn claim(
    pool: &PgPool,
    device_id: &DeviceId,
    account_id: &AccountId,
    limit: u32,
    lease_hash: &str,
    lease_until: Millis,
    now: Millis,
) -> Result<Option<Claimed>, ApiError> {
    // The outer statement's snapshot predates the claim, so the claimed job still reads as
    // queued there: hence `<> claimed.id`.
    let sql = format!(
        "SELECT {JOB_COLUMNS}, {} FROM tether_claim($1, $2, $3, $4, $5, $6) claimed",
        drained_column("claimed")
    );
    let found = sqlx::query(&sql)
        .bind(device_id.as_str())
        .bind(account_id.as_str())
        .bind(i64::from(limit))
        .bind(lease_hash)
        .bind(lease_until)
        .bind(now)
        .fetch_optional(pool)
        .await?;
    found.map(|found| claimed(&found)).transpose()
}

fn claimed<R>(found: &R) -> Result<Claimed, ApiError>
where
    R: sqlx::Row,
    JobRow: for<'r> sqlx::FromRow<'r, R>,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    bool: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(Claimed {
        row: <JobRow as sqlx::FromRow<R>>::from_row(found)?,
        drained: found.try_get("drained")?,
    })
}

/// A run the device ended in one statement.
pub(crate) struct Ended {
    /// The row as ended.
    pub row: JobRow,
    /// Its timeline, the end's line included.
    pub events: Vec<JobEvent>,
    /// The account's going runs just before this end (this one included).
    pub going_before: i64,
    /// The job has decisions, evidence, a follow-up or a re-run: its answer needs the
    /// general read.
    pub has_more: bool,
}

/// The fenced end of a run, the same on both backends: `$1` state, `$2` outcome, `$3` now,
/// `$4` whether the lease's hash goes (an `interrupted` end), `$5` the changes (or null),
/// `$6` job, `$7` device, `$8` the lease's hash. It matches only a live lease of this
/// device on a job with no pending decision.
const END_UPDATE: &str = "UPDATE jobs SET event_seq = event_seq + 1, state = $1, \
    outcome_json = $2, ended_at = $3, lease_expires_at = NULL, end_cause = 'device', \
    lease_token_hash = CASE WHEN $4 THEN NULL ELSE lease_token_hash END, \
    changes_json = COALESCE($5, changes_json) \
    WHERE id = $6 AND device_id = $7 AND state IN ('running', 'waiting') \
    AND lease_expires_at > $3 AND lease_token_hash = $8 \
    AND NOT EXISTS (SELECT 1 FROM decisions WHERE decisions.job_id = jobs.id \
    AND decisions.state = 'pending')";

/// What an end writes, worked out once for either backend.
struct EndWrite {
    state: &'static str,
    outcome_json: String,
    /// Only the device ends a run other than `interrupted`: it keeps the lease's hash, so
    /// the same completion again is recognised.
    drops_lease: bool,
    changes_json: Option<String>,
    /// The end's timeline line.
    line: String,
}

impl EndWrite {
    fn new(outcome: &JobOutcome, changes_json: Option<String>) -> Result<EndWrite, ApiError> {
        let state = outcome.outcome.state().as_str();
        Ok(EndWrite {
            state,
            outcome_json: serde_json::to_string(outcome)?,
            drops_lease: outcome.outcome == Outcome::Interrupted,
            changes_json,
            line: truncate(&format!("Ended {state}: {}", outcome.summary), 4096),
        })
    }
}

/// Binds [`END_UPDATE`]'s `$1`…`$8` onto a query of either backend.
macro_rules! bind_end {
    ($query:expr, $end:expr, $job_id:expr, $device_id:expr, $lease:expr, $now:expr) => {
        $query
            .bind($end.state)
            .bind(&$end.outcome_json)
            .bind($now)
            .bind($end.drops_lease)
            .bind($end.changes_json.as_deref())
            .bind($job_id.as_str())
            .bind($device_id.as_str())
            .bind(credentials::hash_token($lease.expose()))
    };
}

/// Ends a run the device holds under `lease` with `outcome`, storing `changes_json` when
/// given, if the lease is live and the job has no pending decision (those are settled by
/// the general path). Answers `None` when that did not match (a stale lease, a repeated
/// completion, a job of another device, a pending decision): nothing was written and the
/// general path decides.
///
/// # Errors
/// A database error.
pub(crate) async fn end(
    pool: &PgPool,
    device_id: &DeviceId,
    job_id: &JobId,
    lease: &LeaseToken,
    outcome: &JobOutcome,
    changes_json: Option<String>,
    now: Millis,
) -> Result<Option<Ended>, ApiError> {
    let end = EndWrite::new(outcome, changes_json)?;
    let entry = ledger::Entry::new(LedgerKind::JobEnded, job_id.as_str(), Value::Null);
    // The statement reads the rows as they were before it: the going count still holds
    // this run, and the timeline lacks the end's line (added below).
    let sql = format!(
        "WITH changed AS ({END_UPDATE} RETURNING {JOB_COLUMNS}, event_seq), \
         line AS (INSERT INTO job_events (job_id, account_id, at, kind, seq, text) \
          SELECT id, account_id, $3, 'system', event_seq, $9 FROM changed), \
         entry AS (INSERT INTO ledger ({}) SELECT $10, account_id, $3, $11, id, \
          json_build_object('attempt', attempt, 'deviceId', device_id, 'jobId', id, \
          'outcome', state)::text FROM changed) \
         SELECT {JOB_COLUMNS}, event_seq, \
         (SELECT COUNT(*) FROM jobs going WHERE going.account_id = changed.account_id \
          AND going.state IN ('running', 'waiting')) AS going_before, \
         (SELECT COALESCE(json_agg(json_build_object('seq', e.seq, 'at', e.at, \
          'kind', e.kind, 'text', e.text) ORDER BY e.seq), '[]') \
          FROM job_events e WHERE e.job_id = changed.id)::text AS events_json, \
         (EXISTS (SELECT 1 FROM decisions d WHERE d.job_id = changed.id) \
          OR EXISTS (SELECT 1 FROM evidence v WHERE v.job_id = changed.id) \
          OR EXISTS (SELECT 1 FROM jobs f WHERE f.continues = changed.id) \
          OR EXISTS (SELECT 1 FROM jobs f WHERE f.rerun_of = changed.id)) AS has_more \
         FROM changed",
        ledger::Entry::COLUMNS
    );
    let query = bind_end!(sqlx::query(&sql), end, job_id, device_id, lease, now);
    let found = query
        .bind(&end.line)
        .bind(&entry.id)
        .bind(entry.kind.as_str())
        .fetch_optional(pool)
        .await?;
    let Some(found) = found else {
        return Ok(None);
    };
    let row = <JobRow as sqlx::FromRow<_>>::from_row(&found)?;
    let events_json: String = found.try_get("events_json")?;
    let mut events: Vec<EventRow> = serde_json::from_str(&events_json)?;
    events.push(EventRow {
        seq: found.try_get("event_seq")?,
        at: now,
        kind: "system".to_owned(),
        text: end.line,
    });
    Ok(Some(Ended {
        row,
        events: events.into_iter().map(EventRow::into_event).collect(),
        going_before: found.try_get("going_before")?,
        has_more: found.try_get("has_more")?,
    }))
}

/// [`claim`] on SQLite: one `UPDATE` picks the device's oldest claimable job and counts the
/// account's going runs (exact: the writer is this transaction's alone), then its line.
///
/// # Errors
/// A database error.
pub(crate) async fn claim_sqlite(
    store: &Store,
    device_id: &DeviceId,
    account_id: &AccountId,
    limit: u32,
    lease_hash: &str,
    lease_until: Millis,
    now: Millis,
) -> Result<Option<Claimed>, ApiError> {
    let mut tx = store.begin().await?;
    let Tx::Sqlite(conn) = &mut tx else {
        return Ok(None);
    };
    let sql = format!(
        "UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_token_hash = $2, \
         last_lease_hash = $2, lease_expires_at = $3, started_at = COALESCE(started_at, $4), \
         progress_seq = 0, event_seq = event_seq + 1 \
         WHERE id = (SELECT id FROM jobs WHERE {CLAIMABLE} ORDER BY created_at, id LIMIT 1) \
         AND (SELECT COUNT(*) FROM jobs WHERE account_id = $5 \
              AND state IN ('running', 'waiting')) < $6 \
         RETURNING {JOB_COLUMNS}, event_seq, {}",
        // SQLite's RETURNING sees the updated row by its table's name only.
        drained_column("jobs")
    );
    let found = sqlx::query(&sql)
        .bind(device_id.as_str())
        .bind(lease_hash)
        .bind(lease_until)
        .bind(now)
        .bind(account_id.as_str())
        .bind(i64::from(limit))
        .fetch_optional(&mut **conn)
        .await?;
    let Some(found) = found else {
        return Ok(None);
    };
    let claimed = claimed(&found)?;
    let text = format!("Claimed by the device (attempt {}).", claimed.row.attempt);
    insert_line_sqlite(conn, &claimed.row, found.try_get("event_seq")?, now, &text).await?;
    tx.commit().await?;
    Ok(Some(claimed))
}

/// [`end`] on SQLite, in one short write transaction.
///
/// # Errors
/// A database error.
pub(crate) async fn end_sqlite(
    store: &Store,
    device_id: &DeviceId,
    job_id: &JobId,
    lease: &LeaseToken,
    outcome: &JobOutcome,
    changes_json: Option<String>,
    now: Millis,
) -> Result<Option<Ended>, ApiError> {
    let end = EndWrite::new(outcome, changes_json)?;
    let mut tx = store.begin().await?;
    let Tx::Sqlite(conn) = &mut tx else {
        return Ok(None);
    };
    let sql = format!("{END_UPDATE} RETURNING {JOB_COLUMNS}, event_seq");
    let query = bind_end!(sqlx::query(&sql), end, job_id, device_id, lease, now);
    let Some(found) = query.fetch_optional(&mut **conn).await? else {
        return Ok(None);
    };
    let row = <JobRow as sqlx::FromRow<_>>::from_row(&found)?;
    insert_line_sqlite(conn, &row, found.try_get("event_seq")?, now, &end.line).await?;
    let detail = serde_json::json!({ "jobId": row.id, "deviceId": row.device_id,
                                     "outcome": end.state, "attempt": row.attempt });
    let entry = ledger::Entry::new(LedgerKind::JobEnded, &row.id, detail);
    ledger::record_entry(&mut tx, &row.account_id()?, now, entry).await?;
    let Tx::Sqlite(conn) = &mut tx else {
        return Ok(None);
    };
    // Read in the transaction, after the writes: the count no longer holds this run.
    let (going_after, events_json, has_more) = sqlx::query_as::<_, (i64, String, bool)>(
        "SELECT (SELECT COUNT(*) FROM jobs WHERE account_id = $1 \
                 AND state IN ('running', 'waiting')), \
         (SELECT json_group_array(json_object('seq', seq, 'at', at, 'kind', kind, 'text', text)) \
          FROM (SELECT seq, at, kind, text FROM job_events WHERE job_id = $2 ORDER BY seq)), \
         EXISTS (SELECT 1 FROM decisions WHERE job_id = $2) \
          OR EXISTS (SELECT 1 FROM evidence WHERE job_id = $2) \
          OR EXISTS (SELECT 1 FROM jobs WHERE continues = $2) \
          OR EXISTS (SELECT 1 FROM jobs WHERE rerun_of = $2)",
    )
    .bind(&row.account_id)
    .bind(&row.id)
    .fetch_one(&mut **conn)
    .await?;
    tx.commit().await?;
    let events: Vec<EventRow> = serde_json::from_str(&events_json)?;
    Ok(Some(Ended {
        row,
        events: events.into_iter().map(EventRow::into_event).collect(),
        going_before: going_after + 1,
        has_more,
    }))
}

/// One timeline line at `seq` (the job's `event_seq` as just moved).
async fn insert_line_sqlite(
    conn: &mut sqlx::SqliteConnection,
    row: &JobRow,
    seq: i64,
    now: Millis,
    text: &str,
) -> Result<(), ApiError> {
    sqlx::query(
        "INSERT INTO job_events (job_id, account_id, at, kind, seq, text) \
         VALUES ($1, $2, $3, 'system', $4, $5)",
    )
    .bind(&row.id)
    .bind(&row.account_id)
    .bind(now)
    .bind(seq)
    .bind(text)
    .execute(conn)
    .await?;
    Ok(())
}
