//! `GET /api/jobs/{id}/tree?path=`, `GET /api/jobs/{id}/file?path=` and
//! `GET /api/jobs/{id}/diff?path=` (a unified diff, as text) for the job's owner,
//! relayed live to the job's device; `POST /api/devices/self/file-requests/{id}` is where
//! the device answers.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde::Deserialize;
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
        .stream(
            "text/plain",
            "The unified diff between the run's start and now, read live from the computer, \
             redacted, at most 256 KiB (then cut, saying so).",
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
    relay(&state, &caller, &job_id, &query.path, FileOp::Tree).await
}

async fn file(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    query: web::Query<PathQuery>,
) -> Result<HttpResponse, ApiError> {
    relay(&state, &caller, &job_id, &query.path, FileOp::File).await
}

async fn diff(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    query: web::Query<PathQuery>,
) -> Result<HttpResponse, ApiError> {
    relay(&state, &caller, &job_id, &query.path, FileOp::Diff).await
}

/// Validates the path, spends a file-relay token and asks the device; never cached.
async fn relay(
    state: &AppState,
    caller: &Caller,
    job_id: &JobId,
    raw_path: &str,
    op: FileOp,
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
        FileOp::Diff => answer.content_type("text/plain; charset=utf-8").body(
            files::diff(store, hub, account_id, job_id, &path, timeout)
                .await?
                .text,
        ),
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
