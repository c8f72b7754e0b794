//! What a run changed in its folder: the list the device reports with its completion, and
//! the per-file diff the web reads live (`GET /api/jobs/{id}/diff?path=`).
//!
//! The list is metadata only (paths, statuses, line counts, flags); file text never
//! reaches the server's database. Paths are relative to the job's folder, `/`-separated.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Most files one change list names; `totals` still counts every file.
pub const MAX_CHANGED_FILES: usize = 1000;
/// Largest diff text the device sends for one file, in bytes; a longer one is cut.
pub const MAX_DIFF_BYTES: usize = 256 * 1024;
/// Longest path in a change list, in bytes.
pub const MAX_CHANGE_PATH_BYTES: usize = 4096;
/// Most flags on one file.
pub const MAX_FLAGS: usize = 8;

/// The flag of a file that can run code outside the sandbox later (a hook, a build script,
/// a task file, a CI workflow, a shell start-up file): review it before you build or run.
pub const FLAG_RUNS_LATER: &str = "runs_later";
/// The flag of a credential file: listed, but its diff is never shown.
pub const FLAG_CREDENTIAL: &str = "credential";

/// What the run's start was recorded as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeBaseKind {
    /// A git tree of the folder's working state (tracked and untracked, ignored left out).
    Git,
    /// A bounded manifest of a folder that is not a git repository.
    Snapshot,
}

/// The state the changes are measured from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeBase {
    pub kind: ChangeBaseKind,
    /// For `git`: the commit `HEAD` named at the run's start, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

/// How one file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    Added,
    Modified,
    Deleted,
    /// Moved from `from` (possibly changed as well).
    Renamed,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangedFile {
    pub path: String,
    pub status: ChangeStatus,
    /// The earlier path of a renamed file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub additions: u64,
    pub deletions: u64,
    pub binary: bool,
    /// [`FLAG_RUNS_LATER`], [`FLAG_CREDENTIAL`].
    #[serde(default)]
    pub flags: Vec<String>,
}

/// Counts over every changed file, listed or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeTotals {
    pub files: u64,
    pub additions: u64,
    pub deletions: u64,
}

/// What a run changed, as `complete` reports it and `GET /api/jobs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    pub base: ChangeBase,
    /// At most [`MAX_CHANGED_FILES`], sorted by path.
    pub files: Vec<ChangedFile>,
    pub totals: ChangeTotals,
    /// More files changed than are listed.
    pub truncated: bool,
}

/// Why a change list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesError(pub String);

impl std::fmt::Display for ChangesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Changes {
    /// Checks a list as received: its shape, its bounds, relative paths and totals that
    /// cover the listed files.
    ///
    /// # Errors
    /// The first rule broken, in words.
    pub fn check(&self) -> Result<(), ChangesError> {
        let bad = |why: String| Err(ChangesError(why));
        if self.files.len() > MAX_CHANGED_FILES {
            return bad(format!("at most {MAX_CHANGED_FILES} files are listed"));
        }
        if let Some(head) = &self.base.head {
            let hex = head.len() >= 4 && head.len() <= 64;
            if !hex || !head.bytes().all(|b| b.is_ascii_hexdigit()) {
                return bad("base.head must be a commit id".into());
            }
        }
        let (mut additions, mut deletions) = (0_u64, 0_u64);
        for file in &self.files {
            check_path(&file.path)?;
            match (&file.from, file.status) {
                (Some(from), ChangeStatus::Renamed) => check_path(from)?,
                (None, ChangeStatus::Renamed) => return bad("a renamed file names `from`".into()),
                (Some(_), _) => return bad("only a renamed file names `from`".into()),
                (None, _) => {}
            }
            if file.flags.len() > MAX_FLAGS
                || file
                    .flags
                    .iter()
                    .any(|flag| flag != FLAG_RUNS_LATER && flag != FLAG_CREDENTIAL)
            {
                return bad(format!("unknown or too many flags on {:?}", file.path));
            }
            additions = additions.saturating_add(file.additions);
            deletions = deletions.saturating_add(file.deletions);
        }
        let listed = u64::try_from(self.files.len()).unwrap_or(u64::MAX);
        if self.totals.files < listed
            || self.totals.additions < additions
            || self.totals.deletions < deletions
        {
            return bad("totals must count at least the listed files".into());
        }
        if self.truncated != (self.totals.files > listed) {
            return bad("truncated says whether totals.files exceeds the list".into());
        }
        Ok(())
    }
}

