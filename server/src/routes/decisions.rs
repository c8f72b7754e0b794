//! Decisions: the device asks (`POST /api/devices/self/jobs/{id}/ask`), reads
//! (`GET /api/devices/self/decisions/{id}`) and closes
//! (`POST /api/devices/self/decisions/{id}/close`); the owner lists (`GET /api/decisions`),
//! answers (`POST /api/decisions/{id}/answer`) and follows them live
//! (`GET /api/decisions/events`, server-sent events).
//!
//! Every change is told to the account's followers (through [`crate::notices`]) after it
//! commits; a web answer is also sent to the device as `decision.answered`.

use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use tether_protocol::decisions::{
    AnswerRequest, AskRequest, AskResponse, CloseRequest, Decision, DecisionChange, DecisionState,
    DecisionsEvent, DeviceDecision,
};
use tether_protocol::push::NotificationAnswer;
use tether_protocol::{AccountId, DecisionId, JobId, SessionId};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Interval;

use super::event_streams::{self, every, KEEP_ALIVE};
use super::lease::Lease;
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs::decisions::{self, DeviceClose, NewDecision, PendingSummary, WebAnswer};
use crate::relay::{AccountEvent, AccountStream};
use crate::state::AppState;

/// How often an event stream re-reads the pending decisions, in case a message was lost.
const RECHECK: Duration = Duration::from_secs(30);

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/devices/self/jobs/{id}/ask",
            ask,
            Access::Lease,
            "Ask the owner",
        )
        .body::<AskRequest>()
        .answer::<AskResponse>(201, "The decision, pending.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    table
        .get(
            "/api/devices/self/decisions/{id}",
            device_get,
            Access::Device,
            "A decision of this device",
        )
        .answer::<DeviceDecision>(200, "Its state and answer.")
        .errors(&[400, 404]);
    table
        .post(
            "/api/devices/self/decisions/{id}/close",
            close,
            Access::Device,
            "Close a decision",
        )
        .body::<CloseRequest>()
        .answer::<Decision>(200, "The closed decision.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    table
        .get(
            "/api/decisions",
            list,
            Access::User,
            "Decisions of the account's jobs",
        )
        .query("state", "`pending`, `answered`, `expired` or `withdrawn`.")
        .answer_list::<Decision>(200, "Newest first.")
        .errors(&[400, 422]);
    table
        .get(
            "/api/decisions/events",
            events,
            Access::User,
            "Decision changes as server-sent events",
        )
        .stream(
            "text/event-stream",
            "`decisions` events with the change and the pending count.",
        )
        .errors(&[]);
    table
        .post(
            "/api/decisions/{id}/answer",
            answer,
            Access::User,
            "Answer a decision",
        )
        .body::<AnswerRequest>()
        .answer::<Decision>(200, "The answered decision.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    // No session: a notification's action runs in the service worker, and the key it
    // carries answers only this decision (deny; allow when the owner lets it).
    table
        .post(
            "/api/decisions/{id}/notification-answer",
            answer_from_notification,
            Access::Public,
            "Answer a decision from its notification",
        )
        .body::<NotificationAnswer>()
        .answer::<Decision>(200, "The answered decision.")
        .errors(&[400, 403, 404, 409, 413, 415, 422]);
}

async fn ask(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    job_id: web::Path<JobId>,
    params: web::Json<AskRequest>,
    Lease(lease): Lease,
) -> Result<HttpResponse, ApiError> {
    let new = NewDecision::try_from(params.into_inner())?;
    let asked = decisions::ask(
        &state.store,
        &device,
        &job_id,
        &lease,
        new,
        state.config.lease_secs,
    )
    .await?;
    state
        .notices
        .decision_asked(&device.account_id, &job_id, &asked.decision_id)
        .await;
    Ok(HttpResponse::Created().json(AskResponse {
        decision_id: asked.decision_id,
    }))
}

async fn device_get(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    decision_id: web::Path<DecisionId>,
) -> Result<HttpResponse, ApiError> {
    let decision = decisions::for_device(&state.store, &device, &decision_id).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(decision))
}

async fn close(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    decision_id: web::Path<DecisionId>,
    params: web::Json<CloseRequest>,
) -> Result<HttpResponse, ApiError> {
    let close = DeviceClose::try_from(params.into_inner())?;
    let closed = decisions::close(&state.store, &device, &decision_id, close).await?;
    state.notices.decision_settled(closed.settled).await;
    Ok(HttpResponse::Ok().json(closed.decision))
}

/// `?state=pending|answered|expired|withdrawn`; empty or absent means every state.
#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
}

async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let filter = match query.into_inner().state.filter(|raw| !raw.is_empty()) {
        Some(raw) => Some(DecisionState::parse(&raw).ok_or_else(|| {
            ApiError::invalid_field("state", "must be pending, answered, expired or withdrawn.")
        })?),
        None => None,
    };
    let decisions = decisions::list(&state.store, &caller.account.id, filter).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(decisions))
}

