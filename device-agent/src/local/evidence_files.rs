//! The checks every evidence file passes on this computer before any of its bytes leave it:
//! at delivery after a run ([`crate::run::evidence`]) and again when its owner asks for a
//! held one ([`crate::local::held_evidence`]).
//!
//! - Only a regular file with one name (no link, no hard link that may belong elsewhere),
//!   opened without following a final link, at most [`MAX_EVIDENCE_BYTES`].
//! - Never a key or credential file by name ([`credential_like`]).
//! - Text (UTF-8 without NUL) has every saved secret value hidden; a binary file holding one
//!   is refused ([`body_to_send`]).
//! - A file read again must be the one first seen: same file, size, time and digest
//!   ([`Stamp`]).
//!
//! Refusals are short phrases ("a link", "changed after the run ended"): each caller puts
//! the file's name and what happens to it around them.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use tether_protocol::credential_files::credential_kind;
use tether_protocol::jobs::MAX_EVIDENCE_BYTES;

use crate::local::private_files::{hex, link_count, open_no_follow};
use crate::local::vault::redact;

/// Where this agent's evidence lives, beside the data dir (`<data dir>-evidence`): never
/// inside it, since the guard keeps the whole data dir from runs. `data_dir` is absolute.
pub fn evidence_root(data_dir: &Path) -> PathBuf {
    let name = data_dir
        .file_name()
        .map_or_else(|| "tether-agent".into(), |name| name.to_string_lossy());
    data_dir.with_file_name(format!("{name}-evidence"))
}

/// What identifies a file's version without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub size: u64,
    modified: Option<SystemTime>,
    device: u64,
    inode: u64,
}

/// Opens without following a final link (and without blocking on a FIFO), then checks what
/// was opened: a regular file, one name, at most the size limit.
///
/// # Errors
/// The phrase saying why the file is not taken.
pub fn open_checked(path: &Path) -> Result<(fs::File, Stamp), String> {
    let file = open_no_follow(path).map_err(|_| "cannot be opened (a link, or gone)".to_owned())?;
    let meta = file.metadata().map_err(|_| "cannot be read".to_owned())?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    if link_count(&meta) > 1 {
        return Err("a file with other names (hard links) that may belong elsewhere".to_owned());
    }
    if meta.len() > MAX_EVIDENCE_BYTES {
        return Err(format!("over {MAX_EVIDENCE_BYTES} bytes"));
    }
    Ok((file, stamp_of(&meta)))
}

/// The stamp of `meta`.
pub fn stamp_of(meta: &fs::Metadata) -> Stamp {
    #[cfg(unix)]
    let (device, inode) = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    };
    #[cfg(not(unix))]
    let (device, inode) = (0, 0);
    Stamp {
        size: meta.len(),
        modified: meta.modified().ok(),
        device,
        inode,
    }
}

/// Keys, environment files and credential stores by name ([`credential_kind`], the names
/// the live file view and the server refuse too), `.git` (as the live file view refuses it),
/// shell histories, and names made of a word that says it holds a credential
/// (`api_token.txt`, `db-password.log`). Whole words only: the environment's deny list
/// (`KEY`, `SESSION`, `AUTH` anywhere) would refuse `session.webm` or `oauth-flow.png`.
pub fn credential_like(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "token",
        "tokens",
        "secret",
        "secrets",
        "password",
        "passwords",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "apikey",
        "private",
    ];
    let lower = name.to_ascii_lowercase();
    credential_kind(name).is_some()
        || lower == ".git"
        || lower.ends_with("history")
        || lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| WORDS.contains(&word))
}

/// UTF-8 without NUL bytes, as the server tells text.
pub fn is_text(bytes: &[u8]) -> bool {
    !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok()
}

/// Whether any non-empty value occurs in `bytes`.
pub fn holds_any(bytes: &[u8], values: &[String]) -> bool {
    values
        .iter()
        .map(String::as_bytes)
        .filter(|value| !value.is_empty())
        .any(|value| bytes.windows(value.len()).any(|window| window == value))
}

/// The bytes that may leave this computer for a file read as `bytes`: text with every
/// saved value in `hidden` hidden, a binary file as it is unless it holds one of them.
///
/// # Errors
/// "holds a saved secret value" for such a binary file.
pub fn body_to_send(bytes: Vec<u8>, hidden: &[String]) -> Result<Vec<u8>, String> {
    if is_text(&bytes) {
        Ok(redact(&String::from_utf8_lossy(&bytes), hidden).into_bytes())
    } else if holds_any(&bytes, hidden) {
        Err("holds a saved secret value".to_owned())
    } else {
        Ok(bytes)
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_redacted_and_binary_holding_a_value_is_refused() {
        let hidden = vec!["tok-1-secret".to_owned()];
        assert_eq!(
            body_to_send(b"a tok-1-secret b\n".to_vec(), &hidden),
            Ok(b"a [hidden] b\n".to_vec())
        );
        assert_eq!(
            body_to_send(b"\0tok-1-secret".to_vec(), &hidden),
            Err("holds a saved secret value".to_owned())
        );
        assert_eq!(
            body_to_send(b"\0plain".to_vec(), &hidden),
            Ok(b"\0plain".to_vec())
        );
        assert!(!holds_any(b"anything", &[String::new()]));
    }

    #[test]
    fn credential_names_are_told_by_whole_words() {
        for (name, credential) in [
            ("api_token.txt", true),
            (".env", true),
            (".bash_history", true),
            ("session.webm", false),
            ("oauth-flow.png", false),
        ] {
            assert_eq!(credential_like(name), credential, "{name}");
        }
    }

    #[test]
    fn the_root_sits_beside_the_data_dir() {
        assert_eq!(
            evidence_root(Path::new("/home/me/.local/share/tether-agent")),
            PathBuf::from("/home/me/.local/share/tether-agent-evidence")
        );
    }
}
