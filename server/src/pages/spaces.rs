//! Shared spaces in the pages: `/spaces` (the caller's spaces and a form for a new one),
//! `/spaces/{id}` (the space's jobs, live from its event stream; members; for owners,
//! invitations and the ledger) and `/invitations` (an invitation link opened).
//!
//! An invitation's secret is in the link's `#fragment`, which browsers never send: the
//! page's script reads it, keeps it in `sessionStorage` across sign-in and posts it in a
//! body (`assets/spaces.js`). The server renders no page that names it.

use std::collections::HashMap;

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use tether_protocol::spaces::{
    PendingInvitation, Space, SpaceDetail, SpaceJobSummary, SpaceLedgerEntry, SpaceMember,
    SpaceRole, INVITATION_DAYS, MAX_SPACE_NAME_CHARS,
};
use tether_protocol::{AccountId, SpaceId};

use super::layout::{error_page, page, when};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// What each role may do, in one line (the invite form and the invitation page say it).
pub(super) fn role_meaning(role: SpaceRole) -> &'static str {
    match role {
        SpaceRole::Viewer => "sees the space's jobs",
        SpaceRole::Member => "sees the space's jobs and assigns space jobs to their own computers",
        SpaceRole::Owner => {
            "a member who also invites, changes roles, removes members and reads the ledger"
        }
    }
}

/// "an owner", "a member", "a viewer".
fn with_article(role: SpaceRole) -> &'static str {
    match role {
        SpaceRole::Viewer => "a viewer",
        SpaceRole::Member => "a member",
        SpaceRole::Owner => "an owner",
    }
}

fn members_text(count: u32) -> String {
    if count == 1 {
        "1 member".to_owned()
    } else {
        format!("{count} members")
    }
}

/// What members see of a space job and what they never do (docs/SPACES.md has the table).
fn visibility_note() -> Markup {
    html! {
        p.muted {
            "A space job runs on the computer of whoever assigned it, under that computer's \
             rules. The space's members see its title, prompt, state, timeline, report, which \
             files changed and released evidence; never command output, file contents, diffs, \
             questions or secrets."
        }
    }
}

/// `/spaces`: the caller's spaces, by name, and a form for a new one.
pub async fn list(state: web::Data<AppState>, caller: Option<Caller>) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/spaces");
    };
    let spaces = match crate::spaces::list(&state.store, &caller.account.id).await {
        Ok(spaces) => spaces,
        Err(error) => return error_page(&caller, &error),
    };
    page(
        "Spaces",
        Some(&caller),
        html! {
            h1 { "Spaces" }
            p {
                "A space shares jobs with the people you invite. Each space job runs on the \
                 computer of whoever assigned it; the others see what it did."
            }
            @if spaces.is_empty() {
                p.muted { "You are in no space yet. Make one, or open an invitation link someone sent you." }
            } @else {
                ul.spaces {
                    @for space in &spaces { li { (space_card(space)) } }
                }
            }
            section.card #new-space aria-labelledby="new-space-heading" {
                h2 #new-space-heading { "New space" }
                form.stack data-api="/api/spaces" data-redirect="/spaces/{id}"
                    data-fields=r#"{"name":"Name"}"# {
                    label { "Name"
                        input type="text" name="name" maxlength=(MAX_SPACE_NAME_CHARS) placeholder="Web team" required; }
                    p.error role="alert" {}
                    button type="submit" { "Make the space" }
                }
            }
        },
    )
}

fn space_card(space: &Space) -> Markup {
    html! {
        a.card.card-link href={ "/spaces/" (space.id) } data-space=(space.id) {
            div.row { strong { (space.name) } span.badge { (space.role.as_str()) } }
            div.muted { (members_text(space.members)) }
        }
    }
}

/// Everything `/spaces/{id}` shows.
struct SpacePage {
    detail: SpaceDetail,
    jobs: Vec<SpaceJobSummary>,
    /// Owners only.
    ledger: Vec<SpaceLedgerEntry>,
}

