//! The OpenAPI 3.1 document of everything the server answers, `GET /api/openapi.json`.
//!
//! Its operations are what the route table's declarations say (`table`), each next to its
//! handler; this file adds the frame: the title, the security schemes, the schemas. Schemas
//! come from `tether-protocol`'s wire types (`utoipa::ToSchema`), so a field added to the
//! protocol shows up here without another edit. `tests/api/openapi.rs` validates the
//! document (openapi-spec-validator) and runs schemathesis against it.

use std::sync::OnceLock;

use actix_web::{web, HttpResponse};
use tether_protocol::routes::CSRF_HEADER;
use utoipa::openapi::schema::ComponentsBuilder;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{InfoBuilder, OpenApi, OpenApiBuilder};

use super::table::{Access, Described, Table, Wing};
use crate::auth::SESSION_COOKIE;

pub(super) fn routes(table: &mut Table) {
    table
        .get("/api/openapi.json", serve, Access::Public, "This document")
        .answer_object(200, "OpenAPI 3.1.")
        .errors(&[]);
}

/// The served document, as JSON.
pub(super) struct Served(&'static str);

impl Served {
    /// The document of `wings`, built once: the server's wings are always the same.
    pub(super) fn of(wings: &[Wing]) -> Served {
        static JSON: OnceLock<String> = OnceLock::new();
        Served(JSON.get_or_init(|| {
            document(wings)
                .to_json()
                .unwrap_or_else(|_| String::from("{}"))
        }))
    }
}

async fn serve(served: web::Data<Served>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(served.0)
}

/// The whole document of `wings`.
pub fn document(wings: &[Wing]) -> OpenApi {
    let Described { paths, schemas } = Table::describe(wings);
    let components = ComponentsBuilder::new()
        .schemas_from_iter(schemas)
        .security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                SESSION_COOKIE.to_owned(),
                format!(
                    "The session cookie of a signed-in browser. Changes also need the \
                     `{CSRF_HEADER}` header and a same-origin `Origin`."
                ),
            ))),
        )
        .security_scheme(
            "userToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("tut_…")
                    .description(Some("An API token made at POST /api/tokens."))
                    .build(),
            ),
        )
        .security_scheme(
            "deviceToken",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("tdt_…")
                    .description(Some("A device token from POST /api/devices/register."))
                    .build(),
            ),
        )
        .build();
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Tether")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Assign work to your own computers, approve what it asks for, get \
                     the results back. Every error is `{\"error\": {\"code\", \"message\"}}`.",
                ))
                .build(),
        )
        .paths(paths)
        .components(Some(components))
        .build()
}
