//! HTTP routes. **Architecture invariant:** only `routes` (and the `auth` extractors) know
//! HTTP; each handler turns what it received into validated domain values (`TryFrom` the
//! wire's params) before it calls the domain, which returns protocol types or [`ApiError`].
//!
//! Children never use this file's items: what several share lives in a sibling (`input`
//! for malformed input and error bodies, `lease` for the lease header, `links` for the
//! links we hand out, `table` for declaring routes).

use actix_web::{web, HttpResponse};

use crate::error::ApiError;

mod admin;
mod attachments;
mod auth;
pub(crate) mod client;
mod console;
mod context;
mod decisions;
mod device_api;
mod devices;
pub mod edge;
mod engine_sessions;
mod event_streams;
mod events;
mod evidence;
mod files;
mod held_evidence;
mod idempotency;
mod input;
mod job_log;
mod job_stream;
mod jobs;
mod lease;
pub(crate) mod links;
pub mod listener;
pub mod openapi;
mod pairing;
mod passkeys;
mod push;
mod secrets;
mod spaces;
mod table;
mod tokens;
mod upgrades;

pub use input::{
    error_bodies, json_config, not_found, path_config, query_config, wants_page, JSON_LIMIT_BYTES,
};
pub use table::{Access, Op, Table, Wing};

/// Mounts every route, the API's and then `pages`', from the one table that also writes
/// the OpenAPI document served at `/api/openapi.json`.
pub fn configure(cfg: &mut web::ServiceConfig, pages: Wing) {
    let wings: [Wing; 2] = [routes, pages];
    cfg.app_data(web::Data::new(openapi::Served::of(&wings)));
    Table::mount(cfg, &wings);
}

/// The API's routes. Device self-routes and pairing come before `/api/devices/{id}` so
/// `self`, `pair`, `register` and `link` are never taken for an id.
fn routes(table: &mut Table) {
    table
        .get("/healthz", healthz, Access::Public, "Serving")
        .answer_object(200, "`{\"status\": \"ok\"}`.")
        .errors(&[]);
    table
        .get("/readyz", readyz, Access::Public, "Store and hub reachable")
        .answer_object(200, "`{\"status\": \"ready\"}`.")
        .errors(&[503]);
    openapi::routes(table);
    auth::routes(table);
    tokens::routes(table);
    passkeys::routes(table);
    device_api::routes(table);
    context::routes(table);
    decisions::routes(table);
    console::routes(table);
    events::routes(table);
    evidence::routes(table);
    held_evidence::routes(table);
    engine_sessions::routes(table);
    attachments::routes(table);
    files::routes(table);
    job_log::routes(table);
    pairing::routes(table);
    push::routes(table);
    admin::routes(table);
    secrets::routes(table);
    spaces::routes(table);
    devices::routes(table);
    jobs::routes(table);
    job_stream::routes(table);
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