async fn load(
    state: &AppState,
    caller: &Caller,
    space_id: &SpaceId,
) -> Result<SpacePage, ApiError> {
    let account_id = &caller.account.id;
    let detail = crate::spaces::detail(&state.store, account_id, space_id).await?;
    let jobs = crate::jobs::in_space(&state.store, account_id, space_id).await?;
    let ledger = if detail.space.role == SpaceRole::Owner {
        crate::spaces::ledger(&state.store, account_id, space_id).await?
    } else {
        Vec::new()
    };
    Ok(SpacePage {
        detail,
        jobs,
        ledger,
    })
}

/// `/spaces/{id}`: a space the caller is in, else the 404 page (as for another account's
/// objects).
pub async fn show(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    path: web::Path<String>,
) -> HttpResponse {
    let parsed = SpaceId::parse(&path.into_inner());
    let Some(caller) = caller else {
        return signin_redirect(&match &parsed {
            Ok(id) => format!("/spaces/{id}"),
            Err(_) => "/spaces".to_owned(),
        });
    };
    let Ok(space_id) = parsed else {
        return error_page(&caller, &ApiError::not_found("space"));
    };
    match load(&state, &caller, &space_id).await {
        Ok(found) => {
            let now = state.store.clock().now();
            let title = found.detail.space.name.clone();
            page(&title, Some(&caller), space_view(&found, &caller, now))
        }
        Err(error) => error_page(&caller, &error),
    }
}

fn space_view(found: &SpacePage, caller: &Caller, now: DateTime<Utc>) -> Markup {
    let space = &found.detail.space;
    let owner = space.role == SpaceRole::Owner;
    html! {
        section.space data-space=(space.id) {
            h1 { (space.name) }
            p.muted data-field="role" {
                "You are " (with_article(space.role)) " here · " (members_text(space.members))
            }
            nav.section-links aria-label="This space" {
                a href="#jobs-heading" { "Jobs" }
                a href="#members-heading" { "Members" }
                @if owner {
                    a href="#invite-heading" { "Invite" }
                    a href="#ledger-heading" { "Ledger" }
                }
            }
            (jobs_section(space, &found.jobs, now))
            (members_section(&found.detail, caller, now))
            @if owner {
                (invite_section(space, &found.detail.invitations))
                (ledger_section(&found.ledger, &found.detail.members, now))
            }
        }
        script src="/assets/spaces.js" defer {}
    }
}

/// The space's jobs, newest first; `assets/spaces.js` keeps the list current from
/// `GET /api/spaces/{id}/events`, building the same rows with DOM calls.
fn jobs_section(space: &Space, jobs: &[SpaceJobSummary], now: DateTime<Utc>) -> Markup {
    html! {
        section.space-jobs aria-labelledby="jobs-heading" {
            div.row {
                h2 #jobs-heading { "Jobs" }
                @if space.role.assigns() {
                    a.action href={ "/assign?space=" (space.id) } { "Assign a job in this space" }
                }
            }
            (visibility_note())
            ul.space-job-list #space-jobs data-space-events={ "/api/spaces/" (space.id) "/events" } {
                @for job in jobs { (job_row(job, now)) }
            }
            p.muted #space-jobs-empty hidden[!jobs.is_empty()] { "No jobs in this space yet." }
            p.muted #space-jobs-status role="status" {}
        }
    }
}

/// One job: its title (linked), state, who assigned it, where and when. `spaces.js`'s
/// `jobRow` builds the same.
fn job_row(job: &SpaceJobSummary, now: DateTime<Utc>) -> Markup {
    html! {
        li data-job=(job.id) {
            a.card.card-link href={ "/jobs/" (job.id) } {
                div.row {
                    strong data-field="title" { (job.title) }
                    span data-field="state" class={ "badge state-" (job.state.as_str()) } { (job.state.as_str()) }
                }
                div.muted {
                    "by " span data-field="owner" { (job.owner_name) }
                    " on " span data-field="computer" { (job.computer_name) }
                    " · " (when(job.created_at, now))
                }
            }
        }
    }
}

