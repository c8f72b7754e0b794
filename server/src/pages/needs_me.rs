//! "Needs me": every pending decision of the person's computers, phone first, with the
//! exact action and the answers. The job page shows its decisions with the same card.
//!
//! The list stays current without reloads: `assets/needs_me.js` follows the account's event
//! stream and renders the same card from `GET /api/decisions?state=pending`. Keep
//! [`decision_card`] and that script's `renderCard` in step; the browser tests find the
//! elements by `id="needs-me-list"`, `data-decision-id` and `data-answer`.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde_json::Value;
use tether_protocol::decisions::{Answer, AnsweredBy, Decision, DecisionState, Scope};

use super::layout::{error_page, page_with_badge, when};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::state::AppState;

pub async fn show(state: web::Data<AppState>, caller: Option<Caller>) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/needs-me");
    };
    let pending = crate::jobs::decisions::list(
        &state.store,
        &caller.account.id,
        Some(DecisionState::Pending),
    )
    .await;
    let pending = match pending {
        Ok(pending) => pending,
        Err(error) => return error_page(&caller, &error),
    };
    let now = state.store.clock().now();
    let body = html! {
        h1 { "Needs me" }
        p.notify-link { a href="/account/notifications" { "Get told when something needs you" } }
        p.muted #needs-me-empty hidden[!pending.is_empty()] {
            "Nothing is waiting for you. Questions your runs ask show up here as they come."
        }
        div #needs-me-list {
            @for decision in &pending { (decision_card(decision, true, now)) }
        }
    };
    page_with_badge("Needs me", Some(&caller), Some(pending.len()), body)
}

/// One decision: what asks, the exact action, and the answers (or how it was settled), as
/// of `now`. `with_job` names the job and the computer (on "Needs me"; the job page is the
/// job).
pub(super) fn decision_card(decision: &Decision, with_job: bool, now: DateTime<Utc>) -> Markup {
    html! {
        section.card.decision data-decision-id=(decision.id) data-state=(decision.state.as_str()) {
            div.row {
                span.badge.kind { (decision.kind) }
                strong.question { (question_text(&decision.question)) }
            }
            dl.action {
                @for (key, value) in action_entries(&decision.action) {
                    dt { (key) }
                    dd { (value.markup()) }
                }
            }
            @if let Some(preview) = &decision.preview {
                (preview_box(preview))
            }
            @if with_job {
                div.muted {
                    a href={ "/jobs/" (decision.job_id) } { (decision.job_title) }
                    " on " (decision.device_name)
                }
            }
            @if decision.state == DecisionState::Pending {
                div.muted {
                    time.time-left datetime=(decision.expires_at.to_rfc3339()) {
                        (time_left(decision.expires_at, now))
                    }
                }
                @if decision.web_answers {
                    div.answers {
                        button type="button" data-decision-id=(decision.id) data-answer="allow-once" { "Allow once" }
                        button.secondary type="button" data-decision-id=(decision.id) data-answer="allow-session" { "Allow for this run" }
                        button.danger type="button" data-decision-id=(decision.id) data-answer="deny" { "Deny" }
                    }
                    p.error {}
                } @else {
                    div.waiting-on-computer {
                        strong { "Waiting on the computer" }
                        p.muted {
                            (decision.device_name) " takes no answers from the web. Answer on it with "
                            code { "tether-agent decisions allow " (decision.id) }
                            " (or deny)."
                        }
                    }
                }
            } @else {
                div.muted.settled { (settled_text(decision, now)) }
            }
        }
    }
}

/// The question with its `` `x` `` spans as code (the computer words a command that way);
/// an unpaired backtick stays as it is.
fn question_text(question: &str) -> Markup {
    let parts: Vec<&str> = question.split('`').collect();
    // With an odd number of backticks the last one pairs with nothing: it stays text.
    let unpaired = parts.len().is_multiple_of(2);
    html! {
        @for (index, part) in parts.iter().enumerate() {
            @if unpaired && index == parts.len() - 1 { "`" (part) }
            @else if index % 2 == 1 { code { (part) } }
            @else { (part) }
        }
    }
}

/// One value of an action as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shown {
    Text(String),
    /// An argument vector: each word its own code element, the program first.
    Words(Vec<String>),
}

impl Shown {
    fn markup(&self) -> Markup {
        match self {
            Shown::Text(text) => html! { code { (text) } },
            Shown::Words(words) => html! {
                span.words {
                    @for (index, word) in words.iter().enumerate() {
                        @let shown = if word.is_empty() { "\"\"" } else { word.as_str() };
                        @if index == 0 { code.word.program { (shown) } }
                        @else { " " code.word { (shown) } }
                    }
                }
            },
        }
    }
}

/// The action as label and value pairs, by label: strings as they are, a list of strings
/// (an argument vector) word by word, anything else as JSON.
fn action_entries(action: &Value) -> Vec<(String, Shown)> {
    let Some(fields) = action.as_object() else {
        return vec![("action".to_owned(), Shown::Text(action.to_string()))];
    };
    fields
        .iter()
        .map(|(key, value)| (key.clone(), action_value(value)))
        .collect()
}

fn action_value(value: &Value) -> Shown {
    match value {
        Value::String(text) => Shown::Text(text.clone()),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => {
            Shown::Words(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            )
        }
        other => Shown::Text(other.to_string()),
    }
}

/// Previews up to this many lines are unfolded at first.
const OPEN_PREVIEW_LINES: usize = 40;

