//! The secrets relay: the owner's browser seals a value for one device's pinned key; the
//! server keeps only the opaque box until the device answers, then deletes it.
//!
//! **Invariant:** no value ever reaches this module — only names, sealed boxes (which the
//! server cannot open) and the device's yes/no answer. A box is deleted (`sealed_json` set
//! to NULL) in the transaction that records the device's answer.
//!
//! A secret may be limited to sites (`allow`). The device obeys only the list sealed in the
//! box's aad, which the server can read but not change; the body repeats it so the web can
//! list it, and the server accepts the box only when the two are the same list, so what the
//! owner sees is what the computer enforces.

use serde_json::json;
use tether_protocol::capabilities::SealKey;
use tether_protocol::frames::ServerFrame;
use tether_protocol::secrets::{
    valid_name, Delivery, DeliveryAnswer, DeliveryState, SavedName, SecretsListing,
    SendSecretParams, MAX_NAME_LEN,
};
use tether_protocol::sites;
use tether_protocol::{AccountId, Code, DeliveryId, DeviceId};
use tether_seal::{Aad, Envelope, SealError};

use crate::clock::to_time;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_tx, stored_id, Store};

/// Largest sealed box accepted, as serialized JSON (a 64 KiB value seals to about 88 KiB).
pub const MAX_SEALED_BYTES: usize = 96 * 1024;
/// Longest refusal reason kept from a device.
const MAX_ERROR_LEN: usize = 500;

/// A delivery the server accepted: send `frame` to the device.
#[derive(Debug)]
pub struct Accepted {
    pub delivery_id: DeliveryId,
    pub frame: ServerFrame,
}

/// A checked [`SendSecretParams`]: a valid name and a sealed box of bounded size whose aad
/// parses and names exactly the sites the body asks for. Whether it is sealed for the
/// device's pinned key is [`send`]'s question.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    name: String,
    sealed: serde_json::Value,
    sealed_json: String,
    /// The key the box is sealed for.
    kid: String,
    /// The sites, as stored (`None`: no limit).
    allow_json: Option<String>,
}

impl TryFrom<SendSecretParams> for NewDelivery {
    type Error = ApiError;

    fn try_from(params: SendSecretParams) -> Result<NewDelivery, ApiError> {
        if !valid_name(&params.name) {
            return Err(ApiError::invalid_field(
                "name",
                &format!(
                    "must match [A-Za-z_][A-Za-z0-9_]* and be at most {MAX_NAME_LEN} characters"
                ),
            ));
        }
        let requested = requested_sites(params.allow)?;
        let sealed_json = serde_json::to_string(&params.sealed)?;
        if sealed_json.len() > MAX_SEALED_BYTES {
            return Err(ApiError::new(
                Code::PayloadTooLarge,
                format!("A sealed secret is at most {MAX_SEALED_BYTES} bytes."),
            ));
        }
        let envelope = Envelope::from_json(&params.sealed)
            .map_err(|error| ApiError::invalid_field("sealed", &error.to_string()))?;
        let allow = sealed_sites(&envelope, requested)?;
        Ok(NewDelivery {
            name: params.name,
            kid: envelope.kid().as_str().to_owned(),
            allow_json: allow.as_ref().map(serde_json::to_string).transpose()?,
            sealed: params.sealed,
            sealed_json,
        })
    }
}

/// A checked [`DeliveryAnswer`]: the name the device answers for and, when it refused,
/// its reason cut to a bounded length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryOutcome {
    name: String,
    /// `None` when saved.
    refusal: Option<String>,
}

impl From<DeliveryAnswer> for DeliveryOutcome {
    fn from(answer: DeliveryAnswer) -> DeliveryOutcome {
        let refusal = (!answer.saved).then(|| {
            answer
                .error
                .unwrap_or_else(|| "refused".to_owned())
                .chars()
                .take(MAX_ERROR_LEN)
                .collect::<String>()
        });
        DeliveryOutcome {
            name: answer.name,
            refusal,
        }
    }
}

