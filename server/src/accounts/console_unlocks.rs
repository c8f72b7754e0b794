//! The console unlock: a browser session opens its person's console by answering a passkey
//! challenge with user verification. The unlock belongs to that one browser session
//! (`console_unlocks`, keyed by the session's id) and holds while
//! `now < ends_at` ([`UNLOCK_MAX_SECONDS`] after unlocking) and
//! `now < last_active_at + `[`UNLOCK_IDLE_SECONDS`]; console activity ([`touch`]) moves
//! `last_active_at`, at most one write per [`TOUCH_EVERY_SECS`].
//!
//! It ends when its person locks it ([`lock`], ledger `console.locked`), when the browser
//! session ends (sign-out, a password change, ended from the sessions list, expiry: the row
//! goes with the session) and when the passkey that opened it is removed (the row goes
//! with the passkey). The sweeper drops rows past either limit.
//!
//! The console relay asks [`check`] before it opens a session and [`touch`] on activity;
//! both answer 401 `console_locked` when the unlock is not live. "Now" is the store's clock.

use serde_json::json;
use tether_protocol::console::{
    CeremonyStarted, ConsoleStatus, UnlockAssertion, UNLOCK_IDLE_SECONDS, UNLOCK_MAX_SECONDS,
};
use tether_protocol::{AccountId, Code, SessionId, UserId};
use webauthn_rs::prelude as wa;

use crate::accounts::passkeys::{
    self, refused, refused_because, rfc3339, CeremonyKind, CeremonyOwner, RelyingParty,
};
use crate::clock::{secs, Millis};
use crate::error::ApiError;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_tx, Store, Tx};

/// Activity moves an unlock's `last_active_at` at most this often (a write saved per
/// message; the idle limit is thirty minutes).
pub const TOUCH_EVERY_SECS: u64 = 30;

/// A checked [`UnlockAssertion`]: the ceremony and the browser's assertion.
pub struct Assertion {
    ceremony_id: String,
    credential: Box<wa::PublicKeyCredential>,
}

impl TryFrom<UnlockAssertion> for Assertion {
    type Error = ApiError;
    fn try_from(params: UnlockAssertion) -> Result<Assertion, ApiError> {
        let credential = serde_json::from_value(params.credential).map_err(|_| {
            refused(
                "credential: this is not a passkey's answer (PublicKeyCredential.toJSON() of \
                 what navigator.credentials.get() returned).",
            )
        })?;
        Ok(Assertion {
            ceremony_id: params.ceremony_id,
            credential: Box::new(credential),
        })
    }
}

/// An unlock row's times.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
struct UnlockTimes {
    last_active_at: Millis,
    ends_at: Millis,
}

impl UnlockTimes {
    fn idle_until(self) -> Millis {
        (self.last_active_at + secs(UNLOCK_IDLE_SECONDS)).min(self.ends_at)
    }

    /// Why it is not live at `now`, or `None` while it is.
    fn ended(self, now: Millis) -> Option<&'static str> {
        if now >= self.ends_at {
            Some(
                "This browser's console locked: an unlock lasts 8 hours. Unlock it with your \
                 passkey again.",
            )
        } else if now >= self.last_active_at + secs(UNLOCK_IDLE_SECONDS) {
            Some(
                "This browser's console locked after 30 minutes without use. Unlock it with \
                 your passkey again.",
            )
        } else {
            None
        }
    }
}

fn locked(message: &str) -> ApiError {
    ApiError::new(Code::ConsoleLocked, message)
}

const NOT_UNLOCKED: &str =
    "This browser's console is locked: unlock it with a passkey (Account page, Console).";

/// This session's unlock row, if its session is still open.
async fn unlock_of(
    store: &Store,
    session_id: &SessionId,
    account_id: &AccountId,
) -> Result<Option<UnlockTimes>, ApiError> {
    let row = on_read!(store, |pool| sqlx::query_as::<_, UnlockTimes>(
        "SELECT c.last_active_at, c.ends_at FROM console_unlocks c \
         JOIN sessions s ON s.id = c.session_id \
         WHERE c.session_id = $1 AND c.account_id = $2 AND s.account_id = $2 \
         AND s.expires_at > $3"
    )
    .bind(session_id.as_str())
    .bind(account_id.as_str())
    .bind(store.now())
    .fetch_optional(pool)
    .await)?;
    Ok(row)
}

/// Ok while this browser session's console unlock is live.
///
/// # Errors
/// 401 `console_locked` (never unlocked, locked, idle for 30 minutes, 8 hours old, its
/// session or passkey gone); a database error.
pub async fn check(
    store: &Store,
    session_id: &SessionId,
    account_id: &AccountId,
) -> Result<(), ApiError> {
    live(store, session_id, account_id).await.map(drop)
}

