//! The account's choices about what notifications may do: whether Allow answers a question
//! from its notification (off by default; Deny always does). Changes go to the ledger.

use serde_json::json;
use tether_protocol::push::PushSettings;
use tether_protocol::AccountId;

use crate::error::ApiError;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_tx, Store};

/// The account's settings.
///
/// # Errors
/// A database error.
pub async fn get(store: &Store, account_id: &AccountId) -> Result<PushSettings, ApiError> {
    let allowed = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(
        "SELECT allow_from_notifications FROM accounts WHERE id = $1"
    )
    .bind(account_id.as_str())
    .fetch_one(pool)
    .await)?;
    Ok(PushSettings {
        allow_from_notifications: allowed != 0,
    })
}

/// Stores `settings` for the account, and a ledger entry when they changed.
///
/// # Errors
/// A database error.
pub async fn set(
    store: &Store,
    account_id: &AccountId,
    settings: PushSettings,
) -> Result<PushSettings, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let changed = on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE accounts SET allow_from_notifications = $1 \
         WHERE id = $2 AND allow_from_notifications <> $1"
    )
    .bind(i64::from(settings.allow_from_notifications))
    .bind(account_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if changed > 0 {
        let detail = json!({ "allowFromNotifications": settings.allow_from_notifications });
        let kind = LedgerKind::NotificationSettingsChanged;
        ledger::record(&mut tx, account_id, now, kind, account_id.as_str(), detail).await?;
    }
    tx.commit().await?;
    Ok(settings)
}
