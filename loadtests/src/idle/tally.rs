//! What one generator process measured: when each of its devices finished the storm (its
//! stream open and one heartbeat answered), its failed attempts by reason, and every
//! heartbeat's latency.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Shared by the devices of one generator process.
#[derive(Debug)]
pub struct Tally {
    inner: Mutex<Outcome>,
    finished: AtomicUsize,
}

/// The tally a generator process hands back.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// Per device: milliseconds from the storm's start to its finish, if it finished.
    pub finished_ms: Vec<Option<u64>>,
    /// Failed attempts (connects, heartbeats, claims) and dropped streams, by reason.
    pub failures: BTreeMap<String, u64>,
    /// Every answered heartbeat: when it was sent (unix ms) and how long it took (µs,
    /// connecting included when it needed a new connection, as for the agent).
    pub heartbeats: Vec<(u64, u64)>,
}

impl Tally {
    pub fn new(devices: usize) -> Tally {
        Tally {
            inner: Mutex::new(Outcome {
                finished_ms: vec![None; devices],
                ..Outcome::default()
            }),
            finished: AtomicUsize::new(0),
        }
    }

    /// Device `slot` finished the storm `after` its start.
    pub fn finished(&self, slot: usize, after: Duration) {
        self.lock().finished_ms[slot] = Some(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
        self.finished.fetch_add(1, Ordering::Relaxed);
    }

    /// Devices that finished so far.
    pub fn finished_count(&self) -> usize {
        self.finished.load(Ordering::Relaxed)
    }

    pub fn failure(&self, reason: &str) {
        *self.lock().failures.entry(reason.to_owned()).or_default() += 1;
    }

    pub fn heartbeat(&self, sent: SystemTime, took: Duration) {
        let at = sent
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0));
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.lock().heartbeats.push((at, micros));
    }

    /// Everything recorded, leaving the tally empty.
    pub fn take(&self) -> Outcome {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, Outcome> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
