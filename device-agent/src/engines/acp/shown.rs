//! What the agent's terminals print, shown in the job's output while they run: each line as
//! `term-N: LINE`, which the server's timeline folds under the run's N-th `$` line.
//!
//! Bounded twice, saying so where it cuts: a command shows its first [`COMMAND_LINES`] lines
//! (or [`COMMAND_BYTES`]) as they come and then, once it ended, its last [`TAIL_LINES`]
//! (where an error usually is); the run's commands together show at most [`RUN_LINES`] lines
//! (or [`RUN_BYTES`]). The agent itself still reads each terminal's whole output, up to the
//! limit it asked for. Saved secret values are hidden on the way out, as in every line of
//! the job's output (`progress::report_output`).

use std::collections::VecDeque;

use tether_protocol::jobs::MAX_LINE_BYTES;

/// Lines of one command shown as they come.
pub const COMMAND_LINES: usize = 2000;
/// Bytes of one command shown as they come.
pub const COMMAND_BYTES: usize = 512 * 1024;
/// Lines of a command cut short shown once it ended: its last ones.
pub const TAIL_LINES: usize = 100;
/// Lines of all the run's commands shown.
pub const RUN_LINES: usize = 20_000;
/// Bytes of all the run's commands shown.
pub const RUN_BYTES: usize = 8 * 1024 * 1024;

/// What the run's commands showed so far, shared by its terminals.
#[derive(Debug, Default)]
pub struct RunShown {
    lines: usize,
    bytes: usize,
}

impl RunShown {
    /// Takes room for `bytes` of one line, if there is any left.
    fn take(&mut self, bytes: usize) -> bool {
        if self.lines >= RUN_LINES || self.bytes + bytes > RUN_BYTES {
            return false;
        }
        self.lines += 1;
        self.bytes += bytes;
        true
    }

    /// Takes room for all of `lines`, or none.
    fn take_all(&mut self, lines: &VecDeque<String>) -> bool {
        let bytes: usize = lines.iter().map(|line| line.len() + 1).sum();
        if self.lines + lines.len() > RUN_LINES || self.bytes + bytes > RUN_BYTES {
            return false;
        }
        self.lines += lines.len();
        self.bytes += bytes;
        true
    }
}

/// One command's lines on their way to the job's output.
#[derive(Debug)]
pub struct CommandShown {
    /// `term-N`.
    id: String,
    lines: usize,
    bytes: usize,
    /// Past the command's bound: lines go to `tail`.
    cut: bool,
    /// Past the run's bound: lines are dropped.
    run_full: bool,
    tail: VecDeque<String>,
    /// Lines neither shown as they came nor kept in `tail`.
    left_out: usize,
}

impl CommandShown {
    pub fn new(id: &str) -> CommandShown {
        CommandShown {
            id: id.to_owned(),
            lines: 0,
            bytes: 0,
            cut: false,
            run_full: false,
            tail: VecDeque::new(),
            left_out: 0,
        }
    }

    /// `term-N: TEXT`, a line the server reads as output, never as the command's exit.
    pub fn line(&self, text: &str) -> String {
        if looks_like_exit(text) {
            // The exit line is this computer's alone: a program printing one is shifted.
            format!("{}:  {text}", self.id)
        } else {
            format!("{}: {text}", self.id)
        }
    }

    /// The lines to add to the job's output now that the command printed `text` (one line,
    /// without its newline).
    pub fn printed(&mut self, run: &mut RunShown, text: &str) -> Vec<String> {
        if self.run_full {
            self.left_out += 1;
            return Vec::new();
        }
        let bytes = text.len() + 1;
        let mut said = Vec::new();
        if !self.cut && (self.lines >= COMMAND_LINES || self.bytes + bytes > COMMAND_BYTES) {
            self.cut = true;
            said.push(self.line(&format!(
                "… output cut: a command shows its first {COMMAND_LINES} lines (or {} KiB) here, and its last {TAIL_LINES} once it ends",
                COMMAND_BYTES / 1024
            )));
        }
        if self.cut {
            self.tail.push_back(text.to_owned());
            if self.tail.len() > TAIL_LINES {
                self.tail.pop_front();
                self.left_out += 1;
            }
            return said;
        }
        if !run.take(bytes) {
            self.run_full = true;
            self.left_out += 1;
            said.push(self.run_full_note());
            return said;
        }
        self.lines += 1;
        self.bytes += bytes;
        said.push(self.line(text));
        said
    }

