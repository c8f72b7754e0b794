//! Hiding secrets in the text the live file view sends: a bounded, line-based heuristic that
//! hides the obvious and proves nothing about what is left.
//!
//! What is hidden, line by line:
//!
//! - private key blocks (`-----BEGIN … PRIVATE KEY-----` to `-----END`), also when the whole
//!   block is on one line (a JSON `"private_key": "-----BEGIN …\n…"`);
//! - the value of a `NAME=value` / `export NAME=value` / `NAME: value` line whose name looks
//!   like a credential ([`is_credential_name`]), to the end of the line;
//! - anywhere in a line, each key/value pair whose key names a credential and whose key or
//!   value is quoted: `"client_secret": "…"`, `'password': '…'`, `"pin": 1234`,
//!   `"api key" = "…"`, `password="…"`, `{token: "…"}`; and `?access_token=…` in a query;
//! - the password of a URL (`postgres://u:[redacted]@host`), and the whole user part when
//!   the user name is long (`https://[redacted]@github.com`, a token used as the user);
//! - tokens with the prefixes of well-known services (`ghp_…`, `AKIA…`, `sk-…`, …) that
//!   start where a word starts.
//!
//! **The cost is linear.** Each line is scanned a fixed number of times, every lookahead
//! ends where the thing it looks at ends and is not repeated, and lookbehind is bounded
//! ([`MAX_KEY_BYTES`]). On top of that a line longer than [`MAX_CHECKED_LINE_BYTES`] is not
//! checked at all: it is **hidden whole** (replaced by one `[redacted: …]` marker naming its
//! length), never shown cut or partly checked, so a long line cannot carry a secret out.
//! [`redact_until`] looks at a [`Deadline`] every [`CHECK_EVERY_BYTES`] of text, so the work
//! for a request the server no longer waits for stops too.

use std::borrow::Cow;
use std::time::Instant;

/// What replaces a redacted value.
pub const REDACTED: &str = "[redacted]";
/// Longest line that is checked and shown; a longer one is hidden whole.
pub const MAX_CHECKED_LINE_BYTES: usize = 64 * 1024;
/// How much text passes between two looks at the clock.
pub const CHECK_EVERY_BYTES: usize = 64 * 1024;
/// Longest key name looked at (a longer quoted string before a `:` is no key name).
pub const MAX_KEY_BYTES: usize = 256;

const KEY_BEGIN: &str = "-----BEGIN";
const KEY_END: &str = "-----END";

/// The work ran past its [`Deadline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfTime;

/// When the work for one request must stop, if ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// No deadline: the work always finishes.
    pub const NONE: Deadline = Deadline(None);

    pub fn at(instant: Instant) -> Deadline {
        Deadline(Some(instant))
    }

    pub fn instant(self) -> Option<Instant> {
        self.0
    }

    pub fn passed(self) -> bool {
        self.0.is_some_and(|at| Instant::now() >= at)
    }

    /// # Errors
    /// [`OutOfTime`] once the deadline has passed.
    pub fn check(self) -> Result<(), OutOfTime> {
        if self.passed() {
            Err(OutOfTime)
        } else {
            Ok(())
        }
    }
}

/// [`redact_until`] without a deadline.
pub fn redact(text: &str) -> String {
    // Without a deadline the work cannot run out of time.
    redact_until(text, Deadline::NONE).unwrap_or_else(|OutOfTime| String::new())
}

