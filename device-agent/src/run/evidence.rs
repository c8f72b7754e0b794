//! Evidence: the files a run leaves in its evidence folder (`TETHER_EVIDENCE_DIR`), sent to
//! the server under the run's lease after the program ends and before the run completes
//! (seed 003 §4.11). Recipe runs and ACP runs share [`RunEvidence`]: the same folder, the
//! same variable in the environment of everything the run starts, the same delivery.
//!
//! - Each attempt gets its own folder, `<data dir>-evidence/<job id>/<attempt>/`: beside the
//!   data dir, never inside it, since the guard keeps the whole data dir from runs.
//! - Only regular files directly in that folder are sent, at most 100, none over 100 MB.
//!   Links, hard links (a second name of a file that may live elsewhere), key and
//!   credential files, and binary files holding a saved secret value are refused and named
//!   in the job's output, never sent ([`crate::local::evidence_files`]). Text has every
//!   saved secret value hidden first, as the run's output does.
//! - A file is read and hashed once when the folder is scanned, and read again right before
//!   it is sent: it goes only if it is still the same file with the same bytes. A file the
//!   agent itself put there ([`Recorder`]: a capture, an attached copy) goes with what was
//!   recorded of it (kind, caption, variant, details), only while its bytes still have the
//!   recorded digest; a variant goes after the file it was made from, naming it
//!   (`variantOf`), and not at all when that file was not sent.
//! - A file is **held** ([`crate::local::held_evidence`]) when evidence upload is off (then
//!   every file is), or when `evidence hold` covers it (`screenshots`: screenshots and their
//!   variants; `all`): it moves to the held folder and only its description goes up
//!   (`held: true`, no bytes; the size and digest of the bytes as they would be sent).
//! - Each file's id is stable for its job, attempt and name, so a retry after a lost answer
//!   is a repeat (200) on the server, not a second copy.
//! - The folder is removed once everything else in it reached the server.
//! - A `stale_lease` stops the uploads (after the one reattach an outage allows).

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tether_protocol::evidence::{EvidenceDetails, EvidenceSettings, EvidenceVariant};
use tether_protocol::jobs::{
    ClaimedJob, EvidenceKind, EvidenceMeta, MAX_EVIDENCE_BYTES, MAX_EVIDENCE_FILES,
};
use tether_protocol::text::{sanitize, TextKind};
use tether_protocol::JobId;
use tokio::sync::mpsc;

use crate::local::evidence_files::{
    body_to_send, credential_like, evidence_root, is_text, open_checked, sha256_hex, stamp_of,
    Stamp,
};
use crate::local::held_evidence::{is_held, HeldFile, HeldStore};
use crate::local::private_files::{create_private_dir, hex};
use crate::local::state::Config;
use crate::local::vault::redact;
use crate::policy::guard::Guard;
use crate::remote::backoff::Backoff;
use crate::remote::client::{DeviceClient, RemoteError};
use crate::run::lease::{Recovery, RunLease};
use crate::run::stop::{RunStop, StopReason};

/// The variable that tells a run where to leave its evidence.
pub const EVIDENCE_DIR_VAR: &str = "TETHER_EVIDENCE_DIR";
/// Tries of one upload while the server cannot be reached, before it is given up.
const MAX_TRANSIENT_TRIES: u32 = 5;

/// Where this agent's evidence folders live: `<data dir>-evidence`.
pub fn root(data_dir: &Path) -> PathBuf {
    evidence_root(&crate::policy::guard::absolute(data_dir))
}

/// Creates (mode 0700) and returns the real path of the folder of `job`'s attempt.
///
/// # Errors
/// When it cannot be created.
pub fn create_run_folder(data_dir: &Path, job: &ClaimedJob) -> io::Result<PathBuf> {
    let folder = root(data_dir)
        .join(job.id.as_str())
        .join(job.attempt.to_string());
    create_private_dir(&folder)?;
    folder.canonicalize()
}

/// The evidence folder of one run attempt, from before its program starts until it is
/// delivered: shown as [`EVIDENCE_DIR_VAR`] to every program the run starts (a recipe; an
/// ACP agent and each of its terminals), writable in their sandbox.
#[derive(Debug)]
pub struct RunEvidence {
    folder: PathBuf,
    recorder: Recorder,
}

