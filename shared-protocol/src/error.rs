//! The error body and the table of error codes.
//!
//! Every error the server answers is `{"error": {"code", "message"}}`. The code is stable and
//! machine-readable; the message is a human sentence that names the field when input is bad.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The code and sentence inside an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            error: ErrorDetail {
                code: code.name().to_owned(),
                message: message.into(),
            },
        }
    }
}

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = ($name:literal, $status:literal);)*) => {
        /// Every error code of protocol v1, with its HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($(#[$doc])* $variant,)*
        }

        impl Code {
            /// Every code, for tests and documentation.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The stable snake_case name sent as `error.code`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Code::$variant => $name,)*
                }
            }

            /// The HTTP status this code is answered with.
            pub fn status(self) -> u16 {
                match self {
                    $(Code::$variant => $status,)*
                }
            }

            /// The code named `name`, if it is one of ours.
            pub fn from_name(name: &str) -> Option<Code> {
                match name {
                    $($name => Some(Code::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// The body is not the JSON the route takes (malformed, wrong type, missing field).
    InvalidRequest = ("invalid_request", 400);
    /// A field parsed but its value is not acceptable; the message names the field.
    InvalidField = ("invalid_field", 422);
    /// The body is larger than the route accepts.
    PayloadTooLarge = ("payload_too_large", 413);
    /// The upload's content type does not match its declared kind.
    UnsupportedMediaType = ("unsupported_media_type", 415);
    /// No valid session, API token or device token.
    Unauthorized = ("unauthorized", 401);
    /// Wrong email or password.
    InvalidCredentials = ("invalid_credentials", 401);
    /// The device was revoked; its token is dead.
    Revoked = ("revoked", 401);
    /// Signed in, but not allowed (platform-admin routes).
    Forbidden = ("forbidden", 403);
    /// A cookie-authenticated change without the page's CSRF token.
    CsrfRejected = ("csrf_rejected", 403);
    /// No such route or object, or one that belongs to another account.
    NotFound = ("not_found", 404);
    /// The pairing code is unknown or expired.
    UnknownCode = ("unknown_code", 404);
    /// The method is not served on this path.
    MethodNotAllowed = ("method_not_allowed", 405);
    /// The request body did not arrive within the server's deadline; the connection is closed.
    RequestTimeout = ("request_timeout", 408);
    /// An account with this email exists.
    EmailTaken = ("email_taken", 409);
    /// The lease is wrong, old or expired; stop this run's side effects.
    StaleLease = ("stale_lease", 409);
    /// The decision was answered already; the first answer stands.
    AlreadyAnswered = ("already_answered", 409);
    /// The object is in a state that does not allow this (for example cancelling a finished job).
    InvalidState = ("invalid_state", 409);
    /// The job ended: what it held for its run (its attachments) is no longer handed out.
    JobEnded = ("job_ended", 410);
    /// The computer keeps its evidence (`evidence off` there): a held file can be previewed
    /// and discarded, never released.
    EvidenceKept = ("evidence_kept", 409);
    /// Nobody waits for this upload any more (answered already, or the asker gave up).
    UploadGone = ("upload_gone", 410);
    /// The job is queued, running or waiting: what it keeps on its computer is in use.
    JobActive = ("job_active", 409);
    /// The job's engine keeps no session (a recipe): there is nothing to delete.
    NoSession = ("no_session", 409);
    /// The computer answered that it could not do what was asked; the message says why.
    DeviceRefused = ("device_refused", 409);
    /// The console of this browser session is locked (never unlocked, idle for 30 minutes,
    /// 8 hours old, locked, or its passkey removed): unlock with a passkey again.
    ConsoleLocked = ("console_locked", 401);
    /// The computer's owner turned its console off (`tether-agent console off`).
    ConsoleOff = ("console_off", 409);
    /// A passkey ceremony failed: an unknown or used ceremony, another origin, another
    /// challenge, a replayed or unverified assertion, or an unknown passkey.
    PasskeyRefused = ("passkey_refused", 400);
    /// The invitation was used already or expired: ask for a new link.
    InvitationGone = ("invitation_gone", 410);
    /// The account is in this space already.
    AlreadyMember = ("already_member", 409);
    /// A space keeps at least one owner: make someone else owner first.
    LastOwner = ("last_owner", 409);
    /// The device is not connected.
    DeviceOffline = ("device_offline", 409);
    /// The device does not publish this engine.
    UnknownEngine = ("unknown_engine", 422);
    /// The device does not share a folder with this label.
    UnknownFolder = ("unknown_folder", 422);
    /// The agent speaks a protocol version the server does not.
    UnsupportedProtocol = ("unsupported_protocol", 400);
    /// Pairing: nobody approved the code yet; poll again after `interval`.
    AuthorizationPending = ("authorization_pending", 400);
    /// Pairing: polled faster than `interval`; wait 5 seconds longer from now on.
    SlowDown = ("slow_down", 400);
    /// Pairing: the code expired before it was approved.
    ExpiredToken = ("expired_token", 400);
    /// Pairing: the person refused, or the device code was already redeemed.
    AccessDenied = ("access_denied", 400);
    /// Too many attempts; try again later.
    TooManyAttempts = ("too_many_attempts", 429);
    /// Over a rate limit; the answer's `Retry-After` says when to try again.
    RateLimited = ("rate_limited", 429);
    /// The path is refused on the device (secrets, `.git` internals, links leading out).
    PathRefused = ("path_refused", 403);
    /// A run may not be resumed (limit reached, too old, or stopped by its owner).
    ResumeRefused = ("resume_refused", 409);
    /// The device did not answer a relayed request in time.
    DeviceTimeout = ("device_timeout", 504);
    /// A dependency (the database) is unavailable; retry.
    Unavailable = ("unavailable", 503);
    /// A fault on the server's side.
    Internal = ("internal", 500);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            let name = code.name();
            assert!(seen.insert(name), "duplicate {name}");
            assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
            assert_eq!(Code::from_name(name), Some(*code));
            assert!((400..600).contains(&code.status()));
        }
    }

    #[test]
    fn body_has_the_documented_shape() {
        let body = ErrorBody::new(Code::StaleLease, "The lease is stale.");
        let json = serde_json::to_value(&body).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({"error": {"code": "stale_lease", "message": "The lease is stale."}})
        );
    }
}