/// Stores a checked box for a device of `account_id`, recording `secret.relayed`.
///
/// # Errors
/// 404 for a device not of this account; 409 `invalid_state` for a revoked device, one
/// without a pinned key or with `sealKeyMismatch`; 422 for a box not sealed for the pinned
/// key.
pub async fn send(
    store: &Store,
    account_id: &AccountId,
    device_id: &DeviceId,
    delivery: NewDelivery,
) -> Result<Accepted, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<
        _,
        (Option<String>, i64, Option<i64>),
    >(
        "SELECT seal_key_json, seal_key_mismatch, revoked_at FROM devices \
         WHERE id = $1 AND account_id = $2"
    )
    .bind(device_id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(conn)
    .await)?;
    let Some((seal_key_json, mismatch, revoked_at)) = row else {
        return Err(ApiError::not_found("device"));
    };
    if revoked_at.is_some() {
        return Err(ApiError::new(
            Code::InvalidState,
            "This computer was revoked; it cannot receive secrets.",
        ));
    }
    if mismatch != 0 {
        return Err(ApiError::new(
            Code::InvalidState,
            "This computer reported a different seal key than the one pinned when it paired \
             (sealKeyMismatch); pair it again before sending secrets.",
        ));
    }
    let pinned: Option<SealKey> = seal_key_json.and_then(|json| serde_json::from_str(&json).ok());
    let Some(pinned) = pinned else {
        return Err(ApiError::new(
            Code::InvalidState,
            "This computer has not reported its seal key yet; start its agent first.",
        ));
    };
    if delivery.kid != pinned.kid {
        return Err(ApiError::invalid_field(
            "sealed",
            "is sealed for another key than this computer's pinned seal key",
        ));
    }
    let delivery_id = DeliveryId::generate();
    let sql = "INSERT INTO secret_deliveries \
               (id, account_id, device_id, name, sealed_json, allow_json, state, error, \
                created_at, answered_at) \
               VALUES ($1, $2, $3, $4, $5, $6, 'pending', NULL, $7, NULL)";
    on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(delivery_id.as_str())
        .bind(account_id.as_str())
        .bind(device_id.as_str())
        .bind(&delivery.name)
        .bind(&delivery.sealed_json)
        .bind(&delivery.allow_json)
        .bind(now)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    let detail = json!({ "deviceId": device_id, "deliveryId": delivery_id, "name": delivery.name });
    ledger::record(
        &mut tx,
        account_id,
        now,
        LedgerKind::SecretRelayed,
        device_id.as_str(),
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(device_id = %device_id, delivery_id = %delivery_id, "secret relayed");
    Ok(Accepted {
        frame: ServerFrame::SecretSave {
            id: delivery_id.clone(),
            name: delivery.name,
            sealed: delivery.sealed,
        },
        delivery_id,
    })
}

/// The body's `allow` list, parsed: `None` for no limit (absent or empty).
///
/// # Errors
/// 422 `invalid_field` naming `allow` for a list that is not 1 to [`sites::MAX_SITES`]
/// canonical sites without repeats.
fn requested_sites(allow: Option<Vec<String>>) -> Result<Option<Vec<String>>, ApiError> {
    let Some(allow) = allow.filter(|sites| !sites.is_empty()) else {
        return Ok(None);
    };
    sites::parse_list(&allow)
        .map_err(|error| ApiError::invalid_field("allow", &error.to_string()))?;
    Ok(Some(allow))
}

/// The sites the box's aad limits the secret to, when they are exactly `requested`.
///
/// # Errors
/// 422 `invalid_field` naming `sealed` for an aad that does not parse or whose sites the
/// device would refuse; naming `allow` when the body's list is not the aad's, in order.
fn sealed_sites(
    envelope: &Envelope,
    requested: Option<Vec<String>>,
) -> Result<Option<Vec<String>>, ApiError> {
    let aad = Aad::parse(envelope.aad())
        .map_err(|error| ApiError::invalid_field("sealed", &error.to_string()))?;
    if let Some(sealed) = &aad.allow {
        sites::parse_list(sealed).map_err(|error| {
            ApiError::invalid_field("sealed", &SealError::BadSites(error.0).to_string())
        })?;
    }
    if requested != aad.allow {
        let sealed = match &aad.allow {
            Some(sealed) => format!("the box allows only {}", sealed.join(", ")),
            None => "the box names no sites".to_owned(),
        };
        return Err(ApiError::invalid_field(
            "allow",
            &format!("does not match the list sealed in the box ({sealed})"),
        ));
    }
    Ok(requested)
}

/// The `secret.save` frames of a device's pending deliveries, oldest first: sent again when
/// its event stream (re)connects.
///
/// # Errors
/// A database error.
pub async fn pending_frames(
    store: &Store,
    device_id: &DeviceId,
) -> Result<Vec<ServerFrame>, ApiError> {
    let rows = on_read!(store, |pool| sqlx::query_as::<
        _,
        (String, String, Option<String>),
    >(
        "SELECT id, name, sealed_json FROM secret_deliveries \
         WHERE device_id = $1 AND state = 'pending' ORDER BY created_at, id"
    )
    .bind(device_id.as_str())
    .fetch_all(pool)
    .await)?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, name, sealed)| {
            let sealed = serde_json::from_str(&sealed?).ok()?;
            let id = DeliveryId::try_from(id).ok()?;
            Some(ServerFrame::SecretSave { id, name, sealed })
        })
        .collect())
}

