//! Route paths and header names shared by the server and the agent.

/// Sent by agents on every device route: the protocol version they speak.
pub const PROTOCOL_HEADER: &str = "x-tether-protocol";
/// The lease token on lease-bound device routes.
pub const LEASE_HEADER: &str = "x-tether-lease";
/// Evidence metadata (base64url JSON) on an evidence upload.
pub const EVIDENCE_HEADER: &str = "x-tether-evidence";
/// A computer's refusal of an `evidence.request` (the file changed, holds a saved secret
/// value, or evidence upload is off there), percent-encoded UTF-8; the body is then empty.
pub const EVIDENCE_REFUSED_HEADER: &str = "x-tether-evidence-refused";
/// The file's name on an attachment upload (`POST /api/attachments`), percent-encoded
/// UTF-8 (RFC 3986), so any name a person's file has travels in an ASCII header.
pub const ATTACHMENT_NAME_HEADER: &str = "x-tether-attachment-name";
/// The CSRF token a page sends with cookie-authenticated changes.
pub const CSRF_HEADER: &str = "x-tether-csrf";
/// The request id echoed on every answer.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Prefix of API tokens made by web users.
pub const USER_TOKEN_PREFIX: &str = "tut_";
/// Prefix of device tokens.
pub const DEVICE_TOKEN_PREFIX: &str = "tdt_";

pub const PAIR: &str = "/api/devices/pair";
pub const REGISTER: &str = "/api/devices/register";
pub const DEVICE_SELF: &str = "/api/devices/self";
pub const HEARTBEAT: &str = "/api/devices/self/heartbeat";
pub const CLAIM: &str = "/api/devices/self/claim";
pub const EVENTS: &str = "/api/devices/self/events";

/// The device's end of console session `session_id` (a WebSocket).
pub fn device_console(session_id: &str) -> String {
    format!("/api/devices/self/console/{session_id}")
}
pub const ATTACHMENTS: &str = "/api/attachments";

/// `/api/devices/self/jobs/{id}/{action}` for a lease-bound job route.
pub fn device_job(job_id: &str, action: &str) -> String {
    format!("/api/devices/self/jobs/{job_id}/{action}")
}

/// `/api/devices/self/jobs/{id}/attachments/{aid}`: one attachment of a claimed job.
pub fn device_job_attachment(job_id: &str, attachment_id: &str) -> String {
    format!("/api/devices/self/jobs/{job_id}/attachments/{attachment_id}")
}

/// `/api/devices/self/evidence-uploads/{uploadId}`: a computer's answer to an
/// `evidence.request`.
pub fn evidence_upload(upload_id: &str) -> String {
    format!("/api/devices/self/evidence-uploads/{upload_id}")
}

/// `/api/devices/self/session-deletions/{id}`: a computer's answer to a `session.delete`.
pub fn session_deletion(request_id: &str) -> String {
    format!("/api/devices/self/session-deletions/{request_id}")
}
