//! The daemon behind `tether-agent run`: the loop that ties the server to the runs.
//!
//! Shaped like mini-redis's server: [`run`] takes its context and a shutdown future, and the
//! caller (main) passes `ctrl_c()`. Five kinds of task run side by side:
//!
//! - the **heartbeat** task, alone on its own tokio task so busy runs cannot starve it,
//!   reports capabilities and held leases every `heartbeatSecs` (and at once when the local
//!   configuration changed: a recipe, folder or engine added; and when a run starts or the
//!   event stream is lost after the server asked for an idle computer's slower pace),
//!   applies `lost` (reattaching runs whose lease ran out while this computer was cut off, stopping the others) and
//!   `cancelRequested`, and wakes the claim loop;
//! - the **event stream** ([`crate::remote::events`]) wakes the claim loop at once on `wake`
//!   and on every (re)connect, cancels runs, and hands file requests, secrets and evidence
//!   requests to their handlers ([`crate::remote::frames`]) and console sessions to
//!   [`crate::console::session::serve`]; it is only a hint, and the heartbeat does not
//!   depend on it;
//! - the **claim loop** (this function's body) first settles what an earlier agent process
//!   left in the journal ([`reconcile`]), then claims while below `max_runs`: after each
//!   heartbeat, each wake-up and as soon as a run ends;
//! - the **sweeper** deletes held evidence past its 30 days, at start and daily
//!   ([`crate::local::held_evidence`]);
//! - one **run** task per claimed job ([`crate::run::run_job`] with the engine the job names,
//!   [`crate::engines::select`]), journalled before its process starts
//!   ([`crate::local::journal`]).
//!
//! A 401 `revoked` (or a `device.revoked` frame) from any of them ends everything: runs are
//! killed, the token and the journal forgotten. So does an agent found uninstalled by the
//! heartbeat ([`uninstall`]), which also removes the computer from its server first.

pub mod reconcile;
pub mod uninstall;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use tether_protocol::capabilities::{Capabilities, SealKey};
use tether_protocol::devices::{HeartbeatParams, HeartbeatResponse, HeldLease};
use tether_protocol::evidence::EvidenceSettings;
use tether_protocol::jobs::ClaimedJob;
use tether_protocol::{DecisionId, JobId, PROTOCOL_VERSION};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;

use crate::console::{self, ConsoleContext};
use crate::engines;
use crate::local::held_evidence::HeldStore;
use crate::local::journal::{Journal, RunRecord};
use crate::local::seal_key::SealKeyPair;
use crate::local::state::{Config, DataDir};
use crate::remote::backoff::Backoff;
use crate::remote::client::{DeviceClient, RemoteError};
use crate::remote::events::{
    self, EventSink, EvidenceRequest, FileRequest, SecretDelivery, SessionDelete,
};
use crate::remote::frames::{evidence_request, file_request, secret_save, FrameContext};
use crate::run::lease::{LeasePeriod, Recovery, RunLease};
use crate::run::stop::{RunEnd, RunStop, StopReason};
use crate::run::{run_job, Common};
use crate::{sandbox, AGENT_VERSION};
use reconcile::Settled;
use uninstall::{InstallWatch, Seen};

/// Heartbeat period until the server says otherwise.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);
/// Bounds on the period the server may ask for, so a bad answer cannot make us spin or go
/// silent long enough to lose our leases.
const MIN_HEARTBEAT: Duration = Duration::from_secs(1);
const MAX_HEARTBEAT: Duration = Duration::from_secs(300);
/// How long runs get to stop when the daemon ends, before they are abandoned.
const STOP_RUNS_WAIT: Duration = Duration::from_secs(15);
/// On shutdown, how long the event stream has to close with its close frame.
const STREAM_CLOSE_WAIT: Duration = Duration::from_secs(3);
/// How often the heartbeat task looks whether the files capabilities come from changed.
const CONFIG_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often held evidence past its time is looked for (and once at start).
const SWEEP_HELD_EVERY: Duration = Duration::from_secs(24 * 60 * 60);
/// Locked by a running daemon (see [`lock_data_dir`]).
const RUN_LOCK_FILE: &str = "run.lock";

