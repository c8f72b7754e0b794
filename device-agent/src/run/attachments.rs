//! The files attached to a job's task, downloaded under the run's lease and shown to the
//! run alone.
//!
//! - Before the engine starts, each attachment the claim lists is downloaded with
//!   `GET /api/devices/self/jobs/{id}/attachments/{aid}` under the run's lease, streamed
//!   to a file of its own, and checked against the claim: its size and its SHA-256. The
//!   server is not trusted: a name that is not a plain file name, a list past the
//!   protocol's limits or bytes that do not match end the run `failed`, nothing placed.
//! - The checked files go in `<data dir>-runs/<job id>/attachments/` (folder 0700, files
//!   0400), beside the data dir that runs never see, under the names the claim gives
//!   (two of one name become `name (2).ext`). The run's sandbox gets that folder readable
//!   and nothing else of it; recipes find it in `TETHER_ATTACHMENTS`.
//! - The folder goes when the run ends ([`RunAttachments`] removes it when dropped); a
//!   carry-on after a restart downloads again.
//! - A `stale_lease` (after the one reattach an outage allows) or a job that ended on the
//!   server (410 `job_ended`) stops the run as every lease-bound call does.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tether_protocol::attachments::{
    Attachment, MAX_ATTACHMENTS_PER_JOB, MAX_ATTACHMENT_BYTES, MAX_ATTACHMENT_BYTES_PER_JOB,
};
use tether_protocol::jobs::{ClaimedJob, CompleteParams, Outcome};
use tether_protocol::{Code, JobId};

use crate::local::private_files::{create_private_dir, hex, set_mode};
use crate::remote::backoff::Backoff;
use crate::remote::client::{DeviceClient, RemoteError};
use crate::run::lease::{Recovery, RunLease};
use crate::run::secret_http::runs_root;
use crate::run::stop::{RunStop, StopReason};

/// The variable that names the run's attachments folder (set only when the job has any).
pub const ATTACHMENTS_VAR: &str = "TETHER_ATTACHMENTS";
/// Mode of a placed attachment: the run reads it, nobody writes it.
const PLACED_MODE: u32 = 0o400;
/// Tries of one download while the server cannot be reached, before the run fails.
const MAX_TRANSIENT_TRIES: u32 = 5;
/// Longest file name placed (most file systems take 255 bytes).
const MAX_NAME_BYTES: usize = 255;

/// One attachment on this computer: what the server said it is, and where its checked
/// copy lies (in the run's attachments folder, readable by the run's sandbox only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedAttachment {
    pub attachment: Attachment,
    pub path: PathBuf,
}

/// The attachments of one run, placed and checked; the folder is removed when this is
/// dropped.
#[derive(Debug)]
pub struct RunAttachments {
    /// `<data dir>-runs/<job id>`: removed whole at the end.
    job_folder: PathBuf,
    /// `<job folder>/attachments`, its real path: what the run sees.
    folder: PathBuf,
    placed: Vec<PlacedAttachment>,
}

impl RunAttachments {
    /// The attachments, in the order the person gave them.
    pub fn placed(&self) -> &[PlacedAttachment] {
        &self.placed
    }

    /// The folder holding them.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Shows the folder to a program of the run: [`ATTACHMENTS_VAR`] in `env` (replacing an
    /// inherited one), the folder among the `readable` paths of its sandbox policy.
    pub fn grant(&self, env: &mut Vec<(String, String)>, readable: &mut Vec<PathBuf>) {
        env.retain(|(name, _)| name != ATTACHMENTS_VAR);
        env.push((
            ATTACHMENTS_VAR.to_owned(),
            self.folder.display().to_string(),
        ));
        readable.push(self.folder.clone());
    }
}

impl Drop for RunAttachments {
    fn drop(&mut self) {
        remove_job_folder(&self.job_folder);
    }
}

/// Where the attachments of `job_id` are placed: `<data dir>-runs/<job id>/attachments`.
pub fn folder(data_dir: &Path, job_id: &JobId) -> PathBuf {
    job_folder(data_dir, job_id).join("attachments")
}

