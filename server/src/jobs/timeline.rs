//! A run's lines read as a timeline: the agent's messages, its plan, tool calls, commands
//! and their exits, its stderr, what the computer refused or noted, and what the server
//! recorded.
//!
//! Pure. `jobs::get` fills each event's `entry` with it, so the job page and the page's
//! live updates (`app.js`, from `GET /api/jobs/{id}`) read a line alike. A line is read from
//! itself and the lines before it only: appending lines never changes how earlier ones read.
//!
//! The rule: `status` and `system` events are what they say. An `output` line is read by
//! the exact prefixes the ACP engine prints (docs/ENGINES.md, "The job's output"): `plan:`
//! and its `  [x] ` steps, `tool: TITLE (KIND) STATUS` and its later `tool: TITLE STATUS`,
//! `$ ` for a command started and `term-N: ` for the N-th command's exit, `stderr: `,
//! `refused: `, and `agent: `, `allowed: `, `wrote `, `notice: `, `tether: ` as notes. A
//! recipe prints its program's lines as they are, which rarely start so. Other lines are the
//! agent's messages once an `agent: NAME VERSION` line (the ACP engine's first) was seen,
//! else plain `output`. Consecutive messages, stderr lines or plain lines make one entry.

use tether_protocol::jobs::{EventEntry, JobEvent, TimelineKind};

/// How ACP tool statuses are printed (`device-agent/src/engines/acp/updates.rs`).
const TOOL_STATUSES: [&str; 5] = ["pending", "running", "done", "failed", "updated"];
/// ACP tool kinds as printed.
const TOOL_KINDS: [&str; 10] = [
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
];
const NOTE_PREFIXES: [&str; 5] = ["agent: ", "allowed: ", "wrote ", "notice: ", "tether: "];
/// The server's line when a run asks (`decisions::ask`).
pub const ASKED_PREFIX: &str = "Waiting for an answer (";
/// The server's lines when a new agent process starts, whose commands count from 1 again.
const ATTEMPT_PREFIXES: [&str; 2] = ["Claimed by the device", "Resumed by the device"];

/// Fills each event's `entry`, reading them in order.
pub fn read_all(events: &mut [JobEvent]) {
    let mut reader = Reader::default();
    for event in events {
        event.entry = Some(reader.read(event));
    }
}

/// A tool call seen so far.
#[derive(Debug)]
struct Tool {
    title: String,
    seq: i64,
    ended: bool,
}

/// What the lines so far leave open for the next one to add to.
#[derive(Debug, Default)]
pub struct Reader {
    /// Whether the ACP engine's `agent:` line was seen: plain lines are messages.
    acp: bool,
    /// The entry a line of the same kind would continue: (kind, its first line's seq).
    run: Option<(TimelineKind, i64)>,
    /// The `plan:` line whose steps may follow.
    plan: Option<i64>,
    /// This agent process's `$` lines in order: `term-N` is the N-th.
    commands: Vec<i64>,
    tools: Vec<Tool>,
}

impl Reader {
    /// Where `event` goes, given the events read before it.
    pub fn read(&mut self, event: &JobEvent) -> EventEntry {
        match event.kind.as_str() {
            "status" => self.alone(TimelineKind::Status),
            "system" => self.system(&event.text),
            _ => self.output(event.seq, &event.text),
        }
    }

    fn alone(&mut self, kind: TimelineKind) -> EventEntry {
        self.run = None;
        self.plan = None;
        EventEntry { kind, group: None }
    }

    fn system(&mut self, text: &str) -> EventEntry {
        if ATTEMPT_PREFIXES
            .iter()
            .any(|prefix| text.starts_with(prefix))
        {
            self.commands.clear();
            self.tools.clear();
        }
        let asked = text.starts_with(ASKED_PREFIX);
        self.alone(if asked {
            TimelineKind::Asked
        } else {
            TimelineKind::System
        })
    }