/// Everything `run` needs, loaded and checked by the caller.
pub struct Ctx {
    pub data_dir: DataDir,
    pub client: DeviceClient,
    /// The configuration at start; reloaded from disk at every heartbeat.
    pub config: Config,
    pub seal_key: SealKey,
    /// How many jobs may run at once.
    pub max_runs: usize,
    /// The installed executable to watch (`TETHER_INSTALL_PATH`), if the package said.
    pub install_watch: Option<InstallWatch>,
}

/// Why the daemon stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonEnd {
    /// The shutdown future resolved.
    Shutdown,
    /// The server revoked this computer; the token and seal key are forgotten.
    Revoked,
    /// The agent's program stayed missing ([`uninstall`]): the computer removed itself from
    /// its server (`server_told`, unless it could not be reached) and forgot its pairing.
    Uninstalled { server_told: bool },
}

/// Why the claim loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Shutdown,
    Revoked,
    Uninstalled,
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
    let server = crate::remote::client::ServerClient::new(&pairing.server)?;
    Ok(Some(Ctx {
        client: DeviceClient::new(server, token),
        config,
        seal_key: seal_key.public().clone(),
        data_dir,
        max_runs: max_runs.max(1),
        install_watch: InstallWatch::from_env(),
    }))
}

/// State shared by the claim loop, the heartbeat task, the event stream and the runs.
struct Shared {
    client: DeviceClient,
    data_dir: DataDir,
    /// What every run shares: the data dir's guard, the decision hub, the folder claims.
    common: Common,
    seal_key: SealKey,
    /// The last configuration read from disk. A std mutex: held only to clone or replace.
    config: Mutex<Config>,
    /// The runs in progress, with their leases (reported in each heartbeat) and stop signals.
    runs: Mutex<HashMap<JobId, RunEntry>>,
    /// The runs on disk, for restarts and for browsing a job's files.
    journal: Arc<Journal>,
    /// The lease period the server announced.
    lease_period: Arc<LeasePeriod>,
    /// Tells the claim loop to claim now.
    claim_wake: Arc<Notify>,
    /// Tells the claim loop the device was revoked.
    revoked: mpsc::Sender<()>,
    /// Set by the heartbeat once the agent is found uninstalled: nothing more is claimed, and
    /// the claim loop, woken, ends.
    uninstalled: AtomicBool,
    /// The console sessions' turns.
    console_sessions: Arc<tokio::sync::Semaphore>,
    /// Set when the event stream is lost; the heartbeat then stops waiting at an idle pace
    /// the open stream was granted.
    stream_lost: AtomicBool,
}

struct RunEntry {
    lease: Arc<RunLease>,
    stop: RunStop,
}

