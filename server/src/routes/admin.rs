//! `GET /api/admin/devices`, `DELETE /api/admin/devices/{id}`: platform admin only.

use actix_web::{web, HttpResponse};
use tether_protocol::devices::AdminDevice;
use tether_protocol::DeviceId;

use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices;
use crate::error::ApiError;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/admin/devices",
            list,
            Access::Admin,
            "Every account's computers",
        )
        .answer_list::<AdminDevice>(200, "All computers.")
        .errors(&[403]);
    table
        .delete(
            "/api/admin/devices/{id}",
            revoke,
            Access::Admin,
            "Revoke any computer",
        )
        .empty(204, "Revoked.")
        .errors(&[400, 403, 404]);
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