/// Hides secret values in `text` (see the module's documentation), line by line, in time
/// linear in its length; line endings are kept.
///
/// # Errors
/// [`OutOfTime`] when `deadline` passes before the text is done.
pub fn redact_until(text: &str, deadline: Deadline) -> Result<String, OutOfTime> {
    let mut out = String::with_capacity(text.len());
    let mut in_key_block = false;
    let mut since_check = 0usize;
    for line in text.split_inclusive('\n') {
        // Even an empty line costs a little, so a million of them are counted too.
        since_check += line.len() + 64;
        if since_check >= CHECK_EVERY_BYTES {
            deadline.check()?;
            since_check = 0;
        }
        let body = line.trim_end_matches(['\n', '\r']);
        let ending = &line[body.len()..];
        // Key blocks are followed through every line, long or not, so the lines after a
        // long one that opens a block are hidden too.
        let body_without_keys = hide_key_material(body, &mut in_key_block);
        if body.len() > MAX_CHECKED_LINE_BYTES {
            out.push_str(&format!(
                "[redacted: a line of {} bytes is too long to check]",
                body.len()
            ));
        } else {
            out.push_str(&redact_line(&body_without_keys));
        }
        out.push_str(ending);
    }
    Ok(out)
}

/// One line outside any key block, at most [`MAX_CHECKED_LINE_BYTES`]: assignments, pairs,
/// URL credentials and tokens, in that order, each pass linear.
fn redact_line(line: &str) -> Cow<'_, str> {
    let mut text = redact_assignment(line).map_or(Cow::Borrowed(line), Cow::Owned);
    let passes: [fn(&str) -> Cow<'_, str>; 3] = [redact_pairs, redact_userinfo, redact_tokens];
    for pass in passes {
        let changed = match pass(&text) {
            Cow::Owned(changed) => Some(changed),
            Cow::Borrowed(_) => None,
        };
        if let Some(changed) = changed {
            text = Cow::Owned(changed);
        }
    }
    text
}

/// The line with private key material replaced by [`REDACTED`], following `in_block` (a
/// block opened on an earlier line) and updating it for the next line.
fn hide_key_material<'a>(body: &'a str, in_block: &mut bool) -> Cow<'a, str> {
    if !*in_block && !body.contains(KEY_BEGIN) {
        return Cow::Borrowed(body);
    }
    let mut out = String::with_capacity(body.len().min(4096));
    let mut rest = body;
    loop {
        if *in_block {
            let Some(end) = rest.find(KEY_END) else {
                // A whole line of the block is one marker, also an empty one.
                if !rest.is_empty() || out.is_empty() {
                    out.push_str(REDACTED);
                }
                return Cow::Owned(out);
            };
            if end > 0 {
                out.push_str(REDACTED);
            }
            out.push_str(KEY_END);
            rest = &rest[end + KEY_END.len()..];
            *in_block = false;
        } else {
            let Some(header_end) = private_key_header(rest) else {
                out.push_str(rest);
                return Cow::Owned(out);
            };
            out.push_str(&rest[..header_end]);
            rest = &rest[header_end..];
            *in_block = true;
        }
    }
}

/// Where the first `-----BEGIN … PRIVATE KEY-----` header in `text` ends (the end of the
/// text when it is not closed).
fn private_key_header(text: &str) -> Option<usize> {
    for (at, _) in text.match_indices(KEY_BEGIN) {
        let after = at + KEY_BEGIN.len();
        // The label ends at the next `-----`, which is at the latest the next `-----BEGIN`:
        // every character is looked at a bounded number of times.
        let close = text[after..].find("-----");
        let label = &text[after..close.map_or(text.len(), |len| after + len)];
        if label.contains("PRIVATE KEY") {
            return Some(close.map_or(text.len(), |len| after + len + "-----".len()));
        }
    }
    None
}

