//! Live files of a job: the web asks, the server relays, the device answers.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::changes::FileDiff;
use crate::error::ErrorDetail;

/// What the web asks of a job's folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileOp {
    /// List one directory.
    Tree,
    /// Read one file.
    File,
    /// The unified diff of one file between the run's start and now.
    Diff,
}

/// The kind of a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Link,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TreeEntry {
    pub name: String,
    pub kind: EntryKind,
    pub size: u64,
}

/// Answer of `GET /api/jobs/{id}/tree?path=`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tree {
    pub path: String,
    pub entries: Vec<TreeEntry>,
}

/// Answer of `GET /api/jobs/{id}/file?path=`. Text only, redacted on the device; a binary
/// file is described, not sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    pub path: String,
    pub size: u64,
    pub binary: bool,
    pub truncated: bool,
    pub text: Option<String>,
}

/// Largest file text the device sends in one answer, in bytes.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The device's answer to a `file.request` frame
/// (`POST /api/devices/self/file-requests/{id}`): exactly one of the three.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<Tree>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<FileDiff>,
    /// Why the device refused: `not_found`, `path_refused`, `payload_too_large`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}
