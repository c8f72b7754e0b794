//! `tether-stream`: streaming output at fleet scale. Many jobs run at once, each printing
//! lines at a steady pace and sending them in progress batches as the real agent does,
//! while simulated browsers follow some of the job pages on their event streams.
//!
//! Setup goes through the real API: accounts enough that every job fits under the
//! per-account limit of runs at once, one paired device per job, its job assigned and
//! claimed. Heartbeats list each device's running job, as the agent's do. For the window
//! each job sends its lines (each carries its number and its batch's send time on this
//! process's clock); each watcher holds one `GET /api/jobs/{id}/events` stream and times
//! every line from send to receipt. Then every job completes, each watched stream must end
//! on the job's final state, and each watched job is read back: no accepted line missing
//! or stored twice, each received exactly once, timeline `seq`s without gap or repeat.
//!
//! It prints one markdown row: lines per second sent and accepted, rejections and errors,
//! progress-call and send→receive percentiles, lines lost or repeated, CPU seconds per
//! 1,000 lines of the server, the database (`--database-pid`, the postmaster's tree) and
//! this generator, and the server's memory.
//!
//! ```sh
//! target/release/tether-stream --server http://127.0.0.1:8080 --jobs 1000 \
//!     --lines-per-sec 20 --watchers 500 --duration 60 --server-pid PID --database-pid PID
//! ```

#[path = "../stream/audit.rs"]
mod audit;
#[path = "../device.rs"]
#[allow(dead_code)] // only its heartbeat capabilities
mod device;
#[path = "../stream/fleet.rs"]
mod fleet;
#[path = "../stream/output.rs"]
mod output;
#[path = "../report.rs"]
#[allow(dead_code)] // only its /proc readings
mod report;
#[path = "../stream/row.rs"]
mod row;
#[path = "../stream/sender.rs"]
mod sender;
#[path = "../setup.rs"]
#[allow(dead_code)]
mod setup;
#[path = "../stream/sse.rs"]
mod sse;
#[path = "../stream/usage.rs"]
mod usage;
#[path = "../stream/watcher.rs"]
mod watcher;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::sync::watch;

use crate::fleet::{LeaseKeeper, RunningJob};
use crate::output::RunClock;
use crate::row::{Millis, Row};
use crate::sender::{JobSent, Pace, SendTally, Sending};
use crate::usage::Usage;
use crate::watcher::{Seen, Watcher};

/// The real agent's batching: `device-agent/src/run/progress.rs` flushes every 250 ms.
const AGENT_BATCHES_PER_SEC: f64 = 4.0;

