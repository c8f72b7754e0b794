//! `POST /api/devices/self/jobs/{id}/evidence` (the device, under the run's lease) and
//! `GET /api/jobs/{id}/evidence/{evidenceId}` (the job's owner).
//!
//! The upload streams the body to the blob store, hashing and sniffing it as it comes, and
//! never holds it in memory; past the size limit it stops reading and answers 413.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse, HttpResponseBuilder};
use futures_util::StreamExt;
use tether_protocol::jobs::Evidence;
use tether_protocol::routes::EVIDENCE_HEADER;
use tether_protocol::{Code, JobId};
use tokio::io::AsyncReadExt;

use super::lease::Lease;
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs;
use crate::jobs::evidence::{self, ContentType, Sniffer, Upload};
use crate::state::AppState;
use crate::store::blobs::{BlobWriter, Blobs};

/// Size of the chunks a download is sent in.
const READ_CHUNK: usize = 64 * 1024;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/devices/self/jobs/{id}/evidence",
            upload,
            Access::Lease,
            "Attach a file to a run",
        )
        .header(
            EVIDENCE_HEADER,
            "base64url of the JSON description `{id, kind, name, size, sha256, mime?, caption?, \
             local?, held?, variantOf?, variant?, details?}`.",
        )
        .raw_body("The file's bytes.")
        .answer::<Evidence>(201, "Stored.")
        .answer::<Evidence>(200, "The same id again: already stored.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    table
        .get(
            "/api/jobs/{id}/evidence/{evidence_id}",
            download,
            Access::User,
            "Download evidence",
        )
        .bytes("The stored bytes.")
        .errors(&[400, 404, 409]);
}

/// 201 with the stored item, 200 when this id was stored already with the same content.
async fn upload(
    req: HttpRequest,
    state: web::Data<AppState>,
    device: DeviceIdentity,
    job_id: web::Path<JobId>,
    Lease(lease): Lease,
    mut body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let max_bytes = state.config.evidence_max_bytes;
    let upload = Upload::decode(header_text(&req, EVIDENCE_HEADER).as_deref(), max_bytes)?;
    if let Some(declared) = content_length(&req)? {
        if declared > max_bytes {
            return Err(evidence::too_large(max_bytes));
        }
    }
    let stored = evidence::precheck(&state.store, &device, &job_id, &lease, &upload).await?;
    if let Some(stored) = stored {
        // A repeat: read what was sent (so the device sees this answer, not a reset), keep
        // nothing.
        drain(&mut body, max_bytes).await?;
        return Ok(answer(false, &stored));
    }
    let mime = if upload.local || upload.held {
        expect_empty(&mut body).await?;
        upload.mime.clone()
    } else {
        Some(store_bytes(&state, &upload, &mut body, max_bytes).await?)
    };
    let (stored, created) = evidence::record(
        &state.store,
        &device,
        &job_id,
        &lease,
        upload,
        mime.as_deref(),
    )
    .await?;
    Ok(answer(created, &stored))
}

fn answer(created: bool, evidence: &Evidence) -> HttpResponse {
    let mut answer = if created {
        HttpResponse::Created()
    } else {
        HttpResponse::Ok()
    };
    answer.json(evidence)
}

/// Streams the body into a new blob, checks it against the description and its kind, and
/// keeps it. Returns the sniffed type.
pub(super) async fn store_bytes(
    state: &AppState,
    upload: &Upload,
    body: &mut web::Payload,
    max_bytes: u64,
) -> Result<String, ApiError> {
    let blobs = Blobs::new(&state.config.data_dir);
    let (blob, found) = receive(&blobs, body, upload.size, |total| {
        if total > max_bytes {
            evidence::too_large(max_bytes)
        } else {
            mismatch("The body is longer than the size its description gives.")
        }
    })
    .await?;
    if blob.size() != upload.size {
        return Err(mismatch(&format!(
            "The body has {} bytes; its description says {}.",
            blob.size(),
            upload.size
        )));
    }
    if blob.sha256() != upload.sha256 {
        return Err(mismatch(
            "The body's SHA-256 is not the one its description gives.",
        ));
    }
    if !evidence::kind_allows(upload.kind, found) {
        return Err(ApiError::new(
            Code::UnsupportedMediaType,
            format!(
                "The bytes are {}, which a {} cannot be.",
                found.mime(),
                upload.kind.as_str()
            ),
        ));
    }
    blob.commit(&blobs)
        .await
        .map_err(|err| ApiError::internal(&err))?;
    Ok(found.mime().to_owned())
}

/// Streams a body of at most `limit` bytes into a new blob (synced, not yet in place),
/// sniffing its type as it comes; past the limit it stops reading and answers
/// `too_large(bytes so far)`.
pub(super) async fn receive(
    blobs: &Blobs,
    body: &mut web::Payload,
    limit: u64,
    too_large: impl Fn(u64) -> ApiError,
) -> Result<(BlobWriter, ContentType), ApiError> {
    let mut blob = blobs
        .create()
        .await
        .map_err(|err| ApiError::internal(&err))?;
    let mut sniffer = Sniffer::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|_| unreadable())?;
        let total = blob.size() + chunk.len() as u64;
        if total > limit {
            return Err(too_large(total));
        }
        sniffer.feed(&chunk);
        blob.write(&chunk)
            .await
            .map_err(|err| ApiError::internal(&err))?;
    }
    blob.sync().await.map_err(|err| ApiError::internal(&err))?;
    let json = sniffer.looks_like_json() && {
        let path = blob.temporary_path().to_owned();
        web::block(move || parses_as_json(&path))
            .await
            .unwrap_or(false)
    };
    Ok((blob, sniffer.finish(json)))
}

