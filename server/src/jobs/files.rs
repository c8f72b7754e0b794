//! Live files of a job: the owner reads the job's folder from the device that ran it,
//! through the hub's relay. The server keeps none of it.
//!
//! The server checks the shape of the path (relative, no `..`, no NUL, bounded) before it
//! asks; the device alone decides what it shows (only inside the job's folder, never
//! secrets, `.git` internals, links leading out, hard links or oversized files; text
//! redacted).
//!
//! **Invariant:** only the job's owner asks, and only the device that owns the job answers.

use std::time::Duration;

use tether_protocol::changes::{DiffAgainst, FileDiff, MAX_DIFF_BYTES};
use tether_protocol::files::{FileAnswer, FileContent, FileOp, Tree, MAX_FILE_BYTES};
use tether_protocol::{AccountId, Code, DeviceId, JobId};

use crate::error::ApiError;
use crate::relay::Hub;
use crate::store::job_rows;
use crate::store::Store;

/// Longest path the web may ask for, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Room for the line a cut diff ends with, past [`MAX_DIFF_BYTES`].
pub const DIFF_NOTE_BYTES: usize = 1024;
/// Most entries one listing may carry.
pub const MAX_TREE_ENTRIES: usize = 10_000;

/// A path inside a job's folder: relative, `/`-separated, without `..`, NUL or a drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderPath(String);

impl FolderPath {
    /// `""` (or `.`) is the folder itself.
    ///
    /// # Errors
    /// 422 `invalid_field` naming `path`.
    pub fn parse(raw: &str) -> Result<FolderPath, ApiError> {
        let bad = |why: &str| ApiError::invalid_field("path", why);
        if raw.len() > MAX_PATH_BYTES {
            return Err(bad("must be at most 4096 bytes."));
        }
        if raw.contains('\0') {
            return Err(bad("must not contain NUL."));
        }
        if raw.starts_with('/') || raw.starts_with('\\') || raw.starts_with('~') {
            return Err(bad("must be relative to the job's folder."));
        }
        let bytes = raw.as_bytes();
        if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
            return Err(bad("must be relative to the job's folder."));
        }
        if raw.split(['/', '\\']).any(|part| part == "..") {
            return Err(bad("must not contain '..'."));
        }
        let trimmed = raw.trim_end_matches('/');
        Ok(FolderPath(if trimmed == "." {
            String::new()
        } else {
            trimmed.to_owned()
        }))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Lists a directory of the job's folder, live from its device.
///
/// # Errors
/// 404 for a job not of this account, 409 `device_offline`, 504 `device_timeout`, or the
/// device's refusal (`not_found`, `path_refused`, …).
pub async fn tree(
    store: &Store,
    hub: &Hub,
    account_id: &AccountId,
    job_id: &JobId,
    path: &FolderPath,
    timeout: Duration,
) -> Result<Tree, ApiError> {
    let answer = ask(
        store,
        hub,
        account_id,
        job_id,
        (FileOp::Tree, path, None),
        timeout,
    )
    .await?;
    answer.tree.ok_or_else(|| {
        ApiError::new(
            Code::InvalidState,
            "The computer answered without a listing.",
        )
    })
}

/// Reads a file of the job's folder, live from its device.
///
/// # Errors
/// As [`tree`].
pub async fn file(
    store: &Store,
    hub: &Hub,
    account_id: &AccountId,
    job_id: &JobId,
    path: &FolderPath,
    timeout: Duration,
) -> Result<FileContent, ApiError> {
    let answer = ask(
        store,
        hub,
        account_id,
        job_id,
        (FileOp::File, path, None),
        timeout,
    )
    .await?;
    answer
        .file
        .ok_or_else(|| ApiError::new(Code::InvalidState, "The computer answered without a file."))
}

/// The unified diff of one file of the job's folder between the run's start and its end
/// (`against` [`DiffAgainst::End`]; while the run goes on, the folder now) or the folder
/// now ([`DiffAgainst::Now`]), from its device. The answer's `against` says which it is: an
/// older agent always compares with now.
///
/// # Errors
/// As [`tree`].
pub async fn diff(
    store: &Store,
    hub: &Hub,
    account_id: &AccountId,
    job_id: &JobId,
    path: &FolderPath,
    against: DiffAgainst,
    timeout: Duration,
) -> Result<FileDiff, ApiError> {
    let asked = (FileOp::Diff, path, Some(against));
    let answer = ask(store, hub, account_id, job_id, asked, timeout).await?;
    let mut diff = answer.diff.ok_or_else(|| {
        ApiError::new(Code::InvalidState, "The computer answered without a diff.")
    })?;
    diff.against = Some(diff.against.unwrap_or(DiffAgainst::Now));
    Ok(diff)
}

/// What is asked of the device: the operation, the path, and for a diff what the start is
/// compared with.
type Asked<'a> = (FileOp, &'a FolderPath, Option<DiffAgainst>);

async fn ask(
    store: &Store,
    hub: &Hub,
    account_id: &AccountId,
    job_id: &JobId,
    (op, path, against): Asked<'_>,
    timeout: Duration,
) -> Result<FileAnswer, ApiError> {
    let device_id = job_rows::device_of(store, account_id, job_id).await?;
    let path = path.as_str().to_owned();
    let answer = hub
        .request_file(&device_id, job_id, op, path, against, timeout)
        .await?;
    match answer.error {
        Some(error) => Err(device_refusal(&error.code, &error.message)),
        None => Ok(answer),
    }
}

