//! `GET /api/jobs/{id}/tree?path=`, `GET /api/jobs/{id}/file?path=` and
//! `GET /api/jobs/{id}/diff?path=&against=` (a unified diff, as text: the run's start
//! against its end, or `against=now` the folder now) for the job's owner, relayed live to
//! the job's device; `POST /api/devices/self/file-requests/{id}` is where the device
//! answers.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde::Deserialize;
use tether_protocol::changes::DiffAgainst;
use tether_protocol::files::{FileAnswer, FileContent, FileOp, Tree};
use tether_protocol::JobId;

use super::input::json_config_with_limit;
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs::files::{self, FolderPath, RelayedAnswer};
use crate::rate_limits::Bucket;
use crate::state::AppState;

/// Largest answer body: 1 MiB of text, JSON-escaped, plus the listing or metadata.
pub const ANSWER_LIMIT_BYTES: usize = 1536 * 1024;
/// The diff's header saying what the run's start was compared with: `end` or `now`.
pub const DIFF_AGAINST_HEADER: &str = "x-tether-diff-against";

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/jobs/{id}/tree",
            tree,
            Access::User,
            "List a job's folder",
        )
        .query(
            "path",
            "Relative to the job's folder; empty for the folder itself.",
        )
        .answer::<Tree>(200, "One folder, read live from the computer.")
        .errors(&[400, 404, 409, 422, 429, 504]);
    table
        .get(
            "/api/jobs/{id}/file",
            file,
            Access::User,
            "Read a file of a job's folder",
        )
        .query("path", "Relative to the job's folder.")
        .answer::<FileContent>(200, "The file, read live from the computer, redacted.")
        .errors(&[400, 404, 409, 422, 429, 504]);
    table
        .get(
            "/api/jobs/{id}/diff",
            diff,
            Access::User,
            "What the run changed in one file",
        )
        .query("path", "Relative to the job's folder.")
        .query(
            "against",
            "What the run's start is compared with: `end` (the default), the folder as the \
             run left it, so later jobs' work is no part of it (while the run goes on, the \
             folder now); or `now`, the folder as it is now.",
        )
        .stream(
            "text/plain",
            "The unified diff between the run's start and its end (or now), read from the \
             computer, redacted, at most 256 KiB (then cut, saying so). The header \
             `x-tether-diff-against` says what the start was compared with: `end` or `now`.",
        )
        .errors(&[400, 404, 409, 422, 429, 504]);
    table
        .post(
            "/api/devices/self/file-requests/{id}",
            answer,
            Access::Device,
            "Answer a file request",
        )
        .resource_data(json_config_with_limit(ANSWER_LIMIT_BYTES))
        .body::<FileAnswer>()
        .empty(204, "Passed to the waiting request.")
        .errors(&[400, 404, 413, 415, 422]);
}

#[derive(Deserialize)]
struct PathQuery {
    #[serde(default)]
    path: String,
}

async fn tree(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    query: web::Query<PathQuery>,
) -> Result<HttpResponse, ApiError> {
    relay(
        &state,
        &caller,
        &job_id,
        &query.path,
        (FileOp::Tree, DiffAgainst::End),
    )
    .await
}

async fn file(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    query: web::Query<PathQuery>,
) -> Result<HttpResponse, ApiError> {
    relay(
        &state,
        &caller,
        &job_id,
        &query.path,
        (FileOp::File, DiffAgainst::End),
    )
    .await
}

#[derive(Deserialize)]
struct DiffQuery {
    #[serde(default)]
    path: String,
    against: Option<String>,
}

async fn diff(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    query: web::Query<DiffQuery>,
) -> Result<HttpResponse, ApiError> {
    let against = match query.against.as_deref() {
        None | Some("end") => DiffAgainst::End,
        Some("now") => DiffAgainst::Now,
        Some(_) => return Err(ApiError::invalid_field("against", "must be end or now.")),
    };
    relay(
        &state,
        &caller,
        &job_id,
        &query.path,
        (FileOp::Diff, against),
    )
    .await
}

/// Validates the path, spends a file-relay token and asks the device (for a diff, against
/// what); never cached.
async fn relay(
    state: &AppState,
    caller: &Caller,
    job_id: &JobId,
    raw_path: &str,
    (op, against): (FileOp, DiffAgainst),
) -> Result<HttpResponse, ApiError> {
    let path = FolderPath::parse(raw_path)?;
    state
        .limits
        .check(Bucket::Files, caller.account.id.as_str())?;
    let (store, hub, account_id) = (&state.store, &state.hub, &caller.account.id);
    let timeout = relay_timeout(state);
    let mut answer = HttpResponse::Ok();
    answer.insert_header(("cache-control", "no-store"));
    Ok(match op {
        FileOp::Tree => {
            answer.json(files::tree(store, hub, account_id, job_id, &path, timeout).await?)
        }
        FileOp::File => {
            answer.json(files::file(store, hub, account_id, job_id, &path, timeout).await?)
        }
        FileOp::Diff => {
            let diff = files::diff(store, hub, account_id, job_id, &path, against, timeout).await?;
            let compared = diff.against.unwrap_or(DiffAgainst::Now);
            answer
                .insert_header((DIFF_AGAINST_HEADER, compared.as_str()))
                .content_type("text/plain; charset=utf-8")
                .body(diff.text)
        }
    })
}

async fn answer(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    request_id: web::Path<String>,
    answer: web::Json<FileAnswer>,
) -> Result<HttpResponse, ApiError> {
    let answer = RelayedAnswer::try_from(answer.into_inner())?;
    files::answer(&state.hub, &device.device_id, &request_id, answer).await?;
    Ok(HttpResponse::NoContent().finish())
}

fn relay_timeout(state: &AppState) -> Duration {
    Duration::from_secs(state.config.relay_timeout_secs.max(1))
}
