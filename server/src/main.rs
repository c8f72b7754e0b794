//! `tether-server [--listen ADDR] [--database-url URL] [--data-dir DIR]`.

use tether_server::{telemetry, Application, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init_logs();
    let config = Config::from_args();
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