/// Runs the daemon until `shutdown` resolves or the computer is revoked.
///
/// # Errors
/// When another `run` uses the same data dir, when the journal cannot be read, or when local
/// state cannot be updated after a revocation.
pub async fn run(ctx: Ctx, shutdown: impl Future) -> Result<DaemonEnd> {
    let _lock = lock_data_dir(&ctx.data_dir)?;
    // Runs build their gates with this hub; the event stream routes answers to it. Questions
    // an earlier agent process left open have no run waiting on them any more.
    let common = Common::new(&ctx.data_dir);
    if let Some(local) = common.hub.local() {
        if let Err(err) = local.clear_all() {
            tracing::warn!("cannot clear old local decisions: {err:#}");
        }
    }
    // Sockets of brokers an earlier agent process left behind serve nothing any more.
    crate::run::secret_http::clear_stale(ctx.data_dir.root());
    // So are the attachments of runs it did not end (a carry-on downloads them again).
    crate::run::attachments::clear_stale(ctx.data_dir.root());
    let max_runs = ctx.max_runs;
    let journal = Arc::new(Journal::new(&ctx.data_dir));
    // Every record on disk now was left by an earlier agent process (we hold the lock).
    let mut leftovers: VecDeque<RunRecord> = journal.load_all()?.into();
    if !leftovers.is_empty() {
        tracing::info!(
            "{} run(s) left by the previous agent process to settle",
            leftovers.len()
        );
    }
    // The heartbeat task and the event stream tell the claim loop "claim now" and "revoked".
    let claim_wake = Arc::new(Notify::new());
    let (revoked_sender, mut revoked) = mpsc::channel::<()>(1);
    let shared = Arc::new(Shared {
        client: ctx.client,
        data_dir: ctx.data_dir,
        common,
        seal_key: ctx.seal_key,
        config: Mutex::new(ctx.config),
        runs: Mutex::new(HashMap::new()),
        journal,
        lease_period: Arc::new(LeasePeriod::new()),
        claim_wake: claim_wake.clone(),
        revoked: revoked_sender,
        uninstalled: AtomicBool::new(false),
        console_sessions: ConsoleContext::turns(),
        stream_lost: AtomicBool::new(false),
    });
    let heartbeat = tokio::spawn(heartbeat_loop(shared.clone(), ctx.install_watch));
    let sweeper = tokio::spawn(sweep_held_evidence(
        shared.common.guard.data_dir().to_path_buf(),
    ));
    let (stop_stream, stream_stop) = watch::channel(false);
    let mut stream = tokio::spawn(events::run(
        shared.client.clone(),
        Arc::new(StreamSink(shared.clone())),
        stream_stop,
    ));

    let mut runs: JoinSet<RunEnd> = JoinSet::new();
    let mut settle_backoff = Backoff::new();
    let mut settle_at = tokio::time::Instant::now();
    tokio::pin!(shutdown);
    let end = loop {
        tokio::select! {
            _ = &mut shutdown => break Ending::Shutdown,
            _ = revoked.recv() => break Ending::Revoked,
            () = claim_wake.notified() => {}
            () = tokio::time::sleep_until(settle_at), if !leftovers.is_empty() => {}
            Some(joined) = runs.join_next(), if !runs.is_empty() => {
                if matches!(joined, Ok(RunEnd::Abandoned(StopReason::Revoked))) {
                    break Ending::Revoked;
                }
            }
        }
        if shared.uninstalled.load(Ordering::SeqCst) {
            break Ending::Uninstalled;
        }
        // What the previous agent process left is settled before any new work is claimed,
        // so carried-on runs come first.
        if !leftovers.is_empty() {
            if tokio::time::Instant::now() < settle_at {
                continue;
            }
            let settled = tokio::select! {
                _ = &mut shutdown => break Ending::Shutdown,
                settled = settle_leftovers(&shared, &mut runs, &mut leftovers) => settled,
            };
            match settled {
                Err(()) => break Ending::Revoked,
                Ok(None) => settle_backoff.reset(),
                Ok(Some(at_least)) => {
                    settle_at =
                        tokio::time::Instant::now() + settle_backoff.next_delay().max(at_least);
                    continue;
                }
            }
        }
        let claimed = tokio::select! {
            _ = &mut shutdown => break Ending::Shutdown,
            claimed = claim_while_free(&shared, &mut runs, max_runs) => claimed,
        };
        if claimed.is_err() {
            break Ending::Revoked;
        }
    };

    heartbeat.abort();
    sweeper.abort();
    let reason = match end {
        Ending::Shutdown => StopReason::Shutdown,
        // An uninstalled agent's runs end as a revoked one's: its pairing goes next.
        Ending::Revoked | Ending::Uninstalled => StopReason::Revoked,
    };
    stop_all_runs(&shared, &mut runs, reason).await;
    // Last, once no run reports any more: the stream closes with "going away", and the
    // server shows this computer offline at once.
    if end == Ending::Shutdown {
        let _ = stop_stream.send(true);
        if tokio::time::timeout(STREAM_CLOSE_WAIT, &mut stream)
            .await
            .is_err()
        {
            tracing::debug!("the event stream did not close in time");
        }
    }
    stream.abort();
    match end {
        Ending::Shutdown => Ok(DaemonEnd::Shutdown),
        Ending::Revoked => {
            forget_pairing(&shared.data_dir, &shared.journal)?;
            Ok(DaemonEnd::Revoked)
        }
        Ending::Uninstalled => {
            let server_told = remove_from_server(&shared.client).await;
            forget_pairing(&shared.data_dir, &shared.journal)?;
            tracing::warn!("this computer's pairing is forgotten");
            Ok(DaemonEnd::Uninstalled { server_told })
        }
    }
}

