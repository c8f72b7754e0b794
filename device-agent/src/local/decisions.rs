//! The decisions in the data dir: each question a run waits on, offered as
//! `decisions/pending/<id>.json`, and each answer the owner gives on the computer
//! (`tether-agent decisions allow|deny`), left as `decisions/answers/<id>.json` for the
//! waiting run to take. The waiting itself is [`crate::run::decisions`].

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_protocol::decisions::{Answer, Scope};
use tether_protocol::{DecisionId, JobId};

use crate::local::state::DataDir;

/// Where pending decisions are offered, one `<id>.json` each.
pub const PENDING_DIR: &str = "decisions/pending";
/// Where answers given on the computer are left for the waiting run, one `<id>.json` each.
pub const ANSWERS_DIR: &str = "decisions/answers";

/// A pending decision as written for `tether-agent decisions list` (a file in the data dir
/// read by another process of the agent, hence `Serialize`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingDecision {
    pub id: DecisionId,
    pub job_id: JobId,
    pub kind: String,
    pub question: String,
    pub action: serde_json::Value,
    pub action_hash: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// A write's proposed change, as the server was sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

/// An answer given on the computer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalAnswer {
    pub answer: Answer,
    pub scope: Scope,
}

/// The pending decisions and local answers in the data dir.
#[derive(Debug, Clone)]
pub struct LocalDecisions {
    data_dir: DataDir,
}

impl LocalDecisions {
    pub fn new(data_dir: DataDir) -> LocalDecisions {
        LocalDecisions { data_dir }
    }

    /// Writes `decisions/pending/<id>.json`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn publish(&self, pending: &PendingDecision) -> Result<()> {
        self.data_dir.ensure_dir(PENDING_DIR)?;
        let bytes = serde_json::to_vec_pretty(pending)?;
        self.data_dir.write_file(&pending_file(&pending.id), &bytes)
    }

    /// Every pending decision, oldest first. Unreadable files are skipped.
    ///
    /// # Errors
    /// When the folder cannot be read.
    pub fn list(&self) -> Result<Vec<PendingDecision>> {
        let mut pending: Vec<PendingDecision> = Vec::new();
        for name in self.data_dir.list_dir(PENDING_DIR)? {
            let Some(bytes) = self.data_dir.read_file(&format!("{PENDING_DIR}/{name}"))? else {
                continue;
            };
            match serde_json::from_slice(&bytes) {
                Ok(decision) => pending.push(decision),
                Err(err) => tracing::warn!("skipping {name}: {err}"),
            }
        }
        pending.sort_by_key(|decision| decision.created_at);
        Ok(pending)
    }

    /// One pending decision.
    ///
    /// # Errors
    /// When its file cannot be read or parsed.
    pub fn get(&self, decision_id: &DecisionId) -> Result<Option<PendingDecision>> {
        let Some(bytes) = self.data_dir.read_file(&pending_file(decision_id))? else {
            return Ok(None);
        };
        Ok(Some(serde_json::from_slice(&bytes)?))
    }

    /// Answers a pending decision on the computer: writes `decisions/answers/<id>.json`
    /// atomically for the waiting run to take.
    ///
    /// # Errors
    /// When no such decision is pending, for deny "for this run", or when the file cannot be
    /// written.
    pub fn answer(&self, raw_id: &str, answer: LocalAnswer) -> Result<PendingDecision> {
        let decision_id = DecisionId::parse(raw_id)
            .map_err(|err| anyhow::anyhow!("{raw_id:?} is not a decision id: {err}"))?;
        if answer.answer == Answer::Deny && answer.scope == Scope::Session {
            bail!("a deny counts once; asking again raises a new decision");
        }
        let Some(pending) = self.get(&decision_id)? else {
            bail!("no decision {decision_id} is pending on this computer (see `tether-agent decisions list`)");
        };
        self.data_dir.ensure_dir(ANSWERS_DIR)?;
        let bytes = serde_json::to_vec(&answer)?;
        self.data_dir
            .write_file(&answer_file(&decision_id), &bytes)?;
        Ok(pending)
    }

    /// The local answer to a decision, if one was given.
    ///
    /// # Errors
    /// When the file exists but cannot be read or parsed.
    pub fn answer_of(&self, decision_id: &DecisionId) -> Result<Option<LocalAnswer>> {
        let Some(bytes) = self.data_dir.read_file(&answer_file(decision_id))? else {
            return Ok(None);
        };
        let answer = serde_json::from_slice(&bytes)
            .with_context(|| format!("the local answer to {decision_id} is unreadable"))?;
        Ok(Some(answer))
    }

    /// Removes a decision's files once it is settled.
    ///
    /// # Errors
    /// When a file cannot be removed.
    pub fn clear(&self, decision_id: &DecisionId) -> Result<()> {
        self.data_dir.remove_file(&answer_file(decision_id))?;
        self.data_dir.remove_file(&pending_file(decision_id))
    }

    /// Removes every decision's files: at the daemon's start, the runs that waited on them
    /// are gone.
    ///
    /// # Errors
    /// When a folder cannot be read or a file removed.
    pub fn clear_all(&self) -> Result<()> {
        for dir in [PENDING_DIR, ANSWERS_DIR] {
            for name in self.data_dir.list_dir(dir)? {
                self.data_dir.remove_file(&format!("{dir}/{name}"))?;
            }
        }
        Ok(())
    }

    /// The owner's approvals setting now (`approvals on|off` may change while a run
    /// waits); `None` when the configuration cannot be read.
    pub fn accepts_web_approvals(&self) -> Option<bool> {
        match self.data_dir.load_config() {
            Ok(Some(config)) => Some(config.accept_web_approvals),
            Ok(None) | Err(_) => None,
        }
    }
}

