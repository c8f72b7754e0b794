//! A job's live feed: what a page watching a job is sent (`GET /api/jobs/{id}/events`), and
//! the news that tells it when.
//!
//! - **News** is published after a change commits (`notices`): a progress batch's lines as
//!   they were stored ([`NewLines`], numbered from the base seq its write returned, so no
//!   line is read back), and "the job changed" for every other change (claims, ends,
//!   questions, answers, cancels, sweeps), whose lines the watchers read themselves. The
//!   hub carries it ([`crate::relay::job_feeds`]): to nobody, at the cost of one map
//!   lookup, when no page on this replica watches the job and there is no Redis.
//! - **A watch** ([`Watch`]) is one page's view: who it is (the owner, or a member of the
//!   job's space), the timeline read so far (its own [`Reader`], so each line's `entry` is
//!   what `GET /api/jobs/{id}` says), the last line read and what it was last told of the
//!   job. It starts with everything after the page's `after` from the database, a page at
//!   a time, then takes live lines as they come.
//!
//! **Invariant:** a watch sends lines in seq order, never with a gap and never one twice:
//! live lines that start past the next expected seq are not sent, the gap is read from the
//! database first ([`Live::Gap`]); lines at or below the last one read are dropped. News is
//! only ever a hint of when to send; the database says what.
//!
//! **Invariant:** a member sees only what the space view shows
//! ([`shared_view::shown`], the one filter), and only while it may see the job.

use tether_protocol::jobs::{JobEvent, JobOutcome, JobState, JobStateEvent};
use tether_protocol::{AccountId, Code, JobId};

use crate::clock::Millis;
use crate::config::Config;
use crate::error::ApiError;
use crate::jobs::shared_view;
use crate::jobs::timeline::Reader;
use crate::relay::{Hub, JobNews};
use crate::store::job_rows::{self, Appended};
use crate::store::{on_read, Store};

/// Most lines one database read of a watch takes (and one `lines` event carries).
pub const PAGE_LINES: i64 = 500;

/// Lines a progress batch appended, as they were stored; made into events only when a page
/// may be watching.
#[derive(Debug)]
pub struct NewLines {
    appended: Appended,
    /// Kind and text of each line, in order.
    lines: Vec<(&'static str, String)>,
    ats: Vec<Millis>,
    now: Millis,
}

impl NewLines {
    pub(crate) fn new(
        appended: Appended,
        lines: Vec<(&'static str, String)>,
        ats: Vec<Millis>,
        now: Millis,
    ) -> NewLines {
        NewLines {
            appended,
            lines,
            ats,
            now,
        }
    }
}

/// Tells the pages watching `job_id`, on any replica, about lines a progress batch appended
/// (after it committed).
pub async fn publish_lines(hub: &Hub, job_id: &JobId, new: NewLines) {
    if new.lines.is_empty() || !hub.job_followed(job_id) {
        return;
    }
    let events = new.appended.events(new.lines, &new.ats, new.now);
    hub.publish_job(job_id, JobNews::Lines { events }).await;
}

/// Tells the pages watching `job_id`, on any replica, that it changed (after the change
/// committed): they read it again, and its lines since the last they sent.
pub async fn publish_changed(hub: &Hub, job_id: &JobId) {
    if hub.job_followed(job_id) {
        hub.publish_job(job_id, JobNews::Changed).await;
    }
}

/// One page's watch of one job.
pub struct Watch {
    job_id: JobId,
    /// The job's owner: its rows are read as this account's.
    owner: AccountId,
    /// The watcher and the job's space, when the watcher is a member of it (not the owner).
    member: Option<(AccountId, String)>,
    /// The timeline as read so far: where the next line goes.
    reader: Reader,
    /// The last line the reader read (sent, hidden from a member, or one the page had).
    read_to: i64,
    /// Lines at or below this one are not sent: the page has them.
    after: i64,
    /// What the watcher was last told of the job.
    told: Option<JobStateEvent>,
}

/// What live lines gave.
#[derive(Debug, PartialEq)]
pub enum Live {
    /// The lines to send (none when all were sent or hidden already).
    Lines(Vec<JobEvent>),
    /// The lines to send, after which a gap: read the database before any more.
    Gap(Vec<JobEvent>),
}

/// The job as a watch reads it again: what the page header shows, and its last line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub state: JobStateEvent,
    pub last_seq: i64,
}

impl Watch {
    /// The watch of `job_id` by `account_id`, sending lines after `after`.
    ///
    /// # Errors
    /// 404 `not_found` for a job neither the caller's nor in one of its spaces, or a
    /// database error.
    pub async fn open(
        store: &Store,
        account_id: &AccountId,
        job_id: &JobId,
        after: i64,
    ) -> Result<Watch, ApiError> {
        let (owner, member) = match job_rows::read_for_account(store, account_id, job_id).await? {
            Some(_) => (account_id.clone(), None),
            None => {
                let row = job_rows::read_in_member_spaces(store, account_id, job_id)
                    .await?
                    .ok_or_else(|| ApiError::not_found("job"))?;
                let space_id = row
                    .space_id
                    .clone()
                    .ok_or_else(|| ApiError::internal(&"a member's job without a space"))?;
                (row.account_id()?, Some((account_id.clone(), space_id)))
            }
        };
        Ok(Watch {
            job_id: job_id.clone(),
            owner,
            member,
            reader: Reader::default(),
            read_to: 0,
            after,
            told: None,
        })
    }

