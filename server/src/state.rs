//! What every handler reaches through `web::Data<AppState>`: the store, the configuration and
//! this replica's in-memory parts (hub, limits, password queue, metrics, presence, claim
//! gates, push).
//!
//! It sits below the web (`auth`, `routes`, `pages`) so the handlers import it downward, and
//! above every domain wing it holds.

use crate::accounts::passwords::PasswordQueue;
use crate::clock::Clock;
use crate::config::Config;
use crate::devices::presence::Presence;
use crate::jobs::claim_gates::ClaimGates;
use crate::metrics::Metrics;
use crate::notices::Notices;
use crate::previews::Previews;
use crate::push::Push;
use crate::rate_limits::RateLimits;
use crate::relay::Hub;
use crate::store::blobs::Blobs;
use crate::store::Store;

/// One replica's state, shared by every HTTP worker.
pub struct AppState {
    pub store: Store,
    pub config: Config,
    /// Event streams and relays (in process, or across replicas through Redis).
    pub hub: Hub,
    /// This replica's rate limits.
    pub limits: RateLimits,
    /// The bounded queue password hashing runs in (sign-in, sign-up).
    pub passwords: PasswordQueue,
    /// This replica's metrics (`/metrics`).
    pub metrics: Metrics,
    /// Device contact times not yet written (heartbeats are written in batches).
    pub presence: Presence,
    /// This replica's turn-taking for the claims of one account.
    pub claim_gates: ClaimGates,
    /// This replica's Web Push notifications (queue, VAPID key, sender).
    pub push: Push,
    /// Who is told after a change commits (frames, account events, push, metrics).
    pub notices: Notices,
    /// Held evidence its owner asked to look at, for a few minutes.
    pub previews: Previews,
}

impl AppState {
    /// Connects the store (applying its migrations), clears blob temporaries a crash left,
    /// and reaches Redis when one is configured. Starts no task.
    ///
    /// # Errors
    /// When the database cannot be prepared, Redis does not answer or the push key cannot be
    /// read.
    pub async fn connect(config: Config, clock: Clock) -> anyhow::Result<AppState> {
        let store = Store::connect(&config, clock).await?;
        Blobs::new(&config.data_dir).remove_stale_temporaries();
        let hub = Hub::connect(config.redis_url.as_deref()).await?;
        let metrics = Metrics::new();
        let push = Push::new(&config, metrics.clone(), hub.quiet_accounts().clone())?;
        let presence = Presence::new(config.redis_url.is_none());
        let notices = Notices::new(
            store.clone(),
            hub.clone(),
            push.clone(),
            metrics.clone(),
            presence.clone(),
        );
        let previews = Previews::new(hub.clone(), store.clock().clone());
        Ok(AppState {
            previews,
            store,
            hub,
            presence,
            limits: RateLimits::new(config.rate_limits.clone()),
            passwords: PasswordQueue::new(config.password_slots, config.password_queue),
            metrics,
            claim_gates: ClaimGates::default(),
            push,
            notices,
            config,
        })
    }
}