fn job_folder(data_dir: &Path, job_id: &JobId) -> PathBuf {
    runs_root(data_dir).join(job_id.as_str())
}

/// Removes the attachments an earlier agent process left (a run it did not end): called by
/// a daemon holding the run lock, before any run starts. Only folders holding an
/// `attachments` folder are touched; the other things in `<data dir>-runs` are not theirs.
pub fn clear_stale(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(runs_root(data_dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if is_dir && path.join("attachments").is_dir() {
            remove_job_folder(&path);
        }
    }
}

/// The folder of a run, its files read-only to their owner: made writable again first.
fn remove_job_folder(path: &Path) {
    if !path.exists() {
        return;
    }
    let _ = set_mode(path, 0o700);
    let placed = path.join("attachments");
    let _ = set_mode(&placed, 0o700);
    if let Err(err) = std::fs::remove_dir_all(path) {
        tracing::warn!("the run's attachments at {} stay: {err}", path.display());
    }
}

/// What the run needs of its place to download.
pub struct Fetching<'a> {
    pub client: &'a DeviceClient,
    pub lease: &'a RunLease,
    pub stop: &'a RunStop,
    pub data_dir: &'a Path,
}

/// Why the attachments are not there.
#[derive(Debug)]
pub enum NotPlaced {
    /// The run cannot go on with them: the failed completion to report, saying why.
    Refused(Box<CompleteParams>),
    /// The lease is gone, the device revoked or the agent stopping: nothing may be reported.
    Stopped(StopReason),
}

/// Downloads, checks and places the attachments of `job`; `None` when it has none.
///
/// # Errors
/// [`NotPlaced`]: the run's failed completion, or why it stops without one.
pub async fn fetch(
    job: &ClaimedJob,
    fetching: &Fetching<'_>,
) -> Result<Option<RunAttachments>, NotPlaced> {
    let listed = &job.spec.attachments;
    if listed.is_empty() {
        return Ok(None);
    }
    let names = placed_names(listed).map_err(refused)?;
    let job_folder = job_folder(fetching.data_dir, &job.id);
    // Whatever an earlier attempt of this job left goes first.
    remove_job_folder(&job_folder);
    let folder = job_folder.join("attachments");
    let made = create_private_dir(&folder)
        .and_then(|()| set_mode(&job_folder, 0o700))
        .and_then(|()| folder.canonicalize());
    let mut attachments = RunAttachments {
        job_folder,
        folder: match made {
            Ok(folder) => folder,
            Err(err) => {
                return Err(refused(format!(
                    "the attachments have no folder on this computer ({}): {err}",
                    folder.display()
                )))
            }
        },
        placed: Vec::with_capacity(listed.len()),
    };
    for (index, (attachment, name)) in listed.iter().zip(names).enumerate() {
        let incoming = attachments.job_folder.join(format!("incoming-{index}"));
        download(job, attachment, &incoming, fetching).await?;
        let path = attachments.folder.join(&name);
        let placed =
            set_mode(&incoming, PLACED_MODE).and_then(|()| std::fs::rename(&incoming, &path));
        if let Err(err) = placed {
            return Err(refused(format!(
                "the attachment {:?} could not be placed in {}: {err}",
                attachment.name,
                attachments.folder.display()
            )));
        }
        attachments.placed.push(PlacedAttachment {
            attachment: attachment.clone(),
            path,
        });
    }
    Ok(Some(attachments))
}

