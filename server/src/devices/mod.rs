//! The devices wing: paired computers (here, with the memory of their tokens), pairing
//! (`pairing`), when each was last heard from (`presence`) and the sealed-secret relay
//! (`secrets`).
//!
//! Paired computers: who a device is ([`DeviceIdentity`]), listing, renaming, revoking, and
//! authenticating their tokens.
//!
//! Pages call [`list`], [`get`], [`rename`] and [`revoke`]; the device routes call
//! [`authenticate`] (through the extractor in `auth`), [`describe_self`] and
//! [`remove_self`]; the admin routes call [`admin_list`] and [`admin_revoke`].
//!
//! **Invariant:** a device of another account is `not_found`, never `forbidden`.

pub mod pairing;
pub mod presence;
pub mod secrets;

use serde_json::json;
use tether_protocol::capabilities::{Capabilities, SealKey};
use tether_protocol::devices::{AdminDevice, Device, DeviceSelf, RenameParams};
use tether_protocol::{AccountId, Code, DeviceId};

use crate::accounts::parse_name;
use crate::clock::{secs, to_time, Millis};
use crate::config::Config;
use crate::credentials;
use crate::error::ApiError;
use crate::replica_memory::{Remembered, ReplicaMemory};
use crate::store::job_rows;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_reads, on_tx, stored_id, ReadSource, Store, Tx};

/// A paired device that proved who it is (its token resolved, not revoked). Every domain
/// function a device calls takes one, so none can act for a device it has not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub device_id: DeviceId,
    pub account_id: AccountId,
    pub name: String,
}

impl Remembered for DeviceIdentity {
    fn owner(&self) -> &str {
        self.device_id.as_str()
    }
}

/// The device tokens a replica checked recently.
pub type DeviceTokens = ReplicaMemory<DeviceIdentity>;

/// A checked new name for a device: trimmed, 1 to 100 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceName(String);

impl TryFrom<RenameParams> for DeviceName {
    type Error = ApiError;

    fn try_from(params: RenameParams) -> Result<DeviceName, ApiError> {
        parse_name("name", &params.name, 100).map(DeviceName)
    }
}

/// The devices of `account_id`, oldest first, revoked ones included.
///
/// # Errors
/// A database error.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    config: &Config,
) -> Result<Vec<Device>, ApiError> {
    let sql = format!(
        "SELECT {DEVICE_COLUMNS} FROM devices WHERE account_id = $1 ORDER BY created_at, id"
    );
    let rows = on_read!(store, |pool| sqlx::query_as::<_, DeviceRow>(&sql)
        .bind(account_id.as_str())
        .fetch_all(pool)
        .await)?;
    let now = store.now();
    rows.into_iter()
        .map(|row| row.into_device(now, config))
        .collect()
}