/// What the agent itself said of a file it put in a run's evidence folder (a capture, a
/// file `tether_attach` copied there): its kind, caption, variant and what was measured,
/// and the digest it was written with, so delivery sends it only while it is that file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The file's name in the evidence folder.
    pub name: String,
    pub kind: EvidenceKind,
    pub caption: Option<String>,
    /// The name (in the same folder) of the file this one was made from.
    pub variant_of: Option<String>,
    pub variant: Option<EvidenceVariant>,
    pub details: Option<EvidenceDetails>,
    /// Lowercase hex SHA-256 of the bytes as written.
    pub sha256: String,
}

/// The run's record of [`Recorded`] files, shared by the tool channel (which records) and
/// the delivery (which reads). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Recorder {
    folder: PathBuf,
    recorded: Arc<Mutex<Vec<Recorded>>>,
}

impl Recorder {
    pub fn new(folder: PathBuf) -> Recorder {
        Recorder {
            folder,
            recorded: Arc::default(),
        }
    }

    /// The run's evidence folder.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Notes a file written into the folder; a later record of the same name replaces it.
    pub fn record(&self, recorded: Recorded) {
        let mut all = self.lock();
        all.retain(|earlier| earlier.name != recorded.name);
        all.push(recorded);
    }

    /// What was recorded, in the order it was.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.lock().clone()
    }

    /// `wanted` if no file of the folder has that name yet, else `stem-2.ext`, `stem-3.ext`,
    /// …: files never overwrite each other.
    pub fn unused_name(&self, wanted: &str) -> String {
        let (stem, extension) = match wanted.rsplit_once('.') {
            Some((stem, extension)) if !stem.is_empty() => (stem, format!(".{extension}")),
            _ => (wanted, String::new()),
        };
        let mut name = wanted.to_owned();
        let mut n = 1;
        while self.folder.join(&name).symlink_metadata().is_ok() {
            n += 1;
            name = format!("{stem}-{n}{extension}");
        }
        name
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Recorded>> {
        self.recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl RunEvidence {
    /// Makes the attempt's folder beside the agent's data dir (the one `guard` was built
    /// for), accepted by the guard. `None`, logged, when it cannot be: the run goes on
    /// without one.
    pub fn prepare(job: &ClaimedJob, guard: &Guard) -> Option<RunEvidence> {
        let folder = match create_run_folder(guard.data_dir(), job) {
            Ok(folder) => folder,
            Err(err) => {
                tracing::warn!(job = %job.id, "no evidence folder for this run: {err}");
                return None;
            }
        };
        match guard.check_access(&folder) {
            Ok(()) => Some(RunEvidence {
                recorder: Recorder::new(folder.clone()),
                folder,
            }),
            Err(refusal) => {
                tracing::warn!(job = %job.id, "no evidence folder for this run: {refusal}");
                remove_run_folder(&folder);
                None
            }
        }
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Where the tool channel records the files it puts in the folder.
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// Shows the folder to a program of the run: [`EVIDENCE_DIR_VAR`] in `env` (replacing
    /// an inherited one), the folder among the `writable` paths of its sandbox policy.
    pub fn grant(&self, env: &mut Vec<(String, String)>, writable: &mut Vec<PathBuf>) {
        env.retain(|(name, _)| name != EVIDENCE_DIR_VAR);
        env.push((
            EVIDENCE_DIR_VAR.to_owned(),
            self.folder.display().to_string(),
        ));
        writable.push(self.folder.clone());
    }

    /// Nothing ran: the folder goes.
    pub fn discard(self) {
        remove_run_folder(&self.folder);
    }

    /// After the run's programs ended and before it completes: [`deliver`]s the folder as
    /// the owner's `evidence on|off` and `evidence hold` in `config` say, every saved value
    /// in `hidden` hidden.
    pub async fn deliver(
        self,
        client: &DeviceClient,
        lease: &RunLease,
        config: &Config,
        hidden: &[String],
        stop: &RunStop,
        notes: &mpsc::Sender<String>,
    ) {
        let delivery = Delivery {
            settings: EvidenceSettings {
                upload: config.evidence_upload,
                hold: config.evidence_hold,
            },
            hidden: hidden.to_vec(),
            recorded: self.recorder.recorded(),
            held: HeldStore::in_root(&root_of(&self.folder)),
        };
        deliver(client, lease, self.folder, delivery, stop, notes).await;
    }
}

/// The evidence root a run folder (`<root>/<job>/<attempt>`) sits in.
fn root_of(folder: &Path) -> PathBuf {
    folder
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| folder.to_path_buf(), Path::to_path_buf)
}

/// How the run's evidence goes.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `upload: false` after `tether-agent evidence off` (everything held), and which files
    /// are held anyway (`evidence hold`).
    pub settings: EvidenceSettings,
    /// Every saved secret value: hidden in text, and a binary file holding one is refused.
    pub hidden: Vec<String>,
    /// What the agent recorded of the files it put in the folder.
    pub recorded: Vec<Recorded>,
    /// Where held files go.
    pub held: HeldStore,
}

/// Sends what the run left in `folder`, naming in `notes` (the run's output) every file
/// left out and why; a held file moves to the held folder first and only its description
/// goes. Stops at once on a lost lease, a revocation or a shutdown. The folder is removed
/// once everything left in it reached the server.
pub async fn deliver(
    client: &DeviceClient,
    lease: &RunLease,
    folder: PathBuf,
    delivery: Delivery,
    stop: &RunStop,
    notes: &mpsc::Sender<String>,
) {
    let scan_folder = folder.clone();
    let Ok(mut scan) = tokio::task::spawn_blocking(move || scan(&scan_folder)).await else {
        return;
    };
    if scan.found.is_empty() && scan.refused.is_empty() {
        remove_run_folder(&folder);
        return;
    }
    for refusal in &scan.refused {
        note(notes, refusal).await;
    }
    let recorded: HashMap<String, Recorded> = delivery
        .recorded
        .iter()
        .map(|recorded| (recorded.name.clone(), recorded.clone()))
        .collect();
    // A variant goes after the file it was made from, which it names.
    scan.found.sort_by_key(|found| {
        recorded
            .get(&found.name)
            .is_some_and(|r| r.variant_of.is_some())
    });
    let mut stored: HashMap<String, Origin> = HashMap::new();
    let (mut sent, mut held) = (0_usize, 0_usize);
    let mut complete = scan.refused.is_empty();
    for found in scan.found {
        if stop
            .current()
            .is_some_and(|reason| reason >= StopReason::Shutdown)
        {
            return;
        }
        let said = recorded.get(&found.name).cloned();
        let origin = match origin_of(said.as_ref(), &stored) {
            Ok(origin) => origin,
            Err(refusal) => {
                complete = false;
                note(notes, &format!("{}: {refusal}, not sent", found.name)).await;
                continue;
            }
        };
        let ready = match ready_to_send(lease, &delivery, found, said, origin).await {
            Some(Ok(ready)) => ready,
            Some(Err(refusal)) => {
                complete = false;
                note(notes, &refusal).await;
                continue;
            }
            None => return,
        };
        match send(client, lease, &ready, stop).await {
            Sent::Stored => {
                *(if ready.meta.held {
                    &mut held
                } else {
                    &mut sent
                }) += 1;
                let origin = Origin {
                    id: ready.meta.id.clone(),
                    kind: ready.meta.kind,
                };
                stored.insert(ready.name.clone(), origin);
            }
            Sent::Refused(why) => {
                complete = false;
                note(notes, &format!("{} was not stored: {why}", ready.meta.name)).await;
            }
            Sent::Stopped => return,
        }
    }
    note(notes, &summary(sent, held, delivery.settings.upload)).await;
    if complete {
        remove_run_folder(&folder);
    } else {
        tracing::info!(job = %lease.job_id(), folder = %folder.display(), "evidence kept on this computer");
    }
}

/// The line that closes the delivery in the run's output.
fn summary(sent: usize, held: usize, upload: bool) -> String {
    let mut line = format!("{sent} evidence file(s) sent");
    if held > 0 {
        line.push_str(&format!(
            "; {held} held on this computer, only their descriptions sent"
        ));
        if !upload {
            line.push_str(" (evidence upload is off)");
        }
    }
    line
}

/// A file already stored for this attempt, as a variant names it.
#[derive(Debug, Clone)]
pub struct Origin {
    pub id: String,
    pub kind: EvidenceKind,
}

/// The file a recorded variant was made from, if it was stored.
fn origin_of(
    said: Option<&Recorded>,
    stored: &HashMap<String, Origin>,
) -> Result<Option<Origin>, String> {
    let Some(of) = said.and_then(|said| said.variant_of.as_ref()) else {
        return Ok(None);
    };
    match stored.get(of) {
        Some(origin) => Ok(Some(origin.clone())),
        None => Err(format!("made from {of}, which was not sent")),
    }
}

/// Reads `found` again and makes it ready (off the async threads); a held one is moved to
/// the held folder. `None` when the work could not be done at all.
async fn ready_to_send(
    lease: &RunLease,
    delivery: &Delivery,
    found: Found,
    said: Option<Recorded>,
    origin: Option<Origin>,
) -> Option<Result<Ready, String>> {
    let (job_id, attempt, delivery) = (lease.job_id().clone(), lease.attempt(), delivery.clone());
    tokio::task::spawn_blocking(move || {
        let file = Planned {
            job_id: &job_id,
            attempt,
            said: said.as_ref(),
            origin: origin.as_ref(),
        };
        let ready = prepare(&found, &file, &delivery.hidden, delivery.settings)?;
        if let Some(kept) = &ready.kept {
            delivery
                .held
                .hold(&found.path, kept.clone())
                .map_err(|err| format!("{}: cannot be held on this computer ({err}), not sent", found.name))?;
            tracing::info!(job = %job_id, evidence = %ready.meta.id, "evidence held on this computer");
        }
        Ok(ready)
    })
    .await
    .ok()
}

/// One file of the evidence folder as first read.
#[derive(Debug, Clone)]
pub struct Found {
    pub name: String,
    path: PathBuf,
    stamp: Stamp,
    raw_sha256: [u8; 32],
}

/// What the folder holds: files to send (in name order), and a sentence for each file left
/// out.
#[derive(Debug, Default)]
pub struct Scan {
    pub found: Vec<Found>,
    pub refused: Vec<String>,
}

/// Reads the folder: regular files directly in it, checked and hashed.
pub fn scan(folder: &Path) -> Scan {
    let mut scan = Scan::default();
    let Ok(entries) = fs::read_dir(folder) else {
        return scan;
    };
    let mut entries: Vec<fs::DirEntry> = entries.flatten().collect();
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            scan.refused.push(format!(
                "{:?}: a file name that is not UTF-8, not sent",
                entry.file_name()
            ));
            continue;
        };
        if scan.found.len() as u64 >= MAX_EVIDENCE_FILES {
            scan.refused.push(format!(
                "{name}: over the limit of {MAX_EVIDENCE_FILES} files, not sent"
            ));
            continue;
        }
        match check(&name, &entry.path()) {
            Ok(found) => scan.found.push(found),
            Err(why) => scan.refused.push(format!("{name}: {why}, not sent")),
        }
    }
    scan
}

