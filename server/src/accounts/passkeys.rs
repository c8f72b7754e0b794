//! Passkeys (WebAuthn): a person registers up to [`MAX_PASSKEYS`] of them from a browser
//! session, lists them and removes them; `console_unlocks` uses them to open the console of
//! one browser session.
//!
//! A ceremony is two requests: the first answers the options for the browser's
//! `navigator.credentials.create()` / `.get()` and keeps the ceremony's state in
//! `webauthn_ceremonies` (so any replica can finish it), bound to the browser session, for
//! [`CEREMONY_SECS`]; the second takes that row (deleting it, whatever the outcome: a
//! ceremony is used once) and checks the browser's answer against it. A session holds at
//! most one ceremony of each kind: starting another drops the older one.
//!
//! The relying party is the server's public origin ([`RelyingParty::for_origin`]); its id
//! is the origin's host name. WebAuthn takes no IP address as the id, so passkeys need the
//! server reached by a host name (`http://localhost:PORT` works on one machine).
//!
//! Every failure of the browser's answer (an unknown, used, expired or other session's
//! ceremony, another origin, another challenge, a bad signature, user verification
//! missing, an unknown passkey) is 400 `passkey_refused` with a sentence; never a 500.
//!
//! The stored credential is webauthn-rs's `Passkey`: the public key, its counter and
//! flags; nothing secret.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::SecondsFormat;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use tether_protocol::auth::Me;
use tether_protocol::console::{
    CeremonyStarted, Passkey, PasskeyRegistration, MAX_PASSKEYS, MAX_PASSKEY_NAME_CHARS,
};
use tether_protocol::{AccountId, Code, JobId, SessionId, UserId};
use webauthn_rs::prelude as wa;

use crate::accounts::parse_name;
use crate::clock::{secs, to_time, Millis};
use crate::error::ApiError;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_tx, Store, Tx};

/// How long a ceremony may take, from its options to the browser's answer.
pub const CEREMONY_SECS: u64 = 5 * 60;

/// The server as WebAuthn's relying party: its id (a host name) and origin.
pub struct RelyingParty {
    webauthn: wa::Webauthn,
}

impl RelyingParty {
    /// The relying party of `base` (the server's public URL, or the origin a request was
    /// addressed to): the origin of that URL, and its host as the id.
    ///
    /// # Errors
    /// 409 `invalid_state` when `base` is not an http(s) URL with a host name (an IP
    /// address cannot be a relying party id).
    pub fn for_origin(base: &str) -> Result<RelyingParty, ApiError> {
        let no_host_name = || {
            ApiError::new(
                Code::InvalidState,
                "Passkeys need this server opened by a host name, not an IP address (WebAuthn \
                 refuses one): use http://localhost:PORT on this machine, or set the public \
                 URL (TETHER_PUBLIC_URL) to a name.",
            )
        };
        let url = wa::Url::parse(base).map_err(|_| no_host_name())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(no_host_name());
        }
        let origin =
            wa::Url::parse(&url.origin().ascii_serialization()).map_err(|_| no_host_name())?;
        let rp_id = origin.domain().ok_or_else(no_host_name)?.to_owned();
        let webauthn = wa::WebauthnBuilder::new(&rp_id, &origin)
            .map(|builder| {
                builder
                    .rp_name("Tether")
                    .timeout(Duration::from_secs(CEREMONY_SECS))
            })
            .and_then(wa::WebauthnBuilder::build)
            .map_err(|_| no_host_name())?;
        Ok(RelyingParty { webauthn })
    }

    pub(crate) fn webauthn(&self) -> &wa::Webauthn {
        &self.webauthn
    }
}

/// What a ceremony is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CeremonyKind {
    Registration,
    Unlock,
}

impl CeremonyKind {
    fn as_str(self) -> &'static str {
        match self {
            CeremonyKind::Registration => "registration",
            CeremonyKind::Unlock => "unlock",
        }
    }
}

/// Whose ceremony: the browser session that started it, and its person.
pub(crate) struct CeremonyOwner<'a> {
    pub account_id: &'a AccountId,
    pub user_id: &'a UserId,
    pub session_id: &'a SessionId,
}

/// A checked [`PasskeyRegistration`]: the name, the ceremony and the new credential.
pub struct NewPasskey {
    ceremony_id: String,
    name: String,
    credential: Box<wa::RegisterPublicKeyCredential>,
}

