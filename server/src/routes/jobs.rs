//! `POST|GET /api/jobs`, `GET /api/jobs/{id}`, `POST /api/jobs/{id}/cancel`.

use actix_web::{web, HttpResponse};
use serde::Deserialize;
use tether_protocol::frames::ServerFrame;
use tether_protocol::jobs::{JobResponse, JobState, NewJobParams};
use tether_protocol::{DeviceId, JobId};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::{self, JobFilter, NewJob};
use crate::{notices, AppState};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/api/jobs")
            .route(web::post().to(create))
            .route(web::get().to(list)),
    )
    .service(web::resource("/api/jobs/{id}").route(web::get().to(get)))
    .service(web::resource("/api/jobs/{id}/cancel").route(web::post().to(cancel)));
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
    state.hub.notify(&job.device_id, ServerFrame::Wake).await;
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
    let job = jobs::get(&state.store, &caller.account.id, &job_id).await?;
    Ok(HttpResponse::Ok().json(job))
}

async fn cancel(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
) -> Result<HttpResponse, ApiError> {
    let job = jobs::cancel(&state.store, &caller.account.id, &job_id).await?;
    if job.cancel_requested && matches!(job.state, JobState::Running | JobState::Waiting) {
        let frame = ServerFrame::JobCancel {
            job_id: job.id.clone(),
        };
        state.hub.notify(&job.device_id, frame).await;
    }
    // A cancel withdraws what the run still had pending.
    if !job.decisions.is_empty() {
        notices::decisions_withdrawn(&state.hub, &caller.account.id).await;
    }
    Ok(HttpResponse::Ok().json(JobResponse { job }))
}
