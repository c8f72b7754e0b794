//! Pairing a computer to an account, modelled on the OAuth device grant (RFC 8628).
//!
//! The agent asks for a code pair ([`start`]), a signed-in person approves the user code
//! ([`link`], after the page showed [`pending_by_user_code`]), and the agent redeems the
//! device code for its token exactly once ([`register`]).
//!
//! **Invariant:** the device code and the device token are stored only as SHA-256 hashes;
//! the same `installId` in the same account is the same device row.

use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use rand::Rng;
use serde_json::json;
use sha2::{Digest, Sha256};
use tether_protocol::capabilities::SealKey;
use tether_protocol::pairing::{
    format_user_code, normalize_user_code, LinkedDevice, PairParams, PairResponse,
    RegisterResponse, SLOW_DOWN_STEP_SECS, USER_CODE_ALPHABET,
};
use tether_protocol::routes::DEVICE_TOKEN_PREFIX;
use tether_protocol::{AccountId, Code, DeviceId};

use crate::accounts::parse_name;
use crate::clock::{secs, Millis};
use crate::config::Config;
use crate::credentials::{self, sha256_b64url};
use crate::error::ApiError;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_tx, stored_id, Store, Tx};

/// Wrong codes an account may try within [`LINK_WINDOW_SECS`] before linking answers 429.
pub const MAX_LINK_FAILURES: i64 = 5;
pub const LINK_WINDOW_SECS: u64 = 15 * 60;

/// A pairing request after validation.
#[derive(Debug, Clone)]
pub struct NewPairing {
    name: String,
    platform: String,
    install_id: String,
    agent_version: String,
    seal_key: SealKey,
}

impl TryFrom<PairParams> for NewPairing {
    type Error = ApiError;
    fn try_from(params: PairParams) -> Result<NewPairing, ApiError> {
        Ok(NewPairing {
            name: parse_name("name", &params.name, 100)?,
            platform: parse_name("platform", &params.platform, 50)?,
            install_id: parse_token_field("installId", &params.install_id, 128)?,
            agent_version: parse_token_field("agentVersion", &params.agent_version, 64)?,
            seal_key: parse_seal_key(params.seal_key)?,
        })
    }
}

/// Issues a device code and a user code. `base_url` is where the person approves
/// (`{base_url}/link`).
///
/// # Errors
/// A database error.
pub async fn start(
    store: &Store,
    pairing: NewPairing,
    base_url: &str,
    config: &Config,
) -> Result<PairResponse, ApiError> {
    let device_code = credentials::random_token("");
    let now = store.now();
    let seal_key_json = serde_json::to_string(&pairing.seal_key)?;
    let mut tx = store.begin().await?;
    let mut user_code = random_user_code();
    // A live collision in 20^8 codes is rare; retry a few times rather than fail.
    for _ in 0..5 {
        let sql = "INSERT INTO pairings (id, device_code_hash, user_code, name, platform, \
                   install_id, agent_version, seal_key_json, interval_secs, created_at, expires_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING";
        let inserted = on_tx!(&mut tx, |conn| sqlx::query(sql)
            .bind(DeviceId::generate().as_str())
            .bind(credentials::hash_token(&device_code))
            .bind(&user_code)
            .bind(&pairing.name)
            .bind(&pairing.platform)
            .bind(&pairing.install_id)
            .bind(&pairing.agent_version)
            .bind(&seal_key_json)
            .bind(i64::try_from(config.pairing_interval_secs).unwrap_or(i64::MAX))
            .bind(now)
            .bind(now + secs(config.pairing_expires_secs))
            .execute(conn)
            .await
            .map(|done| done.rows_affected()))?;
        if inserted == 1 {
            tx.commit().await?;
            let formatted = format_user_code(&user_code);
            return Ok(PairResponse {
                device_code,
                verification_uri: format!("{base_url}/link"),
                verification_uri_complete: format!("{base_url}/link?code={formatted}"),
                user_code: formatted,
                expires_in: config.pairing_expires_secs,
                interval: config.pairing_interval_secs,
            });
        }
        user_code = random_user_code();
    }
    Err(ApiError::internal(&"no free user code after 5 tries"))
}

