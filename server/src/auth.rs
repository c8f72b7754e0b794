//! Who is calling: the web [`Caller`] (session cookie or API token) and a paired device
//! (device token), extracted as the domain's [`DeviceIdentity`]. Handlers take one of
//! these, so they cannot skip authentication.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header::{HeaderName, FORWARDED, USER_AGENT};
use actix_web::http::Method;
use actix_web::{web, FromRequest, HttpRequest};
use tether_protocol::auth::{Account, User};
use tether_protocol::routes::{
    CSRF_HEADER, DEVICE_TOKEN_PREFIX, PROTOCOL_HEADER, USER_TOKEN_PREFIX,
};
use tether_protocol::{Code, SessionId, PROTOCOL_VERSION};

use crate::accounts::sessions::Seen;
use crate::accounts::{self, api_tokens};
use crate::config::Config;
use crate::credentials;
use crate::devices::{self, DeviceIdentity};
use crate::error::ApiError;
use crate::proxies::{client_ip, Forwarded};
use crate::state::AppState;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "tether_session";
/// A readable cookie holding the session's CSRF token, for scripts that send the header.
pub const CSRF_COOKIE: &str = "tether_csrf";

/// `X-Forwarded-For`, which the shipped nginx appends to.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// How a web caller proved who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Session,
    ApiToken,
}

/// A signed-in web user, from the session cookie or `Authorization: Bearer tut_…`.
///
/// For a cookie-authenticated request of any method but GET, HEAD, OPTIONS and TRACE,
/// extraction already checked the `x-tether-csrf` header, whatever the path
/// (see `needs_csrf_header`).
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: User,
    pub account: Account,
    /// The session's CSRF token; `None` for API tokens, which need none.
    pub csrf_token: Option<String>,
    /// The session's id; `None` for API tokens.
    pub session_id: Option<SessionId>,
    pub via: Via,
}

impl Caller {
    /// Checks a presented CSRF token (API-token callers always pass).
    ///
    /// # Errors
    /// 403 `csrf_rejected`.
    pub fn verify_csrf(&self, presented: Option<&str>) -> Result<(), ApiError> {
        match (&self.csrf_token, presented) {
            (None, _) => Ok(()),
            (Some(expected), Some(presented))
                if crate::credentials::hashes_match(expected, presented) =>
            {
                Ok(())
            }
            _ => Err(ApiError::new(
                Code::CsrfRejected,
                "This change needs the page's CSRF token (header x-tether-csrf).",
            )),
        }
    }

    /// The caller's session, for what only a person at a browser may do.
    ///
    /// # Errors
    /// 403 `forbidden` for an API token.
    pub fn require_session(&self) -> Result<&SessionId, ApiError> {
        self.session_id.as_ref().ok_or_else(|| {
            ApiError::new(
                Code::Forbidden,
                "An API token cannot do this; do it on the Account page, signed in.",
            )
        })
    }

    /// # Errors
    /// 403 `forbidden` unless the caller is the platform admin.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.user.is_admin {
            Ok(())
        } else {
            Err(ApiError::new(
                Code::Forbidden,
                "Only the platform admin may do this.",
            ))
        }
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Caller, ApiError>>>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { caller_from_request(&req).await })
    }
}

/// A paired device, from `Authorization: Bearer tdt_…` (and `x-tether-protocol`, if sent).
impl FromRequest for DeviceIdentity {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<DeviceIdentity, ApiError>>>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { device_from_request(&req).await })
    }
}

/// Agents send `x-tether-protocol: 1`; anything else present is refused.
///
/// # Errors
/// 400 `unsupported_protocol`.
pub fn check_protocol(req: &HttpRequest) -> Result<(), ApiError> {
    let Some(value) = req.headers().get(PROTOCOL_HEADER) else {
        return Ok(());
    };
    let version = value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok());
    if version == Some(PROTOCOL_VERSION) {
        Ok(())
    } else {
        Err(ApiError::new(
            Code::UnsupportedProtocol,
            format!("This server speaks protocol {PROTOCOL_VERSION} ({PROTOCOL_HEADER})."),
        ))
    }
}

