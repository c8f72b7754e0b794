//! The owner's console: passkeys, the unlock that opens it, and the frames of a console
//! session (a terminal, the Code tab, a running job's Watch), which cross the server only as
//! ciphertext.
//!
//! # Layers
//! 1. **Passkeys and unlock** (`/api/account/passkeys…`, `/api/console/unlock…`): WebAuthn
//!    ceremonies whose options and credentials travel as the browser's own JSON
//!    (`PublicKeyCredentialCreationOptionsJSON`, `PublicKeyCredential.toJSON()`), opaque here.
//!    An unlock is bound to one browser session.
//! 2. **The relay** (`GET /api/devices/{id}/console`, a WebSocket from the browser, and
//!    `GET /api/devices/self/console/{sessionId}`, a WebSocket from the device): text frames
//!    of [`BrowserToServer`], [`ServerToBrowser`], [`DeviceToServer`] and
//!    [`ServerToDevice`]. The server pairs the two ends and passes [`Sealed`] messages along
//!    without reading them.
//! 3. **The channel**: each [`Sealed`] is a numbered-channel message of `tether-seal`
//!    (channel id = the session id's UTF-8 bytes) whose plaintext is the JSON of a
//!    [`ConsoleRequest`] (browser to device) or a [`ConsoleReply`] (device to browser). Both
//!    ends take numbers strictly one after the other: a gap (a dropped message), a repeat or
//!    a step back ends the session.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::capabilities::SealKey;
use crate::files::TreeEntry;
use crate::ids::JobId;

/// A console unlock ends after this long without console activity.
pub const UNLOCK_IDLE_SECONDS: u64 = 30 * 60;
/// A console unlock ends this long after the passkey unlocked it, whatever happens.
pub const UNLOCK_MAX_SECONDS: u64 = 8 * 60 * 60;
/// The longest passkey name, in characters.
pub const MAX_PASSKEY_NAME_CHARS: usize = 60;
/// Most passkeys one person registers.
pub const MAX_PASSKEYS: usize = 10;
/// The longest line the terminal takes, in bytes.
pub const MAX_LINE_BYTES: usize = 4096;
/// The longest program name a terminal command's ledger entry carries, in characters.
pub const MAX_PROGRAM_CHARS: usize = 200;
/// The largest file text the Code tab saves, in bytes.
pub const MAX_SAVE_BYTES: usize = 1024 * 1024;
/// The largest [`Sealed`] `ct` the relay passes, in base64url characters (a file of
/// [`MAX_SAVE_BYTES`] in JSON, with room).
pub const MAX_SEALED_CHARS: usize = 3 * 1024 * 1024;

/// Answer of `POST /api/account/passkeys/registrations` and `POST /api/console/unlock/challenges`:
/// the options to hand to `navigator.credentials.create()` / `.get()` (as their JSON form),
/// and the ceremony they belong to, valid for five minutes and once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CeremonyStarted {
    pub ceremony_id: String,
    /// `{"publicKey": {...}}` as WebAuthn's JSON serialization of the options.
    #[schema(value_type = Object)]
    pub options: serde_json::Value,
}

/// Body of `POST /api/account/passkeys`: the new credential for a registration ceremony.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PasskeyRegistration {
    pub ceremony_id: String,
    /// What the person calls this passkey (1 to [`MAX_PASSKEY_NAME_CHARS`] characters).
    pub name: String,
    /// `PublicKeyCredential.toJSON()` of the created credential.
    #[schema(value_type = Object)]
    pub credential: serde_json::Value,
}

/// One registered passkey, as its person sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Passkey {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
}

/// Answer of `GET /api/account/passkeys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasskeyList {
    pub passkeys: Vec<Passkey>,
}

/// Body of `POST /api/console/unlock`: the assertion for an unlock ceremony.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnlockAssertion {
    pub ceremony_id: String,
    /// `PublicKeyCredential.toJSON()` of the assertion.
    #[schema(value_type = Object)]
    pub credential: serde_json::Value,
}

/// Answer of `GET /api/console` and of an unlock: whether this browser session's console is
/// open, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleStatus {
    pub unlocked: bool,
    /// When it locks if nothing happens (RFC 3339); absent while locked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_until: Option<String>,
    /// When it locks whatever happens (RFC 3339); absent while locked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Whether this person has a passkey to unlock with.
    pub has_passkey: bool,
}

/// One numbered-channel message as the relay carries it: `{"seq": n, "ct": base64url}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Sealed {
    pub seq: u64,
    pub ct: String,
}

/// A text frame the browser sends on its console WebSocket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum BrowserToServer {
    /// Start the channel: HPKE `enc` (65 bytes, base64url) for the device's pinned seal key.
    /// Sent once, first.
    Open { enc: String },
    /// A sealed [`ConsoleRequest`].
    Message { seq: u64, ct: String },
}

/// A text frame the server sends on the browser's console WebSocket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerToBrowser {
    /// The session exists: seal `enc` to this key, with `sessionId` as the channel id.
    #[serde(rename_all = "camelCase")]
    Ready {
        session_id: String,
        seal_key: SealKey,
    },
    /// The device joined the session; messages flow.
    Attached,
    /// A sealed [`ConsoleReply`].
    Message { seq: u64, ct: String },
    /// The session ended; `code` is an error code (`console_locked`, `console_off`,
    /// `device_offline`, `device_timeout`, …) or `closed` when an end hung up.
    Closed { code: String, message: String },
}