    fn output(&mut self, seq: i64, text: &str) -> EventEntry {
        if text.starts_with("stderr: ") {
            // The agent's stderr comes on its own pipe and may fall inside a plan.
            return self.continued(TimelineKind::Stderr, seq);
        }
        if let (Some(plan), Some(_)) = (self.plan, plan_step(text)) {
            return grouped(TimelineKind::Plan, plan);
        }
        if text == "plan:" {
            let entry = self.alone(TimelineKind::Plan);
            self.plan = Some(seq);
            return entry;
        }
        if let Some(tool) = tool_line(text) {
            return self.tool(seq, &tool);
        }
        if text.starts_with("$ ") {
            self.commands.push(seq);
            return self.alone(TimelineKind::Command);
        }
        if let Some(command) = terminal_line(text).and_then(|(n, _)| self.command(n)) {
            self.run = None;
            self.plan = None;
            return grouped(TimelineKind::Command, command);
        }
        if text.starts_with("refused: ") {
            return self.alone(TimelineKind::Refused);
        }
        if NOTE_PREFIXES.iter().any(|prefix| text.starts_with(prefix)) {
            self.acp |= is_agent_line(text);
            return self.alone(TimelineKind::Note);
        }
        let kind = if self.acp {
            TimelineKind::Message
        } else {
            TimelineKind::Output
        };
        self.continued(kind, seq)
    }

    /// A line that joins the entry before it when that is of the same kind.
    fn continued(&mut self, kind: TimelineKind, seq: i64) -> EventEntry {
        if kind != TimelineKind::Stderr {
            self.plan = None;
        }
        match self.run {
            Some((open, first)) if open == kind => grouped(kind, first),
            _ => {
                self.run = Some((kind, seq));
                EventEntry { kind, group: None }
            }
        }
    }

    /// The `$` line of this process's `n`-th command.
    fn command(&self, n: usize) -> Option<i64> {
        self.commands.get(n.checked_sub(1)?).copied()
    }

    /// A new tool call (its line names the kind), or a later status of one seen (matched by
    /// title, the latest still going first).
    fn tool(&mut self, seq: i64, line: &ToolLine<'_>) -> EventEntry {
        let ended = matches!(line.status, "done" | "failed");
        let earlier = self.earlier_tool(line.whole).or_else(|| {
            line.kind
                .is_none()
                .then(|| self.latest_tool(line.title))
                .flatten()
        });
        match earlier {
            Some(index) => {
                self.tools[index].ended = ended;
                self.alone(TimelineKind::Tool);
                grouped(TimelineKind::Tool, self.tools[index].seq)
            }
            None => {
                self.tools.push(Tool {
                    title: line.title.to_owned(),
                    seq,
                    ended,
                });
                self.alone(TimelineKind::Tool)
            }
        }
    }

    /// An open call titled exactly `whole`: a status line whose title ends in `(word)`.
    fn earlier_tool(&self, whole: &str) -> Option<usize> {
        self.tools
            .iter()
            .rposition(|tool| !tool.ended && tool.title == whole)
    }

    fn latest_tool(&self, title: &str) -> Option<usize> {
        let open = self
            .tools
            .iter()
            .rposition(|tool| !tool.ended && tool.title == title);
        open.or_else(|| self.tools.iter().rposition(|tool| tool.title == title))
    }
}

fn grouped(kind: TimelineKind, group: i64) -> EventEntry {
    EventEntry {
        kind,
        group: Some(group),
    }
}

/// `agent: NAME VERSION`, the ACP engine's first line.
fn is_agent_line(text: &str) -> bool {
    text.strip_prefix("agent: ")
        .is_some_and(|rest| rest.trim().contains(' '))
}

/// A tool call's line, taken apart.
#[derive(Debug, PartialEq, Eq)]
pub struct ToolLine<'a> {
    pub title: &'a str,
    /// Named on a call's first line only.
    pub kind: Option<&'a str>,
    pub status: &'a str,
    /// Everything between `tool: ` and the status.
    whole: &'a str,
}