impl TryFrom<PasskeyRegistration> for NewPasskey {
    type Error = ApiError;
    fn try_from(params: PasskeyRegistration) -> Result<NewPasskey, ApiError> {
        let name = parse_name("name", &params.name, MAX_PASSKEY_NAME_CHARS)?;
        let credential = serde_json::from_value(params.credential).map_err(|_| {
            refused(
                "credential: this is not a new passkey (PublicKeyCredential.toJSON() of what \
                 navigator.credentials.create() made).",
            )
        })?;
        Ok(NewPasskey {
            ceremony_id: params.ceremony_id,
            name,
            credential: Box::new(credential),
        })
    }
}

/// 400 `passkey_refused` with `message`.
pub(crate) fn refused(message: &str) -> ApiError {
    ApiError::new(Code::PasskeyRefused, message)
}

/// A ceremony's failure as a sentence for the person (400 `passkey_refused`).
pub(crate) fn refused_because(error: &wa::WebauthnError) -> ApiError {
    use wa::WebauthnError as E;
    tracing::info!(?error, "passkey ceremony refused");
    refused(match error {
        E::MismatchedChallenge | E::ChallengeNotFound => {
            "The passkey answered another challenge; start again."
        }
        E::InvalidRPOrigin | E::CredentialCrossOrigin => {
            "The passkey answered for another web origin than this server's."
        }
        E::InvalidRPIDHash => "The passkey belongs to another site than this server.",
        E::InvalidClientDataType => "The answer is for another kind of WebAuthn ceremony.",
        E::UserNotPresent => "The authenticator did not confirm a person was present.",
        E::UserNotVerified => {
            "The authenticator did not verify the person (PIN, biometrics): passkeys here \
             need user verification."
        }
        E::CredentialNotFound => "This passkey is not one of yours.",
        E::CredentialPossibleCompromise => {
            "The passkey's signature counter went back: this answer was replayed, or the \
             passkey copied."
        }
        _ => "The passkey's answer did not verify.",
    })
}

/// A new id of the time-ordered shape every other id has.
pub(crate) fn new_id() -> String {
    JobId::generate().to_string()
}

/// The handle WebAuthn keeps for the person: their id when it is a UUID (every id this
/// server makes), else a UUID derived from it.
fn user_handle(user_id: &UserId) -> wa::Uuid {
    wa::Uuid::parse_str(user_id.as_str()).unwrap_or_else(|_| {
        let digest = Sha256::digest(user_id.as_str().as_bytes());
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        wa::Uuid::from_bytes(bytes)
    })
}

/// Whether `raw` could be an id this server made (short, URL-safe), before it is looked up.
fn plausible_id(raw: &str) -> bool {
    !raw.is_empty()
        && raw.len() <= 64
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Keeps a ceremony's state for its browser session (dropping an older one of the same
/// kind) and returns its id.
///
/// # Errors
/// A database error.
pub(crate) async fn save_ceremony<S: Serialize>(
    store: &Store,
    kind: CeremonyKind,
    owner: &CeremonyOwner<'_>,
    state: &S,
) -> Result<String, ApiError> {
    let id = new_id();
    let state_json = serde_json::to_string(state)
        .map_err(|error| ApiError::internal(&format_args!("ceremony state: {error}")))?;
    let expires_at = store.now() + secs(CEREMONY_SECS);
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM webauthn_ceremonies WHERE session_id = $1 AND account_id = $2 AND kind = $3"
    )
    .bind(owner.session_id.as_str())
    .bind(owner.account_id.as_str())
    .bind(kind.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO webauthn_ceremonies \
         (id, account_id, user_id, session_id, kind, state_json, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    )
    .bind(&id)
    .bind(owner.account_id.as_str())
    .bind(owner.user_id.as_str())
    .bind(owner.session_id.as_str())
    .bind(kind.as_str())
    .bind(&state_json)
    .bind(expires_at)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await?;
    Ok(id)
}

/// Takes (deletes) the session's ceremony `raw_id` of `kind` and returns its state. It is
/// gone whatever happens next: a ceremony is answered once.
///
/// # Errors
/// 400 `passkey_refused` for an unknown, used, expired or another session's ceremony; a
/// database error.
pub(crate) async fn take_ceremony<S: DeserializeOwned>(
    store: &Store,
    kind: CeremonyKind,
    owner: &CeremonyOwner<'_>,
    raw_id: &str,
) -> Result<S, ApiError> {
    let unknown = || {
        refused(
            "This ceremony is unknown, used or expired (it lasts five minutes, once); start \
             again.",
        )
    };
    if !plausible_id(raw_id) {
        return Err(unknown());
    }
    let mut tx = store.begin().await?;
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, (String, Millis)>(
        "DELETE FROM webauthn_ceremonies WHERE id = $1 AND account_id = $2 AND user_id = $3 \
         AND session_id = $4 AND kind = $5 RETURNING state_json, expires_at"
    )
    .bind(raw_id)
    .bind(owner.account_id.as_str())
    .bind(owner.user_id.as_str())
    .bind(owner.session_id.as_str())
    .bind(kind.as_str())
    .fetch_optional(conn)
    .await)?;
    tx.commit().await?;
    let Some((state_json, expires_at)) = row else {
        return Err(unknown());
    };
    if expires_at <= store.now() {
        return Err(unknown());
    }
    serde_json::from_str(&state_json)
        .map_err(|error| ApiError::internal(&format_args!("stored ceremony state: {error}")))
}

