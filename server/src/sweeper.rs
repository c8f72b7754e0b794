//! The sweeper: ends runs whose lease expired, expires overdue decisions, and keeps house
//! (stale pairing codes, sessions, passkey ceremonies and ended console unlocks,
//! idempotency keys, and uploads no job took).
//!
//! [`try_expire_leases`] is one step, callable from tests (as is
//! [`crate::jobs::decisions::expire_overdue`]); [`run`] repeats both every `sweep_secs`, at the
//! store's clock's time. After an outage of the server itself (no sweep for longer than a
//! lease), [`grant_outage_grace`] first gives every running lease one more lease period,
//! because the devices could not reach us to extend them. Each sweep is also the moment a
//! silent computer with work running counts as gone offline, for push notifications
//! ([`Push::tell_outages`]); the runs it interrupted are told too.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tether_protocol::jobs::Outcome;
use tether_protocol::{AccountId, JobId};

use crate::accounts::{console_unlocks, login_failures, passkeys};
use crate::clock::{secs, to_time, Millis};
use crate::config::Config;
use crate::devices::pairing;
use crate::error::ApiError;
use crate::jobs::attachments;
use crate::jobs::decisions::{self, Settled};
use crate::notices::Notices;
use crate::store::idempotency;
use crate::store::job_rows::{self, EndCause};
use crate::store::{on_read, on_tx, stored_id, Store, Tx};

/// Most runs one sweep ends; the next sweep takes the rest.
pub const SWEEP_BATCH: i64 = 500;

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepOutcome {
    /// Runs that ended `interrupted` because their lease expired.
    pub interrupted: Vec<JobId>,
    /// The accounts those runs belonged to (each once): a run slot freed in each.
    pub accounts: Vec<AccountId>,
}

/// Ends every running or waiting job whose lease expired before `now` as `interrupted`,
/// keeping its events and adding a `system` one; its pending decisions expire.
///
/// # Errors
/// A database error (nothing is changed then).
pub async fn try_expire_leases(
    store: &Store,
    now: DateTime<Utc>,
) -> Result<SweepOutcome, ApiError> {
    let now = now.timestamp_millis();
    let mut tx = store.begin().await?;
    let expired = job_rows::expired_leases(&mut tx, now, SWEEP_BATCH).await?;
    let mut outcome = SweepOutcome::default();
    for job in &expired {
        let expired_at = job.lease_expires_at.map(to_time).unwrap_or_default();
        let summary = format!(
            "The lease expired at {} without word from the device; partial output is kept.",
            expired_at.to_rfc3339()
        );
        job_rows::finish(
            &mut tx,
            job,
            &job_rows::outcome(Outcome::Interrupted, &summary),
            EndCause::LeaseExpired,
            now,
        )
        .await?;
        outcome.interrupted.push(stored_id(job.id.clone())?);
        let account_id = job.account_id()?;
        if !outcome.accounts.contains(&account_id) {
            outcome.accounts.push(account_id);
        }
    }
    tx.commit().await?;
    if !outcome.interrupted.is_empty() {
        tracing::info!(
            n_interrupted = outcome.interrupted.len(),
            "expired leases swept"
        );
    }
    Ok(outcome)
}

/// When the last sweep is older than one lease period, extends every running lease to one
/// lease period from `now`. Returns how many leases were extended.
///
/// # Errors
/// A database error.
pub async fn grant_outage_grace(
    store: &Store,
    now: DateTime<Utc>,
    config: &Config,
) -> Result<u64, ApiError> {
    let now = now.timestamp_millis();
    let lease = secs(config.lease_secs);
    let last = last_server_heartbeat(store).await?;
    let outage = last.is_some_and(|last| now - last > lease);
    if !outage {
        return Ok(0);
    }
    let mut tx = store.begin().await?;
    let extended = job_rows::extend_running_leases(&mut tx, now + lease).await?;
    tx.commit().await?;
    tracing::warn!(
        extended,
        "server was down longer than a lease; running leases extended"
    );
    Ok(extended)
}

/// Notes that the server is alive now (each sweep does this).
///
/// # Errors
/// A database error.
pub async fn record_server_heartbeat(store: &Store, now: DateTime<Utc>) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO server_heartbeat (id, at) VALUES (1, $1) \
         ON CONFLICT (id) DO UPDATE SET at = excluded.at"
    )
    .bind(now.timestamp_millis())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

/// Grants outage grace once, then sweeps every `sweep_secs` until the task is dropped.
/// A failed sweep is logged and retried at the next tick.
///
/// # Errors
/// Never returns on its own; the result type lets `run_until_stopped` select over it.
pub async fn run(store: Store, config: Config, notices: Notices) -> anyhow::Result<()> {
    if let Err(error) = grant_outage_grace(&store, store.clock().now(), &config).await {
        tracing::error!(%error, "outage grace failed");
    }
    // After the server itself was down, computers look silent until they reach it again.
    let started_at = store.now();
    let mut ticker = tokio::time::interval(Duration::from_secs(config.sweep_secs.max(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match sweep_once(&store, &config, store.clock().now()).await {
            Ok((swept, expired_decisions)) => {
                notices
                    .runs_swept(&swept.interrupted, &swept.accounts, expired_decisions)
                    .await;
            }
            Err(error) => tracing::error!(%error, "sweep failed"),
        }
        let now = store.now();
        if now - started_at >= secs(config.online_secs) {
            if let Err(error) = notices.computers_gone_quiet(now, config.online_secs).await {
                tracing::error!(%error, "looking for computers gone offline failed");
            }
        }
    }
}

async fn sweep_once(
    store: &Store,
    config: &Config,
    now: DateTime<Utc>,
) -> Result<(SweepOutcome, Vec<Settled>), ApiError> {
    let swept = try_expire_leases(store, now).await?;
    let expired_decisions = decisions::expire_overdue(store, now.timestamp_millis()).await?;
    record_server_heartbeat(store, now).await?;
    let mut tx = store.begin().await?;
    let now_ms = now.timestamp_millis();
    pairing::delete_stale(&mut tx, now_ms).await?;
    login_failures::delete_stale(&mut tx, now_ms).await?;
    delete_expired_sessions(&mut tx, now_ms).await?;
    passkeys::delete_stale_ceremonies(&mut tx, now_ms).await?;
    console_unlocks::delete_ended(&mut tx, now_ms).await?;
    idempotency::delete_stale(&mut tx, now_ms).await?;
    tx.commit().await?;
    attachments::sweep(store, &config.data_dir, now_ms).await?;
    Ok((swept, expired_decisions))
}

async fn delete_expired_sessions(tx: &mut Tx, now: Millis) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM sessions WHERE expires_at < $1"
    )
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

async fn last_server_heartbeat(store: &Store) -> Result<Option<Millis>, ApiError> {
    let at = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(
        "SELECT at FROM server_heartbeat WHERE id = 1"
    )
    .fetch_optional(pool)
    .await)?;
    Ok(at)
}
