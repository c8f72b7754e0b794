//! What a run changed in its folder: the folder's state recorded when the run starts and
//! when it ends, the [`Changes`] reported with its completion, and the diff of one file for
//! the web: the run's start against its end once it ended (against the folder now while it
//! runs, and when asked).
//!
//! - [`snapshot`]: recording the start (a git tree through the agent's own index, or a
//!   bounded [`manifest`] with copies of small text files), kept by [`store`] as a
//!   [`record::StartRecord`] per job;
//! - [`listing`]: the folder at the run's end against its start, as [`Changes`], and the
//!   end itself, kept beside the start as a [`record::EndRecord`];
//! - [`diff`]: one file's unified diff between the start ([`Recorded::before`]) and the end
//!   ([`Recorded::ended`]) or now;
//! - [`runs_later`]: the flags of a changed file (runs code later, a credential);
//! - [`git`]: the hardened git runner every git command of the agent goes through, and
//!   [`tree`]: the git commands of this wing on it;
//! - [`worktree`]: a run's own git worktree of a shared repository, on its own branch.
//!
//! **Architecture Invariant:** no git command of the agent starts a program a repository
//! names (hooks, filters, textconv and diff drivers, fsmonitor, pagers, helpers): see
//! [`git`]. The repository's index, refs, work tree and object store are never written:
//! trees and blobs of the working state go, through an index of the agent's own, into the
//! job's own object store in the data dir (`GIT_OBJECT_DIRECTORY`, the repository's objects
//! an alternate), which a `git gc` in the repository cannot prune. (Git may refresh the
//! modification time of a repository object it finds instead of writing it again.) The one
//! exception is [`worktree`]: adding a run's worktree writes its new branch and the
//! repository's `worktrees/` entry, and removing it takes the entry away.
//!
//! **Architecture Invariant:** this wing uses only [`crate::local`] and [`crate::policy`];
//! `remote` (the live diff) and `run` (record, then report) use it, never the reverse.

pub mod diff;
pub mod git;
pub mod listing;
pub mod manifest;
pub mod record;
pub mod runs_later;
pub mod snapshot;
pub mod store;
#[cfg(test)]
mod tests;
pub mod tree;
pub mod worktree;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tether_protocol::changes::Changes;
use tether_protocol::jobs::ClaimedJob;
use tether_protocol::JobId;

use crate::changes::diff::Side;
use crate::changes::git::GitError;
use crate::changes::record::{
    Base, EndBase, EndRecord, Entry, GitEnd, GitStart, Manifest, StartRecord,
};
use crate::changes::store::Store;
use crate::changes::tree::Trees;

/// Largest file compared line by line (as the file view shows at most 1 MiB).
pub const MAX_COMPARED_BYTES: u64 = 1024 * 1024;

/// Records the state of `folder` as `job`'s run starts. A resumed attempt of a job whose
/// start is recorded keeps that record: its changes are the job's, from its first start
/// (an end recorded before is dropped: the run goes on).
///
/// # Errors
/// When the folder cannot be read or nothing can be written.
pub fn record_start(data_dir: &Path, job: &ClaimedJob, folder: &Path) -> Result<()> {
    let store = Store::new(data_dir);
    if job.resumed.is_some() && store.has(&job.id) {
        store.clear_end(&job.id);
        return Ok(());
    }
    snapshot::record(&store, &job.id, folder).map(|_| ())
}

