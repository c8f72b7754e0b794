//! `tether-idle`: an idle fleet on one replica, and the connect storm it makes.
//!
//! Pairs N devices through the real pairing routes, lets every setup connection close, then
//! starts the storm: every device connects its event stream and heartbeats at once, as after
//! a server restart, each retrying with the agent's own backoff and jitter (see
//! `idle/agent.rs`). It measures the storm (until every device has its stream open and one
//! heartbeat answered), the devices that had not finished when it stops counting, then a
//! steady window of the idle fleet: heartbeat latency, the server's resident memory per
//! device above a fresh server's, its CPU, and the generator's own. It prints one markdown
//! row, a line of failures by reason and, for a fleet smaller than `--extrapolate-to`, what
//! the measured per-device costs come to there (extrapolated, not measured).
//!
//! Each device holds its stream and, for a few seconds after each heartbeat, a second
//! connection. A fleet one process cannot hold within its open-files limit runs in several
//! generator processes (this program with `--worker`), and connections come from several
//! loopback source addresses. The server must fit the fleet too: it refuses connections
//! past its cap (`TETHER_MAX_CONNECTIONS`, at most three quarters of its open-files limit),
//! and the run says so before it starts when N cannot fit.
//!
//! ```sh
//! TETHER_RATE_LIMITS=off TETHER_MAX_CONNECTIONS=30000 target/release/tether-server &
//! target/release/tether-idle --server http://127.0.0.1:8080 --devices 12000 \
//!     --server-pid "$(pgrep tether-server)"
//! ```

#[path = "../../../device-agent/src/remote/backoff.rs"]
mod backoff;
#[path = "../device.rs"]
#[allow(dead_code)] // only `capabilities`: the heartbeat body
mod device;
#[path = "../report.rs"]
#[allow(dead_code)] // only the /proc readers
mod report;
#[path = "../setup.rs"]
#[allow(dead_code)] // the accounts and pairing, not every field
mod setup;

#[path = "../idle/agent.rs"]
mod agent;
#[path = "../idle/server_process.rs"]
mod server_process;
#[path = "../idle/summary.rs"]
mod summary;
#[path = "../idle/tally.rs"]
mod tally;
#[path = "../idle/wire.rs"]
mod wire;
#[path = "../idle/worker.rs"]
mod worker;

use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use tokio::time::Instant;

use crate::server_process::ServerProcess;
use crate::setup::Device;
use crate::summary::Summary;
use crate::tally::Outcome;
use crate::worker::{Share, SharedDevice, Worker};

/// Descriptors a generator process keeps for itself.
const GENERATOR_FILES_KEPT: u64 = 256;

/// Command-line options.
#[derive(Debug, Parser)]
#[command(version, about = "An idle fleet on one replica and its connect storm.")]
struct Options {
    /// Base URL of the server (one replica).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,
    /// The server's process id: its memory and CPU are read from /proc.
    #[arg(long, required_unless_present_any = ["print_header", "worker"])]
    server_pid: Option<u32>,
    /// Simulated idle devices.
    #[arg(long, default_value_t = 1000)]
    devices: usize,
    /// Run the largest fleet the server can hold when --devices cannot fit it (without it,
    /// such a run is refused).
    #[arg(long)]
    fit: bool,
    /// Devices per account (each account costs a sign-up, a password hash).
    #[arg(long, default_value_t = 1000)]
    devices_per_account: usize,
    /// Pairings in flight at once.
    #[arg(long, default_value_t = 64)]
    pair_concurrency: usize,
    /// Generator processes (0: as few as the open-files limit allows).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Loopback source addresses, from 127.0.0.2 on (0: enough for the fleet's ports).
    #[arg(long, default_value_t = 0)]
    sources: usize,
    /// Seconds after the storm's start past which unfinished devices count as given up (the
    /// agent itself never gives up).
    #[arg(long, default_value_t = 300)]
    give_up_secs: u64,
    /// Seconds between the storm's end and the steady window (the storm's kept-alive
    /// connections close meanwhile).
    #[arg(long, default_value_t = 15)]
    settle_secs: u64,
    /// Seconds of the steady window: heartbeat latency, idle CPU and memory.
    #[arg(long, default_value_t = 60)]
    window_secs: u64,
    /// The fleet size the per-device costs are extrapolated to, when larger than --devices.
    #[arg(long, default_value_t = 100_000)]
    extrapolate_to: usize,
    /// A label for the row.
    #[arg(long, default_value = "idle fleet")]
    label: String,
    /// Print the markdown table's header and exit.
    #[arg(long)]
    print_header: bool,
    /// Run as one generator process of a fleet (internal).
    #[arg(long, hide = true)]
    worker: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut options = Options::parse();
    if options.print_header {
        println!("{}", Summary::table_header());
        return Ok(());
    }
    if options.worker {
        return worker::serve().await;
    }
    let Some(pid) = options.server_pid else {
        bail!("--server-pid is needed");
    };
    let server = ServerProcess { pid };
    options.devices = fleet_size(&server, options.devices, options.fit)?;
    let summary = run(&options, server).await?;
    println!("{}", Summary::table_header());
    println!("{}", summary.table_row());
    println!();
    println!("{}", summary.failures_line());
    if options.extrapolate_to > options.devices {
        println!("{}", summary.extrapolation_line(options.extrapolate_to));
    }
    Ok(())
}

