//! Device routes under `/api/devices/self` (device token, `x-tether-protocol: 1`).

use actix_web::{web, HttpRequest, HttpResponse};
use tether_protocol::devices::HeartbeatParams;
use tether_protocol::frames::ServerFrame;
use tether_protocol::jobs::{
    ClaimResponse, CompleteParams, JobResponse, ProgressParams, ReattachParams, ResumeParams,
};
use tether_protocol::routes::LEASE_HEADER;
use tether_protocol::{Code, JobId};

use crate::auth::DeviceCaller;
use crate::error::ApiError;
use crate::rate_limits::Bucket;
use crate::{devices, leases, AppState};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/api/devices/self")
            .route(web::get().to(describe))
            .route(web::delete().to(remove)),
    )
    .service(web::resource("/api/devices/self/heartbeat").route(web::post().to(heartbeat)))
    .service(web::resource("/api/devices/self/claim").route(web::post().to(claim)))
    .service(web::resource("/api/devices/self/jobs/{id}/progress").route(web::post().to(progress)))
    .service(web::resource("/api/devices/self/jobs/{id}/complete").route(web::post().to(complete)))
    .service(web::resource("/api/devices/self/jobs/{id}/reattach").route(web::post().to(reattach)))
    .service(web::resource("/api/devices/self/jobs/{id}/resume").route(web::post().to(resume)));
}

async fn describe(device: DeviceCaller) -> HttpResponse {
    HttpResponse::Ok().json(devices::describe_self(&device))
}

async fn remove(
    state: web::Data<AppState>,
    device: DeviceCaller,
) -> Result<HttpResponse, ApiError> {
    devices::remove_self(&state.store, &device).await?;
    state
        .hub
        .notify(&device.device_id, ServerFrame::DeviceRevoked)
        .await;
    // Its runs ended, withdrawing what they had asked.
    super::decisions::withdrawn(&state, &device.account_id).await;
    state
        .hub
        .wake_queued(&state.store, &device.account_id)
        .await;
    Ok(HttpResponse::NoContent().finish())
}

async fn heartbeat(
    state: web::Data<AppState>,
    device: DeviceCaller,
    params: web::Json<HeartbeatParams>,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Heartbeat, device.device_id.as_str())?;
    let params = params.into_inner();
    let answer = leases::heartbeat(
        &state.store,
        &state.presence,
        &device,
        params,
        &state.config,
    )
    .await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// The body (`{}`) is ignored, so an agent may send none.
async fn claim(state: web::Data<AppState>, device: DeviceCaller) -> Result<HttpResponse, ApiError> {
    match leases::claim(&state.store, &device, &state.config).await? {
        Some(job) => Ok(HttpResponse::Ok()
            .insert_header(("cache-control", "no-store"))
            .json(ClaimResponse { job })),
        None => Ok(HttpResponse::NoContent().finish()),
    }
}

async fn progress(
    req: HttpRequest,
    state: web::Data<AppState>,
    device: DeviceCaller,
    job_id: web::Path<JobId>,
    params: web::Json<ProgressParams>,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Progress, device.device_id.as_str())?;
    let lease = lease_token(&req)?;
    let answer = leases::progress(
        &state.store,
        &device,
        &job_id,
        &lease,
        params.into_inner(),
        &state.config,
    )
    .await?;
    Ok(HttpResponse::Ok().json(answer))
}

async fn complete(
    req: HttpRequest,
    state: web::Data<AppState>,
    device: DeviceCaller,
    job_id: web::Path<JobId>,
    params: web::Json<CompleteParams>,
) -> Result<HttpResponse, ApiError> {
    let lease = lease_token(&req)?;
    let job = leases::complete(&state.store, &device, &job_id, &lease, params.into_inner()).await?;
    // Whatever the run still had pending was withdrawn with its end.
    if !job.decisions.is_empty() {
        super::decisions::withdrawn(&state, &device.account_id).await;
    }
    // The run's slot of the account's concurrent-run limit is free again.
    state
        .hub
        .wake_queued(&state.store, &device.account_id)
        .await;
    Ok(HttpResponse::Ok().json(JobResponse { job }))
}

async fn reattach(
    state: web::Data<AppState>,
    device: DeviceCaller,
    job_id: web::Path<JobId>,
    params: web::Json<ReattachParams>,
) -> Result<HttpResponse, ApiError> {
    let grant = leases::reattach(
        &state.store,
        &device,
        &job_id,
        params.into_inner(),
        &state.config,
    )
    .await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(grant))
}

async fn resume(
    state: web::Data<AppState>,
    device: DeviceCaller,
    job_id: web::Path<JobId>,
    params: web::Json<ResumeParams>,
) -> Result<HttpResponse, ApiError> {
    let job = leases::resume(
        &state.store,
        &device,
        &job_id,
        params.into_inner(),
        &state.config,
    )
    .await?;
    // The lost attempt's pending decisions were withdrawn.
    super::decisions::withdrawn(&state, &device.account_id).await;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(ClaimResponse { job }))
}

pub(super) fn lease_token(req: &HttpRequest) -> Result<String, ApiError> {
    req.headers()
        .get(LEASE_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidRequest,
                format!("This route needs the {LEASE_HEADER} header."),
            )
        })
}
