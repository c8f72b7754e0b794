//! The daemon loop behind `tether-agent run`.
//!
//! Shaped like mini-redis's server: [`run`] takes its context and a shutdown future, and the
//! caller (main) passes `ctrl_c()`. Three kinds of task run side by side:
//!
//! - the **heartbeat** task, alone on its own tokio task so busy runs cannot starve it,
//!   reports capabilities and held leases every `heartbeatSecs`, applies `lost` and
//!   `cancelRequested`, and wakes the claim loop;
//! - the **claim loop** (this function's body) claims while below `max_runs`: after each
//!   heartbeat and as soon as a run ends;
//! - one **run** task per claimed job ([`crate::runner::run_job`]).
//!
//! A 401 `revoked` from any of them ends everything: runs are killed, the token forgotten.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Result;
use tether_protocol::capabilities::{Capabilities, Engine, EngineKind, SealKey};
use tether_protocol::devices::{HeartbeatParams, HeartbeatResponse, HeldLease};
use tether_protocol::jobs::ClaimedJob;
use tether_protocol::{JobId, PROTOCOL_VERSION};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use crate::backoff::Backoff;
use crate::client::{ApiError, DeviceClient};
use crate::runner::{run_job, RunEnd, RunStop, StopReason};
use crate::seal_key::SealKeyPair;
use crate::state::{Config, DataDir};
use crate::{sandbox, AGENT_VERSION};

/// Heartbeat period until the server says otherwise.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);
/// Bounds on the period the server may ask for, so a bad answer cannot make us spin or go
/// silent long enough to lose our leases.
const MIN_HEARTBEAT: Duration = Duration::from_secs(1);
const MAX_HEARTBEAT: Duration = Duration::from_secs(300);
/// How long runs get to stop when the daemon ends, before they are abandoned.
const STOP_RUNS_WAIT: Duration = Duration::from_secs(15);

/// Everything `run` needs, loaded and checked by the caller.
pub struct Ctx {
    pub data_dir: DataDir,
    pub client: DeviceClient,
    /// The configuration at start; reloaded from disk at every heartbeat.
    pub config: Config,
    pub seal_key: SealKey,
    /// How many jobs may run at once.
    pub max_runs: usize,
}

/// Why the daemon stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonEnd {
    /// The shutdown future resolved.
    Shutdown,
    /// The server revoked this computer; the token and seal key are forgotten.
    Revoked,
}

/// Loads what `run` needs from the data dir: `None` when the computer is not paired.
///
/// # Errors
/// When local files are unreadable or the seal key cannot be opened.
pub fn load_ctx(data_dir: DataDir, max_runs: usize) -> Result<Option<Ctx>> {
    let config = data_dir.load_or_init_config()?;
    let (Some(pairing), Some(token)) = (config.pairing.clone(), data_dir.load_token()?) else {
        return Ok(None);
    };
    let Some(seal_key) = SealKeyPair::load(&data_dir)? else {
        anyhow::bail!("the seal key is missing; unpair and pair this computer again");
    };
    let server = crate::client::ServerClient::new(&pairing.server)?;
    Ok(Some(Ctx {
        client: DeviceClient::new(server, token),
        config,
        seal_key: seal_key.public().clone(),
        data_dir,
        max_runs: max_runs.max(1),
    }))
}

/// State shared by the claim loop, the heartbeat task and the runs.
struct Shared {
    client: DeviceClient,
    data_dir: DataDir,
    seal_key: SealKey,
    /// The last configuration read from disk. A std mutex: held only to clone or replace.
    config: Mutex<Config>,
    /// The runs in progress, with their leases (reported in each heartbeat) and stop signals.
    runs: Mutex<HashMap<JobId, RunEntry>>,
}

struct RunEntry {
    lease_token: String,
    stop: RunStop,
}