/// A text frame the device sends on its console WebSocket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum DeviceToServer {
    /// A sealed [`ConsoleReply`].
    Message { seq: u64, ct: String },
    /// For the account's ledger: a terminal command's program (its first word, at most
    /// [`MAX_PROGRAM_CHARS`] characters) and the folder label it ran in. Never its arguments or its output.
    Command { program: String, folder: String },
    /// The device will not serve this session (`console_off`, a bad `enc`, …).
    Refuse { code: String, message: String },
}

/// A text frame the server sends on the device's console WebSocket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerToDevice {
    /// A sealed [`ConsoleRequest`].
    Message { seq: u64, ct: String },
    /// The browser left, or the unlock ended: stop everything of this session.
    Closed { code: String },
}

/// What the browser asks of the computer, inside the channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ConsoleRequest {
    /// The folder labels this computer shares.
    // A struct variant, so an unknown field is refused as in every other request.
    Folders {},
    /// Run one line in a shared folder. `confirmed` repeats a line the computer asked to
    /// confirm (it is judged again).
    #[serde(rename_all = "camelCase")]
    Run {
        id: u32,
        folder: String,
        line: String,
        #[serde(default)]
        confirmed: bool,
        cols: u16,
        rows: u16,
    },
    /// Ctrl-C: stop command `id` and every process it started.
    Interrupt { id: u32 },
    /// List a directory of a shared folder (`path` relative, `""` the folder).
    List { folder: String, path: String },
    /// Open a text file of a shared folder.
    Read { folder: String, path: String },
    /// Save a file: `base_hash` is the hash of the text it was opened with (empty for a new
    /// file).
    #[serde(rename_all = "camelCase")]
    Write {
        folder: String,
        path: String,
        base_hash: String,
        text: String,
    },
    /// Watch a running job's terminal output (read-only).
    #[serde(rename_all = "camelCase")]
    Watch { job_id: JobId },
}

/// What the computer answers, inside the channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConsoleReply {
    Folders {
        folders: Vec<String>,
    },
    /// Terminal bytes of command `id`, base64 (standard alphabet).
    Output {
        id: u32,
        data: String,
    },
    /// Command `id` is destructive: `reason` says why; send it again with `confirmed`.
    Confirm {
        id: u32,
        reason: String,
    },
    /// Command `id` was not started: `reason` says why.
    Refused {
        id: u32,
        reason: String,
    },
    /// Command `id` ended.
    #[serde(rename_all = "camelCase")]
    Exit {
        id: u32,
        code: Option<i32>,
        /// Stopped by Ctrl-C.
        interrupted: bool,
        /// Stopped at the time limit.
        timed_out: bool,
        /// Output past the limit was dropped (and the command stopped).
        truncated: bool,
    },
    Listing {
        folder: String,
        path: String,
        entries: Vec<TreeEntry>,
    },
    /// A file's text. `hash` is the SHA-256 (hex) of its bytes on disk; `redacted` text may
    /// not be saved back; `editable` is false for a redacted, cut or binary file.
    File {
        folder: String,
        path: String,
        text: Option<String>,
        hash: String,
        binary: bool,
        truncated: bool,
        redacted: bool,
        editable: bool,
    },
    /// The save was written; `hash` is the new text's.
    Saved {
        folder: String,
        path: String,
        hash: String,
    },
    /// The file changed since it was opened (its hash now is `hash`): nothing was written.
    Conflict {
        folder: String,
        path: String,
        hash: String,
    },
    /// Terminal bytes of a watched job's commands, base64.
    #[serde(rename_all = "camelCase")]
    WatchOutput {
        job_id: JobId,
        data: String,
    },
    /// The watched job is not running here (or stopped running).
    #[serde(rename_all = "camelCase")]
    WatchEnded {
        job_id: JobId,
        reason: String,
    },
    /// A request was refused: the path, the folder, the size, the console being off.
    Error {
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_frames_have_their_documented_shapes() {
        let open: BrowserToServer = serde_json::from_str(r#"{"type":"open","enc":"BAAA"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(open, BrowserToServer::Open { enc: "BAAA".into() });
        assert!(serde_json::from_str::<BrowserToServer>(
            r#"{"type":"message","seq":1,"ct":"x","extra":1}"#
        )
        .is_err());
        let closed = ServerToBrowser::Closed {
            code: "console_locked".into(),
            message: "Locked.".into(),
        };
        assert_eq!(
            serde_json::to_value(&closed).unwrap_or_default(),
            serde_json::json!({"type": "closed", "code": "console_locked", "message": "Locked."})
        );
    }

    #[test]
    fn console_requests_refuse_what_they_do_not_know() {
        let run: ConsoleRequest = serde_json::from_str(
            r#"{"type":"run","id":1,"folder":"work","line":"ls","cols":80,"rows":24}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            run,
            ConsoleRequest::Run {
                confirmed: false,
                ..
            }
        ));
        assert!(serde_json::from_str::<ConsoleRequest>(r#"{"type":"shell"}"#).is_err());
        assert!(
            serde_json::from_str::<ConsoleRequest>(r#"{"type":"folders","path":"/"}"#).is_err()
        );
    }
}
