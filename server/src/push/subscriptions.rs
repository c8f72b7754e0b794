//! Browser subscriptions: checked ([`NewSubscription`], [`KindsUpdate`]), stored one per
//! endpoint per account, listed without their endpoint or keys, changed and removed by their
//! account only (another account's is a 404), and read by the sender as [`Target`]s.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::PublicKey;
use tether_protocol::push::{
    Kinds, KindsChange, PushKind, SubscribeParams, Subscription, UpdateSubscriptionParams,
    MAX_SUBSCRIPTIONS_PER_ACCOUNT, MAX_SUBSCRIPTION_NAME_CHARS,
};
use tether_protocol::{AccountId, Code, SubscriptionId};

use super::encrypt::ReceiverKeys;
use super::endpoint::Endpoint;
use crate::accounts::parse_name;
use crate::clock::{to_time, Millis};
use crate::error::ApiError;
use crate::store::{on_read, on_tx, stored_id, Store};

/// A checked [`SubscribeParams`].
pub struct NewSubscription {
    /// As the browser sent it (checked by [`Endpoint::parse`]).
    endpoint: String,
    /// The keys, re-encoded: base64url without padding.
    p256dh: String,
    auth: String,
    name: Option<String>,
    kinds: KindsChange,
}

impl NewSubscription {
    /// Checks the browser's subscription; `allow_loopback` is `TETHER_PUSH_ALLOW_LOOPBACK`.
    ///
    /// # Errors
    /// 422 `invalid_field` naming `endpoint`, `keys.p256dh`, `keys.auth` or `name`.
    pub fn check(
        params: SubscribeParams,
        allow_loopback: bool,
    ) -> Result<NewSubscription, ApiError> {
        Endpoint::parse(&params.endpoint, allow_loopback)
            .map_err(|why| ApiError::invalid_field("endpoint", why))?;
        let public = decode_public_key(&params.keys.p256dh).ok_or_else(|| {
            ApiError::invalid_field(
                "keys.p256dh",
                "must be base64url of an uncompressed P-256 point (65 bytes) on the curve.",
            )
        })?;
        let auth = decode_auth(&params.keys.auth).ok_or_else(|| {
            ApiError::invalid_field("keys.auth", "must be base64url of 16 bytes.")
        })?;
        let name = match params.name.as_deref() {
            Some(raw) if !raw.trim().is_empty() => {
                Some(parse_name("name", raw, MAX_SUBSCRIPTION_NAME_CHARS)?)
            }
            _ => None,
        };
        Ok(NewSubscription {
            endpoint: params.endpoint,
            p256dh: URL_SAFE_NO_PAD.encode(public.to_encoded_point(false).as_bytes()),
            auth: URL_SAFE_NO_PAD.encode(auth),
            name,
            kinds: params.kinds.unwrap_or_default(),
        })
    }
}

/// A checked [`UpdateSubscriptionParams`]: the kinds to change.
pub struct KindsUpdate(KindsChange);

impl From<UpdateSubscriptionParams> for KindsUpdate {
    fn from(params: UpdateSubscriptionParams) -> KindsUpdate {
        KindsUpdate(params.kinds)
    }
}

/// Whether [`subscribe`] made a subscription or found the endpoint's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscribing {
    Made,
    Updated,
}

/// One subscription to send a message to. Not `Debug`: the endpoint is a capability and the
/// keys are the browser's.
pub struct Target {
    pub id: String,
    pub endpoint: String,
    pub keys: ReceiverKeys,
}

