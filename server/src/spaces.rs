//! Shared spaces: who is in a space and as what, single-use invitations, and the space's
//! own ledger. What a member may see of a space job is `jobs::shared_view`'s.
//!
//! **Invariant:** a space the caller is not in is `not_found`, exactly like another
//! account's object; a role too small for the action is `forbidden`. Every change to a
//! space's members first locks the space's row, so two changes never both see "another
//! owner is left".
//!
//! **Invariant:** an invitation's secret is stored only as its SHA-256; the link works once
//! ([`accept`] marks it used in the statement that checks it) and for
//! [`INVITATION_DAYS`] days.

use tether_protocol::auth::Me;
use tether_protocol::spaces::{
    CreatedInvitation, InvitationPreview, PendingInvitation, Space, SpaceDetail, SpaceLedgerEntry,
    SpaceMember, SpaceRole, INVITATION_DAYS, MAX_SPACES_PER_ACCOUNT, MAX_SPACE_MEMBERS,
    MAX_SPACE_NAME_CHARS,
};
use tether_protocol::{AccountId, Code, InvitationId, SpaceId};

use crate::accounts::parse_name;
use crate::clock::{secs, to_time, Millis};
use crate::credentials;
use crate::error::ApiError;
use crate::store::{on_read, on_reads, on_tx, stored_id, ReadSource, Store, Tx};

/// Prefix of an invitation link's secret.
pub const INVITATION_PREFIX: &str = "tsi_";
/// Most ledger lines one read answers (newest first).
pub const LEDGER_LIMIT: i64 = 500;

/// What a space's ledger line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceEvent {
    Created,
    InvitationCreated,
    InvitationRevoked,
    MemberJoined,
    MemberRemoved,
    MemberLeft,
    RoleChanged,
    JobCreated,
}

impl SpaceEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            SpaceEvent::Created => "space.created",
            SpaceEvent::InvitationCreated => "invitation.created",
            SpaceEvent::InvitationRevoked => "invitation.revoked",
            SpaceEvent::MemberJoined => "member.joined",
            SpaceEvent::MemberRemoved => "member.removed",
            SpaceEvent::MemberLeft => "member.left",
            SpaceEvent::RoleChanged => "member.role_changed",
            SpaceEvent::JobCreated => "job.created",
        }
    }
}

/// A checked space name.
///
/// # Errors
/// 422 `invalid_field` naming `name`.
pub fn check_name(raw: &str) -> Result<String, ApiError> {
    parse_name("name", raw, MAX_SPACE_NAME_CHARS)
}

/// Makes a space with the caller as its one owner.
///
/// # Errors
/// 409 `invalid_state` past [`MAX_SPACES_PER_ACCOUNT`], or a database error.
pub async fn create(
    store: &Store,
    account_id: &AccountId,
    name: String,
) -> Result<Space, ApiError> {
    let id = SpaceId::generate();
    let now = store.now();
    let mut tx = store.begin().await?;
    tx.lock_account(account_id).await?;
    let count = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM space_members WHERE account_id = $1"
    )
    .bind(account_id.as_str())
    .fetch_one(conn)
    .await)?;
    if count >= MAX_SPACES_PER_ACCOUNT as i64 {
        return Err(ApiError::new(
            Code::InvalidState,
            format!("An account can be in at most {MAX_SPACES_PER_ACCOUNT} spaces."),
        ));
    }
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO spaces (id, name, created_by, created_at) VALUES ($1, $2, $3, $4)"
    )
    .bind(id.as_str())
    .bind(&name)
    .bind(account_id.as_str())
    .bind(now)
    .execute(conn)
    .await
    .map(drop))?;
    insert_member(&mut tx, &id, account_id, SpaceRole::Owner, now).await?;
    record(
        &mut tx,
        &id,
        account_id,
        now,
        SpaceEvent::Created,
        None,
        Some(&name),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(space_id = %id, "space made");
    Ok(Space {
        id,
        name,
        role: SpaceRole::Owner,
        members: 1,
        created_at: to_time(now),
    })
}

#[derive(sqlx::FromRow)]
struct SpaceRow {
    id: String,
    name: String,
    role: String,
    members: i64,
    created_at: i64,
}

