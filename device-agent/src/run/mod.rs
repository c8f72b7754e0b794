//! One run of a claimed job: everything it is made of except the engine that runs it.
//!
//! - [`run_job`] (here): resolve the job against this computer's configuration, record the
//!   folder's start ([`crate::changes`]), hand it to its [`Engine`] with a [`RunContext`],
//!   add what the run changed, hide every saved value in the summary, journal the
//!   completion (the engine journaled the outcome the moment its process ended, so a
//!   restart never runs it again) and report it; what every run of the process shares (the data dir and its guard, the
//!   decision hub, the folder claims) comes in its [`Common`], never from a global;
//! - [`stop`]: how a run stops ([`RunStop`], [`StopReason`]) and how a run task ended;
//! - [`grant`]: what it is granted ([`RunSecrets`], [`Granted`], the broker's start);
//! - [`lease`]: its lease, the one place the token lives, reattached after an outage;
//! - [`workplace`]: where it works — its shared folder, held by one run at a time (a run
//!   whose folder another holds waits), or its own git worktree of it;
//! - [`capture`]: screenshots of what it built, taken with a confined browser;
//! - [`progress`]: its output, in numbered batches; [`evidence`]: its evidence folder;
//! - [`attachments`]: the task's files, downloaded under the lease, checked, shown to the
//!   run alone;
//! - [`decisions`]: asking the owner, the run's side of the policy's [`Ask`];
//! - [`delivery`]: the job's git delivery — its branch before the run, then commits, a push
//!   with the computer's sign-in and a pull request;
//! - [`secret_http`]: secrets used by reference, through a broker the run's programs call;
//! - [`tool_channel`]: what the run may ask of the agent while it runs (more context under
//!   its lease, its attachments; the worker's report [`worker_report`], files it
//!   [`attach`]es), for recipes and for a coding agent's MCP server;
//! - [`model_network`]: an engine limited to its model endpoints, through relays and a
//!   filtering proxy on sockets its sandbox forwards;
//! - [`environment`]: the allow list of the child environment;
//! - [`process_group`]: signalling a run's whole process tree;
//! - [`watch`]: taps on running jobs' output, which the owner's console watches read-only.
//!
//! **Architecture Invariant:** nothing the server sends becomes argv or a path. The job's
//! `folder` and `engine` are looked up among the owner's shared folders, recipes and
//! engines; an unknown one ends the job `blocked`.
//!
//! [`Ask`]: crate::policy::asking::Ask
//! [`Granted`]: grant::Granted

pub mod attach;
pub mod attachments;
pub mod capture;
pub mod decisions;
pub mod delivery;
pub mod engine;
pub mod environment;
pub mod evidence;
pub mod grant;
pub mod lease;
pub mod model_network;
pub mod process_group;
pub mod progress;
pub mod secret_http;
pub mod stop;
/// The tests' reader of one HTTP request, for stand-ins of the server's routes.
#[cfg(test)]
#[allow(clippy::duplicate_mod, dead_code)]
#[path = "../../tests/support/http_request.rs"]
mod test_http;
pub mod tool_channel;
pub mod watch;
pub mod worker_report;
pub mod workplace;

pub use engine::{Engine, RunContext};
pub use grant::RunSecrets;
pub use stop::{RunEnd, RunStop, StopReason};

use std::path::Path;
use std::sync::Arc;

use tether_protocol::jobs::{ClaimedJob, CompleteParams};

use crate::changes;
use crate::local::state::{Config, DataDir};
use crate::local::vault::{redact, Missing};
use crate::policy::guard::Guard;
use crate::remote::backoff::Backoff;
use crate::remote::client::{DeviceClient, RemoteError};
use decisions::DecisionHub;
use engine::blocked;
use lease::{Recovery, RunLease};
use tool_channel::ToolChannel;
use workplace::FolderClaims;

/// What every run of one agent process shares, made once at its start: the data dir, the
/// guard built for it, the hub answers to questions are routed through, and which shared
/// folders runs hold.
#[derive(Clone)]
pub struct Common {
    pub data_dir: DataDir,
    pub guard: Guard,
    pub hub: Arc<DecisionHub>,
    pub claims: Arc<FolderClaims>,
    /// The running jobs' output taps, for the console's Watch.
    pub taps: Arc<watch::Taps>,
}

impl Common {
    /// For the agent keeping its data in `data_dir`.
    pub fn new(data_dir: &DataDir) -> Common {
        Common {
            data_dir: data_dir.clone(),
            guard: Guard::for_user(data_dir.root()),
            hub: DecisionHub::new(Some(data_dir.clone())),
            claims: Arc::default(),
            taps: Arc::default(),
        }
    }
}

