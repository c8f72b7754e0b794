//! API tokens (`tut_…`) for scripts: made from a browser session only, optionally expiring,
//! listed without their secret, revoked one by one.
//!
//! A token is stored as its SHA-256 (compared in constant time) and shown once. Its last use
//! is written at most once per [`LAST_USED_EVERY_SECS`] per token, and a token checked
//! recently is believed from the replica's memory ([`ApiTokens`], which forgets a user's
//! tokens when one is revoked or the password changes), so a script's requests do not each
//! cost a read or a write. Tokens are independent of browser sessions: signing out ends the
//! session, not the tokens; a password change revokes them all unless its person keeps them
//! ([`revoke_all_in`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tether_protocol::auth::{ApiToken, CreatedToken, Me, NewTokenParams, MAX_TOKEN_DAYS};
use tether_protocol::routes::USER_TOKEN_PREFIX;
use tether_protocol::{AccountId, TokenId, UserId};

use crate::accounts::{parse_name, CallerRow, Resolved, CALLER_COLUMNS};
use crate::clock::{secs, to_time, Millis};
use crate::credentials;
use crate::error::ApiError;
use crate::replica_memory::{Remembered, ReplicaMemory};
use crate::store::{on_read, on_tx, stored_id, Store, Tx};

/// A token's last use is written at most this often.
pub const LAST_USED_EVERY_SECS: u64 = 60;

/// A checked [`NewTokenParams`]: the token's name and its life in days, if it has an end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApiToken {
    name: String,
    days: Option<u32>,
}

impl TryFrom<NewTokenParams> for NewApiToken {
    type Error = ApiError;
    fn try_from(params: NewTokenParams) -> Result<NewApiToken, ApiError> {
        let days = match params.expires_in_days {
            None => None,
            Some(days) => Some(
                u32::try_from(days)
                    .ok()
                    .filter(|days| (1..=MAX_TOKEN_DAYS).contains(days))
                    .ok_or_else(|| {
                        ApiError::invalid_field(
                            "expiresInDays",
                            &format!(
                                "must be 1 to {MAX_TOKEN_DAYS} days, or left out for no expiry."
                            ),
                        )
                    })?,
            ),
        };
        Ok(NewApiToken {
            name: parse_name("name", &params.name, 100)?,
            days,
        })
    }
}

/// Makes an API token for the user; the plaintext is returned this once.
///
/// # Errors
/// A database error.
pub async fn create(store: &Store, me: &Me, new: NewApiToken) -> Result<CreatedToken, ApiError> {
    let NewApiToken { name, days } = new;
    let id = TokenId::generate();
    let token = credentials::random_token(USER_TOKEN_PREFIX);
    let now = store.now();
    let expires_at = days.map(|days| now + secs(u64::from(days) * 24 * 3600));
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| {
        sqlx::query(
        "INSERT INTO api_tokens (id, account_id, user_id, name, token_hash, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    )
    .bind(id.as_str())
    .bind(me.account.id.as_str())
    .bind(me.user.id.as_str())
    .bind(&name)
    .bind(credentials::hash_token(&token))
    .bind(now)
    .bind(expires_at)
    .execute(conn)
    .await
    .map(|done| done.rows_affected())
    })?;
    tx.commit().await?;
    tracing::info!(token_id = %id, expires = expires_at.is_some(), "API token made");
    Ok(CreatedToken {
        id,
        name,
        token,
        expires_at: expires_at.map(to_time),
    })
}

/// The user's tokens, newest first, expired ones included (marked by `expiresAt`).
///
/// # Errors
/// A database error.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
) -> Result<Vec<ApiToken>, ApiError> {
    let rows = on_read!(store, |pool| sqlx::query_as::<_, TokenRow>(
        "SELECT id, name, created_at, last_used_at, expires_at FROM api_tokens \
         WHERE account_id = $1 AND user_id = $2 ORDER BY created_at DESC, id DESC"
    )
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .fetch_all(pool)
    .await)?;
    rows.into_iter().map(TokenRow::into_api).collect()
}

/// Revokes (deletes) one of the user's tokens; it answers 401 from now on.
///
/// # Errors
/// 404 for an unknown token or another user's, or a database error.
pub async fn revoke(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
    token_id: &TokenId,
) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    let deleted = on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM api_tokens WHERE id = $1 AND account_id = $2 AND user_id = $3"
    )
    .bind(token_id.as_str())
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if deleted == 0 {
        return Err(ApiError::not_found("token"));
    }
    tx.commit().await?;
    tracing::info!(token_id = %token_id, "API token revoked");
    Ok(())
}

/// Revokes every token of the user, in the caller's transaction; returns how many.
///
/// # Errors
/// A database error.
pub(crate) async fn revoke_all_in(
    tx: &mut Tx,
    account_id: &AccountId,
    user_id: &UserId,
) -> Result<u64, ApiError> {
    let revoked = on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM api_tokens WHERE account_id = $1 AND user_id = $2"
    )
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(revoked)
}

/// An API token this replica checked, as [`ReplicaMemory`] keeps it: whom it signs in, until
/// when, and when its use was last written.
#[derive(Clone)]
pub struct KnownApiToken {
    resolved: Resolved,
    token_id: String,
    expires_at: Option<Millis>,
    /// Shared by every copy handed out, so a script's requests write one use a minute.
    last_noted: Arc<AtomicI64>,
}

