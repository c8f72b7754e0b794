//! One file's diff between the run's start and its end (or now): what each side is ([`Side`]), what is
//! answered for a pair of them ([`plan`]: nothing, a one-line note, or a text diff), and the
//! unified diff of two texts, cut at [`MAX_DIFF_BYTES`] with a last line saying so.
//!
//! The texts given to [`unified`] are already redacted by the caller, exactly as the file
//! view redacts a file, so a diff never shows more of a file than the file view would.

use std::time::Instant;

use similar::{DiffTag, TextDiff};
use tether_protocol::changes::MAX_DIFF_BYTES;

/// Lines of context around each change.
const CONTEXT_LINES: usize = 3;

/// One side of a diff: the file at the run's start, at its end, or now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// No file there.
    Absent,
    /// Its bytes (a link's target).
    Bytes(Vec<u8>),
    /// Too large to compare line by line.
    TooLarge,
    /// Recorded without a copy (at the start or the end): what was recorded of it.
    NotKept {
        sha256: Option<String>,
        binary: bool,
    },
}

/// What a diff request is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The same at the start and now: an empty diff.
    Same,
    /// One line instead of a diff.
    Note(String),
    /// The line diff of these texts (`None`: no file on that side).
    Text {
        old: Option<String>,
        new: Option<String>,
    },
}

/// A diff's text, cut to [`MAX_DIFF_BYTES`] when longer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffText {
    pub text: String,
    pub truncated: bool,
}

/// What to answer for `path` between `before` and `now` (the file now or at the run's end);
/// `sha256_now` gives the digest of `now`, for comparing with a start that kept no copy.
pub fn plan(
    path: &str,
    before: Side,
    now: Side,
    sha256_now: impl FnOnce() -> Option<String>,
) -> Plan {
    if let (
        Side::NotKept {
            sha256: Some(sha), ..
        },
        Side::Bytes(_) | Side::TooLarge,
    ) = (&before, &now)
    {
        if sha256_now().as_ref() == Some(sha) {
            return Plan::Same;
        }
    }
    match (before, now) {
        (Side::Absent, Side::Absent) => Plan::Same,
        (Side::Bytes(old), Side::Bytes(new)) if old == new => Plan::Same,
        (
            Side::NotKept {
                sha256: Some(old), ..
            },
            Side::NotKept {
                sha256: Some(new), ..
            },
        ) if old == new => Plan::Same,
        (Side::NotKept { binary: true, .. }, _) | (_, Side::NotKept { binary: true, .. }) => {
            binary(path)
        }
        (Side::NotKept { binary: false, .. }, _) => Plan::Note(format!(
            "{path} changed; its text at the run's start was not kept (larger than 256 KiB)\n"
        )),
        (_, Side::NotKept { binary: false, .. }) => Plan::Note(format!(
            "{path} changed; its text at the run's end was not kept (larger than 256 KiB)\n"
        )),
        (Side::TooLarge, _) | (_, Side::TooLarge) => Plan::Note(format!(
            "{path} changed; it is too large to compare line by line\n"
        )),
        (old, new) => match (text_of(old), text_of(new)) {
            (Ok(old), Ok(new)) => Plan::Text { old, new },
            _ => binary(path),
        },
    }
}

fn binary(path: &str) -> Plan {
    Plan::Note(format!("Binary file {path} differs\n"))
}

/// `Ok(None)` for no file, `Ok(Some)` for text, `Err` for bytes that are not text.
fn text_of(side: Side) -> Result<Option<String>, ()> {
    match side {
        Side::Absent => Ok(None),
        Side::Bytes(bytes) if crate::changes::manifest::is_text(&bytes) => {
            String::from_utf8(bytes).map(Some).map_err(|_| ())
        }
        _ => Err(()),
    }
}

/// The unified diff of `path` from `old` to `new` (`None`: no file), empty when they are
/// the same; the line comparison stops refining at `deadline` (the diff stays correct, if
/// longer).
pub fn unified(
    path: &str,
    old: Option<&str>,
    new: Option<&str>,
    deadline: Option<Instant>,
) -> DiffText {
    let mut config = TextDiff::configure();
    if let Some(deadline) = deadline {
        config.deadline(deadline);
    }
    let diff = config.diff_lines(old.unwrap_or(""), new.unwrap_or(""));
    let from = old.map_or_else(|| "/dev/null".to_owned(), |_| format!("a/{path}"));
    let to = new.map_or_else(|| "/dev/null".to_owned(), |_| format!("b/{path}"));
    let mut text = String::new();
    let mut unified_diff = diff.unified_diff();
    let mut hunks = unified_diff
        .context_radius(CONTEXT_LINES)
        .iter_hunks()
        .peekable();
    if hunks.peek().is_some() {
        text.push_str(&format!("--- {from}\n+++ {to}\n"));
    }
    for hunk in hunks {
        if text.len() > MAX_DIFF_BYTES {
            break;
        }
        text.push_str(&hunk.to_string());
    }
    cut(text)
}