/// Runs a claimed job to its end with `engine`, the one its engine name selects on this
/// computer (`None`: there is none), and reports it. `config` is the owner's configuration
/// at claim time; `lease` fences every write and journals the run's process and outcome.
pub async fn run_job<E: Engine>(
    common: &Common,
    client: DeviceClient,
    job: ClaimedJob,
    config: Config,
    stop: RunStop,
    lease: Arc<RunLease>,
    engine: Option<E>,
) -> RunEnd {
    let secrets = RunSecrets::load(&common.data_dir, &job);
    let ctx = Claimed {
        common,
        client: &client,
        job: &job,
        config: &config,
        stop: &stop,
        lease: &lease,
        secrets: &secrets,
    };
    match execute(ctx, engine.as_ref()).await {
        Ok(mut params) => {
            params.summary = redact(&params.summary, &secrets.hidden);
            tracing::info!(job = %job.id, outcome = ?params.outcome, "{}", params.summary);
            lease.finished(&params);
            complete(&client, &lease, &params, &stop).await
        }
        Err(reason) => {
            tracing::warn!(job = %job.id, ?reason, "run stopped without completing");
            RunEnd::Abandoned(reason)
        }
    }
}

/// The run as claimed, before its folder and secrets are looked up.
#[derive(Clone, Copy)]
struct Claimed<'a> {
    common: &'a Common,
    client: &'a DeviceClient,
    job: &'a ClaimedJob,
    config: &'a Config,
    stop: &'a RunStop,
    lease: &'a Arc<RunLease>,
    secrets: &'a RunSecrets,
}

/// Runs the job; the completion to report, or why nothing may be reported.
async fn execute<E: Engine>(
    run: Claimed<'_>,
    engine: Option<&E>,
) -> Result<CompleteParams, StopReason> {
    let spec = &run.job.spec;
    let named = match &run.secrets.named {
        Ok(named) => named.clone(),
        Err(Missing(name)) => {
            return Ok(blocked(format!(
                "the secret {name} is not saved on this computer; send it from the Computers page"
            )))
        }
    };
    let Some(folder) = run.config.folder(&spec.folder) else {
        return Ok(blocked(format!(
            "this computer shares no folder labelled {:?}",
            spec.folder
        )));
    };
    if !folder.path.is_dir() {
        return Ok(blocked(format!(
            "the folder shared as {:?} ({}) no longer exists",
            folder.label,
            folder.path.display()
        )));
    }
    let Some(engine) = engine else {
        return Ok(blocked(format!(
            "this computer has no recipe or engine named {:?}",
            spec.engine
        )));
    };
    let guard = &run.common.guard;
    let data_dir = guard.data_dir();
    // The task's files, checked, before anything of the run starts; their folder goes when
    // this run's execution ends, however it ends.
    let fetching = attachments::Fetching {
        client: run.client,
        lease: run.lease,
        stop: run.stop,
        data_dir,
    };
    let attachments = match attachments::fetch(run.job, &fetching).await {
        Ok(attachments) => attachments,
        Err(attachments::NotPlaced::Refused(params)) => return Ok(*params),
        Err(attachments::NotPlaced::Stopped(reason)) => return Err(reason),
    };
    let entry = workplace::Entry {
        claims: &run.common.claims,
        client: run.client,
        job: run.job,
        lease: run.lease,
        stop: run.stop,
        data_dir,
    };
    // The folder alone, or the job's own worktree of it: what everything after sees.
    let place = match workplace::enter(entry, folder).await? {
        workplace::Entered::Ready(place) => place,
        workplace::Entered::Ended(params) => return Ok(params),
    };
    let folder = &place.folder;
    let tools = start_tools(run, data_dir, &folder.path, attachments.as_ref());
    let ctx = RunContext {
        client: run.client,
        job: run.job,
        config: run.config,
        folder,
        worktree: place.worktree.as_ref(),
        stop: run.stop,
        lease: run.lease,
        secrets: run.secrets,
        named,
        guard,
        hub: &run.common.hub,
        taps: &run.common.taps,
        attachments: attachments.as_ref(),
        tools: tools.as_ref(),
    };
    let prepared = match delivery::prepare(run.job, &folder.path, data_dir).await {
        delivery::Preparation::NotAsked => None,
        delivery::Preparation::Ready(prepared) => Some(*prepared),
        delivery::Preparation::Blocked(why) => return Ok(blocked(why)),
    };
    if prepared.is_some() {
        run.lease.will_deliver();
    }
    record_start(data_dir, run.job, &folder.path).await;
    // The engine journals the outcome the moment its process ends; the completion made
    // here replaces it, with the delivery and the change list.
    let mut params = engine.run(ctx).await?;
    drop(tools);
    if let Some(prepared) = prepared {
        run.lease.delivering();
        deliver(run, prepared, data_dir, &mut params).await;
    }
    params.changes = report_changes(data_dir, run.job, &folder.path, run.secrets).await;
    place.leave(entry).await;
    Ok(params)
}

/// Delivers the run's work with git as its job asks, asking the owner through the run's
/// decisions when the job wants that before a merge.
async fn deliver(
    run: Claimed<'_>,
    prepared: delivery::Prepared,
    data_dir: &Path,
    params: &mut CompleteParams,
) {
    let asking = decisions::Asking {
        client: run.client,
        job: run.job,
        config: run.config,
        lease: run.lease,
        stop: run.stop,
        hub: &run.common.hub,
    };
    // The engine's reporter is done by now: every line before the question was sent.
    let asker = asking.asker(None);
    let delivering = delivery::Delivering {
        job: run.job,
        data_dir,
        hidden: &run.secrets.hidden,
        asker: &asker,
        stop: run.stop,
    };
    delivery::deliver(prepared, &delivering, params).await;
}

