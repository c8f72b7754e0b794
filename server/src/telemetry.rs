//! Logs and request ids.
//!
//! **Invariant:** logs carry ids, methods, paths and statuses; never a token, password,
//! cookie, query string or body.

use std::time::Instant;

use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use rand::RngCore;
use tether_protocol::routes::REQUEST_ID_HEADER;

/// Installs the log subscriber: `RUST_LOG` filters (default `info`); `TETHER_LOG_FORMAT=json`
/// writes one JSON object per line (with the request span's fields) for log pipelines.
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = if std::env::var("TETHER_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().with_current_span(true).try_init()
    } else {
        builder.try_init()
    };
}

/// The caller's `x-request-id` when it is sane (1 to 64 of `[A-Za-z0-9._-]`), else a new one.
pub fn request_id(req: &ServiceRequest) -> String {
    req.headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| is_sane_id(id))
        .map_or_else(new_request_id, str::to_owned)
}

/// Echoes the request id on the answer and logs the outcome.
pub fn finish<B>(res: &mut ServiceResponse<B>, request_id: &str, started: Instant) {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        res.headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
    }
    let status = res.status().as_u16();
    let elapsed_ms = started.elapsed().as_millis();
    if status >= 500 {
        tracing::error!(status, elapsed_ms, "answered");
    } else {
        tracing::info!(status, elapsed_ms, "answered");
    }
}

fn is_sane_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn new_request_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    crate::credentials::hex(&bytes)
}
