//! `POST /api/devices/self/jobs/{id}/context`: a run asks for more context while it holds
//! its lease (`job.chain`, `job.get`, `jobs.search`; see `jobs::context_answers`).

use actix_web::{web, HttpResponse};
use tether_protocol::task_context::{ContextAnswer, ContextRequest};
use tether_protocol::JobId;

use super::lease::Lease;
use super::table::{Access, Table};
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs::context_answers::{self, Question};
use crate::rate_limits::Bucket;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/devices/self/jobs/{id}/context",
            context,
            Access::Lease,
            "Ask for more of a run's context",
        )
        .body::<ContextRequest>()
        .answer::<ContextAnswer>(
            200,
            "Plain text from the job's account, at most 20,000 characters (a cut answer \
             ends with a line saying so).",
        )
        .errors(&[400, 404, 409, 413, 415, 422, 429]);
}

async fn context(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    job_id: web::Path<JobId>,
    lease: Lease,
    params: web::Json<ContextRequest>,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Context, device.device_id.as_str())?;
    let question = Question::try_from(params.into_inner())?;
    let answer = context_answers::answer(&state.store, &device, &job_id, &lease.0, question);
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(answer.await?))
}
