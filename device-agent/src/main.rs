//! `tether-agent`: see the library crate for what each part does.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tether_agent::cli::{self, Cli, Command};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::SandboxExec { spec_file } = &cli.command {
        // The launcher of a confined run: no runtime, no logging; it restricts itself and
        // supervises one program.
        tether_agent::sandbox::launcher::run_main(spec_file);
    }
    init_logging(&cli.command);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("Error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = async {
        // Ctrl-C or SIGTERM stops cleanly; a signal that cannot be watched never fires, so
        // the agent runs until killed rather than stop at once.
        let ctrl_c = async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = ctrl_c => {}
            () = terminated() => {}
        }
    };
    let code = runtime.block_on(cli::execute(cli, shutdown));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Resolves on SIGTERM (never where it cannot be watched).
async fn terminated() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
        return;
    }
    std::future::pending::<()>().await;
}

/// Logs go to stderr; the daemon says what it does (`info`), other commands only warn.
/// `RUST_LOG` overrides both.
fn init_logging(command: &Command) {
    let default = match command {
        Command::Run { .. } => "info",
        _ => "warn",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