/// A file's description, and the bytes to send with it (none for a held one).
#[derive(Debug, Clone)]
pub struct Ready {
    /// The file's name in the folder.
    pub name: String,
    pub meta: EvidenceMeta,
    pub body: Vec<u8>,
    /// For a held file: what the held folder's index keeps of it.
    pub kept: Option<HeldFile>,
}

/// What is known of a file besides its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Planned<'a> {
    pub job_id: &'a JobId,
    pub attempt: u32,
    /// What the agent recorded of it, if it put it there.
    pub said: Option<&'a Recorded>,
    /// The stored file it is a variant of.
    pub origin: Option<&'a Origin>,
}

/// Reads `found` again and makes it ready to send, if it is still the file that was
/// scanned (and, for a recorded one, the file that was recorded). Text has every saved
/// value in `hidden` replaced; a binary file holding one is refused. A file `settings`
/// hold goes as its description only, with the size and digest of what would be sent.
///
/// # Errors
/// A sentence naming the file and why it is not sent.
pub fn prepare(
    found: &Found,
    file: &Planned<'_>,
    hidden: &[String],
    settings: EvidenceSettings,
) -> Result<Ready, String> {
    let name = &found.name;
    let refused = |why: &str| format!("{name}: {why}, not sent");
    let bytes = read_again(found).map_err(|why| refused(&why))?;
    let raw_sha256 = sha256_hex(&bytes);
    if file.said.is_some_and(|said| said.sha256 != raw_sha256) {
        return Err(refused("changed since the agent recorded it"));
    }
    let raw_size = bytes.len() as u64;
    let kind = file
        .said
        .map_or_else(|| kind_of(name, is_text(&bytes)), |said| said.kind);
    let held = is_held(settings, kind, file.origin.map(|origin| origin.kind));
    let body = body_to_send(bytes, hidden).map_err(|why| refused(&why))?;
    let meta = EvidenceMeta {
        id: evidence_id(file.job_id, file.attempt, name),
        kind,
        name: shown_name(name),
        size: body.len() as u64,
        sha256: sha256_hex(&body),
        mime: None,
        caption: file
            .said
            .and_then(|said| said.caption.as_deref())
            .map(|caption| redact(caption, hidden)),
        local: false,
        held,
        variant_of: file.origin.map(|origin| origin.id.clone()),
        variant: file.said.and_then(|said| said.variant),
        details: file.said.and_then(|said| said.details),
    };
    let kept = held.then(|| HeldFile {
        job_id: file.job_id.clone(),
        evidence_id: meta.id.clone(),
        name: meta.name.clone(),
        kind,
        size: raw_size,
        sha256: raw_sha256,
        described_size: meta.size,
        described_sha256: meta.sha256.clone(),
        caption: meta.caption.clone(),
        variant_of: meta.variant_of.clone(),
        variant: meta.variant,
        details: meta.details,
        released: false,
        held_at: chrono::Utc::now(),
    });
    let body = if held { Vec::new() } else { body };
    Ok(Ready {
        name: name.clone(),
        meta,
        body,
        kept,
    })
}

