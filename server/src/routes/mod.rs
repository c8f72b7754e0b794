//! HTTP routes. **Architecture invariant:** only `routes` (and the `auth` extractors) know
//! HTTP; each handler turns what it received into validated domain values (`TryFrom` the
//! wire's params) before it calls the domain, which returns protocol types or [`ApiError`].
//!
//! Children never use this file's items: what several share lives in a sibling (`input`
//! for malformed input and error bodies, `lease` for the lease header, `links` for the
//! links we hand out).

use actix_web::{web, HttpResponse};

use crate::error::ApiError;

mod admin;
mod auth;
pub(crate) mod client;
mod decisions;
mod device_api;
mod devices;
pub mod edge;
mod events;
mod evidence;
mod files;
mod input;
mod jobs;
mod lease;
pub(crate) mod links;
pub mod openapi;
mod pairing;
mod push;
mod secrets;
mod tokens;

pub use input::{
    error_bodies, json_config, not_found, path_config, query_config, wants_page, JSON_LIMIT_BYTES,
};

/// Mounts every API route. Device self-routes and pairing come before `/api/devices/{id}`
/// so `self`, `pair`, `register` and `link` are never taken for an id.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
    openapi::configure(cfg);
    auth::configure(cfg);
    tokens::configure(cfg);
    device_api::configure(cfg);
    decisions::configure(cfg);
    events::configure(cfg);
    evidence::configure(cfg);
    files::configure(cfg);
    pairing::configure(cfg);
    push::configure(cfg);
    admin::configure(cfg);
    secrets::configure(cfg);
    devices::configure(cfg);
    jobs::configure(cfg);
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

/// 200 while this replica can reach its database (and Redis, when configured); 503
/// `unavailable` otherwise, so a load balancer stops sending it traffic.
async fn readyz(state: web::Data<crate::state::AppState>) -> Result<HttpResponse, ApiError> {
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

/// Prometheus text exposition of this replica's metrics. Served on the metrics listener
/// (`TETHER_METRICS_LISTEN`, see `lib.rs`), never on the public one.
pub async fn metrics(state: web::Data<crate::state::AppState>) -> Result<HttpResponse, ApiError> {
    let text = state.metrics.render(&state.store, &state.hub).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(text))
}
