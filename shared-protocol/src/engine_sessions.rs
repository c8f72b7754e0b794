//! Deleting a job's engine session: the conversation a coding agent (an `acp` engine) had
//! for a job, which its computer keeps so a follow-up can carry it on.
//!
//! The owner asks with `DELETE /api/jobs/{id}/session` once the job stopped; the server
//! sends the job's computer a `session.delete` frame and waits; the computer deletes what
//! it keeps of that session and answers at `POST /api/devices/self/session-deletions/{id}`
//! with a [`SessionDeletion`]. Only `deleted: true` is reported to the owner as done.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Longest `error` a computer may give, in characters.
pub const MAX_DELETION_ERROR_CHARS: usize = 500;

/// A computer's answer to a `session.delete` frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionDeletion {
    /// `true` only when nothing the computer kept of the session is left: no follow-up can
    /// load it again. Also `true` when the computer kept nothing for the job.
    pub deleted: bool,
    /// With `deleted: false`: why, a sentence for the owner (at most
    /// [`MAX_DELETION_ERROR_CHARS`] characters). Never with `deleted: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_strict() {
        let done: Result<SessionDeletion, _> = serde_json::from_str(r#"{"deleted":true}"#);
        assert_eq!(
            done.ok(),
            Some(SessionDeletion {
                deleted: true,
                error: None
            })
        );
        let extra: Result<SessionDeletion, _> =
            serde_json::from_str(r#"{"deleted":true,"engine":"claude"}"#);
        assert!(extra.is_err());
        let missing: Result<SessionDeletion, _> = serde_json::from_str(r#"{"error":"x"}"#);
        assert!(missing.is_err());
    }
}
