//! Console sessions: the owner's browser and one of their computers, joined through the
//! server, which passes sealed messages along and reads none of them (docs/CONSOLE.md).
//!
//! A session starts from the browser ([`start`]): the browser session must hold a live
//! console unlock, the computer must be the caller's own, paired, and have its console on.
//! The browser then sends the channel's `enc`; [`invite`] keeps a single-use ticket for the
//! computer (30 seconds) and sends it `console.open`. The computer joins at its own route
//! ([`join`], which takes the ticket: another device, a second join or a late one is a 404).
//! From then on the two ends exchange messages through two [pipes](crate::relay::pipes::Pipe) named
//! after the session, so the two WebSockets may be held by different replicas.
//!
//! The ledger records that a session was joined and each terminal command's program and
//! folder label as the computer reports them ([`record_command`]) — never arguments, output
//! or file text, which the server never has in plaintext.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tether_protocol::capabilities::SealKey;
use tether_protocol::console::MAX_PROGRAM_CHARS;
use tether_protocol::frames::ServerFrame;
use tether_protocol::{AccountId, Code, DeviceId, SessionId};
use tether_seal::channel::ENC_BYTES;

use crate::accounts::console_unlocks;
use crate::config::Config;
use crate::credentials;
use crate::devices::{self, DeviceIdentity};
use crate::error::ApiError;
use crate::relay::Hub;
use crate::store::ledger::{self, LedgerKind};
use crate::store::Store;

/// How long the computer has to join after `console.open` was sent.
pub const JOIN_WITHIN: Duration = Duration::from_secs(30);
/// The longest folder label the ledger keeps, in characters.
const MAX_FOLDER_CHARS: usize = 100;

/// A session the browser started: what it seals its channel to.
#[derive(Debug, Clone)]
pub struct Started {
    pub session_id: String,
    pub account_id: AccountId,
    pub device_id: DeviceId,
    pub browser_session: SessionId,
    pub seal_key: SealKey,
}

/// What the computer's join ticket names.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Joined {
    pub session_id: String,
    pub account_id: AccountId,
    pub device_id: DeviceId,
}

/// The pipe the browser's end reads.
pub fn browser_pipe(session_id: &str) -> String {
    format!("{session_id}:b")
}

/// The pipe the computer's end reads.
pub fn device_pipe(session_id: &str) -> String {
    format!("{session_id}:d")
}

fn ticket_key(session_id: &str, device_id: &DeviceId) -> String {
    format!("console:{session_id}:{device_id}")
}

/// Starts a session of the owner at `browser_session` with their computer `device_id`.
///
/// # Errors
/// 401 `console_locked` without a live unlock; 404 for a computer that is not the caller's
/// (or revoked); 409 `console_off` when the computer's console is off (or it has none);
/// 409 `invalid_state` when its seal key is not pinned or changed.
pub async fn start(
    store: &Store,
    config: &Config,
    account_id: &AccountId,
    browser_session: &SessionId,
    device_id: &DeviceId,
) -> Result<Started, ApiError> {
    // Another account's computer (a space member's too) is a 404 before anything else.
    let device = devices::get(store, account_id, device_id, config).await?;
    if device.revoked_at.is_some() {
        return Err(ApiError::not_found("device"));
    }
    console_unlocks::check(store, browser_session, account_id).await?;
    let console_on = device
        .capabilities
        .as_ref()
        .and_then(|capabilities| capabilities.console)
        .unwrap_or(false);
    if !console_on {
        return Err(ApiError::new(
            Code::ConsoleOff,
            "This computer's console is off; its owner turns it on there with \
             `tether-agent console on`.",
        ));
    }
    let seal_key = match (device.seal_key, device.seal_key_mismatch) {
        (Some(key), false) => key,
        _ => {
            return Err(ApiError::new(
                Code::InvalidState,
                "This computer's seal key is not pinned (or changed); pair it again.",
            ))
        }
    };
    Ok(Started {
        session_id: credentials::random_token("con_"),
        account_id: account_id.clone(),
        device_id: device_id.clone(),
        browser_session: browser_session.clone(),
        seal_key,
    })
}