/// Command-line options.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Streaming output at fleet scale: running jobs sending lines, browsers watching."
)]
struct Options {
    /// Base URL of the server under load.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    server: String,
    /// Jobs running at once, one per simulated device.
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Lines each job prints per second.
    #[arg(long, default_value_t = 20.0)]
    lines_per_sec: f64,
    /// Progress batches each job sends per second (default: the real agent's, one per
    /// 250 ms).
    #[arg(long, default_value_t = AGENT_BATCHES_PER_SEC)]
    batches_per_sec: f64,
    /// Bytes of each line's text.
    #[arg(long, default_value_t = 100)]
    line_bytes: usize,
    /// Event-stream watchers, each on its own running job.
    #[arg(long, default_value_t = 500)]
    watchers: usize,
    /// Seconds of sending.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Runs one account may have at once: the server's `max_running_per_account`.
    #[arg(long, default_value_t = 4)]
    runs_per_account: usize,
    /// The server's process id, for its CPU and memory (Linux `/proc`).
    #[arg(long)]
    server_pid: Option<u32>,
    /// The database's process id (PostgreSQL's postmaster), for the CPU of its tree.
    #[arg(long)]
    database_pid: Option<u32>,
    /// A label for the row.
    #[arg(long, default_value = "stream")]
    label: String,
    /// Print the markdown table's header and exit.
    #[arg(long)]
    print_header: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse();
    if options.print_header {
        println!("{}", Row::header());
        return Ok(());
    }
    anyhow::ensure!(
        options.watchers <= options.jobs,
        "--watchers is at most --jobs: each watches its own job"
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(4096)
        // Below actix-web's 5 s keep-alive, so an idle connection is dropped here first.
        .pool_idle_timeout(Duration::from_secs(4))
        .timeout(Duration::from_secs(30))
        .build()?;
    let server = options.server.trim_end_matches('/').to_owned();
    let run = Run::start(&options, http, server).await?;
    let window = run.send(&options).await;
    let row = run.wind_down(&options, window).await;
    println!("{}", Row::header());
    println!("{}", row.markdown());
    Ok(())
}

/// A run under way: its jobs running, their leases kept, their watchers following.
struct Run {
    http: reqwest::Client,
    server: String,
    fleet: fleet::Fleet,
    keeper: LeaseKeeper,
    clock: RunClock,
    /// Indices of the watched jobs, in the order of `watchers`.
    watched: Vec<usize>,
    watchers: Vec<Watcher>,
    stop: watch::Sender<bool>,
}

/// What the sending window did.
struct Window {
    sent: Vec<JobSent>,
    tally: Arc<SendTally>,
    spent: usage::Spent,
    rss_bytes: Option<u64>,
    load_average: Option<f64>,
}

impl Run {
    /// Every job claimed and held, every watcher's stream open.
    async fn start(
        options: &Options,
        http: reqwest::Client,
        server: String,
    ) -> anyhow::Result<Run> {
        let started = Instant::now();
        let timeout_minutes = options.duration / 60 + 30;
        let fleet = fleet::start(
            &http,
            &server,
            options.jobs,
            options.runs_per_account,
            timeout_minutes,
        )
        .await?;
        eprintln!(
            "{} jobs running in {:.1} s",
            fleet.jobs.len(),
            started.elapsed().as_secs_f64()
        );
        let keeper = LeaseKeeper::start(&http, &server, &fleet.jobs, fleet.heartbeat_secs);
        let clock = RunClock::start();
        let (stop, stopped) = watch::channel(false);
        let watched = watched_indices(fleet.jobs.len(), options.watchers);
        let watchers = open_watchers(&server, &fleet.jobs, &watched, clock, stopped).await?;
        eprintln!("{} watchers following their jobs", watchers.len());
        Ok(Run {
            http,
            server,
            fleet,
            keeper,
            clock,
            watched,
            watchers,
            stop,
        })
    }

    /// Every job sends its lines for `--duration`; each side's CPU is read around it.
    async fn send(&self, options: &Options) -> Window {
        let tally = Arc::new(SendTally::default());
        let sending = Sending {
            http: self.http.clone(),
            server: self.server.clone(),
            pace: Pace {
                lines_per_sec: options.lines_per_sec,
                batches_per_sec: options.batches_per_sec,
                line_bytes: options.line_bytes,
            },
            clock: self.clock,
            deadline: Instant::now() + Duration::from_secs(options.duration),
            tally: tally.clone(),
        };
        let before = Usage::read(options.server_pid, options.database_pid);
        let sent = sender::send_all(&sending, &self.fleet.jobs).await;
        let spent = Usage::read(options.server_pid, options.database_pid).since(&before);
        eprintln!(
            "{} lines accepted in {:.1} s",
            tally.lines_accepted.load(Ordering::Relaxed),
            spent.secs
        );
        Window {
            sent,
            tally,
            spent,
            rss_bytes: options.server_pid.and_then(report::rss_bytes),
            load_average: usage::load_average(),
        }
    }

