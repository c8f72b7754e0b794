//! Evidence bytes on the filesystem, content-addressed under the data dir:
//! `<data dir>/blobs/sha256/ab/cdef…` (the first two hex digits of the SHA-256 name a
//! folder, the other 62 the file).
//!
//! A blob is streamed into a temporary file under `blobs/tmp/` (the same filesystem), hashed
//! as it goes, synced, and renamed into place only once its digest is known, so a blob that
//! exists is always whole. Identical content is written once. A crash leaves at most a
//! temporary file, which [`Blobs::remove_stale_temporaries`] clears at the next start.
//!
//! With several replicas the data dir's `blobs/` must be one shared filesystem.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tokio::fs;
use tokio::io::AsyncWriteExt;

/// Temporary files older than this are left over from a crash (an upload of 100 MB takes
/// far less on any link that can reach a server).
const STALE_TEMPORARY: Duration = Duration::from_secs(24 * 3600);

/// The blob store of one data dir.
#[derive(Debug, Clone)]
pub struct Blobs {
    root: PathBuf,
}

/// A blob being written: bytes go to a temporary file and into the digest.
#[derive(Debug)]
pub struct BlobWriter {
    file: Option<fs::File>,
    temporary: PathBuf,
    hasher: Sha256,
    size: u64,
    /// Set once the temporary file was renamed into place or removed.
    settled: bool,
}

impl Blobs {
    pub fn new(data_dir: &Path) -> Blobs {
        Blobs {
            root: data_dir.join("blobs"),
        }
    }

    /// Starts a new blob in a fresh temporary file (mode 0600).
    ///
    /// # Errors
    /// When the folder or file cannot be created.
    pub async fn create(&self) -> io::Result<BlobWriter> {
        let folder = self.temporaries();
        fs::create_dir_all(&folder).await?;
        let temporary = folder.join(format!("{:032x}", rand::random::<u128>()));
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        options.mode(0o600);
        let file = options.open(&temporary).await?;
        Ok(BlobWriter {
            file: Some(file),
            temporary,
            hasher: Sha256::new(),
            size: 0,
            settled: false,
        })
    }

    /// Where the blob with this digest lives; `None` for anything but 64 lowercase hex digits.
    pub fn path(&self, sha256: &str) -> Option<PathBuf> {
        let well_formed = sha256.len() == 64
            && sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        well_formed.then(|| {
            self.root
                .join("sha256")
                .join(&sha256[..2])
                .join(&sha256[2..])
        })
    }