/// The device's answer to a delivery: deletes the box and, when saved, records the name.
/// Answering an answered delivery again changes nothing.
///
/// # Errors
/// 404 for a delivery of another device (or none); 422 when `name` is not the delivery's.
pub async fn answer(
    store: &Store,
    device: &DeviceIdentity,
    delivery_id: &DeliveryId,
    answer: DeliveryOutcome,
) -> Result<(), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, (String, String)>(
        "SELECT name, state FROM secret_deliveries WHERE id = $1 AND device_id = $2"
    )
    .bind(delivery_id.as_str())
    .bind(device.device_id.as_str())
    .fetch_optional(conn)
    .await)?;
    let Some((name, state)) = row else {
        return Err(ApiError::not_found("secret delivery"));
    };
    if name != answer.name {
        return Err(ApiError::invalid_field(
            "name",
            "is not the name of this delivery",
        ));
    }
    if state != "pending" {
        return Ok(());
    }
    let saved = answer.refusal.is_none();
    let state = if saved { "saved" } else { "refused" };
    let error = answer.refusal;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE secret_deliveries SET sealed_json = NULL, state = $1, error = $2, \
         answered_at = $3 WHERE id = $4"
    )
    .bind(state)
    .bind(&error)
    .bind(now)
    .bind(delivery_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if saved {
        on_tx!(&mut tx, |conn| sqlx::query(
            "INSERT INTO device_secrets (device_id, name, saved_at) VALUES ($1, $2, $3) \
             ON CONFLICT (device_id, name) DO UPDATE SET saved_at = excluded.saved_at"
        )
        .bind(device.device_id.as_str())
        .bind(&name)
        .bind(now)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    }
    tx.commit().await?;
    tracing::info!(device_id = %device.device_id, delivery_id = %delivery_id, state,
                   "secret delivery answered");
    Ok(())
}

/// Names a device holds and its deliveries, for its owner. Never a value or a box.
///
/// # Errors
/// 404 for a device not of this account.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    device_id: &DeviceId,
) -> Result<SecretsListing, ApiError> {
    let owned = on_read!(store, |pool| sqlx::query_scalar::<_, String>(
        "SELECT id FROM devices WHERE id = $1 AND account_id = $2"
    )
    .bind(device_id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(pool)
    .await)?;
    if owned.is_none() {
        return Err(ApiError::not_found("device"));
    }
    // A name's sites are those of the delivery saved last under it.
    let names = on_read!(store, |pool| sqlx::query_as::<
        _,
        (String, i64, Option<String>),
    >(
        "SELECT held.name, held.saved_at, \
                (SELECT sent.allow_json FROM secret_deliveries sent \
                 WHERE sent.device_id = held.device_id AND sent.name = held.name \
                   AND sent.state = 'saved' \
                 ORDER BY sent.answered_at DESC, sent.id DESC LIMIT 1) \
         FROM device_secrets held WHERE held.device_id = $1 ORDER BY held.name"
    )
    .bind(device_id.as_str())
    .fetch_all(pool)
    .await)?;
    let deliveries = on_read!(store, |pool| sqlx::query_as::<
        _,
        (String, String, String, Option<String>, Option<String>),
    >(
        "SELECT id, name, state, error, allow_json FROM secret_deliveries WHERE device_id = $1 \
         ORDER BY created_at DESC, id DESC LIMIT 50"
    )
    .bind(device_id.as_str())
    .fetch_all(pool)
    .await)?;
    let names = names
        .into_iter()
        .map(|(name, saved_at, allow_json)| {
            Ok(SavedName {
                name,
                saved_at: to_time(saved_at),
                allow: stored_sites(allow_json)?,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    let deliveries = deliveries
        .into_iter()
        .map(|(id, name, state, error, allow_json)| {
            Ok(Delivery {
                id: stored_id(id)?,
                name,
                state: match state.as_str() {
                    "saved" => DeliveryState::Saved,
                    "refused" => DeliveryState::Refused,
                    _ => DeliveryState::Pending,
                },
                error,
                allow: stored_sites(allow_json)?,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(SecretsListing { names, deliveries })
}

/// A delivery's `allow_json` column, as written by [`send`].
fn stored_sites(allow_json: Option<String>) -> Result<Option<Vec<String>>, ApiError> {
    allow_json
        .map(|json| serde_json::from_str(&json))
        .transpose()
        .map_err(ApiError::from)
}
