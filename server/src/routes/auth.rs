//! `POST /api/auth/signup|login|logout`, `GET /api/me`, and a person's own security: `POST
//! /api/auth/password`, `GET /api/auth/sessions`, `DELETE /api/auth/sessions/{id}`, `POST
//! /api/auth/sessions/end-others` (browser sessions only: an API token is 403). Sign-up and
//! sign-in are limited per client address (the `signup` and `login` buckets); sign-in and a
//! password change also per email, in `accounts`. Before a session exists there is no CSRF token, so both refuse a
//! cross-site form by its `Origin`, compared with the host the request was addressed to
//! (`links::request_origin`: a forwarded host only from a trusted proxy).

use actix_web::cookie::time::Duration;
use actix_web::cookie::{Cookie, SameSite};
use actix_web::{web, HttpRequest, HttpResponse, HttpResponseBuilder};
use tether_protocol::auth::{
    ChangePasswordParams, LoginParams, LoginResponse, Me, Session, SignupParams,
};
use tether_protocol::routes::CSRF_HEADER;
use tether_protocol::{Code, SessionId};

use super::client::client_address;
use super::links::request_origin;
use super::table::{Access, Table};
use crate::accounts::password_change::{self, PasswordChange};
use crate::accounts::sessions;
use crate::accounts::{self, LoginAttempt, NewSession, NewUser, SESSION_SECS};
use crate::auth::{seen, Caller, Via, CSRF_COOKIE, SESSION_COOKIE};
use crate::config::Config;
use crate::error::ApiError;
use crate::rate_limits::Bucket;
use crate::state::AppState;

pub(super) fn routes(table: &mut Table) {
    table
        .post(
            "/api/auth/signup",
            signup,
            Access::Public,
            "Create an account and sign in",
        )
        .body::<SignupParams>()
        .answer::<Me>(201, "Signed up; the session cookie is set.")
        .errors(&[400, 403, 409, 413, 415, 422, 429, 503]);
    table
        .post("/api/auth/login", login, Access::Public, "Sign in")
        .body::<LoginParams>()
        .answer::<LoginResponse>(200, "Signed in; the session cookie is set.")
        .errors(&[400, 401, 403, 413, 415, 422, 429, 503]);
    table
        .post("/api/auth/logout", logout, Access::User, "Sign out")
        .empty(204, "Signed out.")
        .errors(&[]);
    table
        .get("/api/me", me, Access::User, "Who is signed in")
        .answer::<Me>(200, "The caller and their account.")
        .errors(&[]);
    table
        .post(
            "/api/auth/password",
            change_password,
            Access::User,
            "Change the password (browser session only: 403 for a token)",
        )
        .body::<ChangePasswordParams>()
        .empty(
            204,
            "Changed; every other session ended, and the API tokens too unless kept.",
        )
        .errors(&[401, 403, 413, 415, 422, 429]);
    table
        .get(
            "/api/auth/sessions",
            list_sessions,
            Access::User,
            "The caller's browser sessions (browser session only: 403 for a token)",
        )
        .answer_list::<Session>(
            200,
            "The most recently used first; the caller's is `current`.",
        )
        .errors(&[]);
    table
        .post(
            "/api/auth/sessions/end-others",
            end_other_sessions,
            Access::User,
            "Sign out everywhere else (browser session only: 403 for a token)",
        )
        .empty(
            204,
            "Every other session ended: each answers 401 from now on.",
        )
        .errors(&[]);
    table
        .delete(
            "/api/auth/sessions/{id}",
            end_session,
            Access::User,
            "End a session (browser session only: 403 for a token)",
        )
        .empty(204, "Ended: it answers 401 from now on.")
        .errors(&[400, 404]);
}

async fn signup(
    req: HttpRequest,
    state: web::Data<AppState>,
    params: web::Json<SignupParams>,
) -> Result<HttpResponse, ApiError> {
    check_origin(&req, &state.config)?;
    state
        .limits
        .check(Bucket::Signup, &client_address(&req, &state.config))?;
    let new_user = NewUser::try_from(params.into_inner())?;
    let seen = seen(&req, &state.config);
    let (me, session) = accounts::signup(&state.store, &state.passwords, new_user, &seen).await?;
    Ok(with_session(HttpResponse::Created(), &session, &state.config).json(me))
}

async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    params: web::Json<LoginParams>,
) -> Result<HttpResponse, ApiError> {
    check_origin(&req, &state.config)?;
    state
        .limits
        .check(Bucket::Login, &client_address(&req, &state.config))?;
    let attempt = LoginAttempt::from(params.into_inner());
    let seen = seen(&req, &state.config);
    let (me, session) = accounts::login(&state.store, &state.passwords, attempt, &seen).await?;
    let answer = LoginResponse { user: me.user };
    Ok(with_session(HttpResponse::Ok(), &session, &state.config).json(answer))
}

