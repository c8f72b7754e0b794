//! Held evidence from the web: `POST /api/jobs/{id}/evidence/{evidenceId}/preview`,
//! `…/release` and `…/discard` (the job's owner), `GET …/preview` (the kept preview), and
//! `POST /api/devices/self/evidence-uploads/{uploadId}`, where the device answers an
//! `evidence.request` (the bytes, an empty body once discarded, or a refusal).
//!
//! The upload is checked before its id is taken, so a bad upload leaves the id usable for
//! a good one; once taken, a second use is 410 `upload_gone`.

use std::time::Duration;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tether_protocol::evidence::{EvidenceAction, PreviewReady, MAX_PREVIEW_BYTES};
use tether_protocol::jobs::Evidence;
use tether_protocol::routes::{EVIDENCE_HEADER, EVIDENCE_REFUSED_HEADER};
use tether_protocol::{Code, JobId};

use super::evidence::{
    content_length, expect_empty, header_text, mismatch, owner_headers, store_bytes, unreadable,
};
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs::evidence::{self, ContentType, Sniffer, Upload};
use crate::jobs::held_evidence;
use crate::previews::{self, Preview, PreviewKey};
use crate::rate_limits::Bucket;
use crate::relay::{EvidenceAnswer, UploadBinding};
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/jobs/{id}/evidence/{evidence_id}/preview",
            preview,
            Access::User,
            "Preview a held evidence file",
        )
        .answer::<PreviewReady>(200, "The computer sent it; `url` serves it for 5 minutes.")
        .errors(&[404, 409, 429, 504]);
    table
        .get(
            "/api/jobs/{id}/evidence/{evidence_id}/preview",
            read_preview,
            Access::User,
            "Read a held file's preview",
        )
        .bytes("The previewed bytes, until they expire (then 404).")
        .errors(&[404]);
    table
        .post(
            "/api/jobs/{id}/evidence/{evidence_id}/release",
            release,
            Access::User,
            "Release a held evidence file",
        )
        .answer::<Evidence>(200, "Uploaded and kept like any evidence.")
        .errors(&[404, 409, 429, 504]);
    table
        .post(
            "/api/jobs/{id}/evidence/{evidence_id}/discard",
            discard,
            Access::User,
            "Discard a held evidence file",
        )
        .empty(
            204,
            "Deleted on the computer, with its variants; gone from the job.",
        )
        .errors(&[404, 409, 429, 504]);
    table
        .post(
            "/api/devices/self/evidence-uploads/{upload_id}",
            upload,
            Access::Device,
            "Answer an evidence request",
        )
        .header(
            EVIDENCE_HEADER,
            "For preview and release: base64url JSON describing the held file (as stored).",
        )
        .header(
            EVIDENCE_REFUSED_HEADER,
            "A refusal, percent-encoded; `code=evidence_kept: …` when upload is off.",
        )
        .raw_body("The file's bytes; empty for a done discard or a refusal.")
        .empty(204, "Passed to the waiting request.")
        .errors(&[400, 404, 410, 413, 415, 422, 429]);
}

type EvidencePath = web::Path<(JobId, String)>;

async fn preview(
    state: web::Data<AppState>,
    caller: Caller,
    path: EvidencePath,
) -> Result<HttpResponse, ApiError> {
    match ask(&state, &caller, &path, EvidenceAction::Preview).await? {
        EvidenceAnswer::Preview(ready) => Ok(HttpResponse::Ok().json(ready)),
        _ => Err(unexpected()),
    }
}

async fn release(
    state: web::Data<AppState>,
    caller: Caller,
    path: EvidencePath,
) -> Result<HttpResponse, ApiError> {
    match ask(&state, &caller, &path, EvidenceAction::Release).await? {
        EvidenceAnswer::Released(item) => Ok(HttpResponse::Ok().json(item)),
        _ => Err(unexpected()),
    }
}

async fn discard(
    state: web::Data<AppState>,
    caller: Caller,
    path: EvidencePath,
) -> Result<HttpResponse, ApiError> {
    match ask(&state, &caller, &path, EvidenceAction::Discard).await? {
        EvidenceAnswer::Discarded => Ok(HttpResponse::NoContent().finish()),
        _ => Err(unexpected()),
    }
}

async fn ask(
    state: &AppState,
    caller: &Caller,
    path: &EvidencePath,
    action: EvidenceAction,
) -> Result<EvidenceAnswer, ApiError> {
    let account_id = &caller.account.id;
    state.limits.check(Bucket::Files, account_id.as_str())?;
    let (job_id, evidence_id) = (&path.0, path.1.as_str());
    let timeout = Duration::from_secs(state.config.evidence_wait_secs.max(1));
    let asked = (account_id, job_id, evidence_id);
    held_evidence::ask(&state.store, &state.hub, asked, action, timeout).await
}

fn unexpected() -> ApiError {
    ApiError::internal(&"the computer's answer is not for the action asked")
}

