//! Answering the web's `file.request`: a directory listing, a file, or one file's diff of
//! the run (its start against its end, or against now), of a job's folder, read on this
//! computer (seed 003 §4.6), in the folder the job used as this computer shares it now.
//!
//! The web names a job and a path *relative to that job's shared folder*; this computer
//! decides what that means and what it shows:
//!
//! - only inside the job's folder: no absolute paths, no `..`, and a path whose real
//!   location (symlinks resolved) is outside the folder is refused;
//! - never secrets (`.env*`, keys, credential files) nor `.git` internals, whatever the link
//!   or spelling that leads to them — they are also left out of listings;
//! - never a hard link (a second name of a file that may live outside the folder), nor
//!   anything but a regular file or a directory;
//! - a file is opened without following a final symlink and checked again after opening,
//!   so a path swapped between the check and the read is refused;
//! - text is cut at [`MAX_FILE_BYTES`] (`truncated`; the last, incomplete line of a cut
//!   read is left out, so no secret is shown half), binary files are described and not
//!   sent, and text is redacted: every saved secret value, then what
//!   [`redaction`](super::redaction) hides (tokens with known prefixes, private key blocks,
//!   credential assignments and quoted pairs, URL passwords; a line too long to check is
//!   hidden whole);
//! - a diff compares the run's recorded start ([`crate::changes`]) with the run's recorded
//!   end once the run ended (nothing in the folder is read then; a later job's or person's
//!   work is no part of it), else, and when asked ([`DiffAgainst::Now`]), with the file now,
//!   following the same path rules as a file (a file the run deleted may be gone); both
//!   sides are redacted as a file's text is before they are compared, and it is cut at
//!   256 KiB;
//! - the work is bounded in time: it stops (the reading and the redaction, not only the
//!   wait) a little before the server stops waiting (`timeoutMs` of the frame, else
//!   [`DEFAULT_BUDGET`]), and at most [`MAX_CONCURRENT_ANSWERS`] answers are worked on at
//!   once.
//!
//! Protected *names* inside a folder (`.env`, `id_rsa`, `.git`, …) are [`protected`]: `.git`
//! here, the credential names from [`tether_protocol::credential_files`]. [`handle`] adds the
//! run confinement's guard ([`crate::policy::guard`]: keys, sign-ins, browser data and the
//! agent's own files, by absolute path) through the `guard` argument of [`answer`], and hides
//! every saved secret value in a file's text.

use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use tether_protocol::changes::{DiffAgainst, FileDiff};
use tether_protocol::credential_files::{credential_kind, CredentialKind, KEY_PREFIXES};
use tether_protocol::error::ErrorDetail;
use tether_protocol::files::{
    EntryKind, FileAnswer, FileContent, FileOp, Tree, TreeEntry, MAX_FILE_BYTES,
};
use tether_protocol::JobId;

use crate::changes::diff::{Plan, Side};
use crate::changes::worktree;
use crate::changes::{self, Ended, Recorded, Refusal, MAX_COMPARED_BYTES};
use crate::local::journal::Journal;
use crate::local::private_files::{link_count, open_no_follow, opened_path};
use crate::local::state::DataDir;
use crate::local::vault;
use crate::policy::guard::Guard;
use crate::remote::events::FileRequest;
use crate::remote::frames::redaction::{self, Deadline, OutOfTime};
use crate::remote::frames::FrameContext;

/// Most entries one listing carries; the rest are left out.
pub const MAX_TREE_ENTRIES: usize = 1000;
/// Longest path the web may ask for, in bytes.
const MAX_PATH_BYTES: usize = 4096;
/// How much of a file is looked at to tell text from binary.
const SNIFF_BYTES: usize = 8192;
/// How much of a file is read between two looks at the deadline.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// How many listing entries are looked at between two looks at the deadline.
const ENTRIES_PER_CHECK: usize = 256;
/// How long the agent works on one request when the server does not say how long it waits
/// (`timeoutMs`): below the server's default relay timeout (10 s).
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(8);
/// The longest the agent works on one request, whatever the server waits.
pub const MAX_BUDGET: Duration = Duration::from_secs(60);
/// Most answers worked on at once; more requests wait their turn (within their budget).
pub const MAX_CONCURRENT_ANSWERS: usize = 2;

static ANSWERING: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MAX_CONCURRENT_ANSWERS);
/// Largest answer body, JSON included: the server takes 1.5 MiB; escaping can make 1 MiB of
/// text much longer (quotes, control characters), so text is cut further when it must.
pub const MAX_ANSWER_BYTES: usize = 1536 * 1024 - 16 * 1024;

/// Answers `request` (off the async threads) and sends the answer to the server. The work
/// stops at the request's deadline ([`budget`]): the wait for it, and the work itself, which
/// looks at the same deadline between chunks of reading and of redaction.
pub async fn handle(context: FrameContext, request: FileRequest) {
    let deadline = Instant::now() + budget(request.timeout);
    let client = context.client.clone();
    let (job_id, op, path) = (request.job_id.clone(), request.op, request.path.clone());
    let against = request.against.unwrap_or_default();
    let work = async move {
        let _turn = ANSWERING.acquire().await;
        tokio::task::spawn_blocking(move || {
            let asked = Asked {
                op,
                raw_path: &path,
                against,
            };
            answer_for_job(context, &job_id, asked, Deadline::at(deadline))
        })
        .await
    };
    let answer = match tokio::time::timeout_at(deadline.into(), work).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => refusal(error("internal", "the answer failed")),
        Err(_) => {
            tracing::warn!(job = %request.job_id, "file request given up: out of time");
            refusal(out_of_time())
        }
    };
    if let Err(err) = client.answer_file_request(&request.id, &answer).await {
        tracing::warn!(job = %request.job_id, "file answer not delivered: {err}");
    }
}

/// How long the agent works on a request the server waits `server_waits` for: a fifth less
/// (at most a second less, for the answer's way back), at most [`MAX_BUDGET`];
/// [`DEFAULT_BUDGET`] when the server does not say.
pub fn budget(server_waits: Option<Duration>) -> Duration {
    match server_waits {
        None => DEFAULT_BUDGET,
        Some(waits) => {
            let margin = (waits / 5).min(Duration::from_secs(1));
            waits.saturating_sub(margin).min(MAX_BUDGET)
        }
    }
}

/// The refusal of a request whose work ran out of time.
fn out_of_time() -> ErrorDetail {
    error(
        "device_timeout",
        "this computer could not prepare the answer in time; nothing was sent",
    )
}

impl From<OutOfTime> for ErrorDetail {
    fn from(_: OutOfTime) -> ErrorDetail {
        out_of_time()
    }
}

/// What the web asked of a job's folder.
struct Asked<'a> {
    op: FileOp,
    raw_path: &'a str,
    /// For a diff.
    against: DiffAgainst,
}