/// `NAME=value`, `export NAME=value`, `NAME: value`, `"NAME": "value"` at the start of a
/// line, with a credential name: the value hidden, to the end of the line.
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
    if name.is_empty() || name.len() > MAX_KEY_BYTES || !is_credential_name(name) {
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

/// Whether a variable or key name suggests it holds a credential: it holds one of the
/// words of a credential (`TOKEN`, `SECRET`, `PASSWORD`, `AUTH`, `API_KEY`, …) anywhere, or
/// `KEY`, `PWD` or `PASS` as a whole part (between `_`, `-`, `.` or spaces), in any case.
pub fn is_credential_name(name: &str) -> bool {
    is_credential_key(name.as_bytes())
}

/// [`is_credential_name`] on bytes, without allocating: it is asked at every separator.
fn is_credential_key(name: &[u8]) -> bool {
    const PARTS: &[&[u8]] = &[
        b"TOKEN",
        b"SECRET",
        b"PASSWORD",
        b"PASSWD",
        b"PASSPHRASE",
        b"CREDENTIAL",
        b"PRIVATE",
        b"APIKEY",
        b"API_KEY",
        b"ACCESS_KEY",
        b"AUTH",
    ];
    const WHOLE_PARTS: &[&[u8]] = &[b"KEY", b"PWD", b"PASS"];
    let part_at = |at: usize| {
        let first = name[at].to_ascii_uppercase();
        matches!(first, b'T' | b'S' | b'P' | b'C' | b'A')
            && PARTS.iter().any(|part| {
                part[0] == first
                    && name
                        .get(at..at + part.len())
                        .is_some_and(|here| here.eq_ignore_ascii_case(part))
            })
    };
    (0..name.len()).any(part_at)
        || name
            .split(|&b| matches!(b, b'_' | b'-' | b'.' | b' '))
            .any(|segment| {
                WHOLE_PARTS
                    .iter()
                    .any(|whole| segment.eq_ignore_ascii_case(whole))
            })
}

/// Replaces the byte ranges (in order, not overlapping) of `line` with [`REDACTED`].
fn replace_ranges<'a>(line: &'a str, ranges: &[(usize, usize)]) -> Cow<'a, str> {
    if ranges.is_empty() {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    for &(start, end) in ranges {
        out.push_str(&line[copied..start]);
        out.push_str(REDACTED);
        copied = end;
    }
    out.push_str(&line[copied..]);
    Cow::Owned(out)
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// Each key/value pair anywhere in the line whose key names a credential and whose key or
/// value is quoted: the value hidden. Driven by the separators (`:`, `=`, `=>`, `:=`); the
/// key is looked for behind each at most [`MAX_KEY_BYTES`] back, a hidden value is skipped
/// whole, so the pass is linear.
fn redact_pairs(line: &str) -> Cow<'_, str> {
    let bytes = line.as_bytes();
    let mut ranges = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        let separator = bytes[index];
        if separator != b':' && separator != b'=' {
            index += 1;
            continue;
        }
        let next = bytes.get(index + 1).copied();
        let before = index.checked_sub(1).map(|i| bytes[i]);
        // Not separators: `==`, `!=`, `<=`, `>=`, `::`, `://`.
        let comparison = separator == b'='
            && (next == Some(b'=') || matches!(before, Some(b'=' | b'!' | b'<' | b'>' | b':')));
        if comparison || (separator == b':' && matches!(next, Some(b':' | b'/'))) {
            index += if next == Some(separator) { 2 } else { 1 };
            continue;
        }
        let Some(key) = key_before(bytes, index) else {
            index += 1;
            continue;
        };
        // `=>` and `:=` are one separator.
        let mut value_start = index + 1;
        if matches!((separator, next), (b'=', Some(b'>')) | (b':', Some(b'='))) {
            value_start += 1;
        }
        while bytes
            .get(value_start)
            .is_some_and(|&b| b == b' ' || b == b'\t')
        {
            value_start += 1;
        }
        match pair_value(bytes, value_start, &key) {
            Some((start, end)) => {
                ranges.push((start, end));
                index = end.max(index + 1);
            }
            None => index += 1,
        }
    }
    replace_ranges(line, &ranges)
}

/// The key in front of the separator at `separator`, if it names a credential.
struct Key {
    quoted: bool,
    /// The byte before a bare key: `?` and `&` make it a query parameter.
    in_query: bool,
}

