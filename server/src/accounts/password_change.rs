//! Changing a password: checked like a sign-in, and then every other session of the person
//! ends, and their API tokens too unless they keep them, in one transaction.

use tether_protocol::auth::{ChangePasswordParams, Me};
use tether_protocol::{Code, SessionId};

use crate::accounts::passwords::{self, PasswordQueue, MAX_PASSWORD_CHARS};
use crate::accounts::{api_tokens, login_failures, sessions};
use crate::credentials;
use crate::error::ApiError;
use crate::store::{on_read, on_tx, Store};

/// A password change: the current password as typed, a new one of acceptable length, and
/// whether the account's API tokens stay. (No `Debug`: it holds passwords.)
pub struct PasswordChange {
    current: String,
    new: String,
    keep_api_tokens: bool,
}

impl TryFrom<ChangePasswordParams> for PasswordChange {
    type Error = ApiError;
    fn try_from(params: ChangePasswordParams) -> Result<PasswordChange, ApiError> {
        passwords::check_length("newPassword", &params.new_password)?;
        Ok(PasswordChange {
            current: params.current_password,
            new: params.new_password,
            keep_api_tokens: params.keep_api_tokens,
        })
    }
}

/// Changes the caller's password and ends every other session of theirs (and their API
/// tokens, unless kept), in one transaction. The current password is checked like a
/// sign-in: in the hashing queue, counted for the email ([`login_failures::charge`]), so a
/// borrowed session cannot guess it faster than the sign-in form could. Nothing changes
/// unless the current password is right and the new one is strong enough.
///
/// # Errors
/// 503 `unavailable` when the hashing queue is full, 429 `rate_limited` while the email is
/// blocked, 401 `invalid_credentials` for a wrong current password, 422 naming
/// `newPassword` when it is too easy to guess, or a database error.
pub async fn change_password(
    store: &Store,
    queue: &PasswordQueue,
    me: &Me,
    keep: &SessionId,
    change: PasswordChange,
) -> Result<(), ApiError> {
    let PasswordChange {
        current,
        new,
        keep_api_tokens,
    } = change;
    let ticket = queue.admit()?;
    let email_key = login_failures::key(&me.user.email);
    login_failures::charge(store, &email_key).await?;
    let stored_hash = on_read!(store, |pool| sqlx::query_scalar::<_, String>(
        "SELECT password_hash FROM users WHERE id = $1 AND account_id = $2"
    )
    .bind(me.user.id.as_str())
    .bind(me.account.id.as_str())
    .fetch_one(pool)
    .await)?;
    let local_part = me
        .user
        .email
        .split('@')
        .next()
        .unwrap_or_default()
        .to_owned();
    let personal = [me.user.email.clone(), local_part, me.user.name.clone()];
    // None: the current password is wrong; then the new one is not even judged.
    let new_hash = ticket
        .run(move || {
            let verified = current.chars().count() <= MAX_PASSWORD_CHARS
                && credentials::verify_password(&current, &stored_hash);
            if !verified {
                return None;
            }
            let personal: Vec<&str> = personal.iter().map(String::as_str).collect();
            let new_hash = passwords::check_strength("newPassword", &new, &personal)
                .and_then(|()| credentials::hash_password(&new));
            Some(new_hash)
        })
        .await?;
    let new_hash = match new_hash {
        Some(Ok(hash)) => hash,
        Some(Err(refused)) => {
            // The person knew their password: that is no failed guess.
            let mut tx = store.begin().await?;
            login_failures::clear(&mut tx, &email_key).await?;
            tx.commit().await?;
            return Err(refused);
        }
        None => {
            return Err(ApiError::new(
                Code::InvalidCredentials,
                "The current password is wrong.",
            ))
        }
    };
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE users SET password_hash = $1 WHERE id = $2 AND account_id = $3"
    )
    .bind(&new_hash)
    .bind(me.user.id.as_str())
    .bind(me.account.id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let ended = sessions::end_others_in(&mut tx, &me.account.id, &me.user.id, keep).await?;
    let revoked = if keep_api_tokens {
        0
    } else {
        api_tokens::revoke_all_in(&mut tx, &me.account.id, &me.user.id).await?
    };
    login_failures::clear(&mut tx, &email_key).await?;
    tx.commit().await?;
    tracing::info!(user_id = %me.user.id, ended, revoked, "password changed");
    Ok(())
}