/// What the run of `job_id` changed in `folder` since its recorded start (`None`: no start
/// is recorded); saved secret values in `hidden` are hidden in paths. The folder as it is
/// now is recorded as the run's end, which the job's diffs compare the start with from then
/// on.
///
/// # Errors
/// When the folder is another than the one recorded, or it or git cannot be read.
pub fn report(
    data_dir: &Path,
    job_id: &JobId,
    folder: &Path,
    hidden: &[String],
) -> Result<Option<Changes>> {
    let Some(recorded) = Recorded::load(data_dir, job_id)? else {
        return Ok(None);
    };
    let folder = real_folder(folder)?;
    if folder != recorded.record.folder {
        anyhow::bail!(
            "the folder is {} now, the run started in {}",
            folder.display(),
            recorded.record.folder.display()
        );
    }
    let (changes, end) = listing::changes(&recorded.store, &recorded.record, &folder, hidden)?;
    let end = EndRecord {
        recorded_at: chrono::Utc::now(),
        base: end,
    };
    if let Err(err) = recorded.store.save_end(job_id, &end) {
        tracing::warn!(job = %job_id, "the run's end was not recorded; its diffs will compare with the folder as it is then: {err:#}");
    }
    changes
        .check()
        .map_err(|err| anyhow::anyhow!("the change list breaks its own rules: {err}"))?;
    Ok(Some(changes))
}

fn real_folder(folder: &Path) -> Result<PathBuf> {
    folder
        .canonicalize()
        .with_context(|| format!("cannot find {}", folder.display()))
}

/// Why the start of one path cannot be told.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Nothing of it was recorded; the reason, for the web.
    #[error("{0}")]
    NotRecorded(String),
    #[error("the path is a folder, not a file")]
    Folder,
    #[error("out of time")]
    OutOfTime,
    #[error(transparent)]
    Failed(anyhow::Error),
}

impl From<GitError> for Refusal {
    fn from(err: GitError) -> Refusal {
        match err {
            GitError::TimedOut { .. } => Refusal::OutOfTime,
            other => Refusal::Failed(other.into()),
        }
    }
}

/// The recorded start of one job, and its end once the run ended, to answer diffs with.
#[derive(Debug)]
pub struct Recorded {
    store: Store,
    record: StartRecord,
    end: Option<EndRecord>,
}

/// A diff of one path between the run's start and its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The same at both (or at neither).
    Same,
    /// The file at the start and at the end.
    Sides { before: Side, after: Side },
}

impl Recorded {
    /// The start recorded for `job_id` in the data dir `data_dir`, with its end if recorded.
    ///
    /// # Errors
    /// When a record exists but cannot be read.
    pub fn load(data_dir: &Path, job_id: &JobId) -> Result<Option<Recorded>> {
        let store = Store::new(data_dir);
        let Some(record) = store.load(job_id)? else {
            return Ok(None);
        };
        let end = store.load_end(job_id)?;
        Ok(Some(Recorded { store, record, end }))
    }

    /// The folder's real path when the run started.
    pub fn folder(&self) -> &Path {
        &self.record.folder
    }

    /// Whether the run's end is recorded (the run ended and told its changes).
    pub fn has_end(&self) -> bool {
        self.end.is_some()
    }

    /// The file at `path` (relative to the folder, `/`-separated, already checked) at the
    /// run's start and at its end, read from what was recorded only (nothing in the folder
    /// now); `None` when no end is recorded. Git's part stops at `deadline`.
    ///
    /// # Errors
    /// A [`Refusal`].
    pub fn ended(&self, path: &str, deadline: Option<Instant>) -> Result<Option<Ended>, Refusal> {
        let Some(end) = &self.end else {
            return Ok(None);
        };
        let ended = match (&self.record.base, &end.base) {
            (Base::Git(start), EndBase::Git(end)) => {
                self.ended_in_git(start, end, path, deadline)?
            }
            (Base::Snapshot(start), EndBase::Snapshot(end)) => {
                let before = self.in_manifest(start, path, "start")?;
                let after = self.in_manifest(end, path, "end")?;
                if same_entries(start.get(path), end.get(path)) {
                    Ended::Same
                } else {
                    Ended::Sides { before, after }
                }
            }
            _ => {
                return Err(Refusal::Failed(anyhow::anyhow!(
                    "the run's start and end were recorded differently"
                )))
            }
        };
        Ok(Some(ended))
    }

