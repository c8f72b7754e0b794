//! What a file write would change, for the owner who is asked about it: a unified diff of
//! the file's text now and the proposed text, both redacted as the file view redacts a file,
//! cut to what a question may carry.
//!
//! There is no preview (the question is asked all the same) for a path the guard protects
//! or that names a credential file (the file view shows neither), for a file that is not
//! UTF-8 text or cannot be read by `fs/read_text_file`'s rules, and when redaction runs out
//! of time.

use std::path::{Component, Path};
use std::time::{Duration, Instant};

use tether_protocol::credential_files::credential_kind;
use tether_protocol::decisions::{MAX_PREVIEW_BYTES, MAX_PREVIEW_LINES};

use super::files;
use crate::changes::diff;
use crate::local::vault;
use crate::policy::guard::Guard;
use crate::remote::frames::redaction::{self, Deadline};

/// Longest a preview may take to make (redaction and the line comparison).
const PREVIEW_TIME: Duration = Duration::from_secs(2);
/// Longer lines are cut: one minified line must not hide the rest of the change.
const MAX_LINE_BYTES: usize = 1024;
/// Room kept for the last line saying how much was left out.
const NOTE_ROOM: usize = 64;

/// One proposed write: where (the real path, from `files::resolve_for_write`) and what.
#[derive(Debug, Clone, Copy)]
pub struct Proposal<'a> {
    /// The job's folder: the diff's paths are relative to it.
    pub folder: &'a Path,
    pub path: &'a Path,
    pub new_text: &'a str,
}

/// The preview of `proposal`, with `hidden` (every saved secret value) hidden on both sides;
/// `None` where the module's documentation says.
pub fn preview(proposal: &Proposal<'_>, guard: &Guard, hidden: &[String]) -> Option<String> {
    let path = proposal.path;
    if guard.check_access(path).is_err() || names_credential(path) {
        return None;
    }
    let old = current_text(path)?;
    let deadline = Instant::now() + PREVIEW_TIME;
    let old = match old {
        Some(text) => Some(redacted(&text, hidden, deadline)?),
        None => None,
    };
    let new = redacted(proposal.new_text, hidden, deadline)?;
    let shown = shown_path(proposal.folder, path);
    let made = diff::unified(&shown, old.as_deref(), Some(&new), Some(deadline));
    if made.text.is_empty() {
        return Some("[no change: the proposed text is the file's text now]\n".to_owned());
    }
    Some(bounded(&made.text, MAX_PREVIEW_BYTES, MAX_PREVIEW_LINES))
}

/// The file's text now: `Some(None)` when there is no file, `None` when it cannot be shown.
fn current_text(path: &Path) -> Option<Option<String>> {
    if std::fs::symlink_metadata(path).is_err() {
        return Some(None);
    }
    let real = files::resolve_existing(path).ok()?;
    files::read_text(&real, None, None).ok().map(Some)
}

/// Whether any part of `path` is a credential file's or folder's name.
fn names_credential(path: &Path) -> bool {
    path.components().any(|component| match component {
        Component::Normal(name) => name
            .to_str()
            .is_some_and(|name| credential_kind(name).is_some()),
        _ => false,
    })
}

/// Saved values, then the patterns, as the file view redacts.
fn redacted(text: &str, hidden: &[String], deadline: Instant) -> Option<String> {
    let text = vault::redact(text, hidden);
    redaction::redact_until(&text, Deadline::at(deadline)).ok()
}

/// `path` relative to the folder; elsewhere, the whole path without its leading `/` (as
/// git writes an absolute path after `a/`).
fn shown_path(folder: &Path, path: &Path) -> String {
    let shown = path.strip_prefix(folder).unwrap_or(path);
    shown.to_string_lossy().trim_start_matches('/').to_owned()
}

/// `text` within `max_bytes` and `max_lines`, long lines cut; when something is left out,
/// the last line says how many lines.
pub fn bounded(text: &str, max_bytes: usize, max_lines: usize) -> String {
    let lines: Vec<String> = text.lines().map(cut_line).collect();
    let whole: usize = lines.iter().map(|line| line.len() + 1).sum();
    let fits = lines.len() <= max_lines && whole <= max_bytes;
    let mut kept = String::new();
    let mut count = 0;
    for line in &lines {
        // A preview that is cut ends with the note: leave it a line and room.
        let full = count + 1 >= max_lines || kept.len() + line.len() + 1 + NOTE_ROOM > max_bytes;
        if !fits && full {
            break;
        }
        kept.push_str(line);
        kept.push('\n');
        count += 1;
    }
    let left = lines.len() - count;
    if left > 0 {
        kept.push_str(&format!("[{left} more lines of the change not shown]\n"));
    }
    kept
}

