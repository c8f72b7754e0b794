//! Sign-in backoff per email, in the database: it holds across replicas and client
//! addresses, and an unknown email is treated exactly like a known one.
//!
//! Each attempt is counted *before* its password is checked (so a burst of parallel guesses
//! is counted one by one, under the row's lock), and a success clears the count. Attempts
//! go through freely up to the [`FREE_ATTEMPTS`]th in a row; from that one on, each attempt
//! blocks the next for 2 s, 4 s, 8 s, … up to [`MAX_BLOCK_SECS`]. An attempt
//! while blocked is 429 `rate_limited` with `Retry-After` and checks no password (it costs
//! no argon2id). The count is forgotten after [`FORGET_AFTER_SECS`] without an attempt.
//!
//! Rows are keyed by the SHA-256 of the normalised email, so an address (or a password typed
//! into the email field) is never stored in the clear.

use tether_protocol::Code;

use crate::clock::{secs, Millis};
use crate::credentials;
use crate::error::ApiError;
use crate::store::{on_tx, Store, Tx};

/// Attempts in a row before each one blocks the next.
pub const FREE_ATTEMPTS: i64 = 5;
/// The first block, doubled by every further failed attempt.
pub const FIRST_BLOCK_SECS: u64 = 2;
/// The longest block.
pub const MAX_BLOCK_SECS: u64 = 15 * 60;
/// Failures older than this are forgotten.
pub const FORGET_AFTER_SECS: u64 = 24 * 3600;

/// The stored key of a normalised email.
pub fn key(email: &str) -> String {
    credentials::hash_token(email)
}

/// How long the `attempts`-th attempt in a row blocks the next one (none before
/// [`FREE_ATTEMPTS`]).
pub fn block_after(attempts: i64) -> Option<u64> {
    let beyond = attempts
        .checked_sub(FREE_ATTEMPTS)
        .filter(|beyond| *beyond >= 0)?;
    let doublings = u32::try_from(beyond).unwrap_or(u32::MAX);
    let block = 1u64
        .checked_shl(doublings)
        .and_then(|factor| factor.checked_mul(FIRST_BLOCK_SECS))
        .unwrap_or(MAX_BLOCK_SECS);
    Some(block.min(MAX_BLOCK_SECS))
}

/// Counts an attempt for `email_key`, or refuses it while the email is blocked.
///
/// # Errors
/// 429 `rate_limited` with `Retry-After`, or a database error.
pub async fn charge(store: &Store, email_key: &str) -> Result<(), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    // The row exists before it is locked, so two first attempts do not race to insert it.
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO login_failures (email_hash, failures, last_attempt_at, blocked_until) \
         VALUES ($1, 0, $2, 0) ON CONFLICT (email_hash) DO NOTHING"
    )
    .bind(email_key)
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let sql = format!(
        "SELECT failures, last_attempt_at, blocked_until FROM login_failures \
         WHERE email_hash = $1{}",
        tx.lock_clause()
    );
    let (failures, last_attempt_at, blocked_until) =
        on_tx!(&mut tx, |conn| sqlx::query_as::<_, (i64, i64, i64)>(&sql)
            .bind(email_key)
            .fetch_one(conn)
            .await)?;
    if blocked_until > now {
        tx.commit().await?;
        let wait = u64::try_from((blocked_until - now + 999) / 1000)
            .unwrap_or(1)
            .max(1);
        return Err(ApiError::new(
            Code::RateLimited,
            format!("Too many sign-in attempts for this email; try again in {wait} s."),
        )
        .with_retry_after(wait));
    }
    let remembered = if now - last_attempt_at > secs(FORGET_AFTER_SECS) {
        0
    } else {
        failures
    };
    let attempts = remembered.saturating_add(1);
    let blocked_until = block_after(attempts).map_or(0, |block| now + secs(block));
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE login_failures SET failures = $1, last_attempt_at = $2, blocked_until = $3 \
         WHERE email_hash = $4"
    )
    .bind(attempts)
    .bind(now)
    .bind(blocked_until)
    .bind(email_key)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

/// Forgets the count after a successful sign-in (in the transaction opening the session).
///
/// # Errors
/// A database error.
pub async fn clear(tx: &mut Tx, email_key: &str) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM login_failures WHERE email_hash = $1"
    )
    .bind(email_key)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Deletes counts nobody added to for [`FORGET_AFTER_SECS`] (the sweeper calls this).
///
/// # Errors
/// A database error.
pub(crate) async fn delete_stale(tx: &mut Tx, now: Millis) -> Result<u64, ApiError> {
    let deleted = on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM login_failures WHERE last_attempt_at < $1 AND blocked_until < $2"
    )
    .bind(now - secs(FORGET_AFTER_SECS))
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_grow_from_the_fifth_attempt_and_stop_at_fifteen_minutes() {
        assert_eq!(block_after(1), None);
        assert_eq!(block_after(4), None);
        assert_eq!(block_after(5), Some(2));
        assert_eq!(block_after(6), Some(4));
        assert_eq!(block_after(7), Some(8));
        assert_eq!(block_after(13), Some(512));
        assert_eq!(block_after(14), Some(MAX_BLOCK_SECS));
        assert_eq!(block_after(200), Some(MAX_BLOCK_SECS));
        assert_eq!(block_after(i64::MAX), Some(MAX_BLOCK_SECS));
    }
}
