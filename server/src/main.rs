//! `tether-server [--listen ADDR] [--database-url URL] [--data-dir DIR]`.

use tether_server::{telemetry, Application, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init_logs();
    let (config, migrate_only) = Config::from_args();
    if migrate_only {
        tether_server::Store::connect(&config).await?;
        tracing::info!("migrations applied");
        return Ok(());
    }
    let application = Application::build(config).await?;
    tracing::info!(url = %application.base_url(), "serving");
    tokio::select! {
        finished = application.run_until_stopped() => finished,
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("ctrl-c: stopping");
            Ok(())
        }
    }
}
