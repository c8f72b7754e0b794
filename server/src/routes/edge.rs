//! What every request passes before its route: the connection cap, the deadline on its body
//! and the headers every answer carries.
//!
//! - **Connections.** Each accepted connection takes a numbered slot ([`Connections`], counted
//!   in `on_connect`, given back when the connection closes). One accepted past
//!   `max_connections` answers every request with 503 `unavailable`, `Retry-After` and
//!   `Connection: close` — except `/healthz`, so an orchestrator does not restart a replica
//!   for being busy. Connections accepted before the cap was reached are served as usual.
//! - **Bodies.** actix's `client_request_timeout` bounds the request head only. A body must
//!   arrive within `body_timeout_ms`, extended by one second per [`BODY_MIN_BYTES_PER_SEC`]
//!   received (so a large evidence upload at a modest rate is fine, and a body trickling in a
//!   byte at a time is cut). A body that misses its deadline is 408 `request_timeout`, and the
//!   connection is closed. WebSocket upgrades are left alone: their "body" is the stream.
//! - **Headers.** `X-Content-Type-Options: nosniff` on every answer; `Strict-Transport-Security`
//!   when the configured public URL is https.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::header::{HeaderValue, UPGRADE};
use actix_web::http::{ConnectionType, Method};
use actix_web::middleware::DefaultHeaders;
use actix_web::web::Bytes;
use actix_web::{HttpMessage, ResponseError};
use futures_util::Stream;
use tether_protocol::Code;
use tokio::time::{Instant, Sleep};

use crate::config::Config;
use crate::error::ApiError;
use crate::state::AppState;

/// The slowest average rate a body may arrive at once its first `body_timeout_ms` are spent:
/// each 16 KiB received buys one more second (a 100 MB upload may take 1 h 45 min).
pub const BODY_MIN_BYTES_PER_SEC: u64 = 16 * 1024;

/// `Retry-After` of the 503 past the connection cap.
pub const BUSY_RETRY_SECS: u64 = 5;

/// `max-age` of `Strict-Transport-Security`: a year.
pub const HSTS: &str = "max-age=31536000; includeSubDomains";

/// What the middlewares below answer: the route's body, or their own error body.
pub type Answer<B> =
    Pin<Box<dyn Future<Output = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>>>>;

/// Open connections of this replica, and the cap past which new ones are refused.
#[derive(Clone, Debug)]
pub struct Connections {
    open: Arc<AtomicUsize>,
    cap: usize,
}

impl Connections {
    pub fn new(cap: usize) -> Connections {
        Connections {
            open: Arc::new(AtomicUsize::new(0)),
            cap: cap.max(1),
        }
    }

    /// The cap in force.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A new connection's slot, held in its connection data until it closes.
    pub fn slot(&self) -> ConnectionSlot {
        let position = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        ConnectionSlot {
            open: self.open.clone(),
            over_cap: position > self.cap,
        }
    }
}

/// One connection's place in [`Connections`]; gives it back when dropped.
#[derive(Debug)]
pub struct ConnectionSlot {
    open: Arc<AtomicUsize>,
    over_cap: bool,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Middleware (for `wrap_fn`): a connection accepted past the cap gets 503 `unavailable`
/// for anything but `/healthz`, and is closed.
pub fn limit_connections<S, B>(req: ServiceRequest, srv: &S) -> Answer<B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    let over_cap = req
        .conn_data::<ConnectionSlot>()
        .is_some_and(|slot| slot.over_cap);
    if over_cap && req.path() != "/healthz" {
        let mut answer = ApiError::new(
            Code::Unavailable,
            "The server has too many open connections; try again shortly.",
        )
        .with_retry_after(BUSY_RETRY_SECS)
        .error_response();
        answer.head_mut().set_connection_type(ConnectionType::Close);
        let res = req.into_response(answer).map_into_right_body();
        return Box::pin(async move { Ok(res) });
    }
    let answer = srv.call(req);
    Box::pin(async move { answer.await.map(ServiceResponse::map_into_left_body) })
}

/// Middleware (for `wrap_fn`): puts the body behind its deadline, and answers 408
/// `request_timeout` (closing the connection) when the route's read of it missed it.
pub fn bound_body<S, B>(mut req: ServiceRequest, srv: &S) -> Answer<B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    S::Future: 'static,
    B: MessageBody + 'static,
{
    let timeout = req
        .app_data::<actix_web::web::Data<AppState>>()
        .map(|state| Duration::from_millis(state.config.body_timeout_ms));
    let missed = Rc::new(Cell::new(false));
    if let Some(timeout) = timeout.filter(|_| !is_websocket(&req)) {
        let payload = req.take_payload();
        let bounded = Deadline::new(payload, timeout, missed.clone());
        req.set_payload(Payload::Stream {
            payload: Box::pin(bounded),
        });
    }
    let answer = srv.call(req);
    Box::pin(async move {
        let res = answer.await?;
        if !missed.get() {
            return Ok(res.map_into_left_body());
        }
        let (req, _) = res.into_parts();
        let mut answer = ApiError::new(
            Code::RequestTimeout,
            "The request body did not arrive in time.",
        )
        .error_response();
        answer.head_mut().set_connection_type(ConnectionType::Close);
        Ok(ServiceResponse::new(req, answer).map_into_right_body())
    })
}