    /// The lines to add once the command ended, before its exit: what was left out and the
    /// last lines kept.
    pub fn ended(&mut self, run: &mut RunShown) -> Vec<String> {
        let tail = std::mem::take(&mut self.tail);
        let mut said = Vec::new();
        if !self.run_full && !tail.is_empty() && !run.take_all(&tail) {
            self.run_full = true;
            self.left_out += tail.len();
            said.push(self.run_full_note());
        }
        if self.left_out > 0 {
            said.push(self.line(&format!(
                "… {} line{} of output left out …",
                self.left_out,
                if self.left_out == 1 { "" } else { "s" }
            )));
        }
        if !self.run_full {
            said.extend(tail.iter().map(|text| self.line(text)));
        }
        said
    }

    fn run_full_note(&self) -> String {
        self.line(&format!(
            "… output cut: this run's commands show at most {RUN_LINES} lines (or {} MiB) here; the rest is left out",
            RUN_BYTES / (1024 * 1024)
        ))
    }
}

/// Whether the server would read `text` as a command's exit (`timeline::is_exit`).
fn looks_like_exit(text: &str) -> bool {
    text == "ended"
        || text.starts_with("killed by ")
        || text
            .strip_prefix("exit code ")
            .is_some_and(|code| code.parse::<i64>().is_ok())
}

/// A pipe's bytes cut into lines (without their line endings, bytes that are not UTF-8
/// replaced). A line longer than [`MAX_LINE_BYTES`] is cut there and the rest of it skipped,
/// so a program that never prints a newline is never buffered without bound.
#[derive(Debug, Default)]
pub struct Lines {
    pending: Vec<u8>,
    /// Inside a line already cut.
    skipping: bool,
}