/// This session's unlock while it is live.
async fn live(
    store: &Store,
    session_id: &SessionId,
    account_id: &AccountId,
) -> Result<UnlockTimes, ApiError> {
    let unlock = unlock_of(store, session_id, account_id)
        .await?
        .ok_or_else(|| locked(NOT_UNLOCKED))?;
    match unlock.ended(store.now()) {
        Some(why) => Err(locked(why)),
        None => Ok(unlock),
    }
}

/// [`check`], and console activity: the unlock's idle time starts again from now (written
/// only when the last write is [`TOUCH_EVERY_SECS`] old).
///
/// # Errors
/// As [`check`].
pub async fn touch(
    store: &Store,
    session_id: &SessionId,
    account_id: &AccountId,
) -> Result<(), ApiError> {
    let unlock = live(store, session_id, account_id).await?;
    let now = store.now();
    if now - unlock.last_active_at < secs(TOUCH_EVERY_SECS) {
        return Ok(());
    }
    let mut tx = store.begin().await?;
    // Only a live unlock moves: one that ended between the read and now stays ended.
    let moved = on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE console_unlocks SET last_active_at = $1 \
         WHERE session_id = $2 AND account_id = $3 AND last_active_at < $1 \
         AND last_active_at > $4 AND ends_at > $1"
    )
    .bind(now)
    .bind(session_id.as_str())
    .bind(account_id.as_str())
    .bind(now - secs(UNLOCK_IDLE_SECONDS))
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await?;
    if moved == 0 {
        // Another request moved it, or it ended meanwhile: the row says which.
        return check(store, session_id, account_id).await;
    }
    Ok(())
}

/// Whether this browser session's console is open, and until when.
///
/// # Errors
/// A database error.
pub async fn status(
    store: &Store,
    session_id: &SessionId,
    account_id: &AccountId,
    user_id: &UserId,
) -> Result<ConsoleStatus, ApiError> {
    let has_passkey = passkeys::has_passkey(store, account_id, user_id).await?;
    let unlock = unlock_of(store, session_id, account_id).await?;
    Ok(status_of(unlock, store.now(), has_passkey))
}

fn status_of(unlock: Option<UnlockTimes>, now: Millis, has_passkey: bool) -> ConsoleStatus {
    match unlock.filter(|unlock| unlock.ended(now).is_none()) {
        Some(unlock) => ConsoleStatus {
            unlocked: true,
            idle_until: Some(rfc3339(unlock.idle_until())),
            until: Some(rfc3339(unlock.ends_at)),
            has_passkey,
        },
        None => ConsoleStatus {
            unlocked: false,
            idle_until: None,
            until: None,
            has_passkey,
        },
    }
}

/// Starts an unlock for this browser session: the options for `navigator.credentials.get()`
/// over the person's passkeys, user verification required.
///
/// # Errors
/// 409 `invalid_state` when the person has no passkey; a database error.
pub async fn start(
    store: &Store,
    rp: &RelyingParty,
    account_id: &AccountId,
    user_id: &UserId,
    session_id: &SessionId,
) -> Result<CeremonyStarted, ApiError> {
    let credentials = passkeys::credentials_of(store, account_id, user_id).await?;
    if credentials.is_empty() {
        return Err(ApiError::new(
            Code::InvalidState,
            "You have no passkey yet: add one on the Account page first; the console unlocks \
             only with a passkey.",
        ));
    }
    let (options, state) = rp
        .webauthn()
        .start_passkey_authentication(&credentials)
        .map_err(|error| ApiError::internal(&format_args!("passkey unlock: {error}")))?;
    let owner = CeremonyOwner {
        account_id,
        user_id,
        session_id,
    };
    let ceremony_id = passkeys::save_ceremony(store, CeremonyKind::Unlock, &owner, &state).await?;
    let options = serde_json::to_value(&options)
        .map_err(|error| ApiError::internal(&format_args!("passkey options: {error}")))?;
    Ok(CeremonyStarted {
        ceremony_id,
        options,
    })
}