/// The answer for `op` on `raw_path` in the folder `job_id` used, as shared now.
fn answer_for_job(
    context: FrameContext,
    job_id: &JobId,
    asked: Asked<'_>,
    deadline: Deadline,
) -> FileAnswer {
    let Asked {
        op,
        raw_path,
        against,
    } = asked;
    let label = match context.journal.folder_of(job_id) {
        Ok(Some(label)) => label,
        Ok(None) => {
            return refusal(error(
                "not_found",
                "this computer has no record of that job",
            ))
        }
        Err(err) => {
            tracing::warn!(job = %job_id, "cannot read the run journal: {err:#}");
            return refusal(error(
                "not_found",
                "this computer cannot tell which folder that job used",
            ));
        }
    };
    let config = (context.config)();
    let Some(folder) = config.folder(&label) else {
        return refusal(error(
            "not_found",
            format!("this computer no longer shares the folder {label:?}"),
        ));
    };
    // The run confinement's guard applies to reading as to running: the folder must still be
    // the one shared, and nothing shown may be a protected path.
    let guard = &context.guard;
    if let Err(refusal_of) = guard.check_shared_folder(&folder.label, &folder.path) {
        return refusal(error("path_refused", refusal_of.to_string()));
    }
    // A job that ran in its own worktree is read there.
    let root = match worktree_of(&context.journal, &context.data_dir, guard, job_id) {
        Ok(worktree) => worktree.unwrap_or_else(|| folder.path.clone()),
        Err(refused) => return refusal(refused),
    };
    let check = |path: &Path| guard.check_access(path).err().map(|r| r.to_string());
    // Saved secret values never leave in a file's text.
    let hidden = match op {
        FileOp::File | FileOp::Diff => vault::Vault::new(&context.data_dir).all_values(),
        FileOp::Tree => Vec::new(),
    };
    if op != FileOp::Diff {
        return answer_within(&root, op, raw_path, &check, &hidden, deadline);
    }
    let start = match Recorded::load(context.data_dir.root(), job_id) {
        Ok(start) => start,
        Err(err) => {
            tracing::warn!(job = %job_id, "cannot read the run's start: {err:#}");
            None
        }
    };
    let asked = DiffAsked {
        start: start.as_ref(),
        raw_path,
        against,
    };
    answer_diff_within(&root, asked, &check, &hidden, deadline)
}

/// The worktree `job_id` ran in, if it ran in one: only one of the agent's own worktrees
/// (beside its data dir), still there and not protected.
///
/// # Errors
/// The refusal to answer with.
fn worktree_of(
    journal: &Journal,
    data_dir: &DataDir,
    guard: &Guard,
    job_id: &JobId,
) -> Result<Option<PathBuf>, ErrorDetail> {
    let known = journal.worktree_of(job_id).map_err(|err| {
        tracing::warn!(job = %job_id, "cannot read the job's worktree: {err:#}");
        error(
            "not_found",
            "this computer cannot tell which folder that job used",
        )
    })?;
    let Some(path) = known else {
        return Ok(None);
    };
    let removed = || {
        error(
            "not_found",
            "the worktree that job ran in was removed; its work is on its branch",
        )
    };
    let root = worktree::root(data_dir.root());
    let canonical = guard.check_folder(&path).map_err(|_| removed())?;
    if canonical != path || !path.starts_with(root.canonicalize().unwrap_or(root)) {
        return Err(removed());
    }
    Ok(Some(path))
}

/// [`answer_within`] with nothing saved to hide and no deadline.
pub fn answer(
    root: &Path,
    op: FileOp,
    raw_path: &str,
    guard: &dyn Fn(&Path) -> Option<String>,
) -> FileAnswer {
    answer_within(root, op, raw_path, guard, &[], Deadline::NONE)
}

/// The answer for `op` on `raw_path` inside the folder `root`. `guard` gets the real path of
/// what would be shown and may refuse it with a reason; every value in `hidden` is replaced
/// in a file's text; past `deadline` the work stops with a `device_timeout` refusal. Never
/// panics; every refusal is an answer with `error`.
pub fn answer_within(
    root: &Path,
    op: FileOp,
    raw_path: &str,
    guard: &dyn Fn(&Path) -> Option<String>,
    hidden: &[String],
    deadline: Deadline,
) -> FileAnswer {
    let result = match op {
        FileOp::Tree => list(root, raw_path, guard, deadline).map(|tree| FileAnswer {
            tree: Some(tree),
            file: None,
            diff: None,
            error: None,
        }),
        FileOp::File => read(root, raw_path, guard, hidden, deadline).map(|file| FileAnswer {
            tree: None,
            file: Some(fit(file, MAX_ANSWER_BYTES)),
            diff: None,
            error: None,
        }),
        FileOp::Diff => {
            let asked = DiffAsked {
                start: None,
                raw_path,
                against: DiffAgainst::End,
            };
            return answer_diff_within(root, asked, guard, hidden, deadline);
        }
    };
    result.unwrap_or_else(refusal)
}

/// A diff the web asked for.
#[derive(Debug, Clone, Copy)]
pub struct DiffAsked<'a> {
    /// The run's start (and end), as recorded on this computer.
    pub start: Option<&'a Recorded>,
    pub raw_path: &'a str,
    pub against: DiffAgainst,
}

/// The diff of `raw_path` inside `root` between the run's start and its end (once recorded;
/// before that, or when asked, the file now): the same path rules as a file, each side
/// redacted as a file's text is, cut at
/// [`MAX_DIFF_BYTES`](tether_protocol::changes::MAX_DIFF_BYTES). Never panics; every refusal
/// is an answer with `error`.
pub fn answer_diff_within(
    root: &Path,
    asked: DiffAsked<'_>,
    guard: &dyn Fn(&Path) -> Option<String>,
    hidden: &[String],
    deadline: Deadline,
) -> FileAnswer {
    match diff(root, asked, guard, hidden, deadline) {
        Ok(diff) => FileAnswer {
            tree: None,
            file: None,
            diff: Some(fit_diff(diff, MAX_ANSWER_BYTES)),
            error: None,
        },
        Err(error) => refusal(error),
    }
}

/// Cuts a diff's text (saying so in its last line) until its JSON fits in `limit` bytes.
fn fit_diff(mut diff: FileDiff, limit: usize) -> FileDiff {
    loop {
        let size = serde_json::to_vec(&diff).map_or(usize::MAX, |json| json.len());
        if size <= limit || diff.text.is_empty() {
            return diff;
        }
        let share = diff.text.len() as u128 * limit as u128 / size as u128;
        let keep = usize::try_from(share)
            .unwrap_or(0)
            .min(diff.text.len().saturating_sub(64));
        let cut = changes::diff::cut_to(std::mem::take(&mut diff.text), keep);
        diff.text = cut.text;
        diff.truncated = true;
    }
}