    fn ended_in_git(
        &self,
        start: &GitStart,
        end: &GitEnd,
        path: &str,
        deadline: Option<Instant>,
    ) -> Result<Ended, Refusal> {
        let root_of = |roots: &[String]| {
            roots
                .iter()
                .find(|root| path.starts_with(&format!("{root}/")))
                .cloned()
        };
        let (root_at_start, root_at_end) =
            (root_of(&start.nested_roots), root_of(&end.nested_roots));
        if root_at_start.is_some() || root_at_end.is_some() {
            let before = self.in_nested(&start.nested, root_at_start.as_deref(), path)?;
            let after = self.in_nested(&end.nested, root_at_end.as_deref(), path)?;
            if same_entries(start.nested.get(path), end.nested.get(path)) {
                return Ok(Ended::Same);
            }
            return Ok(Ended::Sides { before, after });
        }
        let trees = Trees::of_start(&self.store, &self.record.job_id, start)
            .map_err(Refusal::Failed)?
            .until(deadline);
        let at_start = trees.entry(&start.tree, path).map_err(git_refusal)?;
        let at_end = trees.entry(&end.tree, path).map_err(git_refusal)?;
        let blob = |entry: &Option<tree::TreeEntry>| {
            entry.as_ref().filter(|entry| entry.kind == "blob").cloned()
        };
        let (before, after) = (blob(&at_start), blob(&at_end));
        match (&before, &after) {
            (None, None) if at_start.is_some() || at_end.is_some() => return Err(Refusal::Folder),
            (None, None) if trees.ignored(path).map_err(git_refusal)? => {
                return Err(Refusal::NotRecorded(
                    "git ignores this path, so the run's start and end have no record of it".into(),
                ))
            }
            (None, None) => return Ok(Ended::Same),
            (Some(was), Some(is)) if was.id == is.id && was.mode == is.mode => {
                return Ok(Ended::Same)
            }
            _ => {}
        }
        let read = |entry: Option<tree::TreeEntry>| -> Result<Side, Refusal> {
            let Some(entry) = entry else {
                return Ok(Side::Absent);
            };
            let time = deadline.map_or(Duration::from_secs(20), |at| {
                at.saturating_duration_since(Instant::now())
            });
            let max = usize::try_from(MAX_COMPARED_BYTES).unwrap_or(usize::MAX);
            let bytes = trees.blob(&entry.id, max, time).map_err(git_refusal)?;
            Ok(bytes.map_or(Side::TooLarge, Side::Bytes))
        };
        Ok(Ended::Sides {
            before: read(before)?,
            after: read(after)?,
        })
    }

    /// A path inside a nested repository (`root`, when there is one on that side), from a
    /// nested manifest.
    fn in_nested(
        &self,
        nested: &Manifest,
        root: Option<&str>,
        path: &str,
    ) -> Result<Side, Refusal> {
        if let Some(entry) = nested.get(path) {
            return Ok(self.kept(entry));
        }
        match root {
            Some(root) if !runs_later::runs_later(path) || nested.beyond_cut(path) => {
                Err(Refusal::NotRecorded(format!(
                    "{path} is inside the nested repository {root}: of it, only the files that run code later are recorded"
                )))
            }
            _ => Ok(Side::Absent),
        }
    }

    /// The file at `path` (relative to the folder, `/`-separated, already checked) when the
    /// run started; git's part stops at `deadline`.
    ///
    /// # Errors
    /// A [`Refusal`].
    pub fn before(&self, path: &str, deadline: Option<Instant>) -> Result<Side, Refusal> {
        match &self.record.base {
            Base::Snapshot(manifest) => self.in_manifest(manifest, path, "start"),
            Base::Git(start) => self.before_in_git(start, path, deadline),
        }
    }

