//! Device routes under `/api/devices/self` (device token, `x-tether-protocol: 1`).

use actix_web::{web, HttpResponse};
use tether_protocol::devices::{DeviceSelf, HeartbeatParams, HeartbeatResponse};
use tether_protocol::jobs::{
    ClaimResponse, CompleteParams, JobResponse, LeaseGrant, ProgressParams, ProgressResponse,
    ReattachParams, ResumeParams,
};
use tether_protocol::JobId;

use super::lease::Lease;
use super::table::{Access, Table};
use crate::devices::{self, DeviceIdentity};
use crate::error::ApiError;
use crate::jobs::leases::{self, Completion, Heartbeat, ProgressReport};
use crate::rate_limits::Bucket;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .get("/api/devices/self", describe, Access::Device, "This device")
        .answer::<DeviceSelf>(200, "Its id, name and account.")
        .errors(&[400]);
    table
        .delete(
            "/api/devices/self",
            remove,
            Access::Device,
            "Remove this device",
        )
        .empty(204, "Removed.")
        .errors(&[400]);
    table
        .post(
            "/api/devices/self/heartbeat",
            heartbeat,
            Access::Device,
            "Report and extend leases",
        )
        .body::<HeartbeatParams>()
        .answer::<HeartbeatResponse>(200, "Leases extended, lost runs, queued work.")
        .errors(&[400, 413, 415, 422, 429]);
    table
        .post(
            "/api/devices/self/claim",
            claim,
            Access::Device,
            "Claim queued work",
        )
        .answer::<ClaimResponse>(200, "A job under a new lease.")
        .empty(204, "Nothing queued for this device.")
        .errors(&[400, 429]);
    table
        .post(
            "/api/devices/self/jobs/{id}/progress",
            progress,
            Access::Lease,
            "Report output",
        )
        .body::<ProgressParams>()
        .answer::<ProgressResponse>(200, "The lease, extended.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    table
        .post(
            "/api/devices/self/jobs/{id}/complete",
            complete,
            Access::Lease,
            "End a run",
        )
        .body::<CompleteParams>()
        .answer::<JobResponse>(200, "The finished job.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    table
        .post(
            "/api/devices/self/jobs/{id}/reattach",
            reattach,
            Access::Device,
            "Take back a run after an outage",
        )
        .body::<ReattachParams>()
        .answer::<LeaseGrant>(200, "A new lease for the same attempt.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    table
        .post(
            "/api/devices/self/jobs/{id}/resume",
            resume,
            Access::Device,
            "Carry on a run lost to a restart",
        )
        .body::<ResumeParams>()
        .answer::<ClaimResponse>(200, "A new attempt in the same folder.")
        .errors(&[400, 404, 409, 413, 415, 422]);
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
    let streaming = state.hub.holds_stream(&device.device_id);
    let answer = leases::heartbeat(
        &state.store,
        &state.presence,
        &device,
        beat,
        streaming,
        &state.config,
    )
    .await?;
    Ok(HttpResponse::Ok().json(answer))
}

/// The body (`{}`) is ignored, so an agent may send none.
async fn claim(
    state: web::Data<AppState>,
    device: DeviceIdentity,
) -> Result<HttpResponse, ApiError> {
    match leases::claim(
        &state.store,
        &state.claim_gates,
        &state.presence,
        &device,
        &state.config,
    )
    .await?
    {
        Some(job) => {
            state.notices.job_changed(&job.id).await;
            Ok(HttpResponse::Ok()
                .insert_header(("cache-control", "no-store"))
                .json(ClaimResponse { job }))
        }
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
    let progressed = leases::progress(
        &state.store,
        &device,
        &job_id,
        &lease,
        report,
        &state.config,
    )
    .await?;
    if let Some(lines) = progressed.lines {
        state.notices.lines_appended(&job_id, lines).await;
    }
    Ok(HttpResponse::Ok().json(progressed.answer))
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
    state.notices.job_changed(&job_id).await;
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
    state.notices.run_resumed(&device.account_id, &job_id).await;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(ClaimResponse { job }))
}
