//! `DELETE /api/jobs/{id}/session` (the job's owner): the engine session of a stopped job,
//! deleted on its computer; and `POST /api/devices/self/session-deletions/{id}`, where the
//! computer answers the `session.delete` frame.
//!
//! The answer is checked before its request id is taken, so a malformed answer leaves the
//! id usable for a good one; once taken, a second use is 410 `upload_gone`.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use tether_protocol::engine_sessions::SessionDeletion;
use tether_protocol::JobId;

use super::input::json_config_with_limit;
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs::engine_sessions::{self, CheckedDeletion};
use crate::rate_limits::Bucket;
use crate::state::AppState;

/// Largest answer body: the flag and a 500-character sentence, JSON-escaped.
pub const ANSWER_LIMIT_BYTES: usize = 4096;

pub(super) fn routes(table: &mut Table) {
    table
        .delete(
            "/api/jobs/{id}/session",
            delete,
            Access::User,
            "Delete a stopped job's agent session",
        )
        .empty(
            204,
            "Its computer deleted what it kept of the session: no follow-up loads it again.",
        )
        .errors(&[400, 404, 409, 429, 504]);
    table
        .post(
            "/api/devices/self/session-deletions/{id}",
            answer,
            Access::Device,
            "Answer a session deletion",
        )
        .resource_data(json_config_with_limit(ANSWER_LIMIT_BYTES))
        .body::<SessionDeletion>()
        .empty(204, "Passed to the waiting request.")
        .errors(&[400, 404, 410, 413, 415, 422, 429]);
}

async fn delete(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
) -> Result<HttpResponse, ApiError> {
    let account_id = &caller.account.id;
    state.limits.check(Bucket::Files, account_id.as_str())?;
    // Starting an engine to delete its session takes as long as a held file's answer.
    let timeout = Duration::from_secs(state.config.evidence_wait_secs.max(1));
    engine_sessions::delete(&state.store, &state.hub, account_id, &job_id, timeout).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The computer's answer: checked, then its request id is taken, a deletion recorded, and
/// the answer handed on.
async fn answer(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    request_id: web::Path<String>,
    answer: web::Json<SessionDeletion>,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Progress, device.device_id.as_str())?;
    let answer = CheckedDeletion::try_from(answer.into_inner())?;
    let (binding, taken) = state
        .hub
        .take_deletion(&device.device_id, &request_id)
        .await?;
    if answer.deleted() {
        engine_sessions::record_deleted(&state.store, &binding).await?;
    }
    state
        .hub
        .deliver_deletion(taken, answer.into_inner())
        .await?;
    Ok(HttpResponse::NoContent().finish())
}
