//! Attachments: files a person gives a job's task (a screenshot of the bug, a log, a spec).
//!
//! Each file is uploaded on its own before the job exists (`POST /api/attachments`): its
//! bytes go to the blob store, its row here waits with `job_id` NULL. Creating the job takes
//! the uploads it names ([`choose`], [`attach`]) in the transaction that inserts it, and
//! lists their descriptions in the job's spec, so the claim carries them with no statement
//! of its own. A re-run copies the earlier job's rows (new ids, the same blob). An upload
//! no job took expires after [`UPLOAD_TTL_SECS`]; one its owner removed is gone for them at
//! once and swept with the expired ones an hour later ([`sweep`]).
//!
//! **Invariant:** only the job's owner and, under the job's lease, its device read an
//! attachment; another account's is `not_found` at every route.
//!
//! **Invariant:** a blob goes only when no attachment and no evidence row names its digest
//! and its file was not written or found again for [`UPLOAD_TTL_SECS`]. An upload writes
//! its row before its bytes take their place, so an upload of the same bytes in flight
//! never loses them.

use std::collections::HashSet;
use std::path::Path;

use serde_json::{json, Value};
use tether_protocol::attachments::{
    Attachment, MAX_ATTACHMENTS_PER_JOB, MAX_ATTACHMENT_BYTES, MAX_ATTACHMENT_BYTES_PER_JOB,
    UPLOAD_TTL_SECS,
};
use tether_protocol::credential_files::{credential_kind, CredentialKind};
use tether_protocol::jobs::JobState;
use tether_protocol::{AccountId, AttachmentId, Code, JobId, LeaseToken};

use crate::clock::{secs, Millis};
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::store::blobs::Blobs;
use crate::store::job_rows;
use crate::store::{on_read, on_tx, stored_id, Store, Tx};

/// Most uploads one account keeps waiting for a job.
pub const MAX_WAITING_UPLOADS: i64 = 100;

const COLUMNS: &str = "id, name, size, sha256, media_type";

/// A file name from the upload's name header: percent-decoded UTF-8, one file name (no
/// folder, every character visible), not a credential file.
///
/// # Errors
/// 400 `invalid_request` for a missing header, bad percent-encoding, or a name that is not
/// a file name; 422 `invalid_field` for a credential file.
pub fn parse_name(header: Option<&str>) -> Result<String, ApiError> {
    let raw = header.ok_or_else(|| {
        bad(format!(
            "This route needs the {} header: the file's name, percent-encoded.",
            tether_protocol::routes::ATTACHMENT_NAME_HEADER
        ))
    })?;
    let name =
        percent_decode(raw).ok_or_else(|| bad("The file name is not percent-encoded UTF-8."))?;
    if !super::evidence::is_file_name(&name) {
        return Err(bad(
            "The name must be a file name (at most 255 bytes, no folder, every character visible).",
        ));
    }
    if let Some(kind) = credential_kind(&name) {
        let why = match kind {
            CredentialKind::Environment => "environment files hold secrets and are never attached.",
            CredentialKind::CredentialFolder
            | CredentialKind::CredentialFile
            | CredentialKind::Key => "keys and credential files are never attached.",
        };
        return Err(ApiError::invalid_field("name", why));
    }
    Ok(name)
}

/// RFC 3986 percent-decoding into UTF-8; `None` for a malformed escape or invalid UTF-8.
pub(crate) fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            decoded.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// 413 for a file over [`MAX_ATTACHMENT_BYTES`].
pub fn too_large() -> ApiError {
    ApiError::new(
        Code::PayloadTooLarge,
        format!("An attached file is at most {MAX_ATTACHMENT_BYTES} bytes (25 MB)."),
    )
}

/// The account may upload one more file: it has fewer than [`MAX_WAITING_UPLOADS`] waiting.
/// Checked again when the upload is recorded; this read spares a refused upload its bytes.
///
/// # Errors
/// 409 `invalid_state` at the cap.
pub async fn check_room(store: &Store, account_id: &AccountId) -> Result<(), ApiError> {
    let cutoff = store.now() - secs(UPLOAD_TTL_SECS.unsigned_abs());
    let waiting = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(WAITING_COUNT)
        .bind(account_id.as_str())
        .bind(cutoff)
        .fetch_one(pool)
        .await)?;
    if waiting >= MAX_WAITING_UPLOADS {
        return Err(no_room());
    }
    Ok(())
}