impl SpaceRow {
    fn into_space(self) -> Result<Space, ApiError> {
        Ok(Space {
            id: stored_id(self.id)?,
            name: self.name,
            role: stored_role(&self.role)?,
            members: u32::try_from(self.members).unwrap_or(u32::MAX),
            created_at: to_time(self.created_at),
        })
    }
}

const SPACE_SELECT: &str = "SELECT s.id, s.name, m.role, s.created_at, \
    (SELECT COUNT(*) FROM space_members c WHERE c.space_id = s.id) AS members \
    FROM spaces s JOIN space_members m ON m.space_id = s.id AND m.account_id = $1";

/// The caller's spaces, by name.
///
/// # Errors
/// A database error.
pub async fn list(store: &Store, account_id: &AccountId) -> Result<Vec<Space>, ApiError> {
    let sql = format!("{SPACE_SELECT} ORDER BY s.name, s.id");
    let rows = on_read!(store, |pool| sqlx::query_as::<_, SpaceRow>(&sql)
        .bind(account_id.as_str())
        .fetch_all(pool)
        .await)?;
    rows.into_iter().map(SpaceRow::into_space).collect()
}

/// One space of the caller, or 404.
///
/// # Errors
/// 404 when the caller is not in it, or a database error.
pub(crate) async fn get(
    mut source: impl ReadSource,
    account_id: &AccountId,
    space_id: &SpaceId,
) -> Result<Space, ApiError> {
    let sql = format!("{SPACE_SELECT} WHERE s.id = $2");
    let row = on_reads!(source, |pool| sqlx::query_as::<_, SpaceRow>(&sql)
        .bind(account_id.as_str())
        .bind(space_id.as_str())
        .fetch_optional(pool)
        .await)?;
    row.ok_or_else(|| ApiError::not_found("space"))?
        .into_space()
}

