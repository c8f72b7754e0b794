//! Shared spaces: `POST|GET /api/spaces`, one space, its invitations, members, ledger,
//! jobs and their event stream, and `POST /api/invitations/lookup|accept`.
//!
//! An invitation's secret travels in request bodies only (the page reads it from the
//! link's `#fragment`), never in a path the request log or a `Referer` would carry.

use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use tether_protocol::spaces::{
    CreatedInvitation, InvitationPreview, NewInvitationParams, NewSpaceParams, RoleParams, Space,
    SpaceDetail, SpaceJobSummary, SpaceJobsEvent, SpaceLedgerEntry, SpaceMember,
};
use tether_protocol::{AccountId, Code, InvitationId, SessionId, SpaceId};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Interval;
use utoipa::ToSchema;

use super::event_streams::{self, every, KEEP_ALIVE};
use super::links::public_base;
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs;
use crate::relay::{AccountEvent, AccountStream};
use crate::spaces;
use crate::state::AppState;

/// How often an open space stream reads the space's jobs again.
const REREAD: Duration = Duration::from_secs(2);
/// Longest invitation secret accepted in a body.
const MAX_TOKEN_CHARS: usize = 100;

pub(super) fn routes(table: &mut Table) {
    table
        .post("/api/spaces", create, Access::User, "Make a space")
        .body::<NewSpaceParams>()
        .answer::<Space>(201, "The space, with the caller as its owner.")
        .errors(&[400, 409, 413, 415, 422]);
    table
        .get("/api/spaces", list, Access::User, "The caller's spaces")
        .answer_list::<Space>(200, "By name, with the caller's role in each.")
        .errors(&[]);
    table
        .get("/api/spaces/{id}", detail, Access::User, "One space")
        .answer::<SpaceDetail>(200, "Its members; for its owners, open invitations.")
        .errors(&[400, 404]);
    table
        .post(
            "/api/spaces/{id}/invitations",
            invite,
            Access::User,
            "Invite someone (owners)",
        )
        .body::<NewInvitationParams>()
        .answer::<CreatedInvitation>(201, "A single-use link, shown this once, for 7 days.")
        .errors(&[400, 403, 404, 413, 415, 422]);
    table
        .delete(
            "/api/spaces/{id}/invitations/{invitation_id}",
            revoke_invitation,
            Access::User,
            "Revoke an invitation (owners)",
        )
        .empty(204, "Its link answers 410 invitation_gone from now on.")
        .errors(&[400, 403, 404]);
    table
        .patch(
            "/api/spaces/{id}/members/{account_id}",
            set_role,
            Access::User,
            "Change a member's role (owners)",
        )
        .body::<RoleParams>()
        .answer::<SpaceMember>(200, "The member with the new role.")
        .errors(&[400, 403, 404, 409, 413, 415, 422]);
    table
        .delete(
            "/api/spaces/{id}/members/{account_id}",
            remove,
            Access::User,
            "Remove a member, or leave",
        )
        .empty(
            204,
            "Out of the space at once; their queued space jobs are cancelled.",
        )
        .errors(&[400, 403, 404, 409]);
    table
        .get(
            "/api/spaces/{id}/ledger",
            ledger,
            Access::User,
            "The space's ledger (owners)",
        )
        .answer_list::<SpaceLedgerEntry>(200, "Newest first, at most 500.")
        .errors(&[400, 403, 404]);
    table
        .get(
            "/api/spaces/{id}/jobs",
            space_jobs,
            Access::User,
            "The space's jobs",
        )
        .answer_list::<SpaceJobSummary>(200, "Newest first, at most 200.")
        .errors(&[400, 404]);
    table
        .get(
            "/api/spaces/{id}/events",
            events,
            Access::User,
            "The space's jobs as they change (server-sent events)",
        )
        .stream(
            "text/event-stream",
            "A `jobs` event (a SpaceJobsEvent) when the stream opens and whenever the \
             space's jobs change; it ends when the caller leaves or is removed.",
        )
        .errors(&[400, 404]);
    table
        .post(
            "/api/invitations/lookup",
            lookup,
            Access::User,
            "What an invitation joins",
        )
        .body::<InvitationToken>()
        .answer::<InvitationPreview>(200, "The space, who invited and the role.")
        .errors(&[400, 404, 410, 413, 415, 422]);
    table
        .post(
            "/api/invitations/accept",
            accept,
            Access::User,
            "Accept an invitation",
        )
        .body::<InvitationToken>()
        .answer::<Space>(200, "The space joined; the link is used up.")
        .errors(&[400, 404, 409, 410, 413, 415, 422]);
}