const WAITING_COUNT: &str = "SELECT COUNT(*) FROM attachments WHERE account_id = $1 \
    AND job_id IS NULL AND dropped_at IS NULL AND created_at >= $2";

fn no_room() -> ApiError {
    ApiError::new(
        Code::InvalidState,
        format!(
            "{MAX_WAITING_UPLOADS} uploads are waiting for a job already; assign a job with \
             them, remove some, or wait: unused uploads expire an hour after they were sent."
        ),
    )
}

/// Records an upload whose bytes are in the blob store (digest `sha256`, type sniffed as
/// `media_type`), waiting for a job.
///
/// # Errors
/// 409 `invalid_state` at the account's cap of waiting uploads.
pub async fn record_upload(
    store: &Store,
    account_id: &AccountId,
    name: String,
    size: u64,
    sha256: String,
    media_type: &str,
) -> Result<Attachment, ApiError> {
    let now = store.now();
    let cutoff = now - secs(UPLOAD_TTL_SECS.unsigned_abs());
    let id = AttachmentId::generate();
    let stored_size = i64::try_from(size).map_err(|_| too_large())?;
    let mut tx = store.begin().await?;
    // Uploads of one account come one after the other here, so a burst cannot pass the cap.
    tx.lock_account(account_id).await?;
    let waiting = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, i64>(WAITING_COUNT)
        .bind(account_id.as_str())
        .bind(cutoff)
        .fetch_one(conn)
        .await)?;
    if waiting >= MAX_WAITING_UPLOADS {
        return Err(no_room());
    }
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO attachments (id, account_id, name, size, sha256, media_type, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    )
    .bind(id.as_str())
    .bind(account_id.as_str())
    .bind(&name)
    .bind(stored_size)
    .bind(&sha256)
    .bind(media_type)
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await?;
    tracing::info!(attachment_id = %id, size, "attachment uploaded");
    Ok(Attachment {
        id,
        name,
        size,
        sha256,
        media_type: media_type.to_owned(),
    })
}

/// Deletes the row of an upload whose bytes could not be kept after all. A failure is only
/// logged: the row then expires like any unused upload.
pub async fn forget_upload(store: &Store, id: &AttachmentId) {
    let forgotten = async {
        let mut tx = store.begin().await?;
        on_tx!(&mut tx, |conn| sqlx::query(
            "DELETE FROM attachments WHERE id = $1 AND job_id IS NULL"
        )
        .bind(id.as_str())
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
        tx.commit().await
    };
    if let Err(error) = forgotten.await {
        tracing::warn!(%error, attachment_id = %id, "forgetting an upload failed");
    }
}

/// Removes an upload of `account_id` that no job took (the Assign form's remove button).
///
/// # Errors
/// 404 for an unknown, expired or removed upload or another account's, 409 `invalid_state`
/// once a job took it.
pub async fn drop_upload(
    store: &Store,
    account_id: &AccountId,
    id: &AttachmentId,
) -> Result<(), ApiError> {
    let now = store.now();
    let cutoff = now - secs(UPLOAD_TTL_SECS.unsigned_abs());
    let mut tx = store.begin().await?;
    let sql = format!(
        "SELECT job_id, created_at, dropped_at FROM attachments WHERE id = $1 AND account_id = $2{}",
        tx.lock_clause()
    );
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<
        _,
        (Option<String>, i64, Option<i64>),
    >(&sql)
    .bind(id.as_str())
    .bind(account_id.as_str())
    .fetch_optional(conn)
    .await)?;
    match row {
        Some((Some(_), _, _)) => Err(taken(id)),
        Some((None, created_at, None)) if created_at >= cutoff => {
            on_tx!(&mut tx, |conn| sqlx::query(
                "UPDATE attachments SET dropped_at = $1 WHERE id = $2 AND job_id IS NULL"
            )
            .bind(now)
            .bind(id.as_str())
            .execute(conn)
            .await
            .map(|done| done.rows_affected()))?;
            tx.commit().await
        }
        _ => Err(ApiError::not_found("attachment")),
    }
}

/// 422 naming `attachments` for more than [`MAX_ATTACHMENTS_PER_JOB`] ids or one given twice.
///
/// # Errors
/// As said.
pub fn check_ids(ids: &[AttachmentId]) -> Result<(), ApiError> {
    if ids.len() > MAX_ATTACHMENTS_PER_JOB {
        return Err(ApiError::invalid_field(
            "attachments",
            &format!("a job carries at most {MAX_ATTACHMENTS_PER_JOB} files."),
        ));
    }
    let mut seen = HashSet::new();
    if !ids.iter().all(|id| seen.insert(id)) {
        return Err(ApiError::invalid_field(
            "attachments",
            "names the same file twice.",
        ));
    }
    Ok(())
}