async fn run(options: &Options, server: ServerProcess) -> anyhow::Result<Summary> {
    let open_files = raise_open_files_limit();
    let workers = options
        .workers
        .max(workers_needed(options.devices, open_files));
    let sources = match options.sources {
        0 => wire::sources_for(options.devices),
        sources => sources,
    };
    server
        .wait_connections_closed(Duration::from_secs(10))
        .await?;
    let mut summary = Summary {
        label: options.label.clone(),
        devices: options.devices,
        workers,
        give_up_secs: options.give_up_secs,
        rss_fresh: server.rss_bytes()?,
        ..Summary::default()
    };

    let pairing = Instant::now();
    let devices = pair(options).await?;
    summary.pairing_secs = pairing.elapsed().as_secs_f64();
    eprintln!(
        "{} devices paired in {:.1} s; waiting for the setup's connections to close",
        devices.len(),
        summary.pairing_secs
    );
    server
        .wait_connections_closed(Duration::from_secs(60))
        .await?;
    summary.rss_before_storm = server.rss_bytes()?;

    let shares = split(&options.server, sources, &devices, workers);
    drop(devices);
    let mut fleet = Vec::with_capacity(workers);
    for share in &shares {
        fleet.push(Worker::start(share).await?);
    }
    drop(shares);
    eprintln!("{workers} generator processes, {sources} source addresses: storm");
    let generator_at_start = generator_cpu(&fleet);
    let storm_start_ms = worker::unix_ms_now() + 1000;
    for worker in &mut fleet {
        worker.send(&format!("go {storm_start_ms}")).await?;
    }
    await_storm(&mut fleet, options).await?;
    let generator_after_storm = generator_cpu(&fleet);

    tokio::time::sleep(Duration::from_secs(options.settle_secs)).await;
    let window_start_ms = worker::unix_ms_now();
    let server_at_start = server.cpu_secs()?;
    let generator_at_window = generator_cpu(&fleet);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(options.window_secs)).await;
    summary.window_secs = window.elapsed().as_secs_f64();
    summary.server_cpu_secs = server.cpu_secs()? - server_at_start;
    summary.generator_window_cpu_secs = generator_cpu(&fleet) - generator_at_window;
    let window_end_ms = worker::unix_ms_now();
    summary.rss_steady = server.rss_bytes()?;
    summary.load_average = server_process::load_average();

    let mut outcomes = Vec::with_capacity(fleet.len());
    for worker in fleet {
        outcomes.push(worker.finish().await?);
    }
    let storm_cpu = generator_after_storm - generator_at_start;
    tally_outcomes(&mut summary, &outcomes, (window_start_ms, window_end_ms));
    summary.generator_storm_cpu_secs = storm_cpu;
    Ok(summary)
}

/// Raises this process's open-files limit to the hard one (workers inherit it).
fn raise_open_files_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(err) => {
            eprintln!("cannot raise the open-files limit: {err}");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// Connections the server must serve: every device's stream, and the heartbeat connections
/// it keeps alive at a time (a few seconds of each device's 30 s; a sixth covers actix's 5 s
/// keep-alive), with a little room.
fn connections_needed(devices: usize) -> u64 {
    (devices + devices / 6 + 64) as u64
}

/// The fleet to run: `requested`, or with `fit` the largest the server can hold when that is
/// fewer. A fleet that does not fit without `fit` is refused, saying what it needs.
fn fleet_size(server: &ServerProcess, requested: usize, fit: bool) -> anyhow::Result<usize> {
    let cap = server.connection_cap()?;
    let needed = connections_needed(requested);
    if needed <= cap {
        return Ok(requested);
    }
    let fits = (0..=requested)
        .rev()
        .find(|n| connections_needed(*n) <= cap)
        .unwrap_or(0);
    let why = format!(
        "{requested} devices need about {needed} connections at the server, which serves {cap} \
         (TETHER_MAX_CONNECTIONS, at most three quarters of its open-files limit less 256; \
         {requested} devices need TETHER_MAX_CONNECTIONS ≥ {needed} and an open-files limit \
         ≥ {}). The largest fleet that fits this server: {fits}.",
        needed * 4 / 3 + 256
    );
    if !fit {
        bail!("{why}");
    }
    eprintln!("{why} Running {fits} (--fit).");
    Ok(fits)
}

/// Generator processes for `devices`: each device may hold two connections at once (its
/// stream and a heartbeat's) within one process's open-files limit.
fn workers_needed(devices: usize, open_files: u64) -> usize {
    let per_process = (open_files.saturating_sub(GENERATOR_FILES_KEPT) / 2).max(1);
    devices.div_ceil(per_process as usize).max(1)
}

/// Signs up the accounts and pairs every device.
async fn pair(options: &Options) -> anyhow::Result<Vec<Device>> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(options.pair_concurrency)
        .timeout(Duration::from_secs(60))
        .build()?;
    let accounts_needed = options.devices.div_ceil(options.devices_per_account.max(1));
    let accounts = setup::accounts(&http, &options.server, accounts_needed).await?;
    setup::pair_devices(
        &http,
        std::slice::from_ref(&options.server),
        &accounts,
        options.devices,
        options.pair_concurrency,
    )
    .await
}