impl Lines {
    /// The lines `bytes` completes.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let (part, ends) = match rest.iter().position(|&byte| byte == b'\n') {
                Some(at) => (&rest[..at], true),
                None => (rest, false),
            };
            rest = if ends { &rest[part.len() + 1..] } else { &[] };
            if !self.skipping {
                let room = MAX_LINE_BYTES.saturating_sub(self.pending.len());
                self.pending
                    .extend_from_slice(&part[..part.len().min(room)]);
                if !ends && self.pending.len() >= MAX_LINE_BYTES {
                    lines.push(self.take());
                    self.skipping = true;
                }
            }
            if ends && !std::mem::replace(&mut self.skipping, false) {
                lines.push(self.take());
            }
        }
        lines
    }

    /// What is left once the pipe closed: a last line without a newline.
    pub fn finish(&mut self) -> Option<String> {
        (!self.pending.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending)
            .trim_end_matches('\r')
            .to_owned();
        self.pending.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut lines = Lines::default();
        let mut out: Vec<String> = chunks.iter().flat_map(|chunk| lines.push(chunk)).collect();
        out.extend(lines.finish());
        out
    }

    #[test]
    fn pipes_are_cut_into_lines_however_they_arrive() {
        assert_eq!(
            split(&[b"one\r\ntw", b"o\n\nthr", b"ee"]),
            ["one", "two", "", "three"]
        );
        assert_eq!(split(&[b"a\n"]), ["a"]);
        assert!(split(&[b""]).is_empty());
        let long = vec![b'x'; MAX_LINE_BYTES * 3];
        let lines = split(&[&long[..5000], &long[5000..], b"\nafter\n"]);
        assert_eq!(
            lines.len(),
            2,
            "{:?}",
            lines.iter().map(String::len).collect::<Vec<_>>()
        );
        assert_eq!(lines[0].len(), MAX_LINE_BYTES);
        assert_eq!(lines[1], "after");
    }

    #[test]
    fn a_line_reading_like_an_exit_is_shifted() {
        let shown = CommandShown::new("term-2");
        assert_eq!(shown.line("exit code 0"), "term-2:  exit code 0");
        assert_eq!(shown.line("killed by me"), "term-2:  killed by me");
        assert_eq!(shown.line("ended"), "term-2:  ended");
        assert_eq!(shown.line("exit code zero"), "term-2: exit code zero");
        assert_eq!(shown.line("test ok"), "term-2: test ok");
    }

    #[test]
    fn a_long_command_shows_its_head_then_its_tail_saying_what_was_left_out() {
        let mut run = RunShown::default();
        let mut shown = CommandShown::new("term-1");
        let total = COMMAND_LINES + TAIL_LINES + 50;
        let said: Vec<String> = (0..total)
            .flat_map(|n| shown.printed(&mut run, &format!("line {n}")))
            .collect();
        assert_eq!(said.len(), COMMAND_LINES + 1);
        assert_eq!(said[0], "term-1: line 0");
        assert_eq!(
            said[COMMAND_LINES - 1],
            format!("term-1: line {}", COMMAND_LINES - 1)
        );
        assert!(said[COMMAND_LINES]
            .starts_with("term-1: … output cut: a command shows its first 2000 lines"));
        let end = shown.ended(&mut run);
        assert_eq!(end.len(), TAIL_LINES + 1);
        assert_eq!(end[0], "term-1: … 50 lines of output left out …");
        assert_eq!(end[1], format!("term-1: line {}", COMMAND_LINES + 50));
        assert_eq!(end[TAIL_LINES], format!("term-1: line {}", total - 1));
        // A short command shows everything, with no note.
        let mut short = CommandShown::new("term-2");
        assert_eq!(short.printed(&mut run, "hi"), ["term-2: hi"]);
        assert!(short.ended(&mut run).is_empty());
    }

    #[test]
    fn bytes_bound_a_command_too() {
        let mut run = RunShown::default();
        let mut shown = CommandShown::new("term-1");
        let wide = "w".repeat(MAX_LINE_BYTES - 1);
        let lines = COMMAND_BYTES / MAX_LINE_BYTES;
        let said: Vec<String> = (0..lines + 1)
            .flat_map(|_| shown.printed(&mut run, &wide))
            .collect();
        assert_eq!(said.len(), lines + 1);
        assert!(said[lines].contains("output cut"), "{}", said[lines]);
    }

    #[test]
    fn the_run_is_bounded_across_its_commands() {
        let mut run = RunShown::default();
        let per = COMMAND_LINES;
        let commands = RUN_LINES / per;
        for n in 1..=commands {
            let mut shown = CommandShown::new(&format!("term-{n}"));
            for line in 0..per {
                assert_eq!(shown.printed(&mut run, "x").len(), 1, "{n} {line}");
            }
            assert!(shown.ended(&mut run).is_empty());
        }
        let mut over = CommandShown::new("term-99");
        let first = over.printed(&mut run, "x");
        assert_eq!(first.len(), 1);
        assert!(first[0]
            .starts_with("term-99: … output cut: this run's commands show at most 20000 lines"));
        assert!(over.printed(&mut run, "y").is_empty());
        assert_eq!(
            over.ended(&mut run),
            ["term-99: … 2 lines of output left out …"]
        );
    }

    #[test]
    fn a_tail_that_no_longer_fits_the_run_is_left_out() {
        let mut run = RunShown {
            lines: RUN_LINES - COMMAND_LINES - 10,
            bytes: 0,
        };
        let mut shown = CommandShown::new("term-3");
        let said = (0..COMMAND_LINES + 30)
            .flat_map(|_| shown.printed(&mut run, "x"))
            .count();
        assert_eq!(said, COMMAND_LINES + 1);
        let end = shown.ended(&mut run);
        assert_eq!(end.len(), 2, "{end:?}");
        assert!(
            end[0].contains("this run's commands show at most"),
            "{end:?}"
        );
        assert_eq!(end[1], "term-3: … 30 lines of output left out …");
    }
}