/// Redeems a device code: the token once the code was linked, else the RFC 8628 errors.
///
/// # Errors
/// 400 `authorization_pending`, `slow_down` (the interval then grows by 5 s),
/// `expired_token`, or `access_denied` (unknown or already redeemed code).
pub async fn register(store: &Store, device_code: &str) -> Result<RegisterResponse, ApiError> {
    let code_hash = credentials::hash_token(device_code);
    let now = store.now();
    let mut tx = store.begin().await?;
    let sql = format!(
        "SELECT device_code_hash, interval_secs, last_poll_at, expires_at, account_id, device_id, \
         redeemed_at FROM pairings WHERE device_code_hash = $1{}",
        tx.lock_clause()
    );
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, PollRow>(&sql)
        .bind(&code_hash)
        .fetch_optional(conn)
        .await)?;
    let row = row
        .filter(|row| credentials::hashes_match(&row.device_code_hash, &code_hash))
        .ok_or_else(|| ApiError::new(Code::AccessDenied, "This device code is unknown."))?;
    if row.redeemed_at.is_some() {
        return Err(ApiError::new(
            Code::AccessDenied,
            "This device code was already used; pair again.",
        ));
    }
    let linked = row.account_id.clone().zip(row.device_id.clone());
    if linked.is_none() && now >= row.expires_at {
        return Err(ApiError::new(
            Code::ExpiredToken,
            "The pairing code expired; pair again.",
        ));
    }
    if let Some(error) = poll_pace(&mut tx, &row, &code_hash, now).await? {
        tx.commit().await?;
        return Err(error);
    }
    let Some((account_id, device_id)) = linked else {
        tx.commit().await?;
        return Err(ApiError::new(
            Code::AuthorizationPending,
            "Nobody approved this code yet; keep polling.",
        ));
    };
    let token = credentials::random_token(DEVICE_TOKEN_PREFIX);
    redeem(&mut tx, &code_hash, &device_id, &token, now).await?;
    tx.commit().await?;
    Ok(RegisterResponse {
        device_id: stored_id(device_id)?,
        token,
        account_id: stored_id(account_id)?,
    })
}

/// A signed-in person approves a user code: the pairing's device joins their account (the
/// same row again for the same `installId`, revocation cleared, the new seal key pinned, the
/// old token dead until the agent redeems its new one).
///
/// A code this account linked already (a second tap of Approve) is answered like any used
/// code but is not a wrong one.
///
/// # Errors
/// 429 `too_many_attempts` (with `Retry-After`: until the oldest of them leaves the window)
/// after [`MAX_LINK_FAILURES`] wrong codes in 15 minutes,
/// 404 `unknown_code` for a wrong, used or expired code.
pub async fn link(
    store: &Store,
    account_id: &AccountId,
    typed_code: &str,
) -> Result<LinkedDevice, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    // An account's links take turns, so each counts every wrong code typed before it (the
    // limit holds under a burst), and a second approval of one code sees the first's link.
    tx.lock_account(account_id).await?;
    let (failures, oldest) = recent_link_failures(&mut tx, account_id, now).await?;
    if failures >= MAX_LINK_FAILURES {
        let frees_at = oldest.unwrap_or(now) + secs(LINK_WINDOW_SECS);
        let wait = u64::try_from((frees_at - now + 999) / 1000)
            .unwrap_or(1)
            .max(1);
        return Err(ApiError::new(
            Code::TooManyAttempts,
            format!(
                "Too many wrong codes; try again in {} min.",
                wait.div_ceil(60)
            ),
        )
        .with_retry_after(wait));
    }
    let code = normalize_user_code(typed_code);
    let pending = match &code {
        Some(code) => pending_for_link(&mut tx, code, now).await?,
        None => None,
    };
    let Some(pending) = pending else {
        if let Some(code) = &code {
            if linked_by(&mut tx, account_id, code).await? {
                return Err(ApiError::new(
                    Code::UnknownCode,
                    "This code was approved already.",
                ));
            }
        }
        record_link_failure(&mut tx, account_id, now).await?;
        tx.commit().await?;
        return Err(ApiError::new(
            Code::UnknownCode,
            "This code is unknown or expired.",
        ));
    };
    let (device_id, repaired) = upsert_device(&mut tx, account_id, &pending, now).await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE pairings SET account_id = $1, device_id = $2, linked_at = $3 WHERE id = $4"
    )
    .bind(account_id.as_str())
    .bind(device_id.as_str())
    .bind(now)
    .bind(&pending.id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let seal_key: SealKey = serde_json::from_str(&pending.seal_key_json)?;
    let detail = json!({
        "deviceId": device_id, "name": pending.name, "platform": pending.platform,
        "fingerprint": seal_key.fingerprint, "repaired": repaired,
    });
    ledger::record(
        &mut tx,
        account_id,
        now,
        LedgerKind::DevicePaired,
        device_id.as_str(),
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(device_id = %device_id, repaired, "device linked");
    Ok(LinkedDevice {
        device_id,
        name: pending.name,
        platform: pending.platform,
        fingerprint: seal_key.fingerprint,
    })
}

/// The computer waiting behind a user code, for the approval page: `(name, platform,
/// fingerprint)`. `None` for a malformed, unknown, linked or expired code (and, logged, on a
/// database error).
pub async fn pending_by_user_code(store: &Store, code: &str) -> Option<(String, String, String)> {
    let code = normalize_user_code(code)?;
    let row = on_read!(store, |pool| sqlx::query_as::<_, (String, String, String)>(
        "SELECT name, platform, seal_key_json FROM pairings \
         WHERE user_code = $1 AND expires_at > $2 AND linked_at IS NULL"
    )
    .bind(&code)
    .bind(store.now())
    .fetch_optional(pool)
    .await);
    let (name, platform, seal_key_json) = match row {
        Ok(row) => row?,
        Err(error) => {
            tracing::error!(%error, "reading a pending pairing");
            return None;
        }
    };
    let seal_key: SealKey = serde_json::from_str(&seal_key_json).ok()?;
    Some((name, platform, seal_key.fingerprint))
}

/// Deletes pairings that expired a day ago (the sweeper calls this).
///
/// # Errors
/// A database error.
pub(crate) async fn delete_stale(tx: &mut Tx, now: Millis) -> Result<u64, ApiError> {
    let deleted = on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM pairings WHERE expires_at < $1"
    )
    .bind(now - secs(24 * 3600))
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let cutoff = now - secs(LINK_WINDOW_SECS);
    on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM link_failures WHERE at < $1"
    )
    .bind(cutoff)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(deleted)
}

