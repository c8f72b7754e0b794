//! Web Push: the browser subscriptions a person registers, and the messages their phone is
//! sent (RFC 8030 delivery, RFC 8291 encryption, RFC 8292 VAPID; the server does that part).
//!
//! A message is small and never holds a secret, a prompt, file text or a run's output: a
//! kind, a short title, the computer's name and a link into the site.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::SubscriptionId;

/// Longest endpoint URL accepted, in bytes.
pub const MAX_ENDPOINT_BYTES: usize = 2048;
/// Longest device label of a subscription, in characters.
pub const MAX_SUBSCRIPTION_NAME_CHARS: usize = 100;
/// Subscriptions one account may hold; a browser past them must drop one first.
pub const MAX_SUBSCRIPTIONS_PER_ACCOUNT: usize = 20;
/// Longest `title` of a message, in characters.
pub const MAX_TITLE_CHARS: usize = 120;
/// Longest [`PushMessage::detail`], in characters.
pub const MAX_DETAIL_CHARS: usize = 120;

/// `GET /api/push/key`: what a browser passes to `pushManager.subscribe` as
/// `applicationServerKey`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushKey {
    /// The server's VAPID public key: the uncompressed P-256 point (65 bytes), base64url
    /// without padding.
    pub public_key: String,
}

/// The keys of a browser's `PushSubscription`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubscriptionKeys {
    /// The browser's P-256 public key: an uncompressed point (65 bytes), base64url.
    pub p256dh: String,
    /// The browser's authentication secret (16 bytes), base64url.
    pub auth: String,
}

/// Which kinds of message a subscription wants. The keys are the message kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Kinds {
    /// A run asks its owner a decision.
    pub decision: bool,
    /// A job ended succeeded, failed, blocked or interrupted (never for a cancel).
    pub job_ended: bool,
    /// A computer with a running job stopped answering.
    pub device_offline: bool,
}

impl Kinds {
    /// Every kind on: what a new subscription wants unless told otherwise.
    pub const ALL: Kinds = Kinds {
        decision: true,
        job_ended: true,
        device_offline: true,
    };

    /// Whether `kind` is wanted.
    pub fn wants(self, kind: PushKind) -> bool {
        match kind {
            PushKind::Decision => self.decision,
            PushKind::JobEnded => self.job_ended,
            PushKind::DeviceOffline => self.device_offline,
        }
    }
}

/// A change of [`Kinds`]: a kind left out keeps its setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KindsChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ended: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_offline: Option<bool>,
}

/// `POST /api/push/subscriptions`: the browser's `PushSubscription.toJSON()`, with an
/// optional label and kinds. The same endpoint again for the same account updates it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeParams {
    /// The push service's URL for this browser: `https://` to a public address, at most
    /// [`MAX_ENDPOINT_BYTES`] bytes. A capability: whoever has it can message the browser.
    pub endpoint: String,
    pub keys: SubscriptionKeys,
    /// When the push service ends the subscription (ms since the epoch), if it says; not
    /// used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<f64>,
    /// A label for the device, such as "Phone".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Kinds to turn off (or on) from the start; left out, every kind is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<KindsChange>,
}

/// Answer of `POST /api/push/subscriptions`: 201 for a new subscription, 200 with the same
/// id for an endpoint the account had subscribed already.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subscribed {
    pub id: SubscriptionId,
}

/// `PATCH /api/push/subscriptions/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSubscriptionParams {
    pub kinds: KindsChange,
}

/// A subscription as its account sees it: never the endpoint's full URL or the keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub id: SubscriptionId,
    pub name: Option<String>,
    /// The push service: `scheme://host[:port]` of the endpoint.
    pub origin: String,
    pub created_at: DateTime<Utc>,
    /// The last time the push service accepted a message for it.
    pub last_success_at: Option<DateTime<Utc>>,
    pub kinds: Kinds,
}

/// What a message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PushKind {
    Decision,
    JobEnded,
    DeviceOffline,
}

impl PushKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PushKind::Decision => "decision",
            PushKind::JobEnded => "job_ended",
            PushKind::DeviceOffline => "device_offline",
        }
    }
}

/// The JSON a browser's service worker receives, decrypted: enough to show a notification
/// and open the right page, nothing more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushMessage {
    pub kind: PushKind,
    /// At most [`MAX_TITLE_CHARS`] characters: the question's summary, or the job's title
    /// and state, or the computer that went offline.
    pub title: String,
    /// The computer's name.
    pub computer: String,
    /// A path of the site to open: `/needs-me#<decision id>`, `/jobs/<id>`, `/computers`.
    pub url: String,
    /// Messages with the same tag replace each other on the phone.
    pub tag: String,
    /// For a question: what its notification's Deny (and, when the owner allows it, Allow)
    /// answers with, from the lock screen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<PushDecision>,
    /// For an ended job: the first line of the worker's report, at most
    /// [`MAX_DETAIL_CHARS`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// What a question's notification needs to answer it without the page: the decision, the
/// action the answer is for, and a key that answers only this decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushDecision {
    pub id: crate::ids::DecisionId,
    /// The action the answer binds to (as the decision's `actionHash`).
    pub action_hash: String,
    /// A random key (base64url, 32 bytes) for `POST /api/decisions/{id}/notification-answer`;
    /// the server keeps only its SHA-256, and only while the question is pending.
    pub answer_key: String,
    /// Whether the owner lets Allow answer from the notification; otherwise Allow opens the
    /// question's card.
    pub allow_from_notification: bool,
}

/// `POST /api/decisions/{id}/notification-answer`: an answer from a question's notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationAnswer {
    pub answer: crate::decisions::Answer,
    /// The `actionHash` the notification showed: an answer counts only for that action.
    pub action_hash: String,
    /// The notification's `answerKey`.
    pub answer_key: String,
}

/// `GET|PATCH /api/push/settings`: the account's choices about what notifications may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PushSettings {
    /// Allow answers from a question's notification without opening the page (off by
    /// default: Deny always answers from the notification, Allow opens the card).
    pub allow_from_notifications: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_the_messages_name_them() {
        let kinds = serde_json::to_value(Kinds::ALL).unwrap_or_default();
        for kind in [
            PushKind::Decision,
            PushKind::JobEnded,
            PushKind::DeviceOffline,
        ] {
            assert_eq!(kinds[kind.as_str()], true, "{kinds}");
            assert_eq!(
                serde_json::to_value(kind).unwrap_or_default(),
                kind.as_str()
            );
        }
    }
}
