//! The git side of a run's changes: which repository a folder is in, a tree of its working
//! state written through an index of the agent's own (never the repository's index, refs
//! or work tree) into an object store of the job's own ([`Trees::with_own_objects`]), the
//! repositories nested in it, and the differences between two trees.
//!
//! Every command goes through the hardened [`Git`].

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use tether_protocol::JobId;

use crate::changes::git::{self, Git, GitError, Limits, Repo, DIFF_SAFETY};
use crate::changes::manifest::SKIPPED_FOLDERS;
use crate::changes::record::GitStart;
use crate::changes::store::Store;

/// Git mode of a gitlink: a repository inside the repository.
const GITLINK_MODE: &str = "160000";

/// Writing a tree of a large folder hashes every changed file: give it time.
const WRITE_LIMITS: Limits = Limits {
    timeout: Duration::from_secs(300),
    max_output: 1024 * 1024,
};
/// Listings of many files.
const LIST_LIMITS: Limits = Limits {
    timeout: Duration::from_secs(120),
    max_output: 256 * 1024 * 1024,
};

/// A folder found inside a git work tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub repo: Repo,
    /// The folder inside the work tree: `""` or `a/b/`.
    pub prefix: String,
    pub object_format: String,
}

/// The repository `folder` (a real path) is in, if git is installed and it is in one whose
/// work tree holds it.
///
/// # Errors
/// When git does not answer in time.
pub fn locate(folder: &Path) -> Result<Option<Located>, GitError> {
    let git = match Git::in_dir(folder) {
        Ok(git) => git,
        Err(GitError::Missing) => return Ok(None),
        Err(err) => return Err(err),
    };
    let args = [
        "rev-parse",
        "--absolute-git-dir",
        "--show-toplevel",
        "--show-object-format",
        "--show-prefix",
    ];
    let stdout = match git.run(&args, Limits::QUICK) {
        Ok(stdout) => stdout,
        Err(GitError::Failed { .. }) => return Ok(None),
        Err(err) => return Err(err),
    };
    let Ok(text) = String::from_utf8(stdout) else {
        return Ok(None);
    };
    let lines: Vec<&str> = text.split('\n').collect();
    let [git_dir, work_tree, object_format, prefix, ..] = lines.as_slice() else {
        return Ok(None);
    };
    let work_tree = PathBuf::from(work_tree);
    // `core.worktree` may name another folder: only a work tree holding the folder counts.
    let holds = work_tree
        .canonicalize()
        .is_ok_and(|real| real.join(prefix) == folder);
    if !holds || object_format.is_empty() {
        return Ok(None);
    }
    Ok(Some(Located {
        repo: Repo {
            git_dir: PathBuf::from(git_dir),
            work_tree,
        },
        prefix: (*prefix).to_owned(),
        object_format: (*object_format).to_owned(),
    }))
}

/// Git commands on one located folder, configured for recording working states.
#[derive(Debug, Clone)]
pub struct Trees {
    git: Git,
    work_tree: PathBuf,
    prefix: String,
    empty_tree: &'static str,
}

impl Trees {
    /// The git commands on the repository of `start`, with the job's own object store when
    /// the start was written there.
    ///
    /// # Errors
    /// When git is missing or the store cannot be made.
    pub fn of_start(store: &Store, job_id: &JobId, start: &GitStart) -> Result<Trees> {
        let repo = Repo {
            git_dir: start.git_dir.clone(),
            work_tree: start.work_tree.clone(),
        };
        let trees = Trees::new(&repo, &start.prefix, &start.object_format, store)?;
        if start.own_objects {
            return trees.with_own_objects(&store.objects_dir(job_id)?);
        }
        Ok(trees)
    }

    /// # Errors
    /// When git is missing or the excludes file cannot be written.
    pub fn new(repo: &Repo, prefix: &str, object_format: &str, store: &Store) -> Result<Trees> {
        let excludes = store.excludes_file(&excludes_text())?;
        let git = Git::for_repo(repo, object_format)?
            .with_config("core.excludesFile", &excludes.to_string_lossy())
            .with_config("core.autocrlf", "false")
            .with_config("core.safecrlf", "false");
        Ok(Trees {
            git,
            work_tree: repo.work_tree.clone(),
            prefix: prefix.to_owned(),
            empty_tree: git::empty_tree(object_format),
        })
    }