fn random_user_code() -> String {
    let mut rng = rand::rngs::OsRng;
    (0..8)
        .map(|_| char::from(USER_CODE_ALPHABET[rng.gen_range(0..USER_CODE_ALPHABET.len())]))
        .collect()
}

/// Returns `slow_down` when the agent polls faster than its interval, growing the interval;
/// records the poll either way.
async fn poll_pace(
    tx: &mut Tx,
    row: &PollRow,
    code_hash: &str,
    now: Millis,
) -> Result<Option<ApiError>, ApiError> {
    let too_fast = row
        .last_poll_at
        .is_some_and(|last| now - last < row.interval_secs.saturating_mul(1000));
    let step = i64::try_from(SLOW_DOWN_STEP_SECS).unwrap_or(5);
    let interval = if too_fast {
        row.interval_secs + step
    } else {
        row.interval_secs
    };
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE pairings SET last_poll_at = $1, interval_secs = $2 WHERE device_code_hash = $3"
    )
    .bind(now)
    .bind(interval)
    .bind(code_hash)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(too_fast.then(|| {
        ApiError::new(
            Code::SlowDown,
            format!("Polling too fast; wait {interval} seconds between polls."),
        )
    }))
}

async fn redeem(
    tx: &mut Tx,
    code_hash: &str,
    device_id: &str,
    token: &str,
    now: Millis,
) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE devices SET token_hash = $1 WHERE id = $2"
    )
    .bind(credentials::hash_token(token))
    .bind(device_id)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    on_tx!(tx, |conn| sqlx::query(
        "UPDATE pairings SET redeemed_at = $1 WHERE device_code_hash = $2"
    )
    .bind(now)
    .bind(code_hash)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Wrong codes of the account within the window, and when the oldest of them was typed.
async fn recent_link_failures(
    tx: &mut Tx,
    account_id: &AccountId,
    now: Millis,
) -> Result<(i64, Option<Millis>), ApiError> {
    let counted = on_tx!(tx, |conn| sqlx::query_as::<_, (i64, Option<i64>)>(
        "SELECT COUNT(*), MIN(at) FROM link_failures WHERE account_id = $1 AND at > $2"
    )
    .bind(account_id.as_str())
    .bind(now - secs(LINK_WINDOW_SECS))
    .fetch_one(conn)
    .await)?;
    Ok(counted)
}

async fn record_link_failure(
    tx: &mut Tx,
    account_id: &AccountId,
    now: Millis,
) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "INSERT INTO link_failures (account_id, at) VALUES ($1, $2)"
    )
    .bind(account_id.as_str())
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(())
}

/// Whether this account linked the pairing of `code` already.
async fn linked_by(tx: &mut Tx, account_id: &AccountId, code: &str) -> Result<bool, ApiError> {
    let linked = on_tx!(tx, |conn| sqlx::query_scalar::<_, String>(
        "SELECT id FROM pairings WHERE user_code = $1 AND account_id = $2"
    )
    .bind(code)
    .bind(account_id.as_str())
    .fetch_optional(conn)
    .await)?;
    Ok(linked.is_some())
}

async fn pending_for_link(
    tx: &mut Tx,
    code: &str,
    now: Millis,
) -> Result<Option<PendingRow>, ApiError> {
    let sql = format!(
        "SELECT id, name, platform, install_id, agent_version, seal_key_json FROM pairings \
         WHERE user_code = $1 AND expires_at > $2 AND linked_at IS NULL{}",
        tx.lock_clause()
    );
    let row = on_tx!(tx, |conn| sqlx::query_as::<_, PendingRow>(&sql)
        .bind(code)
        .bind(now)
        .fetch_optional(conn)
        .await)?;
    Ok(row)
}

