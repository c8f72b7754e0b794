//! tether-server: Tether's coordination service.
//!
//! [`Application::build`] binds the listener and prepares the store; [`Application::run_until_stopped`]
//! serves HTTP and runs the sweeper until one of them stops. See `ARCHITECTURE.md` for the
//! code map.
//!
//! Public API for the web pages (`pages`) and tests: [`AppState`], [`auth::Caller`],
//! [`devices::list`], [`devices::get`], [`devices::rename`], [`devices::revoke`],
//! [`jobs::create`], [`jobs::list`], [`jobs::get`], [`jobs::cancel`], [`pairing::link`],
//! [`pairing::pending_by_user_code`], [`accounts::signup`], [`accounts::login`],
//! [`accounts::logout`], [`sweeper::try_expire_leases`], [`relay::Hub`], and
//! [`clock::ManualClock`] with [`Application::build_with_clock`] for tests that move time.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use actix_web::dev::Service;
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use tracing::Instrument;

pub mod accounts;
pub mod auth;
pub mod clock;
pub mod config;
pub mod consoles;
pub mod credentials;
pub mod devices;
pub mod error;
pub mod jobs;
pub mod metrics;
pub mod notices;
pub mod pages;
pub mod previews;
pub mod proxies;
pub mod push;
pub mod rate_limits;
pub mod relay;
pub mod replica_memory;
pub mod routes;
pub mod spaces;
pub mod state;
pub mod store;
pub mod sweeper;
pub mod telemetry;

pub use clock::Clock;
pub use config::Config;
pub use error::ApiError;
pub use store::Store;

pub use state::AppState;

use relay::Hub;

/// A bound, migrated server that has not started serving yet.
pub struct Application {
    listener: TcpListener,
    port: u16,
    /// The `/metrics` listener (`TETHER_METRICS_LISTEN`), when configured.
    metrics_listener: Option<TcpListener>,
    /// Open connections and the cap in force.
    connections: routes::edge::Connections,
    /// actix's per-worker connection limit, under the open-files limit.
    worker_connections: usize,
    state: web::Data<AppState>,
}

