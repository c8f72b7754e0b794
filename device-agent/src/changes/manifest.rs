//! A bounded walk of a folder into a [`Manifest`]: (path, size, modification time, SHA-256)
//! of each regular file and link, with copies of small text files.
//!
//! Bounds, all of them ([`START`]): at most 20,000 files listed and 200,000 entries looked
//! at (past either the walk stops, and later paths are not compared), files hashed up to
//! 64 MiB each and 1 GiB in all, copies of text files up to 256 KiB each and 64 MiB in all,
//! 64 folders deep, a time limit. Dependency and cache folders ([`SKIPPED_FOLDERS`]) are
//! not entered; in a `.git` folder only `config` and `hooks/` are looked at (what runs
//! later), and names that are not UTF-8 are left out.

use std::fs;
use std::io::{self, Read};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use tether_protocol::JobId;

use crate::changes::record::{Entry, Manifest};
use crate::changes::store::Store;
use crate::local::private_files::{hex, open_no_follow};

/// Folders never walked: what package managers, builds and tools make again.
pub const SKIPPED_FOLDERS: &[&str] = &[
    "node_modules",
    "bower_components",
    "target",
    ".venv",
    "venv",
    "__pycache__",
    ".cache",
    "dist",
    "build",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".gradle",
    ".next",
    ".nuxt",
    ".parcel-cache",
    ".turbo",
    ".terraform",
    ".svn",
    ".hg",
    ".bzr",
];

/// How much one walk may look at, hash and copy.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_files: usize,
    pub max_visits: usize,
    pub max_depth: usize,
    pub max_hash_file: u64,
    pub max_hash_total: u64,
    pub max_copy_file: u64,
    pub max_copy_total: u64,
    pub time: Duration,
}

/// The bounds of a run's start (and of the comparison at its end).
pub const START: Bounds = Bounds {
    max_files: 20_000,
    max_visits: 200_000,
    max_depth: 64,
    max_hash_file: 64 * 1024 * 1024,
    max_hash_total: 1024 * 1024 * 1024,
    max_copy_file: 256 * 1024,
    max_copy_total: 64 * 1024 * 1024,
    time: Duration::from_secs(60),
};

/// How much of a file is looked at to tell text from binary.
pub const SNIFF_BYTES: usize = 8192;

/// What a walk keeps and where.
pub struct Walk<'a> {
    pub bounds: Bounds,
    /// Which files are listed (every one, or those that run later).
    pub keep: fn(&str) -> bool,
    /// Where copies go; `None`: no copies, and no hashing (the end of a run hashes only what
    /// it compares).
    pub copies: Option<(&'a Store, &'a JobId)>,
}

/// The walk's running state.
struct Walker<'a> {
    walk: &'a Walk<'a>,
    deadline: Instant,
    manifest: Manifest,
    visits: usize,
    hashed: u64,
    copied: u64,
    last_path: Option<String>,
    stopped: bool,
}

impl Walk<'_> {
    /// Walks the folder `root`, below `start` (a relative folder, `""` for all of it),
    /// adding to `manifest`. A `.git` at `start` itself is walked as a git folder.
    pub fn extend(&self, manifest: &mut Manifest, root: &Path, start: &str) {
        if manifest.cut_after.is_some() {
            return;
        }
        let mut walker = Walker {
            walk: self,
            deadline: Instant::now() + self.bounds.time,
            manifest: std::mem::take(manifest),
            visits: 0,
            hashed: 0,
            copied: 0,
            last_path: None,
            stopped: false,
        };
        let abs = join(root, start);
        let is_git = start.rsplit('/').next() == Some(".git");
        if is_git {
            walker.visit_git_dir(&abs, start, 0);
        } else {
            walker.visit_dir(&abs, start, 0);
        }
        if walker.stopped {
            walker.manifest.cut_after = walker.last_path.clone();
        }
        *manifest = walker.manifest;
    }

    /// A manifest of the whole folder `root`.
    pub fn folder(&self, root: &Path) -> Manifest {
        let mut manifest = Manifest::default();
        self.extend(&mut manifest, root, "");
        sort(&mut manifest);
        manifest
    }
}

/// Puts a manifest's entries in walk order (several walks may have added to it).
pub fn sort(manifest: &mut Manifest) {
    manifest
        .entries
        .sort_by(|a, b| crate::changes::record::walk_order(&a.path, &b.path));
    manifest.entries.dedup_by(|a, b| a.path == b.path);
}