fn members_section(detail: &SpaceDetail, caller: &Caller, now: DateTime<Utc>) -> Markup {
    let space = &detail.space;
    let owner = space.role == SpaceRole::Owner;
    html! {
        section.card #members aria-labelledby="members-heading" {
            h2 #members-heading { "Members" }
            table.members {
                thead { tr { th { "Name" } th { "Role" } th { "Joined" } th { span.visually-hidden { "Actions" } } } }
                tbody {
                    @for member in &detail.members {
                        (member_row(space, member, &caller.account.id, owner, now))
                    }
                }
            }
        }
    }
}

fn member_row(
    space: &Space,
    member: &SpaceMember,
    me: &AccountId,
    owner: bool,
    now: DateTime<Utc>,
) -> Markup {
    let mine = &member.account_id == me;
    let url = format!("/api/spaces/{}/members/{}", space.id, member.account_id);
    html! {
        tr data-member=(member.account_id) {
            td data-label="Name" { (member.name) @if mine { " " span.badge { "you" } } }
            td data-label="Role" {
                @if owner {
                    form.role-form data-api=(url) data-method="PATCH" {
                        select name="role" aria-label={ "Role of " (member.name) } {
                            @for role in [SpaceRole::Owner, SpaceRole::Member, SpaceRole::Viewer] {
                                option value=(role.as_str()) selected[role == member.role] { (role.as_str()) }
                            }
                        }
                        button.secondary type="submit" aria-label={ "Change the role of " (member.name) } { "Change" }
                        span.error role="alert" {}
                    }
                } @else {
                    (member.role.as_str())
                }
            }
            td data-label="Joined" { (when(member.joined_at, now)) }
            td.member-actions {
                @if mine {
                    form data-api=(url) data-method="DELETE" data-redirect="/spaces"
                        data-confirm={ "Leave " (space.name) "? You stop seeing its jobs, and your queued jobs in it are cancelled." } {
                        button.danger type="submit" { "Leave" }
                        span.error role="alert" {}
                    }
                } @else if owner {
                    form data-api=(url) data-method="DELETE"
                        data-confirm={ "Remove " (member.name) " from " (space.name) "? Their queued jobs in it are cancelled." } {
                        button.danger type="submit" aria-label={ "Remove " (member.name) } { "Remove" }
                        span.error role="alert" {}
                    }
                }
            }
        }
    }
}

/// Owners: a new single-use link (shown this once by `spaces.js`), and the links still
/// waiting for someone.
fn invite_section(space: &Space, pending: &[PendingInvitation]) -> Markup {
    html! {
        section.card #invite aria-labelledby="invite-heading" {
            h2 #invite-heading { "Invite" }
            p.muted {
                "A link works once, for " (INVITATION_DAYS) " days. Anyone with it can join with \
                 its role, so send it only to the person you mean."
            }
            form.stack data-invite={ "/api/spaces/" (space.id) "/invitations" } {
                label { "Role"
                    select name="role" aria-describedby="invite-roles" {
                        @for role in [SpaceRole::Member, SpaceRole::Viewer, SpaceRole::Owner] {
                            option value=(role.as_str()) { (role.as_str()) }
                        }
                    }
                }
                ul.muted.small #invite-roles {
                    @for role in [SpaceRole::Member, SpaceRole::Viewer, SpaceRole::Owner] {
                        li { strong { (role.as_str()) } ": " (role_meaning(role)) }
                    }
                }
                p.error role="alert" {}
                button type="submit" { "Create invitation link" }
            }
            div.invitation-made #invitation-made hidden {
                p { strong { "Shown this once: copy it now." } }
                div.copy-row {
                    input #invitation-link type="text" readonly aria-label="Invitation link";
                    button.secondary type="button" data-copy="invitation-link" { "Copy" }
                }
                p.muted #invitation-expiry {}
                p.muted #invitation-copied role="status" {}
            }
            h3 #pending-heading { "Waiting invitations" }
            ul.pending-invitations #pending-invitations aria-labelledby="pending-heading" {
                @for invitation in pending {
                    li data-invitation=(invitation.id) {
                        (invitation.role.as_str()) " · made by " (invitation.invited_by)
                        " · works until " (until(invitation.expires_at)) " "
                        button.secondary.small type="button"
                            data-revoke={ "/api/spaces/" (space.id) "/invitations/" (invitation.id) } { "Revoke" }
                    }
                }
            }
            p.muted #pending-revoke-error role="alert" {}
            p.muted #pending-none hidden[!pending.is_empty()] { "None." }
        }
    }
}