/// Starts the run's tool channel: what its programs may ask of this agent while it runs
/// (more context under its lease, its attachments; its report, files it attaches from
/// `folder`). A run goes on without one, logged, when it cannot be served.
fn start_tools(
    run: Claimed<'_>,
    data_dir: &Path,
    folder: &Path,
    attachments: Option<&attachments::RunAttachments>,
) -> Option<ToolChannel> {
    let context = tool_channel::ChannelContext {
        client: run.client.clone(),
        lease: run.lease.clone(),
        stop: run.stop.clone(),
        attachments: attachments
            .map(|placed| placed.placed().to_vec())
            .unwrap_or_default(),
        hidden: run.secrets.hidden.clone(),
        handback: worker_report::Handback::new(folder.to_owned(), run.secrets.hidden.clone()),
        guard: run.common.guard.clone(),
        sandbox: crate::sandbox::current(),
        env: Arc::new(environment::scrub(std::env::vars_os())),
    };
    ToolChannel::start(data_dir, context)
        .map_err(|err| tracing::warn!(job = %run.job.id, "the run has no tool channel: {err:#}"))
        .ok()
}

/// Records the folder's state before the engine starts. A failure is logged: it costs the
/// run its change list, never the run.
async fn record_start(data_dir: &Path, job: &ClaimedJob, folder: &Path) {
    let (data_dir, job_for_task, folder) = (data_dir.to_owned(), job.clone(), folder.to_owned());
    let recorded = tokio::task::spawn_blocking(move || {
        changes::record_start(&data_dir, &job_for_task, &folder)
    })
    .await;
    match recorded {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::warn!(job = %job.id, "the run's start was not recorded; it will report no changes: {err:#}");
        }
        Err(err) => tracing::warn!(job = %job.id, "recording the run's start failed: {err}"),
    }
}

/// What the run changed in its folder, for its completion; `None` (logged) when the folder
/// is gone or the changes cannot be told: the completion goes without them.
async fn report_changes(
    data_dir: &Path,
    job: &ClaimedJob,
    folder: &Path,
    secrets: &RunSecrets,
) -> Option<serde_json::Value> {
    if !folder.is_dir() {
        return None;
    }
    let (data_dir, job_id, folder) = (data_dir.to_owned(), job.id.clone(), folder.to_owned());
    let hidden = secrets.hidden.clone();
    let reported =
        tokio::task::spawn_blocking(move || changes::report(&data_dir, &job_id, &folder, &hidden))
            .await;
    let changes = match reported {
        Ok(Ok(changes)) => changes?,
        Ok(Err(err)) => {
            tracing::warn!(job = %job.id, "the run's changes cannot be told: {err:#}");
            return None;
        }
        Err(err) => {
            tracing::warn!(job = %job.id, "telling the run's changes failed: {err}");
            return None;
        }
    };
    serde_json::to_value(&changes)
        .map_err(|err| tracing::warn!(job = %job.id, "the run's changes cannot be sent: {err}"))
        .ok()
}

/// Reports the outcome, retrying while the server cannot be reached, until it answers. A
/// lease that ran out while this computer was cut off is reattached first (the completion
/// is idempotent under one lease, so a repeat after a lost answer is harmless).
async fn complete(
    client: &DeviceClient,
    lease: &RunLease,
    params: &CompleteParams,
    stop: &RunStop,
) -> RunEnd {
    let job_id = lease.job_id();
    let mut backoff = Backoff::new();
    loop {
        let token = lease.token();
        let wait = match client.complete(job_id, &token, params).await {
            Ok(()) => return RunEnd::Completed,
            Err(RemoteError::StaleLease) => match lease.recover(&token).await {
                Recovery::Renewed => continue,
                Recovery::Later(at_least) => backoff.next_delay().max(at_least),
                Recovery::Lost => {
                    tracing::warn!(job = %job_id, "the server no longer holds this run's lease; outcome not recorded");
                    return RunEnd::Abandoned(StopReason::LeaseLost);
                }
                Recovery::Revoked => return RunEnd::Abandoned(StopReason::Revoked),
            },
            Err(RemoteError::Revoked) => return RunEnd::Abandoned(StopReason::Revoked),
            Err(err) if err.is_transient() => {
                tracing::warn!(job = %job_id, "completion not delivered, retrying: {err}");
                backoff.next_delay().max(err.retry_after())
            }
            Err(err) => {
                tracing::error!(job = %job_id, "the server refused the completion: {err}");
                return RunEnd::Completed;
            }
        };
        if stop.wait_at_least(StopReason::Shutdown, wait).await {
            return RunEnd::Abandoned(stop.current().unwrap_or(StopReason::Shutdown));
        }
    }
}