/// The caller's role in the space, if at least `least`.
///
/// # Errors
/// 404 when the caller is not in the space, 403 `forbidden` when its role is smaller.
pub(crate) async fn require(
    mut source: impl ReadSource,
    account_id: &AccountId,
    space_id: &SpaceId,
    least: SpaceRole,
) -> Result<SpaceRole, ApiError> {
    let role = on_reads!(source, |pool| sqlx::query_scalar::<_, String>(
        "SELECT role FROM space_members WHERE space_id = $1 AND account_id = $2"
    )
    .bind(space_id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(pool)
    .await)?;
    at_least(role.as_deref(), least)
}

/// Like [`require`], in a write transaction, holding the caller's membership row until it
/// ends: a removal waits for the job being assigned, and that job sees the removal.
///
/// # Errors
/// As [`require`].
pub(crate) async fn require_in(
    tx: &mut Tx,
    account_id: &AccountId,
    space_id: &SpaceId,
    least: SpaceRole,
) -> Result<SpaceRole, ApiError> {
    let sql = format!(
        "SELECT role FROM space_members WHERE space_id = $1 AND account_id = $2{}",
        tx.lock_clause()
    );
    let role = on_tx!(tx, |conn| sqlx::query_scalar::<_, String>(&sql)
        .bind(space_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(conn)
        .await)?;
    at_least(role.as_deref(), least)
}

/// The stored role, if at least `least`: 404 when there is none, 403 when it is smaller.
fn at_least(stored: Option<&str>, least: SpaceRole) -> Result<SpaceRole, ApiError> {
    let role = stored_role(stored.ok_or_else(|| ApiError::not_found("space"))?)?;
    if role < least {
        return Err(ApiError::new(
            Code::Forbidden,
            format!(
                "This needs the {} role in the space; yours is {}.",
                least.as_str(),
                role.as_str()
            ),
        ));
    }
    Ok(role)
}

/// The space, its members and, for its owners, the invitations still open.
///
/// # Errors
/// 404 when the caller is not in it, or a database error.
pub async fn detail(
    store: &Store,
    account_id: &AccountId,
    space_id: &SpaceId,
) -> Result<SpaceDetail, ApiError> {
    let mut reads = store.hold_reader().await?;
    let space = get(&mut reads, account_id, space_id).await?;
    let members = members(&mut reads, space_id).await?;
    let invitations = if space.role == SpaceRole::Owner {
        open_invitations(&mut reads, space_id).await?
    } else {
        Vec::new()
    };
    Ok(SpaceDetail {
        space,
        members,
        invitations,
    })
}

#[derive(sqlx::FromRow)]
struct MemberRow {
    account_id: String,
    name: String,
    role: String,
    joined_at: i64,
}

async fn members(
    mut source: impl ReadSource,
    space_id: &SpaceId,
) -> Result<Vec<SpaceMember>, ApiError> {
    let rows = on_reads!(source, |pool| sqlx::query_as::<_, MemberRow>(
        "SELECT m.account_id, a.name, m.role, m.joined_at FROM space_members m \
         JOIN accounts a ON a.id = m.account_id WHERE m.space_id = $1 \
         ORDER BY m.joined_at, m.account_id"
    )
    .bind(space_id.as_str())
    .fetch_all(pool)
    .await)?;
    rows.into_iter()
        .map(|row| {
            Ok(SpaceMember {
                account_id: stored_id(row.account_id)?,
                name: row.name,
                role: stored_role(&row.role)?,
                joined_at: to_time(row.joined_at),
            })
        })
        .collect()
}

#[derive(sqlx::FromRow)]
struct InvitationRow {
    id: String,
    role: String,
    invited_by: String,
    expires_at: i64,
}

async fn open_invitations(
    mut source: impl ReadSource,
    space_id: &SpaceId,
) -> Result<Vec<PendingInvitation>, ApiError> {
    let now = source.now();
    let rows = on_reads!(source, |pool| sqlx::query_as::<_, InvitationRow>(
        "SELECT i.id, i.role, a.name AS invited_by, i.expires_at FROM space_invitations i \
         JOIN accounts a ON a.id = i.invited_by \
         WHERE i.space_id = $1 AND i.used_at IS NULL AND i.expires_at > $2 \
         ORDER BY i.created_at DESC"
    )
    .bind(space_id.as_str())
    .bind(now)
    .fetch_all(pool)
    .await)?;
    rows.into_iter()
        .map(|row| {
            Ok(PendingInvitation {
                id: stored_id(row.id)?,
                role: stored_role(&row.role)?,
                invited_by: row.invited_by,
                expires_at: to_time(row.expires_at),
            })
        })
        .collect()
}

/// Makes a single-use invitation link (space owners only). `base` is the server's public
/// address, for the link.
///
/// # Errors
/// 404 / 403 as [`require`], or a database error.
pub async fn invite(
    store: &Store,
    account_id: &AccountId,
    space_id: &SpaceId,
    role: SpaceRole,
    base: &str,
) -> Result<CreatedInvitation, ApiError> {
    let id = InvitationId::generate();
    let token = credentials::random_token(INVITATION_PREFIX);
    let now = store.now();
    let expires_at = now + secs(INVITATION_DAYS * 24 * 3600);
    let mut tx = store.begin().await?;
    lock_space(&mut tx, space_id).await?;
    require_in(&mut tx, account_id, space_id, SpaceRole::Owner).await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO space_invitations (id, space_id, token_hash, role, invited_by, created_at, \
         expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    )
    .bind(id.as_str())
    .bind(space_id.as_str())
    .bind(credentials::hash_token(&token))
    .bind(role.as_str())
    .bind(account_id.as_str())
    .bind(now)
    .bind(expires_at)
    .execute(conn)
    .await
    .map(drop))?;
    let event = SpaceEvent::InvitationCreated;
    record(
        &mut tx,
        space_id,
        account_id,
        now,
        event,
        None,
        Some(role.as_str()),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(space_id = %space_id, invitation_id = %id, "space invitation made");
    Ok(CreatedInvitation {
        id,
        role,
        link: format!("{}/invitations#{token}", base.trim_end_matches('/')),
        token,
        expires_at: to_time(expires_at),
    })
}

/// Ends an invitation before anyone used it (space owners only): its link is gone from now.
///
/// # Errors
/// 404 / 403 as [`require`], 404 for an invitation of another space, used or expired.
pub async fn revoke_invitation(
    store: &Store,
    account_id: &AccountId,
    space_id: &SpaceId,
    invitation_id: &InvitationId,
) -> Result<(), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    lock_space(&mut tx, space_id).await?;
    require_in(&mut tx, account_id, space_id, SpaceRole::Owner).await?;
    // Expired now: the link answers as any link past its time.
    let ended = on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE space_invitations SET expires_at = $3 \
         WHERE id = $1 AND space_id = $2 AND used_at IS NULL AND expires_at > $3"
    )
    .bind(invitation_id.as_str())
    .bind(space_id.as_str())
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if ended == 0 {
        return Err(ApiError::not_found("invitation"));
    }
    let event = SpaceEvent::InvitationRevoked;
    let subject = Some(invitation_id.as_str());
    record(&mut tx, space_id, account_id, now, event, subject, None).await?;
    tx.commit().await?;
    tracing::info!(space_id = %space_id, invitation_id = %invitation_id, "space invitation revoked");
    Ok(())
}

