//! Who is told after a change commits: one method per thing that happened.
//!
//! Domain functions change rows and return what happened (a [`Job`], a [`Settled`]
//! decision, the runs a sweep ended); routes and the sweeper hand that to one method here,
//! which turns it into device frames (wake-ups, cancels, answers, revocations), account
//! events for open pages, push notifications and metrics. Every one is a hint: the database
//! is the truth, a device that misses a frame claims or reads again at its next heartbeat,
//! and a page that misses an event catches up at its next re-read.
//!
//! The audit ledger is not told here: each ledger entry is written in the transaction of
//! the change it records, so the two commit or roll back together.
//!
//! **Invariant:** nothing here is called before the change it announces committed.

use tether_protocol::decisions::DecisionChange;
use tether_protocol::frames::ServerFrame;
use tether_protocol::jobs::{Job, JobState};
use tether_protocol::{AccountId, DecisionId, DeviceId, JobId, SpaceId, UserId};

use crate::clock::Millis;
use crate::devices::presence::Presence;
use crate::error::ApiError;
use crate::jobs::decisions::Settled;
use crate::jobs::leases::RunEnd;
use crate::jobs::live::{self, NewLines};
use crate::metrics::Metrics;
use crate::push::Push;
use crate::relay::{AccountEvent, Hub};
use crate::store::Store;

/// The parts that tell: the hub (device frames, account events), push, metrics and the
/// presence memory (which remembers empty queues). Cheap to clone.
#[derive(Clone)]
pub struct Notices {
    store: Store,
    hub: Hub,
    push: Push,
    metrics: Metrics,
    presence: Presence,
}

impl Notices {
    pub fn new(store: Store, hub: Hub, push: Push, metrics: Metrics, presence: Presence) -> Self {
        Notices {
            store,
            hub,
            push,
            metrics,
            presence,
        }
    }

    /// A job was queued for `device_id` (created or run again): its next heartbeat counts
    /// the queue again, and its stream is woken to claim.
    pub async fn job_queued(&self, device_id: &DeviceId) {
        self.presence.queue_changed(device_id.as_str());
        self.hub.notify(device_id, ServerFrame::Wake).await;
    }

    /// A progress batch appended `lines` to `job_id`: the pages watching it get them.
    pub async fn lines_appended(&self, job_id: &JobId, lines: NewLines) {
        live::publish_lines(&self.hub, job_id, lines).await;
    }

    /// `job_id` changed otherwise (claimed, carried on, cancelled, ended, asked, answered):
    /// the pages watching it read it again.
    pub async fn job_changed(&self, job_id: &JobId) {
        live::publish_changed(&self.hub, job_id).await;
    }

    /// The web cancelled `job`: a running one is told to stop, a follow-up waiting for it
    /// may start, and what it had asked is withdrawn.
    pub async fn job_cancelled(&self, account_id: &AccountId, job: &Job) {
        self.job_changed(&job.id).await;
        if job.cancel_requested && matches!(job.state, JobState::Running | JobState::Waiting) {
            let frame = ServerFrame::JobCancel {
                job_id: job.id.clone(),
            };
            self.hub.notify(&job.device_id, frame).await;
        }
        if job.state.is_final() && job.continued_by.is_some() {
            self.hub.notify(&job.device_id, ServerFrame::Wake).await;
        }
        if !job.decisions.is_empty() {
            self.decisions_withdrawn(account_id).await;
        }
    }

    /// A run ended on its device. `first_end` is false when the device only repeated its
    /// completion (nothing is told twice); `freed_full_account` when the account was at its
    /// concurrent-run limit, so held-back claims may go now.
    pub async fn run_ended(&self, account_id: &AccountId, job: &Job, ended: RunEnd) {
        if ended.first_end {
            self.push.job_ended(&job.id, account_id, job.state);
            self.job_changed(&job.id).await;
        }
        if !job.decisions.is_empty() {
            self.decisions_withdrawn(account_id).await;
        }
        if ended.freed_full_account {
            self.hub.wake_queued(&self.store, account_id).await;
        } else if job.continued_by.is_some() {
            self.hub.notify(&job.device_id, ServerFrame::Wake).await;
        }
    }

    /// A run lost to a restart was resumed as a new attempt of `job_id`: the lost
    /// attempt's pending decisions were withdrawn.
    pub async fn run_resumed(&self, account_id: &AccountId, job_id: &JobId) {
        self.job_changed(job_id).await;
        self.decisions_withdrawn(account_id).await;
    }

    /// The sweeper ended `interrupted` runs whose leases ran out (in `accounts`, each once)
    /// and expired `expired` decisions.
    pub async fn runs_swept(
        &self,
        interrupted: &[JobId],
        accounts: &[AccountId],
        expired: Vec<Settled>,
    ) {
        self.metrics.record_lease_expiries(interrupted.len());
        self.push.runs_interrupted(interrupted);
        for job_id in interrupted {
            self.job_changed(job_id).await;
        }
        // Each interrupted run freed a slot of its account's concurrent-run limit, and
        // expired what it had asked.
        for account_id in accounts {
            self.hub.wake_queued(&self.store, account_id).await;
            self.decisions_changed(account_id, DecisionChange::Expired, None)
                .await;
        }
        for settled in expired {
            self.decision_settled(settled).await;
        }
    }