/// An attachment a new job takes: a waiting upload, or a copy of the earlier job's.
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    /// The description the job lists (a copy's has its new id).
    pub(crate) attachment: Attachment,
    /// The upload's row, set to the job; `None` for a copy, which is a new row.
    take: Option<AttachmentId>,
}

/// The attachments `ids` name for a new job of `account_id`, in order, their rows locked:
/// each a waiting upload of the account or an attachment of `earlier` (the job a re-run runs
/// again or a follow-up continues), which the new job gets a copy of.
///
/// # Errors
/// 404 for an unknown, expired or removed upload or another account's, 409 `invalid_state`
/// for one another job took, 413 past [`MAX_ATTACHMENT_BYTES_PER_JOB`] together.
pub(crate) async fn choose(
    tx: &mut Tx,
    account_id: &AccountId,
    ids: &[AttachmentId],
    earlier: Option<&JobId>,
    now: Millis,
) -> Result<Vec<Chosen>, ApiError> {
    let cutoff = now - secs(UPLOAD_TTL_SECS.unsigned_abs());
    let placeholders: Vec<String> = (0..ids.len()).map(|at| format!("${}", at + 2)).collect();
    let sql = format!(
        "SELECT id, name, size, sha256, media_type, job_id, created_at, dropped_at \
         FROM attachments WHERE account_id = $1 AND id IN ({}){}",
        placeholders.join(", "),
        tx.lock_clause()
    );
    let rows = on_tx!(tx, |conn| {
        let mut query = sqlx::query_as::<_, ChoiceRow>(&sql).bind(account_id.as_str());
        for id in ids {
            query = query.bind(id.as_str());
        }
        query.fetch_all(conn).await
    })?;
    let mut chosen = Vec::with_capacity(ids.len());
    let mut total = 0_u64;
    for id in ids {
        let row = rows
            .iter()
            .find(|row| row.id == id.as_str())
            .ok_or_else(|| ApiError::not_found("attachment"))?;
        let attachment = row.attachment()?;
        total = total.saturating_add(attachment.size);
        let of_earlier =
            earlier.is_some_and(|earlier| row.job_id.as_deref() == Some(earlier.as_str()));
        chosen.push(if of_earlier {
            Chosen {
                attachment: Attachment {
                    id: AttachmentId::generate(),
                    ..attachment
                },
                take: None,
            }
        } else if row.job_id.is_some() {
            return Err(taken(id));
        } else if row.dropped_at.is_some() || row.created_at < cutoff {
            return Err(ApiError::not_found("attachment"));
        } else {
            Chosen {
                attachment,
                take: Some(id.clone()),
            }
        });
    }
    if total > MAX_ATTACHMENT_BYTES_PER_JOB {
        return Err(ApiError::new(
            Code::PayloadTooLarge,
            format!(
                "attachments: a job's files are at most {MAX_ATTACHMENT_BYTES_PER_JOB} bytes \
                 (100 MB) together; these are {total}."
            ),
        ));
    }
    Ok(chosen)
}