    /// The same commands with the object store `own` (a folder of the agent's) as where
    /// objects are written and first looked for, and the repository's objects as an
    /// alternate: nothing the agent writes lands in the repository, and a `git gc` there
    /// cannot take it away.
    ///
    /// # Errors
    /// When git cannot tell where the repository's objects are.
    pub fn with_own_objects(&self, own: &Path) -> Result<Trees> {
        let path = text(
            self.git
                .run(&["rev-parse", "--git-path", "objects"], Limits::QUICK)?,
        );
        let theirs = self.work_tree.join(path);
        let mut trees = self.clone();
        trees.git = trees
            .git
            .with_env_path("GIT_OBJECT_DIRECTORY", own.as_os_str())
            .with_env_path(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                &alternate_entry(&theirs)?,
            );
        Ok(trees)
    }

    /// Packs into the own object store (see [`Trees::with_own_objects`]) what the diffs
    /// between `start` and `end` read: every tree of both, and both sides of every blob in
    /// `changes` (their differences); the loose copies the pack holds are removed.
    ///
    /// # Errors
    /// When git fails.
    pub fn keep(&self, own: &Path, start: &str, end: &str, changes: &[TreeChange]) -> Result<()> {
        let mut ids: Vec<String> = Vec::new();
        for tree in [start, end] {
            ids.push(tree.to_owned());
            let listing = self
                .git
                .run(&["ls-tree", "-r", "-d", "-z", tree], LIST_LIMITS)?;
            ids.extend(
                listing
                    .split(|byte| *byte == 0)
                    .filter_map(split_tab)
                    .filter_map(|(meta, _)| {
                        let meta = String::from_utf8_lossy(meta);
                        meta.split(' ').nth(2).map(str::to_owned)
                    }),
            );
        }
        for change in changes.iter().filter(|change| !change.is_gitlink()) {
            ids.extend([change.old_id.clone(), change.new_id.clone()]);
        }
        ids.retain(|id| !id.is_empty() && id != self.empty_tree && id.bytes().any(|b| b != b'0'));
        ids.sort();
        ids.dedup();
        let mut input = ids.join("\n").into_bytes();
        input.push(b'\n');
        let prefix = own.join("pack").join("pack");
        self.git.run_with_input(
            &["pack-objects".as_ref(), "-q".as_ref(), prefix.as_os_str()],
            input,
            WRITE_LIMITS,
        )?;
        // Without the alternate: with it, a loose object of the job's that the repository
        // holds in a pack of its own would go too, and the repository may drop it later.
        self.git
            .with_env("GIT_ALTERNATE_OBJECT_DIRECTORIES", "")
            .run(&["prune-packed", "-q"], WRITE_LIMITS)?;
        Ok(())
    }

    /// The same commands, none running past `until`.
    pub fn until(&self, until: Option<std::time::Instant>) -> Trees {
        let mut trees = self.clone();
        trees.git = trees.git.until(until);
        trees
    }

    /// The commit `HEAD` names, if any.
    ///
    /// # Errors
    /// When git fails otherwise.
    pub fn head(&self) -> Result<Option<String>> {
        let output = self.git.output(
            &["rev-parse", "--verify", "-q", "HEAD^{commit}"],
            Limits::QUICK,
            &[0, 1],
        )?;
        let id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        Ok((output.code == Some(0) && !id.is_empty()).then_some(id))
    }

    /// Fills `index` (a file of the agent's) with `head`'s tree, or leaves it empty.
    ///
    /// # Errors
    /// When git fails.
    pub fn read_head(&self, index: &Path, head: Option<&str>) -> Result<()> {
        let git = self.git.with_index(index);
        match head {
            Some(head) => git.run(&["read-tree", head], WRITE_LIMITS)?,
            None => git.run(&["read-tree", "--empty"], WRITE_LIMITS)?,
        };
        Store::make_private(index);
        Ok(())
    }