/// Finishes an unlock: checks the assertion (user verified, the passkey one of the
/// person's, its signature counter moving forward) against the session's ceremony, notes the
/// passkey's use and opens this browser session's console for [`UNLOCK_MAX_SECONDS`]
/// (ledger `console.unlocked`). Unlocking an open console starts its times again.
///
/// # Errors
/// 400 `passkey_refused`; a database error.
pub async fn finish(
    store: &Store,
    rp: &RelyingParty,
    account_id: &AccountId,
    user_id: &UserId,
    session_id: &SessionId,
    assertion: Assertion,
) -> Result<ConsoleStatus, ApiError> {
    let owner = CeremonyOwner {
        account_id,
        user_id,
        session_id,
    };
    let state: wa::PasskeyAuthentication =
        passkeys::take_ceremony(store, CeremonyKind::Unlock, &owner, &assertion.ceremony_id)
            .await?;
    let result = rp
        .webauthn()
        .finish_passkey_authentication(&assertion.credential, &state)
        .map_err(|error| refused_because(&error))?;
    if !result.user_verified() {
        return Err(refused_because(&wa::WebauthnError::UserNotVerified));
    }
    let credential_id = base64_id(result.cred_id());
    let now = store.now();
    let mut tx = store.begin().await?;
    let lock = tx.lock_clause();
    let sql = format!(
        "SELECT id, credential_json FROM passkeys \
         WHERE account_id = $1 AND user_id = $2 AND credential_id = $3{lock}"
    );
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, (String, String)>(&sql)
        .bind(account_id.as_str())
        .bind(user_id.as_str())
        .bind(&credential_id)
        .fetch_optional(conn)
        .await)?;
    let Some((passkey_id, credential_json)) = row else {
        return Err(refused("This passkey was removed; unlock with another."));
    };
    let mut credential: wa::Passkey = serde_json::from_str(&credential_json).map_err(|error| {
        ApiError::internal(&format_args!("stored passkey {passkey_id}: {error}"))
    })?;
    credential.update_credential(&result);
    let credential_json = serde_json::to_string(&credential)
        .map_err(|error| ApiError::internal(&format_args!("passkey: {error}")))?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE passkeys SET credential_json = $1, last_used_at = $2 \
         WHERE id = $3 AND account_id = $4"
    )
    .bind(&credential_json)
    .bind(now)
    .bind(&passkey_id)
    .bind(account_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let ends_at = now + secs(UNLOCK_MAX_SECONDS);
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO console_unlocks \
         (session_id, account_id, user_id, passkey_id, unlocked_at, last_active_at, ends_at) \
         VALUES ($1, $2, $3, $4, $5, $5, $6) \
         ON CONFLICT (session_id) DO UPDATE SET passkey_id = excluded.passkey_id, \
         unlocked_at = excluded.unlocked_at, last_active_at = excluded.last_active_at, \
         ends_at = excluded.ends_at"
    )
    .bind(session_id.as_str())
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .bind(&passkey_id)
    .bind(now)
    .bind(ends_at)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    ledger::record(
        &mut tx,
        account_id,
        now,
        LedgerKind::ConsoleUnlocked,
        session_id.as_str(),
        json!({ "passkey": passkey_id, "user": user_id }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(session_id = %session_id, passkey_id, "console unlocked");
    let has_passkey = true;
    Ok(status_of(
        Some(UnlockTimes {
            last_active_at: now,
            ends_at,
        }),
        now,
        has_passkey,
    ))
}

/// Locks this browser session's console now (ledger `console.locked` when it was open);
/// locking a locked console changes nothing.
///
/// # Errors
/// A database error.
pub async fn lock(
    store: &Store,
    session_id: &SessionId,
    account_id: &AccountId,
    user_id: &UserId,
) -> Result<ConsoleStatus, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let ended = on_tx!(&mut tx, |conn| sqlx::query_as::<_, UnlockTimes>(
        "DELETE FROM console_unlocks WHERE session_id = $1 AND account_id = $2 \
         RETURNING last_active_at, ends_at"
    )
    .bind(session_id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(conn)
    .await)?;
    let was_open = ended.is_some_and(|unlock| unlock.ended(now).is_none());
    if was_open {
        ledger::record(
            &mut tx,
            account_id,
            now,
            LedgerKind::ConsoleLocked,
            session_id.as_str(),
            json!({ "user": user_id }),
        )
        .await?;
    }
    tx.commit().await?;
    if was_open {
        tracing::info!(session_id = %session_id, "console locked");
    }
    let has_passkey = passkeys::has_passkey(store, account_id, user_id).await?;
    Ok(status_of(None, now, has_passkey))
}

/// Drops unlocks past either limit (the sweeper).
///
/// # Errors
/// A database error.
pub(crate) async fn delete_ended(tx: &mut Tx, now: Millis) -> Result<u64, ApiError> {
    let deleted = on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM console_unlocks WHERE ends_at <= $1 OR last_active_at <= $2"
    )
    .bind(now)
    .bind(now - secs(UNLOCK_IDLE_SECONDS))
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(deleted)
}

fn base64_id(bytes: &[u8]) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unlock_ends_at_the_first_of_its_two_limits() {
        let start = 1_700_000_000_000;
        let unlock = UnlockTimes {
            last_active_at: start,
            ends_at: start + secs(UNLOCK_MAX_SECONDS),
        };
        assert!(unlock.ended(start).is_none());
        assert!(unlock
            .ended(start + secs(UNLOCK_IDLE_SECONDS) - 1)
            .is_none());
        assert!(unlock.ended(start + secs(UNLOCK_IDLE_SECONDS)).is_some());
        let busy = UnlockTimes {
            last_active_at: start + secs(UNLOCK_MAX_SECONDS) - 60_000,
            ..unlock
        };
        assert!(busy.ended(start + secs(UNLOCK_MAX_SECONDS) - 1).is_none());
        assert!(busy.ended(start + secs(UNLOCK_MAX_SECONDS)).is_some());
        assert_eq!(busy.idle_until(), busy.ends_at);
        assert!(!status_of(Some(busy), start + secs(UNLOCK_MAX_SECONDS), true).unlocked);
    }
}
