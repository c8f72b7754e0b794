//! `GET /api/jobs/{id}/events`: a job's timeline and state as server-sent events, for the
//! job page (`jobs::live` decides what is sent; this file only frames it).
//!
//! `event: lines` (`id:` the seq of its last line, so a browser that reconnects resumes with
//! `Last-Event-ID`) carries a [`JobLinesEvent`]; `event: job` a [`JobStateEvent`], after the
//! catch-up and whenever it changes; a comment every [`KEEP_ALIVE`]. After the job's final
//! `job` event the stream ends; so it does when the session that opened it ends or a member
//! may no longer see the job.

use std::collections::VecDeque;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use tether_protocol::jobs::{JobEvent, JobLinesEvent, JobStateEvent};
use tether_protocol::{JobId, SessionId};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Interval;

use super::event_streams::{self, every, KEEP_ALIVE};
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::live::{self, Live, Watch};
use crate::relay::job_feeds::JobFollower;
use crate::relay::{AccountEvent, AccountStream, JobNews};
use crate::state::AppState;

/// How often an open stream reads its job again, for news that did not come (a lost
/// publication, lines no progress call wrote, a revoked computer), and checks that its
/// session holds and a member may still see the job.
const RECHECK: Duration = Duration::from_secs(10);

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/jobs/{id}/events",
            events,
            Access::User,
            "One job's lines and state as they change (server-sent events)",
        )
        .query(
            "after",
            "Send the lines after this seq (default 0); a `Last-Event-ID` header wins.",
        )
        .header(
            "last-event-id",
            "The seq of the last line the browser has (sent by EventSource on reconnecting).",
        )
        .stream(
            "text/event-stream",
            "`lines` events (a JobLinesEvent, `id:` the seq of its last line): first the lines \
             after `after` from the database, then each batch as its computer sends it, in \
             order, never with a gap or twice. A `job` event (a JobStateEvent) after the \
             catch-up and whenever the state changes; after a final one the stream ends. A \
             member of the job's space gets the space view's lines only.",
        )
        .errors(&[400, 404]);
}

/// `?after=SEQ`, read as text so a bad one is a 400 that names it.
#[derive(Deserialize)]
struct StreamQuery {
    after: Option<String>,
}

/// Where the stream starts: `Last-Event-ID` when the browser sends one, else `?after=`.
fn after(req: &HttpRequest, query: &StreamQuery) -> Result<i64, ApiError> {
    let header = req.headers().get("last-event-id");
    if let Some(header) = header.filter(|value| !value.as_bytes().trim_ascii().is_empty()) {
        let raw = header.to_str().unwrap_or("-");
        return live::parse_after("Last-Event-ID", raw);
    }
    match query.after.as_deref() {
        Some(raw) => live::parse_after("after", raw),
        None => Ok(0),
    }
}

async fn events(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    query: web::Query<StreamQuery>,
) -> Result<HttpResponse, ApiError> {
    let after = after(&req, &query)?;
    let account_id = caller.account.id;
    // Followed before anything is read, so no change falls between the reads and the news.
    let account = state.hub.follow_account(&account_id).await;
    let watch = Watch::open(&state.store, &account_id, &job_id, after).await?;
    let job = state.hub.follow_job(&job_id).await;
    let mut feed = JobFeed {
        state,
        session_id: caller.session_id,
        watch,
        job,
        account,
        keep_alive: every(KEEP_ALIVE),
        recheck: every(RECHECK),
        queue: VecDeque::from([Bytes::from_static(b"retry: 3000\n\n")]),
        draining: true,
        due: None,
        ended: false,
    };
    // The catch-up: the job is read as it is now, and its lines from the database go out
    // before it does.
    feed.reread().await;
    Ok(event_streams::respond(feed))
}

/// One open event stream of a job.
struct JobFeed {
    state: web::Data<AppState>,
    /// The session that opened the stream (none for an API token): when it ends, so does
    /// the stream.
    session_id: Option<SessionId>,
    watch: Watch,
    /// The job's news; dropped with the stream, which ends the registration.
    job: JobFollower,
    /// The caller's account events: sessions ended, spaces left.
    account: AccountStream,
    keep_alive: Interval,
    recheck: Interval,
    /// Chunks ready to go, in order.
    queue: VecDeque<Bytes>,
    /// Lines are to be read from the database (a catch-up, a gap) before anything live.
    draining: bool,
    /// The job as read last, told once the lines before it went.
    due: Option<JobStateEvent>,
    /// The stream ends once its queue is sent.
    ended: bool,
}