/// A path of a change list: relative, `/`-separated, no `.`/`..`/empty parts, no NUL or
/// control character, bounded.
fn check_path(path: &str) -> Result<(), ChangesError> {
    let fine = !path.is_empty()
        && path.len() <= MAX_CHANGE_PATH_BYTES
        && !path.starts_with('/')
        && !path.chars().any(char::is_control)
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
    if fine {
        Ok(())
    } else {
        // `{:?}` escapes what is not printable.
        let shown: String = path.chars().take(100).collect();
        Err(ChangesError(format!(
            "{shown:?} is not a relative path inside the folder"
        )))
    }
}

/// What a diff compares the run's start with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DiffAgainst {
    /// The folder as the run left it (while the run goes on: as it is now).
    #[default]
    End,
    /// The folder as it is now, later jobs' and people's work included.
    Now,
}

impl DiffAgainst {
    pub fn as_str(self) -> &'static str {
        match self {
            DiffAgainst::End => "end",
            DiffAgainst::Now => "now",
        }
    }
}

/// The device's answer to a `diff` file request: the unified diff of one file between the
/// run's start and its end (or now), redacted, at most [`MAX_DIFF_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiff {
    pub path: String,
    pub text: String,
    /// The diff was longer and is cut (the text ends saying so).
    pub truncated: bool,
    /// What the start was compared with: `end` once the run's end is recorded, else `now`
    /// (also when asked). Absent from older agents, which always compare with now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<DiffAgainst>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, status: ChangeStatus) -> ChangedFile {
        ChangedFile {
            path: path.into(),
            status,
            from: None,
            additions: 2,
            deletions: 1,
            binary: false,
            flags: Vec::new(),
        }
    }

    fn list(files: Vec<ChangedFile>) -> Changes {
        let count = u64::try_from(files.len()).unwrap_or(0);
        Changes {
            base: ChangeBase {
                kind: ChangeBaseKind::Git,
                head: Some("0123abcd".into()),
            },
            totals: ChangeTotals {
                files: count,
                additions: 2 * count,
                deletions: count,
            },
            files,
            truncated: false,
        }
    }

    #[test]
    fn a_well_formed_list_passes() {
        let mut renamed = file("src/new.rs", ChangeStatus::Renamed);
        renamed.from = Some("src/old.rs".into());
        renamed.flags = vec![FLAG_RUNS_LATER.into()];
        let changes = list(vec![file("a.txt", ChangeStatus::Added), renamed]);
        assert_eq!(changes.check(), Ok(()));
        let json = serde_json::to_value(&changes).unwrap_or_default();
        assert_eq!(json["files"][1]["from"], "src/old.rs");
        assert_eq!(json["base"]["kind"], "git");
    }

    #[test]
    fn paths_leaving_the_folder_and_odd_shapes_are_refused() {
        for path in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a\u{0}b",
            "a\nb",
        ] {
            let changes = list(vec![file(path, ChangeStatus::Modified)]);
            assert!(changes.check().is_err(), "{path:?}");
        }
        let renamed_without_from = list(vec![file("a", ChangeStatus::Renamed)]);
        assert!(renamed_without_from.check().is_err());
        let mut from_on_modified = file("a", ChangeStatus::Modified);
        from_on_modified.from = Some("b".into());
        assert!(list(vec![from_on_modified]).check().is_err());
        let mut flagged = file("a", ChangeStatus::Modified);
        flagged.flags = vec!["<script>".into()];
        assert!(list(vec![flagged]).check().is_err());
    }

    #[test]
    fn totals_cover_the_list_and_truncated_tells_the_truth() {
        let mut changes = list(vec![file("a", ChangeStatus::Added)]);
        changes.totals.additions = 0;
        assert!(changes.check().is_err());
        let mut changes = list(vec![file("a", ChangeStatus::Added)]);
        changes.totals.files = 5;
        assert!(
            changes.check().is_err(),
            "more files than listed, not truncated"
        );
        changes.truncated = true;
        assert_eq!(changes.check(), Ok(()));
        let mut changes = list(vec![file("a", ChangeStatus::Added)]);
        changes.base.head = Some("not-a-sha".into());
        assert!(changes.check().is_err());
    }
}