/// Stores the account's subscription, or updates the one with the same endpoint (its keys,
/// and its name and kinds when given), keeping its id.
///
/// # Errors
/// 409 `invalid_state` past [`MAX_SUBSCRIPTIONS_PER_ACCOUNT`], or a database error.
pub async fn subscribe(
    store: &Store,
    account_id: &AccountId,
    new: NewSubscription,
) -> Result<(SubscriptionId, Subscribing), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    // Subscribing takes turns per account, so the count below sees every subscription made
    // before it and the cap holds under a burst (and the same endpoint twice at once is
    // made once, then updated).
    tx.lock_account(account_id).await?;
    let find = format!(
        "SELECT id FROM push_subscriptions WHERE account_id = $1 AND endpoint = $2{}",
        tx.lock_clause()
    );
    let existing = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, String>(&find)
        .bind(account_id.as_str())
        .bind(&new.endpoint)
        .fetch_optional(&mut *conn)
        .await)?;
    let answer = match existing {
        Some(id) => {
            update_keys(&mut tx, &id, &new, now).await?;
            (stored_id(id)?, Subscribing::Updated)
        }
        None => {
            let held = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM push_subscriptions WHERE account_id = $1"
            )
            .bind(account_id.as_str())
            .fetch_one(&mut *conn)
            .await)?;
            if usize::try_from(held).unwrap_or(usize::MAX) >= MAX_SUBSCRIPTIONS_PER_ACCOUNT {
                return Err(ApiError::new(
                    Code::InvalidState,
                    format!(
                        "This account has {MAX_SUBSCRIPTIONS_PER_ACCOUNT} push subscriptions; \
                         remove one first."
                    ),
                ));
            }
            let id = SubscriptionId::generate();
            insert(&mut tx, &id, account_id, &new, now).await?;
            (id, Subscribing::Made)
        }
    };
    tx.commit().await?;
    tracing::info!(subscription_id = %answer.0, made = answer.1 == Subscribing::Made, "push subscription stored");
    Ok(answer)
}