/// Gives `job_id` (just inserted) the attachments [`choose`] found, in order.
///
/// # Errors
/// 409 `invalid_state` when an upload was taken meanwhile (never under the row lock), or a
/// database error.
pub(crate) async fn attach(
    tx: &mut Tx,
    account_id: &AccountId,
    job_id: &JobId,
    chosen: &[Chosen],
    now: Millis,
) -> Result<(), ApiError> {
    for (position, item) in chosen.iter().enumerate() {
        let position = i64::try_from(position).unwrap_or(i64::MAX);
        let attachment = &item.attachment;
        let changed = match &item.take {
            Some(upload) => on_tx!(tx, |conn| sqlx::query(
                "UPDATE attachments SET job_id = $1, position = $2 \
                 WHERE id = $3 AND job_id IS NULL"
            )
            .bind(job_id.as_str())
            .bind(position)
            .bind(upload.as_str())
            .execute(conn)
            .await
            .map(|done| done.rows_affected()))?,
            None => on_tx!(tx, |conn| {
                sqlx::query(
                "INSERT INTO attachments (id, account_id, job_id, position, name, size, sha256, \
                 media_type, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            )
            .bind(attachment.id.as_str())
            .bind(account_id.as_str())
            .bind(job_id.as_str())
            .bind(position)
            .bind(&attachment.name)
            .bind(i64::try_from(attachment.size).unwrap_or(i64::MAX))
            .bind(&attachment.sha256)
            .bind(&attachment.media_type)
            .bind(now)
            .execute(conn)
            .await
            .map(|done| done.rows_affected())
            })?,
        };
        if changed != 1 {
            return Err(taken(&attachment.id));
        }
    }
    Ok(())
}

/// What the ledger keeps of a job's attachments: names, sizes and digests, never bytes.
pub(crate) fn ledger_detail(attachments: &[Attachment]) -> Value {
    attachments
        .iter()
        .map(|item| json!({ "id": item.id, "name": item.name, "size": item.size, "sha256": item.sha256 }))
        .collect()
}

/// One attachment of a job of `account_id`, for its owner.
///
/// # Errors
/// 404 for an unknown attachment or job, or another account's.
pub async fn for_owner(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
    id: &AttachmentId,
) -> Result<Attachment, ApiError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM attachments WHERE id = $1 AND job_id = $2 AND account_id = $3"
    );
    let row = on_read!(store, |pool| sqlx::query_as::<_, AttachmentRow>(&sql)
        .bind(id.as_str())
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    row.ok_or_else(|| ApiError::not_found("attachment"))?
        .into_attachment()
}

/// One attachment of a job of this device, while `lease` holds the job.
///
/// # Errors
/// 404 for another device's job or an attachment not on this job, 410 `job_ended` once the
/// job is in a final state, 409 `stale_lease` for a wrong or old lease.
pub async fn for_device(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    id: &AttachmentId,
    lease: &LeaseToken,
) -> Result<Attachment, ApiError> {
    let row = on_read!(store, |pool| sqlx::query_as::<_, LeasedRow>(
        "SELECT jobs.state, jobs.lease_token_hash, jobs.lease_expires_at, attachments.id, \
         attachments.name, attachments.size, attachments.sha256, attachments.media_type \
         FROM jobs LEFT JOIN attachments ON attachments.job_id = jobs.id AND attachments.id = $3 \
         WHERE jobs.id = $1 AND jobs.device_id = $2"
    )
    .bind(job_id.as_str())
    .bind(device.device_id.as_str())
    .bind(id.as_str())
    .fetch_optional(pool)
    .await)?;
    let row = row.ok_or_else(|| ApiError::not_found("job"))?;
    let attachment = match (&row.id, &row.name, row.size, &row.sha256, &row.media_type) {
        (Some(id), Some(name), Some(size), Some(sha256), Some(media_type)) => AttachmentRow {
            id: id.clone(),
            name: name.clone(),
            size,
            sha256: sha256.clone(),
            media_type: media_type.clone(),
        }
        .into_attachment()?,
        _ => return Err(ApiError::not_found("attachment")),
    };
    let state = JobState::parse(&row.state)
        .ok_or_else(|| ApiError::internal(&format_args!("stored job state {:?}", row.state)))?;
    if state.is_final() {
        return Err(ApiError::new(
            Code::JobEnded,
            format!(
                "The job ended ({}); its attachments are no longer served.",
                state.as_str()
            ),
        ));
    }
    let live = matches!(state, JobState::Running | JobState::Waiting)
        && row
            .lease_expires_at
            .is_some_and(|expires| expires > store.now());
    if !live || !job_rows::is_hash_of(row.lease_token_hash.as_deref(), lease) {
        return Err(job_rows::stale_lease());
    }
    Ok(attachment)
}

