//! What a run changed: the folder now against its recorded start, as the [`Changes`]
//! reported with the run's completion, and the run's end ([`EndBase`]) the job's diffs
//! compare the start with from then on.
//!
//! git: a tree of the folder now, written the same way as the start's (into the job's own
//! object store, which then keeps every tree of both and both sides of each changed blob),
//! and `diff-tree` between the two (renames found; binary files have no line counts), plus
//! the files that run later in nested repositories, compared with their recorded copies.
//! Elsewhere: the manifest against the folder now, line counts from the saved copies; the
//! end's manifest keeps copies of small text files within the start's bounds.
//!
//! At most [`MAX_CHANGED_FILES`] files are listed, sorted by path; the totals count every
//! change, and `truncated` says when more changed than are listed (also when a path cannot
//! be listed: not UTF-8, a control character, too long).

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use tether_protocol::changes::{
    ChangeBase, ChangeBaseKind, ChangeStatus, ChangeTotals, ChangedFile, Changes,
    MAX_CHANGED_FILES, MAX_CHANGE_PATH_BYTES,
};
use tether_protocol::JobId;

use crate::changes::diff;
use crate::changes::git::Repo;
use crate::changes::manifest::{self, Walk, START};
use crate::changes::record::{
    walk_order, Base, EndBase, Entry, GitEnd, GitStart, Manifest, StartRecord,
};
use crate::changes::runs_later;
use crate::changes::snapshot::nested_manifest;
use crate::changes::store::Store;
use crate::changes::tree::{self, Located, TreeChange};
use crate::local::vault;

/// Largest file whose lines are counted.
pub const MAX_COUNTED_BYTES: u64 = 1024 * 1024;
/// How long counting the lines of one file may take.
const COUNT_TIME: Duration = Duration::from_secs(1);
/// A bound on the end walk: a run that made many files is counted, within reason.
const END_WALK_FILES: usize = 2 * START.max_files;

/// One changed file before it is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Changed {
    /// `None`: a path that cannot be listed.
    path: Option<String>,
    status: ChangeStatus,
    from: Option<String>,
    additions: u64,
    deletions: u64,
    binary: bool,
}

/// What the run recorded by `record` changed in `folder` (its real path now), and the
/// folder as the run left it. Paths holding a saved secret value have it hidden.
///
/// # Errors
/// When the folder or git cannot be read.
pub fn changes(
    store: &Store,
    record: &StartRecord,
    folder: &Path,
    hidden: &[String],
) -> Result<(Changes, EndBase)> {
    let (base, changed, end) = match &record.base {
        Base::Git(start) => {
            let (changed, end) = git_changes(store, &record.job_id, folder, start)?;
            let base = ChangeBase {
                kind: ChangeBaseKind::Git,
                head: start.head.clone(),
            };
            (base, changed, EndBase::Git(end))
        }
        Base::Snapshot(start) => {
            let (changed, end) = snapshot_changes(store, &record.job_id, folder, start);
            let base = ChangeBase {
                kind: ChangeBaseKind::Snapshot,
                head: None,
            };
            (base, changed, EndBase::Snapshot(end))
        }
    };
    Ok((listed(base, changed, hidden), end))
}

fn git_changes(
    store: &Store,
    job_id: &JobId,
    folder: &Path,
    start: &GitStart,
) -> Result<(Vec<Changed>, GitEnd)> {
    let located = Located {
        repo: Repo {
            git_dir: start.git_dir.clone(),
            work_tree: start.work_tree.clone(),
        },
        prefix: start.prefix.clone(),
        object_format: start.object_format.clone(),
    };
    let trees = tree::Trees::of_start(store, job_id, start)?;
    let index = store.temp_file("index")?;
    tree::copy_index(&store.start_index(job_id), index.path())?;
    let end = trees.write(index.path())?;
    let tree_changes = trees.diff(&start.tree, &end)?;
    if start.own_objects {
        // Without it the end's diffs still read what the repository holds, until a gc.
        if let Err(err) = trees.keep(
            &store.objects_dir(job_id)?,
            &start.tree,
            &end,
            &tree_changes,
        ) {
            tracing::warn!(job = %job_id, "the run's end is kept only in part: {err:#}");
        }
    }
    let mut changed: Vec<Changed> = tree_changes.into_iter().map(from_tree).collect();
    let end_roots = trees.nested_roots(index.path())?;
    let mut roots = end_roots.clone();
    roots.extend(start.nested_roots.iter().cloned());
    roots.sort();
    roots.dedup();
    let now = nested_manifest(folder, &located, &roots, Some((store, job_id)));
    changed.extend(compare(store, job_id, folder, &start.nested, &now));
    let end = GitEnd {
        tree: end,
        nested_roots: end_roots,
        nested: now,
    };
    Ok((changed, end))
}

