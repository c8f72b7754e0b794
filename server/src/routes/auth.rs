//! `POST /api/auth/signup|login|logout`, `GET /api/me`. Sign-up and sign-in are limited per
//! client address (the `signup` and `login` buckets); sign-in also per email, in
//! `accounts::login`. Before a session exists there is no CSRF token, so both refuse a
//! cross-site form by its `Origin`, compared with the host the request was addressed to
//! (`links::request_origin`: a forwarded host only from a trusted proxy).

use actix_web::cookie::time::Duration;
use actix_web::cookie::{Cookie, SameSite};
use actix_web::{web, HttpRequest, HttpResponse, HttpResponseBuilder};
use tether_protocol::auth::{LoginParams, LoginResponse, Me, SignupParams};
use tether_protocol::routes::CSRF_HEADER;
use tether_protocol::Code;

use super::client::client_address;
use super::links::request_origin;
use super::table::{Access, Table};
use crate::accounts::{self, LoginAttempt, NewSession, NewUser, SESSION_SECS};
use crate::auth::{Caller, Via, CSRF_COOKIE, SESSION_COOKIE};
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
    let (me, session) = accounts::signup(&state.store, &state.passwords, new_user).await?;
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
    let (me, session) = accounts::login(&state.store, &state.passwords, attempt).await?;
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