fn cut_line(line: &str) -> String {
    if line.len() <= MAX_LINE_BYTES {
        return line.to_owned();
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [line cut]", &line[..end])
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    struct Fixture {
        _tmp: tempfile::TempDir,
        home: PathBuf,
        folder: PathBuf,
        guard: Guard,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let home = tmp.path().canonicalize().unwrap_or_default().join("home");
        let folder = home.join("work");
        std::fs::create_dir_all(&folder).unwrap_or_else(|err| panic!("{err}"));
        std::fs::create_dir_all(home.join(".ssh")).unwrap_or_else(|err| panic!("{err}"));
        let guard = Guard::new(Some(home.clone()), &home.join(".local/share/tether-agent"));
        Fixture {
            _tmp: tmp,
            home,
            folder,
            guard,
        }
    }

    fn preview_of(fx: &Fixture, path: &Path, new_text: &str, hidden: &[&str]) -> Option<String> {
        let hidden: Vec<String> = hidden.iter().map(|value| (*value).to_owned()).collect();
        let proposal = Proposal {
            folder: &fx.folder,
            path,
            new_text,
        };
        preview(&proposal, &fx.guard, &hidden)
    }

    #[test]
    fn a_new_file_is_all_additions() {
        let fx = fixture();
        let path = fx.folder.join("notes/new.md");
        let shown = preview_of(&fx, &path, "first\nsecond\n", &[]);
        assert_eq!(
            shown.as_deref(),
            Some("--- /dev/null\n+++ b/notes/new.md\n@@ -0,0 +1,2 @@\n+first\n+second\n")
        );
    }

    #[test]
    fn a_changed_file_shows_its_lines_with_saved_values_hidden() {
        let fx = fixture();
        let path = fx.folder.join("notes.md");
        std::fs::write(&path, "title\ntoken tok-5ecret-value-1\nend\n").unwrap_or_default();
        let new = "title\ntoken tok-5ecret-value-1 and more\nend\npassword = hunter2hunter2\n";
        let shown = preview_of(&fx, &path, new, &["tok-5ecret-value-1"]).unwrap_or_default();
        assert!(
            shown.starts_with("--- a/notes.md\n+++ b/notes.md\n@@ "),
            "{shown}"
        );
        assert!(shown.contains("\n-token [hidden]\n"), "{shown}");
        assert!(shown.contains("\n+token [hidden] and more\n"), "{shown}");
        assert!(!shown.contains("tok-5ecret"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let same = preview_of(&fx, &path, "title\ntoken tok-5ecret-value-1\nend\n", &[]);
        assert_eq!(
            same.as_deref(),
            Some("[no change: the proposed text is the file's text now]\n")
        );
    }

    #[test]
    fn protected_credential_and_binary_files_get_none() {
        let fx = fixture();
        assert_eq!(
            preview_of(&fx, &fx.home.join(".ssh/config"), "x\n", &[]),
            None
        );
        assert_eq!(preview_of(&fx, &fx.folder.join(".env"), "A=b\n", &[]), None);
        assert_eq!(preview_of(&fx, &fx.folder.join("id_rsa"), "k\n", &[]), None);
        let binary = fx.folder.join("image.bin");
        std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x01]).unwrap_or_default();
        assert_eq!(preview_of(&fx, &binary, "text\n", &[]), None);
    }

    #[test]
    fn a_long_change_is_cut_to_the_bounds_saying_how_much_is_left_out() {
        let fx = fixture();
        let new: String = (0..1000).map(|n| format!("line {n}\n")).collect();
        let shown = preview_of(&fx, &fx.folder.join("long.txt"), &new, &[]).unwrap_or_default();
        assert!(shown.len() <= MAX_PREVIEW_BYTES);
        assert_eq!(shown.lines().count(), MAX_PREVIEW_LINES);
        // 3 header lines, 1000 added: 399 kept, 604 left out.
        assert!(
            shown.ends_with("+line 395\n[604 more lines of the change not shown]\n"),
            "{}",
            &shown[shown.len() - 80..]
        );
        let wide = "x".repeat(5000);
        let cut = bounded(&format!("{wide}\n").repeat(40), MAX_PREVIEW_BYTES, 400);
        assert!(cut.len() <= MAX_PREVIEW_BYTES);
        assert!(
            cut.ends_with("more lines of the change not shown]\n"),
            "{cut}"
        );
        assert!(cut
            .lines()
            .next()
            .is_some_and(|line| line.ends_with(" [line cut]")));
        assert_eq!(bounded("a\nb\n", 100, 2), "a\nb\n");
        assert_eq!(
            bounded("a\nb\nc\n", 100, 2),
            "a\n[2 more lines of the change not shown]\n"
        );
    }
}