/// Cuts a file's text until its JSON fits in `limit` bytes (marking it truncated).
fn fit(mut file: FileContent, limit: usize) -> FileContent {
    loop {
        let size = serde_json::to_vec(&file).map_or(usize::MAX, |json| json.len());
        let Some(text) = file.text.as_mut().filter(|_| size > limit) else {
            return file;
        };
        // Escaping costs the same on average across the text: keep the share that fits,
        // a little less, and check again.
        let share = text.len() as u128 * limit as u128 / size as u128;
        let mut keep = usize::try_from(share)
            .unwrap_or(0)
            .min(text.len().saturating_sub(64));
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        text.truncate(keep);
        file.truncated = true;
    }
}

/// An answer that refuses with `code` and `message`.
pub fn refusal(error: ErrorDetail) -> FileAnswer {
    FileAnswer {
        tree: None,
        file: None,
        diff: None,
        error: Some(error),
    }
}

/// `code`: `not_found`, `path_refused` or `invalid_field`.
pub fn error(code: &str, message: impl Into<String>) -> ErrorDetail {
    ErrorDetail {
        code: code.to_owned(),
        message: message.into(),
    }
}

pub(crate) fn refused(message: impl Into<String>) -> ErrorDetail {
    error("path_refused", message)
}

pub(crate) fn not_found() -> ErrorDetail {
    error(
        "not_found",
        "there is no such file or folder in the job's folder",
    )
}

/// A path the web sent, checked and split: relative, no `..`, nothing protected.
pub(crate) fn parse_relative(raw: &str) -> Result<Vec<String>, ErrorDetail> {
    if raw.len() > MAX_PATH_BYTES || raw.contains('\0') {
        return Err(error("invalid_field", "path is not a valid path"));
    }
    if raw.starts_with('/') || raw.contains('\\') {
        return Err(refused(
            "only paths relative to the job's folder are answered",
        ));
    }
    let mut parts = Vec::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Normal(part) => {
                let part = part.to_string_lossy().into_owned();
                if let Some(reason) = protected(&part) {
                    return Err(refused(reason));
                }
                parts.push(part);
            }
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(refused("paths may not leave the job's folder"));
            }
        }
    }
    Ok(parts)
}

/// Resolves the parts under `root`: the real path, which must still be inside the folder
/// and protected nowhere along the way.
pub(crate) fn resolve(
    root: &Path,
    parts: &[String],
    guard: &dyn Fn(&Path) -> Option<String>,
) -> Result<(PathBuf, PathBuf), ErrorDetail> {
    let root = root
        .canonicalize()
        .map_err(|_| error("not_found", "the job's folder no longer exists"))?;
    let wanted = parts
        .iter()
        .fold(root.clone(), |path, part| path.join(part));
    let real = match wanted.canonicalize() {
        Ok(real) => real,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(not_found()),
        Err(_) => return Err(refused("this path cannot be read")),
    };
    check_inside(&root, &real)?;
    if let Some(reason) = guard(&real) {
        return Err(refused(reason));
    }
    Ok((root, real))
}

/// `real` must be `root` or below it, with no protected part between them.
pub(crate) fn check_inside(root: &Path, real: &Path) -> Result<(), ErrorDetail> {
    let Ok(relative) = real.strip_prefix(root) else {
        return Err(refused("this path leads outside the job's folder"));
    };
    for part in relative.components() {
        if let Some(reason) = protected(&part.as_os_str().to_string_lossy()) {
            return Err(refused(reason));
        }
    }
    Ok(())
}

fn list(
    root: &Path,
    raw_path: &str,
    guard: &dyn Fn(&Path) -> Option<String>,
    deadline: Deadline,
) -> Result<Tree, ErrorDetail> {
    let parts = parse_relative(raw_path)?;
    let (_, real) = resolve(root, &parts, guard)?;
    if !real.is_dir() {
        return Err(error("invalid_field", "path is not a folder"));
    }
    let reader = fs::read_dir(&real).map_err(|_| refused("this folder cannot be read"))?;
    let mut entries: Vec<TreeEntry> = Vec::new();
    for (seen, entry) in reader.flatten().enumerate() {
        if seen % ENTRIES_PER_CHECK == 0 {
            deadline.check()?;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if protected(&name).is_some() || guard(&entry.path()).is_some() {
            continue;
        }
        // The entry itself, not what a link points at.
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        let file_type = meta.file_type();
        let (kind, size) = if file_type.is_symlink() {
            (EntryKind::Link, 0)
        } else if file_type.is_dir() {
            (EntryKind::Dir, 0)
        } else if file_type.is_file() {
            (EntryKind::File, meta.len())
        } else {
            // Sockets, pipes and devices are nothing the web can read.
            continue;
        };
        entries.push(TreeEntry { name, kind, size });
    }
    entries.sort_by(|a, b| {
        let a_dir = a.kind == EntryKind::Dir;
        let b_dir = b.kind == EntryKind::Dir;
        b_dir.cmp(&a_dir).then_with(|| a.name.cmp(&b.name))
    });
    entries.truncate(MAX_TREE_ENTRIES);
    Ok(Tree {
        path: parts.join("/"),
        entries,
    })
}

fn read(
    root: &Path,
    raw_path: &str,
    guard: &dyn Fn(&Path) -> Option<String>,
    hidden: &[String],
    deadline: Deadline,
) -> Result<FileContent, ErrorDetail> {
    let opened = read_checked(root, raw_path, guard, deadline)?;
    let Opened {
        path,
        size,
        bytes,
        truncated,
        ..
    } = opened;
    match text_of(&bytes, truncated) {
        Some(text) => {
            let (text, cut) = shown_text(text, truncated, hidden, deadline)?;
            Ok(FileContent {
                path,
                size,
                binary: false,
                truncated: truncated || cut,
                text: Some(text),
            })
        }
        None => Ok(FileContent {
            path,
            size,
            binary: true,
            truncated: false,
            text: None,
        }),
    }
}

/// A file of a shared folder as read under the file view's rules.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The path asked for, `/`-separated.
    pub path: String,
    /// The real path read.
    pub real: PathBuf,
    /// The file's size when it was opened.
    pub size: u64,
    /// At most [`MAX_FILE_BYTES`] of it.
    pub bytes: Vec<u8>,
    /// The file holds more than `bytes`.
    pub truncated: bool,
}