/// A checked [`FileAnswer`]: exactly one of tree, file, diff and error, within the sizes the
/// web is shown.
#[derive(Debug, Clone)]
pub struct RelayedAnswer(FileAnswer);

impl TryFrom<FileAnswer> for RelayedAnswer {
    type Error = ApiError;

    fn try_from(answer: FileAnswer) -> Result<RelayedAnswer, ApiError> {
        let parts = usize::from(answer.tree.is_some())
            + usize::from(answer.file.is_some())
            + usize::from(answer.diff.is_some())
            + usize::from(answer.error.is_some());
        if parts != 1 {
            return Err(ApiError::invalid_field(
                "tree",
                "an answer holds exactly one of tree, file, diff and error.",
            ));
        }
        // The cut diff ends with a line saying so, hence the small allowance.
        let diff_bytes = answer.diff.as_ref().map_or(0, |diff| diff.text.len());
        if diff_bytes > MAX_DIFF_BYTES + DIFF_NOTE_BYTES {
            return Err(ApiError::new(
                Code::PayloadTooLarge,
                "diff.text: at most 256 KiB; send it truncated.",
            ));
        }
        if answer
            .tree
            .as_ref()
            .is_some_and(|tree| tree.entries.len() > MAX_TREE_ENTRIES)
        {
            return Err(ApiError::invalid_field("tree", "at most 10000 entries."));
        }
        let text_bytes = answer
            .file
            .as_ref()
            .and_then(|file| file.text.as_ref())
            .map_or(0, String::len);
        if u64::try_from(text_bytes).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
            return Err(ApiError::new(
                Code::PayloadTooLarge,
                "file.text: at most 1 MiB; send it truncated.",
            ));
        }
        Ok(RelayedAnswer(answer))
    }
}

/// The device answers a relayed file request.
///
/// # Errors
/// 404 for an unknown, answered or timed-out request or one asked of another device.
pub async fn answer(
    hub: &Hub,
    device_id: &DeviceId,
    request_id: &str,
    answer: RelayedAnswer,
) -> Result<(), ApiError> {
    hub.answer_file(device_id, request_id, answer.0).await
}

/// The device's refusal as the web's error. Only codes that make sense to a web user pass;
/// anything else (a device cannot log the user out with `unauthorized`) is `path_refused`.
fn device_refusal(code: &str, message: &str) -> ApiError {
    let code = match Code::from_name(code) {
        Some(
            code @ (Code::NotFound
            | Code::PathRefused
            | Code::PayloadTooLarge
            | Code::UnsupportedMediaType
            | Code::InvalidField
            | Code::InvalidState
            | Code::DeviceTimeout
            | Code::Unavailable),
        ) => code,
        _ => Code::PathRefused,
    };
    let message = job_rows::truncate(message.trim(), 500);
    let message = if message.is_empty() {
        "The computer refused this path.".to_owned()
    } else {
        format!("The computer says: {message}")
    };
    ApiError::new(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_and_bounded() {
        let ok = |raw: &str| {
            FolderPath::parse(raw)
                .map(|path| path.as_str().to_owned())
                .ok()
        };
        assert_eq!(ok(""), Some(String::new()));
        assert_eq!(ok("."), Some(String::new()));
        assert_eq!(ok("src/"), Some("src".to_owned()));
        assert_eq!(ok("src/main.rs"), Some("src/main.rs".to_owned()));
        assert_eq!(ok("a..b/c"), Some("a..b/c".to_owned()));
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../b",
            "a\\..\\b",
            "a\0b",
            "C:\\x",
            "~/x",
        ] {
            assert_eq!(ok(bad), None, "{bad:?}");
        }
        assert_eq!(ok(&"a".repeat(4097)), None);
        assert!(ok(&"a".repeat(4096)).is_some());
    }

    #[test]
    fn a_diff_answer_is_bounded_and_alone() {
        let diff = |bytes: usize| FileDiff {
            path: "a".into(),
            text: "+".repeat(bytes),
            truncated: false,
            against: None,
        };
        let answer = |diff: FileDiff, error: bool| FileAnswer {
            tree: None,
            file: None,
            diff: Some(diff),
            error: error.then(|| tether_protocol::ErrorDetail {
                code: "not_found".into(),
                message: "x".into(),
            }),
        };
        assert!(RelayedAnswer::try_from(answer(diff(MAX_DIFF_BYTES), false)).is_ok());
        let over =
            RelayedAnswer::try_from(answer(diff(MAX_DIFF_BYTES + DIFF_NOTE_BYTES + 1), false));
        assert_eq!(over.err().map(|e| e.code()), Some(Code::PayloadTooLarge));
        let both = RelayedAnswer::try_from(answer(diff(1), true));
        assert_eq!(both.err().map(|e| e.code()), Some(Code::InvalidField));
    }

    #[test]
    fn refusals_keep_only_web_codes() {
        assert_eq!(device_refusal("not_found", "gone").code(), Code::NotFound);
        assert_eq!(device_refusal("path_refused", "").code(), Code::PathRefused);
        assert_eq!(
            device_refusal("unauthorized", "x").code(),
            Code::PathRefused
        );
        assert_eq!(device_refusal("nonsense", "x").code(), Code::PathRefused);
    }
}