    /// The job's space, when the watcher watches as a member of it.
    pub fn member_space(&self) -> Option<&str> {
        self.member.as_ref().map(|(_, space_id)| space_id.as_str())
    }

    /// Reads the next page of lines after the last one read: `None` once there are none;
    /// else those to send (maybe none of them: at or below `after`, or hidden).
    ///
    /// # Errors
    /// A database error (nothing was read: the next call reads the same page).
    pub async fn read_page(&mut self, store: &Store) -> Result<Option<Vec<JobEvent>>, ApiError> {
        let page =
            job_rows::events_page(store, &self.owner, &self.job_id, self.read_to, PAGE_LINES)
                .await?;
        if page.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            page.into_iter()
                .filter_map(|event| self.take(event))
                .collect(),
        ))
    }

    /// Takes live lines (in order, without a gap among them): those past the last read.
    pub fn take_live(&mut self, events: &[JobEvent]) -> Live {
        let mut sent = Vec::new();
        for event in events {
            if event.seq <= self.read_to {
                continue;
            }
            if event.seq != self.read_to.saturating_add(1) {
                return Live::Gap(sent);
            }
            sent.extend(self.take(event.clone()));
        }
        Live::Lines(sent)
    }

    /// Reads `event`, the line after the last read: itself with its `entry` when it is to
    /// be sent.
    fn take(&mut self, mut event: JobEvent) -> Option<JobEvent> {
        event.entry = Some(self.reader.read(&event));
        self.read_to = event.seq;
        let shown = self.member.is_none() || shared_view::shown(&event);
        (shown && event.seq > self.after).then_some(event)
    }

    /// Whether the job has lines the watch has not read.
    pub fn behind(&self, snapshot: &Snapshot) -> bool {
        snapshot.last_seq > self.read_to
    }

    /// Notes `state` as told; `Some(state)` when the page must be told it.
    pub fn tell(&mut self, state: JobStateEvent) -> Option<JobStateEvent> {
        if self.told.as_ref() == Some(&state) {
            return None;
        }
        self.told = Some(state.clone());
        Some(state)
    }

    /// The job now: its header and its last line (why a queued job waits costs a few reads
    /// more, while it is queued).
    ///
    /// # Errors
    /// A database error; 404 when the job is gone.
    pub async fn snapshot(&self, store: &Store, config: &Config) -> Result<Snapshot, ApiError> {
        let row = on_read!(store, |pool| sqlx::query_as::<
            _,
            (String, i64, i64, Option<String>, i64),
        >(
            "SELECT state, attempt, cancel_requested, outcome_json, event_seq FROM jobs \
             WHERE id = $1 AND account_id = $2"
        )
        .bind(self.job_id.as_str())
        .bind(self.owner.as_str())
        .fetch_optional(pool)
        .await)?;
        let (state, attempt, cancel_requested, outcome_json, last_seq) =
            row.ok_or_else(|| ApiError::not_found("job"))?;
        let state = JobState::parse(&state)
            .ok_or_else(|| ApiError::internal(&format_args!("stored job state {state:?}")))?;
        let summary = match outcome_json {
            Some(json) => Some(serde_json::from_str::<JobOutcome>(&json)?.summary),
            None => None,
        };
        let queued_because = if state == JobState::Queued {
            self.queue_reason(store, config).await?
        } else {
            None
        };
        Ok(Snapshot {
            state: JobStateEvent {
                state,
                attempt: u32::try_from(attempt).unwrap_or(0),
                cancel_requested: cancel_requested != 0,
                summary,
                queued_because,
            },
            last_seq,
        })
    }

    async fn queue_reason(
        &self,
        store: &Store,
        config: &Config,
    ) -> Result<Option<String>, ApiError> {
        let Some(row) = job_rows::read_for_account(store, &self.owner, &self.job_id).await? else {
            return Ok(None);
        };
        let job = row.into_job(Vec::new())?;
        crate::jobs::queue_reason(store, config, &self.owner, &job).await
    }

    /// Whether the watcher may still see the job: always its owner; a member while the job
    /// is in one of its spaces. On a database error, yes: the next check tries again.
    pub async fn still_visible(&self, store: &Store) -> bool {
        let Some((member, _)) = &self.member else {
            return true;
        };
        match crate::jobs::space_owner_of(store, member, &self.job_id).await {
            Ok(_) => true,
            Err(error) if error.code() == Code::NotFound => false,
            Err(error) => {
                tracing::warn!(job_id = %self.job_id, %error, "a member's job stream not checked");
                true
            }
        }
    }
}

