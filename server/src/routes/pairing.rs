//! `POST /api/devices/pair`, `/register` (agents, no token) and `/link` (signed-in web).

use actix_web::{web, HttpRequest, HttpResponse};
use tether_protocol::pairing::{LinkParams, PairParams, RegisterParams};

use super::client::client_address;
use super::links::public_base;
use crate::auth::{check_protocol, Caller};
use crate::devices::pairing::{self, NewPairing};
use crate::error::ApiError;
use crate::rate_limits::Bucket;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/api/devices/pair").route(web::post().to(pair)))
        .service(web::resource("/api/devices/register").route(web::post().to(register)))
        .service(web::resource("/api/devices/link").route(web::post().to(link)));
}

async fn pair(
    req: HttpRequest,
    state: web::Data<AppState>,
    params: web::Json<PairParams>,
) -> Result<HttpResponse, ApiError> {
    check_protocol(&req)?;
    state
        .limits
        .check(Bucket::Pairing, &client_address(&req, &state.config))?;
    let pairing = NewPairing::try_from(params.into_inner())?;
    let base = public_base(&req, state.config.public_url.as_deref());
    let answer = pairing::start(&state.store, pairing, &base, &state.config).await?;
    Ok(HttpResponse::Created()
        .insert_header(("cache-control", "no-store"))
        .json(answer))
}

async fn register(
    req: HttpRequest,
    state: web::Data<AppState>,
    params: web::Json<RegisterParams>,
) -> Result<HttpResponse, ApiError> {
    check_protocol(&req)?;
    state
        .limits
        .check(Bucket::Register, &client_address(&req, &state.config))?;
    let answer = pairing::register(&state.store, &params.device_code).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(answer))
}

async fn link(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<LinkParams>,
) -> Result<HttpResponse, ApiError> {
    state
        .limits
        .check(Bucket::Link, caller.account.id.as_str())?;
    let linked = pairing::link(&state.store, &caller.account.id, &params.user_code).await?;
    state.notices.device_paired_again(&linked.device_id).await;
    Ok(HttpResponse::Ok().json(linked))
}