/// A moment ahead, as a date in the browser's zone (app.js rewrites `data-local`).
fn until(at: DateTime<Utc>) -> Markup {
    let utc = at.format("%Y-%m-%d %H:%M UTC").to_string();
    html! {
        time datetime=(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) title=(utc) data-local { (utc) }
    }
}

/// Owners: who did what in the space, newest first.
fn ledger_section(
    ledger: &[SpaceLedgerEntry],
    members: &[SpaceMember],
    now: DateTime<Utc>,
) -> Markup {
    let names: HashMap<&str, &str> = members
        .iter()
        .map(|member| (member.account_id.as_str(), member.name.as_str()))
        .collect();
    html! {
        section.card #ledger aria-labelledby="ledger-heading" {
            h2 #ledger-heading { "Ledger" }
            @if ledger.is_empty() {
                p.muted { "Nothing yet." }
            } @else {
                table.space-ledger {
                    thead { tr { th { "When" } th { "Who" } th { "What" } } }
                    tbody {
                        @for entry in ledger {
                            tr data-kind=(entry.kind) {
                                td data-label="When" { (when(entry.at, now)) }
                                td data-label="Who" { (entry.actor_name) }
                                td data-label="What" { (ledger_words(entry, &names)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A ledger line in words: "made Ann an owner", "assigned Fix the build".
fn ledger_words(entry: &SpaceLedgerEntry, names: &HashMap<&str, &str>) -> Markup {
    let detail = entry.detail.as_deref().unwrap_or_default();
    let person = || {
        entry
            .subject
            .as_deref()
            .and_then(|id| names.get(id).copied())
            .or(entry.subject_name.as_deref())
            .unwrap_or("someone")
    };
    let role = SpaceRole::parse(detail).map(with_article);
    html! {
        @match entry.kind.as_str() {
            "space.created" => { "made the space " (detail) }
            "invitation.created" => {
                "made an invitation link" @if let Some(role) = role { " for " (role) }
            }
            "invitation.revoked" => { "revoked an invitation link" }
            "member.joined" => { "joined" @if let Some(role) = role { " as " (role) } }
            "member.left" => { "left" }
            "member.removed" => { "removed " (person()) }
            "member.role_changed" => {
                "made " (person()) @if let Some(role) = role { " " (role) }
            }
            "job.created" => {
                "assigned "
                @match &entry.subject {
                    Some(job) => a href={ "/jobs/" (job) } { (detail) },
                    None => (detail),
                }
            }
            other => { code { (other) } @if !detail.is_empty() { " " (detail) } }
        }
    }
}

/// `/invitations`: an invitation link opened. The secret is in the fragment: signed in,
/// `spaces.js` asks what it joins and offers Accept; signed out, it keeps the secret in
/// this tab's `sessionStorage` while the person signs in or up and comes back here.
pub async fn invitation(caller: Option<Caller>) -> HttpResponse {
    let body = match &caller {
        Some(_) => html! {
            h1 { "Invitation" }
            section.card #invitation data-invitation-page {
                p #invitation-status role="status" { "Reading the invitation…" }
                div #invitation-offer hidden {
                    p #invitation-text {}
                    p.muted #invitation-role {}
                    p.muted #invitation-expires {}
                    div.row {
                        button type="button" data-accept { "Accept" }
                        a href="/spaces" { "Not now" }
                    }
                    p.error role="alert" {}
                }
                noscript { p { "Opening an invitation needs JavaScript." } }
            }
            script src="/assets/spaces.js" defer {}
        },
        None => html! {
            h1 { "Invitation" }
            section.card #invitation data-invitation-signed-out {
                p { "Someone invited you to a space on Tether. Sign in, or create an account, to see it and accept." }
                div.row {
                    a href="/signin?next=/invitations" { "Sign in" }
                    a href="/signup?next=/invitations" { "Create an account" }
                }
                p.muted { "The invitation waits in this tab while you do." }
            }
            script src="/assets/spaces.js" defer {}
        },
    };
    page("Invitation", caller.as_ref(), body)
}
