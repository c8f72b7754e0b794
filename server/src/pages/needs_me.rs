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

use super::layout::{ago, error_page, page_with_badge};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::AppState;

pub async fn show(state: web::Data<AppState>, caller: Option<Caller>) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/needs-me");
    };
    let pending = crate::decisions::list(
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
                strong.question { (decision.question) }
            }
            dl.action {
                @for (key, value) in action_entries(&decision.action) {
                    dt { (key) }
                    dd { code { (value) } }
                }
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

/// The action as label and text pairs, by label: strings as they are, a list of
/// strings (an argument vector) joined with spaces, quoting the ones that need it, anything
/// else as JSON.
fn action_entries(action: &Value) -> Vec<(String, String)> {
    let Some(fields) = action.as_object() else {
        return vec![("action".to_owned(), action.to_string())];
    };
    fields
        .iter()
        .map(|(key, value)| (key.clone(), action_text(value)))
        .collect()
}

fn action_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .map(quote_word)
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// A word of an argument vector as a shell would need it to stay one word.
fn quote_word(word: &str) -> String {
    let plain = !word.is_empty()
        && !word
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '$' | '`'));
    if plain {
        word.to_owned()
    } else {
        Value::String(word.to_owned()).to_string()
    }
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

/// "Allowed once on the web, 3 min ago" and the like.
fn settled_text(decision: &Decision, now: DateTime<Utc>) -> String {
    let when = decision
        .answered_at
        .map(|at| ago(at, now))
        .unwrap_or_default();
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
                None => "",
            };
            format!("{answer}{by}, {when}")
        }
        DecisionState::Expired => format!("Nobody answered in time; not done ({when})"),
        DecisionState::Withdrawn => format!("No longer needed by the run ({when})"),
        DecisionState::Pending => "Waiting for an answer".to_owned(),
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
        assert_eq!(
            action_entries(&action),
            vec![
                ("command".to_owned(), r#"git commit -m "fix it""#.to_owned()),
                ("folder".to_owned(), "work".to_owned()),
                ("network".to_owned(), "true".to_owned()),
            ]
        );
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