async fn answer(
    state: web::Data<AppState>,
    caller: Caller,
    decision_id: web::Path<DecisionId>,
    params: web::Json<AnswerRequest>,
) -> Result<HttpResponse, ApiError> {
    let web_answer = WebAnswer::try_from(params.into_inner())?;
    let answered =
        decisions::answer(&state.store, &caller.account.id, &decision_id, web_answer).await?;
    let decision = &answered.decision;
    state
        .notices
        .decision_answered(&decision.device_id, &decision.id, answered.settled)
        .await;
    Ok(HttpResponse::Ok().json(answered.decision))
}

async fn answer_from_notification(
    state: web::Data<AppState>,
    decision_id: web::Path<DecisionId>,
    params: web::Json<NotificationAnswer>,
) -> Result<HttpResponse, ApiError> {
    let request = params.into_inner();
    let answered = decisions::answer_from_notification(&state.store, &decision_id, request).await?;
    let decision = &answered.decision;
    state
        .notices
        .decision_answered(&decision.device_id, &decision.id, answered.settled)
        .await;
    Ok(HttpResponse::Ok().json(answered.decision))
}

/// Server-sent events: a `decisions` event (a [`DecisionsEvent`]) when the stream opens and
/// whenever the account's decisions change, a comment every [`KEEP_ALIVE`].
async fn events(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let account_id = caller.account.id;
    let session_id = caller.session_id;
    // Followed before the first read, so no change falls between the two.
    let follower = state.hub.follow_account(&account_id).await;
    let summary = decisions::pending_summary(&state.store, &account_id).await?;
    let mut feed = Feed {
        state: state.clone(),
        account_id,
        session_id,
        follower,
        last: summary,
        keep_alive: every(KEEP_ALIVE),
        recheck: every(RECHECK),
        opening: None,
    };
    let first = feed.event(DecisionChange::Sync, None, summary);
    feed.opening = Some(Bytes::from(format!("retry: 5000\n\n{first}")));
    Ok(event_streams::respond(feed))
}

/// One open event stream of an account's decisions.
struct Feed {
    state: web::Data<AppState>,
    account_id: AccountId,
    /// The session that opened the stream (none for an API token): when it ends, so does
    /// the stream.
    session_id: Option<SessionId>,
    /// Dropped with the stream when the browser goes away, which ends the registration.
    follower: AccountStream,
    /// What the browser was last told.
    last: PendingSummary,
    keep_alive: Interval,
    recheck: Interval,
    /// The first chunk, sent before anything else.
    opening: Option<Bytes>,
}

impl event_streams::Feed for Feed {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(opening) = self.opening.take() {
            return Some(opening);
        }
        loop {
            tokio::select! {
                received = self.follower.events.recv() => {
                    let (change, decision_id) = match received {
                        Ok(AccountEvent::Decisions { change, decision_id }) => (change, decision_id),
                        Ok(AccountEvent::SessionsEnded) => {
                            if self.session_ended().await {
                                return None;
                            }
                            continue;
                        }
                        Ok(AccountEvent::SpaceChanged { .. }) => continue,
                        Err(RecvError::Lagged(_)) => (DecisionChange::Sync, None),
                        Err(RecvError::Closed) => return None,
                    };
                    let summary = self.read().await;
                    return Some(Bytes::from(self.event(change, decision_id, summary)));
                }
                _ = self.keep_alive.tick() => return Some(Bytes::from_static(b": keep-alive\n\n")),
                _ = self.recheck.tick() => {
                    if self.session_ended().await {
                        return None;
                    }
                    let summary = self.read().await;
                    if summary != self.last {
                        return Some(Bytes::from(self.event(DecisionChange::Sync, None, summary)));
                    }
                }
            }
        }
    }
}

impl Feed {
    async fn session_ended(&self) -> bool {
        event_streams::session_ended(&self.state.store, self.session_id.as_ref()).await
    }

    /// The pending decisions now; on a database error, what was last sent (the next
    /// re-read tries again).
    async fn read(&self) -> PendingSummary {
        match decisions::pending_summary(&self.state.store, &self.account_id).await {
            Ok(summary) => summary,
            Err(error) => {
                tracing::warn!(%error, "pending decisions not read for an event stream");
                self.last
            }
        }
    }

    fn event(
        &mut self,
        change: DecisionChange,
        decision_id: Option<DecisionId>,
        summary: PendingSummary,
    ) -> String {
        self.last = summary;
        let data = DecisionsEvent {
            change,
            decision_id,
            pending: summary.count,
        };
        // A DecisionsEvent always serialises; `{}` would still wake the page.
        let json = serde_json::to_string(&data).unwrap_or_else(|_| "{}".to_owned());
        format!("event: decisions\ndata: {json}\n\n")
    }
}