impl event_streams::Feed for JobFeed {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(chunk) = self.queue.pop_front() {
                return Some(chunk);
            }
            if self.ended {
                return None;
            }
            if self.draining {
                self.drain_page().await;
                continue;
            }
            if let Some(state) = self.due.take() {
                self.ended = state.state.is_final();
                if let Some(state) = self.watch.tell(state) {
                    self.queue.push_back(state_event(&state));
                }
                continue;
            }
            self.wait().await;
        }
    }
}

impl JobFeed {
    /// Waits for the next thing to do: news, an account event or a tick.
    async fn wait(&mut self) {
        tokio::select! {
            news = self.job.news.recv() => match news {
                Ok(news) => match &*news {
                    JobNews::Lines { events } => match self.watch.take_live(events) {
                        Live::Lines(lines) => self.send_lines(lines),
                        Live::Gap(lines) => {
                            self.send_lines(lines);
                            self.draining = true;
                        }
                    },
                    JobNews::Changed => self.reread().await,
                },
                Err(RecvError::Lagged(_)) => self.draining = true,
                Err(RecvError::Closed) => self.ended = true,
            },
            event = self.account.events.recv() => match event {
                Ok(AccountEvent::SessionsEnded) => {
                    if self.session_ended().await {
                        self.ended = true;
                    }
                }
                Ok(AccountEvent::SpaceChanged { space_id }) => {
                    if self.watch.member_space() == Some(space_id.as_str())
                        && !self.watch.still_visible(&self.state.store).await
                    {
                        self.ended = true;
                    }
                }
                Ok(AccountEvent::Decisions { .. }) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => self.ended = true,
            },
            _ = self.keep_alive.tick() => {
                self.queue.push_back(Bytes::from_static(b": keep-alive\n\n"));
            }
            _ = self.recheck.tick() => {
                if self.session_ended().await || !self.watch.still_visible(&self.state.store).await {
                    self.ended = true;
                } else {
                    self.reread().await;
                }
            }
        }
    }

    /// Reads the job again: its header is told after the lines before it, which are read
    /// first when there are any the watch has not read.
    async fn reread(&mut self) {
        match self
            .watch
            .snapshot(&self.state.store, &self.state.config)
            .await
        {
            Ok(snapshot) => {
                self.draining |= self.watch.behind(&snapshot);
                self.due = Some(snapshot.state);
            }
            Err(error) => {
                // Gone: nothing more will come. A passing fault: the next recheck tries again.
                tracing::warn!(%error, "job stream not read again");
                self.ended |= error.code() == tether_protocol::Code::NotFound;
            }
        }
    }

    /// Reads one page of lines from the database; the last page ends the draining.
    async fn drain_page(&mut self) {
        match self.watch.read_page(&self.state.store).await {
            Ok(Some(lines)) => self.send_lines(lines),
            Ok(None) => self.draining = false,
            Err(error) => {
                tracing::warn!(%error, "job stream lines not read");
                // The next recheck reads them, and only then tells the job as it is.
                self.draining = false;
                self.due = None;
            }
        }
    }

    fn send_lines(&mut self, events: Vec<JobEvent>) {
        let Some(last) = events.last().map(|event| event.seq) else {
            return;
        };
        // A JobLinesEvent always serialises; if one ever did not, the next read resends.
        if let Ok(json) = serde_json::to_string(&JobLinesEvent { events }) {
            self.queue.push_back(Bytes::from(format!(
                "event: lines\nid: {last}\ndata: {json}\n\n"
            )));
        }
    }

    async fn session_ended(&self) -> bool {
        event_streams::session_ended(&self.state.store, self.session_id.as_ref()).await
    }
}

fn state_event(state: &JobStateEvent) -> Bytes {
    let json = serde_json::to_string(state).unwrap_or_else(|_| "{}".to_owned());
    Bytes::from(format!("event: job\ndata: {json}\n\n"))
}
