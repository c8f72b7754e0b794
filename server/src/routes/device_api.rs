//! Device routes under `/api/devices/self` (device token, `x-tether-protocol: 1`).

use actix_web::{web, HttpResponse};
use tether_protocol::devices::HeartbeatParams;
use tether_protocol::jobs::{
    ClaimResponse, CompleteParams, JobResponse, ProgressParams, ReattachParams, ResumeParams,
};
use tether_protocol::JobId;

use super::lease::Lease;
use crate::devices::{self, DeviceIdentity};
use crate::error::ApiError;
use crate::jobs::leases::{self, Completion, Heartbeat, ProgressReport};
use crate::rate_limits::Bucket;
use crate::state::AppState;

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

async fn describe(device: DeviceIdentity) -> HttpResponse {
    HttpResponse::Ok().json(devices::describe_self(&device))
}

async fn remove(
    state: web::Data<AppState>,
    device: DeviceIdentity,
) -> Result<HttpResponse, ApiError> {
    devices::remove_self(&state.store, &device).await?;
    state
        .notices
        .device_gone(&device.account_id, &device.device_id)
        .await;
    Ok(HttpResponse::NoContent().finish())
}

async fn heartbeat(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    params: web::Json<HeartbeatParams>,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Heartbeat, device.device_id.as_str())?;
    let beat = Heartbeat::try_from(params.into_inner())?;
    let answer =
        leases::heartbeat(&state.store, &state.presence, &device, beat, &state.config).await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// The body (`{}`) is ignored, so an agent may send none.
async fn claim(
    state: web::Data<AppState>,
    device: DeviceIdentity,
) -> Result<HttpResponse, ApiError> {
    match leases::claim(&state.store, &state.claim_gates, &device, &state.config).await? {
        Some(job) => Ok(HttpResponse::Ok()
            .insert_header(("cache-control", "no-store"))
            .json(ClaimResponse { job })),
        None => Ok(HttpResponse::NoContent().finish()),
    }
}

async fn progress(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    job_id: web::Path<JobId>,
    params: web::Json<ProgressParams>,
    Lease(lease): Lease,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Progress, device.device_id.as_str())?;
    let report = ProgressReport::try_from(params.into_inner())?;
    let answer = leases::progress(
        &state.store,
        &device,
        &job_id,
        &lease,
        report,
        &state.config,
    )
    .await?;
    Ok(HttpResponse::Ok().json(answer))
}

async fn complete(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    job_id: web::Path<JobId>,
    params: web::Json<CompleteParams>,
    Lease(lease): Lease,
) -> Result<HttpResponse, ApiError> {
    let completion = Completion::try_from(params.into_inner())?;
    let completed = leases::complete(
        &state.store,
        &device,
        &job_id,
        &lease,
        completion,
        &state.config,
    )
    .await?;
    let job = completed.job;
    state
        .notices
        .run_ended(&device.account_id, &job, completed.end)
        .await;
    Ok(HttpResponse::Ok().json(JobResponse { job }))
}

async fn reattach(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    job_id: web::Path<JobId>,
    params: web::Json<ReattachParams>,
) -> Result<HttpResponse, ApiError> {
    let ReattachParams {
        attempt,
        lease_token,
    } = params.into_inner();
    let grant = leases::reattach(
        &state.store,
        &device,
        &job_id,
        attempt,
        &lease_token,
        &state.config,
    )
    .await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(grant))
}

async fn resume(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    job_id: web::Path<JobId>,
    params: web::Json<ResumeParams>,
) -> Result<HttpResponse, ApiError> {
    let ResumeParams { attempt } = params.into_inner();
    let job = leases::resume(&state.store, &device, &job_id, attempt, &state.config).await?;
    state.notices.run_resumed(&device.account_id).await;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(ClaimResponse { job }))
}
