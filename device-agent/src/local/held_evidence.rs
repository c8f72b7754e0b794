//! Evidence this computer holds for its owner (`tether-agent evidence hold …`, or every file
//! while `evidence off`): the file stays here, only its description went up (`held: true`),
//! and its owner previews, releases or discards it from the web
//! ([`crate::remote::frames::evidence_request`]).
//!
//! - Held files live beside the data dir, never inside it:
//!   `<data dir>-evidence/held/<job id>/<evidence id>`, folders 0700, files 0600, under the
//!   file's evidence id, never a name a run chose.
//! - `held/index.json` (0600, written atomically, under one lock in this process) lists each
//!   file: job, evidence id, name, kind, size and SHA-256 of the bytes on disk, what it is a
//!   variant of, whether it was released, and when it was held. The index is written before
//!   a file moves in, and a file is deleted before it leaves the index, so the index never
//!   misses a file it could still serve.
//! - A held file is read again by the same rules as any upload before a byte leaves
//!   ([`HeldStore::read`]): the same size and digest as when it was held, not a credential
//!   by name, a regular file with one name, text with the saved values hidden, a binary
//!   file holding one refused.
//! - Discarding a file discards its variants (the files whose `variant_of` is it).
//! - Held files, released or not, are kept [`KEEP_DAYS`] days after they were held, then
//!   [`HeldStore::sweep`] deletes them (the daemon sweeps when it starts and daily).

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_protocol::evidence::{EvidenceDetails, EvidenceHold, EvidenceSettings, EvidenceVariant};
use tether_protocol::jobs::{EvidenceKind, MAX_EVIDENCE_BYTES};
use tether_protocol::JobId;

use crate::local::evidence_files::{
    body_to_send, credential_like, evidence_root, open_checked, sha256_hex,
};
use crate::local::private_files::{create_private_dir, set_mode, FILE_MODE};
use crate::local::state::write_atomic;

/// The folder of held files inside the evidence root.
pub const HELD_FOLDER: &str = "held";
/// The index of held files inside [`HELD_FOLDER`].
pub const INDEX_FILE: &str = "index.json";
/// How long a held file is kept after it was held, released or not.
pub const KEEP_DAYS: i64 = 30;

/// Every change of an index goes through this lock: runs hold files while frames release
/// and discard them. One daemon per data dir (its run lock) makes this enough.
static INDEX_LOCK: Mutex<()> = Mutex::new(());

/// Whether a file goes up as a description only: every file while upload is off, else as
/// the hold setting says (`screenshots`: a screenshot and the variants made from one).
/// A variant follows the file it was made from (`origin`, that file's kind).
pub fn is_held(
    settings: EvidenceSettings,
    kind: EvidenceKind,
    origin: Option<EvidenceKind>,
) -> bool {
    if !settings.upload {
        return true;
    }
    let kind = origin.unwrap_or(kind);
    match settings.hold {
        EvidenceHold::All => true,
        EvidenceHold::None => false,
        EvidenceHold::Screenshots => kind == EvidenceKind::Screenshot,
    }
}

/// One held file, as the index keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldFile {
    pub job_id: JobId,
    pub evidence_id: String,
    /// The name the description carried.
    pub name: String,
    pub kind: EvidenceKind,
    /// Size of the bytes on disk.
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes on disk.
    pub sha256: String,
    /// Size and SHA-256 the description gave: of the bytes as they would be sent (text with
    /// the saved values hidden). What is sent later must match them.
    pub described_size: u64,
    pub described_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    /// The evidence id of the file this one was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_of: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<EvidenceVariant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<EvidenceDetails>,
    /// Its owner released it: the server keeps a copy; this one stays until swept.
    #[serde(default)]
    pub released: bool,
    pub held_at: DateTime<Utc>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    #[serde(default)]
    files: Vec<HeldFile>,
}

/// The held files of one agent.
#[derive(Debug, Clone)]
pub struct HeldStore {
    folder: PathBuf,
}

impl HeldStore {
    /// The store of the agent whose (absolute) data dir is `data_dir`.
    pub fn for_data_dir(data_dir: &Path) -> HeldStore {
        HeldStore::in_root(&evidence_root(data_dir))
    }

