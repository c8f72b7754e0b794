//! `tether-loadtest`: simulated devices and web users against a running `tether-server`.
//!
//! Pairs N devices over the real API, connects each to its event stream and heartbeats it at
//! the pace the server asks, then has web users assign jobs at a constant arrival rate. Every
//! simulated device claims on wake-ups and heartbeats, streams one progress batch and
//! completes. The report gives assignment→claim and assignment→completion percentiles,
//! heartbeat latency and rate, job throughput, errors, lost and duplicated jobs, and the
//! server's memory per connected device.
//!
//! With `--revoke N` the owners revoke N devices halfway through the window, and the report
//! adds how fast the revoked devices noticed, the jobs the revocation ended and whether any
//! revoked token still worked.

mod device;
mod report;
mod revocation;
mod setup;
mod web;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::report::{CpuUse, JobCost, Recorder, Report, RevocationSummary, NOTICE_LIMIT};
use crate::setup::{Account, Device};

/// Command-line options.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Options {
    /// Base URL of the server under load; repeat for several replicas. Devices and users are
    /// spread over them, and a device whose replica stops answering moves to the next one,
    /// as it would behind a load balancer.
    #[arg(long = "server", default_value = "http://127.0.0.1:8080")]
    servers: Vec<String>,
    /// Simulated devices, each with its own token and event stream.
    #[arg(long, default_value_t = 100)]
    devices: usize,
    /// Devices per account (accounts share the concurrent-run limit).
    #[arg(long, default_value_t = 10)]
    devices_per_account: usize,
    /// Jobs assigned per second, spread over the devices.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Seconds of steady assignment after every device is connected.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Pairings in flight at once while connecting the fleet.
    #[arg(long, default_value_t = 64)]
    connect_concurrency: usize,
    /// The server's process id, to read its memory (Linux `/proc`).
    #[arg(long)]
    server_pid: Option<u32>,
    /// The database server's process id (PostgreSQL's postmaster), to read the CPU its
    /// process tree used in the window: the CPU cell then gives server, database and total
    /// CPU milliseconds per job.
    #[arg(long)]
    database_pid: Option<u32>,
    /// A shell command run with `start` appended just before the window opens, and with
    /// `settled` appended once every job is done (before the audit reads them back); the run
    /// waits for it. loadtests/run.sh counts PostgreSQL's statements and transactions with it.
    #[arg(long, value_name = "COMMAND")]
    window_hook: Option<String>,
    /// Print the report as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// A label for the report row.
    #[arg(long, default_value = "run")]
    label: String,
    /// Milliseconds each simulated job runs between its progress batch and its completion
    /// (0: it completes at once).
    #[arg(long, default_value_t = 0)]
    job_ms: u64,
    /// Devices their owners revoke, all at once and spread over the accounts, halfway
    /// through the assignment window (through `--server`'s first replica).
    #[arg(long, default_value_t = 0)]
    revoke: usize,
    /// Only pair the devices, write one line per device to FILE (its token, a tab, its
    /// heartbeat body) for `wrk -s loadtests/heartbeat.lua`, and exit.
    #[arg(long, value_name = "FILE")]
    wrk_out: Option<std::path::PathBuf>,
    /// Print the markdown table's header and exit.
    #[arg(long)]
    print_header: bool,
}