/// Drops ceremonies past their time (the sweeper).
///
/// # Errors
/// A database error.
pub(crate) async fn delete_stale_ceremonies(tx: &mut Tx, now: Millis) -> Result<u64, ApiError> {
    let deleted = on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM webauthn_ceremonies WHERE expires_at <= $1"
    )
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(deleted)
}

/// The person's passkeys as webauthn-rs's credentials, oldest first.
///
/// # Errors
/// A database error, or a stored credential that does not decode (`internal`).
pub(crate) async fn credentials_of(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
) -> Result<Vec<wa::Passkey>, ApiError> {
    let rows = on_read!(store, |pool| sqlx::query_as::<_, (String, String)>(
        "SELECT id, credential_json FROM passkeys WHERE account_id = $1 AND user_id = $2 \
         ORDER BY created_at, id"
    )
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .fetch_all(pool)
    .await)?;
    rows.into_iter()
        .map(|(id, json)| {
            serde_json::from_str(&json)
                .map_err(|error| ApiError::internal(&format_args!("stored passkey {id}: {error}")))
        })
        .collect()
}

/// Whether the person has a passkey.
///
/// # Errors
/// A database error.
pub async fn has_passkey(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
) -> Result<bool, ApiError> {
    let found = on_read!(store, |pool| sqlx::query_scalar::<_, String>(
        "SELECT id FROM passkeys WHERE account_id = $1 AND user_id = $2 LIMIT 1"
    )
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .fetch_optional(pool)
    .await)?;
    Ok(found.is_some())
}

fn too_many() -> ApiError {
    ApiError::new(
        Code::InvalidState,
        format!("You have {MAX_PASSKEYS} passkeys, the most one person keeps: remove one first."),
    )
}

/// Starts registering a passkey for the caller's browser session: the options for
/// `navigator.credentials.create()` (user verification required, no attestation, the
/// person's passkeys excluded).
///
/// # Errors
/// 409 `invalid_state` at [`MAX_PASSKEYS`]; a database error.
pub async fn start_registration(
    store: &Store,
    rp: &RelyingParty,
    me: &Me,
    session_id: &SessionId,
) -> Result<CeremonyStarted, ApiError> {
    let existing = credentials_of(store, &me.account.id, &me.user.id).await?;
    if existing.len() >= MAX_PASSKEYS {
        return Err(too_many());
    }
    let exclude = existing
        .iter()
        .map(|credential| credential.cred_id().clone())
        .collect();
    let (options, state) = rp
        .webauthn()
        .start_passkey_registration(
            user_handle(&me.user.id),
            &me.user.email,
            &me.user.name,
            Some(exclude),
        )
        .map_err(|error| ApiError::internal(&format_args!("passkey registration: {error}")))?;
    let owner = CeremonyOwner {
        account_id: &me.account.id,
        user_id: &me.user.id,
        session_id,
    };
    let ceremony_id = save_ceremony(store, CeremonyKind::Registration, &owner, &state).await?;
    let options = serde_json::to_value(&options)
        .map_err(|error| ApiError::internal(&format_args!("passkey options: {error}")))?;
    Ok(CeremonyStarted {
        ceremony_id,
        options,
    })
}