impl Application {
    /// Binds `config.listen` (port 0 picks a free port), connects the store and applies its
    /// migrations, and reaches Redis when one is configured. Starts no task. Times come from
    /// the system clock.
    ///
    /// # Errors
    /// When the address cannot be bound, the database cannot be prepared or Redis does not
    /// answer.
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        Application::build_with_clock(config, Clock::system()).await
    }

    /// Like [`Application::build`], reading every "now" from `clock` (tests pass a
    /// [`clock::ManualClock`] and advance it instead of sleeping).
    ///
    /// # Errors
    /// As [`Application::build`].
    pub async fn build_with_clock(config: Config, clock: Clock) -> anyhow::Result<Application> {
        let state = AppState::connect(config, clock).await?;
        let config = &state.config;
        if config.push_allow_loopback {
            tracing::warn!(
                "TETHER_PUSH_ALLOW_LOOPBACK is on: any account can make this server POST to \
                 its own loopback services. It is for tests only."
            );
        }
        let listener = routes::listener::bind(&config.listen)
            .with_context(|| format!("binding {}", config.listen))?;
        let port = listener.local_addr()?.port();
        let metrics_listener = match config.metrics_listen.as_deref() {
            Some(address) => {
                let metrics_listener = TcpListener::bind(address)
                    .with_context(|| format!("binding the metrics listener {address}"))?;
                metrics_listener.set_nonblocking(true)?;
                Some(metrics_listener)
            }
            None => None,
        };
        let (cap, worker_connections) = routes::edge::connection_limits(
            config.max_connections,
            routes::edge::raise_open_files_limit(),
            config.http_workers.max(1),
        );
        tracing::info!(
            port,
            backend = state.store.backend_name(),
            bus = state.hub.bus_name(),
            "tether-server ready"
        );
        Ok(Application {
            listener,
            port,
            metrics_listener,
            connections: routes::edge::Connections::new(cap),
            worker_connections,
            state: web::Data::new(state),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `http://ADDR` of the `/metrics` listener, when one is configured.
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
            .map(|addr| format!("http://{addr}"))
    }

    /// The connection cap in force (`TETHER_MAX_CONNECTIONS`, lowered to fit the open-files
    /// limit).
    pub fn connection_cap(&self) -> usize {
        self.connections.cap()
    }

    /// The store, for tests that call domain steps (such as the sweeper) directly.
    pub fn store(&self) -> Store {
        self.state.store.clone()
    }

    /// The hub, for tests.
    pub fn hub(&self) -> Hub {
        self.state.hub.clone()
    }

    /// The Web Push notifications, for tests.
    pub fn push(&self) -> push::Push {
        self.state.push.clone()
    }

    /// Serves HTTP, runs the sweeper and the hub's Redis listener until one of them stops
    /// (the sweeper and the listener only stop with the task). `main` selects this against
    /// ctrl-c.
    ///
    /// # Errors
    /// When the HTTP server fails.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        self.run_until(std::future::pending()).await
    }

    /// Like [`Application::run_until_stopped`], stopping HTTP (without waiting for open
    /// connections), the sweeper and the listener once `shutdown` completes. Tests use it to
    /// restart a server on the same database.
    ///
    /// # Errors
    /// When the HTTP server fails.
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let state = self.state.clone();
        let workers = state.config.http_workers.max(1);
        let connections = self.connections.clone();
        let metrics_server = match self.metrics_listener {
            Some(listener) => Some(metrics_server(self.state.clone(), listener)?),
            None => None,
        };
        let app = move || {
            App::new()
                .app_data(state.clone())
                .app_data(routes::json_config())
                .app_data(routes::path_config())
                .app_data(routes::query_config())
                .configure(|cfg| routes::configure(cfg, pages::routes))
                .default_service(web::to(unknown_route))
                .wrap(routes::error_bodies())
                .wrap_fn(routes::edge::bound_body)
                .wrap_fn(routes::edge::limit_connections)
                .wrap(routes::edge::security_headers(&state.config))
                .wrap_fn(|req, srv| {
                    let request_id = telemetry::request_id(&req);
                    let metrics = req
                        .app_data::<web::Data<AppState>>()
                        .map(|state| state.metrics.clone());
                    let route = req
                        .match_pattern()
                        .unwrap_or_else(|| "unmatched".to_owned());
                    let method = req.method().to_string();
                    let span = tracing::info_span!(
                        "request",
                        request_id = %request_id,
                        method = %req.method(),
                        path = %req.path()
                    );
                    let started = Instant::now();
                    let answer = span.in_scope(|| srv.call(req));
                    async move {
                        let mut res = answer.await?;
                        if let Some(metrics) = metrics {
                            let seconds = started.elapsed().as_secs_f64();
                            metrics.record_request(&route, &method, res.status().as_u16(), seconds);
                            telemetry::record_request(
                                &route,
                                &method,
                                res.status().as_u16(),
                                seconds,
                            );
                        }
                        telemetry::finish(&mut res, &request_id, started);
                        Ok(res)
                    }
                    .instrument(span)
                })
        };
        let settings = routes::listener::Settings {
            workers,
            worker_connections: self.worker_connections,
            connections,
        };
        let server = routes::listener::serve(self.listener, app, settings)?;
        let handle = server.handle();
        let metrics_handle = metrics_server.as_ref().map(actix_web::dev::Server::handle);
        let metrics_served = async {
            match metrics_server {
                Some(server) => server.await,
                None => std::future::pending().await,
            }
        };
        let sweeper = sweeper::run(
            self.state.store.clone(),
            self.state.config.clone(),
            self.state.notices.clone(),
        );
        let pushes = self.state.push.clone().run(self.state.store.clone());
        let listener = self.state.hub.clone().listen();
        let presence = self.state.presence.clone().run(
            self.state.store.clone(),
            Duration::from_millis(self.state.config.presence_flush_ms.max(1)),
        );
        // Stopping goes through the handle while the server future keeps being polled; the
        // server future then completes.
        let stopper = async {
            shutdown.await;
            if let Some(metrics_handle) = &metrics_handle {
                metrics_handle.stop(false).await;
            }
            handle.stop(false).await;
            std::future::pending::<()>().await;
        };
        let ended = tokio::select! {
            served = server => served.context("HTTP server stopped"),
            served = metrics_served => served.context("metrics listener stopped"),
            swept = sweeper => swept.context("sweeper stopped"),
            listened = listener => listened.context("relay listener stopped"),
            () = presence => Ok(()),
            () = pushes => Ok(()),
            () = stopper => Ok(()),
        };
        // The contact times of the last interval, so a clean stop loses none.
        if let Err(err) = self.state.presence.flush(&self.state.store).await {
            tracing::warn!("writing the last contact times failed: {err}");
        }
        ended
    }
}

/// The `/metrics` listener: Prometheus text on its own address, one worker, nothing else
/// served (the public listener answers `/metrics` with 404).
fn metrics_server(
    state: web::Data<AppState>,
    listener: TcpListener,
) -> anyhow::Result<actix_web::dev::Server> {
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .route("/metrics", web::get().to(routes::metrics))
            .default_service(web::to(unknown_route))
            .wrap(routes::error_bodies())
            .wrap(routes::edge::security_headers(&state.config))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    Ok(server)
}

/// An unknown route: a page for a browser, the error body for everyone else.
async fn unknown_route(req: actix_web::HttpRequest) -> actix_web::HttpResponse {
    if routes::wants_page(&req) {
        pages::not_found(&req).await
    } else {
        routes::not_found(req).await
    }
}