#[derive(sqlx::FromRow)]
struct PreviewRow {
    space_id: String,
    space_name: String,
    invited_by: String,
    role: String,
    expires_at: i64,
    used_at: Option<i64>,
}

/// What an invitation link would join, for the person about to accept it.
///
/// # Errors
/// 404 for an unknown link, 410 `invitation_gone` for a used or expired one.
pub async fn preview(store: &Store, token: &str) -> Result<InvitationPreview, ApiError> {
    let row = on_read!(store, |pool| sqlx::query_as::<_, PreviewRow>(
        "SELECT i.space_id, s.name AS space_name, a.name AS invited_by, i.role, i.expires_at, \
         i.used_at FROM space_invitations i JOIN spaces s ON s.id = i.space_id \
         JOIN accounts a ON a.id = i.invited_by WHERE i.token_hash = $1"
    )
    .bind(credentials::hash_token(token))
    .fetch_optional(pool)
    .await)?;
    let row = row.ok_or_else(|| ApiError::not_found("invitation"))?;
    if row.used_at.is_some() || row.expires_at <= store.now() {
        return Err(gone());
    }
    Ok(InvitationPreview {
        space_id: stored_id(row.space_id)?,
        space_name: row.space_name,
        invited_by: row.invited_by,
        role: stored_role(&row.role)?,
        expires_at: to_time(row.expires_at),
    })
}

fn gone() -> ApiError {
    ApiError::new(
        Code::InvitationGone,
        "This invitation was used already, revoked or has expired; ask for a new link.",
    )
}

#[derive(sqlx::FromRow)]
struct TakenRow {
    space_id: String,
    role: String,
}