fn is_websocket(req: &ServiceRequest) -> bool {
    req.method() == Method::GET
        && req
            .headers()
            .get(UPGRADE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.eq_ignore_ascii_case("websocket"))
}

/// A body stream that fails with a timed-out I/O error once its deadline passes: `started +
/// timeout + received / BODY_MIN_BYTES_PER_SEC`.
struct Deadline {
    inner: Payload,
    sleep: Pin<Box<Sleep>>,
    started: Instant,
    timeout: Duration,
    received: u64,
    missed: Rc<Cell<bool>>,
    ended: bool,
}

impl Deadline {
    fn new(inner: Payload, timeout: Duration, missed: Rc<Cell<bool>>) -> Deadline {
        let started = Instant::now();
        Deadline {
            inner,
            sleep: Box::pin(tokio::time::sleep_until(started + timeout)),
            started,
            timeout,
            received: 0,
            missed,
            ended: false,
        }
    }

    fn deadline(&self) -> Instant {
        let earned = Duration::from_millis(
            self.received
                .saturating_mul(1000)
                .checked_div(BODY_MIN_BYTES_PER_SEC)
                .unwrap_or(0),
        );
        self.started + self.timeout + earned
    }
}

impl Stream for Deadline {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                this.received = this
                    .received
                    .saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
                let deadline = this.deadline();
                this.sleep.as_mut().reset(deadline);
                return Poll::Ready(Some(Ok(chunk)));
            }
            Poll::Ready(other) => {
                this.ended = true;
                return Poll::Ready(other);
            }
            Poll::Pending => {}
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.ended = true;
            this.missed.set(true);
            return Poll::Ready(Some(Err(PayloadError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request body did not arrive in time",
            )))));
        }
        Poll::Pending
    }
}

/// `nosniff` on every answer; HSTS when the public URL is https. Headers a route set itself
/// are kept.
pub fn security_headers(config: &Config) -> DefaultHeaders {
    let headers = DefaultHeaders::new().add((
        actix_web::http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    ));
    if config.secure_cookies() {
        headers.add((
            actix_web::http::header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        ))
    } else {
        headers
    }
}

/// Open files kept for what is not a connection: the database pool, Redis, blobs, logs, the
/// listeners.
const FILES_KEPT: u64 = 256;

/// Raises this process's soft open-files limit to its hard limit (once per process; later
/// calls only read it). The limit in force afterwards, or `None` where it cannot be known.
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        static RAISED: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        *RAISED.get_or_init(|| match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(limit) => {
                tracing::info!(limit, "open-files limit");
                Some(limit)
            }
            Err(err) => {
                tracing::warn!("cannot raise the open-files limit: {err}");
                rlimit::getrlimit(rlimit::Resource::NOFILE)
                    .ok()
                    .map(|(soft, _)| soft)
            }
        })
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The connection cap in force and actix's per-worker limit above it. The cap is the
/// configured one, lowered to three quarters of what the open-files limit leaves for
/// connections. actix stops accepting at twice the cap (at least 64 more), and never past
/// what the open-files limit leaves, split between the workers: room to refuse as many
/// connections as are served, and no `accept` failing for want of descriptors (a flood
/// then waits in the kernel's backlog).
pub fn connection_limits(
    configured: usize,
    open_files: Option<u64>,
    workers: usize,
) -> (usize, usize) {
    let budget = open_files.map_or(usize::MAX, |open_files| {
        usize::try_from(open_files.saturating_sub(FILES_KEPT))
            .unwrap_or(usize::MAX)
            .max(4)
    });
    let cap = configured.clamp(1, (budget / 4).saturating_mul(3).max(1));
    if cap < configured {
        tracing::warn!(
            configured,
            cap,
            open_files,
            "TETHER_MAX_CONNECTIONS lowered to fit the open-files limit"
        );
    }
    let accepted = budget.min(cap.saturating_mul(2).max(cap.saturating_add(64)));
    (cap, (accepted / workers.max(1)).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_the_open_files_limit() {
        // Plenty of descriptors: the configured cap; actix accepts up to twice as many.
        assert_eq!(
            connection_limits(20_000, Some(1_048_576), 2),
            (20_000, 20_000)
        );
        // Few: three quarters of what is left after the files kept, the rest for refusals.
        assert_eq!(connection_limits(20_000, Some(1_024), 1), (576, 768));
        // A small cap leaves at least 64 connections to refuse.
        assert_eq!(connection_limits(3, Some(20_000), 1), (3, 67));
        // Unknown limit: the configured cap.
        assert_eq!(connection_limits(100, None, 4), (100, 50));
        assert_eq!(connection_limits(0, Some(10), 1).0, 1);
    }

    #[test]
    fn slots_are_numbered_and_given_back() {
        let connections = Connections::new(2);
        let first = connections.slot();
        let second = connections.slot();
        let third = connections.slot();
        assert!(!first.over_cap && !second.over_cap && third.over_cap);
        assert_eq!(connections.open(), 3);
        drop((first, third));
        assert_eq!(connections.open(), 1);
        assert!(!connections.slot().over_cap);
    }
}
