//! `POST|GET /api/tokens`, `DELETE /api/tokens/{id}`: API tokens for scripts
//! (`Authorization: Bearer tut_…`). Only a browser session makes tokens: a token cannot
//! make more of itself.

use actix_web::{web, HttpResponse};
use tether_protocol::auth::{Me, NewTokenParams};
use tether_protocol::{Code, TokenId};

use crate::accounts::api_tokens::{self, NewApiToken};
use crate::auth::{Caller, Via};
use crate::error::ApiError;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/api/tokens")
            .route(web::post().to(create))
            .route(web::get().to(list)),
    )
    .service(web::resource("/api/tokens/{id}").route(web::delete().to(revoke)));
}

async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<NewTokenParams>,
) -> Result<HttpResponse, ApiError> {
    if caller.via != Via::Session {
        return Err(ApiError::new(
            Code::Forbidden,
            "An API token cannot make tokens; make one on the Account page, signed in.",
        ));
    }
    let new = NewApiToken::try_from(params.into_inner())?;
    let me = Me {
        user: caller.user,
        account: caller.account,
    };
    let created = api_tokens::create(&state.store, &me, new).await?;
    Ok(HttpResponse::Created()
        .insert_header(("cache-control", "no-store"))
        .json(created))
}

async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let tokens = api_tokens::list(&state.store, &caller.account.id, &caller.user.id).await?;
    Ok(HttpResponse::Ok().json(tokens))
}

async fn revoke(
    state: web::Data<AppState>,
    caller: Caller,
    token_id: web::Path<TokenId>,
) -> Result<HttpResponse, ApiError> {
    api_tokens::revoke(&state.store, &caller.account.id, &caller.user.id, &token_id).await?;
    Ok(HttpResponse::NoContent().finish())
}