/// Runs the daemon until `shutdown` resolves or the computer is revoked.
///
/// # Errors
/// Only when local state cannot be updated after a revocation.
pub async fn run(ctx: Ctx, shutdown: impl Future) -> Result<DaemonEnd> {
    let max_runs = ctx.max_runs;
    let shared = Arc::new(Shared {
        client: ctx.client,
        data_dir: ctx.data_dir,
        seal_key: ctx.seal_key,
        config: Mutex::new(ctx.config),
        runs: Mutex::new(HashMap::new()),
    });
    // The heartbeat task tells the claim loop "answered, claim now" and "revoked".
    let claim_wake = Arc::new(Notify::new());
    let (revoked_sender, mut revoked) = mpsc::channel::<()>(1);
    let heartbeat = tokio::spawn(heartbeat_loop(
        shared.clone(),
        claim_wake.clone(),
        revoked_sender,
    ));

    let mut runs: JoinSet<RunEnd> = JoinSet::new();
    tokio::pin!(shutdown);
    let end = loop {
        tokio::select! {
            _ = &mut shutdown => break DaemonEnd::Shutdown,
            _ = revoked.recv() => break DaemonEnd::Revoked,
            () = claim_wake.notified() => {}
            Some(joined) = runs.join_next(), if !runs.is_empty() => {
                if matches!(joined, Ok(RunEnd::Abandoned(StopReason::Revoked))) {
                    break DaemonEnd::Revoked;
                }
            }
        }
        let claimed = tokio::select! {
            _ = &mut shutdown => break DaemonEnd::Shutdown,
            claimed = claim_while_free(&shared, &mut runs, max_runs) => claimed,
        };
        if claimed.is_err() {
            break DaemonEnd::Revoked;
        }
    };

    heartbeat.abort();
    let reason = match end {
        DaemonEnd::Shutdown => StopReason::Shutdown,
        DaemonEnd::Revoked => StopReason::Revoked,
    };
    stop_all_runs(&shared, &mut runs, reason).await;
    if end == DaemonEnd::Revoked {
        forget_pairing(&shared.data_dir)?;
    }
    Ok(end)
}

/// Claims jobs until `max_runs` run or nothing is queued.
///
/// # Errors
/// `Err(())` when the device was revoked.
async fn claim_while_free(
    shared: &Arc<Shared>,
    runs: &mut JoinSet<RunEnd>,
    max_runs: usize,
) -> Result<(), ()> {
    while runs.len() < max_runs {
        match shared.client.claim().await {
            Ok(Some(job)) => start_run(shared, runs, job),
            Ok(None) => return Ok(()),
            Err(ApiError::Revoked) => return Err(()),
            Err(err) => {
                // The next heartbeat claims again; no need for a retry loop here.
                tracing::warn!("claim failed: {err}");
                return Ok(());
            }
        }
    }
    Ok(())
}

fn start_run(shared: &Arc<Shared>, runs: &mut JoinSet<RunEnd>, job: ClaimedJob) {
    tracing::info!(job = %job.id, title = %job.spec.title, engine = %job.spec.engine, folder = %job.spec.folder, "claimed");
    let stop = RunStop::new();
    let entry = RunEntry {
        lease_token: job.lease_token.clone(),
        stop: stop.clone(),
    };
    lock(&shared.runs).insert(job.id.clone(), entry);
    let config = lock(&shared.config).clone();
    let shared = shared.clone();
    runs.spawn(async move {
        let job_id = job.id.clone();
        let end = run_job(shared.client.clone(), job, config, stop).await;
        // Only now stop reporting the lease: until complete is answered, the run holds it.
        lock(&shared.runs).remove(&job_id);
        end
    });
}

/// Stops every run for `reason` and waits (bounded) for them to end.
async fn stop_all_runs(shared: &Shared, runs: &mut JoinSet<RunEnd>, reason: StopReason) {
    for entry in lock(&shared.runs).values() {
        entry.stop.raise(reason);
    }
    let all_ended = async { while runs.join_next().await.is_some() {} };
    if tokio::time::timeout(STOP_RUNS_WAIT, all_ended)
        .await
        .is_err()
    {
        tracing::warn!("runs did not stop in time; abandoning them");
        runs.abort_all();
    }
}