/// `tool: TITLE (KIND) STATUS` or `tool: TITLE STATUS`.
pub fn tool_line(text: &str) -> Option<ToolLine<'_>> {
    let (whole, status) = text.strip_prefix("tool: ")?.rsplit_once(' ')?;
    if !TOOL_STATUSES.contains(&status) || whole.is_empty() {
        return None;
    }
    let named = whole
        .strip_suffix(')')
        .and_then(|head| head.rsplit_once(" ("))
        .filter(|(_, kind)| TOOL_KINDS.contains(kind));
    let (title, kind) = match named {
        Some((title, kind)) => (title, Some(kind)),
        None => (whole, None),
    };
    Some(ToolLine {
        title,
        kind,
        status,
        whole,
    })
}

/// Where a plan's step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Done,
    Doing,
    Todo,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Done => "done",
            Step::Doing => "doing",
            Step::Todo => "to do",
        }
    }
}

/// `  [x] step`, `  [~] step` or `  [ ] step`.
pub fn plan_step(text: &str) -> Option<(Step, &str)> {
    let rest = text.strip_prefix("  [")?;
    let (mark, step) = rest.split_at_checked(1)?;
    let step = step.strip_prefix("] ")?;
    let state = match mark {
        "x" => Step::Done,
        "~" => Step::Doing,
        " " => Step::Todo,
        _ => return None,
    };
    Some((state, step))
}

/// `term-N: REST`: the N-th command's exit or output.
pub fn terminal_line(text: &str) -> Option<(usize, &str)> {
    let (id, rest) = text.strip_prefix("term-")?.split_once(": ")?;
    Some((id.parse().ok()?, rest))
}

