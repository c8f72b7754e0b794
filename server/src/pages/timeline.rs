//! The job page's timeline: the run's lines as entries (read by `crate::jobs::timeline`), each
//! with its time, and the run's questions where they were asked. `app.js` appends live
//! lines to the same structure from their `entry`; keep the two in step.
//!
//! A run of plain output shows only its last lines here, linked to the whole of it in the
//! log (`assets/log.js`), which shows every line. Escape sequences are dropped here.

use std::borrow::Cow;
use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use maud::{html, Markup};
use tether_protocol::decisions::Decision;
use tether_protocol::jobs::{Job, JobEvent, TimelineKind};

use super::layout::ago;
use super::needs_me::decision_card;
use crate::jobs::timeline::{is_exit, plan_step, terminal_line, tool_line, ASKED_PREFIX};

/// How long after a question lines printed before it may still arrive: the computer sends
/// its lines in batches every 250 ms, but asks at once. Lines that arrive this soon after
/// (and before the answer) are shown before the question.
const LATE_LINES_MS: i64 = 1000;
/// A command's output longer than this is folded.
const FOLD_AFTER_LINES: usize = 5;
/// The last lines of a run of plain output shown on the timeline (`app.js`: PREVIEW_LINES).
const PREVIEW_LINES: usize = 3;

/// An entry: its first line and the lines that add to it.
struct Entry<'a> {
    head: &'a JobEvent,
    kind: TimelineKind,
    more: Vec<&'a JobEvent>,
}

/// One place on the timeline.
enum Item<'a> {
    Line(Entry<'a>),
    Question(&'a Decision),
}

impl Item<'_> {
    fn at(&self) -> DateTime<Utc> {
        match self {
            Item::Line(entry) => entry.head.at,
            Item::Question(decision) => decision.created_at,
        }
    }
}

/// The run as `ol.timeline`.
pub(super) fn timeline(job: &Job, now: DateTime<Utc>) -> Markup {
    let items = placed(entries(&job.events), &job.decisions);
    let running = !job.state.is_final();
    html! {
        ol.timeline data-timeline {
            @for item in &items { (item_view(item, running, now)) }
        }
        @if items.is_empty() { p.muted.timeline-empty { "Nothing yet." } }
    }
}

/// A line as a terminal would show it, without its escape sequences: colours and the rest
/// (CSI, OSC and two-character escapes), other control characters but tab, and what a
/// carriage return wrote over. `app.js`'s `plainText` reads a line alike.
pub(super) fn plain(text: &str) -> Cow<'_, str> {
    let text = text.rsplit('\r').next().unwrap_or(text);
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            if !c.is_control() || c == '\t' {
                out.push(c);
            }
            continue;
        }
        match chars.next() {
            // CSI: parameters and intermediates, then one final byte.
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            // OSC: up to BEL or ESC \.
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' {
                        chars.next_if_eq(&'\\');
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Cow::Owned(out)
}

/// The lines gathered into entries, in the order their first lines came.
fn entries(events: &[JobEvent]) -> Vec<Entry<'_>> {
    let mut entries: Vec<Entry<'_>> = Vec::new();
    let mut by_seq: HashMap<i64, usize> = HashMap::new();
    for event in events {
        let entry = event.entry.unwrap_or(tether_protocol::jobs::EventEntry {
            kind: TimelineKind::Output,
            group: None,
        });
        let joined = entry.group.and_then(|group| by_seq.get(&group).copied());
        match joined {
            Some(index) => entries[index].more.push(event),
            None => {
                by_seq.insert(event.seq, entries.len());
                entries.push(Entry {
                    head: event,
                    kind: entry.kind,
                    more: Vec::new(),
                });
            }
        }
    }
    entries
}

/// The entries with each question after the server's line that it was asked (or at its
/// time), then both after the lines that arrived only just after it (`LATE_LINES_MS`).
fn placed<'a>(entries: Vec<Entry<'a>>, decisions: &'a [Decision]) -> Vec<Item<'a>> {
    let mut left: Vec<&Decision> = decisions.iter().collect();
    left.sort_by_key(|decision| decision.created_at);
    let mut items = Vec::new();
    for entry in entries {
        let asked = (entry.kind == TimelineKind::Asked)
            .then(|| left.iter().position(|d| asks(d, entry.head)))
            .flatten()
            .map(|index| left.remove(index));
        while left.first().is_some_and(|d| d.created_at < entry.head.at) {
            items.push(Item::Question(left.remove(0)));
        }
        items.push(Item::Line(entry));
        items.extend(asked.map(Item::Question));
    }
    items.extend(left.into_iter().map(Item::Question));
    late_lines_first(items)
}

