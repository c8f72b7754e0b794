//! What text the server stores and shows: no control characters, and in names nothing
//! invisible.
//!
//! A NUL in a prompt breaks the program that receives it; a right-to-left override or a
//! zero-width space in a computer's name (which an unauthenticated pairing request sets and
//! `/link` shows for approval) makes one name look like another. Multi-line text (a prompt,
//! a summary) keeps newlines and tabs; a name keeps neither.

use std::fmt;

/// The two kinds of stored text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// A name or a title: one line, every character visible.
    Name,
    /// A prompt or a description: newlines and tabs allowed, no other control character.
    MultiLine,
}

/// The first character a text may not hold, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextError {
    pub character: char,
    pub reason: &'static str,
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "U+{:04X} is {}", u32::from(self.character), self.reason)
    }
}

impl std::error::Error for TextError {}

/// Checks every character of `text` for its kind.
///
/// # Errors
/// The first character that is not allowed, with the reason.
pub fn check(text: &str, kind: TextKind) -> Result<(), TextError> {
    for character in text.chars() {
        if let Some(reason) = refusal(character, kind) {
            return Err(TextError { character, reason });
        }
    }
    Ok(())
}

/// `text` with every character [`check`] would refuse replaced by U+FFFD, for text a
/// computer reports (a run's summary, a question before an action): a terminal colour code
/// in a summary must not cost the run its outcome, and a direction override in a question
/// must still show as something odd rather than reorder what the owner reads.
pub fn sanitize(text: &str, kind: TextKind) -> std::borrow::Cow<'_, str> {
    if check(text, kind).is_ok() {
        return std::borrow::Cow::Borrowed(text);
    }
    let replaced = text
        .chars()
        .map(|character| match refusal(character, kind) {
            Some(_) => char::REPLACEMENT_CHARACTER,
            None => character,
        })
        .collect();
    std::borrow::Cow::Owned(replaced)
}

fn refusal(character: char, kind: TextKind) -> Option<&'static str> {
    if character.is_control() {
        let layout = matches!(character, '\n' | '\t' | '\r');
        return (kind == TextKind::Name || !layout).then_some("a control character");
    }
    if is_noncharacter(character) {
        return Some("not a character");
    }
    if kind == TextKind::Name && is_invisible(character) {
        return Some("an invisible or direction-changing character");
    }
    None
}

/// U+FDD0..U+FDEF and the last two code points of every plane.
fn is_noncharacter(character: char) -> bool {
    let code = u32::from(character);
    (0xFDD0..=0xFDEF).contains(&code) || code & 0xFFFE == 0xFFFE
}

/// Unicode's format characters (category Cf): direction marks and overrides, zero-width
/// characters, the byte-order mark, tags; and the other characters that draw nothing.
fn is_invisible(character: char) -> bool {
    matches!(
        u32::from(character),
        0x00AD
            | 0x034F
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF9..=0xFFFB
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str, kind: TextKind) -> Option<u32> {
        check(text, kind)
            .err()
            .map(|error| u32::from(error.character))
    }

    #[test]
    fn names_refuse_controls_and_invisible_characters() {
        for (text, code) in [
            ("lap\u{0}top", 0x0),
            ("lap\ntop", 0xA),
            ("lap\ttop", 0x9),
            ("evil\u{202E}gpj.exe", 0x202E),
            ("\u{FEFF}laptop", 0xFEFF),
            ("lap\u{200B}top", 0x200B),
            ("laptop\u{FFFF}", 0xFFFF),
            ("laptop\u{85}", 0x85),
            ("lap\u{2066}top", 0x2066),
        ] {
            assert_eq!(refused(text, TextKind::Name), Some(code), "{text:?}");
        }
    }

    #[test]
    fn names_keep_every_visible_script() {
        for text in [
            "laptop",
            "Bürorechner",
            "ноутбук",
            "笔记本电脑",
            "laptop 🚀",
            "a-b_c.d",
        ] {
            assert_eq!(refused(text, TextKind::Name), None, "{text:?}");
        }
    }

    #[test]
    fn sanitizing_replaces_only_what_check_refuses() {
        let summary = "\u{1b}[31mfailed\u{1b}[0m: 2 tests\n\tsee log";
        assert_eq!(
            sanitize(summary, TextKind::MultiLine),
            "\u{FFFD}[31mfailed\u{FFFD}[0m: 2 tests\n\tsee log"
        );
        assert_eq!(
            sanitize("Run `rm x\u{202E}gpj`?", TextKind::Name),
            "Run `rm x\u{FFFD}gpj`?"
        );
        assert!(matches!(
            sanitize("fine as it is", TextKind::Name),
            std::borrow::Cow::Borrowed(_)
        ));
        assert!(check(
            &sanitize("a\u{0}b\u{FFFF}", TextKind::MultiLine),
            TextKind::MultiLine
        )
        .is_ok());
    }

    #[test]
    fn multi_line_text_keeps_layout_and_joiners() {
        assert_eq!(
            refused("fix it\n\tthen test\r\n", TextKind::MultiLine),
            None
        );
        // A family emoji is joined by U+200D: fine in a prompt.
        assert_eq!(refused("👨\u{200D}👩\u{200D}👧", TextKind::MultiLine), None);
        assert_eq!(refused("nul\u{0}here", TextKind::MultiLine), Some(0));
        assert_eq!(refused("bell\u{7}", TextKind::MultiLine), Some(7));
        assert_eq!(refused("x\u{FFFE}", TextKind::MultiLine), Some(0xFFFE));
    }
}