/// The devices in `workers` shares, each with its heartbeat body.
fn split(server: &str, sources: usize, devices: &[Device], workers: usize) -> Vec<Share> {
    let size = devices.len().div_ceil(workers.max(1)).max(1);
    devices
        .chunks(size)
        .enumerate()
        .map(|(n, chunk)| Share {
            server: server.to_owned(),
            sources,
            first_index: n * size,
            devices: chunk
                .iter()
                .map(|device| SharedDevice {
                    token: device.token.clone(),
                    heartbeat_body: serde_json::json!({
                        "capabilities": device::capabilities(device),
                        "running": [],
                    })
                    .to_string(),
                })
                .collect(),
        })
        .collect()
}

/// Follows the storm until every device finished or the give-up time passed.
async fn await_storm(fleet: &mut [Worker], options: &Options) -> anyhow::Result<()> {
    let give_up = Instant::now() + Duration::from_secs(1 + options.give_up_secs);
    let mut reported = Instant::now();
    loop {
        let mut finished = 0;
        for worker in fleet.iter_mut() {
            finished += tokio::time::timeout_at(give_up, worker.progress())
                .await
                .unwrap_or(Ok(worker.finished))?;
        }
        if finished == options.devices || Instant::now() >= give_up {
            eprintln!(
                "storm over: {finished} of {} devices finished",
                options.devices
            );
            return Ok(());
        }
        if reported.elapsed() >= Duration::from_secs(5) {
            eprintln!("storm: {finished} of {} devices finished", options.devices);
            reported = Instant::now();
        }
    }
}

/// CPU seconds of this process and every worker so far.
fn generator_cpu(fleet: &[Worker]) -> f64 {
    let workers: f64 = fleet
        .iter()
        .filter_map(|worker| report::cpu_secs(Some(worker.pid()?)))
        .sum();
    workers + report::cpu_secs(None).unwrap_or(0.0)
}

/// The storm's figures and the window's heartbeats from every worker's outcome.
fn tally_outcomes(summary: &mut Summary, outcomes: &[Outcome], (start_ms, end_ms): (u64, u64)) {
    let finished: Vec<u64> = outcomes
        .iter()
        .flat_map(|outcome| outcome.finished_ms.iter().flatten().copied())
        .collect();
    summary.gave_up = summary.devices - finished.len();
    summary.storm_secs = if summary.gave_up == 0 {
        finished.iter().max().copied().unwrap_or(0) as f64 / 1000.0
    } else {
        summary.give_up_secs as f64
    };
    for outcome in outcomes {
        for (reason, count) in &outcome.failures {
            *summary.failures.entry(reason.clone()).or_default() += count;
        }
    }
    let in_window: Vec<(u64, u64)> = outcomes
        .iter()
        .flat_map(|outcome| outcome.heartbeats.iter().copied())
        .filter(|(sent, _)| (start_ms..end_ms).contains(sent))
        .collect();
    let mut per_second = std::collections::HashMap::<u64, usize>::new();
    for (sent, _) in &in_window {
        *per_second.entry(sent / 1000).or_default() += 1;
    }
    summary.heartbeats_peak = per_second.values().copied().max().unwrap_or(0);
    let mut latencies: Vec<f64> = in_window
        .iter()
        .map(|(_, micros)| *micros as f64 / 1000.0)
        .collect();
    summary.heartbeats_per_sec = latencies.len() as f64 / summary.window_secs.max(0.001);
    if !latencies.is_empty() {
        summary.heartbeat_p99 = Some(summary::quantile(&mut latencies, 0.99));
        summary.heartbeat_p50 = Some(summary::quantile(&mut latencies, 0.50));
    }
}
