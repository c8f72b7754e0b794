//! Answering the web's `file.request`: a directory listing or a file of a job's folder,
//! read live on this computer (seed 003 §4.6), in the folder the job used as this computer
//! shares it now.
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
//! - text is cut at [`MAX_FILE_BYTES`] (`truncated`), binary files are described and not
//!   sent, and text is redacted: tokens with known prefixes, private key blocks, and the
//!   values of `NAME=value` lines whose name looks like a credential.
//!
//! Protected *names* inside a folder (`.env`, `id_rsa`, `.git`, …) are [`protected`]: `.git`
//! here, the credential names from [`tether_protocol::credential_files`]. [`handle`] adds the
//! run confinement's guard ([`crate::policy::guard`]: keys, sign-ins, browser data and the
//! agent's own files, by absolute path) through the `guard` argument of [`answer`], and hides
//! every saved secret value in a file's text.

use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use tether_protocol::credential_files::{credential_kind, CredentialKind, KEY_PREFIXES};
use tether_protocol::error::ErrorDetail;
use tether_protocol::files::{
    EntryKind, FileAnswer, FileContent, FileOp, Tree, TreeEntry, MAX_FILE_BYTES,
};
use tether_protocol::JobId;

use crate::local::vault;
use crate::remote::events::FileRequest;
use crate::remote::frames::FrameContext;
use crate::sandbox;

/// Most entries one listing carries; the rest are left out.
pub const MAX_TREE_ENTRIES: usize = 1000;
/// Longest path the web may ask for, in bytes.
const MAX_PATH_BYTES: usize = 4096;
/// How much of a file is looked at to tell text from binary.
const SNIFF_BYTES: usize = 8192;
/// What replaces a redacted value.
pub const REDACTED: &str = "[redacted]";
/// Largest answer body, JSON included: the server takes 1.5 MiB; escaping can make 1 MiB of
/// text much longer (quotes, control characters), so text is cut further when it must.
pub const MAX_ANSWER_BYTES: usize = 1536 * 1024 - 16 * 1024;

/// Answers `request` (off the async threads) and sends the answer to the server.
pub async fn handle(context: FrameContext, request: FileRequest) {
    let client = context.client.clone();
    let (job_id, op, path) = (request.job_id.clone(), request.op, request.path.clone());
    let answer = tokio::task::spawn_blocking(move || answer_for_job(context, &job_id, op, &path))
        .await
        .unwrap_or_else(|_| refusal(error("internal", "the answer failed")));
    if let Err(err) = client.answer_file_request(&request.id, &answer).await {
        tracing::warn!(job = %request.job_id, "file answer not delivered: {err}");
    }
}

/// The answer for `op` on `raw_path` in the folder `job_id` used, as shared now.
fn answer_for_job(context: FrameContext, job_id: &JobId, op: FileOp, raw_path: &str) -> FileAnswer {
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
    let guard = sandbox::guard();
    if let Err(refusal_of) = guard.check_shared_folder(&folder.label, &folder.path) {
        return refusal(error("path_refused", refusal_of.to_string()));
    }
    let check = |path: &Path| guard.check_access(path).err().map(|r| r.to_string());
    let mut answer = answer(&folder.path, op, raw_path, &check);
    // Saved secret values never leave in a file's text.
    if let Some(text) = answer.file.as_mut().and_then(|file| file.text.as_mut()) {
        let values = vault::Vault::new(&context.data_dir).all_values();
        *text = vault::redact(text, &values);
    }
    answer
}

