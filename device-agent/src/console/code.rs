//! The Code tab: list a folder, open a file, save a file, in a shared folder by label.
//!
//! The path rules and the redaction are the live file view's, shared with it
//! ([`crate::remote::frames::file_request`]): a path relative to the folder, no `..`, nothing
//! protected by name (credential files, `.git`) anywhere along it, inside the folder once
//! links are resolved, the guard's protected paths refused, a regular file with one name
//! opened without following a final link, every saved secret value hidden, then the
//! patterns of [`redaction`](crate::remote::frames::redaction).
//!
//! - **Read** answers the file's text as the file view shows it, with `hash` the SHA-256 of
//!   its bytes on disk and `redacted` when the text shown differs from the file's. Only a
//!   text file shown whole and unchanged (valid UTF-8, not cut, nothing hidden, at most
//!   [`MAX_SAVE_BYTES`]) is `editable`.
//! - **Write** saves only over what was opened: the file is read again and a hash other
//!   than `base_hash` (`""`: the file must not exist) is a `Conflict`, nothing written. A
//!   file whose text would be redacted, or that is not text, cannot be saved. The file keeps
//!   its CRLF line endings, its UTF-8 byte order mark and its permissions: the text is
//!   written to a new file in the same folder with the old mode, flushed to disk, and
//!   renamed over the old one (a new file gets `0644`, and never replaces one that appeared
//!   meanwhile).

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tether_protocol::console::{ConsoleReply, MAX_SAVE_BYTES};
use tether_protocol::error::ErrorDetail;
use tether_protocol::files::FileOp;

use crate::local::private_files::{hex, link_count};
use crate::local::state::{Config, DataDir};
use crate::local::vault;
use crate::policy::guard::Guard;
use crate::remote::frames::file_request::{
    self, check_inside, parse_relative, read_checked, refused, resolve, shown_text, text_of,
};
use crate::remote::frames::redaction::Deadline;

/// How long one Code request may work.
pub const BUDGET: Duration = Duration::from_secs(20);
/// The byte order mark a UTF-8 file may start with.
const BOM: &[u8] = b"\xEF\xBB\xBF";
/// The mode of a file the Code tab creates.
const NEW_FILE_MODE: u32 = 0o644;

/// A Code request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeRequest {
    List {
        folder: String,
        path: String,
    },
    Read {
        folder: String,
        path: String,
    },
    Write {
        folder: String,
        path: String,
        base_hash: String,
        text: String,
    },
}

/// Answers `request` in the folders of `config` (blocking: call it off the async threads).
pub fn answer(
    data_dir: &DataDir,
    guard: &Guard,
    config: &Config,
    request: CodeRequest,
) -> ConsoleReply {
    let deadline = Deadline::at(Instant::now() + BUDGET);
    let label = match &request {
        CodeRequest::List { folder, .. }
        | CodeRequest::Read { folder, .. }
        | CodeRequest::Write { folder, .. } => folder.clone(),
    };
    let Some(shared) = config.folder(&label) else {
        return error(format!("this computer shares no folder {label:?}"));
    };
    let root = match guard.check_shared_folder(&shared.label, &shared.path) {
        Ok(root) => root,
        Err(refusal) => return error(refusal.to_string()),
    };
    let check = |path: &Path| guard.check_access(path).err().map(|r| r.to_string());
    let hidden = || vault::Vault::new(data_dir).all_values();
    let answered = match request {
        CodeRequest::List { folder, path } => {
            let answer =
                file_request::answer_within(&root, FileOp::Tree, &path, &check, &[], deadline);
            match (answer.tree, answer.error) {
                (Some(tree), _) => Ok(ConsoleReply::Listing {
                    folder,
                    path: tree.path,
                    entries: tree.entries,
                }),
                (None, Some(error)) => Err(error),
                (None, None) => Err(refused("this folder cannot be read")),
            }
        }
        CodeRequest::Read { folder, path } => {
            read(&root, &check, &hidden(), deadline, folder, path)
        }
        CodeRequest::Write {
            folder,
            path,
            base_hash,
            text,
        } => {
            let asked = Save {
                folder,
                path,
                base_hash,
                text,
            };
            write(&root, &check, &hidden(), deadline, asked)
        }
    };
    answered.unwrap_or_else(|detail| error(detail.message))
}

fn error(reason: String) -> ConsoleReply {
    ConsoleReply::Error { reason }
}

fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn read(
    root: &Path,
    check: &dyn Fn(&Path) -> Option<String>,
    hidden: &[String],
    deadline: Deadline,
    folder: String,
    path: String,
) -> Result<ConsoleReply, ErrorDetail> {
    let opened = read_checked(root, &path, check, deadline)?;
    let hash = if opened.truncated {
        crate::changes::manifest::hash_file(&opened.real)
            .map_err(|_| refused("this file cannot be read"))?
    } else {
        sha256(&opened.bytes)
    };
    let Some(raw) = text_of(&opened.bytes, opened.truncated) else {
        return Ok(ConsoleReply::File {
            folder,
            path: opened.path,
            text: None,
            hash,
            binary: true,
            truncated: false,
            redacted: false,
            editable: false,
        });
    };
    let mut compared = raw.clone();
    if opened.truncated {
        if let Some(newline) = compared.rfind('\n') {
            compared.truncate(newline + 1);
        }
    }
    let (text, cut) = shown_text(raw, opened.truncated, hidden, deadline)?;
    let redacted = text != compared;
    let truncated = opened.truncated || cut;
    let editable = !truncated && !redacted && opened.bytes.len() <= MAX_SAVE_BYTES;
    Ok(ConsoleReply::File {
        folder,
        path: opened.path,
        text: Some(text),
        hash,
        binary: false,
        truncated,
        redacted,
        editable,
    })
}