fn bearer_token(req: &HttpRequest) -> Option<Result<String, ApiError>> {
    let header = req.headers().get("authorization")?;
    let token = header
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(|token| token.trim().to_owned())
        .filter(|token| !token.is_empty());
    Some(token.ok_or_else(unauthorized))
}

fn unauthorized() -> ApiError {
    ApiError::new(Code::Unauthorized, "Sign in, or send a valid token.")
}

fn state(req: &HttpRequest) -> Result<web::Data<AppState>, ApiError> {
    req.app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| ApiError::internal(&"AppState is not registered"))
}

async fn caller_from_request(req: &HttpRequest) -> Result<Caller, ApiError> {
    let state = state(req)?;
    if let Some(token) = bearer_token(req) {
        let token = token?;
        if !token.starts_with(USER_TOKEN_PREFIX) {
            return Err(unauthorized());
        }
        let resolved = api_tokens::authenticate(&state.store, state.hub.api_tokens(), &token)
            .await?
            .ok_or_else(unauthorized)?;
        return Ok(caller(resolved, Via::ApiToken));
    }
    let cookie = req.cookie(SESSION_COOKIE).ok_or_else(unauthorized)?;
    let seen = seen(req, &state.config);
    let resolved = accounts::by_session(&state.store, cookie.value(), &seen)
        .await?
        .ok_or_else(unauthorized)?;
    let caller = caller(resolved, Via::Session);
    if needs_csrf_header(req) {
        let presented = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        caller.verify_csrf(presented)?;
    }
    Ok(caller)
}

fn caller(resolved: accounts::Resolved, via: Via) -> Caller {
    Caller {
        user: resolved.me.user,
        account: resolved.me.account,
        csrf_token: resolved.csrf_token,
        session_id: resolved.session_id,
        via,
    }
}

/// Where a request came from, as coarse as a session keeps it.
pub(crate) fn seen(req: &HttpRequest, config: &Config) -> Seen {
    let user_agent = req
        .headers()
        .get(USER_AGENT)
        .and_then(|value| value.to_str().ok());
    Seen::new(user_agent, client_ip_of(req, config))
}

/// The client's address: the peer, or — when the peer is one of `TETHER_TRUSTED_PROXIES` —
/// the right-most address in its `X-Forwarded-For` (or, without one, `Forwarded`) that is
/// not itself a trusted proxy (`routes::client::client_address`).
pub(crate) fn client_ip_of(req: &HttpRequest, config: &Config) -> IpAddr {
    // actix gives no peer only for requests built in tests; they share one key.
    let peer = req
        .peer_addr()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip());
    if config.trusted_proxies.is_empty() {
        return peer.to_canonical();
    }
    let values = |name: &HeaderName| -> Vec<&str> {
        req.headers()
            .get_all(name)
            .filter_map(|value| value.to_str().ok())
            .collect()
    };
    let x_forwarded_for = values(&X_FORWARDED_FOR);
    let forwarded = values(&FORWARDED);
    let chain = if x_forwarded_for.is_empty() && !forwarded.is_empty() {
        Forwarded::Rfc7239(&forwarded)
    } else {
        Forwarded::XForwardedFor(&x_forwarded_for)
    };
    client_ip(peer, chain, &config.trusted_proxies)
}

/// Whether a cookie-authenticated request must carry the CSRF header: by its method alone.
/// The path proves nothing: actix routes on the decoded path, so a test of the raw one
/// (`/%61pi/tokens` is `/api/tokens`) would wave through a change it serves. Every route
/// that changes something is an unsafe method, pages included.
fn needs_csrf_header(req: &HttpRequest) -> bool {
    !matches!(
        *req.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

async fn device_from_request(req: &HttpRequest) -> Result<DeviceIdentity, ApiError> {
    check_protocol(req)?;
    let state = state(req)?;
    let token = bearer_token(req).ok_or_else(unauthorized)??;
    if !token.starts_with(DEVICE_TOKEN_PREFIX) {
        return Err(unauthorized());
    }
    let token_hash = credentials::hash_token(&token);
    let tokens = state.hub.device_tokens();
    if let Some(identity) = tokens.get(&token_hash) {
        return Ok(identity);
    }
    let generation = tokens.generation();
    let identity = devices::authenticate(&state.store, &token_hash).await?;
    tokens.remember(token_hash, identity.clone(), generation);
    Ok(identity)
}
