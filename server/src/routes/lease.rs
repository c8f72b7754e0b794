//! The lease a device names in `x-tether-lease` on every write about a run, parsed before
//! the handler runs.

use std::future::{ready, Ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest};
use tether_protocol::routes::LEASE_HEADER;
use tether_protocol::{Code, LeaseToken};

use crate::error::ApiError;
use crate::store::job_rows;

/// The lease token of a lease-bound route, from [`LEASE_HEADER`].
///
/// A missing or empty header is 400 `invalid_request`. A present one that cannot be a lease
/// token (spaces, non-ASCII, too long) names no lease the server handed out: 409
/// `stale_lease`, as any other wrong lease.
#[derive(Debug, Clone)]
pub struct Lease(pub LeaseToken);

impl FromRequest for Lease {
    type Error = ApiError;
    type Future = Ready<Result<Lease, ApiError>>;

    fn from_request(req: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        ready(lease(req))
    }
}

fn lease(req: &HttpRequest) -> Result<Lease, ApiError> {
    let raw = req
        .headers()
        .get(LEASE_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidRequest,
                format!("This route needs the {LEASE_HEADER} header."),
            )
        })?;
    LeaseToken::parse(raw)
        .map(Lease)
        .map_err(|_| job_rows::stale_lease())
}