/// The name each attachment is placed under, in order: the claim's name, checked to be a
/// plain file name; a name taken already (in any case) gets ` (2)`, ` (3)`… before its
/// extension. The list is refused past the protocol's limits.
///
/// # Errors
/// Why the list is refused, for the run's summary.
pub fn placed_names(listed: &[Attachment]) -> Result<Vec<String>, String> {
    if listed.len() > MAX_ATTACHMENTS_PER_JOB {
        return Err(format!(
            "the job lists {} attachments, more than the {MAX_ATTACHMENTS_PER_JOB} a job may carry",
            listed.len()
        ));
    }
    let total: u64 = listed.iter().map(|attachment| attachment.size).sum();
    if total > MAX_ATTACHMENT_BYTES_PER_JOB {
        return Err(format!(
            "the job's attachments hold {total} bytes, more than the {MAX_ATTACHMENT_BYTES_PER_JOB} a job may carry"
        ));
    }
    let mut taken: Vec<String> = Vec::with_capacity(listed.len());
    let mut names = Vec::with_capacity(listed.len());
    for attachment in listed {
        check(attachment)?;
        let name = free_name(&attachment.name, &taken);
        taken.push(name.to_lowercase());
        names.push(name);
    }
    Ok(names)
}

/// One listed attachment as this computer takes it: a plain file name, a size within the
/// limit, a SHA-256 in lowercase hex.
fn check(attachment: &Attachment) -> Result<(), String> {
    let name = attachment.name.as_str();
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= MAX_NAME_BYTES
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control());
    if !plain {
        return Err(format!(
            "the attachment {name:?} does not have a plain file name; nothing was placed"
        ));
    }
    if attachment.size > MAX_ATTACHMENT_BYTES {
        return Err(format!(
            "the attachment {name:?} is listed at {} bytes, more than the {MAX_ATTACHMENT_BYTES} a file may have",
            attachment.size
        ));
    }
    let digest = attachment.sha256.as_str();
    if digest.len() != 64 || !digest.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(format!(
            "the attachment {name:?} is listed without a SHA-256 to check it by"
        ));
    }
    Ok(())
}

/// `name`, or `stem (n).ext` with the least `n` from 2 not in `taken` (lowercase names).
fn free_name(name: &str, taken: &[String]) -> String {
    let free = |candidate: &str| !taken.contains(&candidate.to_lowercase());
    if free(name) {
        return name.to_owned();
    }
    // A leading dot is part of the name (`.env`), not the start of an extension.
    let (stem, extension) = match name.rfind('.') {
        Some(dot) if dot > 0 => name.split_at(dot),
        _ => (name, ""),
    };
    (2..)
        .map(|n| format!("{stem} ({n}){extension}"))
        .find(|candidate| free(candidate))
        .unwrap_or_else(|| name.to_owned())
}

/// A refusal of the run, `failed`, saying why.
fn refused(summary: String) -> NotPlaced {
    NotPlaced::Refused(Box::new(CompleteParams {
        outcome: Outcome::Failed,
        summary,
        exit_code: None,
        report: None,
        observed: None,
        changes: None,
        delivery: None,
    }))
}

/// Downloads `attachment` into `into` under the run's lease, checked, retrying while the
/// server cannot be reached.
async fn download(
    job: &ClaimedJob,
    attachment: &Attachment,
    into: &Path,
    fetching: &Fetching<'_>,
) -> Result<(), NotPlaced> {
    let Fetching {
        client,
        lease,
        stop,
        data_dir: _,
    } = *fetching;
    let mut backoff = Backoff::new();
    let mut tries = 0;
    loop {
        let token = lease.token();
        let err = match client
            .download_attachment(&job.id, &attachment.id, &token)
            .await
        {
            Ok(response) => {
                lease.confirmed(&token);
                match stream_into(response, attachment, into).await? {
                    None => return Ok(()),
                    Some(broken) => broken,
                }
            }
            Err(err) => err,
        };
        let wait = match err {
            RemoteError::StaleLease => match lease.recover(&token).await {
                Recovery::Renewed => continue,
                Recovery::Later(at_least) => backoff.next_delay().max(at_least),
                Recovery::Lost => return Err(stopped(stop, StopReason::LeaseLost)),
                Recovery::Revoked => return Err(stopped(stop, StopReason::Revoked)),
            },
            RemoteError::Revoked => return Err(stopped(stop, StopReason::Revoked)),
            // The job ended on the server (cancelled, or given up): nothing more is taken
            // from this run, as after a lost lease.
            err if err.has_code(Code::JobEnded) => {
                tracing::warn!(job = %job.id, "the job ended while its attachments were downloading");
                return Err(stopped(stop, StopReason::LeaseLost));
            }
            err if err.is_transient() && tries < MAX_TRANSIENT_TRIES => {
                tries += 1;
                tracing::warn!(job = %job.id, attachment = %attachment.name, "attachment not downloaded, retrying: {err}");
                backoff.next_delay().max(err.retry_after())
            }
            err => {
                return Err(refused(format!(
                    "the attachment {:?} could not be downloaded: {err}",
                    attachment.name
                )))
            }
        };
        if stop.wait_at_least(StopReason::Shutdown, wait).await {
            return Err(NotPlaced::Stopped(
                stop.current().unwrap_or(StopReason::Shutdown),
            ));
        }
    }
}

