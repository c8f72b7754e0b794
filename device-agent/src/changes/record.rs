//! What the start of a run is recorded as, on disk (`snapshots/<jobId>.json`), and its end
//! (`snapshots/<jobId>/end.json`): agent state, never sent as such.

use std::cmp::Ordering;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_protocol::JobId;

/// The folder as the run found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartRecord {
    pub job_id: JobId,
    pub recorded_at: DateTime<Utc>,
    /// The folder's real path at the start: a folder shared elsewhere since is another one.
    pub folder: PathBuf,
    pub base: Base,
}

/// How the start was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Base {
    Git(GitStart),
    Snapshot(Manifest),
}

/// A folder in a git repository: a tree of its working state, written through an index of
/// the agent's own into the job's own object store (the repository's objects an alternate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitStart {
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
    /// The folder inside the work tree: `""` at its root, else `a/b/`.
    pub prefix: String,
    /// `sha1` or `sha256`.
    pub object_format: String,
    /// The tree of the folder's working state (tracked and untracked, ignored left out).
    pub tree: String,
    /// The commit `HEAD` named, when there was one.
    pub head: Option<String>,
    /// Repositories inside the folder (submodules, clones, new ones), relative to it: their
    /// contents are no part of the tree.
    pub nested_roots: Vec<String>,
    /// The files of those repositories (and of the folder's own `.git`, when it is inside
    /// the folder) that run code later, with copies.
    pub nested: Manifest,
    /// The trees and blobs the agent wrote are in the job's own object store
    /// (`snapshots/<jobId>/objects`); `false` in records of older agents, which wrote them
    /// into the repository's.
    #[serde(default)]
    pub own_objects: bool,
}

/// The folder as the run left it, recorded when the run ends, beside its start: what the
/// job's diffs compare the start with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndRecord {
    pub recorded_at: DateTime<Utc>,
    pub base: EndBase,
}

/// How the end was recorded: as the start was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EndBase {
    Git(GitEnd),
    /// A manifest with copies of small text files, within the bounds of the start's.
    Snapshot(Manifest),
}

/// The end in a git repository: its tree, in the job's own object store with every tree
/// and every blob that differs from the start, so neither `git gc` nor later commits in the
/// repository take it away.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitEnd {
    pub tree: String,
    /// Repositories inside the folder at the end (relative to it).
    pub nested_roots: Vec<String>,
    /// Their files that run code later (and the folder's own `.git`'s), with copies.
    pub nested: Manifest,
}

/// A bounded list of files, sorted in walk order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub entries: Vec<Entry>,
    /// The walk stopped after this path (too many files): later paths, in walk order, are
    /// not compared.
    #[serde(default)]
    pub cut_after: Option<String>,
}

/// One file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Relative to the folder, `/`-separated.
    pub path: String,
    pub size: u64,
    /// Nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Of the content (of the target, for a link); `None` past the hashing bounds.
    pub sha256: Option<String>,
    /// A symbolic link; its "content" is its target.
    #[serde(default)]
    pub link: bool,
    /// Not text (a NUL byte, or not UTF-8).
    #[serde(default)]
    pub binary: bool,
    /// A copy is kept, named by `sha256`.
    #[serde(default)]
    pub copy: bool,
}

impl Manifest {
    /// The entry of `path`.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries
            .binary_search_by(|entry| walk_order(&entry.path, path))
            .ok()
            .and_then(|index| self.entries.get(index))
    }

    /// Whether `path` lies past where the walk stopped (so its absence means nothing).
    pub fn beyond_cut(&self, path: &str) -> bool {
        self.cut_after
            .as_deref()
            .is_some_and(|cut| walk_order(path, cut) == Ordering::Greater)
    }
}

/// The order a walk visits paths in: folder by folder, names in byte order.
pub fn walk_order(a: &str, b: &str) -> Ordering {
    a.split('/').cmp(b.split('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_order_is_by_parts() {
        assert_eq!(walk_order("a/c", "a-b"), Ordering::Less);
        assert_eq!(walk_order("a", "a/b"), Ordering::Less);
        assert_eq!(walk_order("b", "a/z"), Ordering::Greater);
        let manifest = Manifest {
            entries: Vec::new(),
            cut_after: Some("m/n".into()),
        };
        assert!(manifest.beyond_cut("m/o"));
        assert!(manifest.beyond_cut("n"));
        assert!(!manifest.beyond_cut("m/a/b"));
        assert!(!manifest.beyond_cut("m/n"));
    }
}