impl Remembered for KnownApiToken {
    /// A password change ends all of a user's tokens, so they are kept under the user.
    fn owner(&self) -> &str {
        self.resolved.me.user.id.as_str()
    }
}

/// The API tokens a replica checked recently.
pub type ApiTokens = ReplicaMemory<KnownApiToken>;

/// The caller behind an API token, if it exists and has not expired; notes its use. A token
/// checked recently is answered from `memory`.
///
/// # Errors
/// A database error.
pub async fn authenticate(
    store: &Store,
    memory: &ApiTokens,
    token: &str,
) -> Result<Option<Resolved>, ApiError> {
    let token_hash = credentials::hash_token(token);
    let now = store.now();
    let known = match memory.get(&token_hash) {
        Some(known) => known,
        None => {
            let generation = memory.generation();
            let Some(known) = read_token(store, &token_hash, now).await? else {
                return Ok(None);
            };
            memory.remember(token_hash, known.clone(), generation);
            known
        }
    };
    if known.expires_at.is_some_and(|at| at <= now) {
        return Ok(None);
    }
    let last = known.last_noted.load(Ordering::Relaxed);
    if now - last >= secs(LAST_USED_EVERY_SECS)
        && known
            .last_noted
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        note_use(store, &known.token_id, now).await;
    }
    Ok(Some(known.resolved))
}

async fn read_token(
    store: &Store,
    token_hash: &str,
    now: Millis,
) -> Result<Option<KnownApiToken>, ApiError> {
    let sql = format!(
        "SELECT {CALLER_COLUMNS}, t.token_hash AS token_hash, NULL AS csrf_token, \
         t.id AS token_id, t.last_used_at AS last_used_at, t.expires_at AS expires_at \
         FROM api_tokens t JOIN users u ON u.id = t.user_id JOIN accounts a ON a.id = u.account_id \
         WHERE t.token_hash = $1 AND (t.expires_at IS NULL OR t.expires_at > $2)"
    );
    let row = on_read!(store, |pool| sqlx::query_as::<_, AuthRow>(&sql)
        .bind(token_hash)
        .bind(now)
        .fetch_optional(pool)
        .await)?;
    let Some(row) = row.filter(|row| credentials::hashes_match(&row.caller.token_hash, token_hash))
    else {
        return Ok(None);
    };
    let resolved = row.caller.into_resolved()?;
    Ok(Some(KnownApiToken {
        resolved: Resolved {
            csrf_token: None,
            ..resolved
        },
        token_id: row.token_id,
        expires_at: row.expires_at,
        last_noted: Arc::new(AtomicI64::new(row.last_used_at.unwrap_or(0))),
    }))
}

/// Writes the token's last use, unless another request just did. A failure is logged, not
/// answered: the request itself is fine.
async fn note_use(store: &Store, token_id: &str, now: Millis) {
    let written = async {
        let mut tx = store.begin().await?;
        on_tx!(&mut tx, |conn| sqlx::query(
            "UPDATE api_tokens SET last_used_at = $1 \
             WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3)"
        )
        .bind(now)
        .bind(token_id)
        .bind(now - secs(LAST_USED_EVERY_SECS))
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
        tx.commit().await
    }
    .await;
    if let Err(error) = written {
        tracing::warn!(token_id, %error, "noting an API token's use failed");
    }
}

#[derive(sqlx::FromRow)]
struct AuthRow {
    #[sqlx(flatten)]
    caller: CallerRow,
    token_id: String,
    last_used_at: Option<Millis>,
    expires_at: Option<Millis>,
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: String,
    name: String,
    created_at: Millis,
    last_used_at: Option<Millis>,
    expires_at: Option<Millis>,
}

impl TokenRow {
    fn into_api(self) -> Result<ApiToken, ApiError> {
        Ok(ApiToken {
            id: stored_id(self.id)?,
            name: self.name,
            created_at: to_time(self.created_at),
            last_used_at: self.last_used_at.map(to_time),
            expires_at: self.expires_at.map(to_time),
        })
    }
}

/// Whether a listed token has expired at `now`.
pub fn expired(token: &ApiToken, now: DateTime<Utc>) -> bool {
    token.expires_at.is_some_and(|at| at <= now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn params(days: Option<i64>) -> NewTokenParams {
        NewTokenParams {
            name: "ci".to_owned(),
            expires_in_days: days,
        }
    }

    #[test]
    fn expiry_is_one_to_365_days_or_none() {
        assert_eq!(NewApiToken::try_from(params(None)).unwrap().days, None);
        assert_eq!(
            NewApiToken::try_from(params(Some(1))).unwrap().days,
            Some(1)
        );
        assert_eq!(
            NewApiToken::try_from(params(Some(365))).unwrap().days,
            Some(365)
        );
        for bad in [0, 366, -1, i64::MAX, i64::MIN] {
            let error = NewApiToken::try_from(params(Some(bad))).err().unwrap();
            assert!(
                error.message().starts_with("expiresInDays:"),
                "{}",
                error.message()
            );
        }
    }
}
