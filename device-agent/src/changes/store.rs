//! Where run starts and ends are kept, in the data dir:
//!
//! - `snapshots/<jobId>.json`: the [`StartRecord`] (0600, written atomically);
//! - `snapshots/<jobId>/`: what it needs besides (0700): copies of small text files named by
//!   their SHA-256 (of the start and of the end), `index`, the agent's own git index of the
//!   start, `objects/`, the job's own git object store (the trees of the start and the end,
//!   and the blobs the diffs read), and `end.json`, the [`EndRecord`] once the run ended;
//! - `snapshots/tmp/`: indexes of the moment, removed when done (and when stale);
//! - `snapshots/excludes`: the dependency folders the agent's git leaves out when untracked.
//!
//! The newest [`KEEP_RECORDS`] records are kept; older ones are removed with their folders,
//! ends and object stores included.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use tether_protocol::JobId;

use crate::changes::record::{EndRecord, StartRecord};
use crate::local::private_files::{create_private_dir, set_mode, FILE_MODE};
use crate::local::state::write_atomic;

const SNAPSHOTS_DIR: &str = "snapshots";
const TMP_DIR: &str = "tmp";
const START_INDEX: &str = "index";
const END_RECORD: &str = "end.json";
const OBJECTS_DIR: &str = "objects";
const EXCLUDES: &str = "excludes";
/// How many run starts are kept.
pub const KEEP_RECORDS: usize = 200;
/// A temporary file older than this was left by an agent that stopped.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// The run starts of one data dir.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store under the data dir `data_dir`.
    pub fn new(data_dir: &Path) -> Store {
        Store {
            dir: data_dir.join(SNAPSHOTS_DIR),
        }
    }

    /// Whether a start is recorded for `job_id`.
    pub fn has(&self, job_id: &JobId) -> bool {
        self.record_path(job_id).is_file()
    }

    /// The start recorded for `job_id`.
    ///
    /// # Errors
    /// When it exists but cannot be read or parsed.
    pub fn load(&self, job_id: &JobId) -> Result<Option<StartRecord>> {
        let path = self.record_path(job_id);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a run start record", path.display())),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the record, then removes the oldest beyond [`KEEP_RECORDS`].
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn save(&self, record: &StartRecord) -> Result<()> {
        create_dir(&self.dir)?;
        let bytes = serde_json::to_vec(record)?;
        let path = self.record_path(&record.job_id);
        write_atomic(&path, &bytes).with_context(|| format!("cannot write {}", path.display()))?;
        self.prune(KEEP_RECORDS);
        Ok(())
    }

    /// An empty folder for the job's copies and index (what was there before is removed).
    ///
    /// # Errors
    /// When it cannot be made.
    pub fn fresh_job_dir(&self, job_id: &JobId) -> Result<PathBuf> {
        let dir = self.job_dir(job_id);
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err).with_context(|| format!("cannot clear {}", dir.display())),
        }
        let _ = fs::remove_file(self.record_path(job_id));
        create_dir(&self.dir)?;
        create_dir(&dir)?;
        Ok(dir)
    }

    /// Removes what is recorded for `job_id`.
    pub fn forget(&self, job_id: &JobId) {
        let _ = fs::remove_file(self.record_path(job_id));
        let _ = fs::remove_dir_all(self.job_dir(job_id));
    }

    /// The end recorded for `job_id`.
    ///
    /// # Errors
    /// When it exists but cannot be read or parsed.
    pub fn load_end(&self, job_id: &JobId) -> Result<Option<EndRecord>> {
        let path = self.job_dir(job_id).join(END_RECORD);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a run end record", path.display())),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the end of the job whose start is recorded.
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn save_end(&self, job_id: &JobId, end: &EndRecord) -> Result<()> {
        let path = self.job_dir(job_id).join(END_RECORD);
        let bytes = serde_json::to_vec(end)?;
        write_atomic(&path, &bytes).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Removes the job's recorded end: the run goes on again.
    pub fn clear_end(&self, job_id: &JobId) {
        let _ = fs::remove_file(self.job_dir(job_id).join(END_RECORD));
    }

    /// The job's own git object store (made when missing), with its `pack/` folder.
    ///
    /// # Errors
    /// When it cannot be made.
    pub fn objects_dir(&self, job_id: &JobId) -> Result<PathBuf> {
        let dir = self.job_dir(job_id).join(OBJECTS_DIR);
        create_dir(&self.dir)?;
        create_dir(&self.job_dir(job_id))?;
        create_dir(&dir)?;
        create_dir(&dir.join("pack"))?;
        Ok(dir)
    }

    /// Keeps `bytes` as the copy named `sha256` of the job's files.
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn save_copy(&self, job_id: &JobId, sha256: &str, bytes: &[u8]) -> Result<()> {
        let path = self.job_dir(job_id).join(sha256);
        if path.is_file() {
            return Ok(());
        }
        write_atomic(&path, bytes).with_context(|| format!("cannot write {}", path.display()))
    }

    /// The copy named `sha256` of the job's files.
    ///
    /// # Errors
    /// When it cannot be read.
    pub fn read_copy(&self, job_id: &JobId, sha256: &str) -> Result<Vec<u8>> {
        // Digests are lowercase hex, so the name is safe; anything else is refused.
        if sha256.is_empty() || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            anyhow::bail!("{sha256:?} is not a digest");
        }
        let path = self.job_dir(job_id).join(sha256);
        fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
    }

    /// The excludes file of the agent's git commands, written when it differs from `text`.
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn excludes_file(&self, text: &str) -> Result<PathBuf> {
        create_dir(&self.dir)?;
        let path = self.dir.join(EXCLUDES);
        if fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            write_atomic(&path, text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(path)
    }

    /// The agent's git index of the job's start.
    pub fn start_index(&self, job_id: &JobId) -> PathBuf {
        self.job_dir(job_id).join(START_INDEX)
    }

    /// A fresh name in `snapshots/tmp/`, removed when the [`TempFile`] is dropped; stale
    /// leftovers are cleared on the way.
    ///
    /// # Errors
    /// When the folder cannot be made.
    pub fn temp_file(&self, what: &str) -> Result<TempFile> {
        let dir = self.dir.join(TMP_DIR);
        create_dir(&self.dir)?;
        create_dir(&dir)?;
        clear_stale(&dir);
        let path = dir.join(format!("{what}-{:016x}", rand::random::<u64>()));
        Ok(TempFile { path })
    }

    /// Makes a file git wrote in the store private (git creates files by its umask).
    pub fn make_private(path: &Path) {
        let _ = set_mode(path, FILE_MODE);
    }

    fn record_path(&self, job_id: &JobId) -> PathBuf {
        // Job ids are `[A-Za-z0-9_-]{1,64}` (checked when parsed), so they are safe names.
        self.dir.join(format!("{}.json", job_id.as_str()))
    }

    fn job_dir(&self, job_id: &JobId) -> PathBuf {
        self.dir.join(job_id.as_str())
    }

    /// Removes the oldest records (by modification time) beyond `keep`, with their folders.
    fn prune(&self, keep: usize) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut records: Vec<(SystemTime, PathBuf)> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .map(|path| {
                let at = path
                    .metadata()
                    .and_then(|meta| meta.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                (at, path)
            })
            .collect();
        if records.len() <= keep {
            return;
        }
        records.sort();
        let excess = records.len() - keep;
        for (_, path) in records.into_iter().take(excess) {
            let _ = fs::remove_file(&path);
            let _ = fs::remove_dir_all(path.with_extension(""));
        }
    }
}

/// A path in `snapshots/tmp/`, removed (with git's lock beside it) when dropped.
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
}