    /// The store inside the evidence root `root` (`<data dir>-evidence`).
    pub fn in_root(root: &Path) -> HeldStore {
        HeldStore {
            folder: root.join(HELD_FOLDER),
        }
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Where `file`'s bytes are kept.
    pub fn path_of(&self, file: &HeldFile) -> io::Result<PathBuf> {
        if !is_plain_id(&file.evidence_id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an evidence id that is not a plain id",
            ));
        }
        Ok(self
            .folder
            .join(file.job_id.as_str())
            .join(&file.evidence_id))
    }

    /// Moves `source` (a file of a run's evidence folder, already checked and hashed as
    /// `file` says) into the store and lists it. A file of the same job and id replaces the
    /// earlier one.
    ///
    /// # Errors
    /// When the folder, the index or the move fails; the index is then as it was.
    pub fn hold(&self, source: &Path, file: HeldFile) -> io::Result<()> {
        let target = self.path_of(&file)?;
        let _locked = lock();
        let mut index = self.load()?;
        let before = index.files.clone();
        index
            .files
            .retain(|held| !same(held, &file.job_id, &file.evidence_id));
        index.files.push(file);
        if let Some(job_folder) = target.parent() {
            create_private_dir(job_folder)?;
        }
        self.save(&index)?;
        let moved = fs::rename(source, &target).and_then(|()| set_mode(&target, FILE_MODE));
        if let Err(err) = moved {
            let _ = fs::remove_file(&target);
            self.save(&Index { files: before })?;
            return Err(err);
        }
        Ok(())
    }

    /// The held file with this evidence id, whichever job it belongs to.
    ///
    /// # Errors
    /// When the index cannot be read.
    pub fn find(&self, evidence_id: &str) -> io::Result<Option<HeldFile>> {
        let _locked = lock();
        Ok(self
            .load()?
            .files
            .into_iter()
            .find(|held| held.evidence_id == evidence_id))
    }

    /// Every held file, in the order they were held.
    ///
    /// # Errors
    /// When the index cannot be read.
    pub fn list(&self) -> io::Result<Vec<HeldFile>> {
        let _locked = lock();
        Ok(self.load()?.files)
    }

    /// Reads `file` again by the rules of any upload and gives the bytes that may be sent,
    /// every value of `hidden` hidden in text.
    ///
    /// # Errors
    /// The phrase saying why nothing may be sent.
    pub fn read(&self, file: &HeldFile, hidden: &[String]) -> Result<Vec<u8>, String> {
        if credential_like(&file.name) {
            return Err("a key or credential file".to_owned());
        }
        let path = self.path_of(file).map_err(|err| err.to_string())?;
        if fs::symlink_metadata(&path).is_err() {
            return Err("no longer on this computer".to_owned());
        }
        let (mut opened, stamp) = open_checked(&path)?;
        let mut bytes = Vec::new();
        (&mut opened)
            .take(MAX_EVIDENCE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|_| "cannot be read".to_owned())?;
        if stamp.size != file.size || bytes.len() as u64 != file.size {
            return Err("changed since it was held".to_owned());
        }
        if sha256_hex(&bytes) != file.sha256 {
            return Err("changed since it was held".to_owned());
        }
        body_to_send(bytes, hidden)
    }

    /// Marks a file released.
    ///
    /// # Errors
    /// When the index cannot be read or written, or no longer lists it.
    pub fn mark_released(&self, job_id: &JobId, evidence_id: &str) -> io::Result<()> {
        let _locked = lock();
        let mut index = self.load()?;
        let Some(file) = index
            .files
            .iter_mut()
            .find(|held| same(held, job_id, evidence_id))
        else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no longer held"));
        };
        file.released = true;
        self.save(&index)
    }

    /// Deletes a file and its variants, and drops them from the index; the names of what
    /// was deleted.
    ///
    /// # Errors
    /// The reason a file could not be deleted: the files deleted before it are gone from
    /// the index, it and the rest stay.
    pub fn discard(&self, job_id: &JobId, evidence_id: &str) -> Result<Vec<String>, String> {
        let _locked = lock();
        let mut index = self.load().map_err(|err| format!("the index: {err}"))?;
        let doomed: Vec<HeldFile> = index
            .files
            .iter()
            .filter(|held| {
                &held.job_id == job_id
                    && (held.evidence_id == evidence_id
                        || held.variant_of.as_deref() == Some(evidence_id))
            })
            .cloned()
            .collect();
        let mut deleted = Vec::new();
        let mut failed = None;
        for file in &doomed {
            match self.path_of(file).and_then(remove_if_present) {
                Ok(()) => deleted.push(file.clone()),
                Err(err) => {
                    failed = Some(format!("{} cannot be deleted: {err}", file.name));
                    break;
                }
            }
        }
        index.files.retain(|held| !deleted.contains(held));
        self.save(&index)
            .map_err(|err| format!("the index cannot be written: {err}"))?;
        self.remove_job_folder_if_empty(job_id);
        match failed {
            Some(why) => Err(why),
            None => Ok(deleted.into_iter().map(|file| file.name).collect()),
        }
    }

    /// Deletes what was held more than [`KEEP_DAYS`] days before `now`, and files of the
    /// store the index does not list that old; how many files went.
    ///
    /// # Errors
    /// When the index cannot be read or written.
    pub fn sweep(&self, now: DateTime<Utc>) -> io::Result<usize> {
        let _locked = lock();
        let cutoff = now - chrono::Duration::days(KEEP_DAYS);
        let mut index = self.load()?;
        let mut gone = 0;
        let mut kept = Vec::new();
        for file in index.files {
            let expired = file.held_at < cutoff;
            if expired && self.path_of(&file).and_then(remove_if_present).is_ok() {
                gone += 1;
            } else {
                kept.push(file);
            }
        }
        index.files = kept;
        self.save(&index)?;
        gone += self.sweep_unlisted(&index, cutoff);
        Ok(gone)
    }

    /// Files in the job folders that the index does not list (a move the process did not
    /// finish), once older than `cutoff`; then the empty job folders.
    fn sweep_unlisted(&self, index: &Index, cutoff: DateTime<Utc>) -> usize {
        let Ok(jobs) = fs::read_dir(&self.folder) else {
            return 0;
        };
        let mut gone = 0;
        for job in jobs.flatten() {
            let Ok(files) = fs::read_dir(job.path()) else {
                continue;
            };
            let job_name = job.file_name().to_string_lossy().into_owned();
            for entry in files.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let listed = index
                    .files
                    .iter()
                    .any(|held| held.job_id.as_str() == job_name && held.evidence_id == name);
                let old = entry
                    .metadata()
                    .and_then(|meta| meta.modified())
                    .is_ok_and(|modified| DateTime::<Utc>::from(modified) < cutoff);
                if !listed && old && fs::remove_file(entry.path()).is_ok() {
                    gone += 1;
                }
            }
            let _ = fs::remove_dir(job.path());
        }
        gone
    }

    fn remove_job_folder_if_empty(&self, job_id: &JobId) {
        let _ = fs::remove_dir(self.folder.join(job_id.as_str()));
    }

    /// The index; an empty one when there is none yet. One that cannot be parsed is set
    /// aside (`index.json.unreadable`): its files are then swept as unlisted.
    fn load(&self) -> io::Result<Index> {
        let path = self.folder.join(INDEX_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Index::default()),
            Err(err) => return Err(err),
        };
        match serde_json::from_slice(&bytes) {
            Ok(index) => Ok(index),
            Err(err) => {
                tracing::warn!("the held evidence index is unreadable, setting it aside: {err}");
                fs::rename(&path, path.with_extension("json.unreadable"))?;
                Ok(Index::default())
            }
        }
    }

    fn save(&self, index: &Index) -> io::Result<()> {
        create_private_dir(&self.folder)?;
        let bytes = serde_json::to_vec_pretty(index).map_err(io::Error::other)?;
        write_atomic(&self.folder.join(INDEX_FILE), &bytes)
    }
}

