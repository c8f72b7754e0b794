//! `tether_attach`: a worker asks to keep a file of its folder as evidence of the run.
//!
//! The file is copied into the run's evidence folder under a name no other file there has
//! ([`Recorder::unused_name`]), and recorded with its kind, caption and the SHA-256 of the
//! copy, so the delivery sends it (with the checks every evidence file gets) only while it
//! is that file. Refused, with the reason as the answer:
//!
//! - a path that leaves the run's folder, through `..` or a link on the way;
//! - a link, a file with other names (a hard link), anything but a regular file;
//! - a key or credential file by name ([`credential_kind`]);
//! - a file over [`MAX_EVIDENCE_BYTES`].
//!
//! **Architecture Invariant:** only what is already in the run's folder can be attached;
//! the copy is made by name-checked, no-follow opens, never by following what the run
//! pointed at.

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tether_protocol::credential_files::credential_kind;
use tether_protocol::jobs::{EvidenceKind, MAX_EVIDENCE_BYTES};
use tether_protocol::text::{sanitize, TextKind};

use crate::local::private_files::{hex, link_count, open_no_follow};
use crate::local::vault::redact;
use crate::run::evidence::{kind_of, Recorded, Recorder};

/// Longest caption kept, in characters.
pub const MAX_CAPTION_CHARS: usize = 500;

/// What the worker asked to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRequest {
    /// Relative to the run's folder, or absolute inside it.
    pub path: String,
    pub kind: Option<EvidenceKind>,
    pub caption: Option<String>,
}

/// Copies the file of `request` from the run's `folder` into `recorder`'s folder; the name
/// it is kept under.
///
/// # Errors
/// Why it was refused, as a sentence for the worker.
pub fn attach(
    folder: &Path,
    recorder: &Recorder,
    request: &AttachRequest,
    hidden: &[String],
) -> Result<String, String> {
    let (source, name) = inside(folder, &request.path)?;
    if credential_kind(&name).is_some() {
        return Err(format!(
            "{name} is a key or credential file by its name, which is never attached"
        ));
    }
    let file = open_no_follow(&source).map_err(|err| match err.raw_os_error() {
        Some(libc::ELOOP) => format!("{name} is a link, which is not followed"),
        _ => format!("{name} cannot be opened: {err}"),
    })?;
    let meta = file
        .metadata()
        .map_err(|err| format!("{name} cannot be read: {err}"))?;
    if !meta.is_file() {
        return Err(format!("{name} is not a regular file"));
    }
    if link_count(&meta) > 1 {
        return Err(format!(
            "{name} has other names (a hard link), so it is not attached"
        ));
    }
    if meta.len() > MAX_EVIDENCE_BYTES {
        return Err(format!(
            "{name} is {} bytes, over the limit of {MAX_EVIDENCE_BYTES}",
            meta.len()
        ));
    }
    let kept = recorder.unused_name(&name);
    let target = recorder.folder().join(&kept);
    let copied = copy(file, &target).map_err(|err| {
        let _ = fs::remove_file(&target);
        format!("{name} could not be copied: {err}")
    })?;
    recorder.record(Recorded {
        name: kept.clone(),
        kind: request.kind.unwrap_or_else(|| kind_of(&name, copied.text)),
        caption: request.caption.as_deref().and_then(|c| caption(c, hidden)),
        variant_of: None,
        variant: None,
        details: None,
        sha256: copied.sha256,
    });
    Ok(kept)
}

/// The real path of `path` (its folder resolved, its last name not) and that name, when
/// it is inside `folder`.
fn inside(folder: &Path, path: &str) -> Result<(PathBuf, String), String> {
    let given = Path::new(path);
    let joined = if given.is_absolute() {
        given.to_owned()
    } else {
        folder.join(given)
    };
    let name = joined
        .file_name()
        .and_then(|name| name.to_str())
        .filter(|name| *name != "." && *name != "..")
        .ok_or_else(|| format!("{path:?} names no file"))?
        .to_owned();
    let outside = || format!("{path:?} is outside the run's folder");
    let folder = folder
        .canonicalize()
        .map_err(|err| format!("the run's folder cannot be read: {err}"))?;
    let parent = joined
        .parent()
        .ok_or_else(outside)?
        .canonicalize()
        .map_err(|_| format!("{path:?} does not exist"))?;
    if !parent.starts_with(&folder) {
        return Err(outside());
    }
    Ok((parent.join(&name), name))
}

struct Copied {
    sha256: String,
    text: bool,
}

/// Copies at most [`MAX_EVIDENCE_BYTES`] into a new file at `target` (mode 0600), hashing
/// what was written.
fn copy(file: fs::File, target: &Path) -> io::Result<Copied> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let mut out = options.open(target)?;
    let mut reader = file.take(MAX_EVIDENCE_BYTES + 1);
    let (mut hasher, mut total, mut text) = (Sha256::new(), 0u64, true);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = reader.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        let chunk = &buffer[..read];
        total += read as u64;
        if total > MAX_EVIDENCE_BYTES {
            return Err(io::Error::other("it grew over the limit while copied"));
        }
        text &= !chunk.contains(&0);
        hasher.update(chunk);
        out.write_all(chunk)?;
    }
    out.sync_all()?;
    Ok(Copied {
        sha256: hex(&hasher.finalize()),
        text,
    })
}

