//! `GET /api/devices`, `PATCH|DELETE /api/devices/{id}` for the signed-in owner.

use actix_web::{web, HttpResponse};
use tether_protocol::devices::RenameParams;
use tether_protocol::DeviceId;

use crate::auth::Caller;
use crate::devices::{self, DeviceName};
use crate::error::ApiError;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/api/devices").route(web::get().to(list)))
        .service(
            web::resource("/api/devices/{id}")
                .route(web::patch().to(rename))
                .route(web::delete().to(revoke)),
        );
}

async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let devices = devices::list(&state.store, &caller.account.id, &state.config).await?;
    Ok(HttpResponse::Ok().json(devices))
}

async fn rename(
    state: web::Data<AppState>,
    caller: Caller,
    device_id: web::Path<DeviceId>,
    params: web::Json<RenameParams>,
) -> Result<HttpResponse, ApiError> {
    let name = DeviceName::try_from(params.into_inner())?;
    let account_id = &caller.account.id;
    let device = devices::rename(&state.store, account_id, &device_id, name, &state.config).await?;
    Ok(HttpResponse::Ok().json(device))
}

async fn revoke(
    state: web::Data<AppState>,
    caller: Caller,
    device_id: web::Path<DeviceId>,
) -> Result<HttpResponse, ApiError> {
    devices::revoke(&state.store, &caller.account.id, &device_id).await?;
    state
        .notices
        .device_gone(&caller.account.id, &device_id)
        .await;
    Ok(HttpResponse::NoContent().finish())
}