    /// Brings `index` up to date with the folder and writes the tree of the folder: tracked
    /// and untracked files, ignored ones left out.
    ///
    /// # Errors
    /// When git fails.
    pub fn write(&self, index: &Path) -> Result<String> {
        let git = self.git.with_index(index);
        let pathspec = self.folder_pathspec();
        // `--ignore-errors`: a nested repository without a commit is skipped, not fatal.
        git.output(
            &["add", "-A", "--ignore-errors", "--", &pathspec],
            WRITE_LIMITS,
            &[0, 1],
        )?;
        Store::make_private(index);
        let whole = text(git.run(&["write-tree"], WRITE_LIMITS)?);
        self.subtree(&whole)
    }

    /// The tree of the folder inside the work tree's tree `whole` (the empty tree when the
    /// folder has nothing).
    fn subtree(&self, whole: &str) -> Result<String> {
        let Some(folder) = self.prefix.strip_suffix('/') else {
            return Ok(whole.to_owned());
        };
        Ok(match self.entry(whole, folder)? {
            Some(entry) if entry.kind == "tree" => entry.id,
            _ => self.empty_tree.to_owned(),
        })
    }

    /// Repositories inside the folder, relative to it: gitlinks in `index`, and folders left
    /// untracked because they are repositories without a commit.
    ///
    /// # Errors
    /// When git fails.
    pub fn nested_roots(&self, index: &Path) -> Result<Vec<String>> {
        let git = self.git.with_index(index);
        let spec = self.folder_pathspec();
        let staged = git.run(&["ls-files", "-s", "-z", "--", &spec], LIST_LIMITS)?;
        let mut roots: Vec<String> = staged
            .split(|byte| *byte == 0)
            .filter_map(|entry| {
                let (meta, path) = split_tab(entry)?;
                meta.starts_with(GITLINK_MODE.as_bytes()).then_some(path)
            })
            .filter_map(|path| self.relative(path))
            .collect();
        let untracked = git.run(
            &[
                "ls-files",
                "-o",
                "--directory",
                "--exclude-standard",
                "-z",
                "--",
                &spec,
            ],
            LIST_LIMITS,
        )?;
        for entry in untracked.split(|byte| *byte == 0) {
            let Some(folder) = entry.strip_suffix(b"/") else {
                continue;
            };
            let Ok(folder) = std::str::from_utf8(folder) else {
                continue;
            };
            if self.work_tree.join(folder).join(".git").exists() {
                roots.extend(self.relative(folder.as_bytes()));
            }
        }
        roots.sort();
        roots.dedup();
        Ok(roots)
    }

    /// Every difference between the trees `from` and `to`, renames found.
    ///
    /// # Errors
    /// When git fails or prints more than can be read.
    pub fn diff(&self, from: &str, to: &str) -> Result<Vec<TreeChange>> {
        let mut raw_args = vec!["diff-tree", "-r", "-z", "-M", "--raw"];
        raw_args.extend(DIFF_SAFETY);
        raw_args.extend([from, to]);
        let raw = self.git.run(&raw_args, LIST_LIMITS)?;
        let mut stat_args = vec!["diff-tree", "-r", "-z", "-M", "--numstat"];
        stat_args.extend(DIFF_SAFETY);
        stat_args.extend([from, to]);
        let numstat = self.git.run(&stat_args, LIST_LIMITS)?;
        let mut changes = parse_raw(&raw);
        let counts = parse_numstat(&numstat);
        if counts.len() == changes.len() {
            for (change, count) in changes.iter_mut().zip(counts) {
                change.counts = count;
            }
        }
        Ok(changes)
    }