async fn logout(
    req: HttpRequest,
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    if caller.via == Via::Session {
        if let Some(cookie) = req.cookie(SESSION_COOKIE) {
            accounts::logout(&state.store, cookie.value()).await?;
        }
    }
    let mut answer = HttpResponse::NoContent();
    answer
        .cookie(removal(SESSION_COOKIE))
        .cookie(removal(CSRF_COOKIE));
    Ok(answer.finish())
}

async fn change_password(
    state: web::Data<AppState>,
    caller: Caller,
    params: web::Json<ChangePasswordParams>,
) -> Result<HttpResponse, ApiError> {
    let keep = caller.require_session()?.clone();
    let change = PasswordChange::try_from(params.into_inner())?;
    let me = Me {
        user: caller.user,
        account: caller.account,
    };
    password_change::change_password(&state.store, &state.passwords, &me, &keep, change).await?;
    state.notices.sessions_ended(&me.account.id).await;
    state.notices.api_tokens_changed(&me.user.id).await;
    Ok(HttpResponse::NoContent().finish())
}

async fn list_sessions(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let current = caller.require_session()?;
    let list = sessions::list(
        &state.store,
        &caller.account.id,
        &caller.user.id,
        Some(current),
    )
    .await?;
    Ok(HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .json(list))
}

async fn end_other_sessions(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let keep = caller.require_session()?;
    sessions::end_others(&state.store, &caller.account.id, &caller.user.id, keep).await?;
    state.notices.sessions_ended(&caller.account.id).await;
    Ok(HttpResponse::NoContent().finish())
}

/// Ending the caller's own session signs this browser out too.
async fn end_session(
    state: web::Data<AppState>,
    caller: Caller,
    session_id: web::Path<SessionId>,
) -> Result<HttpResponse, ApiError> {
    let current = caller.require_session()?;
    sessions::end(
        &state.store,
        &caller.account.id,
        &caller.user.id,
        &session_id,
    )
    .await?;
    state.notices.sessions_ended(&caller.account.id).await;
    let mut answer = HttpResponse::NoContent();
    if *current == *session_id {
        answer
            .cookie(removal(SESSION_COOKIE))
            .cookie(removal(CSRF_COOKIE));
    }
    Ok(answer.finish())
}

async fn me(caller: Caller) -> HttpResponse {
    let mut answer = HttpResponse::Ok();
    if let Some(csrf) = &caller.csrf_token {
        answer.insert_header((CSRF_HEADER, csrf.as_str()));
    }
    answer.json(Me {
        user: caller.user,
        account: caller.account,
    })
}

/// A cross-site form is refused by its `Origin`.
///
/// # Errors
/// 403 `csrf_rejected` when `Origin` is present and names another host.
fn check_origin(req: &HttpRequest, config: &Config) -> Result<(), ApiError> {
    let Some(origin) = req.headers().get("origin") else {
        return Ok(());
    };
    let host = request_origin(req, config).host.to_ascii_lowercase();
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|origin| origin.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/').to_ascii_lowercase());
    if origin_host.as_deref() == Some(host.as_str()) {
        Ok(())
    } else {
        Err(ApiError::new(
            Code::CsrfRejected,
            "Cross-site requests are refused.",
        ))
    }
}

/// Sets the session cookie (HttpOnly) and the readable CSRF cookie, and sends the CSRF token
/// in the `x-tether-csrf` header for API clients.
fn with_session(
    mut builder: HttpResponseBuilder,
    session: &NewSession,
    config: &Config,
) -> HttpResponseBuilder {
    let max_age = Duration::seconds(i64::try_from(SESSION_SECS).unwrap_or(i64::MAX));
    let session_cookie = Cookie::build(SESSION_COOKIE, session.token.clone())
        .http_only(true)
        .same_site(SameSite::Lax)
        .path("/")
        .secure(config.secure_cookies())
        .max_age(max_age)
        .finish();
    let csrf_cookie = Cookie::build(CSRF_COOKIE, session.csrf_token.clone())
        .same_site(SameSite::Lax)
        .path("/")
        .secure(config.secure_cookies())
        .max_age(max_age)
        .finish();
    builder
        .cookie(session_cookie)
        .cookie(csrf_cookie)
        .insert_header((CSRF_HEADER, session.csrf_token.as_str()))
        .insert_header(("cache-control", "no-store"));
    builder
}

fn removal(name: &'static str) -> Cookie<'static> {
    let mut cookie = Cookie::build(name, "").path("/").finish();
    cookie.make_removal();
    cookie
}
