//! Idempotency keys: a creating request's answer, kept per account and key for a day so a
//! retry after a lost answer gets it again instead of creating twice. The HTTP side is
//! `routes::idempotency`.
//!
//! The first request with a key inserts its row with no answer yet and is the one that
//! creates; the primary key (account, key) makes that one request even when several arrive
//! at once. It then stores its answer (a 2xx) or deletes the row (anything else, so a
//! failed attempt can be tried again with the same key).

use tether_protocol::AccountId;

use super::{on_tx, Store, Tx};
use crate::clock::{secs, Millis};
use crate::error::ApiError;

/// How long an answer is kept: a retry within this time gets it.
pub const KEPT_SECS: u64 = 24 * 60 * 60;

/// A request still without an answer after this long is taken for one whose server stopped
/// half-way; the next request with its key creates instead. A creation takes milliseconds.
const ABANDONED_SECS: u64 = 60;

/// What the request with a key is to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// It is the first (or the one before it was abandoned): create, then
    /// [`remember`] or [`forget`].
    Create,
    /// The same request was answered before: this is its answer.
    Answered { status: u16, answer: String },
    /// The key was used with another route or body.
    Mismatch,
    /// The same request is being answered right now.
    InProgress,
}

/// The key's row for `route` and `request_hash`, inserting it when there is none.
///
/// # Errors
/// A database error.
pub async fn claim(
    store: &Store,
    account_id: &AccountId,
    key: &str,
    route: &str,
    request_hash: &str,
) -> Result<Claim, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    // On PostgreSQL an insert that meets another's uncommitted row waits for it to commit.
    let inserted = on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO idempotency_keys (account_id, idem_key, route, request_hash, created_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account_id, idem_key) DO NOTHING"
    )
    .bind(account_id.as_str())
    .bind(key)
    .bind(route)
    .bind(request_hash)
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let claim = if inserted == 1 {
        Claim::Create
    } else {
        existing(&mut tx, account_id, key, route, request_hash, now).await?
    };
    tx.commit().await?;
    Ok(claim)
}

async fn existing(
    tx: &mut Tx,
    account_id: &AccountId,
    key: &str,
    route: &str,
    request_hash: &str,
    now: Millis,
) -> Result<Claim, ApiError> {
    let row = on_tx!(&mut *tx, |conn| sqlx::query_as::<
        _,
        (String, String, Option<i64>, Option<String>, i64),
    >(
        "SELECT route, request_hash, status, answer, created_at FROM idempotency_keys \
         WHERE account_id = $1 AND idem_key = $2"
    )
    .bind(account_id.as_str())
    .bind(key)
    .fetch_optional(conn)
    .await)?;
    // Deleted between the insert and this read: its request failed, so it is free again,
    // but the next try takes it.
    let Some((stored_route, stored_hash, status, answer, created_at)) = row else {
        return Ok(Claim::InProgress);
    };
    if stored_route != route || stored_hash != request_hash {
        return Ok(Claim::Mismatch);
    }
    match (status, answer) {
        (Some(status), Some(answer)) => Ok(Claim::Answered {
            status: u16::try_from(status).map_err(|error| ApiError::internal(&error))?,
            answer,
        }),
        _ if now - created_at >= secs(ABANDONED_SECS) => {
            let taken = on_tx!(&mut *tx, |conn| sqlx::query(
                "UPDATE idempotency_keys SET created_at = $3 \
                 WHERE account_id = $1 AND idem_key = $2 AND status IS NULL AND created_at = $4"
            )
            .bind(account_id.as_str())
            .bind(key)
            .bind(now)
            .bind(created_at)
            .execute(conn)
            .await
            .map(|done| done.rows_affected()))?;
            Ok(if taken == 1 {
                Claim::Create
            } else {
                Claim::InProgress
            })
        }
        _ => Ok(Claim::InProgress),
    }
}

/// Keeps the answer of the request that claimed `key`.
///
/// # Errors
/// A database error.
pub async fn remember(
    store: &Store,
    account_id: &AccountId,
    key: &str,
    status: u16,
    answer: &str,
) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE idempotency_keys SET status = $3, answer = $4 \
         WHERE account_id = $1 AND idem_key = $2 AND status IS NULL"
    )
    .bind(account_id.as_str())
    .bind(key)
    .bind(i64::from(status))
    .bind(answer)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

/// Frees `key` after its request failed (nothing was created), so it can be tried again.
///
/// # Errors
/// A database error.
pub async fn forget(store: &Store, account_id: &AccountId, key: &str) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM idempotency_keys \
         WHERE account_id = $1 AND idem_key = $2 AND status IS NULL"
    )
    .bind(account_id.as_str())
    .bind(key)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

/// Deletes the keys older than [`KEPT_SECS`] (the sweeper's housekeeping): each is free again.
///
/// # Errors
/// A database error.
pub async fn delete_stale(tx: &mut Tx, now: Millis) -> Result<u64, ApiError> {
    let deleted = on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM idempotency_keys WHERE created_at < $1"
    )
    .bind(now - secs(KEPT_SECS))
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(deleted)
}