    /// Opens a stored blob for reading, checking it still has the recorded size.
    ///
    /// # Errors
    /// `NotFound` for a missing blob or a malformed digest, `InvalidData` for a blob of
    /// another size, or the I/O error.
    pub async fn open(&self, sha256: &str, size: u64) -> io::Result<fs::File> {
        let path = self
            .path(sha256)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not a digest"))?;
        let file = fs::File::open(&path).await?;
        let found = file.metadata().await?.len();
        if found != size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("blob {sha256} has {found} bytes, {size} were recorded"),
            ));
        }
        Ok(file)
    }

    /// Removes temporary files a crashed upload left behind. Recent ones are left alone: with
    /// several replicas another one may be writing them.
    pub fn remove_stale_temporaries(&self) {
        let Ok(entries) = std::fs::read_dir(self.temporaries()) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let stale = entry
                .metadata()
                .and_then(|meta| meta.modified())
                .is_ok_and(|modified| {
                    now.duration_since(modified).unwrap_or_default() > STALE_TEMPORARY
                });
            if stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Removes the blob with this digest if its file was last written or found again
    /// (see [`BlobWriter::commit`]) before `cutoff` (unix milliseconds): the caller checked
    /// that no row names it, and an upload of the same bytes since then touched the file.
    /// Answers whether it was removed.
    ///
    /// # Errors
    /// An I/O error other than the file being gone already.
    pub async fn remove_if_untouched(&self, sha256: &str, cutoff: i64) -> io::Result<bool> {
        let Some(path) = self.path(sha256) else {
            return Ok(false);
        };
        let modified = match fs::metadata(&path).await {
            Ok(meta) => meta.modified()?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(error),
        };
        let modified_ms = modified
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        if modified_ms >= cutoff {
            return Ok(false);
        }
        match fs::remove_file(&path).await {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn temporaries(&self) -> PathBuf {
        self.root.join("tmp")
    }
}

impl BlobWriter {
    /// Appends `bytes`.
    ///
    /// # Errors
    /// A write error.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("the blob was already settled"))?;
        file.write_all(bytes).await?;
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Lowercase hex SHA-256 of the bytes written so far.
    pub fn sha256(&self) -> String {
        crate::credentials::hex(&self.hasher.clone().finalize())
    }

    /// The temporary file, for a second look at what was written (JSON validation) once
    /// [`BlobWriter::sync`] returned.
    pub fn temporary_path(&self) -> &Path {
        &self.temporary
    }

    /// Flushes every byte written to the temporary file and syncs it to disk.
    ///
    /// # Errors
    /// A write error.
    pub async fn sync(&mut self) -> io::Result<()> {
        if let Some(file) = self.file.as_mut() {
            file.flush().await?;
            file.sync_all().await?;
        }
        Ok(())
    }

    /// Syncs the bytes and moves them to their content address. Returns `false` when a blob
    /// with this digest was already there (the new copy is dropped; it is the same bytes).
    ///
    /// # Errors
    /// An I/O error; the temporary file is removed either way.
    pub async fn commit(mut self, blobs: &Blobs) -> io::Result<bool> {
        let digest = self.sha256();
        let target = blobs
            .path(&digest)
            .ok_or_else(|| io::Error::other("a digest is always 64 hex digits"))?;
        self.sync().await?;
        self.file = None;
        if fs::try_exists(&target).await? {
            self.discard().await;
            // Found again: a sweep must not take it while the upload that found it records
            // its row (see [`Blobs::remove_if_untouched`]).
            touch(&target).await;
            return Ok(false);
        }
        let folder = target
            .parent()
            .ok_or_else(|| io::Error::other("a blob path always has a folder"))?;
        fs::create_dir_all(folder).await?;
        fs::rename(&self.temporary, &target).await?;
        self.settled = true;
        // Make the rename durable; not every filesystem can sync a folder.
        if let Ok(handle) = fs::File::open(folder).await {
            let _ = handle.sync_all().await;
        }
        Ok(true)
    }

    /// Drops what was written.
    pub async fn discard(mut self) {
        self.file = None;
        let _ = fs::remove_file(&self.temporary).await;
        self.settled = true;
    }
}

/// Sets a blob's modification time to now; a failure only shortens its protection.
async fn touch(path: &Path) {
    let path = path.to_owned();
    let touched = tokio::task::spawn_blocking(move || {
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|file| file.set_modified(SystemTime::now()))
    })
    .await;
    if !matches!(touched, Ok(Ok(()))) {
        tracing::warn!("could not touch a blob found again");
    }
}

impl Drop for BlobWriter {
    /// An upload that failed half-way (a lost connection, a refused body) leaves nothing.
    fn drop(&mut self) {
        if !self.settled {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files_under(path: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    found.extend(files_under(&path));
                } else {
                    found.push(path);
                }
            }
        }
        found
    }

    #[tokio::test]
    async fn blobs_are_content_addressed_and_written_once() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let blobs = Blobs::new(dir.path());
        let mut writer = blobs.create().await?;
        writer.write(b"hello ").await?;
        writer.write(b"world").await?;
        let digest = writer.sha256();
        assert_eq!(
            digest,
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        assert_eq!(writer.size(), 11);
        assert!(writer.commit(&blobs).await?);
        let path = dir
            .path()
            .join("blobs/sha256/b9/4d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9");
        assert_eq!(std::fs::read(&path)?, b"hello world");

        let mut again = blobs.create().await?;
        again.write(b"hello world").await?;
        assert!(
            !again.commit(&blobs).await?,
            "the same bytes are not written twice"
        );
        assert_eq!(files_under(dir.path()), vec![path]);

        let opened = blobs.open(&digest, 11).await;
        assert!(opened.is_ok());
        let wrong_size = blobs.open(&digest, 12).await.map(drop);
        assert_eq!(
            wrong_size.map_err(|err| err.kind()),
            Err(io::ErrorKind::InvalidData)
        );
        assert!(blobs.path("../../etc/passwd").is_none());
        assert!(blobs.path(&digest.to_uppercase()).is_none());
        Ok(())
    }

    fn millis(time: SystemTime) -> i64 {
        time.duration_since(SystemTime::UNIX_EPOCH)
            .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn a_blob_found_again_is_not_removed_as_untouched() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let blobs = Blobs::new(dir.path());
        let mut writer = blobs.create().await?;
        writer.write(b"same bytes").await?;
        let digest = writer.sha256();
        writer.commit(&blobs).await?;
        let path = blobs
            .path(&digest)
            .ok_or_else(|| io::Error::other("a digest"))?;
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let cutoff = millis(hour_ago + Duration::from_secs(60));

        // Just written: not older than the cutoff.
        assert!(!blobs.remove_if_untouched(&digest, millis(hour_ago)).await?);
        // Old, then found again by another upload of the same bytes: touched, kept.
        std::fs::File::options()
            .write(true)
            .open(&path)?
            .set_modified(hour_ago)?;
        let mut again = blobs.create().await?;
        again.write(b"same bytes").await?;
        assert!(!again.commit(&blobs).await?);
        assert!(!blobs.remove_if_untouched(&digest, cutoff).await?);
        assert!(path.is_file());
        // Old and not found again: removed; gone already is no error.
        std::fs::File::options()
            .write(true)
            .open(&path)?
            .set_modified(hour_ago)?;
        assert!(blobs.remove_if_untouched(&digest, cutoff).await?);
        assert!(!path.exists());
        assert!(!blobs.remove_if_untouched(&digest, cutoff).await?);
        assert!(
            !blobs
                .remove_if_untouched("../../etc/passwd", cutoff)
                .await?
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_abandoned_upload_leaves_nothing() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let blobs = Blobs::new(dir.path());
        let mut writer = blobs.create().await?;
        writer.write(b"partial").await?;
        drop(writer);
        let discarded = blobs.create().await?;
        discarded.discard().await;
        assert_eq!(files_under(dir.path()), Vec::<PathBuf>::new());
        Ok(())
    }
}