/// The device row for this account and installation: reused (and reset) or created. Two
/// links of one installation at once (two pairings of the same computer) both answer with
/// the one row: the insert does nothing when the other made it first, and this one reuses it.
async fn upsert_device(
    tx: &mut Tx,
    account_id: &AccountId,
    pending: &PendingRow,
    now: Millis,
) -> Result<(DeviceId, bool), ApiError> {
    if let Some(id) = device_of_install(tx, account_id, &pending.install_id).await? {
        reset_device(tx, &id, pending).await?;
        return Ok((stored_id(id)?, true));
    }
    let device_id = DeviceId::generate();
    let sql = "INSERT INTO devices (id, account_id, install_id, name, platform, agent_version, \
               seal_key_json, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
               ON CONFLICT (account_id, install_id) DO NOTHING";
    let inserted = on_tx!(tx, |conn| sqlx::query(sql)
        .bind(device_id.as_str())
        .bind(account_id.as_str())
        .bind(&pending.install_id)
        .bind(&pending.name)
        .bind(&pending.platform)
        .bind(&pending.agent_version)
        .bind(&pending.seal_key_json)
        .bind(now)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    if inserted == 1 {
        return Ok((device_id, false));
    }
    // Another link of this installation committed its row meanwhile.
    let id = device_of_install(tx, account_id, &pending.install_id)
        .await?
        .ok_or_else(|| ApiError::internal(&"a conflicting device row is not visible"))?;
    reset_device(tx, &id, pending).await?;
    Ok((stored_id(id)?, true))
}

async fn device_of_install(
    tx: &mut Tx,
    account_id: &AccountId,
    install_id: &str,
) -> Result<Option<String>, ApiError> {
    let sql = format!(
        "SELECT id FROM devices WHERE account_id = $1 AND install_id = $2{}",
        tx.lock_clause()
    );
    let id = on_tx!(tx, |conn| sqlx::query_scalar::<_, String>(&sql)
        .bind(account_id.as_str())
        .bind(install_id)
        .fetch_optional(conn)
        .await)?;
    Ok(id)
}

/// Pairing again: the new name, platform and seal key, revocation cleared, the old token
/// dead until the agent redeems its new one.
async fn reset_device(tx: &mut Tx, id: &str, pending: &PendingRow) -> Result<(), ApiError> {
    let sql = "UPDATE devices SET name = $1, platform = $2, agent_version = $3, \
               seal_key_json = $4, seal_key_mismatch = 0, revoked_at = NULL, token_hash = NULL \
               WHERE id = $5";
    on_tx!(tx, |conn| sqlx::query(sql)
        .bind(&pending.name)
        .bind(&pending.platform)
        .bind(&pending.agent_version)
        .bind(&pending.seal_key_json)
        .bind(id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

/// An opaque identifier field: 1 to `max` printable ASCII characters without spaces.
fn parse_token_field(field: &str, raw: &str, max: usize) -> Result<String, ApiError> {
    let ok = !raw.is_empty() && raw.len() <= max && raw.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(ApiError::invalid_field(
            field,
            &format!("must be 1 to {max} printable ASCII characters without spaces."),
        ))
    }
}

/// Checks that `kid` and `fingerprint` are what DESIGN §5 derives from `spki`, so the
/// approval page shows the key's true fingerprint.
fn parse_seal_key(key: SealKey) -> Result<SealKey, ApiError> {
    let lenient = GeneralPurpose::new(
        &URL_SAFE,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    parse_token_field("sealKey.alg", &key.alg, 64)?;
    let spki = lenient
        .decode(key.spki.as_bytes())
        .ok()
        .filter(|der| !der.is_empty() && der.len() <= 1024)
        .ok_or_else(|| ApiError::invalid_field("sealKey.spki", "must be base64url SPKI DER."))?;
    let digest = Sha256::digest(&spki);
    let kid = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16]);
    if key.kid.trim_end_matches('=') != kid {
        return Err(ApiError::invalid_field(
            "sealKey.kid",
            "must be base64url of the first 16 bytes of SHA-256(spki).",
        ));
    }
    let fingerprint = format!("SHA256:{}", sha256_b64url(&spki));
    if key.fingerprint.trim_end_matches('=') != fingerprint {
        return Err(ApiError::invalid_field(
            "sealKey.fingerprint",
            "must be SHA256: followed by base64url(SHA-256(spki)).",
        ));
    }
    Ok(key)
}

#[derive(sqlx::FromRow)]
struct PollRow {
    device_code_hash: String,
    interval_secs: i64,
    last_poll_at: Option<i64>,
    expires_at: i64,
    account_id: Option<String>,
    device_id: Option<String>,
    redeemed_at: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct PendingRow {
    id: String,
    name: String,
    platform: String,
    install_id: String,
    agent_version: String,
    seal_key_json: String,
}
