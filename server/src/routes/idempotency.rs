//! `Idempotency-Key` on creating routes: a phone that retries after a lost answer gets the
//! first answer again instead of a second job. A route takes it with the table's
//! [`super::table::Op::idempotent`], which wraps it in [`idempotent`] and documents it.
//!
//! Per account, a key names one request: the same route (method and path pattern) and the
//! same SHA-256 of method, path, query and body. Within a day (`idempotency::KEPT_SECS`) the same
//! request is answered what the first was (a 2xx, kept as it was sent, with
//! `Idempotent-Replayed: true`); the key with another route or body is 422 `invalid_field`;
//! while the first is still being answered, 409 `invalid_state` (the loser does not wait:
//! a creation takes milliseconds and the client retries). Only a 2xx is kept: after an
//! error nothing was created and the key is free. Without the header a route is as before.

use actix_web::body::{self, BoxBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderValue, CACHE_CONTROL};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{web, Error, HttpResponse};
use sha2::{Digest, Sha256};
use tether_protocol::{AccountId, Code};

use crate::auth::Caller;
use crate::credentials::hex;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::idempotency::{self, Claim};
use crate::store::Store;

/// The request header that names a creating request.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// Set on an answer given again for a retried key.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// Longest key: room for a UUID or a client's own scheme, not for a body in disguise.
pub const MAX_KEY_LEN: usize = 255;

/// What the OpenAPI document says of the header on each creating route.
pub fn description() -> String {
    format!(
        "Optional: 1 to {MAX_KEY_LEN} visible ASCII characters naming this request, so a \
         retry within 24 hours answers the first result (with `{REPLAYED_HEADER}: true`) \
         instead of creating again. The key with another route or body is 422 \
         `invalid_field`; while the first request is in progress, 409 `invalid_state`."
    )
}

/// The middleware of an idempotent route (actix's `from_fn`).
///
/// # Errors
/// A body that cannot be read (too large, too slow), as actix answers it.
pub async fn idempotent(
    mut req: ServiceRequest,
    next: Next<BoxBody>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let Some(raw) = req.headers().get(IDEMPOTENCY_HEADER).cloned() else {
        return next.call(req).await;
    };
    // Not signed in: the handler answers that, as it would without the key.
    let Ok(caller) = req.extract::<Caller>().await else {
        return next.call(req).await;
    };
    let key = match parse_key(&raw) {
        Ok(key) => key,
        Err(error) => return Ok(req.error_response(error)),
    };
    let Some(store) = req
        .app_data::<web::Data<AppState>>()
        .map(|state| state.store.clone())
    else {
        let error = ApiError::internal(&"no app state on an idempotent route");
        return Ok(req.error_response(error));
    };
    let body = req.extract::<web::Bytes>().await?;
    let route = format!(
        "{} {}",
        req.method(),
        req.match_pattern().unwrap_or_else(|| req.path().to_owned())
    );
    let request_hash = request_hash(&req, &body);
    req.set_payload(Payload::from(body));
    let account_id = caller.account.id;
    match idempotency::claim(&store, &account_id, &key, &route, &request_hash).await {
        Err(error) => Ok(req.error_response(error)),
        Ok(Claim::Create) => {
            // On a task of its own, so the answer is kept even when this client goes away
            // half-way: its retry then gets it instead of a second creation.
            let created = actix_web::rt::spawn(create(next, req, store, account_id, key));
            created
                .await
                .map_err(|error| Error::from(ApiError::internal(&error)))?
        }
        Ok(Claim::Answered { status, answer }) => {
            let status = StatusCode::from_u16(status).map_err(|error| ApiError::internal(&error));
            Ok(match status {
                Ok(status) => req.into_response(
                    HttpResponse::build(status)
                        .insert_header((REPLAYED_HEADER, "true"))
                        .insert_header((CACHE_CONTROL, "no-store"))
                        .content_type("application/json")
                        .body(answer),
                ),
                Err(error) => req.error_response(error),
            })
        }
        Ok(Claim::Mismatch) => Ok(req.error_response(ApiError::invalid_field(
            IDEMPOTENCY_HEADER,
            "was sent before with another request; use a new key for this one.",
        ))),
        Ok(Claim::InProgress) => Ok(req.error_response(ApiError::new(
            Code::InvalidState,
            format!(
                "A request with this {IDEMPOTENCY_HEADER} is in progress; try again in a moment."
            ),
        ))),
    }
}

/// Runs the route for the request that claimed the key, and keeps its answer if it
/// created (a 2xx) or frees the key if not.
async fn create(
    next: Next<BoxBody>,
    req: ServiceRequest,
    store: Store,
    account_id: AccountId,
    key: String,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let answered = next.call(req).await;
    let res = match answered {
        Ok(res) if res.status().is_success() => res,
        other => {
            if let Err(error) = idempotency::forget(&store, &account_id, &key).await {
                tracing::warn!(%error, "freeing an idempotency key failed");
            }
            return other;
        }
    };
    let status = res.status();
    let (req, res) = res.into_parts();
    let (head, answer) = res.into_parts();
    let bytes = match body::to_bytes(answer).await {
        Ok(bytes) => bytes,
        Err(error) => {
            // Created, but the answer is lost: the key stays taken, so a retry is 409 until
            // it counts as abandoned.
            return Ok(ServiceResponse::new(
                req,
                HttpResponse::from_error(ApiError::internal(&error)),
            ));
        }
    };
    match std::str::from_utf8(&bytes) {
        Ok(text) => {
            if let Err(error) =
                idempotency::remember(&store, &account_id, &key, status.as_u16(), text).await
            {
                tracing::warn!(%error, "keeping an idempotent answer failed");
            }
        }
        // Every creating route answers JSON; another answer is not kept, nor given again.
        Err(_) => {
            if let Err(error) = idempotency::forget(&store, &account_id, &key).await {
                tracing::warn!(%error, "freeing an idempotency key failed");
            }
        }
    }
    let res = head.set_body(bytes).map_into_boxed_body();
    Ok(ServiceResponse::new(req, res))
}

/// 1 to [`MAX_KEY_LEN`] visible ASCII characters.
fn parse_key(raw: &HeaderValue) -> Result<String, ApiError> {
    let bytes = raw.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_KEY_LEN || !bytes.iter().all(u8::is_ascii_graphic) {
        return Err(ApiError::new(
            Code::InvalidRequest,
            format!("{IDEMPOTENCY_HEADER} must be 1 to {MAX_KEY_LEN} visible ASCII characters."),
        ));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// What makes two requests the same one: method, path, query and body.
fn request_hash(req: &ServiceRequest, body: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(req.method().as_str().as_bytes());
    hasher.update(b"\n");
    hasher.update(req.uri().path().as_bytes());
    hasher.update(b"?");
    hasher.update(req.query_string().as_bytes());
    hasher.update(b"\n");
    hasher.update(body);
    hex(&hasher.finalize())
}