    /// The file at `path` in the manifest of the run's `when` (`start` or `end`).
    fn in_manifest(&self, manifest: &Manifest, path: &str, when: &str) -> Result<Side, Refusal> {
        if let Some(entry) = manifest.get(path) {
            return Ok(self.kept(entry));
        }
        if manifest.beyond_cut(path) {
            return Err(Refusal::NotRecorded(format!(
                "the folder held more files than the run's {when} records; this one is not among them"
            )));
        }
        let parts: Vec<&str> = path.split('/').collect();
        if let Some((_, folders)) = parts.split_last() {
            if let Some(skipped) = folders
                .iter()
                .find(|part| manifest::SKIPPED_FOLDERS.contains(part))
            {
                return Err(Refusal::NotRecorded(format!(
                    "{skipped} folders are not recorded at a run's {when}"
                )));
            }
        }
        Ok(Side::Absent)
    }

    /// A recorded file: its copy, or what was recorded of it.
    fn kept(&self, entry: &Entry) -> Side {
        let copy = entry
            .sha256
            .as_deref()
            .filter(|_| entry.copy)
            .and_then(|sha| self.store.read_copy(&self.record.job_id, sha).ok());
        match copy {
            Some(bytes) => Side::Bytes(bytes),
            None => Side::NotKept {
                sha256: entry.sha256.clone(),
                binary: entry.binary,
            },
        }
    }

    fn before_in_git(
        &self,
        start: &GitStart,
        path: &str,
        deadline: Option<Instant>,
    ) -> Result<Side, Refusal> {
        if let Some(side) = self.before_in_nested(start, path)? {
            return Ok(side);
        }
        let trees = Trees::of_start(&self.store, &self.record.job_id, start)
            .map_err(Refusal::Failed)?
            .until(deadline);
        let Some(entry) = trees.entry(&start.tree, path).map_err(git_refusal)? else {
            if trees.ignored(path).map_err(git_refusal)? {
                return Err(Refusal::NotRecorded(
                    "git ignores this path, so the run's start has no record of it".into(),
                ));
            }
            return Ok(Side::Absent);
        };
        if entry.kind != "blob" {
            return Err(Refusal::Folder);
        }
        let time = deadline.map_or(Duration::from_secs(20), |at| {
            at.saturating_duration_since(Instant::now())
        });
        let max = usize::try_from(MAX_COMPARED_BYTES).unwrap_or(usize::MAX);
        // A link's blob is its target, as a link is read now.
        let bytes = trees.blob(&entry.id, max, time).map_err(git_refusal)?;
        Ok(bytes.map_or(Side::TooLarge, Side::Bytes))
    }

    /// A path inside a repository nested in the folder: its start from the nested
    /// manifest (`None`: not nested).
    fn before_in_nested(&self, start: &GitStart, path: &str) -> Result<Option<Side>, Refusal> {
        let root_at_start = start
            .nested_roots
            .iter()
            .find(|root| path.starts_with(&format!("{root}/")));
        let nested_now = || nested_root_now(&self.record.folder, path);
        let Some(root) = root_at_start.cloned().or_else(nested_now) else {
            return Ok(None);
        };
        if let Some(entry) = start.nested.get(path) {
            return Ok(Some(self.kept(entry)));
        }
        let existed = root_at_start.is_some();
        if existed && (!runs_later::runs_later(path) || start.nested.beyond_cut(path)) {
            return Err(Refusal::NotRecorded(format!(
                "{path} is inside the nested repository {root}: of it, only the files that run code later are recorded"
            )));
        }
        Ok(Some(Side::Absent))
    }
}

/// Two recorded entries of one file with the same content (both hashed), or no entry.
fn same_entries(start: Option<&Entry>, end: Option<&Entry>) -> bool {
    match (start, end) {
        (None, None) => true,
        (Some(was), Some(is)) => {
            was.link == is.link && was.sha256.is_some() && was.sha256 == is.sha256
        }
        _ => false,
    }
}

/// The outermost folder above `path` (not the folder itself) that holds a `.git` now.
fn nested_root_now(folder: &Path, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').collect();
    (1..parts.len())
        .map(|count| parts[..count].join("/"))
        .find(|root| manifest::join(folder, root).join(".git").exists())
}

fn git_refusal(err: anyhow::Error) -> Refusal {
    match err.downcast::<GitError>() {
        Ok(git) => git.into(),
        Err(other) => Refusal::Failed(other),
    }
}