/// Deletes uploads no job took that expired or were removed over [`UPLOAD_TTL_SECS`]
/// before `now`, then each blob they named that nothing names any more and nobody wrote or
/// found again for as long. Answers how many uploads went.
///
/// A crash between the two leaves a blob nothing names; it is only disk space.
///
/// # Errors
/// A database error (the blobs are then left for the next sweep).
pub async fn sweep(store: &Store, data_dir: &Path, now: Millis) -> Result<u64, ApiError> {
    let cutoff = now - secs(UPLOAD_TTL_SECS.unsigned_abs());
    let mut tx = store.begin().await?;
    let digests = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, String>(
        "DELETE FROM attachments WHERE job_id IS NULL AND created_at < $1 \
         AND COALESCE(dropped_at, created_at) < $1 RETURNING sha256"
    )
    .bind(cutoff)
    .fetch_all(conn)
    .await)?;
    tx.commit().await?;
    let swept = u64::try_from(digests.len()).unwrap_or(u64::MAX);
    let unique: HashSet<String> = digests.into_iter().collect();
    let blobs = Blobs::new(data_dir);
    let mut removed = 0_u64;
    for sha256 in unique {
        let named = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(
            "SELECT CAST(CASE WHEN EXISTS (SELECT 1 FROM attachments WHERE sha256 = $1) \
             OR EXISTS (SELECT 1 FROM evidence WHERE sha256 = $1) THEN 1 ELSE 0 END AS BIGINT)"
        )
        .bind(&sha256)
        .fetch_one(pool)
        .await)?;
        if named == 0 {
            match blobs.remove_if_untouched(&sha256, cutoff).await {
                Ok(true) => removed += 1,
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, sha256, "removing a blob failed"),
            }
        }
    }
    if swept > 0 {
        tracing::info!(swept, blobs_removed = removed, "unused uploads swept");
    }
    Ok(swept)
}

fn taken(id: &AttachmentId) -> ApiError {
    ApiError::new(
        Code::InvalidState,
        format!("Attachment {id} belongs to a job already; upload the file again for another."),
    )
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::InvalidRequest, message)
}

/// An `attachments` row as the job lists it. Not `Serialize`: [`AttachmentRow::into_attachment`]
/// builds the wire type.
#[derive(sqlx::FromRow)]
struct AttachmentRow {
    id: String,
    name: String,
    size: i64,
    sha256: String,
    media_type: String,
}

impl AttachmentRow {
    fn into_attachment(self) -> Result<Attachment, ApiError> {
        Ok(Attachment {
            id: stored_id(self.id)?,
            name: self.name,
            size: u64::try_from(self.size).unwrap_or(0),
            sha256: self.sha256,
            media_type: self.media_type,
        })
    }
}

/// A row [`choose`] reads: the description and whether it is still free to take.
#[derive(sqlx::FromRow)]
struct ChoiceRow {
    id: String,
    name: String,
    size: i64,
    sha256: String,
    media_type: String,
    job_id: Option<String>,
    created_at: i64,
    dropped_at: Option<i64>,
}

impl ChoiceRow {
    fn attachment(&self) -> Result<Attachment, ApiError> {
        AttachmentRow {
            id: self.id.clone(),
            name: self.name.clone(),
            size: self.size,
            sha256: self.sha256.clone(),
            media_type: self.media_type.clone(),
        }
        .into_attachment()
    }
}

/// A device's job and, when it is on the job, the attachment it asks for.
#[derive(sqlx::FromRow)]
struct LeasedRow {
    state: String,
    lease_token_hash: Option<String>,
    lease_expires_at: Option<i64>,
    id: Option<String>,
    name: Option<String>,
    size: Option<i64>,
    sha256: Option<String>,
    media_type: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_file_names() {
        let code = |raw: &str| parse_name(Some(raw)).map_err(|error| error.code().name());
        assert_eq!(code("notes.txt"), Ok("notes.txt".to_owned()));
        assert_eq!(
            code("r%C3%A9sum%C3%A9%20final.pdf"),
            Ok("résumé final.pdf".to_owned())
        );
        for refused in [
            "",
            "..",
            "%2E%2E",
            "..%2Fx",
            "a%2Fb",
            "a%5Cb",
            "line%0Abreak",
            "a%E2%80%AEfdp.exe",
            "%FF",
            "%4",
            "%zz",
            " lead",
        ] {
            assert_eq!(code(refused), Err("invalid_request"), "{refused}");
        }
        assert_eq!(code(&"a".repeat(256)), Err("invalid_request"));
        for credential in [".env", "id_rsa", "server.pem", "credentials.json"] {
            assert_eq!(code(credential), Err("invalid_field"), "{credential}");
        }
        assert_eq!(
            parse_name(None).map_err(|error| error.code().name()),
            Err("invalid_request")
        );
    }

    #[test]
    fn a_job_names_each_file_once_and_at_most_twenty() {
        let ids: Vec<AttachmentId> = (0..21).map(|_| AttachmentId::generate()).collect();
        assert!(check_ids(&ids[..20]).is_ok());
        assert_eq!(
            check_ids(&ids).map_err(|error| error.code().name()),
            Err("invalid_field")
        );
        let twice = [ids[0].clone(), ids[0].clone()];
        assert_eq!(
            check_ids(&twice).map_err(|error| error.code().name()),
            Err("invalid_field")
        );
    }
}