fn key_before(bytes: &[u8], separator: usize) -> Option<Key> {
    let floor = separator.saturating_sub(MAX_KEY_BYTES + 2);
    let mut end = separator;
    while end > floor && matches!(bytes[end - 1], b' ' | b'\t') {
        end -= 1;
    }
    if end == floor {
        return None;
    }
    let last = bytes[end - 1];
    let (name, quoted, in_query) = if last == b'"' || last == b'\'' {
        let close = end - 1;
        let open = bytes[floor..close].iter().rposition(|&b| b == last)? + floor;
        (&bytes[open + 1..close], true, false)
    } else {
        let start = bytes[floor..end]
            .iter()
            .rposition(|&b| !is_name_byte(b))
            .map_or(floor, |at| at + floor + 1);
        if start == floor && floor > 0 {
            return None; // longer than a key name
        }
        let in_query = start > 0 && matches!(bytes[start - 1], b'?' | b'&');
        (&bytes[start..end], false, in_query)
    };
    (!name.is_empty() && name.len() <= MAX_KEY_BYTES && is_credential_key(name))
        .then_some(Key { quoted, in_query })
}

/// The byte range of the value starting at `start` to hide, for a credential key.
fn pair_value(bytes: &[u8], start: usize, key: &Key) -> Option<(usize, usize)> {
    let first = *bytes.get(start)?;
    match first {
        b'"' | b'\'' => {
            let close = quoted_end(bytes, start);
            let value = &bytes[start + 1..close];
            if value.is_empty() || value.starts_with(REDACTED.as_bytes()) {
                return None; // nothing to hide, or hidden by the assignment pass already
            }
            // Inside the quotes; an unclosed value is hidden to the end of the line.
            Some((start + 1, close))
        }
        // A nested object: its own pairs are looked at one by one.
        b'{' => None,
        b'[' if key.quoted => {
            let end = bytes[start..]
                .iter()
                .position(|&b| b == b']')
                .map_or(bytes.len(), |at| start + at + 1);
            Some((start, end))
        }
        _ if key.quoted => {
            // A scalar: to the next `,`, `}` or `]`, trailing blanks kept.
            let mut end = bytes[start..]
                .iter()
                .position(|&b| matches!(b, b',' | b'}' | b']'))
                .map_or(bytes.len(), |at| start + at);
            while end > start && matches!(bytes[end - 1], b' ' | b'\t') {
                end -= 1;
            }
            (end > start && !bytes[start..end].starts_with(REDACTED.as_bytes()))
                .then_some((start, end))
        }
        _ if key.in_query => {
            let end = bytes[start..]
                .iter()
                .position(|&b| {
                    b == b'&' || b == b'#' || b == b'"' || b == b'\'' || b.is_ascii_whitespace()
                })
                .map_or(bytes.len(), |at| start + at);
            (end > start).then_some((start, end))
        }
        // A bare key with a bare value in the middle of a line (`let token = next();`) is
        // code more often than a secret; one at the start of a line was handled before.
        _ => None,
    }
}

/// Where the quoted string opened at `open` closes (the index of its closing quote), or the
/// end of the line. A backslash escapes the next character; in single quotes, `''` is a
/// quote too (YAML).
fn quoted_end(bytes: &[u8], open: usize) -> usize {
    let quote = bytes[open];
    let mut index = open + 1;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => index += 2,
            b if b == quote => {
                if quote == b'\'' && bytes.get(index + 1) == Some(&b'\'') {
                    index += 2;
                } else {
                    return index;
                }
            }
            _ => index += 1,
        }
    }
    bytes.len()
}