fn same(held: &HeldFile, job_id: &JobId, evidence_id: &str) -> bool {
    &held.job_id == job_id && held.evidence_id == evidence_id
}

/// Ids this agent makes (hex) and the server's id shape: never a path.
fn is_plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn remove_if_present(path: PathBuf) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    INDEX_LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
impl HeldFile {
    /// A held file of `bytes` as a test describes it (a job id that does not parse becomes a
    /// new one).
    pub(crate) fn sample(
        job_id: &str,
        id: &str,
        name: &str,
        kind: EvidenceKind,
        bytes: &[u8],
    ) -> HeldFile {
        HeldFile {
            job_id: JobId::parse(job_id).unwrap_or_else(|_| JobId::generate()),
            evidence_id: id.to_owned(),
            name: name.to_owned(),
            kind,
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
            described_size: bytes.len() as u64,
            described_sha256: sha256_hex(bytes),
            caption: None,
            variant_of: None,
            variant: None,
            details: None,
            released: false,
            held_at: Utc::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn job(id: &str) -> JobId {
        JobId::parse(id).unwrap_or_else(|_| JobId::generate())
    }

    fn held(job_id: &str, id: &str, bytes: &[u8]) -> HeldFile {
        HeldFile::sample(
            job_id,
            id,
            &format!("{id}.png"),
            EvidenceKind::Screenshot,
            bytes,
        )
    }

    /// A store in a temporary root, and a run folder to hold files from.
    fn store() -> Result<(tempfile::TempDir, HeldStore, PathBuf)> {
        let dir = tempfile::tempdir()?;
        let run = dir.path().join("job-1/1");
        fs::create_dir_all(&run)?;
        let store = HeldStore::in_root(dir.path());
        Ok((dir, store, run))
    }

    fn hold(store: &HeldStore, run: &Path, file: HeldFile, bytes: &[u8]) -> Result<()> {
        let source = run.join(&file.name);
        fs::write(&source, bytes)?;
        store.hold(&source, file)?;
        assert!(!source.exists());
        Ok(())
    }

    #[test]
    fn the_hold_decision_follows_the_setting_the_kind_and_the_upload_switch() {
        use EvidenceHold::{All, None, Screenshots};
        use EvidenceKind::{Image, Log, Screenshot};
        let cases = [
            // (upload, hold, kind, made from, held)
            (true, Screenshots, Screenshot, Option::None, true),
            (true, Screenshots, Image, Some(Screenshot), true),
            (true, Screenshots, Image, Option::None, false),
            (true, Screenshots, Image, Some(Image), false),
            (true, Screenshots, Log, Option::None, false),
            (true, All, Log, Option::None, true),
            (true, All, Image, Some(Image), true),
            (true, None, Screenshot, Option::None, false),
            (true, None, Image, Some(Screenshot), false),
            (false, None, Log, Option::None, true),
            (false, Screenshots, Log, Option::None, true),
            (false, All, Image, Option::None, true),
        ];
        for (upload, hold, kind, origin, expected) in cases {
            let settings = EvidenceSettings { upload, hold };
            assert_eq!(
                is_held(settings, kind, origin),
                expected,
                "{upload} {hold:?} {kind:?} {origin:?}"
            );
        }
    }

    #[test]
    fn the_index_is_private_atomic_and_survives_a_restart() -> Result<()> {
        let (dir, store, run) = store()?;
        hold(&store, &run, held("job-1", "aa11", PNG), PNG)?;
        let path = store.folder().join(INDEX_FILE);
        #[cfg(unix)]
        {
            use crate::local::private_files::{mode_of, DIR_MODE};
            assert_eq!(mode_of(&fs::metadata(&path)?), FILE_MODE);
            assert_eq!(mode_of(&fs::metadata(store.folder())?), DIR_MODE);
            let kept = store.folder().join("job-1/aa11");
            assert_eq!(mode_of(&fs::metadata(&kept)?), FILE_MODE);
            assert_eq!(fs::read(&kept)?, PNG);
        }
        // No temporary file is left beside it.
        let names: Vec<String> = fs::read_dir(store.folder())?
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        store.mark_released(&job("job-1"), "aa11")?;

        // A new process reads the same index.
        let again = HeldStore::in_root(dir.path());
        let found = again.find("aa11")?.ok_or("not found")?;
        assert!(found.released);
        assert_eq!(found, HeldStore::in_root(dir.path()).list()?[0]);
        assert_eq!(again.find("bb22")?, Option::None);
        Ok(())
    }

    #[test]
    fn discarding_a_file_discards_its_variants_only() -> Result<()> {
        let (_dir, store, run) = store()?;
        hold(&store, &run, held("job-1", "shot", PNG), PNG)?;
        let mut preview = held("job-1", "small", b"small");
        preview.variant_of = Some("shot".to_owned());
        preview.variant = Some(EvidenceVariant::Preview);
        hold(&store, &run, preview, b"small")?;
        hold(&store, &run, held("job-1", "other", b"other"), b"other")?;
        let mut elsewhere = held("job-2", "foreign", b"x");
        elsewhere.variant_of = Some("shot".to_owned());
        hold(&store, &run, elsewhere, b"x")?;

        let deleted = store.discard(&job("job-1"), "shot")?;
        assert_eq!(deleted, ["shot.png", "small.png"]);
        let left: Vec<String> = store
            .list()?
            .into_iter()
            .map(|file| file.evidence_id)
            .collect();
        assert_eq!(left, ["other", "foreign"]);
        assert!(!store.folder().join("job-1/shot").exists());
        assert!(!store.folder().join("job-1/small").exists());
        assert!(store.folder().join("job-1/other").exists());
        assert_eq!(store.discard(&job("job-1"), "shot")?, Vec::<String>::new());
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn a_file_that_cannot_be_deleted_is_refused_not_claimed() -> Result<()> {
        use crate::local::private_files::set_mode;
        let (_dir, store, run) = store()?;
        hold(&store, &run, held("job-1", "shot", PNG), PNG)?;
        let job_folder = store.folder().join("job-1");
        set_mode(&job_folder, 0o500)?;
        let refused = store.discard(&job("job-1"), "shot");
        let _ = set_mode(&job_folder, 0o700);
        if refused.is_ok() {
            // Running as root: nothing can be refused here.
            return Ok(());
        }
        assert!(refused.is_err_and(|why| why.starts_with("shot.png cannot be deleted")));
        assert!(store.find("shot")?.is_some());
        Ok(())
    }

    #[test]
    fn a_held_file_is_read_again_by_the_upload_rules() -> Result<()> {
        let (_dir, store, run) = store()?;
        let hidden = vec!["tok-9-secret".to_owned()];
        let log = b"value tok-9-secret here\n";
        let mut text = held("job-1", "log", log);
        text.name = "run.log".to_owned();
        hold(&store, &run, text.clone(), log)?;
        assert_eq!(store.read(&text, &hidden)?, b"value [hidden] here\n");

        let dump = b"\0\x01tok-9-secret";
        hold(&store, &run, held("job-1", "dump", dump), dump)?;
        let binary = store.find("dump")?.ok_or("dump")?;
        assert_eq!(
            store.read(&binary, &hidden),
            Err("holds a saved secret value".to_owned())
        );

        hold(&store, &run, held("job-1", "shot", PNG), PNG)?;
        let shot = store.find("shot")?.ok_or("shot")?;
        assert_eq!(store.read(&shot, &hidden)?, PNG);
        fs::write(store.path_of(&shot)?, b"\x89PNG other bytes")?;
        assert_eq!(
            store.read(&shot, &hidden),
            Err("changed since it was held".to_owned())
        );
        fs::remove_file(store.path_of(&shot)?)?;
        assert_eq!(
            store.read(&shot, &hidden),
            Err("no longer on this computer".to_owned())
        );
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/hostname", store.path_of(&shot)?)?;
            assert!(store.read(&shot, &hidden).is_err());
        }
        let mut named = shot;
        named.name = "api_token.png".to_owned();
        assert_eq!(
            store.read(&named, &hidden),
            Err("a key or credential file".to_owned())
        );
        Ok(())
    }

    #[test]
    fn old_files_are_swept_and_new_ones_kept() -> Result<()> {
        let (_dir, store, run) = store()?;
        let mut old = held("job-1", "old", b"old");
        old.held_at = Utc::now() - chrono::Duration::days(KEEP_DAYS + 1);
        old.released = true;
        hold(&store, &run, old, b"old")?;
        hold(&store, &run, held("job-1", "new", b"new"), b"new")?;
        assert_eq!(store.sweep(Utc::now())?, 1);
        assert_eq!(store.find("old")?, Option::None);
        assert!(store.find("new")?.is_some());
        assert!(!store.folder().join("job-1/old").exists());
        // An unlisted file is swept once it is that old too.
        fs::write(store.folder().join("job-1/stray"), b"x")?;
        assert_eq!(store.sweep(Utc::now())?, 0);
        let later = Utc::now() + chrono::Duration::days(KEEP_DAYS + 1);
        assert_eq!(store.sweep(later)?, 2);
        assert!(!store.folder().join("job-1").exists());
        Ok(())
    }

    #[test]
    fn an_id_that_is_a_path_is_never_used_as_one() -> Result<()> {
        let (_dir, store, _run) = store()?;
        let mut file = held("job-1", "x", b"x");
        file.evidence_id = "../../escape".to_owned();
        assert!(store.path_of(&file).is_err());
        Ok(())
    }
}