/// After a revocation: the token and seal key are dead, forget them. The install id,
/// folders and recipes stay.
fn forget_pairing(data_dir: &DataDir) -> Result<()> {
    data_dir.forget_token()?;
    SealKeyPair::forget(data_dir)?;
    let mut config = data_dir.load_or_init_config()?;
    config.pairing = None;
    data_dir.save_config(&config)
}

/// Heartbeats forever: at the server's pace when it answers, with backoff when it cannot be
/// reached (an outage is never taken for revocation).
async fn heartbeat_loop(shared: Arc<Shared>, claim_wake: Arc<Notify>, revoked: mpsc::Sender<()>) {
    let mut period = DEFAULT_HEARTBEAT;
    let mut backoff = Backoff::new();
    loop {
        let params = HeartbeatParams {
            capabilities: shared.capabilities(),
            running: shared.held_leases(),
        };
        let delay = match shared.client.heartbeat(&params).await {
            Ok(answer) => {
                backoff.reset();
                period = Duration::from_secs(answer.intervals.heartbeat_secs)
                    .clamp(MIN_HEARTBEAT, MAX_HEARTBEAT);
                shared.apply(&answer);
                claim_wake.notify_one();
                period
            }
            Err(ApiError::Revoked) => {
                let _ = revoked.send(()).await;
                return;
            }
            Err(err) if err.is_transient() => {
                tracing::warn!("heartbeat failed, retrying: {err}");
                backoff.next_delay().min(period)
            }
            Err(err) => {
                tracing::error!("heartbeat refused: {err}");
                period
            }
        };
        tokio::time::sleep(delay).await;
    }
}

impl Shared {
    /// What this computer offers, from the configuration on disk now (so `folders share`
    /// and `recipe add` take effect while the daemon runs).
    fn capabilities(&self) -> Capabilities {
        let config = match self.data_dir.load_config() {
            Ok(Some(config)) => {
                *lock(&self.config) = config.clone();
                config
            }
            Ok(None) | Err(_) => lock(&self.config).clone(),
        };
        Capabilities {
            protocol: PROTOCOL_VERSION,
            agent_version: AGENT_VERSION.to_owned(),
            install_id: config.install_id.clone(),
            engines: config
                .recipes
                .iter()
                .map(|recipe| Engine {
                    name: recipe.name.clone(),
                    kind: EngineKind::Recipe,
                })
                .collect(),
            folders: config
                .folders
                .iter()
                .map(|folder| folder.label.clone())
                .collect(),
            sandbox: sandbox::report(),
            seal_key: self.seal_key.clone(),
            accept_web_approvals: true,
        }
    }

    fn held_leases(&self) -> Vec<HeldLease> {
        lock(&self.runs)
            .iter()
            .map(|(job_id, entry)| HeldLease {
                job_id: job_id.clone(),
                lease_token: entry.lease_token.clone(),
            })
            .collect()
    }

    /// Stops runs whose lease is lost and those the owner asked to cancel.
    fn apply(&self, answer: &HeartbeatResponse) {
        let runs = lock(&self.runs);
        for job_id in &answer.lost {
            if let Some(entry) = runs.get(job_id) {
                tracing::warn!(job = %job_id, "the server says this run's lease is lost; stopping it");
                entry.stop.raise(StopReason::LeaseLost);
            }
        }
        for lease in answer.leases.iter().filter(|lease| lease.cancel_requested) {
            if let Some(entry) = runs.get(&lease.job_id) {
                tracing::info!(job = %lease.job_id, "cancel requested");
                entry.stop.raise(StopReason::Cancel);
            }
        }
    }
}

/// A poisoned lock only means another task panicked while holding it; the maps stay valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
