//! The lease of one run, shared by everything that writes about it (its output reporter,
//! its completion, the heartbeat), and taking it back after an outage.
//!
//! A lease can run out for two reasons the server cannot tell apart: the computer could not
//! reach the server (a network or server outage), or the agent went silent (suspended,
//! stopped, starved). Only the first is the agent's to repair: when a write is refused as
//! `stale_lease` (or the heartbeat lists the run as `lost`) and a call sent to the server
//! while the lease was still running found no server (however late it failed), the run is
//! **reattached** — the same attempt under a new lease — and carries on. Otherwise, or when
//! the server refuses, the run stops at once.
//!
//! **Architecture Invariant:** a run never acts under two leases: the token is replaced in
//! one place, under one lock, and every writer reads it from here.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tether_protocol::jobs::{ClaimedJob, CompleteParams};
use tether_protocol::report::ObservedRun;
use tether_protocol::{JobId, LeaseToken};

use crate::local::journal::{mark_process, DeliveryStage, Journal, RunRecord, RunState};
use crate::local::vault::redact;
use crate::remote::client::{DeviceClient, RemoteError};

/// The lease period until the server's heartbeat answer says otherwise (DESIGN §3.3).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);

/// The lease period the server announced, shared by every run.
#[derive(Debug)]
pub struct LeasePeriod {
    secs: AtomicU64,
}

impl LeasePeriod {
    pub fn new() -> LeasePeriod {
        LeasePeriod {
            secs: AtomicU64::new(DEFAULT_LEASE.as_secs()),
        }
    }

    pub fn set(&self, period: Duration) {
        self.secs.store(period.as_secs().max(1), Ordering::Relaxed);
    }

    pub fn get(&self) -> Duration {
        Duration::from_secs(self.secs.load(Ordering::Relaxed))
    }
}

impl Default for LeasePeriod {
    fn default() -> Self {
        LeasePeriod::new()
    }
}

/// What became of a run's lease after a write was refused as stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// The run holds a new lease (reattached, here or by another writer): send again.
    Renewed,
    /// The server could not be reached to ask; try again after this wait (at least).
    Later(Duration),
    /// The run is not ours any more: stop its side effects now.
    Lost,
    /// The device was revoked.
    Revoked,
}

/// The lease of one run.
#[derive(Debug)]
pub struct RunLease {
    job_id: JobId,
    attempt: u32,
    client: DeviceClient,
    journal: Arc<Journal>,
    period: Arc<LeasePeriod>,
    /// The token and when the server last confirmed it. A std mutex: held only to copy.
    held: Mutex<Held>,
    /// Held while reattaching, so concurrent writers that all hit `stale_lease` make one call.
    reattaching: tokio::sync::Mutex<()>,
    /// The last progress `seq` taken in this attempt: one count for every progress call of
    /// the run (its output, and what the run says before and after its engine).
    progress_seq: Arc<AtomicU64>,
    /// Whether the job's git delivery follows the engine.
    delivers: AtomicBool,
    /// What the run uses, said since the last progress call: the next one carries it.
    observed: Mutex<Option<ObservedRun>>,
}

#[derive(Debug, Clone)]
struct Held {
    token: LeaseToken,
    confirmed_at: Instant,
}

impl RunLease {
    pub fn new(
        client: DeviceClient,
        journal: Arc<Journal>,
        period: Arc<LeasePeriod>,
        job: &ClaimedJob,
    ) -> Arc<RunLease> {
        Arc::new(RunLease {
            job_id: job.id.clone(),
            attempt: job.attempt,
            client,
            journal,
            period,
            held: Mutex::new(Held {
                token: job.lease_token.clone(),
                confirmed_at: Instant::now(),
            }),
            reattaching: tokio::sync::Mutex::new(()),
            progress_seq: Arc::new(AtomicU64::new(0)),
            delivers: AtomicBool::new(false),
            observed: Mutex::new(None),
        })
    }

    /// What the run uses changed: the next progress call carries it.
    pub fn observe(&self, observed: ObservedRun) {
        *self.observed.lock().unwrap_or_else(PoisonError::into_inner) = Some(observed);
    }

    /// What the run uses, if it changed since the last call that took it.
    pub fn take_observed(&self) -> Option<ObservedRun> {
        self.observed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The attempt's progress numbering, shared by everything that reports progress.
    pub fn progress_seq(&self) -> Arc<AtomicU64> {
        self.progress_seq.clone()
    }

    /// The run works in the worktree at `path`: remembered for file browsing.
    pub fn worktree(&self, label: &str, path: &Path) {
        if let Err(err) = self.journal.remember_worktree(&self.job_id, label, path) {
            tracing::warn!(job = %self.job_id, "cannot remember the run's worktree: {err:#}");
        }
    }

    pub fn job_id(&self) -> &JobId {
        &self.job_id
    }

    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The token to send now.
    pub fn token(&self) -> LeaseToken {
        self.held().token
    }

    /// The server answered a write under `token` (progress, heartbeat): the lease runs on.
    pub fn confirmed(&self, token: &LeaseToken) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.token == *token {
            held.confirmed_at = Instant::now();
        }
    }

    /// Whether a call sent while the lease was still running found no server (an outage is
    /// dated from the send, see [`Connectivity`]), i.e. whether the lease may have run out
    /// because this computer was cut off.
    ///
    /// [`Connectivity`]: crate::remote::client::Connectivity
    pub fn cut_off(&self) -> bool {
        let confirmed_at = self.held().confirmed_at;
        let expired_at = confirmed_at + self.period.get();
        self.client
            .connectivity()
            .unreachable_between(confirmed_at, expired_at)
    }

