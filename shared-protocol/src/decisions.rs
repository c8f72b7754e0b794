//! Decisions: questions a run asks its owner.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::{DecisionId, DeviceId, JobId};

/// Where a decision is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionState {
    Pending,
    Answered,
    Expired,
    Withdrawn,
}

/// The answer to a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Allow,
    Deny,
}

/// How far an allow reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Once,
    Session,
}

impl DecisionState {
    pub const ALL: [DecisionState; 4] = [
        DecisionState::Pending,
        DecisionState::Answered,
        DecisionState::Expired,
        DecisionState::Withdrawn,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionState::Pending => "pending",
            DecisionState::Answered => "answered",
            DecisionState::Expired => "expired",
            DecisionState::Withdrawn => "withdrawn",
        }
    }

    pub fn parse(raw: &str) -> Option<DecisionState> {
        DecisionState::ALL
            .into_iter()
            .find(|state| state.as_str() == raw)
    }
}

impl Answer {
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Allow => "allow",
            Answer::Deny => "deny",
        }
    }

    pub fn parse(raw: &str) -> Option<Answer> {
        [Answer::Allow, Answer::Deny]
            .into_iter()
            .find(|answer| answer.as_str() == raw)
    }
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
        }
    }

    pub fn parse(raw: &str) -> Option<Scope> {
        [Scope::Once, Scope::Session]
            .into_iter()
            .find(|scope| scope.as_str() == raw)
    }
}

/// Where an answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnsweredBy {
    /// The owner answered on the web (or the phone).
    Web,
    /// The owner answered on the computer itself (`tether-agent decisions`).
    Computer,
    /// The owner answered from the question's notification, without opening the page.
    Notification,
}

impl AnsweredBy {
    pub fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Web => "web",
            AnsweredBy::Computer => "computer",
            AnsweredBy::Notification => "notification",
        }
    }

    pub fn parse(raw: &str) -> Option<AnsweredBy> {
        [
            AnsweredBy::Web,
            AnsweredBy::Computer,
            AnsweredBy::Notification,
        ]
        .into_iter()
        .find(|by| by.as_str() == raw)
    }
}

/// The kinds of question a run may ask (`AskRequest::kind`).
/// `merge` asks to merge a pull request the run opened (git delivery).
pub const KINDS: [&str; 7] = [
    "command", "write", "read", "network", "tool", "folder", "merge",
];
/// Longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 500;
/// Largest action, as compact JSON, in bytes.
pub const MAX_ACTION_BYTES: usize = 16 * 1024;
/// Longest a decision may stay open.
pub const MAX_EXPIRES_IN_SECS: u32 = 86_400;
/// Largest preview of a proposed change, in bytes: enough to judge an edit, small enough
/// that file text never makes a question heavy.
pub const MAX_PREVIEW_BYTES: usize = 32 * 1024;
/// Most lines a preview holds (its last line may say how much was left out).
pub const MAX_PREVIEW_LINES: usize = 400;

/// A decision as the web sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub id: DecisionId,
    pub job_id: JobId,
    pub device_id: DeviceId,
    pub kind: String,
    pub question: String,
    pub action: serde_json::Value,
    pub state: DecisionState,
    pub answer: Option<Answer>,
    pub scope: Option<Scope>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Who answered; `None` until answered (and for expired or withdrawn decisions).
    #[serde(default)]
    pub answered_by: Option<AnsweredBy>,
    /// When it left `pending` (answered, expired or withdrawn).
    #[serde(default)]
    pub answered_at: Option<DateTime<Utc>>,
    /// Whether the computer takes answers from the web (`acceptWebApprovals` in its last
    /// report); when not, the owner answers on the computer.
    #[serde(default)]
    pub web_answers: bool,
    /// The title of the job that asks.
    #[serde(default)]
    pub job_title: String,
    /// The name of the computer the job runs on.
    #[serde(default)]
    pub device_name: String,
    /// A file write's proposed change as a unified diff, redacted on the computer; only
    /// while the decision is pending (the server drops it once it is settled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

/// `POST /api/devices/self/jobs/{id}/ask`: a run asks its owner before an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AskRequest {
    /// What is asked about: one of [`KINDS`].
    pub kind: String,
    /// One human sentence, shown on "Needs me".
    pub question: String,
    /// The exact action (command and folder, or file and folder), shown as asked.
    pub action: serde_json::Value,
    /// SHA-256 (lowercase hex) of the action's canonical form; an answer counts only for it.
    pub action_hash: String,
    /// How long the device waits; past it the decision expires and the action is not taken.
    pub expires_in_secs: u32,
    /// For a file write: the proposed change as a unified diff of the file's redacted text
    /// now and the redacted text proposed, at most [`MAX_PREVIEW_BYTES`] and
    /// [`MAX_PREVIEW_LINES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

/// The answer to [`AskRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AskResponse {
    pub decision_id: DecisionId,
}

/// `GET /api/devices/self/decisions/{id}`: the device reads where its decision is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceDecision {
    pub id: DecisionId,
    pub state: DecisionState,
    pub answer: Option<Answer>,
    pub scope: Option<Scope>,
    pub action_hash: String,
}

/// Why the device closes a decision itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The owner answered on the computer (`tether-agent decisions allow|deny`).
    AnsweredLocally,
    /// Nobody answered in time; the action was not taken.
    Expired,
    /// The run no longer needs the answer (it ended or was cancelled).
    Withdrawn,
}

/// `POST /api/devices/self/decisions/{id}/close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloseRequest {
    pub reason: CloseReason,
    /// Only with `answered_locally`.
    #[serde(default)]
    pub answer: Option<Answer>,
    /// Only with `answered_locally`; `session` only with `allow`.
    #[serde(default)]
    pub scope: Option<Scope>,
}

/// `POST /api/decisions/{id}/answer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnswerRequest {
    pub answer: Answer,
    pub scope: Scope,
}

/// What changed in an account's decisions, in a [`DecisionsEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionChange {
    Asked,
    Answered,
    Expired,
    Withdrawn,
    /// Sent when the stream opens, and when a periodic re-read found a change that no
    /// message announced.
    Sync,
}

/// The data of a `decisions` event on `GET /api/decisions/events` (server-sent events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionsEvent {
    pub change: DecisionChange,
    /// The decision that changed, when one did.
    pub decision_id: Option<DecisionId>,
    /// How many of the account's decisions are pending now.
    pub pending: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_answers_and_scopes_round_trip() {
        for state in DecisionState::ALL {
            assert_eq!(DecisionState::parse(state.as_str()), Some(state));
            let json = serde_json::to_value(state).unwrap_or_default();
            assert_eq!(json, state.as_str());
        }
        assert_eq!(Answer::parse("allow"), Some(Answer::Allow));
        assert_eq!(Scope::parse("session"), Some(Scope::Session));
        assert_eq!(AnsweredBy::parse("computer"), Some(AnsweredBy::Computer));
        assert_eq!(Answer::parse("maybe"), None);
    }

    #[test]
    fn close_request_takes_only_a_reason() {
        let close: Result<CloseRequest, _> = serde_json::from_str(r#"{"reason":"withdrawn"}"#);
        assert_eq!(
            close.ok(),
            Some(CloseRequest {
                reason: CloseReason::Withdrawn,
                answer: None,
                scope: None
            })
        );
    }
}