/// An invitation link's secret (the part after `#`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvitationToken {
    pub token: String,
}

impl InvitationToken {
    fn checked(&self) -> Result<&str, ApiError> {
        let token = self.token.trim();
        let shaped = token.starts_with(spaces::INVITATION_PREFIX)
            && token.len() <= MAX_TOKEN_CHARS
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if shaped {
            Ok(token)
        } else {
            Err(ApiError::not_found("invitation"))
        }
    }
}

type MemberPath = web::Path<(SpaceId, AccountId)>;

async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<NewSpaceParams>,
) -> Result<HttpResponse, ApiError> {
    let name = spaces::check_name(&params.name)?;
    let space = spaces::create(&state.store, &caller.account.id, name).await?;
    Ok(HttpResponse::Created().json(space))
}

async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let all = spaces::list(&state.store, &caller.account.id).await?;
    Ok(HttpResponse::Ok().json(all))
}

async fn detail(
    state: web::Data<AppState>,
    caller: Caller,
    space_id: web::Path<SpaceId>,
) -> Result<HttpResponse, ApiError> {
    let found = spaces::detail(&state.store, &caller.account.id, &space_id).await?;
    Ok(HttpResponse::Ok().json(found))
}

async fn invite(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
    space_id: web::Path<SpaceId>,
    params: web::Json<NewInvitationParams>,
) -> Result<HttpResponse, ApiError> {
    let base = public_base(&req, &state.config);
    let account_id = &caller.account.id;
    let made = spaces::invite(&state.store, account_id, &space_id, params.role, &base).await?;
    Ok(HttpResponse::Created()
        .insert_header(("cache-control", "no-store"))
        .json(made))
}

async fn revoke_invitation(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(SpaceId, InvitationId)>,
) -> Result<HttpResponse, ApiError> {
    let (space_id, invitation_id) = path.into_inner();
    let account_id = &caller.account.id;
    spaces::revoke_invitation(&state.store, account_id, &space_id, &invitation_id).await?;
    Ok(HttpResponse::NoContent().finish())
}

async fn set_role(
    state: web::Data<AppState>,
    caller: Caller,
    path: MemberPath,
    params: web::Json<RoleParams>,
) -> Result<HttpResponse, ApiError> {
    let (space_id, member) = path.into_inner();
    let actor = &caller.account.id;
    let changed = spaces::set_role(&state.store, actor, &space_id, &member, params.role).await?;
    state
        .notices
        .space_membership_changed(&member, &space_id)
        .await;
    Ok(HttpResponse::Ok().json(changed))
}

async fn remove(
    state: web::Data<AppState>,
    caller: Caller,
    path: MemberPath,
) -> Result<HttpResponse, ApiError> {
    let (space_id, member) = path.into_inner();
    spaces::remove(&state.store, &caller.account.id, &space_id, &member).await?;
    state
        .notices
        .space_membership_changed(&member, &space_id)
        .await;
    for job_id in jobs::cancel_queued_in_space(&state.store, &member, &space_id).await? {
        tracing::info!(job_id = %job_id, "queued space job cancelled: its owner left the space");
        state.notices.job_changed(&job_id).await;
    }
    Ok(HttpResponse::NoContent().finish())
}

async fn ledger(
    state: web::Data<AppState>,
    caller: Caller,
    space_id: web::Path<SpaceId>,
) -> Result<HttpResponse, ApiError> {
    let lines = spaces::ledger(&state.store, &caller.account.id, &space_id).await?;
    Ok(HttpResponse::Ok().json(lines))
}

async fn space_jobs(
    state: web::Data<AppState>,
    caller: Caller,
    space_id: web::Path<SpaceId>,
) -> Result<HttpResponse, ApiError> {
    let found = jobs::in_space(&state.store, &caller.account.id, &space_id).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(found))
}

async fn lookup(
    state: web::Data<AppState>,
    _caller: Caller,
    params: web::Json<InvitationToken>,
) -> Result<HttpResponse, ApiError> {
    let preview = spaces::preview(&state.store, params.checked()?).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(preview))
}