/// Joins the space of an invitation link with its role; the link is used up.
///
/// # Errors
/// 404 for an unknown link, 410 `invitation_gone` for a used or expired one, 409
/// `already_member` (the link stays unused), 409 `invalid_state` when the space is full.
pub async fn accept(store: &Store, me: &Me, token: &str) -> Result<Space, ApiError> {
    let account_id = &me.account.id;
    let token_hash = credentials::hash_token(token);
    let now = store.now();
    let mut tx = store.begin().await?;
    let sql = format!(
        "SELECT space_id, role FROM space_invitations WHERE token_hash = $1{}",
        tx.lock_clause()
    );
    let found = on_tx!(&mut tx, |conn| sqlx::query_as::<_, TakenRow>(&sql)
        .bind(&token_hash)
        .fetch_optional(conn)
        .await)?;
    let found = found.ok_or_else(|| ApiError::not_found("invitation"))?;
    let space_id: SpaceId = stored_id(found.space_id)?;
    lock_space(&mut tx, &space_id).await?;
    let taken = on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE space_invitations SET used_at = $2, used_by = $3 \
         WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2"
    )
    .bind(&token_hash)
    .bind(now)
    .bind(account_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if taken == 0 {
        return Err(gone());
    }
    let already = role_in(&mut tx, account_id, &space_id).await?;
    if already.is_some() {
        return Err(ApiError::new(
            Code::AlreadyMember,
            "You are in this space already; the link stays unused for someone else.",
        ));
    }
    if count_members(&mut tx, &space_id).await? >= MAX_SPACE_MEMBERS as i64 {
        return Err(ApiError::new(
            Code::InvalidState,
            format!("A space has at most {MAX_SPACE_MEMBERS} members."),
        ));
    }
    let role = stored_role(&found.role)?;
    insert_member(&mut tx, &space_id, account_id, role, now).await?;
    let event = SpaceEvent::MemberJoined;
    let subject = Some(account_id.as_str());
    record(
        &mut tx,
        &space_id,
        account_id,
        now,
        event,
        subject,
        Some(role.as_str()),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(space_id = %space_id, "space joined");
    get(store, account_id, &space_id).await
}

/// Gives a member another role (space owners only).
///
/// # Errors
/// 404 for a space the caller is not in or an account not in it, 403 below owner, 409
/// `last_owner` when it would leave the space without an owner.
pub async fn set_role(
    store: &Store,
    actor: &AccountId,
    space_id: &SpaceId,
    member: &AccountId,
    role: SpaceRole,
) -> Result<SpaceMember, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    lock_space(&mut tx, space_id).await?;
    require_in(&mut tx, actor, space_id, SpaceRole::Owner).await?;
    let before = role_in(&mut tx, member, space_id)
        .await?
        .ok_or_else(|| ApiError::not_found("member"))?;
    if before == SpaceRole::Owner && role != SpaceRole::Owner {
        check_other_owner(&mut tx, space_id, member).await?;
    }
    on_tx!(&mut tx, |conn| sqlx::query(
        "UPDATE space_members SET role = $3 WHERE space_id = $1 AND account_id = $2"
    )
    .bind(space_id.as_str())
    .bind(member.as_str())
    .bind(role.as_str())
    .execute(conn)
    .await
    .map(drop))?;
    let event = SpaceEvent::RoleChanged;
    let subject = Some(member.as_str());
    record(
        &mut tx,
        space_id,
        actor,
        now,
        event,
        subject,
        Some(role.as_str()),
    )
    .await?;
    tx.commit().await?;
    let all = members(store, space_id).await?;
    all.into_iter()
        .find(|found| &found.account_id == member)
        .ok_or_else(|| ApiError::not_found("member"))
}

/// Takes a member out of the space: an owner removes anyone, anyone removes themselves
/// (leaves). The member's access ends with the commit.
///
/// # Errors
/// 404 for a space the caller is not in or an account not in it, 403 for a non-owner
/// removing someone else, 409 `last_owner` for the space's last owner.
pub async fn remove(
    store: &Store,
    actor: &AccountId,
    space_id: &SpaceId,
    member: &AccountId,
) -> Result<(), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    lock_space(&mut tx, space_id).await?;
    let leaving = actor == member;
    let least = if leaving {
        SpaceRole::Viewer
    } else {
        SpaceRole::Owner
    };
    require_in(&mut tx, actor, space_id, least).await?;
    let role = role_in(&mut tx, member, space_id)
        .await?
        .ok_or_else(|| ApiError::not_found("member"))?;
    if role == SpaceRole::Owner {
        check_other_owner(&mut tx, space_id, member).await?;
    }
    on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM space_members WHERE space_id = $1 AND account_id = $2"
    )
    .bind(space_id.as_str())
    .bind(member.as_str())
    .execute(conn)
    .await
    .map(drop))?;
    let event = if leaving {
        SpaceEvent::MemberLeft
    } else {
        SpaceEvent::MemberRemoved
    };
    record(
        &mut tx,
        space_id,
        actor,
        now,
        event,
        Some(member.as_str()),
        None,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(space_id = %space_id, leaving, "space member removed");
    Ok(())
}

#[derive(sqlx::FromRow)]
struct LedgerRow {
    at: i64,
    kind: String,
    actor_id: String,
    actor_name: String,
    subject: Option<String>,
    subject_name: Option<String>,
    detail: Option<String>,
}

