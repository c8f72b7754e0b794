//! `POST|GET /api/devices/{id}/secrets` for the owner and
//! `POST /api/devices/self/secret-deliveries/{id}` for the device: the relay of sealed boxes.

use actix_web::{web, HttpResponse};
use tether_protocol::secrets::{
    DeliveryAnswer, SecretsListing, SendSecretParams, SendSecretResponse,
};
use tether_protocol::{DeliveryId, DeviceId};

use super::table::{Access, Table};
use crate::auth::Caller;
use crate::devices::secrets::{self, DeliveryOutcome, NewDelivery};
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/devices/self/secret-deliveries/{id}",
            answer,
            Access::Device,
            "Report a delivery",
        )
        .body::<DeliveryAnswer>()
        .answer_object(200, "Recorded; the box is dropped.")
        .errors(&[400, 404, 409, 413, 415, 422]);
    table
        .get(
            "/api/devices/{id}/secrets",
            list,
            Access::User,
            "Saved names and deliveries",
        )
        .answer::<SecretsListing>(200, "Names and delivery states, never a value.")
        .errors(&[400, 404]);
    table
        .post(
            "/api/devices/{id}/secrets",
            send,
            Access::User,
            "Send a sealed secret",
        )
        .body::<SendSecretParams>()
        .answer::<SendSecretResponse>(202, "Kept until the computer takes it.")
        .errors(&[400, 404, 409, 413, 415, 422]);
}

async fn send(
    state: web::Data<AppState>,
    caller: Caller,
    device_id: web::Path<DeviceId>,
    params: web::Json<SendSecretParams>,
) -> Result<HttpResponse, ApiError> {
    let delivery = NewDelivery::try_from(params.into_inner())?;
    let accepted = secrets::send(&state.store, &caller.account.id, &device_id, delivery).await?;
    state.notices.secret_sent(&device_id, accepted.frame).await;
    Ok(HttpResponse::Accepted().json(SendSecretResponse {
        delivery_id: accepted.delivery_id,
    }))
}

async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    device_id: web::Path<DeviceId>,
) -> Result<HttpResponse, ApiError> {
    let listing = secrets::list(&state.store, &caller.account.id, &device_id).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(listing))
}

async fn answer(
    state: web::Data<AppState>,
    device: DeviceIdentity,
    delivery_id: web::Path<String>,
    params: web::Json<DeliveryAnswer>,
) -> Result<HttpResponse, ApiError> {
    // A path that is no delivery id names no delivery: the same 404 as an unknown one.
    let delivery_id =
        DeliveryId::parse(&delivery_id).map_err(|_| ApiError::not_found("secret delivery"))?;
    let outcome = DeliveryOutcome::from(params.into_inner());
    secrets::answer(&state.store, &device, &delivery_id, outcome).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({})))
}