/// Reads the file `raw_path` of the folder `root` under the file view's path rules: relative,
/// no `..`, nothing protected, inside the folder once links are resolved, a regular file
/// with one name, opened without following a final link and the same file as checked.
///
/// # Errors
/// The refusal to answer with.
pub(crate) fn read_checked(
    root: &Path,
    raw_path: &str,
    guard: &dyn Fn(&Path) -> Option<String>,
    deadline: Deadline,
) -> Result<Opened, ErrorDetail> {
    let parts = parse_relative(raw_path)?;
    if parts.is_empty() {
        return Err(error("invalid_field", "path names the folder, not a file"));
    }
    let (root, real) = resolve(root, &parts, guard)?;
    let mut file = open_file(&real)?;
    let meta = file
        .metadata()
        .map_err(|_| refused("this file cannot be read"))?;
    if meta.is_dir() {
        return Err(error("invalid_field", "path is a folder, not a file"));
    }
    if !meta.is_file() {
        return Err(refused("only regular files are shown"));
    }
    if link_count(&meta) > 1 {
        return Err(refused(
            "this file has other names (hard links) and may belong elsewhere",
        ));
    }
    // The file opened must be the one checked: a path swapped meanwhile is refused.
    if let Some(opened) = opened_path(&file) {
        if opened != real {
            return Err(refused("the file changed while it was being read"));
        }
        check_inside(&root, &opened)?;
    }
    let size = meta.len();
    let bytes = read_until(&mut file, deadline)?;
    let truncated = size > MAX_FILE_BYTES
        || bytes.len() as u64 >= MAX_FILE_BYTES && {
            // The file may have grown since it was measured.
            let mut probe = [0u8; 1];
            matches!(file.read(&mut probe), Ok(1))
        };
    Ok(Opened {
        path: parts.join("/"),
        real,
        size,
        bytes,
        truncated,
    })
}

/// A file's text as the file view shows it: the last line of a cut read left out, every
/// saved value in `hidden` replaced, then what [`redaction`] hides, at most
/// [`MAX_FILE_BYTES`]; and whether that limit cut it.
///
/// # Errors
/// Out of time.
pub(crate) fn shown_text(
    mut text: String,
    truncated: bool,
    hidden: &[String],
    deadline: Deadline,
) -> Result<(String, bool), ErrorDetail> {
    // The last line of a cut read is incomplete: a secret in it might be shown in part (a
    // token too short to know, half a saved value), so it is left out. A single line that
    // long is hidden whole by the redaction anyway.
    if truncated {
        if let Some(newline) = text.rfind('\n') {
            text.truncate(newline + 1);
        }
    }
    deadline.check()?;
    // Saved values first: the patterns below could otherwise break one apart.
    let text = vault::redact(&text, hidden);
    deadline.check()?;
    // Redaction can lengthen short values; the text still stays within the limit.
    let mut text = redaction::redact_until(&text, deadline)?;
    let limit = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX);
    let cut = text.len() > limit;
    if cut {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    Ok((text, cut))
}

/// The message of a diff asked for a job whose start this computer did not record.
const NO_START: &str = "this computer has no record of the run's start";

/// What a path is now, for a diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Now {
    Missing,
    File,
    Link,
}

fn diff(
    root: &Path,
    asked: DiffAsked<'_>,
    guard: &dyn Fn(&Path) -> Option<String>,
    hidden: &[String],
    deadline: Deadline,
) -> Result<FileDiff, ErrorDetail> {
    let parts = parse_relative(asked.raw_path)?;
    if parts.is_empty() {
        return Err(error("invalid_field", "path names the folder, not a file"));
    }
    let Some(start) = asked.start else {
        return Err(error("not_found", NO_START));
    };
    let against = match asked.against {
        DiffAgainst::End if start.has_end() => DiffAgainst::End,
        _ => DiffAgainst::Now,
    };
    let (path, plan) = match against {
        DiffAgainst::End => plan_ended(root, start, &parts, guard, deadline)?,
        DiffAgainst::Now => plan_now(root, start, &parts, guard, deadline)?,
    };
    let text = match plan {
        Plan::Same => changes::diff::DiffText {
            text: String::new(),
            truncated: false,
        },
        Plan::Note(note) => changes::diff::DiffText {
            text: note,
            truncated: false,
        },
        Plan::Text { old, new } => {
            let old = old
                .map(|text| redact_text(&text, hidden, deadline))
                .transpose()?;
            let new = new
                .map(|text| redact_text(&text, hidden, deadline))
                .transpose()?;
            deadline.check()?;
            changes::diff::unified(&path, old.as_deref(), new.as_deref(), deadline.instant())
        }
    };
    deadline.check()?;
    Ok(FileDiff {
        path,
        text: text.text,
        truncated: text.truncated,
        against: Some(against),
    })
}

/// The plan for the file at `parts` between the run's recorded start and end: read from the
/// records alone, so what the folder holds now (a later job's work, a file swapped for a
/// link) plays no part; the path is checked by name and by the guard.
fn plan_ended(
    root: &Path,
    start: &Recorded,
    parts: &[String],
    guard: &dyn Fn(&Path) -> Option<String>,
    deadline: Deadline,
) -> Result<(String, Plan), ErrorDetail> {
    let root = root
        .canonicalize()
        .map_err(|_| error("not_found", "the job's folder no longer exists"))?;
    if root != start.folder() {
        return Err(error(
            "not_found",
            "the folder shared now is not the one the run started in",
        ));
    }
    if let Some(reason) = guard(&join_parts(&root, parts)) {
        return Err(refused(reason));
    }
    let path = parts.join("/");
    let ended = start
        .ended(&path, deadline.instant())
        .map_err(|refusal| diff_refusal(&path, refusal))?;
    deadline.check()?;
    let plan = match ended {
        None => {
            return Err(error(
                "not_found",
                "this computer has no record of the run's end",
            ))
        }
        Some(Ended::Same) => Plan::Same,
        Some(Ended::Sides { before, after }) => {
            let sha256_after = match &after {
                Side::Bytes(bytes) => Some(changes::manifest::sha256_hex(bytes)),
                _ => None,
            };
            changes::diff::plan(&path, before, after, || sha256_after)
        }
    };
    Ok((path, plan))
}

/// The plan for the file at `parts` between the run's recorded start and the file now.
fn plan_now(
    root: &Path,
    start: &Recorded,
    parts: &[String],
    guard: &dyn Fn(&Path) -> Option<String>,
    deadline: Deadline,
) -> Result<(String, Plan), ErrorDetail> {
    let (root, real, now) = resolve_for_diff(root, parts, guard)?;
    if root != start.folder() {
        return Err(error(
            "not_found",
            "the folder shared now is not the one the run started in",
        ));
    }
    let path = relative_path(&root, &real)?;
    let before = start
        .before(&path, deadline.instant())
        .map_err(|refusal| diff_refusal(&path, refusal))?;
    let now_side = read_now(&root, &real, now, deadline)?;
    deadline.check()?;
    let sha256_now = || match now {
        Now::File => changes::manifest::hash_file(&real).ok(),
        Now::Link | Now::Missing => None,
    };
    let plan = changes::diff::plan(&path, before, now_side, sha256_now);
    Ok((path, plan))
}

