//! `POST|GET /api/devices/{id}/secrets` for the owner and
//! `POST /api/devices/self/secret-deliveries/{id}` for the device: the relay of sealed boxes.

use actix_web::{web, HttpResponse};
use tether_protocol::secrets::{DeliveryAnswer, SendSecretParams, SendSecretResponse};
use tether_protocol::{DeliveryId, DeviceId};

use crate::auth::Caller;
use crate::devices::secrets::{self, DeliveryOutcome, NewDelivery};
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/api/devices/self/secret-deliveries/{id}").route(web::post().to(answer)),
    )
    .service(
        web::resource("/api/devices/{id}/secrets")
            .route(web::get().to(list))
            .route(web::post().to(send)),
    );
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
