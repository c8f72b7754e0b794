//! `POST /api/attachments` and `DELETE /api/attachments/{id}` (a person's uploads before
//! the job), `GET /api/jobs/{id}/attachments/{attachmentId}` (the job's owner), and
//! `GET /api/devices/self/jobs/{id}/attachments/{attachmentId}` (the job's device, under
//! its lease).
//!
//! The upload is the file's bytes as the body and its name percent-encoded in
//! `x-tether-attachment-name`. It streams to the blob store, hashing and sniffing as it
//! comes, never held in memory; past 25 MB it stops reading and answers 413.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use tether_protocol::attachments::{Attachment, MAX_ATTACHMENT_BYTES};
use tether_protocol::routes::ATTACHMENT_NAME_HEADER;
use tether_protocol::{AttachmentId, JobId};

use super::evidence::{content_length, header_text, read_chunks, receive, served_to_owner};
use super::lease::Lease;
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs::attachments;
use crate::jobs::evidence::ContentType;
use crate::rate_limits::Bucket;
use crate::state::AppState;
use crate::store::blobs::Blobs;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/attachments",
            upload,
            Access::User,
            "Upload a file for a job",
        )
        .header(
            ATTACHMENT_NAME_HEADER,
            "The file's name, percent-encoded UTF-8 (a file name: no folder, every character \
             visible, at most 255 bytes).",
        )
        .raw_body(
            "The file's bytes, at most 25 MB. Its type is sniffed from them. The answer's id \
             goes in a job's `attachments`; unused, it expires after an hour.",
        )
        .answer::<Attachment>(201, "Stored, waiting for a job.")
        .errors(&[400, 409, 413, 422, 429]);
    table
        .delete(
            "/api/attachments/{id}",
            remove,
            Access::User,
            "Remove an upload no job took",
        )
        .empty(204, "Removed.")
        .errors(&[400, 404, 409]);
    table
        .get(
            "/api/jobs/{id}/attachments/{attachment_id}",
            download,
            Access::User,
            "Download a job's attachment",
        )
        .bytes("The file's bytes.")
        .errors(&[400, 404]);
    table
        .get(
            "/api/devices/self/jobs/{id}/attachments/{attachment_id}",
            fetch,
            Access::Lease,
            "Download an attachment of a claimed job",
        )
        .bytes("The file's bytes, with its media type and length.")
        .errors(&[400, 404, 409, 410]);
}

/// 201 with the stored upload's description.
async fn upload(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
    mut body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let account_id = &caller.account.id;
    state.limits.check(Bucket::Uploads, account_id.as_str())?;
    let name = attachments::parse_name(header_text(&req, ATTACHMENT_NAME_HEADER).as_deref())?;
    if content_length(&req)?.is_some_and(|declared| declared > MAX_ATTACHMENT_BYTES) {
        return Err(attachments::too_large());
    }
    attachments::check_room(&state.store, account_id).await?;
    let blobs = Blobs::new(&state.config.data_dir);
    let (blob, found) = receive(&blobs, &mut body, MAX_ATTACHMENT_BYTES, |_| {
        attachments::too_large()
    })
    .await?;
    let media_type = found.mime();
    let (size, sha256) = (blob.size(), blob.sha256());
    // The row first: a refused upload leaves no blob (the dropped writer removes its file),
    // and from the moment the bytes are in place a row names them, so no sweep takes them.
    let stored =
        attachments::record_upload(&state.store, account_id, name, size, sha256, media_type)
            .await?;
    if let Err(error) = blob.commit(&blobs).await {
        attachments::forget_upload(&state.store, &stored.id).await;
        return Err(ApiError::internal(&error));
    }
    Ok(HttpResponse::Created().json(stored))
}

/// 204 once the upload is gone.
async fn remove(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<AttachmentId>,
) -> Result<HttpResponse, ApiError> {
    attachments::drop_upload(&state.store, &caller.account.id, &id).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The bytes for the job's owner (the job page's thumbnails), never an active document.
async fn download(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(JobId, AttachmentId)>,
) -> Result<HttpResponse, ApiError> {
    let (job_id, id) = path.into_inner();
    let item = attachments::for_owner(&state.store, &caller.account.id, &job_id, &id).await?;
    let file = open(&state, &item).await?;
    let found = ContentType::from_mime(Some(&item.media_type));
    Ok(served_to_owner(found, &item.name, item.size, file))
}

/// The bytes for the job's device while it holds the lease.
async fn fetch(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    path: web::Path<(JobId, AttachmentId)>,
    Lease(lease): Lease,
) -> Result<HttpResponse, ApiError> {
    let (job_id, id) = path.into_inner();
    let item = attachments::for_device(&state.store, &device, &job_id, &id, &lease).await?;
    let file = open(&state, &item).await?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, item.media_type.as_str()))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .no_chunking(item.size)
        .streaming(read_chunks(file)))
}

async fn open(state: &AppState, item: &Attachment) -> Result<tokio::fs::File, ApiError> {
    Blobs::new(&state.config.data_dir)
        .open(&item.sha256, item.size)
        .await
        .map_err(|err| ApiError::internal(&err))
}