/// A side's text as the file view would show it: saved values, then the patterns.
fn redact_text(text: &str, hidden: &[String], deadline: Deadline) -> Result<String, ErrorDetail> {
    deadline.check()?;
    let text = vault::redact(text, hidden);
    deadline.check()?;
    Ok(redaction::redact_until(&text, deadline)?)
}

fn diff_refusal(path: &str, refusal: Refusal) -> ErrorDetail {
    match refusal {
        Refusal::NotRecorded(why) => error("not_found", why),
        Refusal::Folder => error("invalid_field", "path is a folder, not a file"),
        Refusal::OutOfTime => out_of_time(),
        Refusal::Failed(err) => {
            tracing::warn!(path, "cannot read the run's start: {err:#}");
            error(
                "unavailable",
                "this computer cannot compare this file with the run's start now",
            )
        }
    }
}

/// Resolves the parts under `root` for a diff, where the file may be gone: the real folder,
/// the real path of the file (a missing tail taken as named, a final link not followed but
/// checked to lead inside), and what is there now.
fn resolve_for_diff(
    root: &Path,
    parts: &[String],
    guard: &dyn Fn(&Path) -> Option<String>,
) -> Result<(PathBuf, PathBuf, Now), ErrorDetail> {
    let root = root
        .canonicalize()
        .map_err(|_| error("not_found", "the job's folder no longer exists"))?;
    let Some((name, folders)) = parts.split_last() else {
        return Err(error("invalid_field", "path names the folder, not a file"));
    };
    // The longest existing part of the folders, resolved; the rest taken as named.
    let mut existing = folders.len();
    while existing > 0 && fs::symlink_metadata(join_parts(&root, &folders[..existing])).is_err() {
        existing -= 1;
    }
    let parent = join_parts(&root, &folders[..existing])
        .canonicalize()
        .map_err(|_| refused("this path cannot be read"))?;
    let parent = join_parts(&parent, &folders[existing..]);
    let real = parent.join(name);
    check_inside(&root, &real)?;
    let now = match fs::symlink_metadata(&real) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Now::Missing,
        Err(_) => return Err(refused("this path cannot be read")),
        Ok(meta) if meta.file_type().is_symlink() => {
            // Where the link leads must be inside too, and not protected.
            let target = real
                .canonicalize()
                .map_err(|_| refused("this link leads nowhere in the job's folder"))?;
            check_inside(&root, &target)?;
            if let Some(reason) = guard(&target) {
                return Err(refused(reason));
            }
            Now::Link
        }
        Ok(meta) if meta.is_dir() => {
            return Err(error("invalid_field", "path is a folder, not a file"))
        }
        Ok(meta) if meta.is_file() => Now::File,
        Ok(_) => return Err(refused("only regular files are shown")),
    };
    if let Some(reason) = guard(&real) {
        return Err(refused(reason));
    }
    Ok((root, real, now))
}

fn join_parts(base: &Path, parts: &[String]) -> PathBuf {
    parts
        .iter()
        .fold(base.to_path_buf(), |path, part| path.join(part))
}

/// `real` relative to `root`, `/`-separated.
fn relative_path(root: &Path, real: &Path) -> Result<String, ErrorDetail> {
    let relative = real
        .strip_prefix(root)
        .map_err(|_| refused("this path leads outside the job's folder"))?;
    let parts: Option<Vec<&str>> = relative
        .components()
        .map(|part| part.as_os_str().to_str())
        .collect();
    parts
        .map(|parts| parts.join("/"))
        .filter(|path| !path.is_empty())
        .ok_or_else(|| error("invalid_field", "path is not a valid path"))
}

/// The file at `real` now, as one side of a diff: checked as a file to show is (a regular
/// file opened without following a link, one name only, the same file as checked), at
/// most [`MAX_COMPARED_BYTES`].
fn read_now(root: &Path, real: &Path, now: Now, deadline: Deadline) -> Result<Side, ErrorDetail> {
    match now {
        Now::Missing => Ok(Side::Absent),
        Now::Link => fs::read_link(real)
            .map(|target| Side::Bytes(target.as_os_str().as_encoded_bytes().to_vec()))
            .map_err(|_| refused("this link cannot be read")),
        Now::File => {
            let mut file = open_file(real)?;
            let meta = file
                .metadata()
                .map_err(|_| refused("this file cannot be read"))?;
            if !meta.is_file() {
                return Err(refused("only regular files are shown"));
            }
            if link_count(&meta) > 1 {
                return Err(refused(
                    "this file has other names (hard links) and may belong elsewhere",
                ));
            }
            if let Some(opened) = opened_path(&file) {
                if opened != real {
                    return Err(refused("the file changed while it was being read"));
                }
                check_inside(root, &opened)?;
            }
            if meta.len() > MAX_COMPARED_BYTES {
                return Ok(Side::TooLarge);
            }
            let bytes = read_until(&mut file, deadline)?;
            let mut probe = [0u8; 1];
            if bytes.len() as u64 >= MAX_COMPARED_BYTES && matches!(file.read(&mut probe), Ok(1)) {
                return Ok(Side::TooLarge);
            }
            Ok(Side::Bytes(bytes))
        }
    }
}

/// At most [`MAX_FILE_BYTES`] of `file`, read in chunks with a look at `deadline` before
/// each.
fn read_until(file: &mut fs::File, deadline: Deadline) -> Result<Vec<u8>, ErrorDetail> {
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut limited = file.take(MAX_FILE_BYTES);
    loop {
        deadline.check()?;
        match limited.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(refused("this file cannot be read")),
        }
    }
}

/// Opens `path` without following a final link (and without blocking on a FIFO).
pub(crate) fn open_file(path: &Path) -> Result<fs::File, ErrorDetail> {
    open_no_follow(path).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => not_found(),
        _ => refused("this file cannot be opened"),
    })
}

/// The bytes as text, or `None` when they look binary: a NUL byte early on, or invalid
/// UTF-8 (except a character cut at the end of a truncated read).
pub(crate) fn text_of(bytes: &[u8], truncated: bool) -> Option<String> {
    if bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) {
        return None;
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Some(text.to_owned()),
        Err(err) if truncated && err.error_len().is_none() => {
            let valid = &bytes[..err.valid_up_to()];
            std::str::from_utf8(valid).ok().map(str::to_owned)
        }
        Err(_) => None,
    }
}