/// One line per device for wrk: its token, a tab, the body of its heartbeat.
fn write_wrk_devices(path: &std::path::Path, devices: &[Device]) -> anyhow::Result<()> {
    let mut text = String::new();
    for device in devices {
        let body = serde_json::json!({
            "capabilities": device::capabilities(device),
            "running": [],
        });
        text.push_str(&format!("{}\t{body}\n", device.token));
    }
    std::fs::write(path, text)?;
    eprintln!(
        "{} devices paired; wrk lines in {}",
        devices.len(),
        path.display()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    if options.print_header {
        println!("{}", report::Report::table_header());
        return Ok(());
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(30))
        .build()?;
    let recorder = Arc::new(Recorder::default());

    let connect_started = Instant::now();
    let servers = &options.servers;
    let n_accounts = options.devices.div_ceil(options.devices_per_account.max(1));
    let accounts = setup::accounts(&http, &servers[0], n_accounts).await?;
    let devices = setup::pair_devices(
        &http,
        servers,
        &accounts,
        options.devices,
        options.connect_concurrency,
    )
    .await?;
    if let Some(path) = &options.wrk_out {
        return write_wrk_devices(path, &devices);
    }
    let fleet = device::start_fleet(
        servers,
        devices.clone(),
        Duration::from_millis(options.job_ms),
        recorder.clone(),
    )
    .await?;
    let connect_secs = connect_started.elapsed().as_secs_f64();
    eprintln!(
        "{} devices paired and connected in {connect_secs:.1} s",
        devices.len()
    );
    let rss_before = options.server_pid.and_then(report::rss_bytes);

    run_window_hook(options.window_hook.as_deref(), "start").await?;
    recorder.start_window();
    let database_at_start = options.database_pid.and_then(report::process_tree_cpu_secs);
    let cpu_at_start = (
        report::cpu_secs(None),
        options
            .server_pid
            .and_then(|pid| report::cpu_secs(Some(pid))),
    );
    let load = web::Load {
        rate: options.rate,
        duration: Duration::from_secs(options.duration),
    };
    let revoked = revocation::pick(&devices, options.revoke);
    let revoking = tokio::spawn(revoke_halfway(
        http.clone(),
        servers[0].clone(),
        accounts.clone(),
        revoked.clone(),
        recorder.clone(),
        load.duration / 2,
    ));
    let assigned =
        web::assign_at_rate(&http, servers, &devices, &accounts, load, recorder.clone()).await;
    let window = recorder.stop_window();
    let spent = |before: Option<f64>, now: Option<f64>| Some(now? - before?);
    let database_secs = spent(
        database_at_start,
        options.database_pid.and_then(report::process_tree_cpu_secs),
    );
    let cpu = CpuUse {
        window_secs: window.1.as_secs_f64(),
        generator_secs: spent(cpu_at_start.0, report::cpu_secs(None)),
        server_secs: spent(
            cpu_at_start.1,
            options
                .server_pid
                .and_then(|pid| report::cpu_secs(Some(pid))),
        ),
    };
    revoking.await?;
    let settled = web::wait_settled(&recorder, &assigned, Duration::from_secs(60)).await;
    let job_cost = JobCost {
        server_secs: spent(
            cpu_at_start.1,
            options
                .server_pid
                .and_then(|pid| report::cpu_secs(Some(pid))),
        ),
        database_secs: spent(
            database_at_start,
            options.database_pid.and_then(report::process_tree_cpu_secs),
        ),
        jobs: settled,
    };
    run_window_hook(options.window_hook.as_deref(), "settled").await?;
    revocation::wait_noticed(&recorder, NOTICE_LIMIT).await;
    let audit = web::audit(&http, servers, &accounts, &assigned, &recorder).await?;
    let revocation = if revoked.is_empty() {
        None
    } else {
        let still_working = revocation::probe_tokens(&http, servers, &revoked).await;
        Some(RevocationSummary::build(
            &recorder,
            revocation::on_other_replica(servers, &revoked),
            still_working,
        ))
    };
    let rss = options
        .server_pid
        .and_then(report::rss_bytes)
        .or(rss_before);
    fleet.stop().await;

    let report = Report::build(
        &options.label,
        &recorder,
        devices.len(),
        window,
        connect_secs,
        settled,
        audit,
        rss,
        revocation,
        cpu,
    )
    .with_costs(database_secs, job_cost);
    if options.json {
        println!("{}", report.to_json());
    } else {
        println!("{}", Report::table_header());
        println!("{}", report.table_row());
        if let Some(line) = report.revocation_line() {
            println!("\n{line}");
        }
    }
    Ok(())
}

/// Runs `--window-hook`'s command with `phase` appended and waits for it; its output goes
/// to stderr, so a `--json` report stays alone on stdout.
async fn run_window_hook(command: Option<&str>, phase: &str) -> anyhow::Result<()> {
    let Some(command) = command else {
        return Ok(());
    };
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{command} {phase}"))
        .stdout(std::io::stderr())
        .status()
        .await?;
    anyhow::ensure!(
        status.success(),
        "the window hook failed at {phase}: {status}"
    );
    Ok(())
}

/// Waits `after`, then has the owners revoke `devices` (nothing when there are none).
async fn revoke_halfway(
    http: reqwest::Client,
    server: String,
    accounts: Vec<Account>,
    devices: Vec<Device>,
    recorder: Arc<Recorder>,
    after: Duration,
) {
    if devices.is_empty() {
        return;
    }
    tokio::time::sleep(after).await;
    revocation::revoke(&http, &server, &accounts, &devices, &recorder).await;
    eprintln!("{} devices revoked", devices.len());
}
