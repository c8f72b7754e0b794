//! Space jobs on the job page: the space a job is in (the line naming it on its owner's
//! page), and what a member's page of someone else's job names besides the job (the
//! space, who assigned it, the computer). `jobs.rs` renders that page.

use maud::{html, Markup};
use tether_protocol::jobs::Job;
use tether_protocol::spaces::SpaceMember;
use tether_protocol::{AccountId, Code, SpaceId};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The space a job is in, as the caller may name it.
pub(super) struct SpaceLink {
    id: SpaceId,
    name: String,
}

/// The job's space, when it has one the caller is still in.
///
/// # Errors
/// A database error.
pub(super) async fn space_of(
    state: &AppState,
    account_id: &AccountId,
    job: &Job,
) -> Result<Option<SpaceLink>, ApiError> {
    let Some(space_id) = &job.space_id else {
        return Ok(None);
    };
    match crate::spaces::get(&state.store, account_id, space_id).await {
        Ok(space) => Ok(Some(SpaceLink {
            id: space.id,
            name: space.name,
        })),
        // Left since: the job is still the owner's, in no space they can open.
        Err(error) if error.code() == Code::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// "in SPACE", linked, for the header of a space job's page.
pub(super) fn space_line(space: Option<&SpaceLink>) -> Markup {
    html! {
        @if let Some(space) = space {
            span data-field="space" { "in " a href={ "/spaces/" (space.id) } { (space.name) } }
        }
    }
}

/// A member's view of a space job with what its page names besides it.
pub(super) struct MemberJob {
    pub job: Job,
    pub space: Option<SpaceLink>,
    /// Who assigned it, while they are in the space.
    pub owner_name: Option<String>,
    /// The computer it runs on (the owner's), while it is paired.
    pub computer: Option<String>,
}

/// Reads what a member's page shows besides the job: the space, the owner's name, the
/// computer's name.
///
/// # Errors
/// A database error.
pub(super) async fn load(
    state: &AppState,
    caller: &Caller,
    job: Job,
    owner: &AccountId,
) -> Result<MemberJob, ApiError> {
    let (space, members) = match &job.space_id {
        Some(space_id) => {
            match crate::spaces::detail(&state.store, &caller.account.id, space_id).await {
                Ok(detail) => (
                    Some(SpaceLink {
                        id: detail.space.id,
                        name: detail.space.name,
                    }),
                    detail.members,
                ),
                Err(error) if error.code() == Code::NotFound => (None, Vec::new()),
                Err(error) => return Err(error),
            }
        }
        None => (None, Vec::new()),
    };
    let owner_name = members
        .into_iter()
        .find(|member: &SpaceMember| &member.account_id == owner)
        .map(|member| member.name);
    let computer =
        match crate::devices::get(&state.store, owner, &job.device_id, &state.config).await {
            Ok(device) => Some(device.name),
            Err(error) if error.code() == Code::NotFound => None,
            Err(error) => return Err(error),
        };
    Ok(MemberJob {
        job,
        space,
        owner_name,
        computer,
    })
}
