//! What a space's members see of a space job that is not theirs (docs/SPACES.md).
//!
//! Seen: title, prompt, state, times, where it runs, the timeline's entries (the agent's
//! messages, its plan, tool calls, status lines, the server's lines, and each command's
//! line with its exit), the worker's report, which files changed (paths, statuses, counts,
//! flags), delivery, and evidence that was uploaded or released.
//!
//! Never seen: file text and diffs (the live routes are the owner's), command output,
//! stderr, what the computer refused or noted, questions and their answers, secret names,
//! attachments, held or local evidence, and which personal jobs it continues or runs again.
//!
//! **Invariant:** this is the only place that makes a member's view, and it starts from
//! the owner's whole job and removes; a field added to [`Job`] later is seen by members only
//! once this module says so.

use tether_protocol::jobs::{Job, JobEvent, TimelineKind};

use crate::jobs::timeline::{is_exit, terminal_line};

/// The member's view of the owner's whole `job` (read with `timeline::read_all`).
pub fn limit(job: Job) -> Job {
    let Job {
        id,
        device_id,
        title,
        mut spec,
        state,
        attempt,
        cancel_requested,
        outcome,
        created_at,
        started_at,
        ended_at,
        events,
        decisions: _,
        evidence,
        changes,
        continues: _,
        continued_by: _,
        rerun_of: _,
        reruns: _,
        run_number,
        queued_because,
        delivery,
        observed,
        space_id,
        shared_view: _,
    } = job;
    spec.secrets.clear();
    spec.attachments.clear();
    Job {
        id,
        device_id,
        title,
        spec,
        state,
        attempt,
        cancel_requested,
        outcome,
        created_at,
        started_at,
        ended_at,
        events: events.into_iter().filter(shown).collect(),
        decisions: Vec::new(),
        evidence: evidence
            .into_iter()
            .filter(|item| !item.held && !item.local)
            .collect(),
        changes,
        continues: None,
        continued_by: None,
        rerun_of: None,
        reruns: Vec::new(),
        run_number,
        queued_because,
        delivery,
        observed,
        space_id,
        shared_view: true,
    }
}

/// Whether a member sees this line of the timeline (its `entry` read with the lines before
/// it: `timeline::read_all`, or a live feed's own `timeline::Reader`).
pub fn shown(event: &JobEvent) -> bool {
    let Some(entry) = event.entry else {
        return false;
    };
    match entry.kind {
        TimelineKind::Message
        | TimelineKind::Plan
        | TimelineKind::Tool
        | TimelineKind::Status
        | TimelineKind::System => true,
        // The command's own line, and the line that says how it ended; never its output.
        TimelineKind::Command => {
            entry.group.is_none()
                || terminal_line(&event.text).is_some_and(|(_, rest)| is_exit(rest))
        }
        TimelineKind::Stderr
        | TimelineKind::Refused
        | TimelineKind::Note
        | TimelineKind::Asked
        | TimelineKind::Output => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jobs::timeline::read_all;
    use chrono::Utc;

    fn lines(raw: &[(&str, &str)]) -> Vec<JobEvent> {
        let mut events: Vec<JobEvent> = raw
            .iter()
            .zip(1..)
            .map(|((kind, text), seq)| JobEvent {
                seq,
                at: Utc::now(),
                kind: (*kind).to_owned(),
                text: (*text).to_owned(),
                entry: None,
            })
            .collect();
        read_all(&mut events);
        events
    }

    #[test]
    fn members_see_entries_and_exits_never_output() {
        let events = lines(&[
            ("system", "Claimed by the device"),
            ("output", "agent: scripted 1.0"),
            ("output", "I will run the tests."),
            ("output", "plan:"),
            ("output", "  [x] run the tests"),
            ("output", "tool: Run tests (execute) running"),
            ("output", "$ cargo test"),
            ("output", "term-1: running 3 tests SECRET-OUTPUT"),
            ("output", "term-1: exit code 0"),
            ("output", "stderr: warning SECRET-STDERR"),
            ("output", "refused: write outside the folder"),
            ("output", "wrote src/lib.rs"),
            ("system", "Waiting for an answer (command): may I push?"),
            ("status", "testing"),
        ]);
        let seen: Vec<&str> = events
            .iter()
            .filter(|event| shown(event))
            .map(|event| event.text.as_str())
            .collect();
        assert_eq!(
            seen,
            [
                "Claimed by the device",
                "I will run the tests.",
                "plan:",
                "  [x] run the tests",
                "tool: Run tests (execute) running",
                "$ cargo test",
                "term-1: exit code 0",
                "testing",
            ]
        );
    }
}
