//! What text the server stores and shows: no control characters, and in names nothing
//! invisible, nothing that spaces or breaks like a space without being one, and no towers of
//! combining marks.
//!
//! A NUL in a prompt breaks the program that receives it; a right-to-left override, a
//! zero-width space or a braille blank in a computer's name (which an unauthenticated
//! pairing request sets and `/link` shows for approval) makes one name look like another, and
//! so does an ideographic space or a private-use character, which each font draws its own
//! way. Multi-line text (a prompt, a summary) keeps newlines and tabs; a name keeps neither.
//!
//! Categories are Unicode's General_Category, from `unicode-properties` (Unicode 18.0 tables;
//! `std`'s `char` has none). Emails are held to the name rule too.

use std::fmt;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// The most combining marks (Mn, Me) one character of a name may carry: Vietnamese stacks
/// two, pointed Hebrew three; more only draws over the lines above and below.
const MAX_MARKS: usize = 3;

/// The two kinds of stored text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// A name, a title or an email: one line, every character visible, spaced only by the
    /// plain space, at most 3 combining marks on a character.
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
    let mut reader = Reader::new(kind);
    for character in text.chars() {
        if let Some(reason) = reader.refusal(character) {
            return Err(TextError { character, reason });
        }
    }
    Ok(())
}

/// `text` with every character [`check`] would refuse replaced by U+FFFD, for text a
/// computer reports (a run's summary, a question before an action): a terminal colour code
/// in a summary must not cost the run its outcome, and a direction override in a question
/// must still show as something odd rather than reorder what the owner reads. A mark past
/// the limit is replaced too, and the marks after it count on the U+FFFD.
pub fn sanitize(text: &str, kind: TextKind) -> std::borrow::Cow<'_, str> {
    if check(text, kind).is_ok() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut reader = Reader::new(kind);
    let replaced = text
        .chars()
        .map(|character| match reader.refusal(character) {
            Some(_) => char::REPLACEMENT_CHARACTER,
            None => character,
        })
        .collect();
    std::borrow::Cow::Owned(replaced)
}

/// Reads a text in order, counting the combining marks on the last base character.
struct Reader {
    kind: TextKind,
    marks: usize,
}

impl Reader {
    fn new(kind: TextKind) -> Reader {
        Reader { kind, marks: 0 }
    }

    /// Why `character` may not come next, if it may not. A refused character counts as the
    /// U+FFFD [`sanitize`] puts in its place: a base with no marks yet.
    fn refusal(&mut self, character: char) -> Option<&'static str> {
        let reason = self.judge(character);
        if reason.is_some() {
            self.marks = 0;
        }
        reason
    }

    fn judge(&mut self, character: char) -> Option<&'static str> {
        if character.is_control() {
            let layout = matches!(character, '\n' | '\t' | '\r');
            return (self.kind == TextKind::Name || !layout).then_some("a control character");
        }
        if is_noncharacter(character) {
            return Some("not a character");
        }
        if self.kind == TextKind::MultiLine {
            return None;
        }
        match character.general_category() {
            GeneralCategory::Format => Some(INVISIBLE),
            GeneralCategory::SpaceSeparator if character != ' ' => {
                Some("a space other than the plain space")
            }
            GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator => {
                Some("a line or paragraph separator")
            }
            GeneralCategory::PrivateUse => Some("a private-use character"),
            _ if is_default_ignorable(character) || draws_nothing(character) => Some(INVISIBLE),
            GeneralCategory::NonspacingMark | GeneralCategory::EnclosingMark => {
                self.marks += 1;
                (self.marks > MAX_MARKS)
                    .then_some("a 4th combining mark on one character (3 at most)")
            }
            // A spacing mark (a Devanagari vowel sign, say) takes its own room beside the
            // base: neither counted nor a new base.
            GeneralCategory::SpacingMark => None,
            _ => {
                self.marks = 0;
                None
            }
        }
    }
}

const INVISIBLE: &str = "an invisible or direction-changing character";

/// U+FDD0..U+FDEF and the last two code points of every plane.
fn is_noncharacter(character: char) -> bool {
    let code = u32::from(character);
    (0xFDD0..=0xFDEF).contains(&code) || code & 0xFFFE == 0xFFFE
}

/// Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties) where category Cf does not
/// cover it: the combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian
/// and other variation selectors, and the unassigned code points kept for more of them.
fn is_default_ignorable(character: char) -> bool {
    matches!(
        u32::from(character),
        0x034F
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0xE0000..=0xE0FFF
    )
}