/// A caption on one line, every character visible, saved values hidden, cut to
/// [`MAX_CAPTION_CHARS`]; `None` when nothing is left.
fn caption(given: &str, hidden: &[String]) -> Option<String> {
    let one_line = given.split_whitespace().collect::<Vec<_>>().join(" ");
    let shown = redact(&sanitize(&one_line, TextKind::Name), hidden);
    let cut: String = shown.chars().take(MAX_CAPTION_CHARS).collect();
    (!cut.is_empty()).then_some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    struct Place {
        _tmp: tempfile::TempDir,
        run: PathBuf,
        recorder: Recorder,
    }

    fn place() -> Result<Place> {
        let tmp = tempfile::tempdir()?;
        let run = tmp.path().join("run");
        let evidence = tmp.path().join("evidence");
        fs::create_dir_all(run.join("out"))?;
        fs::create_dir_all(&evidence)?;
        Ok(Place {
            recorder: Recorder::new(evidence),
            run,
            _tmp: tmp,
        })
    }

    fn ask(path: &str) -> AttachRequest {
        AttachRequest {
            path: path.to_owned(),
            kind: None,
            caption: None,
        }
    }

    fn hidden() -> Vec<String> {
        vec!["hunter22".to_owned()]
    }

    #[test]
    fn a_file_inside_is_copied_recorded_and_never_overwrites() -> Result<()> {
        let p = place()?;
        fs::write(
            p.run.join("out/screen-login.png"),
            b"\x89PNG\r\n\x1a\nfirst",
        )?;
        fs::write(
            p.recorder.folder().join("screen-login.png"),
            b"already there",
        )?;
        let request = AttachRequest {
            caption: Some("The login\npage, password hunter22".into()),
            ..ask("out/screen-login.png")
        };
        let kept = attach(&p.run, &p.recorder, &request, &hidden())?;
        assert_eq!(kept, "screen-login-2.png");
        let copy = fs::read(p.recorder.folder().join(&kept))?;
        assert_eq!(copy, b"\x89PNG\r\n\x1a\nfirst");
        let recorded = p.recorder.recorded();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].name, kept);
        assert_eq!(recorded[0].kind, EvidenceKind::Screenshot);
        assert_eq!(recorded[0].sha256, hex(&Sha256::digest(&copy)));
        assert_eq!(
            recorded[0].caption.as_deref(),
            Some("The login page, password [hidden]")
        );

        let absolute = p.run.join("notes.log");
        fs::write(&absolute, "all good\n")?;
        let request = AttachRequest {
            kind: Some(EvidenceKind::Report),
            caption: Some("x".repeat(MAX_CAPTION_CHARS + 50)),
            ..ask(&absolute.display().to_string())
        };
        assert_eq!(
            attach(&p.run, &p.recorder, &request, &hidden())?,
            "notes.log"
        );
        let notes = &p.recorder.recorded()[1];
        assert_eq!(notes.kind, EvidenceKind::Report);
        assert_eq!(
            notes.caption.as_ref().map(|c| c.chars().count()),
            Some(MAX_CAPTION_CHARS)
        );
        Ok(())
    }

    #[test]
    fn what_leaves_the_folder_is_refused() -> Result<()> {
        let p = place()?;
        let outside = p.run.parent().ok_or("no parent")?.join("secret.txt");
        fs::write(&outside, "not the run's")?;
        for path in [
            "../secret.txt",
            outside.to_str().ok_or("path")?,
            "out/../../secret.txt",
        ] {
            let refused = attach(&p.run, &p.recorder, &ask(path), &hidden())
                .err()
                .ok_or(format!("{path} was attached"))?;
            assert!(
                refused.contains("outside the run's folder"),
                "{path}: {refused}"
            );
        }
        std::os::unix::fs::symlink(p.run.parent().ok_or("no parent")?, p.run.join("up"))?;
        let refused = attach(&p.run, &p.recorder, &ask("up/secret.txt"), &hidden());
        assert!(refused.err().ok_or("through a link")?.contains("outside"));
        std::os::unix::fs::symlink(&outside, p.run.join("link.txt"))?;
        let refused = attach(&p.run, &p.recorder, &ask("link.txt"), &hidden());
        assert!(refused.err().ok_or("a link")?.contains("is a link"));
        fs::hard_link(&outside, p.run.join("hard.txt"))?;
        let refused = attach(&p.run, &p.recorder, &ask("hard.txt"), &hidden());
        assert!(refused.err().ok_or("a hard link")?.contains("other names"));
        let refused = attach(&p.run, &p.recorder, &ask("out"), &hidden());
        assert!(refused
            .err()
            .ok_or("a folder")?
            .contains("not a regular file"));
        let refused = attach(&p.run, &p.recorder, &ask(".."), &hidden());
        assert!(refused.err().ok_or("dot-dot")?.contains("names no file"));
        assert!(p.recorder.recorded().is_empty());
        assert_eq!(fs::read_dir(p.recorder.folder())?.count(), 0);
        Ok(())
    }

    #[test]
    fn credential_and_oversize_files_are_refused() -> Result<()> {
        let p = place()?;
        fs::write(
            p.run.join("id_ed25519"),
            "-----BEGIN OPENSSH PRIVATE KEY-----",
        )?;
        fs::write(p.run.join(".env"), "TOKEN=1")?;
        for name in ["id_ed25519", ".env"] {
            let refused = attach(&p.run, &p.recorder, &ask(name), &hidden());
            assert!(refused.err().ok_or(name)?.contains("credential"), "{name}");
        }
        let big = fs::File::create(p.run.join("huge.mp4"))?;
        big.set_len(MAX_EVIDENCE_BYTES + 1)?;
        let refused = attach(&p.run, &p.recorder, &ask("huge.mp4"), &hidden());
        assert!(refused.err().ok_or("oversize")?.contains("over the limit"));
        assert!(p.recorder.recorded().is_empty());
        Ok(())
    }
}