/// An uninstalled agent removes its computer from the server (`DELETE /api/devices/self`,
/// which ends its runs there `interrupted`); whether the server heard it.
async fn remove_from_server(client: &DeviceClient) -> bool {
    match client.delete_self().await {
        Ok(()) => {
            tracing::warn!("this computer removed itself from its server");
            true
        }
        Err(RemoteError::Revoked) => true,
        Err(err) => {
            tracing::warn!("cannot tell the server this computer is gone ({err}); forgetting the pairing anyway");
            false
        }
    }
}

/// Settles leftover records in order until one must wait.
///
/// # Returns
/// `Ok(None)` when all are settled, `Ok(Some(wait))` when the server could not be reached
/// (the rest stay for later), `Err(())` when the device was revoked.
async fn settle_leftovers(
    shared: &Arc<Shared>,
    runs: &mut JoinSet<RunEnd>,
    leftovers: &mut VecDeque<RunRecord>,
) -> Result<Option<Duration>, ()> {
    while let Some(record) = leftovers.front() {
        match reconcile::settle(&shared.client, &shared.journal, record).await {
            Settled::Done => {}
            Settled::Resumed(job) => start_run(shared, runs, *job),
            Settled::Later(at_least) => return Ok(Some(at_least)),
            Settled::Revoked => return Err(()),
        }
        leftovers.pop_front();
    }
    Ok(None)
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
    while runs.len() < max_runs && !shared.uninstalled.load(Ordering::SeqCst) {
        match shared.client.claim().await {
            Ok(Some(job)) => start_run(shared, runs, job),
            Ok(None) => return Ok(()),
            Err(RemoteError::Revoked) => return Err(()),
            Err(err) => {
                // The next heartbeat claims again; no need for a retry loop here.
                tracing::warn!("claim failed: {err}");
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Journals a claimed (or carried-on) job, then starts its run task.
fn start_run(shared: &Arc<Shared>, runs: &mut JoinSet<RunEnd>, job: ClaimedJob) {
    tracing::info!(job = %job.id, attempt = job.attempt, resumed = ?job.resumed, title = %job.spec.title, engine = %job.spec.engine, folder = %job.spec.folder, "claimed");
    // Written before the process starts, so a restart at any point after this finds it.
    if let Err(err) = shared.journal.record(&RunRecord::claimed(&job)) {
        tracing::error!(job = %job.id, "cannot journal the run; a restart would lose it: {err:#}");
    }
    if let Err(err) = shared.journal.remember_folder(&job.id, &job.spec.folder) {
        tracing::warn!(job = %job.id, "cannot remember the run's folder: {err:#}");
    }
    let stop = RunStop::new();
    let lease = RunLease::new(
        shared.client.clone(),
        shared.journal.clone(),
        shared.lease_period.clone(),
        &job,
    );
    let entry = RunEntry {
        lease: lease.clone(),
        stop: stop.clone(),
    };
    lock(&shared.runs).insert(job.id.clone(), entry);
    let config = lock(&shared.config).clone();
    let shared = shared.clone();
    runs.spawn(async move {
        let job_id = job.id.clone();
        let engine = engines::select(&config, &job.spec.engine);
        let client = shared.client.clone();
        let end = run_job(&shared.common, client, job, config, stop, lease, engine).await;
        // Only now stop reporting the lease: until complete is answered, the run holds it.
        lock(&shared.runs).remove(&job_id);
        // A run stopped by a shutdown stays in the journal: the next start carries it on.
        if end != RunEnd::Abandoned(StopReason::Shutdown) {
            if let Err(err) = shared.journal.remove(&job_id) {
                tracing::error!(job = %job_id, "cannot remove the run's record: {err:#}");
            }
        }
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

/// After a revocation: the token and seal key are dead, forget them, and the runs of the
/// revoked pairing with them. The install id, folders and recipes stay.
fn forget_pairing(data_dir: &DataDir, journal: &Journal) -> Result<()> {
    for record in journal.load_all()? {
        journal.remove(&record.job_id)?;
    }
    data_dir.forget_token()?;
    SealKeyPair::forget(data_dir)?;
    let mut config = data_dir.load_or_init_config()?;
    config.pairing = None;
    data_dir.save_config(&config)
}

/// Heartbeats forever: at the server's pace when it answers, with backoff when it cannot be
/// reached (an outage is never taken for revocation). Each answer also wakes the claim loop,
/// so a lost wake-up frame costs at most one heartbeat. Independent of the event stream.
///
/// Before each one it looks for the installed executable (`install_watch`); found missing
/// for the whole grace, it ends the daemon instead ([`uninstall`]).
async fn heartbeat_loop(shared: Arc<Shared>, mut install_watch: Option<InstallWatch>) {
    let mut period = DEFAULT_HEARTBEAT;
    let mut backoff = Backoff::new();
    loop {
        if let Some(watch) = &mut install_watch {
            if watch.check() == Seen::Uninstalled {
                tracing::warn!(
                    "{} has been missing for {} s: the agent was uninstalled; ending its runs, removing this computer from its server and forgetting its pairing",
                    watch.path().display(),
                    watch.grace().as_secs()
                );
                shared.uninstalled.store(true, Ordering::SeqCst);
                shared.claim_wake.notify_one();
                return;
            }
        }
        // Taken before the files are read, so a change made while they are is not missed.
        let stamp = shared.capability_stamp();
        shared.stream_lost.store(false, Ordering::SeqCst);
        let params = HeartbeatParams {
            capabilities: shared.capabilities(),
            running: shared.held_leases(),
        };
        let delay = match shared.client.heartbeat(&params).await {
            Ok(answer) => {
                backoff.reset();
                period = Duration::from_secs(answer.intervals.heartbeat_secs)
                    .clamp(MIN_HEARTBEAT, MAX_HEARTBEAT);
                shared
                    .lease_period
                    .set(Duration::from_secs(answer.intervals.lease_secs));
                shared.apply(&params.running, &answer);
                shared.claim_wake.notify_one();
                period
            }
            Err(RemoteError::Revoked) => {
                let _ = shared.revoked.send(()).await;
                return;
            }
            Err(err) if err.is_transient() => {
                tracing::warn!("heartbeat failed, retrying: {err}");
                backoff.next_delay().min(period).max(err.retry_after())
            }
            Err(err) => {
                tracing::error!("heartbeat refused: {err}");
                period
            }
        };
        // A server may ask an idle computer whose event stream is open for a slower pace
        // than a lease can wait: a run claimed meanwhile, or the stream lost, is reported at
        // once, and the answer sets the pace again.
        let idle_paced = params.running.is_empty() && delay > DEFAULT_HEARTBEAT;
        match shared.changed_within(&stamp, delay, idle_paced).await {
            Cut::Configuration => tracing::info!(
                "the local configuration changed: sending this computer's capabilities now"
            ),
            Cut::NoLongerIdle => tracing::info!(
                "no longer idle (a run started or the event stream was lost): heartbeating now"
            ),
            Cut::Waited => {}
        }
    }
}

/// Deletes held evidence past its time ([`HeldStore::sweep`]) now and once a day.
async fn sweep_held_evidence(data_dir: std::path::PathBuf) {
    let store = HeldStore::for_data_dir(&data_dir);
    loop {
        let sweeping = store.clone();
        match tokio::task::spawn_blocking(move || sweeping.sweep(chrono::Utc::now())).await {
            Ok(Ok(0)) => {}
            Ok(Ok(gone)) => {
                tracing::info!("{gone} held evidence file(s) past their 30 days deleted")
            }
            Ok(Err(err)) => tracing::warn!("held evidence could not be swept: {err}"),
            Err(_) => tracing::warn!("held evidence could not be swept"),
        }
        tokio::time::sleep(SWEEP_HELD_EVERY).await;
    }
}

/// When each file capabilities come from was last replaced (files are written by renaming
/// a new one into place, so a write changes its inode), `None` for a missing one.
type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

/// What ended the heartbeat's wait.
enum Cut {
    Waited,
    Configuration,
    /// A run started, or the event stream was lost, during an idle pace.
    NoLongerIdle,
}

impl Shared {
    fn capability_stamp(&self) -> Stamp {
        [
            crate::local::state::CONFIG_FILE,
            crate::local::engine_checks::FILE,
        ]
        .iter()
        .map(|name| {
            let meta = std::fs::metadata(self.data_dir.path(name)).ok()?;
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&meta);
            #[cfg(not(unix))]
            let inode = 0;
            Some((meta.modified().ok()?, meta.len(), inode))
        })
        .collect()
    }

    /// Waits `delay`, looking every [`CONFIG_CHECK_EVERY`] whether the files capabilities
    /// come from changed since `stamp` and, when `idle_paced`, whether a run started or the
    /// event stream was lost; what cut the wait short, if anything.
    async fn changed_within(&self, stamp: &Stamp, delay: Duration, idle_paced: bool) -> Cut {
        let end = tokio::time::Instant::now() + delay;
        loop {
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Cut::Waited;
            }
            tokio::time::sleep(left.min(CONFIG_CHECK_EVERY)).await;
            if self.capability_stamp() != *stamp {
                return Cut::Configuration;
            }
            if idle_paced
                && (!lock(&self.runs).is_empty() || self.stream_lost.load(Ordering::SeqCst))
            {
                return Cut::NoLongerIdle;
            }
        }
    }

    /// The configuration on disk now (the last good one if it cannot be read).
    fn fresh_config(&self) -> Config {
        match self.data_dir.load_config() {
            Ok(Some(config)) => {
                *lock(&self.config) = config.clone();
                config
            }
            Ok(None) | Err(_) => lock(&self.config).clone(),
        }
    }

    /// What this computer offers, from the configuration on disk now (so `folders share`
    /// and `recipe add` take effect while the daemon runs).
    fn capabilities(&self) -> Capabilities {
        let config = self.fresh_config();
        let mut engines = crate::local::acp_engines::published(&config);
        crate::local::engine_checks::attach(
            &mut engines,
            &crate::local::engine_checks::load(&self.data_dir),
        );
        Capabilities {
            protocol: PROTOCOL_VERSION,
            agent_version: AGENT_VERSION.to_owned(),
            install_id: config.install_id.clone(),
            engines,
            folders: config
                .folders
                .iter()
                .map(|folder| folder.label.clone())
                .collect(),
            sandbox: sandbox::report(),
            seal_key: self.seal_key.clone(),
            accept_web_approvals: config.accept_web_approvals,
            git: crate::run::delivery::capability(&self.data_dir),
            evidence: Some(EvidenceSettings {
                upload: config.evidence_upload,
                hold: config.evidence_hold,
            }),
            console: Some(config.console),
        }
    }

    fn held_leases(&self) -> Vec<HeldLease> {
        lock(&self.runs)
            .iter()
            .map(|(job_id, entry)| HeldLease {
                job_id: job_id.clone(),
                lease_token: entry.lease.token(),
            })
            .collect()
    }

    /// Applies a heartbeat answer to the runs: extended leases are confirmed, cancels raised,
    /// and lost leases either reattached (this computer was cut off while they ran) or their
    /// runs stopped at once.
    fn apply(self: &Arc<Self>, sent: &[HeldLease], answer: &HeartbeatResponse) {
        let sent_token = |job_id: &JobId| {
            sent.iter()
                .find(|held| &held.job_id == job_id)
                .map(|held| held.lease_token.clone())
        };
        let runs = lock(&self.runs);
        for lease in &answer.leases {
            let Some(entry) = runs.get(&lease.job_id) else {
                continue;
            };
            if let Some(token) = sent_token(&lease.job_id) {
                entry.lease.confirmed(&token);
            }
            if lease.cancel_requested {
                tracing::info!(job = %lease.job_id, "cancel requested");
                entry.stop.raise(StopReason::Cancel);
            }
        }
        for job_id in &answer.lost {
            let (Some(entry), Some(token)) = (runs.get(job_id), sent_token(job_id)) else {
                continue;
            };
            if entry.lease.cut_off() {
                let (lease, stop, shared) = (entry.lease.clone(), entry.stop.clone(), self.clone());
                tokio::spawn(async move {
                    match lease.recover(&token).await {
                        Recovery::Renewed | Recovery::Later(_) => {}
                        Recovery::Lost => stop.raise(StopReason::LeaseLost),
                        Recovery::Revoked => {
                            let _ = shared.revoked.send(()).await;
                        }
                    }
                });
            } else {
                tracing::warn!(job = %job_id, "the server says this run's lease is lost; stopping it");
                entry.stop.raise(StopReason::LeaseLost);
            }
        }
    }

    /// What the handlers of `file.request` and `secret.save` read: the configuration as it
    /// is on disk when they get to it.
    fn frame_context(self: &Arc<Self>) -> FrameContext {
        let shared = self.clone();
        FrameContext {
            client: self.client.clone(),
            data_dir: self.data_dir.clone(),
            guard: self.common.guard.clone(),
            journal: self.journal.clone(),
            config: Box::new(move || shared.fresh_config()),
        }
    }

    /// What a console session works with: the configuration read from disk on every
    /// request, the runs' guard and output taps, this process's sandbox.
    fn console_context(self: &Arc<Self>) -> ConsoleContext {
        let shared = self.clone();
        ConsoleContext {
            data_dir: self.data_dir.clone(),
            guard: self.common.guard.clone(),
            taps: self.common.taps.clone(),
            config: Arc::new(move || shared.fresh_config()),
            sandbox: sandbox::current(),
            sessions: self.console_sessions.clone(),
        }
    }

    /// The owner asked to stop a run (a `job.cancel` frame).
    fn cancel(&self, job_id: &JobId) {
        if let Some(entry) = lock(&self.runs).get(job_id) {
            tracing::info!(job = %job_id, "cancel requested");
            entry.stop.raise(StopReason::Cancel);
        }
    }
}

/// The daemon's side of the event stream.
struct StreamSink(Arc<Shared>);

impl EventSink for StreamSink {
    fn wake(&self) {
        self.0.claim_wake.notify_one();
    }

    fn lost(&self) {
        self.0.stream_lost.store(true, Ordering::SeqCst);
    }

    fn cancel(&self, job_id: &JobId) {
        self.0.cancel(job_id);
    }

    fn revoked(&self) {
        let _ = self.0.revoked.try_send(());
    }

    fn file_request(&self, request: FileRequest) {
        tokio::spawn(file_request::handle(self.0.frame_context(), request));
    }

    fn secret_save(&self, delivery: SecretDelivery) {
        tokio::spawn(secret_save::handle(self.0.frame_context(), delivery));
    }

    fn evidence_request(&self, request: EvidenceRequest) {
        tokio::spawn(evidence_request::handle(self.0.frame_context(), request));
    }

    fn session_delete(&self, request: SessionDelete) {
        let context = self.0.frame_context();
        tokio::spawn(engines::acp::deletion::handle(context, request));
    }

    fn decision_answered(&self, decision_id: &DecisionId) {
        self.0.common.hub.answered(decision_id);
    }

    fn console_open(&self, session_id: String, enc: String) {
        let (context, client) = (self.0.console_context(), self.0.client.clone());
        tokio::spawn(console::session::serve(context, client, session_id, enc));
    }
}

/// Holds the data dir's run lock for the daemon's life, so two agents never share a journal
/// (the lock goes with the process, however it ends).
fn lock_data_dir(data_dir: &DataDir) -> Result<std::fs::File> {
    data_dir.ensure()?;
    let path = data_dir.path(RUN_LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another `tether-agent run` is using {}",
            data_dir.root().display()
        ),
        Err(std::fs::TryLockError::Error(err)) => {
            Err(err).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// A poisoned lock only means another task panicked while holding it; the maps stay valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