/// URL userinfo: the password hidden (`scheme://user:[redacted]@host`), and all of it when
/// the user name is 20 or more token characters (a token used as the user). Each
/// `://` is followed to the first `@` or the first character a URL cannot hold; the next
/// search starts where that one stopped, so the pass is linear.
fn redact_userinfo(line: &str) -> Cow<'_, str> {
    let bytes = line.as_bytes();
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(found) = line[from..].find("://") {
        let start = from + found + 3;
        let stop = bytes[start..]
            .iter()
            .position(|&b| {
                b == b'@' || b.is_ascii_whitespace() || matches!(b, b'"' | b'<' | b'>' | b'`')
            })
            .map_or(bytes.len(), |at| start + at);
        if bytes.get(stop) != Some(&b'@') {
            from = stop.max(start);
            continue;
        }
        let userinfo = &bytes[start..stop];
        let colon = userinfo.iter().position(|&b| b == b':');
        let path = userinfo
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#'));
        // A user name of 20 or more token characters is a token used as the user.
        let long_user = |user: &[u8]| {
            user.len() >= 20
                && user.iter().all(|&b| {
                    b.is_ascii_alphanumeric()
                        || matches!(b, b'-' | b'_' | b'.' | b'~' | b'%' | b'+')
                })
        };
        match (colon, path) {
            // `user:password@`; a `/` before any `:` means the `@` is in the path.
            (Some(colon), path) if path.is_none_or(|path| colon < path) => {
                let password = &userinfo[colon + 1..];
                if long_user(&userinfo[..colon]) {
                    ranges.push((start, stop));
                } else if !password.is_empty() && !password.starts_with(REDACTED.as_bytes()) {
                    ranges.push((start + colon + 1, stop));
                }
            }
            (None, None) if long_user(userinfo) => ranges.push((start, stop)),
            _ => {}
        }
        from = stop + 1;
    }
    replace_ranges(line, &ranges)
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

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+' | b'/' | b'=')
}

/// A token starts only where a word starts: not after a letter, digit, `_` or `-`.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')
}

/// Replaces every token that starts with a known prefix (at a word start) with
/// [`REDACTED`], to the end of its run of token characters.
///
/// Linear: the end of each run of token characters is found once, and each word start in
/// it (after a `.`, `/`, `+`, `=`, or where the run starts) is compared with the prefixes
/// only; the token from a word start is the rest of its run. (The first version looked for
/// the end of the run again from every word start: quadratic in a line like `a.a.a.…`.)
fn redact_tokens(line: &str) -> Cow<'_, str> {
    let bytes = line.as_bytes();
    let mut ranges = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        if !is_token_byte(bytes[index]) {
            index += 1;
            continue;
        }
        let run_start = index;
        let run_end = bytes[run_start..]
            .iter()
            .position(|&b| !is_token_byte(b))
            .map_or(bytes.len(), |at| run_start + at);
        for at in run_start..run_end {
            let at_word_start = at == 0 || !is_word_byte(bytes[at - 1]);
            if at_word_start && is_prefixed_token(&bytes[at..run_end]) {
                ranges.push((at, run_end));
                break;
            }
        }
        index = run_end;
    }
    replace_ranges(line, &ranges)
}

/// The bytes some token prefix starts with: most word starts are ruled out by one look.
const PREFIX_FIRST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut index = 0;
    while index < TOKEN_PREFIXES.len() {
        table[TOKEN_PREFIXES[index].0.as_bytes()[0] as usize] = true;
        index += 1;
    }
    table
};