impl Walker<'_> {
    fn visit_dir(&mut self, abs: &Path, rel: &str, depth: usize) {
        if depth > self.walk.bounds.max_depth {
            return;
        }
        for (name, kind) in sorted_children(abs) {
            if self.stop_now() {
                return;
            }
            let child_rel = child(rel, &name);
            let child_abs = abs.join(&name);
            match kind {
                Kind::Dir if name == ".git" => {
                    self.visit_git_dir(&child_abs, &child_rel, depth + 1)
                }
                Kind::Dir if SKIPPED_FOLDERS.contains(&name.as_str()) => {}
                Kind::Dir => self.visit_dir(&child_abs, &child_rel, depth + 1),
                Kind::File | Kind::Link => self.visit_file(&child_abs, child_rel, kind),
            }
        }
    }

    /// In a `.git` folder only what runs later: `config` and everything under `hooks/`.
    fn visit_git_dir(&mut self, abs: &Path, rel: &str, depth: usize) {
        for (name, kind) in sorted_children(abs) {
            if self.stop_now() {
                return;
            }
            match (name.as_str(), kind) {
                ("config", Kind::File) => {
                    self.visit_file(&abs.join(&name), child(rel, &name), kind)
                }
                ("hooks", Kind::Dir) => {
                    self.visit_dir(&abs.join(&name), &child(rel, &name), depth + 1);
                }
                _ => {}
            }
        }
    }

    fn stop_now(&mut self) -> bool {
        self.visits += 1;
        if !self.stopped
            && (self.visits > self.walk.bounds.max_visits
                || self.manifest.entries.len() >= self.walk.bounds.max_files
                || Instant::now() >= self.deadline)
        {
            self.stopped = true;
        }
        self.stopped
    }

    fn visit_file(&mut self, abs: &Path, rel: String, kind: Kind) {
        self.last_path = Some(rel.clone());
        if !(self.walk.keep)(&rel) {
            return;
        }
        let Ok(meta) = fs::symlink_metadata(abs) else {
            return;
        };
        let mut entry = Entry {
            path: rel,
            size: meta.len(),
            mtime_ns: mtime_ns(&meta),
            sha256: None,
            link: kind == Kind::Link,
            binary: false,
            copy: false,
        };
        if let Some((store, job_id)) = self.walk.copies {
            self.describe(abs, &mut entry, store, job_id);
        }
        self.manifest.entries.push(entry);
    }

    /// Hashes the file (and keeps a copy of small text) within the walk's bounds.
    fn describe(&mut self, abs: &Path, entry: &mut Entry, store: &Store, job_id: &JobId) {
        let bounds = self.walk.bounds;
        if entry.size > bounds.max_hash_file || self.hashed + entry.size > bounds.max_hash_total {
            entry.binary = sniff_binary(abs);
            return;
        }
        self.hashed += entry.size;
        if entry.link || entry.size <= bounds.max_copy_file {
            let Ok(bytes) = content(abs, entry.link, bounds.max_copy_file) else {
                return;
            };
            entry.sha256 = Some(sha256_hex(&bytes));
            entry.binary = !is_text(&bytes);
            let room = self.copied + entry.size <= bounds.max_copy_total;
            if !entry.binary && room {
                if let Some(sha) = &entry.sha256 {
                    entry.copy = store.save_copy(job_id, sha, &bytes).is_ok();
                    self.copied += entry.size;
                }
            }
        } else {
            entry.sha256 = hash_file(abs).ok();
            entry.binary = sniff_binary(abs);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Dir,
    File,
    Link,
}

/// The UTF-8 names in a folder with what they are (not following links), in byte order;
/// sockets, pipes and devices are left out.
fn sorted_children(abs: &Path) -> Vec<(String, Kind)> {
    let Ok(entries) = fs::read_dir(abs) else {
        return Vec::new();
    };
    let mut children: Vec<(String, Kind)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let file_type = entry.file_type().ok()?;
            let kind = if file_type.is_symlink() {
                Kind::Link
            } else if file_type.is_dir() {
                Kind::Dir
            } else if file_type.is_file() {
                Kind::File
            } else {
                return None;
            };
            Some((name, kind))
        })
        .collect();
    children.sort();
    children
}

fn child(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_owned()
    } else {
        format!("{rel}/{name}")
    }
}

/// `root` joined with a relative `/`-separated path.
pub fn join(root: &Path, rel: &str) -> std::path::PathBuf {
    rel.split('/')
        .filter(|part| !part.is_empty())
        .fold(root.to_path_buf(), |path, part| path.join(part))
}

/// Nanoseconds since the epoch of a file's modification (0 when unknown).
pub fn mtime_ns(meta: &fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| {
            i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
        })
}

