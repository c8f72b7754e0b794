//! What an engine is to a run: the run's context it gets, the one entry point every engine
//! has ([`Engine::run`]), and the completions both engines end with.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tether_protocol::jobs::{ClaimedJob, CompleteParams, Outcome};

use crate::changes::worktree::Worktree;
use crate::local::state::{Config, SharedFolder};
use crate::local::vault::NamedSecrets;
use crate::policy::guard::Guard;
use crate::remote::client::DeviceClient;
use crate::run::attachments::RunAttachments;
use crate::run::decisions::DecisionHub;
use crate::run::grant::RunSecrets;
use crate::run::lease::RunLease;
use crate::run::stop::{RunStop, StopReason};
use crate::run::tool_channel::ToolChannel;

/// Everything one run of an engine works with, resolved against this computer's
/// configuration before the engine starts.
pub struct RunContext<'a> {
    pub client: &'a DeviceClient,
    pub job: &'a ClaimedJob,
    /// The owner's configuration at claim time (trusted folders, web answers, evidence).
    pub config: &'a Config,
    /// The shared folder the job names, which exists; for a run in its own worktree, the
    /// worktree (same label).
    pub folder: &'a SharedFolder,
    /// The run's worktree, when it works in one: its git folders are granted to the sandbox.
    pub worktree: Option<&'a Worktree>,
    pub stop: &'a RunStop,
    pub lease: &'a Arc<RunLease>,
    pub secrets: &'a RunSecrets,
    /// The secrets the job names, all of them saved: the environment ones for the
    /// environment of everything the run starts, the others by reference.
    pub named: NamedSecrets,
    /// The guard built for this agent's data dir, which it names.
    pub guard: &'a Guard,
    /// Where answers to the run's questions are routed.
    pub hub: &'a Arc<DecisionHub>,
    /// Where the run's output is tapped for the console's Watch.
    pub taps: &'a Arc<crate::run::watch::Taps>,
    /// The files attached to the task, downloaded and checked; `None` when it has none.
    pub attachments: Option<&'a RunAttachments>,
    /// The run's tool channel (`tether-agent tool`, the coding agent's MCP server); `None`
    /// when it could not be started.
    pub tools: Option<&'a ToolChannel>,
}

/// What runs a job: a recipe, or an ACP coding agent.
pub trait Engine {
    /// Runs the job of `ctx`: the completion to report, or why nothing may be reported (the
    /// lease is gone, the device revoked, or the agent is shutting down).
    fn run(
        &self,
        ctx: RunContext<'_>,
    ) -> impl Future<Output = Result<CompleteParams, StopReason>> + Send;
}

/// The completion of a job that could not run; `summary` says why.
pub fn blocked(summary: String) -> CompleteParams {
    CompleteParams {
        outcome: Outcome::Blocked,
        summary,
        exit_code: None,
        report: None,
        observed: None,
        changes: None,
        delivery: None,
    }
}

/// The job's time limit (at least a minute).
pub fn time_limit(job: &ClaimedJob) -> Duration {
    Duration::from_secs(u64::from(job.spec.timeout_minutes.max(1)) * 60)
}
