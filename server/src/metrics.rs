//! Prometheus metrics, served at `/metrics` in the text format.
//!
//! Counters and histograms are updated where things happen (the request middleware, the
//! sweeper); gauges that the database knows better (jobs by state) are read at scrape time,
//! so every replica reports the same truth.
//!
//! **Invariant:** labels are route patterns (`/api/jobs/{id}`), methods and statuses — never
//! ids, paths with ids in them, or anything a client chose.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::ApiError;
use crate::relay::Hub;
use crate::store::{on_read, Store};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PushLabels {
    /// `delivered`, `gone`, `refused`, `failed` or `skipped` (see `push::sender`).
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SettlementLabels {
    /// `answered_web`, `answered_computer`, `expired` or `withdrawn`.
    how: String,
}

/// This replica's metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RouteLabels, Histogram>,
    connected_devices: Gauge,
    jobs: Family<StateLabels, Gauge>,
    lease_expiries: Counter,
    relay_timeouts: Counter,
    decision_waits: Family<SettlementLabels, Histogram>,
    pending_decisions: Gauge,
    push_sends: Family<PushLabels, Counter>,
    push_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tether");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests by route pattern, method and status",
            requests.clone(),
        );
        // 0.5 ms to ~4 s: claims and heartbeats live at the low end, relays at the high end.
        let durations = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 14))
        });
        registry.register(
            "http_request_duration_seconds",
            "Time to answer, by route pattern (the claim route's is the claim latency)",
            durations.clone(),
        );
        let connected_devices = Gauge::default();
        registry.register(
            "connected_devices",
            "Device event streams open on this replica",
            connected_devices.clone(),
        );
        let jobs = Family::<StateLabels, Gauge>::default();
        registry.register("jobs", "Jobs by state, from the database", jobs.clone());
        let lease_expiries = Counter::default();
        registry.register(
            "lease_expiries",
            "Runs this replica's sweeper ended because their lease ran out",
            lease_expiries.clone(),
        );
        let relay_timeouts = Counter::default();
        registry.register(
            "relay_timeouts",
            "Relayed requests the device did not answer in time (504)",
            relay_timeouts.clone(),
        );
        // 1 s to ~9 h: a person answers in seconds to hours; the longest wait is a day.
        let decision_waits = Family::<SettlementLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(1.0, 2.0, 16))
        });
        registry.register(
            "decision_wait_seconds",
            "Time from a run's question to its answer or close, by how it ended (web answers, \
             closes by the device and the sweeper's expiries)",
            decision_waits.clone(),
        );
        let pending_decisions = Gauge::default();
        registry.register(
            "pending_decisions",
            "Decisions waiting for an answer, from the database",
            pending_decisions.clone(),
        );
        let push_sends = Family::<PushLabels, Counter>::default();
        registry.register(
            "push_sends",
            "Web Push messages this replica sent, by how the push service took them",
            push_sends.clone(),
        );
        let push_dropped = Counter::default();
        registry.register(
            "push_dropped",
            "Push notifications dropped unsent because this replica's queue was full",
            push_dropped.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                durations,
                connected_devices,
                jobs,
                lease_expiries,
                relay_timeouts,
                decision_waits,
                pending_decisions,
                push_sends,
                push_dropped,
            }),
        }
    }

    /// Records one answered request; `route` is the matched pattern, or `unmatched`.
    pub fn record_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let labels = RequestLabels {
            route: route.to_owned(),
            method: method.to_owned(),
            status,
        };
        self.inner.requests.get_or_create(&labels).inc();
        self.inner
            .durations
            .get_or_create(&RouteLabels {
                route: route.to_owned(),
            })
            .observe(seconds);
        if status == 504 {
            self.inner.relay_timeouts.inc();
        }
    }

    pub fn record_lease_expiries(&self, count: usize) {
        self.inner.lease_expiries.inc_by(count as u64);
    }

    /// Records one push send; `result` is a `push::sender::Delivery` label.
    pub fn record_push(&self, result: &str) {
        self.inner
            .push_sends
            .get_or_create(&PushLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Records a notification dropped from the full push queue.
    pub fn record_push_dropped(&self) {
        self.inner.push_dropped.inc();
    }

    /// Records how long a decision waited; `how` is a `Settlement` label of the decisions.
    pub fn record_decision_wait(&self, how: &str, waited: std::time::Duration) {
        self.inner
            .decision_waits
            .get_or_create(&SettlementLabels {
                how: how.to_owned(),
            })
            .observe(waited.as_secs_f64());
    }

    /// The text exposition, with the scrape-time gauges refreshed first.
    ///
    /// # Errors
    /// When the database cannot be read.
    pub async fn render(&self, store: &Store, hub: &Hub) -> Result<String, ApiError> {
        self.inner
            .connected_devices
            .set(i64::try_from(hub.local_stream_count()).unwrap_or(i64::MAX));
        let counts = on_read!(store, |pool| sqlx::query_as::<_, (String, i64)>(
            "SELECT state, COUNT(*) FROM jobs GROUP BY state"
        )
        .fetch_all(pool)
        .await)?;
        for state in tether_protocol::jobs::JobState::ALL {
            let count = counts
                .iter()
                .find(|(name, _)| name == state.as_str())
                .map_or(0, |(_, n)| *n);
            self.inner
                .jobs
                .get_or_create(&StateLabels {
                    state: state.as_str().to_owned(),
                })
                .set(count);
        }
        let pending = on_read!(store, |pool| sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM decisions WHERE state = 'pending' AND expires_at > $1"
        )
        .bind(store.now())
        .fetch_one(pool)
        .await)?;
        self.inner.pending_decisions.set(pending);
        let mut text = String::new();
        encode(&mut text, &self.inner.registry).map_err(|error| ApiError::internal(&error))?;
        Ok(text)
    }
}