impl TempFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let mut lock = self.path.clone().into_os_string();
        lock.push(".lock");
        let _ = fs::remove_file(lock);
    }
}

fn clear_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let stale = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|age| age > STALE_TMP);
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// A private folder of the store, made if missing.
fn create_dir(path: &Path) -> Result<()> {
    create_private_dir(path).with_context(|| format!("cannot create {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::record::{Base, Manifest};

    fn record(job: &str) -> StartRecord {
        StartRecord {
            job_id: JobId::parse(job).unwrap_or_else(|_| JobId::generate()),
            recorded_at: chrono::Utc::now(),
            folder: PathBuf::from("/work"),
            base: Base::Snapshot(Manifest::default()),
        }
    }

    #[test]
    fn records_are_private_and_the_oldest_pruned() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let store = Store::new(tmp.path());
        for index in 0..4 {
            let record = record(&format!("job{index}"));
            store.fresh_job_dir(&record.job_id)?;
            store.save_copy(&record.job_id, "ab12", b"text")?;
            store.save(&record)?;
            // Distinct modification times, oldest first.
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + index);
            fs::File::options()
                .write(true)
                .open(store.record_path(&record.job_id))?
                .set_modified(at)?;
        }
        store.prune(2);
        let kept: Vec<bool> = (0..4)
            .map(|index| {
                store.has(
                    &JobId::parse(&format!("job{index}")).unwrap_or_else(|_| JobId::generate()),
                )
            })
            .collect();
        assert_eq!(kept, [false, false, true, true]);
        assert!(!tmp.path().join("snapshots/job0").exists());
        let job3 = JobId::parse("job3")?;
        assert_eq!(store.read_copy(&job3, "ab12")?, b"text");
        assert!(store.read_copy(&job3, "../x").is_err());
        assert_eq!(store.load(&job3)?.map(|r| r.job_id), Some(job3.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |path: PathBuf| fs::metadata(path).map(|m| m.permissions().mode() & 0o777);
            assert_eq!(mode(store.record_path(&job3))?, 0o600);
            assert_eq!(mode(store.job_dir(&job3))?, 0o700);
            assert_eq!(mode(store.job_dir(&job3).join("ab12"))?, 0o600);
        }
        let temp = store.temp_file("index")?;
        fs::write(temp.path(), b"x")?;
        let path = temp.path().to_path_buf();
        drop(temp);
        assert!(!path.exists());
        Ok(())
    }
}