async fn accept(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<InvitationToken>,
) -> Result<HttpResponse, ApiError> {
    let me = tether_protocol::auth::Me {
        user: caller.user.clone(),
        account: caller.account.clone(),
    };
    let space = spaces::accept(&state.store, &me, params.checked()?).await?;
    Ok(HttpResponse::Ok().json(space))
}

/// Server-sent events: a `jobs` event when the stream opens and whenever the space's jobs
/// change (read again every [`REREAD`]); the stream ends as soon as the caller may no
/// longer see the space (told through the account's events, on any replica) or its browser
/// session ended.
async fn events(
    state: web::Data<AppState>,
    caller: Caller,
    space_id: web::Path<SpaceId>,
) -> Result<HttpResponse, ApiError> {
    let account_id = caller.account.id;
    // Followed before the first read, so no removal falls between the two.
    let follower = state.hub.follow_account(&account_id).await;
    let first = jobs::in_space(&state.store, &account_id, &space_id).await?;
    let mut feed = SpaceFeed {
        state: state.clone(),
        account_id,
        session_id: caller.session_id,
        space_id: space_id.into_inner(),
        follower,
        last: Vec::new(),
        reread: every(REREAD),
        keep_alive: every(KEEP_ALIVE),
        opening: None,
    };
    let opening = feed.event(first).unwrap_or_default();
    feed.opening = Some(Bytes::from(format!("retry: 5000\n\n{opening}")));
    Ok(event_streams::respond(feed))
}

/// One open event stream of a space's jobs.
struct SpaceFeed {
    state: web::Data<AppState>,
    account_id: AccountId,
    session_id: Option<SessionId>,
    space_id: SpaceId,
    follower: AccountStream,
    /// What the browser was last told.
    last: Vec<SpaceJobSummary>,
    reread: Interval,
    keep_alive: Interval,
    opening: Option<Bytes>,
}

/// What reading the space again found.
enum Read {
    Jobs(Vec<SpaceJobSummary>),
    /// The caller may no longer see the space: the stream ends.
    Gone,
    /// A passing fault (logged): try again at the next tick.
    Later,
}

impl event_streams::Feed for SpaceFeed {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(opening) = self.opening.take() {
            return Some(opening);
        }
        loop {
            tokio::select! {
                received = self.follower.events.recv() => match received {
                    Ok(AccountEvent::SpaceChanged { space_id }) if space_id == self.space_id.as_str() => {
                        if let Some(chunk) = self.reread().await? {
                            return Some(chunk);
                        }
                    }
                    Ok(AccountEvent::SessionsEnded) => {
                        if self.session_ended().await {
                            return None;
                        }
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return None,
                },
                _ = self.reread.tick() => {
                    if let Some(chunk) = self.reread().await? {
                        return Some(chunk);
                    }
                }
                _ = self.keep_alive.tick() => return Some(Bytes::from_static(b": keep-alive\n\n")),
            }
        }
    }
}

impl SpaceFeed {
    /// `None` ends the stream; `Some(None)` sends nothing; `Some(Some(chunk))` sends it.
    async fn reread(&mut self) -> Option<Option<Bytes>> {
        match self.read().await {
            Read::Gone => None,
            Read::Later => Some(None),
            Read::Jobs(jobs) if jobs == self.last => Some(None),
            Read::Jobs(jobs) => Some(self.event(jobs).map(Bytes::from)),
        }
    }

    async fn read(&self) -> Read {
        let store = &self.state.store;
        match jobs::in_space(store, &self.account_id, &self.space_id).await {
            Ok(jobs) => Read::Jobs(jobs),
            Err(error) if error.code() == Code::NotFound => Read::Gone,
            Err(error) => {
                tracing::warn!(%error, "space stream not read again");
                Read::Later
            }
        }
    }

    /// The `jobs` event for `jobs`, remembered as what the browser was told.
    fn event(&mut self, jobs: Vec<SpaceJobSummary>) -> Option<String> {
        let event = SpaceJobsEvent { jobs };
        let json = serde_json::to_string(&event).ok()?;
        self.last = event.jobs;
        Some(format!("event: jobs\ndata: {json}\n\n"))
    }

    async fn session_ended(&self) -> bool {
        event_streams::session_ended(&self.state.store, self.session_id.as_ref()).await
    }
}
