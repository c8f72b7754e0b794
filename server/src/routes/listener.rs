//! The public listener and the HTTP server on it: actix-web's `App` on actix-http's HTTP/1
//! service, with the settings actix-web's `HttpServer` would give it, plus two of our own.
//!
//! - **Backlog.** The listening socket queues up to [`BACKLOG`] connections not yet accepted
//!   (the kernel lowers it to `net.core.somaxconn`). A fleet that lost the server comes back
//!   all at once; with the standard library's 128, the rest of a connect storm had its SYNs
//!   dropped and retried a second or more later.
//! - **Upgrades.** A WebSocket connection (a device's event stream, a console) is served off
//!   actix-http's connection dispatcher once its handshake is answered ([`super::upgrades`]):
//!   the dispatcher keeps an 8 KiB read and an 8 KiB write buffer for as long as a connection
//!   lives, which was most of what an idle connected device cost. Such a connection leaves
//!   actix's count of dispatched connections when its dispatcher ends, and keeps its slot in
//!   [`Connections`] for as long as it lives.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::time::Duration;

use actix_http::body::MessageBody;
use actix_http::{HttpService, KeepAlive, Request, Response};
use actix_service::{map_config, IntoServiceFactory, ServiceFactory, ServiceFactoryExt};
use actix_web::dev::{AppConfig, Extensions, Server, Service};
use anyhow::Context;
use tokio::net::{TcpSocket, TcpStream};

use super::edge::Connections;
use super::upgrades::Upgrades;

/// Connections the kernel queues before they are accepted.
pub const BACKLOG: u32 = 65_535;
/// Idle time before a kept-alive connection is closed (actix-web's default).
const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// A request's head must arrive within this (actix-web's default).
const CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a closing connection may take to shut down (actix-web's default).
const CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The fewest connections a worker dispatches at once, however few files are left.
const MIN_DISPATCHED: usize = 64;

/// Binds `address` with a deep backlog, non-blocking, ready for [`serve`].
///
/// # Errors
/// When the address does not resolve or cannot be bound.
pub fn bind(address: &str) -> anyhow::Result<TcpListener> {
    let resolved: SocketAddr = address
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{address} does not resolve"))?;
    let socket = match resolved {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // As the standard library's bind does on Unix: a restarted server rebinds at once.
    socket.set_reuseaddr(true)?;
    socket.bind(resolved)?;
    let listener = socket.listen(BACKLOG)?.into_std()?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// actix's per-worker limit on the connections it dispatches. actix counts a connection until
/// its dispatcher ends, which for an upgraded one is right after its handshake; upgraded
/// connections hold a slot each (at most the cap), so they come out of actix's share of the
/// open files, and the two together still fit them.
fn dispatched_limit(worker_connections: usize, workers: usize, connections: &Connections) -> usize {
    let workers = workers.max(1);
    let all = worker_connections.saturating_mul(workers);
    (all.saturating_sub(connections.cap()) / workers).max(MIN_DISPATCHED)
}

/// How the server runs.
pub struct Settings {
    pub workers: usize,
    /// actix's per-worker connection limit.
    pub worker_connections: usize,
    /// Every accepted connection takes a slot ([`Connections::slot`]).
    pub connections: Connections,
}

/// Serves `app` (built once per worker, and once more for its upgrades) on `listener`.
///
/// # Errors
/// When the listener cannot be used.
pub fn serve<F, I, S, B>(
    listener: TcpListener,
    app: F,
    settings: Settings,
) -> anyhow::Result<Server>
where
    F: Fn() -> I + Send + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: std::fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let address = listener.local_addr()?;
    let Settings {
        workers,
        worker_connections,
        connections,
    } = settings;
    let server = Server::build()
        .workers(workers)
        .max_concurrent_connections(dispatched_limit(worker_connections, workers, &connections))
        .disable_signals()
        .listen("tether", listener, move || {
            // What HttpServer gives the app: its address as the host when a request names none.
            let config = AppConfig::__priv_test_new(false, address.to_string(), address);
            let upgrades =
                Upgrades::<_, B>::new(app().into_factory(), config.clone(), connections.clone());
            let requests = app().into_factory().map_err(|err| {
                let err: actix_web::Error = err.into();
                err.error_response()
            });
            let connections = connections.clone();
            HttpService::build()
                .keep_alive(KeepAlive::Timeout(KEEP_ALIVE))
                .client_request_timeout(CLIENT_REQUEST_TIMEOUT)
                .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
                .h1_allow_half_closed(true)
                .local_addr(address)
                .on_connect_ext(move |_: &TcpStream, data: &mut Extensions| {
                    data.insert(connections.slot());
                })
                .upgrade(upgrades)
                .finish(map_config(requests, move |()| config.clone()))
                .tcp()
        })?
        .run();
    Ok(server)
}
