//! What is sent: a [`Notice`] names what happened by id only, and [`compose`] reads, when
//! the worker gets to it, the few columns a message shows (a question, a job's title and
//! state, a computer's name, the first line of the worker's report, which its computer
//! redacted before sending). It never reads a prompt, an action, output or a secret, so no
//! message can carry one.
//!
//! A notice whose moment has passed (the decision was answered meanwhile, the job was taken
//! back up) composes to nothing.

use tether_protocol::jobs::{JobOutcome, JobState};
use tether_protocol::push::{
    PushDecision, PushKind, PushMessage, MAX_DETAIL_CHARS, MAX_TITLE_CHARS,
};
use tether_protocol::{AccountId, DecisionId, DeviceId, JobId};

use crate::clock::Millis;
use crate::error::ApiError;
use crate::relay::QuietAccounts;
use crate::store::{on_read, stored_id, Store};

/// Longest computer name in a message, in characters.
const MAX_COMPUTER_CHARS: usize = 100;
/// A question is worth an hour on the phone at most (less when it expires sooner).
const DECISION_TTL_SECS: i64 = 3600;
/// A result is still news the next day.
const RESULT_TTL_SECS: i64 = 86_400;

/// Something the account's owner should hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A run asked a decision.
    DecisionAsked(DecisionId),
    /// A job ended (the device completed it, or its lease ran out).
    JobEnded(JobId),
    /// A computer with a running job stopped answering.
    DeviceOffline(DeviceId),
}

/// How soon the push service should deliver (RFC 8030 §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    High,
    Normal,
}

impl Urgency {
    pub fn as_str(self) -> &'static str {
        match self {
            Urgency::High => "high",
            Urgency::Normal => "normal",
        }
    }
}

/// A composed message and how to send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub account_id: AccountId,
    pub message: PushMessage,
    /// Seconds the push service keeps it for an unreachable browser.
    pub ttl_secs: i64,
    pub urgency: Urgency,
}

/// The message for `notice` as of now, or `None` when there is nothing to say any more.
///
/// # Errors
/// A database error.
pub async fn compose(
    store: &Store,
    quiet: &QuietAccounts,
    notice: &Notice,
) -> Result<Option<Outgoing>, ApiError> {
    match notice {
        Notice::DecisionAsked(id) => decision(store, id).await,
        Notice::JobEnded(id) => job_ended(store, quiet, id).await,
        Notice::DeviceOffline(id) => device_offline(store, id).await,
    }
}

async fn decision(store: &Store, id: &DecisionId) -> Result<Option<Outgoing>, ApiError> {
    let row = on_read!(store, |pool| sqlx::query_as::<
        _,
        (String, String, Millis, String, String),
    >(
        "SELECT d.account_id, d.question, d.expires_at, v.name, d.action_hash FROM decisions d \
         JOIN devices v ON v.id = d.device_id WHERE d.id = $1 AND d.state = 'pending'"
    )
    .bind(id.as_str())
    .fetch_optional(pool)
    .await)?;
    let Some((account_id, question, expires_at, computer, action_hash)) = row else {
        return Ok(None);
    };
    let left_secs = (expires_at - store.now()) / 1000;
    if left_secs < 1 {
        return Ok(None);
    }
    let Some((answer_key, allow_from_notification)) =
        crate::jobs::decisions::notification_key(store, id).await?
    else {
        return Ok(None);
    };
    Ok(Some(Outgoing {
        account_id: stored_id(account_id)?,
        message: PushMessage {
            kind: PushKind::Decision,
            title: bounded(&question, MAX_TITLE_CHARS),
            computer: bounded(&computer, MAX_COMPUTER_CHARS),
            url: format!("/needs-me#{id}"),
            tag: format!("decision-{id}"),
            decision: Some(PushDecision {
                id: id.clone(),
                action_hash,
                answer_key,
                allow_from_notification,
            }),
            detail: None,
        },
        ttl_secs: left_secs.min(DECISION_TTL_SECS),
        urgency: Urgency::High,
    }))
}