/// A save asked for.
struct Save {
    folder: String,
    path: String,
    base_hash: String,
    text: String,
}

fn write(
    root: &Path,
    check: &dyn Fn(&Path) -> Option<String>,
    hidden: &[String],
    deadline: Deadline,
    save: Save,
) -> Result<ConsoleReply, ErrorDetail> {
    let Save {
        folder,
        path,
        base_hash,
        text,
    } = save;
    if text.len() > MAX_SAVE_BYTES {
        return Err(refused(format!(
            "a saved file is at most {MAX_SAVE_BYTES} bytes"
        )));
    }
    let parts = parse_relative(&path)?;
    let Some((name, parents)) = parts.split_last() else {
        return Err(refused("path names the folder, not a file"));
    };
    let (root, dir) = resolve(root, parents, check)?;
    if !dir.is_dir() {
        return Err(refused("the file's folder is not a folder"));
    }
    let target = dir.join(name);
    check_inside(&root, &target)?;
    if let Some(reason) = check(&target) {
        return Err(refused(reason));
    }
    // What is there now: nothing, or a regular file read under the file view's rules.
    let current = match target.symlink_metadata() {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) => return Err(refused("this file cannot be read")),
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(refused("a link is not saved through"))
        }
        Ok(meta) if !meta.is_file() => return Err(refused("only regular files are saved")),
        Ok(meta) if link_count(&meta) > 1 => {
            return Err(refused(
                "this file has other names (hard links) and may belong elsewhere",
            ))
        }
        Ok(meta) => {
            let opened = read_checked(&root, &path, check, deadline)?;
            if opened.truncated || opened.bytes.len() > MAX_SAVE_BYTES {
                return Err(refused("this file is too large to save from the console"));
            }
            Some((opened.bytes, permissions_mode(&meta)))
        }
    };
    let current_hash = current
        .as_ref()
        .map_or_else(String::new, |(bytes, _)| sha256(bytes));
    if current_hash != base_hash {
        return Ok(ConsoleReply::Conflict {
            folder,
            path: parts.join("/"),
            hash: current_hash,
        });
    }
    let bytes = match &current {
        None => text.into_bytes(),
        Some((old, _)) => {
            let Some(old_text) = text_of(old, false) else {
                return Err(refused("this file is not text; it cannot be saved here"));
            };
            let (shown, _) = shown_text(old_text.clone(), false, hidden, deadline)?;
            if shown != old_text {
                return Err(refused(
                    "this file holds text the console hides (secrets); it cannot be saved from here",
                ));
            }
            shaped(old, text)
        }
    };
    if bytes.len() > MAX_SAVE_BYTES {
        return Err(refused(format!(
            "a saved file is at most {MAX_SAVE_BYTES} bytes"
        )));
    }
    let mode = current.as_ref().map_or(NEW_FILE_MODE, |(_, mode)| *mode);
    replace(&dir, &target, &bytes, mode, current.is_none())
        .map_err(|err| refused(format!("the file could not be saved: {err}")))?;
    Ok(ConsoleReply::Saved {
        folder,
        path: parts.join("/"),
        hash: sha256(&bytes),
    })
}

/// `text` shaped like the file `old` was: CRLF line endings when it used them, its byte
/// order mark when it had one.
fn shaped(old: &[u8], text: String) -> Vec<u8> {
    let crlf = old.windows(2).any(|pair| pair == b"\r\n");
    let text = if crlf {
        text.replace("\r\n", "\n").replace('\n', "\r\n")
    } else {
        text
    };
    let mut bytes = Vec::with_capacity(text.len() + BOM.len());
    if old.starts_with(BOM) && !text.as_bytes().starts_with(BOM) {
        bytes.extend_from_slice(BOM);
    }
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

#[cfg(unix)]
fn permissions_mode(meta: &std::fs::Metadata) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777
}

#[cfg(not(unix))]
fn permissions_mode(_meta: &std::fs::Metadata) -> u32 {
    NEW_FILE_MODE
}

/// Writes `bytes` to a new file in `dir` with `mode`, flushes it to disk and renames it to
/// `target` (never over an existing file when `new`).
fn replace(dir: &Path, target: &Path, bytes: &[u8], mode: u32, new: bool) -> std::io::Result<()> {
    let mut file = tempfile::Builder::new()
        .prefix(".tether-save-")
        .tempfile_in(dir)?;
    #[cfg(unix)]
    std::fs::set_permissions(
        file.path(),
        std::os::unix::fs::PermissionsExt::from_mode(mode),
    )?;
    #[cfg(not(unix))]
    let _ = mode;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    if new {
        file.persist_noclobber(target).map_err(|err| err.error)?;
    } else {
        file.persist(target).map_err(|err| err.error)?;
    }
    if let Ok(folder) = std::fs::File::open(dir) {
        let _ = folder.sync_all();
    }
    Ok(())
}