/// The answer for `op` on `raw_path` inside the folder `root`. `guard` gets the real path of
/// what would be shown and may refuse it with a reason. Never panics; every refusal is an
/// answer with `error`.
pub fn answer(
    root: &Path,
    op: FileOp,
    raw_path: &str,
    guard: &dyn Fn(&Path) -> Option<String>,
) -> FileAnswer {
    let result = match op {
        FileOp::Tree => list(root, raw_path, guard).map(|tree| FileAnswer {
            tree: Some(tree),
            file: None,
            error: None,
        }),
        FileOp::File => read(root, raw_path, guard).map(|file| FileAnswer {
            tree: None,
            file: Some(fit(file, MAX_ANSWER_BYTES)),
            error: None,
        }),
    };
    result.unwrap_or_else(refusal)
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

fn refused(message: impl Into<String>) -> ErrorDetail {
    error("path_refused", message)
}

fn not_found() -> ErrorDetail {
    error(
        "not_found",
        "there is no such file or folder in the job's folder",
    )
}

/// A path the web sent, checked and split: relative, no `..`, nothing protected.
fn parse_relative(raw: &str) -> Result<Vec<String>, ErrorDetail> {
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
fn resolve(
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
fn check_inside(root: &Path, real: &Path) -> Result<(), ErrorDetail> {
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
) -> Result<Tree, ErrorDetail> {
    let parts = parse_relative(raw_path)?;
    let (_, real) = resolve(root, &parts, guard)?;
    if !real.is_dir() {
        return Err(error("invalid_field", "path is not a folder"));
    }
    let reader = fs::read_dir(&real).map_err(|_| refused("this folder cannot be read"))?;
    let mut entries: Vec<TreeEntry> = Vec::new();
    for entry in reader.flatten() {
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
) -> Result<FileContent, ErrorDetail> {
    let parts = parse_relative(raw_path)?;
    if parts.is_empty() {
        return Err(error("invalid_field", "path names the folder, not a file"));
    }
    let (root, real) = resolve(root, &parts, guard)?;
    let mut file = open_no_follow(&real)?;
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
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|_| refused("this file cannot be read"))?;
    let truncated = size > MAX_FILE_BYTES
        || bytes.len() as u64 >= MAX_FILE_BYTES && {
            // The file may have grown since it was measured.
            let mut probe = [0u8; 1];
            matches!(file.read(&mut probe), Ok(1))
        };
    let path = parts.join("/");
    match text_of(&bytes, truncated) {
        Some(text) => {
            // Redaction can lengthen short values; the text still stays within the limit.
            let mut text = redact(&text);
            let limit = usize::try_from(MAX_FILE_BYTES).unwrap_or(usize::MAX);
            let cut = text.len() > limit;
            if cut {
                let mut end = limit;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
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

fn open_no_follow(path: &Path) -> Result<fs::File, ErrorDetail> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // No final symlink; and a FIFO must not block the agent.
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => not_found(),
        _ => refused("this file cannot be opened"),
    })
}

#[cfg(unix)]
fn link_count(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::nlink(meta)
}

#[cfg(not(unix))]
fn link_count(_meta: &fs::Metadata) -> u64 {
    1
}

/// Where an open file really is (Linux: through `/proc/self/fd`); `None` elsewhere.
fn opened_path(file: &fs::File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// The bytes as text, or `None` when they look binary: a NUL byte early on, or invalid
/// UTF-8 (except a character cut at the end of a truncated read).
fn text_of(bytes: &[u8], truncated: bool) -> Option<String> {
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

/// Hides secret values in text: tokens with known prefixes, private key blocks, and values
/// of `NAME=value` / `NAME: value` lines whose name looks like a credential. Bounded and
/// line-based: it hides the obvious, and proves nothing about what is left.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_key_block = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let ending = &line[body.len()..];
        if in_key_block {
            if body.contains("-----END") {
                in_key_block = false;
                out.push_str(body);
            } else {
                out.push_str(REDACTED);
            }
            out.push_str(ending);
            continue;
        }
        if body.contains("-----BEGIN") && body.contains("PRIVATE KEY") {
            in_key_block = !body.contains("-----END");
            out.push_str(body);
            out.push_str(ending);
            continue;
        }
        let line = redact_assignment(body).unwrap_or_else(|| body.to_owned());
        out.push_str(&redact_tokens(&line));
        out.push_str(ending);
    }
    out
}

/// `NAME=value`, `export NAME=value`, `NAME: value`, `"NAME": "value"` with a credential
/// name: the value hidden.
fn redact_assignment(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start().len();
    let mut rest = &line[indent..];
    if let Some(after) = rest.strip_prefix("export ") {
        rest = after.trim_start();
    }
    let quoted = rest.starts_with(['"', '\'']);
    let name_start = usize::from(quoted);
    let name_len = rest[name_start..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(rest.len() - name_start);
    let name = &rest[name_start..name_start + name_len];
    if name.is_empty() || !is_credential_name(name) {
        return None;
    }
    let mut after_name = &rest[name_start + name_len..];
    if quoted {
        after_name = after_name.strip_prefix(['"', '\''])?;
    }
    let trimmed = after_name.trim_start();
    let separator = trimmed.chars().next().filter(|c| matches!(c, '=' | ':'))?;
    let value = trimmed[separator.len_utf8()..].trim_start();
    let value = value.trim_end().trim_end_matches(',');
    if value.is_empty() || value.contains(REDACTED) || matches!(value, "{" | "[" | "|" | ">") {
        return None;
    }
    let prefix_len = line.len() - trimmed.len() + separator.len_utf8();
    let hidden = match value.chars().next() {
        Some(quote @ ('"' | '\'')) => format!("{quote}{REDACTED}{quote}"),
        _ => REDACTED.to_owned(),
    };
    let space = if separator == ':' { " " } else { "" };
    let comma = if line.trim_end().ends_with(',') {
        ","
    } else {
        ""
    };
    Some(format!("{}{space}{hidden}{comma}", &line[..prefix_len]))
}

/// Whether a variable or key name suggests it holds a credential.
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    const PARTS: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "PRIVATE",
        "APIKEY",
        "API_KEY",
        "ACCESS_KEY",
        "AUTH",
    ];
    PARTS.iter().any(|part| upper.contains(part))
        || upper
            .split(['_', '-', '.'])
            .any(|segment| segment == "KEY" || segment == "PWD" || segment == "PASS")
}

/// Token prefixes of well-known services, and how many token characters must follow for
/// it to count (so prose such as `sk-learn` stays).
const TOKEN_PREFIXES: &[(&str, usize)] = &[
    ("ghp_", 20),
    ("gho_", 20),
    ("ghu_", 20),
    ("ghs_", 20),
    ("ghr_", 20),
    ("github_pat_", 20),
    ("glpat-", 16),
    ("xoxb-", 10),
    ("xoxp-", 10),
    ("xoxa-", 10),
    ("xoxr-", 10),
    ("xoxs-", 10),
    ("sk-", 20),
    ("sk_live_", 16),
    ("sk_test_", 16),
    ("rk_live_", 16),
    ("AKIA", 16),
    ("ASIA", 16),
    ("AIza", 30),
    ("npm_", 30),
    ("pypi-", 30),
    ("hf_", 30),
    ("dop_v1_", 30),
    ("shpat_", 20),
    ("SG.", 30),
    ("tdt_", 16),
    ("tut_", 16),
    ("eyJ", 30),
];

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+' | '/' | '=')
}

/// A token starts only where a word starts: not after a letter, digit, `_` or `-`.
fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
}

/// Replaces every token that starts with a known prefix (at a word start) with [`REDACTED`].
fn redact_tokens(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut index = 0;
    while index < line.len() {
        let rest = &line[index..];
        let at_word_start = line[..index]
            .chars()
            .next_back()
            .is_none_or(|before| !is_word_char(before));
        if at_word_start {
            let token_len = rest.find(|c: char| !is_token_char(c)).unwrap_or(rest.len());
            let token = &rest[..token_len];
            let secret = TOKEN_PREFIXES.iter().any(|(prefix, min)| {
                token.starts_with(prefix) && token.len() >= prefix.len() + min
            });
            if secret {
                out.push_str(REDACTED);
                index += token_len;
                continue;
            }
        }
        let Some(c) = rest.chars().next() else {
            break;
        };
        out.push(c);
        index += c.len_utf8();
    }
    out
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

        let big = "é".repeat(MAX_FILE_BYTES as usize); // 2 bytes each: twice the limit
        fs::write(folder.root.join("big.txt"), &big).unwrap_or_else(|err| panic!("{err}"));
        let answer = answer(&folder.root, FileOp::File, "big.txt", &no_guard);
        let file = answer.file.unwrap_or_else(|| panic!("no file"));
        assert!(file.truncated && !file.binary);
        assert_eq!(file.size, 2 * MAX_FILE_BYTES);
        assert_eq!(
            file.text.map(|text| text.len() as u64),
            Some(MAX_FILE_BYTES)
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

    #[test]
    fn redaction_hides_the_obvious() {
        let check = |input: &str, expected: &str| assert_eq!(redact(input), expected, "{input}");
        check("nothing here\n", "nothing here\n");
        check("DB_PASSWORD=hunter2\n", "DB_PASSWORD=[redacted]\n");
        check("  api_key: abc123\n", "  api_key: [redacted]\n");
        check(
            r#"  "client_secret": "abc", "#,
            r#"  "client_secret": "[redacted]","#,
        );
        check("password:\n", "password:\n");
        check("KEYBOARD=us\n", "KEYBOARD=us\n");
        check(
            "use token ghp_abcdefghijklmnopqrstuvwxyz0123 here",
            "use token [redacted] here",
        );
        check(
            "aws AKIAABCDEFGHIJKLMNOP and sk-learn",
            "aws [redacted] and sk-learn",
        );
        check(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\ndef\n-----END OPENSSH PRIVATE KEY-----\nok\n",
            "-----BEGIN OPENSSH PRIVATE KEY-----\n[redacted]\n[redacted]\n-----END OPENSSH PRIVATE KEY-----\nok\n",
        );
        check("x=tdt_0123456789abcdef0123", "x=[redacted]");
    }

    #[test]
    fn protected_names() {
        for name in [
            ".env",
            ".env.production",
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