    /// Lets the watchers catch up, completes every job, lets each stream end on its job's
    /// final state, and audits the watched jobs; the row.
    async fn wind_down(self, options: &Options, window: Window) -> Row {
        wait_received(
            &self.watchers,
            &self.watched,
            &window.sent,
            Duration::from_secs(10),
        )
        .await;
        let mut errors = window.tally.errors();
        let heartbeats_failed = self.keeper.stop().await;
        let completions_failed =
            fleet::complete_all(&self.http, &self.server, &self.fleet.jobs).await;
        for (why, count) in heartbeats_failed.iter().chain(&completions_failed) {
            add(&mut errors, why, *count);
        }
        let seen = finish_watchers(self.watchers, Duration::from_secs(15)).await;
        let _ = self.stop.send(true);
        for error in seen.iter().flat_map(|one| &one.errors) {
            add(&mut errors, error, 1);
        }
        let audited: Vec<audit::Watched> = self
            .watched
            .iter()
            .zip(&seen)
            .map(|(index, seen)| audit::Watched {
                job: &self.fleet.jobs[*index],
                sent: &window.sent[*index],
                seen,
            })
            .collect();
        let audit = audit::audit(&self.http, &self.server, &audited).await;
        row(options, self.fleet.jobs.len(), window, &seen, errors, audit)
    }
}

/// The run's row, from what the window sent and what the watchers saw.
fn row(
    options: &Options,
    jobs: usize,
    window: Window,
    seen: &[Seen],
    errors: BTreeMap<String, u64>,
    audit: audit::Audit,
) -> Row {
    let tally = &window.tally;
    let latencies = seen.iter().flat_map(|one| one.latencies.iter().copied());
    Row {
        label: options.label.clone(),
        jobs,
        watchers: seen.len(),
        target_per_sec: options.lines_per_sec * jobs as f64,
        lines_sent: tally.lines_sent.load(Ordering::Relaxed),
        lines_accepted: tally.lines_accepted.load(Ordering::Relaxed),
        lines_rejected: tally.lines_rejected.load(Ordering::Relaxed),
        errors,
        progress: Millis::of(tally.call_micros()),
        latency: Millis::of(latencies.collect()),
        lag: Millis::of(tally.lag_micros()),
        lag_limit_ms: 500.0 / options.batches_per_sec.max(0.001),
        audit,
        spent: window.spent,
        rss_bytes: window.rss_bytes,
        load_average: window.load_average,
    }
}

fn add(errors: &mut BTreeMap<String, u64>, what: &str, count: u64) {
    if count > 0 {
        *errors.entry(what.to_owned()).or_default() += count;
    }
}

/// Which jobs are watched: `watchers` of them, spread evenly over the fleet (and so over
/// its accounts).
fn watched_indices(jobs: usize, watchers: usize) -> Vec<usize> {
    if watchers == 0 {
        return Vec::new();
    }
    (0..watchers).map(|n| n * jobs / watchers).collect()
}

/// Opens one stream per watched job and waits until each answered 200.
async fn open_watchers(
    server: &str,
    jobs: &[RunningJob],
    watched: &[usize],
    clock: RunClock,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<Vec<Watcher>> {
    // Streams stay open for the whole run: no overall timeout, one connection each.
    let streams = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let watchers: Vec<Watcher> = watched
        .iter()
        .map(|index| {
            let job = jobs[*index].clone();
            watcher::watch(
                streams.clone(),
                server.to_owned(),
                job,
                clock,
                stopped.clone(),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: Vec<&Watcher> = watchers
            .iter()
            .filter(|watcher| !watcher.seen().connected)
            .collect();
        let Some(first) = waiting.first() else {
            return Ok(watchers);
        };
        let why = first.seen().errors.first().cloned().unwrap_or_default();
        // A 404 is the answer of a server without the route: waiting will not change it.
        if Instant::now() >= deadline || why.contains("404") {
            anyhow::bail!(
                "{} of {} watchers could not open GET /api/jobs/{{id}}/events: {why}",
                waiting.len(),
                watchers.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every watcher received every line its job had accepted, or `limit`.
async fn wait_received(watchers: &[Watcher], watched: &[usize], sent: &[JobSent], limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let behind = watchers
            .iter()
            .zip(watched)
            .any(|(watcher, index)| (watcher.seen().lines.len() as u64) < sent[*index].count());
        if !behind {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lets each stream end on its job's final state (up to `limit`); what each saw.
async fn finish_watchers(watchers: Vec<Watcher>, limit: Duration) -> Vec<Seen> {
    let finishing = watchers.into_iter().map(|watcher| watcher.finish(limit));
    futures_util::future::join_all(finishing).await
}