    /// Finds the computers that went offline with work running and tells their owners;
    /// returns how many.
    ///
    /// # Errors
    /// A database error.
    pub async fn computers_gone_quiet(
        &self,
        now: Millis,
        online_secs: u64,
    ) -> Result<usize, ApiError> {
        self.push.tell_outages(&self.store, now, online_secs).await
    }

    /// A device is gone (revoked by its owner or an admin, or removed by itself): every
    /// replica forgets its token and its streams are told; its runs ended, withdrawing what
    /// they had asked and freeing run slots of the account.
    pub async fn device_gone(&self, account_id: &AccountId, device_id: &DeviceId) {
        self.hub.device_revoked(device_id).await;
        self.decisions_withdrawn(account_id).await;
        self.hub.wake_queued(&self.store, account_id).await;
    }

    /// A computer was paired again: its old token ends on every replica.
    pub async fn device_paired_again(&self, device_id: &DeviceId) {
        self.hub.forget_device_token(device_id).await;
    }

    /// One of the user's API tokens was revoked, or all of them with a password change: every
    /// replica forgets the user's tokens, so the next request with one reads it again.
    pub async fn api_tokens_changed(&self, user_id: &UserId) {
        self.hub.forget_api_tokens(user_id).await;
    }

    /// A browser of the account subscribed to push notifications, or changed which it wants:
    /// no replica may go on believing the account wants no ended jobs told.
    pub async fn push_subscribed(&self, account_id: &AccountId) {
        self.hub.forget_quiet_account(account_id).await;
    }

    /// Sessions of the account ended (signed out elsewhere, one ended, a password change):
    /// their requests are 401 already, since no replica caches a session; the streams they
    /// hold open, on any replica, are told to check and end.
    pub async fn sessions_ended(&self, account_id: &AccountId) {
        self.hub
            .publish_account(account_id, AccountEvent::SessionsEnded)
            .await;
    }

    /// `account_id` left a space, was removed from it or given another role: its open
    /// streams of that space, on any replica, check and end when it may no longer follow.
    pub async fn space_membership_changed(&self, account_id: &AccountId, space_id: &SpaceId) {
        let event = AccountEvent::SpaceChanged {
            space_id: space_id.to_string(),
        };
        self.hub.publish_account(account_id, event).await;
    }

    /// A sealed secret waits for `device_id`; a lost frame is sent again when the device's
    /// stream reconnects.
    pub async fn secret_sent(&self, device_id: &DeviceId, frame: ServerFrame) {
        self.hub.notify(device_id, frame).await;
    }

    /// A run of `job_id` asked its owner `decision_id`: a push notification and the open
    /// pages.
    pub async fn decision_asked(
        &self,
        account_id: &AccountId,
        job_id: &JobId,
        decision_id: &DecisionId,
    ) {
        self.push.decision_asked(decision_id);
        self.job_changed(job_id).await;
        self.decisions_changed(account_id, DecisionChange::Asked, Some(decision_id.clone()))
            .await;
    }

    /// The web answered a decision of `device_id`: the device is told (a lost frame costs it
    /// only latency, it reads its decision while it waits), and so are the open pages.
    pub async fn decision_answered(
        &self,
        device_id: &DeviceId,
        decision_id: &DecisionId,
        settled: Settled,
    ) {
        let frame = ServerFrame::DecisionAnswered {
            decision_id: decision_id.clone(),
        };
        self.hub.notify(device_id, frame).await;
        self.decision_settled(settled).await;
    }

    /// A decision left `pending` (answered, closed by the device, expired): how long it
    /// waited is measured and the open pages are told.
    pub async fn decision_settled(&self, settled: Settled) {
        self.metrics
            .record_decision_wait(settled.how.as_str(), settled.waited);
        // Its job said so in its timeline, and may be running again.
        self.job_changed(&settled.job_id).await;
        self.decisions_changed(
            &settled.account_id,
            settled.how.change(),
            Some(settled.decision_id),
        )
        .await;
    }

    /// Some of the account's decisions were withdrawn because runs ended or stopped.
    pub async fn decisions_withdrawn(&self, account_id: &AccountId) {
        self.decisions_changed(account_id, DecisionChange::Withdrawn, None)
            .await;
    }

    async fn decisions_changed(
        &self,
        account_id: &AccountId,
        change: DecisionChange,
        decision_id: Option<DecisionId>,
    ) {
        let event = AccountEvent::Decisions {
            change,
            decision_id,
        };
        self.hub.publish_account(account_id, event).await;
    }
}