/// Why a file or folder name is never shown, if it is one of those.
pub fn protected(name: &str) -> Option<&'static str> {
    if name.eq_ignore_ascii_case(".git") {
        return Some("Git internals are not shown");
    }
    let ssh_key = || {
        let lower = name.to_ascii_lowercase();
        KEY_PREFIXES.iter().any(|prefix| lower.starts_with(prefix))
    };
    credential_kind(name).map(|kind| match kind {
        CredentialKind::Environment => "environment files hold secrets and are not shown",
        CredentialKind::CredentialFolder => "this folder holds credentials and is not shown",
        CredentialKind::CredentialFile => "credential files are not shown",
        CredentialKind::Key if ssh_key() => "keys are not shown",
        CredentialKind::Key => "keys and secret stores are not shown",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Folder {
        _tmp: tempfile::TempDir,
        outside: PathBuf,
        root: PathBuf,
    }

    fn folder() -> Folder {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().join("work");
        let outside = tmp.path().join("outside");
        for dir in [&root, &outside, &root.join("src"), &root.join(".git")] {
            fs::create_dir_all(dir).unwrap_or_else(|err| panic!("{err}"));
        }
        let write = |path: PathBuf, text: &[u8]| {
            fs::write(path, text).unwrap_or_else(|err| panic!("{err}"));
        };
        write(root.join("README.md"), b"hello\n");
        write(root.join("src/main.rs"), b"fn main() {}\n");
        write(root.join(".env"), b"TOKEN=x\n");
        write(root.join(".env.local"), b"TOKEN=x\n");
        write(root.join("id_ed25519"), b"key\n");
        write(root.join("server.pem"), b"key\n");
        write(root.join(".git/config"), b"[core]\n");
        write(root.join("image.png"), b"\x89PNG\r\n\x1a\n\0\0\0");
        write(outside.join("secret.txt"), b"outside\n");
        Folder {
            _tmp: tmp,
            outside,
            root,
        }
    }

    fn no_guard(_: &Path) -> Option<String> {
        None
    }

    #[test]
    fn the_guard_has_the_last_word() {
        let folder = folder();
        let guard = |path: &Path| {
            path.ends_with("main.rs")
                .then(|| "protected by the guard".to_owned())
        };
        let file = answer(&folder.root, FileOp::File, "src/main.rs", &guard);
        assert_eq!(code(&file), Some("path_refused"));
        let tree = answer(&folder.root, FileOp::Tree, "src", &guard);
        assert_eq!(tree.tree.map(|tree| tree.entries.len()), Some(0));
    }

    fn code(answer: &FileAnswer) -> Option<&str> {
        answer.error.as_ref().map(|error| error.code.as_str())
    }

    fn text(answer: &FileAnswer) -> Option<&str> {
        answer.file.as_ref().and_then(|file| file.text.as_deref())
    }

    #[test]
    fn listings_leave_out_secrets_and_git() {
        let folder = folder();
        let answer = answer(&folder.root, FileOp::Tree, "", &no_guard);
        let tree = answer.tree.clone().unwrap_or_else(|| panic!("{answer:?}"));
        let names: Vec<(&str, EntryKind)> = tree
            .entries
            .iter()
            .map(|entry| (entry.name.as_str(), entry.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("src", EntryKind::Dir),
                ("README.md", EntryKind::File),
                ("image.png", EntryKind::File),
            ]
        );
        let sub = super::answer(&folder.root, FileOp::Tree, "./src/", &no_guard);
        assert_eq!(sub.tree.map(|tree| tree.path), Some("src".to_owned()));
    }

    #[test]
    fn paths_stay_inside_the_folder() {
        let folder = folder();
        #[cfg(unix)]
        {
            use std::os::unix::fs::symlink;
            let link = |target: &Path, name: &str| {
                symlink(target, folder.root.join(name)).unwrap_or_else(|err| panic!("{err}"));
            };
            link(&folder.outside.join("secret.txt"), "escape.txt");
            link(&folder.outside, "escape-dir");
            link(&folder.root.join(".env"), "innocent.txt");
            link(&folder.root.join(".git"), "g");
            link(&folder.root.join("README.md"), "readme-link");
            fs::hard_link(
                folder.outside.join("secret.txt"),
                folder.root.join("hard.txt"),
            )
            .unwrap_or_else(|err| panic!("{err}"));
        }
        let check = |op: FileOp, path: &str, expected: Option<&str>| {
            let answer = answer(&folder.root, op, path, &no_guard);
            assert_eq!(code(&answer), expected, "{op:?} {path:?}: {answer:?}");
        };
        check(FileOp::File, "README.md", None);
        check(FileOp::File, "src/main.rs", None);
        check(FileOp::File, "missing.txt", Some("not_found"));
        check(FileOp::File, "/etc/passwd", Some("path_refused"));
        check(FileOp::File, "../outside/secret.txt", Some("path_refused"));
        check(
            FileOp::File,
            "src/../../outside/secret.txt",
            Some("path_refused"),
        );
        check(FileOp::File, ".env", Some("path_refused"));
        check(FileOp::File, ".ENV.local", Some("path_refused"));
        check(FileOp::File, "id_ed25519", Some("path_refused"));
        check(FileOp::File, "server.pem", Some("path_refused"));
        check(FileOp::File, ".git/config", Some("path_refused"));
        check(FileOp::Tree, ".git", Some("path_refused"));
        check(FileOp::File, "", Some("invalid_field"));
        check(FileOp::File, "src", Some("invalid_field"));
        check(FileOp::Tree, "README.md", Some("invalid_field"));
        check(FileOp::File, "a\0b", Some("invalid_field"));
        #[cfg(unix)]
        {
            check(FileOp::File, "escape.txt", Some("path_refused"));
            check(FileOp::Tree, "escape-dir", Some("path_refused"));
            check(FileOp::File, "innocent.txt", Some("path_refused"));
            check(FileOp::File, "g/config", Some("path_refused"));
            check(FileOp::File, "readme-link", None);
            check(FileOp::File, "hard.txt", Some("path_refused"));
        }
    }

    #[test]
    fn files_are_bounded_binary_is_described_and_text_redacted() {
        let folder = folder();
        let png = answer(&folder.root, FileOp::File, "image.png", &no_guard);
        let file = png.file.unwrap_or_else(|| panic!("no file"));
        assert!(file.binary && file.text.is_none() && file.size == 11);

        // Lines of 201 bytes (2 bytes a character) to twice the limit: cut at the last
        // whole line within it.
        let line = format!("{}\n", "é".repeat(100));
        let big = line.repeat(2 * MAX_FILE_BYTES as usize / line.len() + 1);
        fs::write(folder.root.join("big.txt"), &big).unwrap_or_else(|err| panic!("{err}"));
        let answer = answer(&folder.root, FileOp::File, "big.txt", &no_guard);
        let file = answer.file.unwrap_or_else(|| panic!("no file"));
        assert!(file.truncated && !file.binary);
        assert_eq!(file.size, big.len() as u64);
        let shown = file.text.unwrap_or_default();
        let whole_lines = MAX_FILE_BYTES as usize / line.len() * line.len();
        assert_eq!(shown.len(), whole_lines);
        assert!(big.starts_with(&shown));

        // One line of twice the limit is too long to check: hidden whole.
        let long = "é".repeat(MAX_FILE_BYTES as usize);
        fs::write(folder.root.join("long.txt"), &long).unwrap_or_else(|err| panic!("{err}"));
        let answer = super::answer(&folder.root, FileOp::File, "long.txt", &no_guard);
        let file = answer.file.unwrap_or_else(|| panic!("no file"));
        assert!(file.truncated && !file.binary);
        assert_eq!(
            file.text.as_deref(),
            Some("[redacted: a line of 1048576 bytes is too long to check]")
        );

        fs::write(
            folder.root.join("config.sh"),
            "export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123\nNAME=box\n",
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let answer = super::answer(&folder.root, FileOp::File, "config.sh", &no_guard);
        assert_eq!(
            text(&answer),
            Some("export GITHUB_TOKEN=[redacted]\nNAME=box\n")
        );
    }

    /// Issue 13, finding 8: names that start with `.env`, `env.sh` and `.gitconfig` are
    /// credentials; one-line JSON pairs and URL passwords are hidden in what is shown.
    #[test]
    fn every_env_name_and_gitconfig_is_hidden_and_pairs_and_urls_redacted() {
        let folder = folder();
        let names = [".envrc", ".env~", ".env-prod", "env.sh", ".gitconfig"];
        for name in names {
            fs::write(folder.root.join(name), "TOKEN=x\n").unwrap_or_else(|err| panic!("{err}"));
            let file = answer(&folder.root, FileOp::File, name, &no_guard);
            assert_eq!(code(&file), Some("path_refused"), "{name}: {file:?}");
        }
        let tree = answer(&folder.root, FileOp::Tree, "", &no_guard);
        let listed: Vec<String> = tree
            .tree
            .map(|tree| tree.entries.into_iter().map(|entry| entry.name).collect())
            .unwrap_or_default();
        assert!(
            names.iter().all(|name| !listed.iter().any(|l| l == name)),
            "{listed:?}"
        );

        fs::write(
            folder.root.join("settings.json"),
            concat!(
                r#"{"client_secret": "s3cr3t", "password": "p@ss", "user": "bob"}"#,
                "\n",
                r#"{"db": "postgres://u:secret@db:5432/app", "git": "https://user:pw@example.com/r"}"#,
                "\n",
            ),
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let file = answer(&folder.root, FileOp::File, "settings.json", &no_guard);
        assert_eq!(
            text(&file),
            Some(concat!(
                r#"{"client_secret": "[redacted]", "password": "[redacted]", "user": "bob"}"#,
                "\n",
                r#"{"db": "postgres://u:[redacted]@db:5432/app", "git": "https://user:[redacted]@example.com/r"}"#,
                "\n",
            ))
        );
    }

    /// Saved values are hidden before anything is cut, and the incomplete last line of a
    /// cut read is left out: no secret is shown in part at the cut.
    #[test]
    fn nothing_secret_is_shown_in_part_where_a_read_is_cut() {
        let folder = folder();
        let saved = "correct horse battery staple".to_owned();
        let token = "ghp_abcdefghijklmnopqrstuvwxyz0123";
        let filler = "x".repeat(99) + "\n";
        let mut text = filler.repeat(MAX_FILE_BYTES as usize / filler.len());
        text.push_str(&format!("the saved {saved}\n"));
        // The cut falls ten bytes into the token: `ghp_abcdef` alone is too short to know.
        let room = MAX_FILE_BYTES as usize - text.len();
        text.push_str(&"y".repeat(room - 10));
        text.push_str(token);
        text.push_str("\nmore\n");
        fs::write(folder.root.join("cut.log"), &text).unwrap_or_else(|err| panic!("{err}"));
        let hidden = [saved.clone()];
        let answer = answer_within(
            &folder.root,
            FileOp::File,
            "cut.log",
            &no_guard,
            &hidden,
            Deadline::NONE,
        );
        let file = answer.file.unwrap_or_else(|| panic!("no file"));
        let shown = file.text.unwrap_or_default();
        assert!(file.truncated);
        assert!(
            shown.ends_with("the saved [hidden]\n"),
            "{}",
            &shown[shown.len() - 80..]
        );
        assert!(!shown.contains("ghp_") && !shown.contains(&saved));
    }

    /// Past its deadline a request's work stops and says so (`device_timeout`).
    #[test]
    fn work_past_the_deadline_stops_with_device_timeout() {
        let folder = folder();
        let past = Deadline::at(Instant::now() - Duration::from_millis(1));
        for op in [FileOp::File, FileOp::Tree] {
            let path = if op == FileOp::File { "README.md" } else { "" };
            let answer = answer_within(&folder.root, op, path, &no_guard, &[], past);
            assert_eq!(code(&answer), Some("device_timeout"), "{op:?}: {answer:?}");
        }
    }

    #[test]
    fn the_budget_ends_before_the_server_stops_waiting() {
        assert_eq!(budget(None), DEFAULT_BUDGET);
        assert!(DEFAULT_BUDGET < Duration::from_secs(10));
        assert_eq!(
            budget(Some(Duration::from_secs(10))),
            Duration::from_secs(9)
        );
        assert_eq!(
            budget(Some(Duration::from_secs(1))),
            Duration::from_millis(800)
        );
        assert_eq!(budget(Some(Duration::ZERO)), Duration::ZERO);
        assert_eq!(budget(Some(Duration::from_secs(3600))), MAX_BUDGET);
    }

    #[test]
    fn answers_fit_the_servers_limit_after_escaping() {
        let file = FileContent {
            path: "quotes.txt".into(),
            size: 1000,
            binary: false,
            truncated: false,
            text: Some("\"\u{1}".repeat(500)),
        };
        let fitted = fit(file.clone(), 2000);
        assert!(fitted.truncated);
        let json = serde_json::to_vec(&fitted).unwrap_or_default();
        assert!(json.len() <= 2000, "{}", json.len());
        assert!(fitted.text.is_some_and(|text| text.len() > 200));
        assert_eq!(fit(file.clone(), 1 << 20), file);
    }

    /// A git repository with a commit, its start recorded for job `job1`.
    struct Started {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        start: Recorded,
    }

    fn git(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .current_dir(dir)
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(status.status.success(), "git {args:?}");
    }

    fn started(files: &[(&str, &[u8])]) -> Started {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().join("work");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&root).unwrap_or_else(|err| panic!("{err}"));
        fs::create_dir_all(&outside).unwrap_or_else(|err| panic!("{err}"));
        for (name, bytes) in files {
            fs::write(root.join(name), bytes).unwrap_or_else(|err| panic!("{err}"));
        }
        git(&root, &["init", "-q"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "first"]);
        let job = crate::test_job::claimed_job("tests", tether_protocol::jobs::Mode::Unattended);
        let data = tmp.path().join("agent");
        changes::record_start(&data, &job, &root).unwrap_or_else(|err| panic!("{err:#}"));
        let start = Recorded::load(&data, &job.id)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no start"));
        Started {
            _tmp: tmp,
            root,
            outside,
            start,
        }
    }

    fn diff_of(started: &Started, path: &str, hidden: &[String]) -> FileAnswer {
        answer_diff_within(
            &started.root,
            asked(Some(&started.start), path),
            &no_guard,
            hidden,
            Deadline::NONE,
        )
    }

    fn asked<'a>(start: Option<&'a Recorded>, raw_path: &'a str) -> DiffAsked<'a> {
        DiffAsked {
            start,
            raw_path,
            against: DiffAgainst::End,
        }
    }

    fn diff_text(answer: &FileAnswer) -> &str {
        answer
            .diff
            .as_ref()
            .map_or("<none>", |diff| diff.text.as_str())
    }

    #[test]
    fn diffs_keep_the_file_rules_and_need_a_start() {
        let started = started(&[("README.md", b"hello\n"), (".env", b"TOKEN=x\n")]);
        fs::write(started.outside.join("secret.txt"), "outside\n").unwrap_or_default();
        fs::create_dir_all(started.root.join("src")).unwrap_or_default();
        #[cfg(unix)]
        std::os::unix::fs::symlink(
            started.outside.join("secret.txt"),
            started.root.join("escape.txt"),
        )
        .unwrap_or_else(|err| panic!("{err}"));
        let check = |path: &str, expected: Option<&str>| {
            let answer = diff_of(&started, path, &[]);
            assert_eq!(code(&answer), expected, "{path:?}: {answer:?}");
        };
        check("README.md", None);
        check("../outside/secret.txt", Some("path_refused"));
        check("/etc/passwd", Some("path_refused"));
        check(".git/config", Some("path_refused"));
        check(".env", Some("path_refused"));
        check("src/../../outside/secret.txt", Some("path_refused"));
        #[cfg(unix)]
        check("escape.txt", Some("path_refused"));
        check("src", Some("invalid_field"));
        check("", Some("invalid_field"));
        check("never-there.txt", None);
        assert_eq!(diff_text(&diff_of(&started, "never-there.txt", &[])), "");

        let without = answer_diff_within(
            &started.root,
            asked(None, "README.md"),
            &no_guard,
            &[],
            Deadline::NONE,
        );
        assert_eq!(code(&without), Some("not_found"));
        assert_eq!(
            without.error.map(|error| error.message),
            Some("this computer has no record of the run's start".to_owned())
        );
        let plain = answer(&started.root, FileOp::Diff, "README.md", &no_guard);
        assert_eq!(code(&plain), Some("not_found"));
        let past = Deadline::at(Instant::now() - Duration::from_millis(1));
        fs::write(started.root.join("README.md"), "changed\n").unwrap_or_default();
        let late = answer_diff_within(
            &started.root,
            asked(Some(&started.start), "README.md"),
            &no_guard,
            &[],
            past,
        );
        assert_eq!(code(&late), Some("device_timeout"));
    }

    #[test]
    fn a_diff_is_redacted_cut_and_says_binary() {
        let started = started(&[
            ("config.sh", b"NAME=box\n"),
            ("image.bin", b"\0\x01"),
            ("gone.txt", b"bye\n"),
        ]);
        let write = |name: &str, bytes: &[u8]| {
            fs::write(started.root.join(name), bytes).unwrap_or_else(|err| panic!("{err}"));
        };
        let saved = "correct horse battery staple".to_owned();
        write(
            "config.sh",
            format!("NAME=box\nexport GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123\necho 'the saved {saved}'\n")
                .as_bytes(),
        );
        let answer = diff_of(&started, "config.sh", std::slice::from_ref(&saved));
        assert_eq!(
            diff_text(&answer),
            concat!(
                "--- a/config.sh\n+++ b/config.sh\n@@ -1 +1,3 @@\n NAME=box\n",
                "+export GITHUB_TOKEN=[redacted]\n+echo 'the saved [hidden]'\n"
            )
        );
        assert_eq!(
            answer.diff.as_ref().map(|diff| diff.path.as_str()),
            Some("config.sh")
        );

        write("image.bin", b"\0\x02");
        assert_eq!(
            diff_text(&diff_of(&started, "image.bin", &[])),
            "Binary file image.bin differs\n"
        );

        fs::remove_file(started.root.join("gone.txt")).unwrap_or_default();
        assert_eq!(
            diff_text(&diff_of(&started, "gone.txt", &[])),
            "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        );

        let line = "an added line of the big file\n";
        write("big.txt", line.repeat(2 * MAX_DIFF / line.len()).as_bytes());
        let big = diff_of(&started, "big.txt", &[]);
        let diff = big.diff.unwrap_or_else(|| panic!("{:?}", big.error));
        assert!(diff.truncated && diff.text.len() <= MAX_DIFF);
        assert!(diff
            .text
            .ends_with("[the diff is longer than 256 KiB and is cut here]\n"));

        // Changed by the run, put back since: nothing to show.
        write("config.sh", b"NAME=box\n");
        assert_eq!(diff_text(&diff_of(&started, "config.sh", &[])), "");
    }

    const MAX_DIFF: usize = tether_protocol::changes::MAX_DIFF_BYTES;

    #[test]
    fn diff_answers_fit_the_servers_limit_after_escaping() {
        let diff = FileDiff {
            path: "q".into(),
            text: "+\"\u{1}\n".repeat(500),
            truncated: false,
            against: None,
        };
        let fitted = fit_diff(diff, 2000);
        let json = serde_json::to_vec(&fitted).unwrap_or_default();
        assert!(fitted.truncated && json.len() <= 2000, "{}", json.len());
        assert!(fitted.text.ends_with("cut here]\n"));
    }

    #[test]
    fn protected_names() {
        for name in [
            ".env",
            ".env.production",
            ".envrc",
            ".env~",
            ".env-prod",
            "env.sh",
            ".gitconfig",
            "prod.env",
            ".git",
            "id_rsa",
            "id_rsa.pub",
            "cert.PEM",
            ".npmrc",
            "credentials",
            ".ssh",
        ] {
            assert!(protected(name).is_some(), "{name}");
        }
        for name in [
            ".gitignore",
            "env.rs",
            "src",
            "README.md",
            "keys.rs",
            ".github",
        ] {
            assert!(protected(name).is_none(), "{name}");
        }
    }

    #[test]
    fn each_kind_of_protected_name_keeps_its_message() {
        for (name, message) in [
            (".GIT", "Git internals are not shown"),
            (
                ".env.local",
                "environment files hold secrets and are not shown",
            ),
            (".kube", "this folder holds credentials and is not shown"),
            ("known_hosts", "credential files are not shown"),
            ("id_ed25519.pub", "keys are not shown"),
            ("vault.kdbx", "keys and secret stores are not shown"),
        ] {
            assert_eq!(protected(name), Some(message), "{name}");
        }
    }
}