/// A write's proposed change, coloured line by line like the job page's diffs, in a box that
/// scrolls on its own; folded when long.
fn preview_box(preview: &str) -> Markup {
    let lines = diff_lines(preview);
    let count = lines.len();
    html! {
        details.preview open[count <= OPEN_PREVIEW_LINES] {
            summary { "Proposed change (" (count) (if count == 1 { " line)" } else { " lines)" }) }
            pre.diff-text tabindex="0" role="region" aria-label="Proposed change" {
                code {
                    @for (kind, line) in &lines {
                        span class={ "line " (kind) } { @if line.is_empty() { " " } @else { (line) } }
                    }
                }
            }
        }
    }
}

/// Each line of a unified diff with its class, as `assets/job.js` `diffLines` tells them:
/// header lines before a file's first hunk, then the first character alone.
fn diff_lines(text: &str) -> Vec<(&'static str, &str)> {
    let mut in_hunk = false;
    text.lines()
        .map(|line| {
            if line.starts_with("diff ") {
                in_hunk = false;
            }
            let kind = if line.starts_with("@@") {
                in_hunk = true;
                "hunk"
            } else if !in_hunk || line.starts_with('\\') {
                "meta"
            } else if line.starts_with('+') {
                "add"
            } else if line.starts_with('-') {
                "del"
            } else {
                "context"
            };
            (kind, line)
        })
        .collect()
}

/// "12 min left" style text.
pub(super) fn time_left(expires_at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (expires_at - now).num_seconds();
    match secs {
        i64::MIN..=0 => "expired".to_owned(),
        1..=59 => "less than a minute left".to_owned(),
        60..=3599 => format!("{} min left", secs / 60),
        _ => format!("{} h {} min left", secs / 3600, (secs % 3600) / 60),
    }
}

/// "Allowed once on the web, 3 min ago" and the like; the time as every list says it
/// (`layout::when`).
fn settled_text(decision: &Decision, now: DateTime<Utc>) -> Markup {
    let at = decision.answered_at.map(|at| when(at, now));
    match decision.state {
        DecisionState::Answered => {
            let answer = match (decision.answer, decision.scope) {
                (Some(Answer::Allow), Some(Scope::Session)) => "Allowed for this run",
                (Some(Answer::Allow), _) => "Allowed once",
                (Some(Answer::Deny), _) => "Denied",
                (None, _) => "Answered",
            };
            let by = match decision.answered_by {
                Some(AnsweredBy::Web) => " on the web",
                Some(AnsweredBy::Computer) => " on the computer",
                Some(AnsweredBy::Notification) => " from a notification",
                None => "",
            };
            html! { (answer) (by) @if let Some(at) = at { ", " (at) } }
        }
        DecisionState::Expired => {
            html! { "Nobody answered in time; not done" @if let Some(at) = at { " (" (at) ")" } }
        }
        DecisionState::Withdrawn => {
            html! { "No longer needed by the run" @if let Some(at) = at { " (" (at) ")" } }
        }
        DecisionState::Pending => html! { "Waiting for an answer" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn actions_show_as_asked() {
        let action = json!({ "command": ["git", "commit", "-m", "fix it"], "folder": "work",
                             "network": true });
        let words = |words: &[&str]| Shown::Words(words.iter().map(|w| (*w).to_owned()).collect());
        assert_eq!(
            action_entries(&action),
            vec![
                (
                    "command".to_owned(),
                    words(&["git", "commit", "-m", "fix it"])
                ),
                ("folder".to_owned(), Shown::Text("work".to_owned())),
                ("network".to_owned(), Shown::Text("true".to_owned())),
            ]
        );
        let shown = action_value(&json!(["echo", "", "<b>"]))
            .markup()
            .into_string();
        assert_eq!(
            shown,
            r#"<span class="words"><code class="word program">echo</code> <code class="word">&quot;&quot;</code> <code class="word">&lt;b&gt;</code></span>"#
        );
    }

    #[test]
    fn questions_show_backtick_spans_as_code() {
        let shown = |text: &str| question_text(text).into_string();
        assert_eq!(
            shown("Run `make <all>` in /w?"),
            "Run <code>make &lt;all&gt;</code> in /w?"
        );
        assert_eq!(shown("Change /w/notes.md?"), "Change /w/notes.md?");
        assert_eq!(shown("a `b` c `d"), "a <code>b</code> c `d");
    }

    #[test]
    fn diff_lines_are_told_apart_like_the_job_page() {
        let text =
            "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n same\n-old\n+new\n--- kept\n\\ No newline\n";
        let kinds: Vec<&str> = diff_lines(text).into_iter().map(|(kind, _)| kind).collect();
        assert_eq!(
            kinds,
            ["meta", "meta", "hunk", "context", "del", "add", "del", "meta"]
        );
        let short = preview_box("@@ -1 +1 @@\n-a\n+b\n").into_string();
        assert!(
            short.contains("<details class=\"preview\" open>"),
            "{short}"
        );
        let long = preview_box(&"+x\n".repeat(41)).into_string();
        assert!(!long.contains(" open"), "{long}");
    }

    #[test]
    fn time_left_reads_naturally() {
        let now = Utc::now();
        let check = |secs: i64, text: &str| {
            assert_eq!(time_left(now + chrono::Duration::seconds(secs), now), text);
        };
        check(-5, "expired");
        check(30, "less than a minute left");
        check(600, "10 min left");
        check(3 * 3600 + 120, "3 h 2 min left");
    }
}
