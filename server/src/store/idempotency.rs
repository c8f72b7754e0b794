//! Idempotency keys: a creating request's answer, kept per account and key for a day so a
//! retry after a lost answer gets it again instead of creating twice. The HTTP side is
//! `routes::idempotency`.
//!
//! The first request with a key inserts its row with no answer yet and is the one that
//! creates; the primary key (account, key) makes that one request even when several arrive
//! at once. It then stores its answer (a 2xx) or deletes the row (anything else, so a
//! failed attempt can be tried again with the same key).
//!
//! An answer can hold a secret (a new API token), so the row holds neither the key nor the
//! answer in the clear: the key's SHA-256, and the answer sealed with AES-256-GCM under a
//! key derived from the Idempotency-Key (HKDF-SHA256, the account as salt). Only a client
//! that sends the key again can read it; it is as hard to guess as the key.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hkdf::Hkdf;
use rand::RngCore;
use sha2::Sha256;
use tether_protocol::AccountId;

use super::{on_tx, Store, Tx};
use crate::clock::{secs, Millis};
use crate::credentials::hash_token;
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
    let stored_key = hash_token(key);
    let mut tx = store.begin().await?;
    // On PostgreSQL an insert that meets another's uncommitted row waits for it to commit.
    let inserted = on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO idempotency_keys (account_id, idem_key, route, request_hash, created_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account_id, idem_key) DO NOTHING"
    )
    .bind(account_id.as_str())
    .bind(&stored_key)
    .bind(route)
    .bind(request_hash)
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let claim = if inserted == 1 {
        Claim::Create
    } else {
        existing(&mut tx, account_id, &stored_key, route, request_hash, now).await?
    };
    tx.commit().await?;
    Ok(match claim {
        Claim::Answered { status, answer } => Claim::Answered {
            status,
            answer: open(account_id, key, &answer)?,
        },
        other => other,
    })
}

/// The row of `key` (its stored form), the answer still sealed.
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
    let sealed = seal(account_id, key, answer)?;
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE idempotency_keys SET status = $3, answer = $4 \
         WHERE account_id = $1 AND idem_key = $2 AND status IS NULL"
    )
    .bind(account_id.as_str())
    .bind(hash_token(key))
    .bind(i64::from(status))
    .bind(sealed)
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
    .bind(hash_token(key))
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

/// The cipher only the Idempotency-Key itself opens, one per account and key.
fn cipher(account_id: &AccountId, key: &str) -> Result<Aes256Gcm, ApiError> {
    let mut derived = [0u8; 32];
    Hkdf::<Sha256>::new(Some(account_id.as_str().as_bytes()), key.as_bytes())
        .expand(b"tether idempotent answer", &mut derived)
        .map_err(|error| ApiError::internal(&error))?;
    Aes256Gcm::new_from_slice(&derived).map_err(|error| ApiError::internal(&error))
}

/// Base64 of a random nonce and the answer sealed under it.
fn seal(account_id: &AccountId, key: &str, answer: &str) -> Result<String, ApiError> {
    let mut nonce = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let sealed = cipher(account_id, key)?
        .encrypt(&Nonce::from(nonce), answer.as_bytes())
        .map_err(|error| ApiError::internal(&error))?;
    Ok(STANDARD.encode([nonce.as_slice(), &sealed].concat()))
}

fn open(account_id: &AccountId, key: &str, sealed: &str) -> Result<String, ApiError> {
    let bytes = STANDARD
        .decode(sealed)
        .map_err(|error| ApiError::internal(&error))?;
    let (nonce, sealed) = bytes
        .split_at_checked(12)
        .ok_or_else(|| ApiError::internal(&"a kept answer too short to hold its nonce"))?;
    let nonce = <[u8; 12]>::try_from(nonce).map_err(|error| ApiError::internal(&error))?;
    let answer = cipher(account_id, key)?
        .decrypt(&Nonce::from(nonce), sealed)
        .map_err(|error| ApiError::internal(&error))?;
    String::from_utf8(answer).map_err(|error| ApiError::internal(&error))
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
