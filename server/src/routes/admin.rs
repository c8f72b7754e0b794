//! `GET /api/admin/devices`, `DELETE /api/admin/devices/{id}`: platform admin only.

use actix_web::{web, HttpResponse};
use tether_protocol::DeviceId;

use crate::auth::Caller;
use crate::devices;
use crate::error::ApiError;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/api/admin/devices").route(web::get().to(list)))
        .service(web::resource("/api/admin/devices/{id}").route(web::delete().to(revoke)));
}

async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let devices = devices::admin_list(&state.store, &state.config).await?;
    Ok(HttpResponse::Ok().json(devices))
}

async fn revoke(
    state: web::Data<AppState>,
    caller: Caller,
    device_id: web::Path<DeviceId>,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let account_id = devices::admin_revoke(&state.store, &device_id).await?;
    state.notices.device_gone(&account_id, &device_id).await;
    Ok(HttpResponse::NoContent().finish())
}