fn stopped(stop: &RunStop, reason: StopReason) -> NotPlaced {
    stop.raise(reason);
    NotPlaced::Stopped(reason)
}

/// Streams the answer into a new file at `into`, never past the listed size, then checks
/// size and digest: `None` once it is there; a broken stream's error, to try again.
///
/// # Errors
/// Bytes that do not match, or a file that cannot be written, refuse the run.
async fn stream_into(
    mut response: reqwest::Response,
    attachment: &Attachment,
    into: &Path,
) -> Result<Option<RemoteError>, NotPlaced> {
    let mut file = match new_file(into) {
        Ok(file) => file,
        Err(err) => {
            return Err(refused(format!(
                "the attachment {:?} could not be written to {}: {err}",
                attachment.name,
                into.display()
            )))
        }
    };
    let mut digest = Sha256::new();
    let mut size: u64 = 0;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(err) => {
                let _ = std::fs::remove_file(into);
                return Ok(Some(RemoteError::Network(err.to_string())));
            }
        };
        size += chunk.len() as u64;
        if size > attachment.size {
            let _ = std::fs::remove_file(into);
            return Err(mismatch(attachment, "more bytes than listed"));
        }
        digest.update(&chunk);
        if let Err(err) = file.write_all(&chunk) {
            let _ = std::fs::remove_file(into);
            return Err(refused(format!(
                "the attachment {:?} could not be written: {err}",
                attachment.name
            )));
        }
    }
    if let Err(err) = file.sync_all() {
        tracing::debug!("syncing a downloaded attachment: {err}");
    }
    drop(file);
    let verdict = verify(attachment, size, &hex(&digest.finalize()));
    if let Err(why) = verdict {
        let _ = std::fs::remove_file(into);
        return Err(mismatch(attachment, &why));
    }
    Ok(None)
}

/// Whether `size` bytes hashing to `sha256` are the attachment the claim listed.
///
/// # Errors
/// What differs, in words.
pub fn verify(attachment: &Attachment, size: u64, sha256: &str) -> Result<(), String> {
    if size != attachment.size {
        return Err(format!(
            "{size} bytes where {} were listed",
            attachment.size
        ));
    }
    if sha256 != attachment.sha256 {
        return Err(format!(
            "SHA-256 {sha256} where {} was listed",
            attachment.sha256
        ));
    }
    Ok(())
}

fn mismatch(attachment: &Attachment, why: &str) -> NotPlaced {
    refused(format!(
        "the attachment {:?} did not arrive as the job lists it ({why}); nothing was placed and nothing ran",
        attachment.name
    ))
}