/// Whether a command's line says how it ended (`exit code 0`, `killed by SIGTERM`, `ended`).
pub fn is_exit(rest: &str) -> bool {
    rest == "ended"
        || rest.strip_prefix("killed by ").is_some()
        || rest
            .strip_prefix("exit code ")
            .is_some_and(|code| code.parse::<i64>().is_ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn events(lines: &[(&str, &str)]) -> Vec<JobEvent> {
        let mut events: Vec<JobEvent> = (1..)
            .zip(lines)
            .map(|(seq, (kind, text))| JobEvent {
                seq,
                at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
                kind: (*kind).to_owned(),
                text: (*text).to_owned(),
                entry: None,
            })
            .collect();
        read_all(&mut events);
        events
    }

    fn entries(lines: &[(&str, &str)]) -> Vec<(TimelineKind, Option<i64>)> {
        events(lines)
            .iter()
            .map(|event| {
                let entry = event.entry.unwrap();
                (entry.kind, entry.group)
            })
            .collect()
    }

    use TimelineKind::*;

    #[test]
    fn an_acp_run_reads_as_the_engine_prints_it() {
        let lines = [
            ("system", "Claimed by the device (attempt 1)."),
            ("output", "agent: my-agent 1.2.0"),
            ("output", "I'll look at the failing test first."),
            ("output", "It is in <b>parser</b>."),
            ("output", "plan:"),
            ("output", "  [~] reproduce the failure"),
            ("output", "stderr: warming up"),
            ("output", "  [ ] fix the parser"),
            ("output", "tool: Read src/parser.rs (read) pending"),
            ("output", "tool: Read src/parser.rs done"),
            ("system", "Waiting for an answer (command question)."),
            (
                "output",
                "allowed: $ sh -c 'cargo test' (allowed once on the web)",
            ),
            ("output", "$ sh -c 'cargo test'"),
            ("output", "stderr: compiling"),
            ("output", "stderr: <script>x</script>"),
            ("output", "term-1: exit code 0"),
            ("output", "wrote src/parser.rs"),
            ("status", "testing"),
            ("output", "refused: $ sudo ls: the hard floor refuses sudo"),
            ("output", "All tests pass."),
        ];
        assert_eq!(
            entries(&lines),
            [
                (System, None),
                (Note, None),
                (Message, None),
                (Message, Some(3)),
                (Plan, None),
                (Plan, Some(5)),
                (Stderr, None),
                (Plan, Some(5)),
                (Tool, None),
                (Tool, Some(9)),
                (Asked, None),
                (Note, None),
                (Command, None),
                (Stderr, None),
                (Stderr, Some(14)),
                (Command, Some(13)),
                (Note, None),
                (Status, None),
                (Refused, None),
                (Message, None),
            ]
        );
    }

    #[test]
    fn a_recipe_prints_plain_output() {
        let lines = [
            ("output", "running 3 tests"),
            ("output", "<img src=x onerror=alert(1)>"),
            ("output", "tool: this is not a tool call"),
            ("output", "term-1: nothing started"),
            ("output", "  [x] not a plan"),
            ("system", "Ended succeeded: exit code 0"),
            ("output", "after"),
        ];
        assert_eq!(
            entries(&lines),
            [
                (Output, None),
                (Output, Some(1)),
                (Output, Some(1)),
                (Output, Some(1)),
                (Output, Some(1)),
                (System, None),
                (Output, None),
            ]
        );
    }

    #[test]
    fn commands_are_numbered_per_agent_process() {
        let lines = [
            ("system", "Claimed by the device (attempt 1)."),
            ("output", "$ sh -c 'make'"),
            ("output", "$ sh -c 'make test'"),
            ("output", "term-2: killed by SIGTERM"),
            ("output", "term-1: exit code 2"),
            (
                "system",
                "Resumed by the device after a restart (attempt 2, carry-on 1).",
            ),
            ("output", "$ sh -c 'make'"),
            ("output", "term-1: exit code 0"),
            ("output", "term-2: exit code 0"),
        ];
        assert_eq!(
            entries(&lines),
            [
                (System, None),
                (Command, None),
                (Command, None),
                (Command, Some(3)),
                (Command, Some(2)),
                (System, None),
                (Command, None),
                (Command, Some(7)),
                (Output, None),
            ]
        );
    }

    #[test]
    fn tool_updates_find_their_call_by_title() {
        let lines = [
            ("output", "tool: Run (tests) (execute) pending"),
            ("output", "tool: Read a (read) done"),
            ("output", "tool: Run (tests) running"),
            ("output", "tool: Read a (read) pending"),
            ("output", "tool: Read a done"),
            ("output", "tool: Unknown call failed"),
        ];
        assert_eq!(
            entries(&lines),
            [
                (Tool, None),
                (Tool, None),
                (Tool, Some(1)),
                (Tool, None),
                (Tool, Some(4)),
                (Tool, None),
            ]
        );
    }

    #[test]
    fn lines_are_taken_apart() {
        let tool = tool_line("tool: Read src/a (b).rs (read) pending").unwrap();
        assert_eq!(
            (tool.title, tool.kind, tool.status),
            ("Read src/a (b).rs", Some("read"), "pending")
        );
        assert_eq!(tool_line("tool: Read done").unwrap().kind, None);
        assert_eq!(tool_line("tool: done"), None);
        assert_eq!(plan_step("  [x] fix  it"), Some((Step::Done, "fix  it")));
        assert_eq!(plan_step("  [?] what"), None);
        assert_eq!(plan_step("  [é] what"), None);
        assert_eq!(
            terminal_line("term-12: exit code 3"),
            Some((12, "exit code 3"))
        );
        assert_eq!(terminal_line("term-x: y"), None);
        assert!(is_exit("exit code -1") && is_exit("killed by SIGKILL") && is_exit("ended"));
        assert!(!is_exit("exit code soon"));
    }

    #[test]
    fn later_lines_never_change_earlier_entries() {
        let lines = [
            ("output", "agent: a 1"),
            ("output", "hello"),
            ("output", "$ sh -c 'ls'"),
            ("output", "term-1: exit code 0"),
            ("output", "plan:"),
            ("output", "  [x] done"),
        ];
        let whole = entries(&lines);
        for end in 1..lines.len() {
            assert_eq!(entries(&lines[..end]), whole[..end]);
        }
    }
}