/// Whether `event` is the server's line that `decision` was asked.
fn asks(decision: &Decision, event: &JobEvent) -> bool {
    decision.created_at == event.at
        && event.text == format!("{ASKED_PREFIX}{} question).", decision.kind)
}

/// Moves output that arrived within `LATE_LINES_MS` of a question, before its answer, to
/// before the question.
fn late_lines_first(items: Vec<Item<'_>>) -> Vec<Item<'_>> {
    let mut out = Vec::with_capacity(items.len());
    let mut held: Vec<Item<'_>> = Vec::new();
    let mut until = DateTime::<Utc>::MIN_UTC;
    for item in items {
        let printed = matches!(&item, Item::Line(entry) if is_printed(entry.kind));
        if !held.is_empty() && printed && item.at() <= until {
            out.push(item);
            continue;
        }
        match hold_until(&item) {
            Some(hold) => {
                // The server's line and its question hold together, until the earlier end.
                until = if held.is_empty() {
                    hold
                } else {
                    until.min(hold)
                };
                held.push(item);
            }
            None => {
                out.append(&mut held);
                out.push(item);
            }
        }
    }
    out.append(&mut held);
    out
}

/// Until when lines printed before a question may still arrive after it.
fn hold_until(item: &Item<'_>) -> Option<DateTime<Utc>> {
    let late = chrono::Duration::milliseconds(LATE_LINES_MS);
    match item {
        Item::Line(entry) if entry.kind == TimelineKind::Asked => Some(entry.head.at + late),
        Item::Question(decision) => {
            let hold = decision.created_at + late;
            Some(
                decision
                    .answered_at
                    .map_or(hold, |answered| hold.min(answered)),
            )
        }
        Item::Line(_) => None,
    }
}

/// Lines the computer sends (which come in batches), rather than the server's.
fn is_printed(kind: TimelineKind) -> bool {
    !matches!(kind, TimelineKind::Asked | TimelineKind::System)
}

fn item_view(item: &Item<'_>, running: bool, now: DateTime<Utc>) -> Markup {
    match item {
        Item::Line(entry) => entry_view(entry, running, now),
        Item::Question(decision) => html! {
            li.entry.entry-decision id={ "decision-" (decision.id) }
                data-until=(until_ms(decision.created_at)) {
                (clock(decision.created_at, now))
                div.entry-body { (decision_card(decision, false, now)) }
            }
        },
    }
}

/// When a line may still arrive before this entry (`app.js` inserts it before).
fn until_ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis() + LATE_LINES_MS
}

fn entry_view(entry: &Entry<'_>, running: bool, now: DateTime<Utc>) -> Markup {
    let head = entry.head;
    let until = (entry.kind == TimelineKind::Asked).then(|| until_ms(head.at));
    html! {
        li class={ "entry entry-" (kind_name(entry.kind)) } id={ "event-" (head.seq) }
            data-seq=(head.seq) data-until=[until] {
            (clock(head.at, now))
            div.entry-body { (body(entry, running)) }
        }
    }
}

/// The time as `HH:MM:SS` (UTC here; `app.js` shows the browser's zone), how long ago on
/// hover.
fn clock(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339_opts(SecondsFormat::Millis, true)) title=(ago(at, now)) data-clock {
            (at.format("%H:%M:%S"))
        }
    }
}

/// The kind as the class and `entry` name spell it.
fn kind_name(kind: TimelineKind) -> &'static str {
    match kind {
        TimelineKind::Message => "message",
        TimelineKind::Plan => "plan",
        TimelineKind::Tool => "tool",
        TimelineKind::Command => "command",
        TimelineKind::Stderr => "stderr",
        TimelineKind::Refused => "refused",
        TimelineKind::Note => "note",
        TimelineKind::Status => "status",
        TimelineKind::Asked => "asked",
        TimelineKind::System => "system",
        TimelineKind::Output => "output",
    }
}

