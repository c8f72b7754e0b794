//! The text of a simulated output line. Each carries its number in its job and the moment
//! its batch was sent, on the run's own monotonic clock, padded to the length of a real
//! build log's line: the watcher that receives it tells which line it is and how long it
//! took, with no clock shared with the server.

use std::time::{Duration, Instant};

/// The run's shared start: every stamp is nanoseconds since it.
#[derive(Debug, Clone, Copy)]
pub struct RunClock(Instant);

impl RunClock {
    pub fn start() -> RunClock {
        RunClock(Instant::now())
    }

    pub fn at(&self, nanos: u64) -> Instant {
        self.0 + Duration::from_nanos(nanos)
    }

    pub fn stamp(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.0).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What a line's filler reads like: a compiler's progress.
const FILLER: &str = "Compiling tether-stream-fixture v0.1.0 (/home/build/work/crates/fixture) \
                      warning: unused variable `batch` in src/lib.rs:42:9 note: #[warn(unused)] on by default ";

/// Line `number` of a job, sent at `sent_nanos`, padded with filler to `bytes` (at least
/// the stamp's own length).
pub fn line_text(number: u64, sent_nanos: u64, bytes: usize) -> String {
    let mut text = format!("line {number:07} sent {sent_nanos:016} ");
    let mut filler = FILLER.chars().cycle();
    while text.len() < bytes {
        text.extend(filler.next());
    }
    text
}

/// The number and send stamp of a line this run wrote; `None` for any other line (the
/// server's own, or a line cut short).
pub fn parse_line(text: &str) -> Option<(u64, u64)> {
    let mut words = text.split(' ');
    if words.next()? != "line" {
        return None;
    }
    let number = words.next()?.parse().ok()?;
    if words.next()? != "sent" {
        return None;
    }
    let sent = words.next()?.parse().ok()?;
    Some((number, sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_its_number_and_stamp_at_the_asked_length() {
        let text = line_text(42, 1_234_567_890, 100);
        assert_eq!(text.len(), 100);
        assert_eq!(parse_line(&text), Some((42, 1_234_567_890)));
    }

    #[test]
    fn other_lines_are_not_taken_for_ours() {
        assert_eq!(parse_line("claimed by load-1"), None);
        assert_eq!(parse_line("line 7"), None);
        assert_eq!(parse_line("line x sent 5 "), None);
    }

    #[test]
    fn the_clock_turns_stamps_back_into_instants() {
        let clock = RunClock::start();
        let now = Instant::now();
        let stamp = clock.stamp(now);
        assert_eq!(clock.at(stamp), now);
    }
}