/// The kept preview, for the job's owner only, never cached.
async fn read_preview(
    state: web::Data<AppState>,
    caller: Caller,
    path: EvidencePath,
) -> Result<HttpResponse, ApiError> {
    let (job_id, evidence_id) = path.into_inner();
    let account_id = caller.account.id.clone();
    let item = evidence::find(&state.store, &account_id, &job_id, &evidence_id).await?;
    let key = PreviewKey {
        account_id,
        job_id,
        evidence_id,
    };
    let preview = state.previews.get(&key).await?;
    let preview = preview.ok_or_else(|| ApiError::not_found("preview"))?;
    let found = ContentType::from_mime(Some(&preview.mime));
    Ok(owner_headers(found, &item.name)
        .insert_header((header::CACHE_CONTROL, "private, no-store"))
        .body(preview.bytes))
}

/// The device's answer: checked, then the upload id is taken and the outcome handed on.
async fn upload(
    req: HttpRequest,
    state: web::Data<AppState>,
    device: DeviceIdentity,
    upload_id: web::Path<String>,
    mut body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Progress, device.device_id.as_str())?;
    let binding = state
        .hub
        .upload_ticket(&device.device_id, &upload_id)
        .await?;
    let answer = if let Some(raw) = header_text(&req, EVIDENCE_REFUSED_HEADER) {
        let (kept, reason) = held_evidence::refusal(&raw)?;
        expect_empty(&mut body).await?;
        Outcome::Ready(EvidenceAnswer::Refused { kept, reason })
    } else {
        match binding.action {
            EvidenceAction::Discard => {
                expect_empty(&mut body).await?;
                Outcome::Discard
            }
            EvidenceAction::Preview => receive_preview(&req, &state, &binding, &mut body).await?,
            EvidenceAction::Release => receive_release(&req, &state, &binding, &mut body).await?,
        }
    };
    let taken = state.hub.take_upload(&device.device_id, &upload_id).await?;
    let answer = match answer {
        Outcome::Ready(answer) => answer,
        Outcome::Discard => {
            held_evidence::discard(&state.store, &binding).await?;
            EvidenceAnswer::Discarded
        }
        Outcome::Preview(key, preview) => {
            let ready = PreviewReady {
                url: format!(
                    "/api/jobs/{}/evidence/{}/preview",
                    key.job_id, key.evidence_id
                ),
                expires_at: preview.expires_at,
                size: preview.bytes.len() as u64,
                mime: Some(preview.mime.clone()),
            };
            state.previews.keep(&key, preview).await?;
            EvidenceAnswer::Preview(ready)
        }
        Outcome::Release(mime) => {
            let item = held_evidence::release(&state.store, &binding, &mime).await?;
            EvidenceAnswer::Released(Box::new(item))
        }
    };
    state.hub.deliver_upload(taken, answer).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// What a checked upload does once its id is taken.
enum Outcome {
    Ready(EvidenceAnswer),
    Discard,
    Preview(PreviewKey, Preview),
    /// The bytes are in the blob store, of this type.
    Release(String),
}

/// The description, checked against the held row.
async fn described(
    req: &HttpRequest,
    state: &AppState,
    binding: &UploadBinding,
    limit: u64,
    too_large: impl Fn() -> ApiError,
) -> Result<Upload, ApiError> {
    let upload = Upload::decode(header_text(req, EVIDENCE_HEADER).as_deref(), limit)?;
    let declared = content_length(req)?.unwrap_or(0);
    if upload.size > limit || declared > limit {
        return Err(too_large());
    }
    held_evidence::expected(&state.store, binding, &upload).await?;
    Ok(upload)
}

/// Reads a preview into memory (at most [`MAX_PREVIEW_BYTES`]) and checks it.
async fn receive_preview(
    req: &HttpRequest,
    state: &AppState,
    binding: &UploadBinding,
    body: &mut web::Payload,
) -> Result<Outcome, ApiError> {
    let upload = described(req, state, binding, MAX_PREVIEW_BYTES, previews::too_large).await?;
    let mut bytes = web::BytesMut::new();
    let mut sniffer = Sniffer::new();
    let mut hasher = Sha256::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|_| unreadable())?;
        if (bytes.len() + chunk.len()) as u64 > upload.size {
            return Err(mismatch(
                "The body is longer than the size its description gives.",
            ));
        }
        sniffer.feed(&chunk);
        hasher.update(&chunk);
        bytes.extend_from_slice(&chunk);
    }
    if bytes.len() as u64 != upload.size || hex(&hasher.finalize()) != upload.sha256 {
        return Err(mismatch(
            "The body is not the file its description gives (size or SHA-256).",
        ));
    }
    let json = sniffer.looks_like_json()
        && serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok();
    let found = sniffer.finish(json);
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
    let key = PreviewKey {
        account_id: binding.account_id.clone(),
        job_id: binding.job_id.clone(),
        evidence_id: binding.evidence_id.clone(),
    };
    let preview = Preview {
        bytes: bytes.freeze(),
        mime: found.mime().to_owned(),
        expires_at: state.previews.expiry(),
    };
    Ok(Outcome::Preview(key, preview))
}

/// Streams a released file into the blob store, checked like any evidence upload.
async fn receive_release(
    req: &HttpRequest,
    state: &AppState,
    binding: &UploadBinding,
    body: &mut web::Payload,
) -> Result<Outcome, ApiError> {
    let max_bytes = state.config.evidence_max_bytes;
    let too_large = || evidence::too_large(max_bytes);
    let upload = described(req, state, binding, max_bytes, too_large).await?;
    let mime = store_bytes(state, &upload, body, max_bytes).await?;
    Ok(Outcome::Release(mime))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