/// Characters of other categories that draw nothing: the braille blank (So) and the null
/// notehead (So, a base for musical marks), each read as no character at all.
fn draws_nothing(character: char) -> bool {
    matches!(character, '\u{2800}' | '\u{1D159}')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first character `check` refuses in `text`, if any.
    fn refused(text: &str, kind: TextKind) -> Option<char> {
        check(text, kind).err().map(|error| error.character)
    }

    /// Each case: a name, and the character the name rule refuses in it (`None`: a name).
    const NAMES: &[(&str, Option<char>)] = &[
        // Controls.
        ("lap\u{0}top", Some('\u{0}')),
        ("lap\ntop", Some('\n')),
        ("lap\ttop", Some('\t')),
        ("laptop\u{85}", Some('\u{85}')),
        // Direction marks, overrides and isolates.
        ("evil\u{202E}gpj.exe", Some('\u{202E}')),
        ("lap\u{2066}top", Some('\u{2066}')),
        ("lap\u{200F}top", Some('\u{200F}')),
        ("lap\u{61C}top", Some('\u{61C}')),
        // Zero-width and other format characters (Cf), old and new.
        ("lap\u{200B}top", Some('\u{200B}')),
        ("lap\u{200D}top", Some('\u{200D}')),
        ("\u{FEFF}laptop", Some('\u{FEFF}')),
        ("lap\u{AD}top", Some('\u{AD}')),
        ("lap\u{2064}top", Some('\u{2064}')),
        ("\u{890}laptop", Some('\u{890}')),
        ("laptop\u{110BD}", Some('\u{110BD}')),
        ("lap\u{13430}top", Some('\u{13430}')),
        // Tags: `laptop` followed by an invisible "hi".
        ("laptop\u{E0068}\u{E0069}", Some('\u{E0068}')),
        ("laptop\u{E0001}", Some('\u{E0001}')),
        // Other default-ignorable characters: joiners, fillers, variation selectors.
        ("lap\u{34F}top", Some('\u{34F}')),
        ("laptop\u{3164}", Some('\u{3164}')),
        ("laptop\u{FFA0}", Some('\u{FFA0}')),
        ("laptop\u{115F}", Some('\u{115F}')),
        ("laptop\u{FE0F}", Some('\u{FE0F}')),
        ("laptop\u{E0100}", Some('\u{E0100}')),
        ("laptop\u{FFF0}", Some('\u{FFF0}')),
        // Characters that draw nothing.
        ("laptop\u{2800}", Some('\u{2800}')),
        ("laptop\u{1D159}", Some('\u{1D159}')),
        // Noncharacters.
        ("laptop\u{FFFF}", Some('\u{FFFF}')),
        ("laptop\u{FDD0}", Some('\u{FDD0}')),
        ("laptop\u{10FFFE}", Some('\u{10FFFE}')),
        // Line and paragraph separators (Zl, Zp).
        ("lap\u{2028}top", Some('\u{2028}')),
        ("lap\u{2029}top", Some('\u{2029}')),
        // Every space but the plain one (Zs).
        ("lap\u{A0}top", Some('\u{A0}')),
        ("lap\u{1680}top", Some('\u{1680}')),
        ("lap\u{2000}top", Some('\u{2000}')),
        ("lap\u{200A}top", Some('\u{200A}')),
        ("lap\u{202F}top", Some('\u{202F}')),
        ("lap\u{205F}top", Some('\u{205F}')),
        ("lap\u{3000}top", Some('\u{3000}')),
        // Private use (Co), in each of its three areas.
        ("laptop\u{E000}", Some('\u{E000}')),
        ("laptop\u{F8FF}", Some('\u{F8FF}')),
        ("laptop\u{F0000}", Some('\u{F0000}')),
        ("laptop\u{10FFFD}", Some('\u{10FFFD}')),
        // More than 3 combining marks (Mn, Me) on one character; a spacing mark (Mc) between
        // them neither counts nor starts a new character.
        ("Z\u{301}\u{302}\u{303}\u{304}\u{305}", Some('\u{304}')),
        ("a\u{20DD}\u{20DD}\u{20DD}\u{20DD}", Some('\u{20DD}')),
        (
            "\u{915}\u{301}\u{302}\u{93F}\u{303}\u{304}",
            Some('\u{304}'),
        ),
        ("\u{301}\u{302}\u{303}\u{304}laptop", Some('\u{304}')),
        // Names.
        ("laptop", None),
        ("a-b_c.d", None),
        ("my laptop", None),
        ("Bürorechner", None),
        ("Café", None),
        ("Cafe\u{301}", None),
        ("ноутбук", None),
        ("笔记本电脑", None),
        ("東京のノート", None),
        ("नमस्ते", None),
        ("किताब", None),
        ("Tie\u{302}\u{301}ng Vie\u{323}\u{302}t", None),
        ("שָׁלוֹם", None),
        ("مُحَمَّد", None),
        ("น้ำ", None),
        ("laptop 🚀", None),
        ("Z\u{301}\u{302}\u{303}", None),
        ("Z\u{301}\u{302}\u{303}a\u{301}\u{302}\u{303}", None),
    ];

    #[test]
    fn the_name_rule() {
        for &(text, expected) in NAMES {
            assert_eq!(refused(text, TextKind::Name), expected, "{text:?}");
        }
    }

    #[test]
    fn sanitized_names_pass_the_rule() {
        for &(text, _) in NAMES {
            let clean = sanitize(text, TextKind::Name);
            assert_eq!(refused(&clean, TextKind::Name), None, "{clean:?}");
        }
        // Past the limit a mark is replaced, and the marks after it sit on the U+FFFD.
        assert_eq!(
            sanitize("Z\u{301}\u{302}\u{303}\u{304}\u{305}", TextKind::Name),
            "Z\u{301}\u{302}\u{303}\u{FFFD}\u{305}"
        );
        assert_eq!(
            sanitize("lap\u{3000}top\u{2800}", TextKind::Name),
            "lap\u{FFFD}top\u{FFFD}"
        );
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

    /// Each case: a prompt, and the character refused in it.
    const PROMPTS: &[(&str, Option<char>)] = &[
        ("fix it\n\tthen test\r\n", None),
        // A family emoji is joined by U+200D: fine in a prompt.
        ("👨\u{200D}👩\u{200D}👧", None),
        // Only names are held to one kind of space, visible characters and few marks.
        ("a\u{A0}b\u{2028}c\u{E000}d\u{2800}", None),
        ("Z\u{301}\u{302}\u{303}\u{304}\u{305}", None),
        ("nul\u{0}here", Some('\u{0}')),
        ("bell\u{7}", Some('\u{7}')),
        ("x\u{FFFE}", Some('\u{FFFE}')),
    ];

    #[test]
    fn multi_line_text_keeps_layout_and_joiners() {
        for &(text, expected) in PROMPTS {
            assert_eq!(refused(text, TextKind::MultiLine), expected, "{text:?}");
        }
    }
}
