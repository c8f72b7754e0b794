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
//! [`accounts::logout`], [`sweeper::try_expire_leases`].

use std::net::TcpListener;
use std::time::Instant;

use actix_web::dev::Service;
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use tracing::Instrument;

pub mod accounts;
pub mod auth;
pub mod config;
pub mod credentials;
pub mod devices;
pub mod error;
pub mod jobs;
pub mod leases;
pub mod ledger;
pub mod pages;
pub mod pairing;
pub mod routes;
pub mod store;
pub mod sweeper;
pub mod telemetry;

pub use config::Config;
pub use error::ApiError;
pub use store::Store;

/// What every handler reaches through `web::Data<AppState>`.
pub struct AppState {
    pub store: Store,
    pub config: Config,
}

/// A bound, migrated server that has not started serving yet.
pub struct Application {
    listener: TcpListener,
    port: u16,
    state: web::Data<AppState>,
}

impl Application {
    /// Binds `config.listen` (port 0 picks a free port), connects the store and applies its
    /// migrations. Starts no task.
    ///
    /// # Errors
    /// When the address cannot be bound or the database cannot be prepared.
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        let store = Store::connect(&config).await?;
        let listener = TcpListener::bind(&config.listen)
            .with_context(|| format!("binding {}", config.listen))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        tracing::info!(port, backend = store.backend_name(), "tether-server ready");
        Ok(Application {
            listener,
            port,
            state: web::Data::new(AppState { store, config }),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The store, for tests that call domain steps (such as the sweeper) directly.
    pub fn store(&self) -> Store {
        self.state.store.clone()
    }

    /// Serves HTTP and runs the sweeper until either stops (the sweeper only stops with the
    /// task). `main` selects this against ctrl-c.
    ///
    /// # Errors
    /// When the HTTP server fails.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let state = self.state.clone();
        let workers = state.config.http_workers.max(1);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .app_data(routes::json_config())
                .app_data(routes::path_config())
                .app_data(routes::query_config())
                .configure(routes::configure)
                .configure(pages::configure)
                .default_service(web::to(routes::not_found))
                .wrap(routes::error_bodies())
                .wrap_fn(|req, srv| {
                    let request_id = telemetry::request_id(&req);
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
                        telemetry::finish(&mut res, &request_id, started);
                        Ok(res)
                    }
                    .instrument(span)
                })
        })
        .workers(workers)
        .disable_signals()
        .listen(self.listener)?
        .run();
        let sweeper = sweeper::run(self.state.store.clone(), self.state.config.clone());
        tokio::select! {
            served = server => served.context("HTTP server stopped"),
            swept = sweeper => swept.context("sweeper stopped"),
        }
    }
}