fn from_tree(change: TreeChange) -> Changed {
    let status = match change.status {
        'A' | 'C' => ChangeStatus::Added,
        'D' => ChangeStatus::Deleted,
        'R' => ChangeStatus::Renamed,
        _ => ChangeStatus::Modified,
    };
    let from = match status {
        ChangeStatus::Renamed => change.from.as_deref().and_then(listable),
        _ => None,
    };
    let path = listable(&change.path).filter(|_| status != ChangeStatus::Renamed || from.is_some());
    // A nested repository's entry is a commit id, not lines.
    let (counts, binary) = match change.counts {
        _ if change.is_gitlink() => ((0, 0), false),
        Some(counts) => (counts, false),
        None => ((0, 0), true),
    };
    Changed {
        path,
        status,
        from,
        additions: counts.0,
        deletions: counts.1,
        binary,
    }
}

/// The changes, and the end's manifest (its copies beside the start's, within the same
/// bounds).
fn snapshot_changes(
    store: &Store,
    job_id: &JobId,
    folder: &Path,
    start: &Manifest,
) -> (Vec<Changed>, Manifest) {
    let walk = Walk {
        bounds: manifest::Bounds {
            max_files: END_WALK_FILES,
            ..START
        },
        keep: manifest::every_file,
        copies: Some((store, job_id)),
    };
    let now = walk.folder(folder);
    (compare(store, job_id, folder, start, &now), now)
}

/// The differences between two manifests of `folder`, exact renames found. Paths past
/// where either walk stopped are not compared.
fn compare(
    store: &Store,
    job_id: &JobId,
    folder: &Path,
    start: &Manifest,
    now: &Manifest,
) -> Vec<Changed> {
    let before = Before { store, job_id };
    let mut deleted: Vec<&Entry> = Vec::new();
    let mut added: Vec<&Entry> = Vec::new();
    let mut changed = Vec::new();
    let (mut old, mut new) = (
        start.entries.iter().peekable(),
        now.entries.iter().peekable(),
    );
    loop {
        let order = match (old.peek(), new.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(a), Some(b)) => walk_order(&a.path, &b.path),
        };
        match order {
            Ordering::Less => deleted.extend(old.next().filter(|e| !now.beyond_cut(&e.path))),
            Ordering::Greater => added.extend(new.next().filter(|e| !start.beyond_cut(&e.path))),
            Ordering::Equal => {
                if let (Some(was), Some(is)) = (old.next(), new.next()) {
                    if differs(folder, was, is) {
                        changed.push(modified(&before, folder, was));
                    }
                }
            }
        }
    }
    let renamed = renames(folder, &mut deleted, &mut added);
    changed.extend(renamed);
    changed.extend(deleted.into_iter().map(|entry| removed(&before, entry)));
    changed.extend(added.into_iter().map(|entry| new_file(folder, entry)));
    changed
}

/// Where the copies of the start are.
struct Before<'a> {
    store: &'a Store,
    job_id: &'a JobId,
}

impl Before<'_> {
    /// The text of a file at the start, when a copy was kept.
    fn text(&self, entry: &Entry) -> Option<String> {
        let sha = entry.sha256.as_deref().filter(|_| entry.copy)?;
        let bytes = self.store.read_copy(self.job_id, sha).ok()?;
        String::from_utf8(bytes).ok()
    }
}

/// Whether the file at `was` is no longer what it was: by size and kind, then by content
/// when it was hashed, else by modification time.
fn differs(folder: &Path, was: &Entry, is: &Entry) -> bool {
    if was.size != is.size || was.link != is.link {
        return true;
    }
    match &was.sha256 {
        Some(sha) => current_sha(folder, is).as_ref() != Some(sha),
        None => was.mtime_ns != is.mtime_ns,
    }
}

fn current_sha(folder: &Path, entry: &Entry) -> Option<String> {
    let abs = manifest::join(folder, &entry.path);
    if entry.link {
        manifest::content(&abs, true, u64::MAX)
            .ok()
            .map(|bytes| manifest::sha256_hex(&bytes))
    } else {
        manifest::hash_file(&abs).ok()
    }
}

