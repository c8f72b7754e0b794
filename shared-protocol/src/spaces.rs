//! Shared spaces: accounts that see each other's space jobs.
//!
//! A space job runs on its creator's own computer under that computer's rules; the space's
//! members see what it did (title, prompt, state, the timeline's entries, the worker's
//! report, which files changed, delivery, released evidence) and never what belongs to the
//! computer's owner (file text, diffs, command output, decisions, secrets, held evidence,
//! the console). See docs/SPACES.md.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::{AccountId, InvitationId, JobId, SpaceId};

/// Longest space name, in characters.
pub const MAX_SPACE_NAME_CHARS: usize = 100;
/// How long an invitation link works, in days.
pub const INVITATION_DAYS: u64 = 7;
/// Most spaces one account may be in.
pub const MAX_SPACES_PER_ACCOUNT: usize = 100;
/// Most members of one space.
pub const MAX_SPACE_MEMBERS: usize = 500;

/// What an account may do in a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpaceRole {
    /// Sees the space's jobs.
    Viewer,
    /// Sees them, and assigns space jobs to its own computers.
    Member,
    /// A member who also manages members, roles and invitations and reads the ledger.
    Owner,
}

impl SpaceRole {
    pub fn as_str(self) -> &'static str {
        match self {
            SpaceRole::Viewer => "viewer",
            SpaceRole::Member => "member",
            SpaceRole::Owner => "owner",
        }
    }

    /// The role named `name`, if it is one.
    pub fn parse(name: &str) -> Option<SpaceRole> {
        match name {
            "viewer" => Some(SpaceRole::Viewer),
            "member" => Some(SpaceRole::Member),
            "owner" => Some(SpaceRole::Owner),
            _ => None,
        }
    }

    /// Whether this role may assign space jobs.
    pub fn assigns(self) -> bool {
        self >= SpaceRole::Member
    }
}

/// `POST /api/spaces`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewSpaceParams {
    pub name: String,
}

/// A space as one of its members sees it in a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Space {
    pub id: SpaceId,
    pub name: String,
    /// The caller's role here.
    pub role: SpaceRole,
    pub members: u32,
    pub created_at: DateTime<Utc>,
}

/// One member of a space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceMember {
    pub account_id: AccountId,
    pub name: String,
    pub role: SpaceRole,
    pub joined_at: DateTime<Utc>,
}

/// An invitation still waiting for someone, as the space's owners see it (never its link).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingInvitation {
    pub id: InvitationId,
    pub role: SpaceRole,
    pub invited_by: String,
    pub expires_at: DateTime<Utc>,
}

/// `GET /api/spaces/{id}`: the space, its members, and (for its owners) open invitations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceDetail {
    pub space: Space,
    pub members: Vec<SpaceMember>,
    #[serde(default)]
    pub invitations: Vec<PendingInvitation>,
}

/// `POST /api/spaces/{id}/invitations`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewInvitationParams {
    pub role: SpaceRole,
}

/// A new invitation: `link` is shown this once and works once, for [`INVITATION_DAYS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedInvitation {
    pub id: InvitationId,
    pub role: SpaceRole,
    /// `/invitations#{token}` on this server: the secret stays in the fragment, which no
    /// request carries.
    pub link: String,
    /// The secret part of the link.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// `GET /api/invitations/{token}`: what accepting would join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvitationPreview {
    pub space_id: SpaceId,
    pub space_name: String,
    pub invited_by: String,
    pub role: SpaceRole,
    pub expires_at: DateTime<Utc>,
}

/// `PATCH /api/spaces/{id}/members/{accountId}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoleParams {
    pub role: SpaceRole,
}

/// One line of a space's ledger: who did what, naming things, never their contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceLedgerEntry {
    pub at: DateTime<Utc>,
    /// `space.created`, `member.joined`, `member.removed`, `member.left`,
    /// `member.role_changed`, `invitation.created`, `invitation.revoked`, `job.created`.
    pub kind: String,
    /// The account that did it.
    pub actor: AccountId,
    pub actor_name: String,
    /// The account or job it was done to, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The name of the account it was done to (also once it left the space).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_name: Option<String>,
    /// More about it (a role, a job's title).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The `jobs` event of `GET /api/spaces/{id}/events`: the space's newest jobs, as lists
/// show them, whenever one of them changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceJobsEvent {
    pub jobs: Vec<SpaceJobSummary>,
}

/// A space job in a list: enough to find it, nothing only its owner sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpaceJobSummary {
    pub id: JobId,
    pub title: String,
    pub state: crate::jobs::JobState,
    /// Who assigned it.
    pub owner_name: String,
    /// The computer it runs on.
    pub computer_name: String,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_by_what_they_may_do() {
        assert!(SpaceRole::Owner > SpaceRole::Member && SpaceRole::Member > SpaceRole::Viewer);
        assert!(SpaceRole::Member.assigns() && !SpaceRole::Viewer.assigns());
        for role in [SpaceRole::Viewer, SpaceRole::Member, SpaceRole::Owner] {
            assert_eq!(SpaceRole::parse(role.as_str()), Some(role));
            let json = serde_json::to_value(role).unwrap_or_default();
            assert_eq!(json, role.as_str());
        }
        assert_eq!(SpaceRole::parse("admin"), None);
    }

    #[test]
    fn params_refuse_unknown_fields() {
        let extra = serde_json::json!({"name": "Team", "owner": "someone"});
        assert!(serde_json::from_value::<NewSpaceParams>(extra).is_err());
        let bad_role = serde_json::json!({"role": "admin"});
        assert!(serde_json::from_value::<NewInvitationParams>(bad_role).is_err());
    }
}
