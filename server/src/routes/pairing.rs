//! `POST /api/devices/pair`, `/register` (agents, no token) and `/link` (signed-in web).

use actix_web::{web, HttpRequest, HttpResponse};
use tether_protocol::pairing::{
    LinkParams, LinkedDevice, PairParams, PairResponse, RegisterParams, RegisterResponse,
};

use super::client::client_address;
use super::links::public_base;
use super::table::{Access, Table};
use crate::auth::{check_protocol, Caller};
use crate::devices::pairing::{self, NewPairing};
use crate::error::ApiError;
use crate::rate_limits::Bucket;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/devices/pair",
            pair,
            Access::Agent,
            "Ask for a code pair",
        )
        .body::<PairParams>()
        .answer::<PairResponse>(201, "The device code and the code the person enters.")
        .errors(&[400, 413, 415, 422, 429]);
    table
        .post(
            "/api/devices/register",
            register,
            Access::Agent,
            "Redeem a linked code",
        )
        .body::<RegisterParams>()
        .answer::<RegisterResponse>(200, "The device token, once.")
        .errors(&[400, 413, 415, 422, 429]);
    table
        .post(
            "/api/devices/link",
            link,
            Access::User,
            "Approve a pairing code",
        )
        .idempotent()
        .body::<LinkParams>()
        .answer::<LinkedDevice>(200, "The computer that was paired.")
        .errors(&[400, 404, 413, 415, 422, 429]);
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
    let base = public_base(&req, &state.config);
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
