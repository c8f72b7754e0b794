//! What open pages are told after a change commits: an account's decisions changed.
//!
//! The decision routes, the routes whose changes settle decisions as a side effect (a
//! cancel, a revocation, a run's end or resume) and the sweeper all announce through here, so
//! every settlement is measured and told the same way. These are hints: a page that misses
//! one catches up at its next re-read (see `routes/decisions.rs`).

use tether_protocol::decisions::DecisionChange;
use tether_protocol::{AccountId, DecisionId};

use crate::decisions::Settled;
use crate::metrics::Metrics;
use crate::relay::{AccountEvent, Hub};

/// Tells the account's followers that its decisions changed (`decision_id` when it is one).
pub async fn decisions_changed(
    hub: &Hub,
    account_id: &AccountId,
    change: DecisionChange,
    decision_id: Option<DecisionId>,
) {
    let event = AccountEvent::Decisions {
        change,
        decision_id,
    };
    hub.publish_account(account_id, event).await;
}

/// Tells the account's followers that some of its decisions were withdrawn because runs
/// ended or stopped.
pub async fn decisions_withdrawn(hub: &Hub, account_id: &AccountId) {
    decisions_changed(hub, account_id, DecisionChange::Withdrawn, None).await;
}

/// Records how long a settled decision waited and tells its account's followers.
pub async fn decision_settled(hub: &Hub, metrics: &Metrics, settled: Settled) {
    metrics.record_decision_wait(settled.how.as_str(), settled.waited);
    decisions_changed(
        hub,
        &settled.account_id,
        settled.how.change(),
        Some(settled.decision_id),
    )
    .await;
}