/// Checks the browser's `enc`, keeps the computer's join ticket and sends it
/// `console.open`.
///
/// # Errors
/// 422 `invalid_field` for an `enc` that is not an uncompressed P-256 point in base64url;
/// 409 `device_offline` when the computer has no open event stream; 503 `unavailable`.
pub async fn invite(hub: &Hub, started: &Started, enc: &str) -> Result<(), ApiError> {
    let decoded = URL_SAFE_NO_PAD.decode(enc).unwrap_or_default();
    if decoded.len() != ENC_BYTES || decoded.first() != Some(&0x04) {
        return Err(ApiError::new(
            Code::InvalidField,
            "enc must be an uncompressed P-256 point (65 bytes) in base64url.",
        ));
    }
    let joined = Joined {
        session_id: started.session_id.clone(),
        account_id: started.account_id.clone(),
        device_id: started.device_id.clone(),
    };
    hub.put_ticket(
        &ticket_key(&started.session_id, &started.device_id),
        serde_json::to_string(&joined)?,
        JOIN_WITHIN,
    )
    .await?;
    let frame = ServerFrame::ConsoleOpen {
        session_id: started.session_id.clone(),
        enc: enc.to_owned(),
    };
    if hub.send(&started.device_id, &frame).await? == 0 {
        return Err(ApiError::new(
            Code::DeviceOffline,
            "The computer is not connected; try again when it is online.",
        ));
    }
    Ok(())
}

/// The computer joins session `session_id`: takes its ticket and records the session in
/// the ledger.
///
/// # Errors
/// 404 for an unknown, taken or expired session, or one of another device.
pub async fn join(
    store: &Store,
    hub: &Hub,
    device: &DeviceIdentity,
    session_id: &str,
) -> Result<Joined, ApiError> {
    let unknown = || ApiError::not_found("console session");
    if session_id.is_empty() || session_id.len() > 80 {
        return Err(unknown());
    }
    let ticket = hub
        .take_ticket(&ticket_key(session_id, &device.device_id))
        .await?
        .ok_or_else(unknown)?;
    let joined: Joined = serde_json::from_str(&ticket).map_err(|_| unknown())?;
    if joined.device_id != device.device_id || joined.account_id != device.account_id {
        return Err(unknown());
    }
    let mut tx = store.begin().await?;
    ledger::record(
        &mut tx,
        &joined.account_id,
        store.now(),
        LedgerKind::ConsoleOpened,
        joined.device_id.as_str(),
        json!({"session": joined.session_id}),
    )
    .await?;
    tx.commit().await?;
    Ok(joined)
}

/// Records a terminal command the computer is about to run: its program and folder label.
///
/// # Errors
/// 422 `invalid_field` for a program or label that is empty, too long or not plain text.
pub async fn record_command(
    store: &Store,
    joined: &Joined,
    program: &str,
    folder: &str,
) -> Result<(), ApiError> {
    let plain = |text: &str, most: usize| {
        !text.is_empty()
            && text.chars().count() <= most
            && tether_protocol::text::check(text, tether_protocol::text::TextKind::Name).is_ok()
    };
    if !plain(program, MAX_PROGRAM_CHARS) || !plain(folder, MAX_FOLDER_CHARS) {
        return Err(ApiError::new(
            Code::InvalidField,
            "A console command names a program (1 to 200 characters) and a folder label.",
        ));
    }
    let mut tx = store.begin().await?;
    ledger::record(
        &mut tx,
        &joined.account_id,
        store.now(),
        LedgerKind::ConsoleCommand,
        joined.device_id.as_str(),
        json!({"session": joined.session_id, "program": program, "folder": folder}),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