/// The space's ledger, newest first (space owners only).
///
/// # Errors
/// 404 / 403 as [`require`], or a database error.
pub async fn ledger(
    store: &Store,
    account_id: &AccountId,
    space_id: &SpaceId,
) -> Result<Vec<SpaceLedgerEntry>, ApiError> {
    let mut reads = store.hold_reader().await?;
    require(&mut reads, account_id, space_id, SpaceRole::Owner).await?;
    let rows = on_reads!(reads, |pool| sqlx::query_as::<_, LedgerRow>(
        "SELECT l.at, l.kind, l.actor_id, a.name AS actor_name, l.subject, \
         s.name AS subject_name, l.detail FROM space_ledger l \
         JOIN accounts a ON a.id = l.actor_id LEFT JOIN accounts s ON s.id = l.subject \
         WHERE l.space_id = $1 ORDER BY l.at DESC, l.id DESC LIMIT $2"
    )
    .bind(space_id.as_str())
    .bind(LEDGER_LIMIT)
    .fetch_all(pool)
    .await)?;
    rows.into_iter()
        .map(|row| {
            Ok(SpaceLedgerEntry {
                at: to_time(row.at),
                kind: row.kind,
                actor: stored_id(row.actor_id)?,
                actor_name: row.actor_name,
                subject: row.subject,
                subject_name: row.subject_name,
                detail: row.detail,
            })
        })
        .collect()
}

/// Writes a line of the space's ledger in the caller's transaction.
///
/// # Errors
/// A database error.
pub(crate) async fn record(
    tx: &mut Tx,
    space_id: &SpaceId,
    actor: &AccountId,
    at: Millis,
    event: SpaceEvent,
    subject: Option<&str>,
    detail: Option<&str>,
) -> Result<(), ApiError> {
    // Time-ordered like every other id.
    let id = InvitationId::generate().to_string();
    on_tx!(tx, |conn| sqlx::query(
        "INSERT INTO space_ledger (id, space_id, at, kind, actor_id, subject, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    )
    .bind(&id)
    .bind(space_id.as_str())
    .bind(at)
    .bind(event.as_str())
    .bind(actor.as_str())
    .bind(subject)
    .bind(detail)
    .execute(conn)
    .await
    .map(drop))?;
    Ok(())
}

async fn lock_space(tx: &mut Tx, space_id: &SpaceId) -> Result<(), ApiError> {
    let sql = format!("SELECT id FROM spaces WHERE id = $1{}", tx.lock_clause());
    let found = on_tx!(tx, |conn| sqlx::query_scalar::<_, String>(&sql)
        .bind(space_id.as_str())
        .fetch_optional(conn)
        .await)?;
    found.map(drop).ok_or_else(|| ApiError::not_found("space"))
}

async fn role_in(
    tx: &mut Tx,
    account_id: &AccountId,
    space_id: &SpaceId,
) -> Result<Option<SpaceRole>, ApiError> {
    let role = on_tx!(tx, |conn| sqlx::query_scalar::<_, String>(
        "SELECT role FROM space_members WHERE space_id = $1 AND account_id = $2"
    )
    .bind(space_id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(conn)
    .await)?;
    role.as_deref().map(stored_role).transpose()
}

async fn count_members(tx: &mut Tx, space_id: &SpaceId) -> Result<i64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM space_members WHERE space_id = $1"
    )
    .bind(space_id.as_str())
    .fetch_one(conn)
    .await)?;
    Ok(count)
}

/// 409 `last_owner` unless an owner other than `member` is left.
async fn check_other_owner(
    tx: &mut Tx,
    space_id: &SpaceId,
    member: &AccountId,
) -> Result<(), ApiError> {
    let others = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM space_members WHERE space_id = $1 AND role = 'owner' \
         AND account_id <> $2"
    )
    .bind(space_id.as_str())
    .bind(member.as_str())
    .fetch_one(conn)
    .await)?;
    if others == 0 {
        return Err(ApiError::new(
            Code::LastOwner,
            "A space keeps at least one owner: make someone else owner first.",
        ));
    }
    Ok(())
}

async fn insert_member(
    tx: &mut Tx,
    space_id: &SpaceId,
    account_id: &AccountId,
    role: SpaceRole,
    now: Millis,
) -> Result<(), ApiError> {
    on_tx!(tx, |conn| sqlx::query(
        "INSERT INTO space_members (space_id, account_id, role, joined_at) VALUES ($1, $2, $3, $4)"
    )
    .bind(space_id.as_str())
    .bind(account_id.as_str())
    .bind(role.as_str())
    .bind(now)
    .execute(conn)
    .await
    .map(drop))?;
    Ok(())
}

fn stored_role(raw: &str) -> Result<SpaceRole, ApiError> {
    SpaceRole::parse(raw)
        .ok_or_else(|| ApiError::internal(&format_args!("stored space role {raw:?}")))
}