/// The file's name as the server keeps it: any space (macOS puts U+202F before "AM" in its
/// screenshots' names) is a plain space, and what the name rule refuses (invisible,
/// direction-changing or blank characters) is U+FFFD, so no file is refused for its name.
fn shown_name(name: &str) -> String {
    let spaced: String = name
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    sanitize(&spaced, TextKind::Name).into_owned()
}

/// Stable for one file name of one attempt of a job: 32 hex digits.
pub fn evidence_id(job_id: &JobId, attempt: u32, name: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(job_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(attempt.to_string().as_bytes());
    hasher.update([0]);
    hasher.update(name.as_bytes());
    hex(&hasher.finalize()[..16])
}

/// The kind a file's name suggests; text under a name that says nothing is a log, a
/// binary file under a text name is a plain file.
pub fn kind_of(name: &str, text: bool) -> EvidenceKind {
    let lower = name.to_ascii_lowercase();
    let extension = lower
        .rsplit_once('.')
        .map_or("", |(_, extension)| extension);
    match extension {
        "png" | "jpg" | "jpeg" | "gif" | "webp" if lower.starts_with("screen") => {
            EvidenceKind::Screenshot
        }
        "png" | "jpg" | "jpeg" | "gif" | "webp" => EvidenceKind::Image,
        "mp4" | "webm" | "mov" => EvidenceKind::Video,
        "zip" if lower.contains("trace") => EvidenceKind::Trace,
        "pdf" => EvidenceKind::Report,
        "md" | "markdown" | "csv" | "json" | "html" | "htm" if text => EvidenceKind::Report,
        "log" | "txt" | "out" | "" if text => EvidenceKind::Log,
        _ => EvidenceKind::File,
    }
}

/// How one upload ended.
enum Sent {
    Stored,
    /// The server refused this file for good (415, 413, …); the others still go.
    Refused(String),
    /// The lease is lost, the device revoked or the agent stopping: nothing more goes.
    Stopped,
}

async fn send(client: &DeviceClient, lease: &RunLease, ready: &Ready, stop: &RunStop) -> Sent {
    let mut backoff = Backoff::new();
    let mut tries = 0;
    loop {
        let token = lease.token();
        let wait = match client
            .upload_evidence(lease.job_id(), &token, &ready.meta, ready.body.clone())
            .await
        {
            Ok(_) => {
                lease.confirmed(&token);
                return Sent::Stored;
            }
            Err(RemoteError::StaleLease) => match lease.recover(&token).await {
                Recovery::Renewed => continue,
                Recovery::Later(at_least) => backoff.next_delay().max(at_least),
                Recovery::Lost => {
                    stop.raise(StopReason::LeaseLost);
                    return Sent::Stopped;
                }
                Recovery::Revoked => {
                    stop.raise(StopReason::Revoked);
                    return Sent::Stopped;
                }
            },
            Err(RemoteError::Revoked) => {
                stop.raise(StopReason::Revoked);
                return Sent::Stopped;
            }
            Err(err) if err.is_transient() && tries < MAX_TRANSIENT_TRIES => {
                tries += 1;
                tracing::warn!(job = %lease.job_id(), file = %ready.meta.name, "evidence not delivered, retrying: {err}");
                backoff.next_delay().max(err.retry_after())
            }
            Err(err) => return Sent::Refused(err.to_string()),
        };
        if stop.wait_at_least(StopReason::Shutdown, wait).await {
            return Sent::Stopped;
        }
    }
}

async fn note(notes: &mpsc::Sender<String>, text: &str) {
    let _ = notes.send(format!("evidence: {text}")).await;
}

/// The first look at one entry: a regular file with one name, not a credential, within the
/// size limit, hashed.
fn check(name: &str, path: &Path) -> Result<Found, String> {
    let listed = fs::symlink_metadata(path).map_err(|_| "cannot be read".to_owned())?;
    if listed.file_type().is_symlink() {
        return Err("a link".to_owned());
    }
    if listed.is_dir() {
        return Err("a folder (only files directly in the evidence folder are sent)".to_owned());
    }
    if credential_like(name) {
        return Err("a key or credential file".to_owned());
    }
    let (mut file, stamp) = open_checked(path)?;
    let mut hasher = Sha256::new();
    io::copy(&mut (&mut file).take(MAX_EVIDENCE_BYTES + 1), &mut hasher)
        .map_err(|_| "cannot be read".to_owned())?;
    Ok(Found {
        name: name.to_owned(),
        path: path.to_path_buf(),
        stamp,
        raw_sha256: hasher.finalize().into(),
    })
}

/// The file's bytes, if it is still the one [`check`] saw: same file (device and inode,
/// also under its name), same size and time, same digest.
fn read_again(found: &Found) -> Result<Vec<u8>, String> {
    let changed = || "changed after the run ended".to_owned();
    let (mut file, stamp) = open_checked(&found.path)?;
    if stamp != found.stamp {
        return Err(changed());
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_EVIDENCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| "cannot be read".to_owned())?;
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    let listed = fs::symlink_metadata(&found.path).map_err(|_| changed())?;
    if digest != found.raw_sha256 || stamp_of(&listed) != found.stamp {
        return Err(changed());
    }
    Ok(bytes)
}

/// Removes an attempt's folder, and its job's folder when that is left empty.
pub fn remove_run_folder(folder: &Path) {
    let _ = fs::remove_dir_all(folder);
    if let Some(job_folder) = folder.parent() {
        let _ = fs::remove_dir(job_folder);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn job_id() -> JobId {
        JobId::parse("job-1").unwrap_or_else(|_| JobId::generate())
    }

    fn names(scan: &Scan) -> Vec<&str> {
        scan.found.iter().map(|found| found.name.as_str()).collect()
    }

    #[test]
    fn only_plain_files_directly_in_the_folder_are_taken() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let folder = dir.path();
        fs::write(folder.join("b.log"), "second\n")?;
        fs::write(folder.join("a.png"), PNG)?;
        fs::write(folder.join(".env"), "TOKEN=x\n")?;
        fs::write(folder.join("id_rsa"), "key\n")?;
        fs::write(folder.join("api_token.txt"), "x\n")?;
        fs::write(folder.join(".bash_history"), "x\n")?;
        fs::write(folder.join("session.webm"), "x\n")?;
        fs::create_dir(folder.join("sub"))?;
        fs::write(folder.join("sub/deep.log"), "deep\n")?;
        let outside = dir.path().join("sub/outside.txt");
        fs::write(&outside, "outside\n")?;
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/passwd", folder.join("link.txt"))?;
            fs::hard_link(&outside, folder.join("hard.txt"))?;
        }
        let scan = scan(folder);
        assert_eq!(names(&scan), ["a.png", "b.log", "session.webm"]);
        let refused = scan.refused.join("\n");
        for expected in [
            ".env: a key or credential file, not sent",
            "id_rsa: a key or credential file, not sent",
            "api_token.txt: a key or credential file, not sent",
            ".bash_history: a key or credential file, not sent",
            "sub: a folder",
            #[cfg(unix)]
            "link.txt: a link, not sent",
            #[cfg(unix)]
            "hard.txt: a file with other names",
        ] {
            assert!(refused.contains(expected), "{expected:?} in {refused}");
        }
        assert!(super::scan(&folder.join("missing")).found.is_empty());
        Ok(())
    }

    #[test]
    fn at_most_100_files_are_taken() -> Result<()> {
        let dir = tempfile::tempdir()?;
        for index in 0..102 {
            fs::write(dir.path().join(format!("{index:03}.log")), "x\n")?;
        }
        let scan = scan(dir.path());
        assert_eq!(scan.found.len(), 100);
        assert_eq!(scan.refused.len(), 2);
        assert!(scan.refused[0].starts_with("100.log: over the limit"));
        Ok(())
    }

    const UPLOAD: EvidenceSettings = EvidenceSettings {
        upload: true,
        hold: tether_protocol::evidence::EvidenceHold::None,
    };

    fn plain(found: &Found, hidden: &[String], settings: EvidenceSettings) -> Result<Ready> {
        let job_id = job_id();
        let file = Planned {
            job_id: &job_id,
            attempt: 1,
            said: None,
            origin: None,
        };
        Ok(prepare(found, &file, hidden, settings)?)
    }

    #[test]
    fn text_is_redacted_and_binary_holding_a_secret_is_refused() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let hidden = vec!["tok-123-secret".to_owned()];
        fs::write(dir.path().join("run.log"), "token is tok-123-secret\n")?;
        fs::write(dir.path().join("dump.bin"), b"\0\x01tok-123-secret\xff")?;
        fs::write(dir.path().join("screen.png"), PNG)?;
        let scan = scan(dir.path());
        let refused = plain(&scan.found[0], &hidden, UPLOAD).map(|ready| ready.meta.name);
        assert_eq!(
            refused.map_err(|err| err.to_string()),
            Err("dump.bin: holds a saved secret value, not sent".to_owned())
        );
        let log = plain(&scan.found[1], &hidden, UPLOAD)?;
        assert_eq!(log.body, b"token is [hidden]\n");
        assert_eq!(log.meta.kind, EvidenceKind::Log);
        assert_eq!(log.meta.size, log.body.len() as u64);
        assert_eq!(log.meta.sha256, hex(&Sha256::digest(&log.body)));
        assert!(!log.meta.local && !log.meta.held && log.kept.is_none());
        let png = plain(&scan.found[2], &hidden, UPLOAD)?;
        assert_eq!(
            (png.body.as_slice(), png.meta.kind),
            (PNG, EvidenceKind::Screenshot)
        );

        // Upload off: held here, described as it would be sent (redacted), no bytes; the
        // index keeps the digest of the bytes on disk.
        let off = EvidenceSettings {
            upload: false,
            ..UPLOAD
        };
        let kept = plain(&scan.found[1], &hidden, off)?;
        assert!(kept.meta.held && !kept.meta.local && kept.body.is_empty());
        assert_eq!(kept.meta.size, 18);
        assert_eq!(
            kept.meta.sha256,
            hex(&Sha256::digest(b"token is [hidden]\n"))
        );
        let index = kept.kept.ok_or("no index entry")?;
        assert_eq!(index.size, 24);
        assert_eq!(
            index.sha256,
            hex(&Sha256::digest(b"token is tok-123-secret\n"))
        );
        assert_eq!(index.evidence_id, kept.meta.id);
        // Hold screenshots: the screenshot is held, the log goes.
        let screenshots = EvidenceSettings {
            upload: true,
            hold: tether_protocol::evidence::EvidenceHold::Screenshots,
        };
        assert!(plain(&scan.found[2], &hidden, screenshots)?.meta.held);
        assert!(!plain(&scan.found[1], &hidden, screenshots)?.meta.held);
        Ok(())
    }

    #[test]
    fn a_recorded_file_goes_as_recorded_and_only_while_unchanged() -> Result<()> {
        let dir = tempfile::tempdir()?;
        fs::write(dir.path().join("capture.png"), PNG)?;
        fs::write(dir.path().join("capture-small.png"), b"small")?;
        let scan = scan(dir.path());
        let recorded = Recorded {
            name: "capture-small.png".to_owned(),
            kind: EvidenceKind::Image,
            caption: Some("the page tok-5-long-secret".to_owned()),
            variant_of: Some("capture.png".to_owned()),
            variant: Some(EvidenceVariant::Preview),
            details: Some(EvidenceDetails {
                width: Some(320),
                height: Some(200),
                duration_ms: None,
            }),
            sha256: hex(&Sha256::digest(b"small")),
        };
        let origin = Origin {
            id: "0123".to_owned(),
            kind: EvidenceKind::Screenshot,
        };
        let job_id = job_id();
        let file = Planned {
            job_id: &job_id,
            attempt: 1,
            said: Some(&recorded),
            origin: Some(&origin),
        };
        let hidden = ["tok-5-long-secret".to_owned()];
        let screenshots = EvidenceSettings {
            upload: true,
            hold: tether_protocol::evidence::EvidenceHold::Screenshots,
        };
        let small = scan
            .found
            .iter()
            .find(|found| found.name == "capture-small.png")
            .ok_or("not found")?;
        let ready = prepare(small, &file, &hidden, screenshots)?;
        assert_eq!(ready.meta.kind, EvidenceKind::Image);
        assert_eq!(ready.meta.caption.as_deref(), Some("the page [hidden]"));
        assert_eq!(ready.meta.variant_of.as_deref(), Some("0123"));
        assert_eq!(ready.meta.variant, Some(EvidenceVariant::Preview));
        assert_eq!(ready.meta.details, recorded.details);
        // A preview of a screenshot is held with it.
        assert!(ready.meta.held && ready.body.is_empty());
        let sent = prepare(small, &file, &hidden, UPLOAD)?;
        assert_eq!(sent.body, b"small");

        let other = Recorded {
            sha256: hex(&Sha256::digest(b"other")),
            ..recorded.clone()
        };
        let file = Planned {
            said: Some(&other),
            ..file
        };
        let changed = prepare(small, &file, &hidden, UPLOAD).map(drop);
        assert_eq!(
            changed,
            Err("capture-small.png: changed since the agent recorded it, not sent".to_owned())
        );

        // A variant whose file was not sent is not sent either.
        let stored = HashMap::new();
        assert_eq!(
            origin_of(Some(&recorded), &stored).map(|o| o.map(|o| o.id)),
            Err("made from capture.png, which was not sent".to_owned())
        );
        assert!(origin_of(None, &stored).is_ok_and(|o| o.is_none()));
        Ok(())
    }

    #[test]
    fn a_file_changed_or_swapped_after_the_scan_is_not_sent() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("run.log");
        fs::write(&path, "first\n")?;
        let found = scan(dir.path()).found.remove(0);
        fs::write(&path, "other\n")?;
        let changed = plain(&found, &[], UPLOAD).map(drop);
        assert_eq!(
            changed.map_err(|err| err.to_string()),
            Err("run.log: changed after the run ended, not sent".to_owned())
        );

        fs::write(&path, "first\n")?;
        let found = scan(dir.path()).found.remove(0);
        fs::remove_file(&path)?;
        #[cfg(unix)]
        std::os::unix::fs::symlink("/etc/hostname", &path)?;
        assert!(plain(&found, &[], UPLOAD).is_err());
        Ok(())
    }

    #[test]
    fn the_closing_line_says_what_was_held() {
        assert_eq!(summary(2, 0, true), "2 evidence file(s) sent");
        assert_eq!(
            summary(1, 2, true),
            "1 evidence file(s) sent; 2 held on this computer, only their descriptions sent"
        );
        assert_eq!(
            summary(0, 1, false),
            "0 evidence file(s) sent; 1 held on this computer, only their descriptions sent (evidence upload is off)"
        );
    }

    #[test]
    fn names_are_sent_as_the_name_rule_keeps_them() {
        for (name, shown) in [
            (
                "Screenshot 2026-12-02 at 9.41.03\u{202f}AM.png",
                "Screenshot 2026-12-02 at 9.41.03 AM.png",
            ),
            ("a\u{a0}b.log", "a b.log"),
            ("x\u{202e}gnp.exe", "x\u{fffd}gnp.exe"),
            ("plain.txt", "plain.txt"),
        ] {
            assert_eq!(shown_name(name), shown, "{name:?}");
            let checked = tether_protocol::text::check(&shown_name(name), TextKind::Name);
            assert!(checked.is_ok(), "{name:?}: {checked:?}");
        }
    }

    #[test]
    fn ids_are_stable_per_job_attempt_and_name() {
        let id = evidence_id(&job_id(), 1, "run.log");
        assert_eq!(id.len(), 32);
        assert_eq!(id, evidence_id(&job_id(), 1, "run.log"));
        assert_ne!(id, evidence_id(&job_id(), 2, "run.log"));
        assert_ne!(id, evidence_id(&job_id(), 1, "run2.log"));
    }

    #[test]
    fn kinds_follow_the_name_and_the_content() {
        let cases = [
            ("screenshot-1.png", true, EvidenceKind::Screenshot),
            ("chart.JPG", false, EvidenceKind::Image),
            ("session.webm", false, EvidenceKind::Video),
            ("trace.zip", false, EvidenceKind::Trace),
            ("build.zip", false, EvidenceKind::File),
            ("report.pdf", false, EvidenceKind::Report),
            ("summary.md", true, EvidenceKind::Report),
            ("run.log", true, EvidenceKind::Log),
            ("run.log", false, EvidenceKind::File),
            ("README", true, EvidenceKind::Log),
            ("tool.exe", false, EvidenceKind::File),
        ];
        for (name, text, kind) in cases {
            assert_eq!(kind_of(name, text), kind, "{name}");
        }
    }

    #[test]
    fn the_folder_sits_beside_the_data_dir() {
        assert_eq!(
            root(Path::new("/home/me/.local/share/tether-agent")),
            PathBuf::from("/home/me/.local/share/tether-agent-evidence")
        );
    }
}