/// Finishes a registration: checks the new credential against the session's ceremony and
/// keeps it under its name (ledger `passkey.added`).
///
/// # Errors
/// 400 `passkey_refused` (the ceremony, the credential, a passkey registered already),
/// 409 `invalid_state` at [`MAX_PASSKEYS`]; a database error.
pub async fn finish_registration(
    store: &Store,
    rp: &RelyingParty,
    me: &Me,
    session_id: &SessionId,
    new: NewPasskey,
) -> Result<Passkey, ApiError> {
    let owner = CeremonyOwner {
        account_id: &me.account.id,
        user_id: &me.user.id,
        session_id,
    };
    let state: wa::PasskeyRegistration =
        take_ceremony(store, CeremonyKind::Registration, &owner, &new.ceremony_id).await?;
    let credential = rp
        .webauthn()
        .finish_passkey_registration(&new.credential, &state)
        .map_err(|error| refused_because(&error))?;
    let credential_id = URL_SAFE_NO_PAD.encode(credential.cred_id());
    let credential_json = serde_json::to_string(&credential)
        .map_err(|error| ApiError::internal(&format_args!("passkey: {error}")))?;
    let id = new_id();
    let now = store.now();
    let mut tx = store.begin().await?;
    tx.lock_account(&me.account.id).await?;
    let count = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM passkeys WHERE account_id = $1 AND user_id = $2"
    )
    .bind(me.account.id.as_str())
    .bind(me.user.id.as_str())
    .fetch_one(conn)
    .await)?;
    if usize::try_from(count).unwrap_or(usize::MAX) >= MAX_PASSKEYS {
        return Err(too_many());
    }
    let inserted = on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO passkeys \
         (id, account_id, user_id, name, credential_id, credential_json, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (credential_id) DO NOTHING"
    )
    .bind(&id)
    .bind(me.account.id.as_str())
    .bind(me.user.id.as_str())
    .bind(&new.name)
    .bind(&credential_id)
    .bind(&credential_json)
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if inserted == 0 {
        return Err(refused("This passkey is registered already."));
    }
    ledger::record(
        &mut tx,
        &me.account.id,
        now,
        LedgerKind::PasskeyAdded,
        &id,
        json!({ "name": new.name, "user": me.user.id }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(passkey_id = %id, "passkey added");
    Ok(Passkey {
        id,
        name: new.name,
        created_at: rfc3339(now),
        last_used_at: None,
    })
}

/// The person's passkeys, oldest first.
///
/// # Errors
/// A database error.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
) -> Result<Vec<Passkey>, ApiError> {
    let rows = on_read!(store, |pool| sqlx::query_as::<
        _,
        (String, String, Millis, Option<Millis>),
    >(
        "SELECT id, name, created_at, last_used_at FROM passkeys \
         WHERE account_id = $1 AND user_id = $2 ORDER BY created_at, id"
    )
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .fetch_all(pool)
    .await)?;
    Ok(rows
        .into_iter()
        .map(|(id, name, created_at, last_used_at)| Passkey {
            id,
            name,
            created_at: rfc3339(created_at),
            last_used_at: last_used_at.map(rfc3339),
        })
        .collect())
}

/// Removes one of the person's passkeys; every console unlock it opened ends with it
/// (ledger `passkey.removed`).
///
/// # Errors
/// 404 for an unknown passkey or another person's; a database error.
pub async fn remove(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
    raw_id: &str,
) -> Result<(), ApiError> {
    if !plausible_id(raw_id) {
        return Err(ApiError::not_found("passkey"));
    }
    let now = store.now();
    let mut tx = store.begin().await?;
    let unlocks = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM console_unlocks WHERE passkey_id = $1 AND account_id = $2"
    )
    .bind(raw_id)
    .bind(account_id.as_str())
    .fetch_one(conn)
    .await)?;
    let name = on_tx!(&mut tx, |conn| {
        sqlx::query_scalar::<_, String>(
        "DELETE FROM passkeys WHERE id = $1 AND account_id = $2 AND user_id = $3 RETURNING name"
    )
    .bind(raw_id)
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .fetch_optional(conn)
    .await
    })?;
    let Some(name) = name else {
        return Err(ApiError::not_found("passkey"));
    };
    ledger::record(
        &mut tx,
        account_id,
        now,
        LedgerKind::PasskeyRemoved,
        raw_id,
        json!({ "name": name, "user": user_id, "unlocksEnded": unlocks }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(passkey_id = raw_id, unlocks, "passkey removed");
    Ok(())
}

/// A stored time as the wire's RFC 3339 text.
pub(crate) fn rfc3339(at: Millis) -> String {
    to_time(at).to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relying_party_is_a_host_name() {
        assert!(RelyingParty::for_origin("http://localhost:8080").is_ok());
        assert!(RelyingParty::for_origin("https://tether.example/app/").is_ok());
        for bad in [
            "http://127.0.0.1:8080",
            "http://[::1]:8080",
            "file:///tmp",
            "not a url",
            "",
        ] {
            let error = RelyingParty::for_origin(bad).err();
            assert_eq!(
                error.map(|error| error.code()),
                Some(Code::InvalidState),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_user_handle_is_the_user_id_or_derived_from_it() {
        let id = UserId::generate();
        assert_eq!(user_handle(&id).simple().to_string(), id.as_str());
        let odd = UserId::parse("not-a-uuid").unwrap_or_else(|_| UserId::generate());
        assert_eq!(user_handle(&odd), user_handle(&odd));
    }
}