/// One device of `account_id`.
///
/// # Errors
/// 404 `not_found` when it does not exist or belongs to another account.
pub async fn get(
    store: &Store,
    account_id: &AccountId,
    device_id: &DeviceId,
    config: &Config,
) -> Result<Device, ApiError> {
    let sql = format!("SELECT {DEVICE_COLUMNS} FROM devices WHERE id = $1 AND account_id = $2");
    let row = on_read!(store, |pool| sqlx::query_as::<_, DeviceRow>(&sql)
        .bind(device_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    row.ok_or_else(|| ApiError::not_found("device"))?
        .into_device(store.now(), config)
}

/// Renames a device; heartbeats keep the saved name.
///
/// # Errors
/// 404 for a device not of this account.
pub async fn rename(
    store: &Store,
    account_id: &AccountId,
    device_id: &DeviceId,
    name: DeviceName,
    config: &Config,
) -> Result<Device, ApiError> {
    let mut tx = store.begin().await?;
    let updated = on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE devices SET name = $1 WHERE id = $2 AND account_id = $3"
    )
    .bind(&name.0)
    .bind(device_id.as_str())
    .bind(account_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if updated == 0 {
        return Err(ApiError::not_found("device"));
    }
    tx.commit().await?;
    get(store, account_id, device_id, config).await
}

/// Revokes a device of `account_id`: its token answers 401 `revoked` from now on, its
/// running or waiting jobs end `interrupted` and its queued ones `cancelled`. Revoking a
/// revoked device again changes nothing.
///
/// # Errors
/// 404 for a device not of this account.
pub async fn revoke(
    store: &Store,
    account_id: &AccountId,
    device_id: &DeviceId,
) -> Result<(), ApiError> {
    end_device(
        store,
        Some(account_id),
        device_id,
        LedgerKind::DeviceRevoked,
    )
    .await
    .map(drop)
}

/// Every account's devices, for the platform admin.
///
/// # Errors
/// A database error.
pub async fn admin_list(store: &Store, config: &Config) -> Result<Vec<AdminDevice>, ApiError> {
    let sql = format!("SELECT {DEVICE_COLUMNS} FROM devices ORDER BY created_at, id");
    let rows = on_read!(store, |pool| sqlx::query_as::<_, DeviceRow>(&sql)
        .fetch_all(pool)
        .await)?;
    let now = store.now();
    rows.into_iter()
        .map(|row| {
            let account_id = stored_id(row.account_id.clone())?;
            Ok(AdminDevice {
                account_id,
                device: row.into_device(now, config)?,
            })
        })
        .collect()
}

/// Revokes any account's device (the caller must already be the platform admin). Returns
/// the device's account.
///
/// # Errors
/// 404 for an unknown device.
pub async fn admin_revoke(store: &Store, device_id: &DeviceId) -> Result<AccountId, ApiError> {
    end_device(store, None, device_id, LedgerKind::DeviceRevoked).await
}

/// Whether the device was revoked (or no longer exists): open event streams check this now
/// and then, in case the frame telling them was lost.
///
/// # Errors
/// A database error.
pub async fn is_revoked(store: &Store, device_id: &DeviceId) -> Result<bool, ApiError> {
    let row = on_read!(store, |pool| sqlx::query_scalar::<_, Option<i64>>(
        "SELECT revoked_at FROM devices WHERE id = $1"
    )
    .bind(device_id.as_str())
    .fetch_optional(pool)
    .await)?;
    Ok(!matches!(row, Some(None)))
}

/// Marks a device stopped: its agent closed its event stream cleanly, so it is offline at
/// once rather than when its last contact ages out. `last_seen_at` keeps the real last
/// contact; any newer contact (a heartbeat) makes it online again.
///
/// # Errors
/// A database error.
pub async fn mark_stopped(store: &Store, device_id: &DeviceId) -> Result<(), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE devices SET stopped_at = $1 WHERE id = $2 AND revoked_at IS NULL"
    )
    .bind(now)
    .bind(device_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await?;
    Ok(())
}

/// `GET /api/devices/self`.
pub fn describe_self(device: &DeviceIdentity) -> DeviceSelf {
    DeviceSelf {
        device_id: device.device_id.clone(),
        name: device.name.clone(),
        account_id: device.account_id.clone(),
    }
}

/// The device removes itself (unpair): like a revocation, recorded as `device.removed`.
///
/// # Errors
/// A database error.
pub async fn remove_self(store: &Store, device: &DeviceIdentity) -> Result<(), ApiError> {
    end_device(
        store,
        Some(&device.account_id),
        &device.device_id,
        LedgerKind::DeviceRemoved,
    )
    .await
    .map(drop)
}

/// Resolves a device token, by its hash ([`credentials::hash_token`]).
///
/// # Errors
/// 401 `unauthorized` for an unknown token, 401 `revoked` for a revoked device's.
pub async fn authenticate(store: &Store, token_hash: &str) -> Result<DeviceIdentity, ApiError> {
    let row = on_read!(store, |pool| {
        sqlx::query_as::<_, TokenRow>(
        "SELECT id, account_id, name, token_hash, revoked_at FROM devices WHERE token_hash = $1"
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await
    })?;
    let row = row
        .filter(|row| credentials::hashes_match(&row.token_hash, token_hash))
        .ok_or_else(|| ApiError::new(Code::Unauthorized, "Unknown device token; pair again."))?;
    if row.revoked_at.is_some() {
        return Err(ApiError::new(
            Code::Revoked,
            "This device was revoked; forget its token and pair again.",
        ));
    }
    Ok(DeviceIdentity {
        device_id: stored_id(row.id)?,
        account_id: stored_id(row.account_id)?,
        name: row.name,
    })
}

/// Stores a heartbeat's capability report (`capabilities_json` is it, serialized) and contact
/// time. The first seal key is pinned; a different one later raises `sealKeyMismatch` until
/// the device pairs again.
///
/// # Errors
/// A database error.
pub(crate) async fn record_report(
    tx: &mut Tx,
    device: &DeviceIdentity,
    capabilities: &Capabilities,
    capabilities_json: &str,
    now: Millis,
) -> Result<(), ApiError> {
    let pinned = on_tx!(tx, |conn| sqlx::query_scalar::<_, Option<String>>(
        "SELECT seal_key_json FROM devices WHERE id = $1"
    )
    .bind(device.device_id.as_str())
    .fetch_one(conn)
    .await)?;
    let reported = &capabilities.seal_key;
    let (seal_key_json, mismatch) = match pinned {
        None => (serde_json::to_string(reported)?, false),
        Some(json) => {
            let pinned: Option<SealKey> = serde_json::from_str(&json).ok();
            let same = pinned.is_some_and(|pinned| pinned.spki == reported.spki);
            (json, !same)
        }
    };
    // Once raised, the mismatch stays until the device pairs again.
    let sql = "UPDATE devices SET capabilities_json = $1, last_seen_at = $2, seal_key_json = $3, \
               seal_key_mismatch = CASE WHEN $4 = 1 THEN 1 ELSE seal_key_mismatch END, \
               agent_version = $5 WHERE id = $6";
    on_tx!(tx, |conn| sqlx::query(sql)
        .bind(capabilities_json)
        .bind(now)
        .bind(&seal_key_json)
        .bind(i64::from(mismatch))
        .bind(&capabilities.agent_version)
        .bind(device.device_id.as_str())
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

/// The last capability report of a device of `account_id` that is not revoked.
///
/// # Errors
/// 404 when the device is unknown, another account's or revoked.
pub(crate) async fn usable_capabilities(
    mut source: impl ReadSource,
    account_id: &AccountId,
    device_id: &DeviceId,
) -> Result<Option<Capabilities>, ApiError> {
    let row = on_reads!(source, |conn| {
        sqlx::query_as::<_, (Option<String>, Option<i64>)>(
            "SELECT capabilities_json, revoked_at FROM devices WHERE id = $1 AND account_id = $2",
        )
        .bind(device_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(conn)
        .await
    })?;
    match row {
        Some((capabilities, None)) => {
            Ok(capabilities.and_then(|json| serde_json::from_str(&json).ok()))
        }
        _ => Err(ApiError::not_found("device")),
    }
}

async fn end_device(
    store: &Store,
    account_id: Option<&AccountId>,
    device_id: &DeviceId,
    kind: LedgerKind,
) -> Result<AccountId, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, (String, Option<i64>)>(
        "SELECT account_id, revoked_at FROM devices WHERE id = $1"
    )
    .bind(device_id.as_str())
    .fetch_optional(conn)
    .await)?;
    let Some((owner, revoked_at)) = row else {
        return Err(ApiError::not_found("device"));
    };
    let owner: AccountId = stored_id(owner)?;
    if account_id.is_some_and(|account_id| *account_id != owner) {
        return Err(ApiError::not_found("device"));
    }
    if revoked_at.is_some() {
        return Ok(owner);
    }
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE devices SET revoked_at = $1 WHERE id = $2"
    )
    .bind(now)
    .bind(device_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let n_ended = job_rows::end_for_revoked_device(&mut tx, device_id, now).await?;
    // Boxes still waiting for it are deleted: nobody can open them any more.
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE secret_deliveries SET sealed_json = NULL, state = 'refused', \
         error = 'the computer was revoked', answered_at = $1 \
         WHERE device_id = $2 AND state = 'pending'"
    )
    .bind(now)
    .bind(device_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let detail =
        json!({ "deviceId": device_id, "jobsEnded": n_ended, "byAdmin": account_id.is_none() });
    ledger::record(&mut tx, &owner, now, kind, device_id.as_str(), detail).await?;
    tx.commit().await?;
    tracing::info!(device_id = %device_id, kind = kind.as_str(), "device ended");
    Ok(owner)
}

const DEVICE_COLUMNS: &str = "id, account_id, name, platform, seal_key_json, seal_key_mismatch, \
    capabilities_json, last_seen_at, stopped_at, revoked_at, created_at";

#[derive(sqlx::FromRow)]
struct DeviceRow {
    id: String,
    account_id: String,
    name: String,
    platform: String,
    seal_key_json: Option<String>,
    seal_key_mismatch: i64,
    capabilities_json: Option<String>,
    last_seen_at: Option<i64>,
    /// When its agent last stopped cleanly (see [`mark_stopped`]).
    stopped_at: Option<i64>,
    revoked_at: Option<i64>,
    created_at: i64,
}

impl DeviceRow {
    fn into_device(self, now: Millis, config: &Config) -> Result<Device, ApiError> {
        // Seen recently, and not stopped since: a clean stop is offline at once.
        let online = self.revoked_at.is_none()
            && self.last_seen_at.is_some_and(|seen| {
                now - seen <= secs(config.online_secs)
                    && self.stopped_at.is_none_or(|stopped| seen > stopped)
            });
        Ok(Device {
            id: stored_id(self.id)?,
            name: self.name,
            platform: self.platform,
            online,
            last_seen_at: self.last_seen_at.map(to_time),
            capabilities: self
                .capabilities_json
                .and_then(|json| serde_json::from_str(&json).ok()),
            seal_key: self
                .seal_key_json
                .and_then(|json| serde_json::from_str(&json).ok()),
            seal_key_mismatch: self.seal_key_mismatch != 0,
            revoked_at: self.revoked_at.map(to_time),
            created_at: to_time(self.created_at),
        })
    }
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: String,
    account_id: String,
    name: String,
    token_hash: String,
    revoked_at: Option<i64>,
}