/// The text of a file now, if it is text of a size whose lines are counted.
fn current_text(folder: &Path, entry: &Entry) -> Option<String> {
    let abs = manifest::join(folder, &entry.path);
    let bytes = manifest::content(&abs, entry.link, MAX_COUNTED_BYTES).ok()?;
    if !manifest::is_text(&bytes) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

fn modified(before: &Before<'_>, folder: &Path, was: &Entry) -> Changed {
    let counts = match (before.text(was), current_text(folder, was)) {
        (Some(old), Some(new)) => Some(diff::count_lines(&old, &new, Instant::now() + COUNT_TIME)),
        _ => None,
    };
    changed(&was.path, ChangeStatus::Modified, counts)
}

fn removed(before: &Before<'_>, was: &Entry) -> Changed {
    let counts = before.text(was).map(|old| (0, diff::line_count(&old)));
    changed(&was.path, ChangeStatus::Deleted, counts)
}

fn new_file(folder: &Path, is: &Entry) -> Changed {
    let counts = current_text(folder, is).map(|new| (diff::line_count(&new), 0));
    changed(&is.path, ChangeStatus::Added, counts)
}

/// A change with line counts, or a binary (or uncounted) one without.
fn changed(path: &str, status: ChangeStatus, counts: Option<(u64, u64)>) -> Changed {
    Changed {
        path: Some(path.to_owned()),
        status,
        from: None,
        additions: counts.map_or(0, |c| c.0),
        deletions: counts.map_or(0, |c| c.1),
        binary: counts.is_none(),
    }
}

/// Files deleted and added with the same content are renames: taken out of both lists.
fn renames(folder: &Path, deleted: &mut Vec<&Entry>, added: &mut Vec<&Entry>) -> Vec<Changed> {
    let mut by_content: HashMap<(u64, &str), usize> = HashMap::new();
    for (index, entry) in deleted.iter().enumerate() {
        if let Some(sha) = entry.sha256.as_deref() {
            by_content.entry((entry.size, sha)).or_insert(index);
        }
    }
    let sizes: HashSet<u64> = by_content.keys().map(|(size, _)| *size).collect();
    let mut gone = vec![false; deleted.len()];
    let mut renamed = Vec::new();
    added.retain(|is| {
        // Only a file of a deleted one's size can be it: only those are hashed.
        let sizes_match = sizes.contains(&is.size);
        let Some(sha) = sizes_match.then(|| current_sha(folder, is)).flatten() else {
            return true;
        };
        let Some(&index) = by_content.get(&(is.size, sha.as_str())) else {
            return true;
        };
        if gone[index] {
            return true;
        }
        gone[index] = true;
        renamed.push(Changed {
            path: Some(is.path.clone()),
            status: ChangeStatus::Renamed,
            from: deleted.get(index).map(|was| was.path.clone()),
            additions: 0,
            deletions: 0,
            binary: deleted.get(index).is_some_and(|was| was.binary),
        });
        false
    });
    let mut index = 0;
    deleted.retain(|_| {
        index += 1;
        !gone[index - 1]
    });
    renamed
}

/// A git path as a listed path: UTF-8, no control character, within the length bound.
fn listable(path: &[u8]) -> Option<String> {
    let path = std::str::from_utf8(path).ok()?;
    let fine = !path.is_empty()
        && path.len() <= MAX_CHANGE_PATH_BYTES
        && !path.chars().any(char::is_control)
        && path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
    fine.then(|| path.to_owned())
}

/// The list as reported: flagged, sorted by path, cut at [`MAX_CHANGED_FILES`], totals over
/// every change.
fn listed(base: ChangeBase, changed: Vec<Changed>, hidden: &[String]) -> Changes {
    let mut totals = ChangeTotals::default();
    let mut files: Vec<ChangedFile> = Vec::new();
    for change in changed {
        totals.files += 1;
        totals.additions = totals.additions.saturating_add(change.additions);
        totals.deletions = totals.deletions.saturating_add(change.deletions);
        let Some(path) = change
            .path
            .and_then(|path| listable(vault::redact(&path, hidden).as_bytes()))
        else {
            continue;
        };
        let from = change
            .from
            .map(|from| vault::redact(&from, hidden))
            .filter(|from| listable(from.as_bytes()).is_some());
        if change.status == ChangeStatus::Renamed && from.is_none() {
            continue;
        }
        files.push(ChangedFile {
            flags: runs_later::flags(&path),
            path,
            status: change.status,
            from,
            additions: change.additions,
            deletions: change.deletions,
            binary: change.binary,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files.truncate(MAX_CHANGED_FILES);
    let listed = u64::try_from(files.len()).unwrap_or(u64::MAX);
    Changes {
        base,
        truncated: totals.files > listed,
        files,
        totals,
    }
}