async fn insert(
    tx: &mut crate::store::Tx,
    id: &SubscriptionId,
    account_id: &AccountId,
    new: &NewSubscription,
    now: Millis,
) -> Result<(), ApiError> {
    let kinds = apply(Kinds::ALL, new.kinds);
    let sql = "INSERT INTO push_subscriptions (id, account_id, endpoint, p256dh, auth, name, \
               wants_decision, wants_job_ended, wants_device_offline, created_at, updated_at) \
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)";
    on_tx!(tx, |conn| sqlx::query(sql)
        .bind(id.as_str())
        .bind(account_id.as_str())
        .bind(&new.endpoint)
        .bind(&new.p256dh)
        .bind(&new.auth)
        .bind(&new.name)
        .bind(i64::from(kinds.decision))
        .bind(i64::from(kinds.job_ended))
        .bind(i64::from(kinds.device_offline))
        .bind(now)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

async fn update_keys(
    tx: &mut crate::store::Tx,
    id: &str,
    new: &NewSubscription,
    now: Millis,
) -> Result<(), ApiError> {
    let sql = "UPDATE push_subscriptions SET p256dh = $1, auth = $2, name = COALESCE($3, name), \
               wants_decision = COALESCE($4, wants_decision), \
               wants_job_ended = COALESCE($5, wants_job_ended), \
               wants_device_offline = COALESCE($6, wants_device_offline), updated_at = $7 \
               WHERE id = $8";
    on_tx!(tx, |conn| sqlx::query(sql)
        .bind(&new.p256dh)
        .bind(&new.auth)
        .bind(&new.name)
        .bind(new.kinds.decision.map(i64::from))
        .bind(new.kinds.job_ended.map(i64::from))
        .bind(new.kinds.device_offline.map(i64::from))
        .bind(now)
        .bind(id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

const LISTED: &str = "SELECT id, name, endpoint, created_at, last_success_at, wants_decision, \
                      wants_job_ended, wants_device_offline FROM push_subscriptions";

/// The account's subscriptions, newest first.
///
/// # Errors
/// A database error.
pub async fn list(store: &Store, account_id: &AccountId) -> Result<Vec<Subscription>, ApiError> {
    let sql = format!("{LISTED} WHERE account_id = $1 ORDER BY created_at DESC, id DESC");
    let rows = on_read!(store, |pool| sqlx::query_as::<_, ListedRow>(&sql)
        .bind(account_id.as_str())
        .fetch_all(pool)
        .await)?;
    rows.into_iter().map(ListedRow::into_api).collect()
}

/// One of the account's subscriptions.
///
/// # Errors
/// 404 for another account's or none, or a database error.
pub async fn get(
    store: &Store,
    account_id: &AccountId,
    id: &SubscriptionId,
) -> Result<Subscription, ApiError> {
    let sql = format!("{LISTED} WHERE id = $1 AND account_id = $2");
    let row = on_read!(store, |pool| sqlx::query_as::<_, ListedRow>(&sql)
        .bind(id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    row.ok_or_else(not_found)?.into_api()
}

/// Turns kinds of one of the account's subscriptions on or off; answers it as it is now.
///
/// # Errors
/// 404 for another account's or none, or a database error.
pub async fn update(
    store: &Store,
    account_id: &AccountId,
    id: &SubscriptionId,
    update: KindsUpdate,
) -> Result<Subscription, ApiError> {
    let KindsUpdate(kinds) = update;
    let mut tx = store.begin().await?;
    let sql = "UPDATE push_subscriptions SET wants_decision = COALESCE($1, wants_decision), \
               wants_job_ended = COALESCE($2, wants_job_ended), \
               wants_device_offline = COALESCE($3, wants_device_offline), updated_at = $4 \
               WHERE id = $5 AND account_id = $6";
    let changed = on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(kinds.decision.map(i64::from))
        .bind(kinds.job_ended.map(i64::from))
        .bind(kinds.device_offline.map(i64::from))
        .bind(store.now())
        .bind(id.as_str())
        .bind(account_id.as_str())
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    if changed == 0 {
        return Err(not_found());
    }
    tx.commit().await?;
    get(store, account_id, id).await
}

/// Removes one of the account's subscriptions.
///
/// # Errors
/// 404 for another account's or none, or a database error.
pub async fn delete(
    store: &Store,
    account_id: &AccountId,
    id: &SubscriptionId,
) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    let deleted = on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM push_subscriptions WHERE id = $1 AND account_id = $2"
    )
    .bind(id.as_str())
    .bind(account_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if deleted == 0 {
        return Err(not_found());
    }
    tx.commit().await?;
    tracing::info!(subscription_id = %id, "push subscription removed");
    Ok(())
}

/// The account's subscriptions that want `kind`. A row whose keys no longer decode is
/// skipped (and said so), never sent to.
///
/// # Errors
/// A database error.
pub async fn targets(
    store: &Store,
    account_id: &AccountId,
    kind: PushKind,
) -> Result<Vec<Target>, ApiError> {
    let column = match kind {
        PushKind::Decision => "wants_decision",
        PushKind::JobEnded => "wants_job_ended",
        PushKind::DeviceOffline => "wants_device_offline",
    };
    let sql = format!(
        "SELECT id, endpoint, p256dh, auth FROM push_subscriptions \
         WHERE account_id = $1 AND {column} = 1 ORDER BY created_at, id"
    );
    let rows = on_read!(store, |pool| sqlx::query_as::<
        _,
        (String, String, String, String),
    >(&sql)
    .bind(account_id.as_str())
    .fetch_all(pool)
    .await)?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, endpoint, p256dh, auth)| {
            let keys = decode_public_key(&p256dh)
                .zip(decode_auth(&auth))
                .map(|(public, auth)| ReceiverKeys { public, auth });
            if keys.is_none() {
                tracing::warn!(subscription_id = %id, "stored push keys do not decode; skipped");
            }
            Some(Target {
                id,
                endpoint,
                keys: keys?,
            })
        })
        .collect())
}

/// Notes that the push service took a message for the subscription.
///
/// # Errors
/// A database error.
pub async fn delivered(store: &Store, id: &str) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE push_subscriptions SET last_success_at = $1 WHERE id = $2"
    )
    .bind(store.now())
    .bind(id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

/// Removes a subscription the push service says is gone (404 or 410).
///
/// # Errors
/// A database error.
pub async fn gone(store: &Store, id: &str) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM push_subscriptions WHERE id = $1"
    )
    .bind(id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

fn not_found() -> ApiError {
    ApiError::not_found("push subscription")
}

fn apply(kinds: Kinds, change: KindsChange) -> Kinds {
    Kinds {
        decision: change.decision.unwrap_or(kinds.decision),
        job_ended: change.job_ended.unwrap_or(kinds.job_ended),
        device_offline: change.device_offline.unwrap_or(kinds.device_offline),
    }
}

/// Browsers send base64url without padding; padding is tolerated.
fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

/// An uncompressed point (0x04, x, y) that lies on P-256.
fn decode_public_key(text: &str) -> Option<PublicKey> {
    let bytes = decode(text)?;
    if bytes.len() != 65 || bytes[0] != 0x04 {
        return None;
    }
    PublicKey::from_sec1_bytes(&bytes).ok()
}

fn decode_auth(text: &str) -> Option<[u8; 16]> {
    decode(text)?.try_into().ok()
}

#[derive(sqlx::FromRow)]
struct ListedRow {
    id: String,
    name: Option<String>,
    endpoint: String,
    created_at: Millis,
    last_success_at: Option<Millis>,
    wants_decision: i64,
    wants_job_ended: i64,
    wants_device_offline: i64,
}

impl ListedRow {
    fn into_api(self) -> Result<Subscription, ApiError> {
        // Stored endpoints were checked; one that no longer parses shows no origin.
        let origin = Endpoint::parse(&self.endpoint, true)
            .map(|endpoint| endpoint.origin())
            .unwrap_or_default();
        Ok(Subscription {
            id: stored_id(self.id)?,
            name: self.name,
            origin,
            created_at: to_time(self.created_at),
            last_success_at: self.last_success_at.map(to_time),
            kinds: Kinds {
                decision: self.wants_decision != 0,
                job_ended: self.wants_job_ended != 0,
                device_offline: self.wants_device_offline != 0,
            },
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use p256::elliptic_curve::rand_core::OsRng;
    use p256::SecretKey;
    use tether_protocol::push::SubscriptionKeys;

    fn params(endpoint: &str, p256dh: &str, auth: &str) -> SubscribeParams {
        SubscribeParams {
            endpoint: endpoint.to_owned(),
            keys: SubscriptionKeys {
                p256dh: p256dh.to_owned(),
                auth: auth.to_owned(),
            },
            expiration_time: None,
            name: None,
            kinds: None,
        }
    }

    fn field_of(result: Result<NewSubscription, ApiError>) -> String {
        let error = result.err().unwrap();
        assert_eq!(error.code(), Code::InvalidField);
        error.message().split(':').next().unwrap().to_owned()
    }

    #[test]
    fn keys_must_be_a_point_on_the_curve_and_16_bytes() {
        let point = SecretKey::random(&mut OsRng)
            .public_key()
            .to_encoded_point(false);
        let good_key = URL_SAFE_NO_PAD.encode(point.as_bytes());
        let compressed = SecretKey::random(&mut OsRng)
            .public_key()
            .to_encoded_point(true);
        let good_auth = URL_SAFE_NO_PAD.encode([1u8; 16]);
        let endpoint = "https://push.example.com/x";
        assert!(NewSubscription::check(params(endpoint, &good_key, &good_auth), false).is_ok());
        let padded = format!("{good_key}=");
        assert!(NewSubscription::check(params(endpoint, &padded, &good_auth), false).is_ok());
        let mut off_curve = vec![0x04];
        off_curve.extend([1u8; 64]);
        for bad_key in [
            String::new(),
            "not base64!".to_owned(),
            URL_SAFE_NO_PAD.encode([4u8; 64]),
            URL_SAFE_NO_PAD.encode(compressed.as_bytes()),
            URL_SAFE_NO_PAD.encode(&off_curve),
            URL_SAFE_NO_PAD.encode([0u8; 65]),
        ] {
            let checked = NewSubscription::check(params(endpoint, &bad_key, &good_auth), false);
            assert_eq!(field_of(checked), "keys.p256dh", "{bad_key}");
        }
        for bad_auth in [
            String::new(),
            "%%%".to_owned(),
            URL_SAFE_NO_PAD.encode([1u8; 15]),
            URL_SAFE_NO_PAD.encode([1u8; 17]),
        ] {
            let checked = NewSubscription::check(params(endpoint, &good_key, &bad_auth), false);
            assert_eq!(field_of(checked), "keys.auth", "{bad_auth}");
        }
        let checked =
            NewSubscription::check(params("https://10.0.0.1/", &good_key, &good_auth), false);
        assert_eq!(field_of(checked), "endpoint");
    }
}
