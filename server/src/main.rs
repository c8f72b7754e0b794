//! `tether-server [--listen ADDR] [--database-url URL] [--data-dir DIR]`.

use tether_server::{telemetry, Application, Config};

/// mimalloc gives freed memory back to the system; with glibc's allocator, the 19 MiB each
/// argon2id hash takes stayed resident in per-thread arenas after bursts of sign-ins.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // Before the runtime: the OTLP exporters' HTTP client blocks, and flushing them at the end
    // must happen outside it too.
    let telemetry = telemetry::init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(serve());
    drop(runtime);
    telemetry.shutdown();
    served
}

async fn serve() -> anyhow::Result<()> {
    let (config, migrate_only) = Config::from_args();
    if migrate_only {
        tether_server::Store::connect(&config, tether_server::Clock::system()).await?;
        tracing::info!("migrations applied");
        return Ok(());
    }
    let application = Application::build(config).await?;
    tracing::info!(url = %application.base_url(), "serving");
    tokio::select! {
        finished = application.run_until_stopped() => finished,
        signal = stop_signal() => {
            tracing::info!("{signal}: stopping");
            Ok(())
        }
    }
}

/// Ctrl-C, or SIGTERM (how containers and systemd stop a service).
async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return "ctrl-c",
                _ = term.recv() => return "SIGTERM",
            }
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "ctrl-c"
}
