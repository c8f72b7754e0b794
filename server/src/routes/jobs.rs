//! `POST|GET /api/jobs`, `GET /api/jobs/{id}`, `POST /api/jobs/{id}/cancel`,
//! `POST /api/jobs/{id}/rerun`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use tether_protocol::jobs::{Job, JobResponse, JobState, NewJobParams, RerunParams};
use tether_protocol::{DeviceId, JobId};

use super::input::optional_json;
use super::table::{Access, Table};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::{self, JobFilter, NewJob};
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post("/api/jobs", create, Access::User, "Assign a job")
        .idempotent()
        .body::<NewJobParams>()
        .answer::<Job>(201, "The queued job.")
        .errors(&[400, 404, 413, 415, 422, 429]);
    table
        .get("/api/jobs", list, Access::User, "The account's jobs")
        .query("deviceId", "Only this computer's jobs.")
        .query("state", "Only jobs in this state.")
        .answer_list::<Job>(200, "Newest first.")
        .errors(&[400, 422]);
    table
        .get("/api/jobs/{id}", get, Access::User, "One job")
        .answer::<Job>(
            200,
            "The job with its events, decisions and evidence; for a member of its space, \
             the space view (`sharedView`).",
        )
        .errors(&[400, 404]);
    table
        .post(
            "/api/jobs/{id}/cancel",
            cancel,
            Access::User,
            "Cancel a job",
        )
        .answer::<JobResponse>(200, "Cancelled, or cancel requested from its computer.")
        .errors(&[400, 404, 409]);
    table
        .post(
            "/api/jobs/{id}/rerun",
            rerun,
            Access::User,
            "Run a finished job again",
        )
        .idempotent()
        .body::<RerunParams>()
        .answer::<Job>(
            201,
            "The new job, with the earlier job's settings except those given.",
        )
        .errors(&[400, 404, 409, 413, 415, 422, 429]);
}

/// `?deviceId=&state=`, both optional; empty means no filter.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    device_id: Option<String>,
    state: Option<String>,
}

impl TryFrom<ListQuery> for JobFilter {
    type Error = ApiError;
    fn try_from(query: ListQuery) -> Result<JobFilter, ApiError> {
        let device_id = match query.device_id.filter(|raw| !raw.is_empty()) {
            Some(raw) => Some(
                DeviceId::parse(&raw)
                    .map_err(|_| ApiError::invalid_field("deviceId", "is not a device id."))?,
            ),
            None => None,
        };
        let state = match query.state.filter(|raw| !raw.is_empty()) {
            Some(raw) => Some(JobState::parse(&raw).ok_or_else(|| {
                ApiError::invalid_field("state", "must be a job state such as queued or running.")
            })?),
            None => None,
        };
        Ok(JobFilter { device_id, state })
    }
}

async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<NewJobParams>,
) -> Result<HttpResponse, ApiError> {
    let new = NewJob::try_from(params.into_inner())?;
    let job = jobs::create(&state.store, &caller.account.id, new).await?;
    state.notices.job_queued(&job.device_id).await;
    Ok(HttpResponse::Created().json(job))
}

async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let filter = JobFilter::try_from(query.into_inner())?;
    let jobs = jobs::list(&state.store, &caller.account.id, filter).await?;
    Ok(HttpResponse::Ok().json(jobs))
}

async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
) -> Result<HttpResponse, ApiError> {
    // A member of the job's space gets the space view (docs/SPACES.md).
    let (mut job, owner) = jobs::get_visible(&state.store, &caller.account.id, &job_id).await?;
    job.queued_because = jobs::queue_reason(&state.store, &state.config, &owner, &job).await?;
    Ok(HttpResponse::Ok().json(job))
}

async fn rerun(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // The body is optional (a plain re-run), but one that is there must be JSON and parse.
    let params: RerunParams = optional_json(&req, &body)?;
    let job = jobs::rerun(&state.store, &caller.account.id, &job_id, params).await?;
    state.notices.job_queued(&job.device_id).await;
    Ok(HttpResponse::Created().json(job))
}

async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
) -> Result<HttpResponse, ApiError> {
    let job = jobs::cancel(&state.store, &caller.account.id, &job_id).await?;
    state.notices.job_cancelled(&caller.account.id, &job).await;
    Ok(HttpResponse::Ok().json(JobResponse { job }))
}