    /// The entry at `path` of the tree `tree` (a tree of the folder: relative to it).
    ///
    /// # Errors
    /// When git fails.
    pub fn entry(&self, tree: &str, path: &str) -> Result<Option<TreeEntry>> {
        let listing = self
            .git
            .run(&["ls-tree", "-z", tree, "--", path], Limits::QUICK)?;
        for entry in listing.split(|byte| *byte == 0) {
            let Some((meta, name)) = split_tab(entry) else {
                continue;
            };
            if name != path.as_bytes() {
                continue;
            }
            let meta = String::from_utf8_lossy(meta);
            let mut parts = meta.split(' ');
            let (Some(mode), Some(kind), Some(id)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            return Ok(Some(TreeEntry {
                mode: mode.to_owned(),
                kind: kind.to_owned(),
                id: id.to_owned(),
            }));
        }
        Ok(None)
    }

    /// A blob's bytes, if it holds at most `max`.
    ///
    /// # Errors
    /// When git fails.
    pub fn blob(&self, id: &str, max: usize, time: Duration) -> Result<Option<Vec<u8>>> {
        let size = text(self.git.run(&["cat-file", "-s", id], Limits::QUICK)?);
        let size: usize = size.parse().context("cat-file -s gave no size")?;
        if size > max {
            return Ok(None);
        }
        let limits = Limits {
            timeout: time,
            max_output: max,
        };
        Ok(Some(self.git.run(&["cat-file", "blob", id], limits)?))
    }

    /// Whether git ignores `path` (relative to the folder).
    ///
    /// # Errors
    /// When git fails.
    pub fn ignored(&self, path: &str) -> Result<bool> {
        let spec = format!("{}{path}", self.prefix);
        // `check-ignore` takes path names, not pathspecs, and refuses the literal magic.
        let output = self.git.with_env("GIT_LITERAL_PATHSPECS", "0").output(
            &["check-ignore", "-q", "--no-index", "--", &spec],
            Limits::QUICK,
            &[0, 1],
        )?;
        Ok(output.code == Some(0))
    }

    /// The folder as a literal pathspec: `.`, or its path without the last `/`.
    fn folder_pathspec(&self) -> String {
        match self.prefix.strip_suffix('/') {
            Some(folder) => folder.to_owned(),
            None => ".".to_owned(),
        }
    }

    /// A work-tree path as a path relative to the folder.
    fn relative(&self, path: &[u8]) -> Option<String> {
        let path = std::str::from_utf8(path).ok()?;
        path.strip_prefix(self.prefix.as_str())
            .filter(|rest| !rest.is_empty())
            .map(str::to_owned)
    }
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub mode: String,
    /// `blob`, `tree` or `commit` (a gitlink).
    pub kind: String,
    pub id: String,
}

/// One difference between two trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeChange {
    /// `A`, `M`, `D`, `R`, `T` (type changed), `C`.
    pub status: char,
    pub path: Vec<u8>,
    pub from: Option<Vec<u8>>,
    pub old_mode: String,
    pub new_mode: String,
    /// The objects on each side (all zeros where there is none).
    pub old_id: String,
    pub new_id: String,
    /// Added and deleted lines; `None` for a binary file.
    pub counts: Option<(u64, u64)>,
}

impl TreeChange {
    pub fn is_gitlink(&self) -> bool {
        self.old_mode == GITLINK_MODE || self.new_mode == GITLINK_MODE
    }
}

/// `diff-tree --raw -z`: `:old new oldid newid S\0path\0[path2\0]`.
fn parse_raw(raw: &[u8]) -> Vec<TreeChange> {
    let mut parts = raw.split(|byte| *byte == 0);
    let mut changes = Vec::new();
    while let Some(meta) = parts.next() {
        let Some(meta) = meta.strip_prefix(b":") else {
            continue;
        };
        let meta = String::from_utf8_lossy(meta);
        let fields: Vec<&str> = meta.split(' ').collect();
        let [old_mode, new_mode, old_id, new_id, status] = fields.as_slice() else {
            continue;
        };
        let Some(letter) = status.chars().next() else {
            continue;
        };
        let Some(first) = parts.next() else {
            break;
        };
        let (path, from) = if matches!(letter, 'R' | 'C') {
            let Some(second) = parts.next() else {
                break;
            };
            (second.to_vec(), Some(first.to_vec()))
        } else {
            (first.to_vec(), None)
        };
        changes.push(TreeChange {
            status: letter,
            path,
            from,
            old_mode: (*old_mode).to_owned(),
            new_mode: (*new_mode).to_owned(),
            old_id: (*old_id).to_owned(),
            new_id: (*new_id).to_owned(),
            counts: Some((0, 0)),
        });
    }
    changes
}