async fn job_ended(
    store: &Store,
    quiet: &QuietAccounts,
    id: &JobId,
) -> Result<Option<Outgoing>, ApiError> {
    type Row = (
        String,
        String,
        String,
        Option<String>,
        String,
        Option<String>,
        bool,
    );
    let generation = quiet.generation();
    let row = on_read!(store, |pool| {
        sqlx::query_as::<_, Row>(
            "SELECT j.account_id, j.title, j.state, j.end_cause, v.name, j.outcome_json, EXISTS \
         (SELECT 1 FROM push_subscriptions s WHERE s.account_id = j.account_id \
         AND s.wants_job_ended = 1) AS wanted FROM jobs j \
         JOIN devices v ON v.id = j.device_id WHERE j.id = $1",
        )
        .bind(id.as_str())
        .fetch_optional(pool)
        .await
    })?;
    let Some((account_id, title, state, end_cause, computer, outcome, wanted)) = row else {
        return Ok(None);
    };
    if !wanted {
        // Most accounts have no browser that wants ends told: their next ends are not
        // queued until one subscribes.
        let account: AccountId = stored_id(account_id.clone())?;
        quiet.remember(account_id, account, generation);
        return Ok(None);
    }
    let Some(state) = JobState::parse(&state).filter(|state| worth_telling(*state)) else {
        return Ok(None);
    };
    // The owner's own cancel or revocation is no news to them.
    if !matches!(end_cause.as_deref(), Some("device" | "lease_expired")) {
        return Ok(None);
    }
    let state = state.as_str();
    let room = MAX_TITLE_CHARS - state.len() - 1;
    Ok(Some(Outgoing {
        account_id: stored_id(account_id)?,
        message: PushMessage {
            kind: PushKind::JobEnded,
            title: format!("{} {state}", bounded(&title, room)),
            computer: bounded(&computer, MAX_COMPUTER_CHARS),
            url: format!("/jobs/{id}"),
            tag: format!("job-{id}"),
            decision: None,
            detail: outcome.as_deref().and_then(report_line),
        },
        ttl_secs: RESULT_TTL_SECS,
        urgency: Urgency::Normal,
    }))
}

/// The first line of the worker's report in a stored outcome, bounded; none without one.
fn report_line(outcome_json: &str) -> Option<String> {
    let outcome: JobOutcome = serde_json::from_str(outcome_json).ok()?;
    let report = outcome.report?;
    Some(bounded(report.first_line(), MAX_DETAIL_CHARS)).filter(|line| !line.is_empty())
}

/// The ends a person wants to hear about; a cancel is their own doing.
fn worth_telling(state: JobState) -> bool {
    match state {
        JobState::Succeeded | JobState::Failed | JobState::Blocked | JobState::Interrupted => true,
        JobState::Queued | JobState::Running | JobState::Waiting | JobState::Cancelled => false,
    }
}

async fn device_offline(store: &Store, id: &DeviceId) -> Result<Option<Outgoing>, ApiError> {
    let row = on_read!(store, |pool| sqlx::query_as::<_, (String, String)>(
        "SELECT account_id, name FROM devices WHERE id = $1 AND revoked_at IS NULL"
    )
    .bind(id.as_str())
    .fetch_optional(pool)
    .await)?;
    let Some((account_id, name)) = row else {
        return Ok(None);
    };
    let computer = bounded(&name, MAX_COMPUTER_CHARS);
    Ok(Some(Outgoing {
        account_id: stored_id(account_id)?,
        message: PushMessage {
            kind: PushKind::DeviceOffline,
            title: format!("{computer} is offline with work running"),
            computer,
            url: "/computers".to_owned(),
            tag: format!("offline-{id}"),
            decision: None,
            detail: None,
        },
        ttl_secs: RESULT_TTL_SECS,
        urgency: Urgency::Normal,
    }))
}

/// `text` cut to `max_chars` characters, the last one an ellipsis when cut.
fn bounded(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_with_an_ellipsis() {
        assert_eq!(bounded("short", 10), "short");
        assert_eq!(bounded("exactly10!", 10), "exactly10!");
        assert_eq!(bounded("a bit longer", 5), "a bi…");
        assert_eq!(bounded("ééééé", 3).chars().count(), 3);
    }

    #[test]
    fn an_ended_job_tells_its_reports_first_line() {
        let long = "x".repeat(300);
        let outcome = serde_json::json!({"outcome": "succeeded", "summary": "s", "exitCode": 0,
            "report": {"summary": format!("\n  Added export.  \nMore.{long}")}});
        assert_eq!(
            report_line(&outcome.to_string()).as_deref(),
            Some("Added export.")
        );
        let cut = serde_json::json!({"outcome": "failed", "summary": "s", "exitCode": 1,
            "report": {"summary": long}});
        let line = report_line(&cut.to_string()).unwrap_or_default();
        assert_eq!(line.chars().count(), MAX_DETAIL_CHARS);
        let none = serde_json::json!({"outcome": "failed", "summary": "s", "exitCode": 1});
        assert_eq!(report_line(&none.to_string()), None);
    }

    #[test]
    fn a_cancel_is_not_news() {
        assert!(!worth_telling(JobState::Cancelled));
        assert!(worth_telling(JobState::Interrupted));
    }
}
