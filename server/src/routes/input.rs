//! What malformed input is answered with: the JSON, path and query extractors'
//! configuration, unknown routes, and error bodies for the answers actix makes itself.
//!
//! A JSON body must say it is JSON (`application/json`, or a `+json` type): any other
//! content type, or none, is 415 `unsupported_media_type` before the body is read. A
//! cross-site form can send only `text/plain`, form and multipart bodies, so no change can
//! ride one even past the CSRF check.

use actix_web::body::{BoxBody, EitherBody};
use actix_web::dev::ServiceResponse;
use actix_web::error::JsonPayloadError;
use actix_web::http::header::{Accept, CONTENT_TYPE};
use actix_web::http::StatusCode;
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers};
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use serde::de::DeserializeOwned;
use tether_protocol::{Code, ErrorBody};

use crate::error::ApiError;

/// Largest JSON body any route accepts.
pub const JSON_LIMIT_BYTES: usize = 256 * 1024;

/// JSON bodies: size-limited; every parse failure is a 400 naming the problem, an oversized
/// body a 413, another content type a 415.
pub fn json_config() -> web::JsonConfig {
    json_config_with_limit(JSON_LIMIT_BYTES)
}

/// Like [`json_config`] with another size limit, for one resource.
pub fn json_config_with_limit(limit: usize) -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(limit)
        .error_handler(|error, _req| json_error(&error).into())
}

/// A body that may be left out (`POST /api/jobs/{id}/rerun`): empty or blank is
/// `T::default()`, whatever its content type; any other must be JSON, as [`json_config`]
/// has it.
///
/// # Errors
/// 415 `unsupported_media_type` for a body that does not say it is JSON; 400
/// `invalid_request` for one that does not parse.
pub fn optional_json<T: DeserializeOwned + Default>(
    req: &HttpRequest,
    body: &[u8],
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let is_json = req.mime_type().ok().flatten().is_some_and(|mime| {
        mime.subtype() == actix_web::mime::JSON || mime.suffix() == Some(actix_web::mime::JSON)
    });
    if !is_json {
        return Err(json_error(&JsonPayloadError::ContentType));
    }
    serde_json::from_slice(body)
        .map_err(|err| ApiError::new(Code::InvalidRequest, format!("Bad JSON body: {err}.")))
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

/// Whether an unknown route should answer a page: a browser asking for a page outside
/// `/api/` (the crate root sends those to `pages::not_found`). The path is the decoded one
/// routing saw, so `/%61pi/…` is under `/api/` too.
pub fn wants_page(req: &HttpRequest) -> bool {
    !req.match_info().as_str().starts_with("/api/") && prefers_html(req)
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

/// Whether `Accept` ranks HTML first, as a browser's navigation does. No `Accept`, `*/*`
/// and `application/json` are an API client's.
fn prefers_html(req: &HttpRequest) -> bool {
    let Some(accept) = req.get_header::<Accept>() else {
        return false;
    };
    accept.ranked().first().is_some_and(|preferred| {
        preferred.essence_str() == actix_web::mime::TEXT_HTML.essence_str()
            || preferred.essence_str() == "application/xhtml+xml"
    })
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
            Code::UnsupportedMediaType,
            "The body must be JSON, sent with Content-Type: application/json.",
        ),
        JsonPayloadError::Deserialize(error) => ApiError::new(
            Code::InvalidRequest,
            format!("The body is not valid: {error}."),
        ),
        _ => ApiError::new(Code::InvalidRequest, "The body could not be read."),
    }
}
