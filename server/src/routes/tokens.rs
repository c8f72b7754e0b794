//! `POST /api/tokens`: API tokens for scripts (`Authorization: Bearer tut_…`).

use actix_web::{web, HttpResponse};
use tether_protocol::auth::{Me, NewTokenParams};

use crate::accounts::{self, NewApiToken};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/api/tokens").route(web::post().to(create)));
}

async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<NewTokenParams>,
) -> Result<HttpResponse, ApiError> {
    let me = Me {
        user: caller.user,
        account: caller.account,
    };
    let new = NewApiToken::try_from(params.into_inner())?;
    let created = accounts::create_api_token(&state.store, &me, new).await?;
    Ok(HttpResponse::Created()
        .insert_header(("cache-control", "no-store"))
        .json(created))
}