/// `decisions list` as text: the decisions still open at `now`, oldest first.
pub fn render(pending: &[PendingDecision], now: DateTime<Utc>) -> String {
    let open: Vec<&PendingDecision> = pending
        .iter()
        .filter(|decision| decision.expires_at > now)
        .collect();
    if open.is_empty() {
        return "No decisions are waiting on this computer.\n".to_owned();
    }
    let mut text = String::new();
    for decision in open {
        let left = (decision.expires_at - now).num_seconds().max(0);
        text.push_str(&format!(
            "{}  job {}  {}  expires in {}m{:02}s\n    {}\n",
            decision.id,
            decision.job_id,
            decision.kind,
            left / 60,
            left % 60,
            decision.question
        ));
        if let Some(preview) = &decision.preview {
            text.push_str(&preview_lines(preview));
        }
    }
    text.push_str("Answer with `tether-agent decisions allow ID [--for-run]` or `tether-agent decisions deny ID`.\n");
    text
}

/// Lines of a preview `decisions list` shows; the rest is counted.
pub const LISTED_PREVIEW_LINES: usize = 40;

/// The first [`LISTED_PREVIEW_LINES`] of a preview, indented under its question.
fn preview_lines(preview: &str) -> String {
    let lines: Vec<&str> = preview.lines().collect();
    let mut text: String = lines
        .iter()
        .take(LISTED_PREVIEW_LINES)
        .map(|line| format!("      {line}\n"))
        .collect();
    let left = lines.len().saturating_sub(LISTED_PREVIEW_LINES);
    if left > 0 {
        text.push_str(&format!(
            "      [{left} more lines of the change not shown]\n"
        ));
    }
    text
}

fn pending_file(decision_id: &DecisionId) -> String {
    format!("{PENDING_DIR}/{decision_id}.json")
}

fn answer_file(decision_id: &DecisionId) -> String {
    format!("{ANSWERS_DIR}/{decision_id}.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(raw: &str) -> DecisionId {
        DecisionId::parse(raw).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn local_answers_go_through_files_in_the_data_dir() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let local = LocalDecisions::new(DataDir::resolve(Some(tmp.path().join("agent")))?);
        let now = Utc::now();
        let pending = PendingDecision {
            id: id("d1"),
            job_id: JobId::parse("job1")?,
            kind: "command".into(),
            question: "Run `make` in /w?".into(),
            action: serde_json::json!({"kind": "command"}),
            action_hash: "h1".into(),
            created_at: now,
            expires_at: now,
            preview: None,
        };
        assert!(local.list()?.is_empty());
        local.publish(&pending)?;
        assert_eq!(local.list()?, std::slice::from_ref(&pending));
        assert_eq!(local.answer_of(&id("d1"))?, None);

        let allow = LocalAnswer {
            answer: Answer::Allow,
            scope: Scope::Session,
        };
        assert!(local.answer("nope", allow).is_err());
        assert!(local.answer("../d1", allow).is_err());
        let deny_for_run = LocalAnswer {
            answer: Answer::Deny,
            scope: Scope::Session,
        };
        assert!(local.answer("d1", deny_for_run).is_err());
        assert_eq!(local.answer("d1", allow)?, pending);
        assert_eq!(local.answer_of(&id("d1"))?, Some(allow));

        local.clear(&id("d1"))?;
        assert!(local.list()?.is_empty());
        assert_eq!(local.answer_of(&id("d1"))?, None);
        // Answering a settled decision is an error, not a stray file.
        assert!(local.answer("d1", allow).is_err());
        Ok(())
    }

    #[test]
    fn the_list_shows_a_writes_change_up_to_forty_lines() -> Result<()> {
        let now = Utc::now();
        let decision = |preview: Option<String>| PendingDecision {
            id: id("d1"),
            job_id: JobId::parse("job1").unwrap_or_else(|err| panic!("{err}")),
            kind: "write".into(),
            question: "Change notes.md?".into(),
            action: serde_json::json!({"kind": "write"}),
            action_hash: "h1".into(),
            created_at: now,
            expires_at: now + chrono::Duration::seconds(60),
            preview,
        };
        let short = "--- a/notes.md\n+++ b/notes.md\n@@ -1 +1 @@\n-old\n+new\n";
        let text = render(&[decision(Some(short.into()))], now);
        assert!(
            text.contains("    Change notes.md?\n      --- a/notes.md\n"),
            "{text}"
        );
        assert!(text.contains("      +new\n"), "{text}");
        let long: String = (0..50).map(|n| format!("+line {n}\n")).collect();
        let text = render(&[decision(Some(long))], now);
        assert!(text.contains("      +line 39\n"), "{text}");
        assert!(!text.contains("+line 40"), "{text}");
        assert!(
            text.contains("[10 more lines of the change not shown]"),
            "{text}"
        );
        Ok(())
    }
}