    /// The run's process exists: journal it, so a restarted agent knows what it left behind.
    pub fn spawned(&self, pid: u32) {
        let mark = mark_process(pid);
        self.journal_update(|record| {
            record.process = Some(mark);
            record.state = RunState::Running;
        });
    }

    /// The job's git delivery will follow the engine: an end journaled from now on says so.
    pub fn will_deliver(&self) {
        self.delivers.store(true, Ordering::Relaxed);
    }

    /// The run's process ended with `params` (its summary with the `hidden` values hidden
    /// here): journaled at once, before its output, evidence and delivery go anywhere, so
    /// that an agent restarted from here on reports it and runs nothing again.
    pub fn ended(&self, params: &CompleteParams, hidden: &[String]) {
        let delivery = if self.delivers.load(Ordering::Relaxed) {
            DeliveryStage::Pending
        } else {
            DeliveryStage::NotAsked
        };
        let state = RunState::Ended {
            outcome: params.outcome,
            summary: redact(&params.summary, hidden),
            exit_code: params.exit_code,
            report: params.report.clone(),
            observed: params.observed.clone(),
            delivery,
        };
        self.journal_update(|record| record.state = state);
    }

    /// The git delivery of a run that ended begins: a restart from here on cannot tell
    /// what it made, and says so.
    pub fn delivering(&self) {
        self.journal_update(|record| {
            if let RunState::Ended { delivery, .. } = &mut record.state {
                *delivery = DeliveryStage::Begun;
            }
        });
    }

    /// The run ended with `params` to report: journal it before reporting, so the report
    /// survives a restart of the agent.
    pub fn finished(&self, params: &CompleteParams) {
        let state = RunState::Finished {
            outcome: params.outcome,
            summary: params.summary.clone(),
            exit_code: params.exit_code,
            report: params.report.clone(),
            observed: params.observed.clone(),
            changes: params.changes.clone(),
            delivery: params.delivery.clone(),
        };
        self.journal_update(|record| record.state = state);
    }

    /// After `stale` was refused as stale: reattach if this computer was cut off, else give
    /// the run up.
    pub async fn recover(&self, stale: &LeaseToken) -> Recovery {
        let _one_at_a_time = self.reattaching.lock().await;
        if self.token() != *stale {
            // Another writer reattached meanwhile.
            return Recovery::Renewed;
        }
        if !self.cut_off() {
            tracing::warn!(job = %self.job_id, "the lease ran out while the server was reachable; not reattaching");
            return Recovery::Lost;
        }
        match self
            .client
            .reattach(&self.job_id, self.attempt, stale)
            .await
        {
            Ok(grant) if grant.attempt == self.attempt && grant.job_id == self.job_id => {
                tracing::info!(job = %self.job_id, attempt = self.attempt, "reattached after an outage");
                self.renew(grant.lease_token);
                Recovery::Renewed
            }
            Ok(grant) => {
                tracing::warn!(job = %self.job_id, granted = grant.attempt, "reattach answered for another attempt; stopping");
                Recovery::Lost
            }
            Err(RemoteError::Revoked) => Recovery::Revoked,
            Err(err) if err.is_transient() => {
                tracing::warn!(job = %self.job_id, "cannot reattach yet: {err}");
                Recovery::Later(err.retry_after())
            }
            Err(err) => {
                tracing::warn!(job = %self.job_id, "the server will not give this run back: {err}");
                Recovery::Lost
            }
        }
    }

    fn renew(&self, token: LeaseToken) {
        {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.token = token.clone();
            held.confirmed_at = Instant::now();
        }
        self.journal_update(|record| record.lease_token = token);
    }

    fn held(&self) -> Held {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A journal write that fails is logged, not fatal: the run goes on, and only its
    /// recovery after a restart of the agent is at risk.
    fn journal_update(&self, change: impl FnOnce(&mut RunRecord)) {
        if let Err(err) = self.journal.update(&self.job_id, change) {
            tracing::error!(job = %self.job_id, "cannot update the run journal: {err:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::state::DataDir;
    use crate::remote::client::ServerClient;
    use crate::run::engine::blocked;
    use crate::run::grant::tests::claimed_job;
    use tether_protocol::jobs::Outcome;

    /// The end is journaled with its summary's saved values hidden and how far the delivery
    /// got; the completion made after the delivery replaces it.
    #[test]
    fn the_end_is_journaled_before_the_delivery_and_replaced_by_the_completion(
    ) -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        let journal = Arc::new(Journal::new(&data_dir));
        let job = claimed_job("p", 1);
        journal.record(&RunRecord::claimed(&job))?;
        let client = DeviceClient::new(ServerClient::new("http://127.0.0.1:9")?, "tdt_x".into());
        let lease = RunLease::new(client, journal.clone(), Arc::default(), &job);
        let state = || -> anyhow::Result<Option<RunState>> {
            Ok(journal.get(&job.id)?.map(|record| record.state))
        };

        // Nothing ended yet: a delivery beginning changes nothing.
        lease.delivering();
        assert_eq!(state()?, Some(RunState::Starting));
        lease.will_deliver();
        let mut params = blocked("printed hunter22 on the way out".into());
        params.outcome = Outcome::Succeeded;
        lease.ended(&params, &["hunter22".to_owned()]);
        let ended = |delivery| RunState::Ended {
            outcome: Outcome::Succeeded,
            summary: "printed [hidden] on the way out".into(),
            exit_code: None,
            report: None,
            observed: None,
            delivery,
        };
        assert_eq!(state()?, Some(ended(DeliveryStage::Pending)));
        lease.delivering();
        assert_eq!(state()?, Some(ended(DeliveryStage::Begun)));
        lease.finished(&params);
        assert!(matches!(
            state()?,
            Some(RunState::Finished {
                outcome: Outcome::Succeeded,
                ..
            })
        ));
        Ok(())
    }
}
