//! Web Push: telling a person's phone when something needs them, or ended.
//!
//! After a change commits, the code that made it puts a [`Notice`] (ids only) on this
//! replica's bounded queue ([`Push::decision_asked`], [`Push::job_ended`], the sweeper's
//! [`Push::tell_outages`]); that never waits and never fails. [`Push::run`] takes notices
//! one by one, composes the message from the database (`messages`; an account found with no
//! browser that wants ended jobs is remembered as quiet, and its ends are not even queued),
//! reads the account's subscriptions that want its kind (`subscriptions`) and hands each send to a task, at most
//! [`SENDS_AT_ONCE`] at a time (`sender`: `encrypt`ed per RFC 8291, signed with the
//! server's `vapid` key). A slow or silent push service therefore holds up only other
//! notifications, within timeouts; when the queue is full the oldest notice is dropped and
//! counted (`tether_push_dropped_total`).
//!
//! A notice is sent by the replica whose request (or sweep) caused it, so it is sent once.
//!
//! **Invariants:** a message never holds a secret, a prompt, an action, file text or output
//! (`messages` reads none of them); the server never sends to a non-public address
//! (`endpoint`); endpoints and keys are never logged.

use std::sync::Arc;

use tokio::sync::Semaphore;

use tether_protocol::jobs::JobState;
use tether_protocol::{AccountId, DecisionId, DeviceId, JobId};

use crate::clock::{secs, Millis};
use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::relay::QuietAccounts;
use crate::store::Store;

pub mod encrypt;
pub mod endpoint;
pub mod messages;
pub mod outages;
pub mod queue;
pub mod sender;
pub mod settings;
pub mod subscriptions;
pub mod vapid;

pub use messages::Notice;

use queue::Queue;
use sender::Sender;

/// Notices waiting to be sent; past this the oldest is dropped.
pub const QUEUE_CAPACITY: usize = 1024;
/// Sends in flight at once, across all push services.
pub const SENDS_AT_ONCE: usize = 16;

/// This replica's push notifications: the queue, and what sending needs. Cheap to clone.
#[derive(Clone)]
pub struct Push {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Queue<Notice>,
    sender: Sender,
    metrics: Metrics,
    /// Accounts found with no browser that wants to hear of ended jobs (the hub's).
    quiet: QuietAccounts,
}

impl Push {
    /// Loads (or makes) the VAPID key and builds the HTTP client. Starts no task.
    ///
    /// # Errors
    /// A configured VAPID key that does not parse, a key file that cannot be read or
    /// written, or no TLS roots for the client.
    pub fn new(config: &Config, metrics: Metrics, quiet: QuietAccounts) -> anyhow::Result<Push> {
        let vapid = vapid::VapidKey::load(config.vapid_private_key.as_deref(), &config.data_dir)?;
        if config.vapid_private_key.is_none() && config.redis_url.is_some() {
            tracing::warn!(
                "several replicas each keep their own VAPID key unless they share the data dir; \
                 set TETHER_VAPID_PRIVATE_KEY to the same key on every replica"
            );
        }
        let subject = config.push_subject.clone().or_else(|| {
            config
                .public_url
                .clone()
                .filter(|url| url.starts_with("https://"))
        });
        let sender = Sender::new(vapid, subject, config.push_allow_loopback, metrics.clone())?;
        Ok(Push {
            inner: Arc::new(Inner {
                queue: Queue::new(QUEUE_CAPACITY),
                sender,
                metrics,
                quiet,
            }),
        })
    }

    /// The VAPID public key browsers subscribe with.
    pub fn public_key(&self) -> &str {
        self.inner.sender.vapid().public_key()
    }

    /// A run asked `decision_id` (call after the ask committed).
    pub fn decision_asked(&self, decision_id: &DecisionId) {
        self.put(Notice::DecisionAsked(decision_id.clone()));
    }

    /// A job of `account_id` ended `state` (call after the end committed). Cancels are not
    /// told, nor ends of an account known to have no browser that wants them.
    pub fn job_ended(&self, job_id: &JobId, account_id: &AccountId, state: JobState) {
        if state != JobState::Cancelled && self.inner.quiet.get(account_id.as_str()).is_none() {
            self.put(Notice::JobEnded(job_id.clone()));
        }
    }

    /// Runs the sweeper ended because their leases ran out.
    pub fn runs_interrupted(&self, job_ids: &[JobId]) {
        for job_id in job_ids {
            self.put(Notice::JobEnded(job_id.clone()));
        }
    }

    /// Claims the computers that went offline with work running (see `outages`) and tells
    /// their owners; returns how many.
    ///
    /// # Errors
    /// A database error.
    pub async fn tell_outages(
        &self,
        store: &Store,
        now: Millis,
        online_secs: u64,
    ) -> Result<usize, ApiError> {
        let offline: Vec<DeviceId> = outages::claim(store, now, secs(online_secs)).await?;
        for device_id in &offline {
            self.put(Notice::DeviceOffline(device_id.clone()));
        }
        Ok(offline.len())
    }

    fn put(&self, notice: Notice) {
        if self.inner.queue.put(notice) {
            self.inner.metrics.record_push_dropped();
            // Said at the first drop and every hundredth: a flood must not flood the log.
            let dropped = self.inner.queue.dropped();
            if dropped == 1 || dropped.is_multiple_of(100) {
                tracing::warn!(
                    dropped,
                    "push queue full; the oldest notification was dropped"
                );
            }
        }
    }

    /// Sends what is queued, until the task is dropped.
    pub async fn run(self, store: Store) {
        let permits = Arc::new(Semaphore::new(SENDS_AT_ONCE));
        loop {
            let notice = self.inner.queue.take().await;
            let outgoing = match messages::compose(&store, &self.inner.quiet, &notice).await {
                Ok(Some(outgoing)) => Arc::new(outgoing),
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, "composing a push notification failed");
                    continue;
                }
            };
            let kind = outgoing.message.kind;
            let targets = match subscriptions::targets(&store, &outgoing.account_id, kind).await {
                Ok(targets) => targets,
                Err(error) => {
                    tracing::warn!(%error, "reading push subscriptions failed");
                    continue;
                }
            };
            for target in targets {
                // Waiting here leaves notices on the bounded queue, not in tasks.
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let push = self.clone();
                let store = store.clone();
                let outgoing = outgoing.clone();
                tokio::spawn(async move {
                    push.inner.sender.deliver(&store, &target, &outgoing).await;
                    drop(permit);
                });
            }
        }
    }
}
