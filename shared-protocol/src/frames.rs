//! Frames of the device event stream (`GET /api/devices/self/events`).
//!
//! Frames only wake the device; persisted job and lease state is authoritative, so a lost
//! frame costs latency, never correctness.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::changes::DiffAgainst;
use crate::evidence::EvidenceAction;
use crate::files::FileOp;
use crate::ids::{DecisionId, DeliveryId, JobId};

/// A frame the server sends to a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ServerFrame {
    /// Work may be queued: claim.
    Wake,
    /// The owner asked to stop this run.
    #[serde(rename = "job.cancel", rename_all = "camelCase")]
    JobCancel { job_id: JobId },
    /// A decision of this device was answered on the web.
    #[serde(rename = "decision.answered", rename_all = "camelCase")]
    DecisionAnswered { decision_id: DecisionId },
    /// The web wants a listing or a file of a job's folder; answer at
    /// `POST /api/devices/self/file-requests/{id}` with a [`crate::files::FileAnswer`].
    #[serde(rename = "file.request", rename_all = "camelCase")]
    FileRequest {
        id: String,
        job_id: JobId,
        op: FileOp,
        /// Relative to the job's folder; `""` is the folder itself.
        path: String,
        /// How long the server waits for the answer, in milliseconds: the device gives up
        /// on the request (and stops its work) before then. Absent from older servers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        /// For a diff: what the run's start is compared with; absent means the run's end
        /// (the folder now while the run goes on).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        against: Option<DiffAgainst>,
    },
    /// A sealed secret for this device; answer at
    /// `POST /api/devices/self/secret-deliveries/{id}`.
    #[serde(rename = "secret.save", rename_all = "camelCase")]
    SecretSave {
        id: DeliveryId,
        name: String,
        sealed: serde_json::Value,
    },
    /// The owner asked something of a held evidence file: answer at
    /// `POST /api/devices/self/evidence-uploads/{uploadId}` (the bytes for `preview` and
    /// `release`, an empty body once `discard` is done, or a refusal).
    #[serde(rename = "evidence.request", rename_all = "camelCase")]
    EvidenceRequest {
        /// This request's id.
        id: String,
        job_id: JobId,
        evidence_id: String,
        action: EvidenceAction,
        /// Single use, bound to this device, the job's account and this request.
        upload_id: String,
        /// How long the server waits for the answer, in milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// The owner asked to delete the engine session a stopped job of this computer worked
    /// in: delete what this computer keeps of it and answer at
    /// `POST /api/devices/self/session-deletions/{id}` with a
    /// [`crate::engine_sessions::SessionDeletion`].
    #[serde(rename = "session.delete", rename_all = "camelCase")]
    SessionDelete {
        /// This request's id: single use, bound to this device and the job.
        id: String,
        job_id: JobId,
        /// How long the server waits for the answer, in milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// The owner opened a console session with this computer: join it at
    /// `GET /api/devices/self/console/{sessionId}` (or refuse there).
    #[serde(rename = "console.open", rename_all = "camelCase")]
    ConsoleOpen {
        session_id: String,
        /// HPKE `enc` of the session's channel, base64url.
        enc: String,
    },
    /// The device was revoked: forget the token.
    #[serde(rename = "device.revoked")]
    DeviceRevoked,
    /// Keep-alive.
    Ping,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_tagged_by_type() {
        let frame = ServerFrame::JobCancel {
            job_id: JobId::generate(),
        };
        let json = serde_json::to_value(&frame).unwrap_or_default();
        assert_eq!(json["type"], "job.cancel");
        assert!(json["jobId"].is_string());
        let wake: Result<ServerFrame, _> = serde_json::from_str(r#"{"type":"wake"}"#);
        assert_eq!(wake.ok(), Some(ServerFrame::Wake));
    }

    #[test]
    fn a_session_delete_names_its_job() {
        let job_id = JobId::generate();
        let frame = ServerFrame::SessionDelete {
            id: "sdl_1".into(),
            job_id: job_id.clone(),
            timeout_ms: Some(60_000),
        };
        let json = serde_json::to_value(&frame).unwrap_or_default();
        assert_eq!(json["type"], "session.delete");
        assert_eq!(json["jobId"], job_id.as_str());
        assert_eq!(json["timeoutMs"], 60_000);
        let back: Result<ServerFrame, _> = serde_json::from_value(json);
        assert_eq!(back.ok(), Some(frame));
    }

    #[test]
    fn a_file_request_carries_its_timeout_when_known() {
        let frame = |timeout_ms| ServerFrame::FileRequest {
            id: "frq_1".into(),
            job_id: JobId::generate(),
            op: FileOp::File,
            path: "README.md".into(),
            timeout_ms,
            against: None,
        };
        let json = serde_json::to_value(frame(Some(10_000))).unwrap_or_default();
        assert_eq!(json["timeoutMs"], 10_000);
        let json = serde_json::to_value(frame(None)).unwrap_or_default();
        assert!(json.get("timeoutMs").is_none(), "{json}");
        // A frame from a server that does not send it still parses.
        let old = r#"{"type":"file.request","id":"r","jobId":"job1","op":"tree","path":""}"#;
        let parsed: Result<ServerFrame, _> = serde_json::from_str(old);
        assert!(
            matches!(
                parsed,
                Ok(ServerFrame::FileRequest {
                    timeout_ms: None,
                    against: None,
                    ..
                })
            ),
            "{parsed:?}"
        );
    }
}
