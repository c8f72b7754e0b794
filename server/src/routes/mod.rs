//! HTTP routes. **Architecture invariant:** only `routes` (and the `auth` extractors) know
//! HTTP; the domain modules take validated values and return protocol types or [`ApiError`].

use actix_web::body::{BoxBody, EitherBody};
use actix_web::dev::ServiceResponse;
use actix_web::error::JsonPayloadError;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::http::StatusCode;
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers};
use actix_web::{web, HttpRequest, HttpResponse};
use tether_protocol::{Code, ErrorBody};

use crate::error::ApiError;

mod admin;
mod auth;
mod decisions;
mod device_api;
mod devices;
mod events;
mod evidence;
mod files;
mod jobs;
mod pairing;
mod secrets;
mod tokens;

/// Largest JSON body any route accepts.
pub const JSON_LIMIT_BYTES: usize = 256 * 1024;

/// Mounts every API route. Device self-routes and pairing come before `/api/devices/{id}`
/// so `self`, `pair`, `register` and `link` are never taken for an id.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz))
        .route("/metrics", web::get().to(metrics));
    auth::configure(cfg);
    tokens::configure(cfg);
    device_api::configure(cfg);
    decisions::configure(cfg);
    events::configure(cfg);
    evidence::configure(cfg);
    files::configure(cfg);
    pairing::configure(cfg);
    admin::configure(cfg);
    secrets::configure(cfg);
    devices::configure(cfg);
    jobs::configure(cfg);
}

/// JSON bodies: size-limited; every parse failure is a 400 naming the problem, an oversized
/// body a 413.
pub fn json_config() -> web::JsonConfig {
    json_config_with_limit(JSON_LIMIT_BYTES)
}

/// Like [`json_config`] with another size limit, for one resource.
pub fn json_config_with_limit(limit: usize) -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(limit)
        .error_handler(|error, _req| json_error(&error).into())
}

/// A path segment that is not a plausible id names nothing: 404.
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default()
        .error_handler(|_error, _req| ApiError::new(Code::NotFound, "No such object.").into())
}

/// Query strings that do not parse are a 400.
pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|error, _req| {
        ApiError::new(Code::InvalidRequest, format!("Bad query string: {error}.")).into()
    })
}

/// Unknown routes answer the error body too.
pub async fn not_found(req: HttpRequest) -> HttpResponse {
    use actix_web::ResponseError;
    ApiError::new(
        Code::NotFound,
        format!("No route for {} {}.", req.method(), req.path()),
    )
    .error_response()
}

/// Gives error answers actix makes itself (a 405 from a resource, for instance) the error
/// body. Answers that already have a content type are left alone.
pub fn error_bodies<B: 'static>() -> ErrorHandlers<B> {
    ErrorHandlers::new().default_handler(fill_error_body)
}

fn fill_error_body<B>(res: ServiceResponse<B>) -> actix_web::Result<ErrorHandlerResponse<B>> {
    if res.response().headers().contains_key(CONTENT_TYPE) {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    let status = res.status();
    let (code, message) = match status {
        StatusCode::NOT_FOUND => (Code::NotFound, "No such route."),
        StatusCode::METHOD_NOT_ALLOWED => {
            (Code::MethodNotAllowed, "This method is not served here.")
        }
        StatusCode::PAYLOAD_TOO_LARGE => (Code::PayloadTooLarge, "The body is too large."),
        StatusCode::UNAUTHORIZED => (Code::Unauthorized, "Sign in, or send a valid token."),
        status if status.is_server_error() => {
            (Code::Internal, "Something went wrong on the server.")
        }
        _ => (Code::InvalidRequest, "The request is not valid."),
    };
    let (req, _) = res.into_parts();
    let response: HttpResponse<BoxBody> =
        HttpResponse::build(status).json(ErrorBody::new(code, message));
    let res = ServiceResponse::new(req, response).map_into_right_body::<B>();
    let res: ServiceResponse<EitherBody<B>> = res;
    Ok(ErrorHandlerResponse::Response(res))
}

fn json_error(error: &JsonPayloadError) -> ApiError {
    match error {
        JsonPayloadError::OverflowKnownLength { limit, .. }
        | JsonPayloadError::Overflow { limit } => ApiError::new(
            Code::PayloadTooLarge,
            format!("The body is larger than {limit} bytes."),
        ),
        JsonPayloadError::ContentType => ApiError::new(
            Code::InvalidRequest,
            "The body must be JSON with Content-Type: application/json.",
        ),
        JsonPayloadError::Deserialize(error) => ApiError::new(
            Code::InvalidRequest,
            format!("The body is not valid: {error}."),
        ),
        _ => ApiError::new(Code::InvalidRequest, "The body could not be read."),
    }
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

/// 200 while this replica can reach its database (and Redis, when configured); 503
/// `unavailable` otherwise, so a load balancer stops sending it traffic.
async fn readyz(state: web::Data<crate::AppState>) -> Result<HttpResponse, ApiError> {
    state.store.ping().await.map_err(|_| {
        ApiError::new(
            tether_protocol::Code::Unavailable,
            "The database is unreachable.",
        )
    })?;
    state
        .hub
        .ping()
        .await
        .map_err(|_| ApiError::new(tether_protocol::Code::Unavailable, "Redis is unreachable."))?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "status": "ready" })))
}

/// Prometheus text exposition of this replica's metrics.
async fn metrics(state: web::Data<crate::AppState>) -> Result<HttpResponse, ApiError> {
    let text = state.metrics.render(&state.store, &state.hub).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(text))
}

/// The base of links we hand out: the configured public URL, else this request's origin.
pub(crate) fn public_base(req: &HttpRequest, public_url: Option<&str>) -> String {
    match public_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let info = req.connection_info();
            format!("{}://{}", info.scheme(), info.host())
        }
    }
}