/// A new file only this user reads and writes, never one already there.
fn new_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::AttachmentId;

    fn listed(name: &str, size: u64) -> Attachment {
        Attachment {
            id: AttachmentId::generate(),
            name: name.to_owned(),
            size,
            sha256: "a".repeat(64),
            media_type: "text/plain".to_owned(),
        }
    }

    fn names(given: &[&str]) -> Result<Vec<String>, String> {
        let listed: Vec<Attachment> = given.iter().map(|name| listed(name, 1)).collect();
        placed_names(&listed)
    }

    #[test]
    fn two_attachments_of_one_name_are_both_placed() {
        assert_eq!(
            names(&[
                "shot.png", "log.txt", "shot.png", "Shot.PNG", ".env", ".env", "Makefile",
                "Makefile"
            ]),
            Ok(vec![
                "shot.png".to_owned(),
                "log.txt".to_owned(),
                "shot (2).png".to_owned(),
                "Shot (3).PNG".to_owned(),
                ".env".to_owned(),
                ".env (2)".to_owned(),
                "Makefile".to_owned(),
                "Makefile (2)".to_owned(),
            ])
        );
        // A name the server gave that is itself `x (2)` is not taken twice.
        assert_eq!(
            names(&["a.txt", "a (2).txt", "a.txt"]),
            Ok(vec!["a.txt".into(), "a (2).txt".into(), "a (3).txt".into()])
        );
    }

    #[test]
    fn names_that_are_not_plain_file_names_are_refused() {
        for name in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/etc/passwd",
            "a\\b",
            "a\nb",
            "a\0b",
        ] {
            let refused = names(&["fine.txt", name]);
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|why| why.contains("plain file name")),
                "{name:?}: {refused:?}"
            );
        }
        assert!(names(&[&"n".repeat(256)]).is_err());
        assert!(names(&["..."]).is_ok());
    }

    #[test]
    fn lists_past_the_protocols_limits_are_refused() {
        let many: Vec<Attachment> = (0..=MAX_ATTACHMENTS_PER_JOB)
            .map(|n| listed(&format!("{n}.txt"), 1))
            .collect();
        assert!(placed_names(&many).is_err_and(|why| why.contains("more than the 20")));
        let large = [listed("big.bin", MAX_ATTACHMENT_BYTES + 1)];
        assert!(placed_names(&large).is_err());
        let heavy: Vec<Attachment> = (0..5)
            .map(|n| listed(&format!("{n}.bin"), MAX_ATTACHMENT_BYTES))
            .collect();
        assert!(placed_names(&heavy).is_err_and(|why| why.contains("100000000")));
        let mut unhashed = listed("a.txt", 1);
        unhashed.sha256 = "A".repeat(64);
        assert!(placed_names(&[unhashed]).is_err());
    }

    #[test]
    fn bytes_that_differ_from_the_listing_are_refused() {
        let mut attachment = listed("a.txt", 5);
        attachment.sha256 = hex(&Sha256::digest(b"hello"));
        assert_eq!(verify(&attachment, 5, &attachment.sha256.clone()), Ok(()));
        let other = hex(&Sha256::digest(b"hellO"));
        assert!(verify(&attachment, 5, &other).is_err_and(|why| why.contains("SHA-256")));
        assert!(verify(&attachment, 4, &attachment.sha256.clone())
            .is_err_and(|why| why.contains("4 bytes where 5")));
    }

    use std::collections::HashMap;
    use std::sync::Arc;

    use crate::local::journal::Journal;
    use crate::local::state::DataDir;
    use crate::remote::client::ServerClient;
    use crate::run::lease::LeasePeriod;
    use crate::run::test_http::read_request;
    use tether_protocol::jobs::Mode;

    /// A stand-in for the server's download route: each attachment id answers its status
    /// and body, under the lease `lease` only.
    async fn download_server(answers: HashMap<String, (u16, Vec<u8>)>) -> String {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let address = listener.local_addr().unwrap_or_else(|err| panic!("{err}"));
        let answers = Arc::new(answers);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let answers = answers.clone();
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else {
                        return anyhow::Ok(());
                    };
                    let id = request.target.rsplit('/').next().unwrap_or_default();
                    let leased = request.header("x-tether-lease") == Some("lease")
                        && request.method == "GET"
                        && request
                            .target
                            .starts_with("/api/devices/self/jobs/job1/attachments/");
                    let (status, body) = match answers.get(id) {
                        Some(answer) if leased => answer.clone(),
                        _ => (
                            404,
                            br#"{"error":{"code":"not_found","message":"no"}}"#.to_vec(),
                        ),
                    };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    socket.write_all(head.as_bytes()).await?;
                    socket.write_all(&body).await?;
                    anyhow::Ok(())
                });
            }
        });
        format!("http://{address}")
    }

    struct Place {
        _tmp: tempfile::TempDir,
        data_dir: DataDir,
        client: DeviceClient,
        lease: Arc<RunLease>,
        stop: RunStop,
        job: ClaimedJob,
    }

    /// A run of a job listing `files` (name, the bytes listed), its server answering
    /// `answers`.
    async fn place(
        files: &[(&str, &[u8])],
        answers: impl Fn(usize, &[u8]) -> (u16, Vec<u8>),
    ) -> anyhow::Result<Place> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("agent")))?;
        let mut job = crate::test_job::claimed_job("tests", Mode::Unattended);
        let mut served = HashMap::new();
        for (index, (name, bytes)) in files.iter().enumerate() {
            let id = AttachmentId::generate();
            served.insert(id.as_str().to_owned(), answers(index, bytes));
            job.spec.attachments.push(Attachment {
                id,
                name: (*name).to_owned(),
                size: bytes.len() as u64,
                sha256: hex(&Sha256::digest(bytes)),
                media_type: "text/plain".to_owned(),
            });
        }
        let base = download_server(served).await;
        let client = DeviceClient::new(ServerClient::new(&base)?, "tdt_x".into());
        let lease = RunLease::new(
            client.clone(),
            Arc::new(Journal::new(&data_dir)),
            Arc::new(LeasePeriod::new()),
            &job,
        );
        Ok(Place {
            _tmp: tmp,
            data_dir,
            client,
            lease,
            stop: RunStop::new(),
            job,
        })
    }

    async fn fetched(place: &Place) -> Result<Option<RunAttachments>, NotPlaced> {
        let fetching = Fetching {
            client: &place.client,
            lease: &place.lease,
            stop: &place.stop,
            data_dir: place.data_dir.root(),
        };
        fetch(&place.job, &fetching).await
    }

    #[tokio::test]
    async fn checked_files_are_placed_read_only_and_go_with_the_run() -> anyhow::Result<()> {
        use crate::local::private_files::mode_of;
        let files: [(&str, &[u8]); 3] = [("a.txt", b"one"), ("a.txt", b"two"), ("b.log", b"")];
        let place = place(&files, |_, bytes| (200, bytes.to_vec())).await?;
        let attachments = fetched(&place)
            .await
            .map_err(|err| anyhow::anyhow!("{err:?}"))?;
        let attachments = attachments.ok_or_else(|| anyhow::anyhow!("nothing placed"))?;
        let folder = attachments.folder().to_path_buf();
        assert_eq!(
            folder,
            folder_of(&place)?,
            "the folder is the job's, beside the data dir"
        );
        let placed: Vec<(String, Vec<u8>, u32)> = attachments
            .placed()
            .iter()
            .map(|placed| {
                let name = placed
                    .path
                    .strip_prefix(&folder)
                    .map(|name| name.display().to_string());
                let bytes = std::fs::read(&placed.path).unwrap_or_default();
                let mode = std::fs::metadata(&placed.path).map(|meta| mode_of(&meta));
                (name.unwrap_or_default(), bytes, mode.unwrap_or_default())
            })
            .collect();
        assert_eq!(
            placed,
            [
                ("a.txt".to_owned(), b"one".to_vec(), 0o400),
                ("a (2).txt".to_owned(), b"two".to_vec(), 0o400),
                ("b.log".to_owned(), Vec::new(), 0o400),
            ]
        );
        assert_eq!(mode_of(&std::fs::metadata(&folder)?), 0o700);
        let listed = std::fs::read_dir(&folder)?.count();
        assert_eq!(listed, 3, "nothing else is left in the folder");
        let mut env = Vec::new();
        let mut readable = Vec::new();
        attachments.grant(&mut env, &mut readable);
        assert_eq!(
            env,
            [(ATTACHMENTS_VAR.to_owned(), folder.display().to_string())]
        );
        assert_eq!(readable, std::slice::from_ref(&folder));
        drop(attachments);
        assert!(!folder.exists(), "the folder goes with the run");
        assert!(!folder.parent().is_some_and(Path::exists));
        Ok(())
    }

    /// What a run left when its agent process died goes when the next one starts; what
    /// else lies beside it stays.
    #[tokio::test]
    async fn a_dead_processs_attachments_are_cleared_at_start() -> anyhow::Result<()> {
        let files: [(&str, &[u8]); 1] = [("a.txt", b"one")];
        let place = place(&files, |_, bytes| (200, bytes.to_vec())).await?;
        let attachments = fetched(&place)
            .await
            .map_err(|err| anyhow::anyhow!("{err:?}"))?
            .ok_or_else(|| anyhow::anyhow!("nothing placed"))?;
        let folder = attachments.folder().to_path_buf();
        // The process dies: nothing is dropped.
        std::mem::forget(attachments);
        let runs = runs_root(place.data_dir.root());
        let other = runs.join("tools-x");
        std::fs::create_dir_all(&other)?;
        std::fs::write(other.join("kept"), b"")?;
        assert!(folder.join("a.txt").exists());
        clear_stale(place.data_dir.root());
        assert!(!folder.exists());
        assert!(!runs.join(place.job.id.as_str()).exists());
        assert!(other.join("kept").exists());
        Ok(())
    }

    fn folder_of(place: &Place) -> anyhow::Result<PathBuf> {
        Ok(super::folder(place.data_dir.root(), &place.job.id).canonicalize()?)
    }

    #[tokio::test]
    async fn bytes_that_do_not_match_refuse_the_run_and_nothing_is_placed() -> anyhow::Result<()> {
        let files: [(&str, &[u8]); 2] = [("good.txt", b"good"), ("shot.png", b"listed")];
        for (wrong, says) in [
            (b"Listed".to_vec(), "SHA-256"),
            (b"list".to_vec(), "4 bytes where 6 were listed"),
            (b"listed and more".to_vec(), "more bytes than listed"),
        ] {
            let place = place(&files, |index, bytes| {
                (
                    200,
                    if index == 1 {
                        wrong.clone()
                    } else {
                        bytes.to_vec()
                    },
                )
            })
            .await?;
            match fetched(&place).await {
                Err(NotPlaced::Refused(params)) => {
                    assert_eq!(params.outcome, Outcome::Failed);
                    assert!(
                        params
                            .summary
                            .contains("\"shot.png\" did not arrive as the job lists it")
                            && params.summary.contains(says),
                        "{}",
                        params.summary
                    );
                }
                other => panic!("{says}: {other:?}"),
            }
            let folder = super::folder(place.data_dir.root(), &place.job.id);
            assert!(!folder.exists(), "{says}: nothing is left placed");
            assert_eq!(place.stop.current(), None);
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_stale_lease_or_an_ended_job_stops_the_run() -> anyhow::Result<()> {
        let files: [(&str, &[u8]); 1] = [("a.txt", b"a")];
        for (status, code) in [(409, "stale_lease"), (410, "job_ended")] {
            let body = format!(r#"{{"error":{{"code":"{code}","message":"no"}}}}"#);
            let place = place(&files, |_, _| (status, body.clone().into_bytes())).await?;
            match fetched(&place).await {
                Err(NotPlaced::Stopped(StopReason::LeaseLost)) => {}
                other => panic!("{code}: {other:?}"),
            }
            assert_eq!(place.stop.current(), Some(StopReason::LeaseLost), "{code}");
            assert!(!super::folder(place.data_dir.root(), &place.job.id).exists());
        }
        // Another refusal fails the run, saying so.
        let place = place(&files, |_, _| {
            (
                404,
                br#"{"error":{"code":"not_found","message":"no such attachment"}}"#.to_vec(),
            )
        })
        .await?;
        match fetched(&place).await {
            Err(NotPlaced::Refused(params)) => assert!(
                params.summary.contains("\"a.txt\" could not be downloaded")
                    && params.summary.contains("no such attachment"),
                "{}",
                params.summary
            ),
            other => panic!("{other:?}"),
        }
        Ok(())
    }
}