/// The text within [`MAX_DIFF_BYTES`].
fn cut(text: String) -> DiffText {
    cut_to(text, MAX_DIFF_BYTES)
}

/// The text within `max` bytes: when longer, cut after its last whole line that leaves room
/// for a last line saying so.
pub fn cut_to(mut text: String, max: usize) -> DiffText {
    if text.len() <= max {
        return DiffText {
            text,
            truncated: false,
        };
    }
    let note = format!(
        "[the diff is longer than {} KiB and is cut here]\n",
        MAX_DIFF_BYTES / 1024
    );
    let mut end = max.saturating_sub(note.len()).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let keep = text[..end].rfind('\n').map_or(0, |newline| newline + 1);
    text.truncate(keep);
    text.push_str(&note);
    DiffText {
        text,
        truncated: true,
    }
}

/// Added and deleted lines from `old` to `new`, as `git diff --numstat` counts them.
pub fn count_lines(old: &str, new: &str, deadline: Instant) -> (u64, u64) {
    let diff = TextDiff::configure()
        .deadline(deadline)
        .diff_lines(old, new);
    let (mut added, mut deleted) = (0_u64, 0_u64);
    for op in diff.ops() {
        let (tag, old_range, new_range) = op.as_tag_tuple();
        match tag {
            DiffTag::Equal => {}
            DiffTag::Delete => deleted += old_range.len() as u64,
            DiffTag::Insert => added += new_range.len() as u64,
            DiffTag::Replace => {
                deleted += old_range.len() as u64;
                added += new_range.len() as u64;
            }
        }
    }
    (added, deleted)
}

/// The lines of a whole file (a last line without a newline counts).
pub fn line_count(text: &str) -> u64 {
    text.lines().count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_give_unified_diffs() {
        let diff = unified(
            "a.txt",
            Some("one\ntwo\nthree\n"),
            Some("one\n2\nthree\n"),
            None,
        );
        assert_eq!(
            diff.text,
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
        );
        assert!(!diff.truncated);
        let added = unified("new.txt", None, Some("hello\n"), None);
        assert_eq!(
            added.text,
            "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"
        );
        let deleted = unified("old.txt", Some("bye\n"), None, None);
        assert!(deleted.text.starts_with("--- a/old.txt\n+++ /dev/null\n"));
        assert_eq!(unified("same", Some("x\n"), Some("x\n"), None).text, "");
    }

    #[test]
    fn a_long_diff_is_cut_with_a_last_line_saying_so() {
        let line = "a line of some length for the diff\n";
        let text = line.repeat(2 * MAX_DIFF_BYTES / line.len());
        let diff = unified("big.txt", None, Some(&text), None);
        assert!(diff.truncated);
        assert!(diff.text.len() <= MAX_DIFF_BYTES);
        assert!(diff
            .text
            .ends_with("[the diff is longer than 256 KiB and is cut here]\n"));
        let body = diff.text.lines().nth(3).unwrap_or_default();
        assert_eq!(format!("{body}\n"), format!("+{line}"));
    }

    #[test]
    fn plans_for_each_pair_of_sides() {
        let bytes = |text: &str| Side::Bytes(text.as_bytes().to_vec());
        let none = || None;
        assert_eq!(plan("a", Side::Absent, Side::Absent, none), Plan::Same);
        assert_eq!(plan("a", bytes("x"), bytes("x"), none), Plan::Same);
        assert_eq!(
            plan("a", Side::Absent, bytes("x"), none),
            Plan::Text {
                old: None,
                new: Some("x".into())
            }
        );
        assert_eq!(
            plan("img.png", bytes("\0png"), bytes("\0jpg"), none),
            Plan::Note("Binary file img.png differs\n".into())
        );
        let kept_none = |binary| Side::NotKept {
            sha256: Some("abc".into()),
            binary,
        };
        assert_eq!(
            plan("big", kept_none(false), Side::TooLarge, || Some(
                "abc".into()
            )),
            Plan::Same
        );
        assert!(matches!(
            plan("big", kept_none(false), Side::TooLarge, none),
            Plan::Note(_)
        ));
        assert_eq!(
            plan("b", kept_none(true), Side::Absent, none),
            Plan::Note("Binary file b differs\n".into())
        );
    }

    #[test]
    fn lines_are_counted_like_numstat() {
        let far = Instant::now() + std::time::Duration::from_secs(5);
        assert_eq!(count_lines("a\nb\nc\n", "a\nB\nc\nd\n", far), (2, 1));
        assert_eq!(count_lines("", "x\ny", far), (2, 0));
        assert_eq!(line_count("x\ny"), 2);
        assert_eq!(line_count(""), 0);
    }
}
