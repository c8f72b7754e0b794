//! Passkeys and the console unlock, for a person at a browser only (an API token is 403
//! `forbidden`; changes carry the CSRF header like every cookie-authenticated change):
//! `POST /api/account/passkeys/registrations`, `POST|GET /api/account/passkeys`,
//! `DELETE /api/account/passkeys/{id}`, `GET /api/console`,
//! `POST /api/console/unlock/challenges`, `POST /api/console/unlock`,
//! `POST /api/console/lock`.
//!
//! The relying party is the public URL when configured, else the origin the request was
//! addressed to (`links::public_base`); a server reached by an IP address has none (409
//! `invalid_state`, see `accounts::passkeys`).

use actix_web::{web, HttpRequest, HttpResponse};
use tether_protocol::auth::Me;
use tether_protocol::console::{
    CeremonyStarted, ConsoleStatus, Passkey, PasskeyList, PasskeyRegistration, UnlockAssertion,
};

use super::links::public_base;
use super::table::{Access, Table};
use crate::accounts::console_unlocks::{self, Assertion};
use crate::accounts::passkeys::{self, NewPasskey, RelyingParty};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/account/passkeys/registrations",
            start_registration,
            Access::User,
            "Start adding a passkey (browser session only: 403 for a token)",
        )
        .answer::<CeremonyStarted>(
            200,
            "The options for `navigator.credentials.create()`, valid five minutes, once.",
        )
        .errors(&[409]);
    table
        .post(
            "/api/account/passkeys",
            finish_registration,
            Access::User,
            "Add a passkey: the new credential of a registration (browser session only)",
        )
        .body::<PasskeyRegistration>()
        .answer::<Passkey>(201, "Added.")
        .errors(&[409, 422]);
    table
        .get(
            "/api/account/passkeys",
            list,
            Access::User,
            "The caller's passkeys (browser session only: 403 for a token)",
        )
        .answer::<PasskeyList>(200, "Oldest first.")
        .errors(&[]);
    table
        .delete(
            "/api/account/passkeys/{id}",
            remove,
            Access::User,
            "Remove a passkey; the console unlocks it opened end (browser session only)",
        )
        .empty(204, "Removed.")
        .errors(&[404]);
    table
        .get(
            "/api/console",
            status,
            Access::User,
            "Whether this browser session's console is unlocked (browser session only)",
        )
        .answer::<ConsoleStatus>(200, "This browser session's console.")
        .errors(&[]);
    table
        .post(
            "/api/console/unlock/challenges",
            start_unlock,
            Access::User,
            "Start unlocking this browser session's console with a passkey (browser session \
             only; 409 without a passkey)",
        )
        .answer::<CeremonyStarted>(
            200,
            "The options for `navigator.credentials.get()`, valid five minutes, once.",
        )
        .errors(&[409]);
    table
        .post(
            "/api/console/unlock",
            finish_unlock,
            Access::User,
            "Unlock this browser session's console: the passkey's assertion (browser session \
             only)",
        )
        .body::<UnlockAssertion>()
        .answer::<ConsoleStatus>(200, "Unlocked: 30 minutes idle, 8 hours at most.")
        .errors(&[409]);
    table
        .post(
            "/api/console/lock",
            lock,
            Access::User,
            "Lock this browser session's console now (browser session only)",
        )
        .answer::<ConsoleStatus>(200, "Locked (also when it was locked already).")
        .errors(&[]);
}

fn relying_party(req: &HttpRequest, state: &AppState) -> Result<RelyingParty, ApiError> {
    RelyingParty::for_origin(&public_base(req, &state.config))
}

fn no_store(mut answer: actix_web::HttpResponseBuilder) -> actix_web::HttpResponseBuilder {
    answer.insert_header(("cache-control", "no-store"));
    answer
}

async fn start_registration(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let session_id = caller.require_session()?.clone();
    let rp = relying_party(&req, &state)?;
    let me = Me {
        user: caller.user,
        account: caller.account,
    };
    let started = passkeys::start_registration(&state.store, &rp, &me, &session_id).await?;
    Ok(no_store(HttpResponse::Ok()).json(started))
}

async fn finish_registration(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<PasskeyRegistration>,
) -> Result<HttpResponse, ApiError> {
    let session_id = caller.require_session()?.clone();
    let new = NewPasskey::try_from(params.into_inner())?;
    let rp = relying_party(&req, &state)?;
    let me = Me {
        user: caller.user,
        account: caller.account,
    };
    let added = passkeys::finish_registration(&state.store, &rp, &me, &session_id, new).await?;
    Ok(no_store(HttpResponse::Created()).json(added))
}

async fn list(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    caller.require_session()?;
    let passkeys = passkeys::list(&state.store, &caller.account.id, &caller.user.id).await?;
    Ok(no_store(HttpResponse::Ok()).json(PasskeyList { passkeys }))
}

async fn remove(
    state: web::Data<AppState>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require_session()?;
    passkeys::remove(&state.store, &caller.account.id, &caller.user.id, &id).await?;
    Ok(HttpResponse::NoContent().finish())
}

async fn status(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let session_id = caller.require_session()?;
    let status = console_unlocks::status(
        &state.store,
        session_id,
        &caller.account.id,
        &caller.user.id,
    )
    .await?;
    Ok(no_store(HttpResponse::Ok()).json(status))
}

async fn start_unlock(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let session_id = caller.require_session()?;
    let rp = relying_party(&req, &state)?;
    let started = console_unlocks::start(
        &state.store,
        &rp,
        &caller.account.id,
        &caller.user.id,
        session_id,
    )
    .await?;
    Ok(no_store(HttpResponse::Ok()).json(started))
}

async fn finish_unlock(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<UnlockAssertion>,
) -> Result<HttpResponse, ApiError> {
    let session_id = caller.require_session()?;
    let assertion = Assertion::try_from(params.into_inner())?;
    let rp = relying_party(&req, &state)?;
    let status = console_unlocks::finish(
        &state.store,
        &rp,
        &caller.account.id,
        &caller.user.id,
        session_id,
        assertion,
    )
    .await?;
    Ok(no_store(HttpResponse::Ok()).json(status))
}

async fn lock(state: web::Data<AppState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let session_id = caller.require_session()?;
    let status = console_unlocks::lock(
        &state.store,
        session_id,
        &caller.account.id,
        &caller.user.id,
    )
    .await?;
    Ok(no_store(HttpResponse::Ok()).json(status))
}