/// `after` as a page sends it (`?after=`, or `Last-Event-ID`): a seq, 0 or more.
///
/// # Errors
/// 400 `invalid_request` naming `field` for anything else.
pub fn parse_after(field: &str, raw: &str) -> Result<i64, ApiError> {
    raw.trim()
        .parse::<i64>()
        .ok()
        .filter(|after| *after >= 0)
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidRequest,
                format!("{field}: must be a line's seq, 0 or more."),
            )
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::Utc;
    use tether_protocol::jobs::TimelineKind;

    fn line(seq: i64, text: &str) -> JobEvent {
        JobEvent {
            seq,
            at: Utc::now(),
            kind: "output".to_owned(),
            text: text.to_owned(),
            entry: None,
        }
    }

    fn watch(member: bool, after: i64) -> Watch {
        Watch {
            job_id: JobId::generate(),
            owner: AccountId::generate(),
            member: member.then(|| (AccountId::generate(), "space".to_owned())),
            reader: Reader::default(),
            read_to: 0,
            after,
            told: None,
        }
    }

    fn seqs(live: &Live) -> (Vec<i64>, bool) {
        match live {
            Live::Lines(lines) => (lines.iter().map(|e| e.seq).collect(), false),
            Live::Gap(lines) => (lines.iter().map(|e| e.seq).collect(), true),
        }
    }

    #[test]
    fn live_lines_are_sent_once_in_order_and_a_gap_stops_them() {
        let mut watch = watch(false, 0);
        let batch: Vec<JobEvent> = (1..=3).map(|seq| line(seq, "x")).collect();
        assert_eq!(seqs(&watch.take_live(&batch)), (vec![1, 2, 3], false));
        // Sent already: dropped; overlapping: only the new ones.
        assert_eq!(seqs(&watch.take_live(&batch)), (vec![], false));
        let overlap: Vec<JobEvent> = (2..=5).map(|seq| line(seq, "x")).collect();
        assert_eq!(seqs(&watch.take_live(&overlap)), (vec![4, 5], false));
        // Past the next expected one: nothing is sent until the gap is read.
        let later: Vec<JobEvent> = (8..=9).map(|seq| line(seq, "x")).collect();
        assert_eq!(seqs(&watch.take_live(&later)), (vec![], true));
        assert_eq!(watch.read_to, 5);
    }

    #[test]
    fn lines_the_page_has_are_read_but_not_sent() {
        let mut watch = watch(false, 2);
        let batch = [line(1, "agent: a 1"), line(2, "hello"), line(3, "again")];
        let Live::Lines(sent) = watch.take_live(&batch) else {
            panic!("a gap");
        };
        assert_eq!(sent.len(), 1);
        // Read with the lines before it: the agent's message continues.
        let entry = sent[0].entry.unwrap();
        assert_eq!((entry.kind, entry.group), (TimelineKind::Message, Some(2)));
    }

    #[test]
    fn a_member_gets_the_space_view_of_live_lines() {
        let mut watch = watch(true, 0);
        let batch = [
            line(1, "$ cargo test"),
            line(2, "term-1: running 3 tests"),
            line(3, "stderr: warning"),
            line(4, "term-1: exit code 0"),
        ];
        let Live::Lines(sent) = watch.take_live(&batch) else {
            panic!("a gap");
        };
        let seqs: Vec<i64> = sent.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 4]);
        assert_eq!(watch.read_to, 4);
    }

    #[test]
    fn a_state_is_told_once() {
        let mut watch = watch(false, 0);
        let running = JobStateEvent {
            state: JobState::Running,
            attempt: 1,
            cancel_requested: false,
            summary: None,
            queued_because: None,
        };
        assert_eq!(watch.tell(running.clone()), Some(running.clone()));
        assert_eq!(watch.tell(running.clone()), None);
        let cancelling = JobStateEvent {
            cancel_requested: true,
            ..running
        };
        assert_eq!(watch.tell(cancelling.clone()), Some(cancelling));
    }

    #[test]
    fn after_is_a_seq() {
        assert_eq!(parse_after("after", "42").unwrap(), 42);
        assert_eq!(parse_after("after", "0").unwrap(), 0);
        for hostile in ["-1", "abc", "", "1e3", "99999999999999999999999", "4 2"] {
            assert_eq!(
                parse_after("after", hostile).unwrap_err().code(),
                Code::InvalidRequest,
                "{hostile}"
            );
        }
    }
}
