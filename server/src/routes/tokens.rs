//! `POST|GET /api/tokens`, `DELETE /api/tokens/{id}`: API tokens for scripts
//! (`Authorization: Bearer tut_…`). Only a browser session makes tokens: a token cannot
//! make more of itself.

use actix_web::{web, HttpResponse};
use tether_protocol::auth::{ApiToken, CreatedToken, Me, NewTokenParams};
use tether_protocol::{Code, TokenId};

use super::table::{Access, Table};
use crate::accounts::api_tokens::{self, NewApiToken};
use crate::auth::{Caller, Via};
use crate::error::ApiError;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/tokens",
            create,
            Access::User,
            "Create an API token (browser session only: 403 for a token)",
        )
        .idempotent()
        .body::<NewTokenParams>()
        .answer::<CreatedToken>(201, "The token, shown this once.")
        .errors(&[400, 403, 413, 415, 422, 429]);
    table
        .get("/api/tokens", list, Access::User, "The caller's API tokens")
        .answer_list::<ApiToken>(
            200,
            "Newest first, expired ones included; never the token itself.",
        )
        .errors(&[]);
    table
        .delete(
            "/api/tokens/{id}",
            revoke,
            Access::User,
            "Revoke an API token",
        )
        .empty(204, "Revoked: it answers 401 from now on.")
        .errors(&[400, 404]);
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
    state.notices.api_tokens_changed(&caller.user.id).await;
    Ok(HttpResponse::NoContent().finish())
}