/// The modification time of a path (not following a link), for comparisons.
pub fn mtime_of(path: &Path) -> Option<SystemTime> {
    fs::symlink_metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
}

/// A file's bytes (a link's target), at most `max`; longer is an error.
///
/// # Errors
/// When it cannot be read, or holds more than `max` bytes.
pub fn content(abs: &Path, link: bool, max: u64) -> io::Result<Vec<u8>> {
    if link {
        let target = fs::read_link(abs)?;
        return Ok(target.as_os_str().as_encoded_bytes().to_vec());
    }
    let mut bytes = Vec::new();
    open_regular(abs)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::other("the file is larger than the bound"));
    }
    Ok(bytes)
}

/// The SHA-256 of a file's bytes, read in chunks.
///
/// # Errors
/// When it cannot be read.
pub fn hash_file(abs: &Path) -> io::Result<String> {
    let mut file = open_regular(abs)?;
    let mut hasher = Sha256::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(hex(&hasher.finalize())),
            Ok(read) => hasher.update(&chunk[..read]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

/// Whether the first [`SNIFF_BYTES`] of a file hold a NUL byte.
fn sniff_binary(abs: &Path) -> bool {
    let mut head = Vec::new();
    match open_regular(abs).and_then(|file| file.take(SNIFF_BYTES as u64).read_to_end(&mut head)) {
        Ok(_) => head.contains(&0),
        Err(_) => true,
    }
}

/// Text is UTF-8 without a NUL byte in its first [`SNIFF_BYTES`].
pub fn is_text(bytes: &[u8]) -> bool {
    !bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) && std::str::from_utf8(bytes).is_ok()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Opens a regular file for reading, never through a link nor blocking on a pipe swapped in.
fn open_regular(path: &Path) -> io::Result<fs::File> {
    let file = open_no_follow(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Every file of a walk.
pub fn every_file(_: &str) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let path = join(root, rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap_or_else(|err| panic!("{err}"));
        }
        fs::write(path, bytes).unwrap_or_else(|err| panic!("{err}"));
    }

    use anyhow::Result;

    #[test]
    fn a_walk_skips_dependencies_and_git_internals_and_keeps_small_text() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().join("work");
        write(&root, "src/main.rs", b"fn main() {}\n");
        write(&root, "node_modules/x/index.js", b"x\n");
        write(&root, "lib/.git/objects/ab", b"blob");
        write(&root, "lib/.git/config", b"[core]\n");
        write(&root, "lib/.git/hooks/pre-commit", b"#!/bin/sh\n");
        write(&root, "big.txt", &vec![b'a'; 300 * 1024]);
        write(&root, "image.bin", b"\0\x01\x02");
        let store = Store::new(&tmp.path().join("data"));
        let job = JobId::parse("job1")?;
        store.fresh_job_dir(&job)?;
        let walk = Walk {
            bounds: START,
            keep: every_file,
            copies: Some((&store, &job)),
        };
        let manifest = walk.folder(&root);
        let paths: Vec<&str> = manifest.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "big.txt",
                "image.bin",
                "lib/.git/config",
                "lib/.git/hooks/pre-commit",
                "src/main.rs"
            ]
        );
        let get = |path: &str| manifest.get(path).cloned();
        let main = get("src/main.rs").unwrap_or_else(|| panic!("no main.rs"));
        assert!(main.copy && !main.binary);
        assert_eq!(
            store.read_copy(&job, main.sha256.as_deref().unwrap_or_default())?,
            b"fn main() {}\n"
        );
        let big = get("big.txt").unwrap_or_else(|| panic!("no big.txt"));
        assert!(!big.copy && big.sha256.is_some() && !big.binary);
        let image = get("image.bin").unwrap_or_else(|| panic!("no image"));
        assert!(image.binary && !image.copy);
        assert_eq!(manifest.cut_after, None);
        Ok(())
    }

    #[test]
    fn a_walk_past_its_bounds_says_where_it_stopped() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        for name in ["a", "b", "c", "d"] {
            write(tmp.path(), name, b"x");
        }
        let walk = Walk {
            bounds: Bounds {
                max_files: 2,
                ..START
            },
            keep: every_file,
            copies: None,
        };
        let manifest = walk.folder(tmp.path());
        assert_eq!(manifest.entries.len(), 2);
        assert_eq!(manifest.cut_after.as_deref(), Some("b"));
        assert!(manifest.beyond_cut("c") && !manifest.beyond_cut("a"));
        Ok(())
    }
}