/// `diff-tree --numstat -z`: `added\tdeleted\tpath\0`, a rename `added\tdeleted\t\0from\0to\0`;
/// `-` counts for a binary file. In the order of `--raw`.
fn parse_numstat(numstat: &[u8]) -> Vec<Option<(u64, u64)>> {
    let mut parts = numstat.split(|byte| *byte == 0);
    let mut counts = Vec::new();
    while let Some(entry) = parts.next() {
        if entry.is_empty() {
            continue;
        }
        let text = String::from_utf8_lossy(entry);
        let mut fields = text.splitn(3, '\t');
        let (Some(added), Some(deleted), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if path.is_empty() {
            // A rename: its two paths follow.
            parts.next();
            parts.next();
        }
        counts.push(match (added.parse(), deleted.parse()) {
            (Ok(added), Ok(deleted)) => Some((added, deleted)),
            _ => None,
        });
    }
    counts
}

/// `meta\tpath` of `ls-files -s` and `ls-tree`.
fn split_tab(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let tab = entry.iter().position(|byte| *byte == b'\t')?;
    Some((&entry[..tab], &entry[tab + 1..]))
}

fn text(stdout: Vec<u8>) -> String {
    String::from_utf8_lossy(&stdout).trim().to_owned()
}

/// The excludes file of the agent's git commands: dependency and cache folders, left out
/// when untracked, as a walk skips them.
fn excludes_text() -> String {
    SKIPPED_FOLDERS
        .iter()
        .map(|name| format!("{name}/\n"))
        .collect()
}

/// `path` as one entry of `GIT_ALTERNATE_OBJECT_DIRECTORIES`: quoted as git reads a quoted
/// entry, so a `:` in it does not split it.
///
/// # Errors
/// When it is not UTF-8 or holds a control character.
fn alternate_entry(path: &Path) -> Result<std::ffi::OsString> {
    let Some(text) = path
        .to_str()
        .filter(|text| !text.chars().any(char::is_control))
    else {
        anyhow::bail!("{} cannot name an alternate object store", path.display());
    };
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    Ok(format!("\"{escaped}\"").into())
}

/// Copies the start `index` to `to`, keeping its modification time: git trusts an entry's
/// file times only against the index's own time, so a copy made later must keep it.
///
/// # Errors
/// When it cannot be copied.
pub fn copy_index(index: &Path, to: &Path) -> Result<()> {
    fs::copy(index, to).with_context(|| format!("cannot copy {}", index.display()))?;
    Store::make_private(to);
    if let Ok(modified) = fs::metadata(index).and_then(|meta| meta.modified()) {
        fs::File::options()
            .write(true)
            .open(to)
            .and_then(|file| file.set_modified(modified))
            .with_context(|| format!("cannot date {}", to.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_numstat_listings_are_read() {
        let raw = b":100644 100644 aaa bbb M\0src/a.rs\0:000000 100644 000 ccc A\0new.txt\0:100644 100644 ddd ddd R100\0old name\0new name\0:160000 160000 e f M\0lib\0";
        let changes = parse_raw(raw);
        assert_eq!(changes.len(), 4);
        assert_eq!(changes[2].status, 'R');
        assert_eq!(changes[2].from.as_deref(), Some(&b"old name"[..]));
        assert_eq!(changes[2].path, b"new name");
        assert_eq!(
            (changes[0].old_id.as_str(), changes[0].new_id.as_str()),
            ("aaa", "bbb")
        );
        assert!(changes[3].is_gitlink());
        let numstat = b"3\t1\tsrc/a.rs\x001\t0\tnew.txt\x000\t0\t\0old name\0new name\0-\t-\tlib\0";
        assert_eq!(
            parse_numstat(numstat),
            [Some((3, 1)), Some((1, 0)), Some((0, 0)), None]
        );
        assert_eq!(parse_raw(b":broken"), []);
        assert_eq!(parse_numstat(b"x\0"), []);
    }
}
