//! Files a person attaches to a job's task: a screenshot of the bug, a log, a spec.
//!
//! Each file is uploaded on its own first (`POST /api/attachments`, the name in
//! [`crate::routes::ATTACHMENT_NAME_HEADER`], the bytes as the body), so a phone on a bad
//! network retries one file, not the job. The answer's id then goes in the job's
//! `attachments`. An upload no job took expires after [`UPLOAD_TTL_SECS`].
//!
//! The claim lists a job's attachments; the computer downloads each only while it holds the
//! job's lease (`GET /api/devices/self/jobs/{id}/attachments/{aid}`), checks its size and
//! digest, and shows it to the run alone.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::AttachmentId;

/// One attached file, as the upload answers it, the job lists it and the claim carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub id: AttachmentId,
    /// The file's name, without any folder.
    pub name: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    /// The type the server sniffed from the bytes (never the one the browser claimed).
    pub media_type: String,
}

/// Most files one job carries.
pub const MAX_ATTACHMENTS_PER_JOB: usize = 20;
/// Largest attached file, in bytes (25 MB).
pub const MAX_ATTACHMENT_BYTES: u64 = 25_000_000;
/// Most bytes one job's attachments hold together (100 MB).
pub const MAX_ATTACHMENT_BYTES_PER_JOB: u64 = 100_000_000;
/// How long an upload no job took is kept, in seconds.
pub const UPLOAD_TTL_SECS: i64 = 3600;