fn is_prefixed_token(token: &[u8]) -> bool {
    let Some(&first) = token.first() else {
        return false;
    };
    PREFIX_FIRST_BYTES[usize::from(first)]
        && TOKEN_PREFIXES.iter().any(|(prefix, min)| {
            token.len() >= prefix.len() + min && token.starts_with(prefix.as_bytes())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn check(input: &str, expected: &str) {
        assert_eq!(redact(input), expected, "{input}");
    }

    #[test]
    fn redaction_hides_the_obvious() {
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
        check(
            "crlf\r\nDB_PASSWORD=x\r\n",
            "crlf\r\nDB_PASSWORD=[redacted]\r\n",
        );
    }

    /// Tokens after a `.`, `/`, `=` start a word; inside a word they do not.
    #[test]
    fn tokens_start_where_words_start() {
        let token = "ghp_abcdefghijklmnopqrstuvwxyz0123";
        check(&format!("a.{token}"), "a.[redacted]");
        check(&format!("url/{token}/x"), "url/[redacted]");
        check(&format!("x{token}"), &format!("x{token}"));
        check(&format!("x-{token}"), &format!("x-{token}"));
        check(&format!("é{token}"), "é[redacted]");
        check("ghp_short", "ghp_short");
        check(&"a.".repeat(1000), &"a.".repeat(1000));
    }

    /// Issue 13, finding 8: every pair on the line, not only the first at its start.
    #[test]
    fn each_quoted_pair_with_a_secret_key_is_hidden() {
        check(
            r#"{"client_secret": "s3cr3t", "password": "p@ss"}"#,
            r#"{"client_secret": "[redacted]", "password": "[redacted]"}"#,
        );
        check(
            r#"{"user": "bob", "token": "t0k", "n": 1}"#,
            r#"{"user": "bob", "token": "[redacted]", "n": 1}"#,
        );
        check(
            r#"{'password': 'p@ss', 'name': 'x'}"#,
            r#"{'password': '[redacted]', 'name': 'x'}"#,
        );
        check(
            r#"{"pin_secret":1234,"x":2}"#,
            r#"{"pin_secret":[redacted],"x":2}"#,
        );
        check(
            r#"["auth", {"api key" = "v"}]"#,
            r#"["auth", {"api key" = "[redacted]"}]"#,
        );
        check(
            r#"connect(user="a", password="b c")"#,
            r#"connect(user="a", password="[redacted]")"#,
        );
        check(
            r#"  db = { password = "x" }"#,
            r#"  db = { password = "[redacted]" }"#,
        );
        check(
            r#"{"secrets": ["a", "b"], "x": 1}"#,
            r#"{"secrets": [redacted], "x": 1}"#,
        );
        check(
            r#"x: {"token": "a\"b", "y": 1}"#,
            r#"x: {"token": "[redacted]", "y": 1}"#,
        );
        check(
            r#"y: {'password': 'it''s', 'z': 1}"#,
            r#"y: {'password': '[redacted]', 'z': 1}"#,
        );
        check(
            r#"x, "password": "never closed"#,
            r#"x, "password": "[redacted]"#,
        );
        check(
            r#"my $h = {"token" => "v"};"#,
            r#"my $h = {"token" => "[redacted]"};"#,
        );
        check(
            r#"tok := "abc"; token := "v""#,
            r#"tok := "abc"; token := "[redacted]""#,
        );
        check(
            "GET /cb?code=1&access_token=abc&x=2 200",
            "GET /cb?code=1&access_token=[redacted]&x=2 200",
        );
        // Code is left alone: bare keys with bare values, comparisons, paths.
        for code in [
            "let token = next_token();",
            "if password == expected {",
            "use auth::token::Token;",
            r#"{"user": "bob", "count": 2}"#,
            r#"{"token": {"kind": "x"}}"#,
        ] {
            check(code, code);
        }
    }

    #[test]
    fn url_credentials_are_hidden() {
        check(
            "DATABASE_URL=postgres://u:secret@db.internal:5432/app",
            "DATABASE_URL=postgres://u:[redacted]@db.internal:5432/app",
        );
        check(
            "git clone https://user:pw@example.com/r.git now",
            "git clone https://user:[redacted]@example.com/r.git now",
        );
        check(
            "redis://:hunter2@cache:6379",
            "redis://:[redacted]@cache:6379",
        );
        check(
            "see postgres://u:pa/ss@h/db",
            "see postgres://u:[redacted]@h/db",
        );
        check(
            "https://0123456789abcdef0123456789abcdef@github.com/o/r",
            "https://[redacted]@github.com/o/r",
        );
        check(
            "https://0123456789abcdef0123456789abcdef:x-oauth-basic@github.com/o/r",
            "https://[redacted]@github.com/o/r",
        );
        check(
            r#"{"url": "https://a:b@h"}"#,
            r#"{"url": "https://a:[redacted]@h"}"#,
        );
        for fine in [
            "ssh://git@github.com/o/r",
            "https://medium.com/@someone",
            "https://example.com/?email=a@b.com",
            "https://example.com mail bob@example.com",
            "a://b://c://d",
        ] {
            check(fine, fine);
        }
    }

    /// A key block on one line (a service account's JSON) was shown verbatim before.
    #[test]
    fn key_blocks_on_one_line_are_hidden() {
        check(
            r#"  "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n","#,
            r#"  "private_key": "[redacted]","#,
        );
        check(
            "k=-----BEGIN RSA PRIVATE KEY-----MIIE-----END RSA PRIVATE KEY----- ok",
            "k=-----BEGIN RSA PRIVATE KEY-----[redacted]-----END RSA PRIVATE KEY----- ok",
        );
        check(
            "-----BEGIN EC PRIVATE KEY----- MIIE\nabc\n-----END EC PRIVATE KEY-----\n",
            "-----BEGIN EC PRIVATE KEY-----[redacted]\n[redacted]\n-----END EC PRIVATE KEY-----\n",
        );
        check(
            "-----BEGIN CERTIFICATE-----\nMIIB\n",
            "-----BEGIN CERTIFICATE-----\nMIIB\n",
        );
    }

    /// Issue 13, finding 4: a line too long to check is hidden whole, never shown cut, and
    /// a key block it opens goes on hiding the lines after it.
    #[test]
    fn a_line_too_long_to_check_is_hidden_whole() {
        let long = format!(
            "{} password=\"x\" {}",
            "a.".repeat(MAX_CHECKED_LINE_BYTES / 2),
            "ghp_abcdefghijklmnopqrstuvwxyz0123"
        );
        let text = format!("ok\n{long}\nafter\n");
        assert_eq!(
            redact(&text),
            format!(
                "ok\n[redacted: a line of {} bytes is too long to check]\nafter\n",
                long.len()
            )
        );
        let at_limit = "a".repeat(MAX_CHECKED_LINE_BYTES);
        assert_eq!(redact(&at_limit), at_limit);
        let opens = format!(
            "{}-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nok\n",
            "x".repeat(MAX_CHECKED_LINE_BYTES)
        );
        let shown = redact(&opens);
        assert!(
            shown.ends_with("\n[redacted]\n-----END RSA PRIVATE KEY-----\nok\n"),
            "{shown:.200}"
        );
    }

    /// The hostile inputs of issue 13 finish (their cost is measured by
    /// `examples/redaction-bench.rs`, not asserted here) and hide what they must.
    #[test]
    fn hostile_lines_are_redacted_correctly() {
        let dots = "a.".repeat(32 * 1024);
        assert_eq!(redact(&dots), dots);
        let many = format!("{}ghp_abcdefghijklmnopqrstuvwxyz0123\n", "a.".repeat(1000)).repeat(100);
        assert_eq!(
            redact(&many),
            format!("{}[redacted]\n", "a.".repeat(1000)).repeat(100)
        );
        for hostile in [
            "\"".repeat(60_000),
            "\"\\".repeat(30_000),
            ":".repeat(60_000),
            "= ".repeat(30_000),
            "\"a\":".repeat(15_000),
            "x://".repeat(15_000),
            "-----BEGIN".repeat(6_000),
        ] {
            let _ = redact(&hostile);
        }
        let pairs = format!("{{{}", r#""password": "p", "#.repeat(3000));
        assert_eq!(
            redact(&pairs),
            format!("{{{}", r#""password": "[redacted]", "#.repeat(3000))
        );
    }

    #[test]
    fn work_stops_at_the_deadline() {
        let text = "line of text\n".repeat(100_000);
        let past = Deadline::at(Instant::now() - Duration::from_millis(1));
        assert_eq!(redact_until(&text, past), Err(OutOfTime));
        let later = Deadline::at(Instant::now() + Duration::from_secs(3600));
        assert_eq!(redact_until(&text, later), Ok(text.clone()));
        assert!(!Deadline::NONE.passed());
    }

    #[test]
    fn credential_names() {
        for name in [
            "DB_PASSWORD",
            "api_key",
            "X-Api-Key",
            "API Key",
            "client_secret",
            "pass",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in ["KEYBOARD", "user", "monkey", "passenger"] {
            assert!(!is_credential_name(name), "{name}");
        }
    }
}
