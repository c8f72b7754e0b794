//! `GET /api/devices`, `PATCH|DELETE /api/devices/{id}` for the signed-in owner.

use actix_web::{web, HttpResponse};
use tether_protocol::devices::{Device, RenameParams};
use tether_protocol::DeviceId;

use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::{self, DeviceName};
use crate::error::ApiError;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/devices",
            list,
            Access::User,
            "The account's computers",
        )
        .answer_list::<Device>(200, "Every computer of the account.")
        .errors(&[]);
    table
        .patch(
            "/api/devices/{id}",
            rename,
            Access::User,
            "Rename a computer",
        )
        .body::<RenameParams>()
        .answer::<Device>(200, "The renamed computer.")
        .errors(&[400, 404, 413, 415, 422]);
    table
        .delete(
            "/api/devices/{id}",
            revoke,
            Access::User,
            "Revoke a computer",
        )
        .empty(204, "Revoked: its token answers 401 from now on.")
        .errors(&[400, 404]);
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