fn body(entry: &Entry<'_>, running: bool) -> Markup {
    let lines = || std::iter::once(entry.head).chain(entry.more.iter().copied());
    match entry.kind {
        TimelineKind::Plan => plan_view(entry),
        TimelineKind::Tool => tool_view(entry),
        TimelineKind::Command => command_view(entry, running),
        TimelineKind::Stderr => html! {
            span.label.label-stderr { "stderr" }
            pre.lines { @for line in lines() { (plain(strip(&line.text, "stderr: "))) "\n" } }
        },
        TimelineKind::Refused => html! {
            span.label.label-refused { "refused" } " " (strip(&head_text(entry), "refused: "))
        },
        TimelineKind::Status => html! { span.label { "status" } " " (head_text(entry)) },
        TimelineKind::Output => output_view(entry),
        TimelineKind::Message => html! {
            p.message { @for (n, line) in lines().enumerate() { @if n > 0 { br; } (line.text) } }
        },
        TimelineKind::Note | TimelineKind::Asked | TimelineKind::System => {
            html! { (head_text(entry)) }
        }
    }
}

/// A run of plain output: which lines of the log it is, and its last lines.
fn output_view(entry: &Entry<'_>) -> Markup {
    let first = entry.head.seq;
    let last = entry.more.last().map_or(first, |line| line.seq);
    let count = entry.more.len() + 1;
    let shown = std::iter::once(entry.head)
        .chain(entry.more.iter().copied())
        .skip(count.saturating_sub(PREVIEW_LINES));
    html! {
        a.log-range href={ "#L" (first) "-L" (last) } data-first=(first) {
            @if count == 1 { "Line " (first) } @else { "Lines " (first) "–" (last) }
            " in the log"
        }
        pre.lines { @for line in shown { (plain(&line.text)) "\n" } }
    }
}

fn head_text(entry: &Entry<'_>) -> String {
    entry.head.text.clone()
}

fn strip<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.strip_prefix(prefix).unwrap_or(text)
}

fn plan_view(entry: &Entry<'_>) -> Markup {
    html! {
        strong { "Plan" }
        ul.checklist {
            @for line in &entry.more {
                @if let Some((step, text)) = plan_step(&line.text) {
                    li class={ "step step-" (step.as_str().replace(' ', "-")) } {
                        span.step-state { (step.as_str()) } " " (text)
                    }
                }
            }
        }
    }
}

/// The call's title and kind from its first line, its status from its last.
fn tool_view(entry: &Entry<'_>) -> Markup {
    let first = tool_line(&entry.head.text);
    let last = entry.more.last().and_then(|line| tool_line(&line.text));
    let status = last
        .as_ref()
        .or(first.as_ref())
        .map_or("", |line| line.status);
    html! {
        span.label { "tool" } " "
        @match &first {
            Some(line) => {
                span.tool-title { (line.title) }
                @if let Some(kind) = line.kind { " " span.muted { "(" (kind) ")" } }
            }
            None => (entry.head.text),
        }
        " " span class={ "tool-status tool-" (status) } data-field="tool-status" { (status) }
    }
}

/// `$ command` with its exit, its output folded under it when long.
fn command_view(entry: &Entry<'_>, running: bool) -> Markup {
    let command = strip(&entry.head.text, "$ ");
    let mut exit = None;
    let mut output = Vec::new();
    for line in &entry.more {
        let rest = terminal_line(&line.text).map_or(line.text.as_str(), |(_, rest)| rest);
        if is_exit(rest) {
            exit = Some(rest);
        } else {
            output.push(rest);
        }
    }
    let open = (running && exit.is_none()) || (1..=FOLD_AFTER_LINES).contains(&output.len());
    let failed = exit.is_some_and(|exit| exit != "exit code 0");
    html! {
        details.command open[open] {
            summary {
                code.command-line { "$ " (command) }
                span class={ "exit" @if failed { " exit-failed" } } data-field="exit" {
                    @if let Some(exit) = exit { (exit) } @else if running { "running" }
                }
            }
            pre.lines.command-output {
                @for line in &output { (plain(line)) "\n" }
            }
            @if output.is_empty() { p.muted.no-output { "No output shown." } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn plain_drops_escapes_and_what_a_carriage_return_wrote_over() {
        assert_eq!(plain("ok"), "ok");
        assert_eq!(plain("\u{1b}[1;31merror\u{1b}[0m: no"), "error: no");
        assert_eq!(plain("\u{1b}[38;2;1;2;3mrgb\u{1b}[m"), "rgb");
        assert_eq!(plain("\u{1b}]0;title\u{7}text"), "text");
        assert_eq!(plain("\u{1b}]8;;http://x\u{1b}\\link"), "link");
        assert_eq!(plain("10%\r50%\r100%"), "100%");
        assert_eq!(plain("a\tb\u{7}c"), "a\tbc");
    }
}