/// Whether the file parses as JSON, read back in a blocking thread (up to the size limit).
fn parses_as_json(path: &std::path::Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    serde_json::from_reader::<_, serde::de::IgnoredAny>(std::io::BufReader::new(file)).is_ok()
}

/// A `local` or `held` item comes without bytes (so does a done discard).
pub(super) async fn expect_empty(body: &mut web::Payload) -> Result<(), ApiError> {
    while let Some(chunk) = body.next().await {
        if !chunk.map_err(|_| unreadable())?.is_empty() {
            return Err(mismatch(
                "A file kept or held on the computer is described only: send no body.",
            ));
        }
    }
    Ok(())
}

/// Reads and drops the body, up to the size limit.
async fn drain(body: &mut web::Payload, max_bytes: u64) -> Result<(), ApiError> {
    let mut read = 0_u64;
    while let Some(chunk) = body.next().await {
        read += chunk.map_err(|_| unreadable())?.len() as u64;
        if read > max_bytes {
            return Err(evidence::too_large(max_bytes));
        }
    }
    Ok(())
}

/// The stored bytes, for the job's owner and the members of its space (uploaded or
/// released files only), never rendered as an active document.
async fn download(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(JobId, String)>,
) -> Result<HttpResponse, ApiError> {
    let (job_id, evidence_id) = path.into_inner();
    let store = &state.store;
    let item = match evidence::find(store, &caller.account.id, &job_id, &evidence_id).await {
        Err(error) if error.code() == Code::NotFound => {
            let owner = jobs::space_owner_of(store, &caller.account.id, &job_id).await?;
            let item = evidence::find(store, &owner, &job_id, &evidence_id).await?;
            // Held and local files are their owner's alone: a member never learns of one.
            if item.local || item.held {
                return Err(ApiError::not_found("evidence"));
            }
            item
        }
        found => found?,
    };
    if item.local {
        return Err(evidence::kept_local(&item));
    }
    if item.held {
        return Err(evidence::held_there(&item));
    }
    let file = Blobs::new(&state.config.data_dir)
        .open(&item.sha256, item.size)
        .await
        .map_err(|err| ApiError::internal(&err))?;
    let found = ContentType::from_mime(item.mime.as_deref());
    Ok(served_to_owner(found, &item.name, item.size, file))
}

/// A stored file for a person's browser, never rendered as an active document: inline only
/// for plain pictures and text, no sniffing, sandboxed, same-origin, not cached.
pub(super) fn served_to_owner(
    found: ContentType,
    name: &str,
    size: u64,
    file: tokio::fs::File,
) -> HttpResponse {
    owner_headers(found, name)
        .no_chunking(size)
        .streaming(read_chunks(file))
}

/// The headers of a file served to its owner (see [`served_to_owner`]).
pub(super) fn owner_headers(found: ContentType, name: &str) -> HttpResponseBuilder {
    let disposition = if found.inline() {
        "inline"
    } else {
        "attachment"
    };
    let mut answer = HttpResponse::Ok();
    answer
        .insert_header((header::CONTENT_TYPE, found.header_value()))
        .insert_header((
            header::CONTENT_DISPOSITION,
            content_disposition(disposition, name),
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "sandbox; default-src 'none'",
        ))
        .insert_header(("cross-origin-resource-policy", "same-origin"));
    answer
}

/// The file in chunks; a read error ends the answer early (the client sees it cut short).
pub(super) fn read_chunks(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = Result<web::Bytes, std::io::Error>> {
    futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buffer = vec![0_u8; READ_CHUNK];
        match file.read(&mut buffer).await {
            Ok(0) => None,
            Ok(read) => {
                buffer.truncate(read);
                Some((Ok(web::Bytes::from(buffer)), Some(file)))
            }
            Err(err) => Some((Err(err), None)),
        }
    })
}

/// `inline|attachment; filename="ascii"; filename*=UTF-8''percent-encoded` (RFC 6266): the
/// plain form keeps only safe ASCII, the encoded one the whole name.
fn content_disposition(disposition: &str, name: &str) -> HeaderValue {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '%' | ';') || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let value = format!("{disposition}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}");
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("attachment"))
}

pub(super) fn header_text(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
}

pub(super) fn content_length(req: &HttpRequest) -> Result<Option<u64>, ApiError> {
    match req.headers().get(header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .map(Some)
            .ok_or_else(|| ApiError::new(Code::InvalidRequest, "Content-Length is not a number.")),
    }
}

pub(super) fn mismatch(message: &str) -> ApiError {
    ApiError::new(Code::InvalidRequest, message)
}

pub(super) fn unreadable() -> ApiError {
    ApiError::new(Code::InvalidRequest, "The body could not be read.")
}
