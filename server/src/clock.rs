//! Where the server reads the time.
//!
//! Every "now" the server computes (lease expiries, decisions' expiry, pairing codes and
//! their polling pace, sessions, the sweeper, the online window, the pages' "3 min ago")
//! comes from the [`Clock`] its [`crate::Store`] holds: the system clock in production, a
//! [`ManualClock`] in tests. A manual clock moves only when told, so a test of an expiry
//! advances it instead of sleeping until the expiry passes.
//!
//! Timers that pace real work (the sweeper's interval, event-stream pings and idle limits,
//! rate-limit buckets, the presence flush) stay on tokio's time: they wait for real I/O.
//!
//! Times are stored as unix milliseconds ([`Millis`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Unix milliseconds, the stored form of every time.
pub type Millis = i64;

/// The server's source of "now"; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// `None` is the system clock.
    manual: Option<ManualClock>,
}

impl Clock {
    /// The machine's wall clock.
    pub fn system() -> Clock {
        Clock { manual: None }
    }

    /// Now, to the millisecond (the precision every stored time has).
    pub fn now(&self) -> DateTime<Utc> {
        to_time(self.now_millis())
    }

    /// Now, as stored.
    pub fn now_millis(&self) -> Millis {
        match &self.manual {
            Some(manual) => manual.now_millis(),
            None => Utc::now().timestamp_millis(),
        }
    }
}

impl From<ManualClock> for Clock {
    fn from(manual: ManualClock) -> Clock {
        Clock {
            manual: Some(manual),
        }
    }
}

/// A clock that stands still until [`ManualClock::advance`] moves it. Clones share the
/// time, so a test keeps one and hands another to the server (and to a second replica).
#[derive(Debug, Clone)]
pub struct ManualClock {
    millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn starting_at(start: DateTime<Utc>) -> ManualClock {
        ManualClock {
            millis: Arc::new(AtomicI64::new(start.timestamp_millis())),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        to_time(self.now_millis())
    }

    pub fn now_millis(&self) -> Millis {
        self.millis.load(Ordering::SeqCst)
    }

    /// Moves the time forward by `by` (to the millisecond, saturating).
    pub fn advance(&self, by: Duration) {
        let step = Millis::try_from(by.as_millis()).unwrap_or(Millis::MAX);
        let _ = self
            .millis
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(step))
            });
    }
}

/// A stored time as the wire's RFC 3339 time.
pub fn to_time(millis: Millis) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or_default()
}

/// Seconds as milliseconds, saturating (configured seconds are never near the limit).
pub fn secs(seconds: u64) -> Millis {
    i64::try_from(seconds)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_clones_share_the_time() {
        let start = to_time(1_700_000_000_000);
        let manual = ManualClock::starting_at(start);
        let clock = Clock::from(manual.clone());
        assert_eq!(clock.now(), start);
        manual.advance(Duration::from_millis(1500));
        assert_eq!(clock.now_millis(), 1_700_000_001_500);
        assert_eq!(manual.now(), clock.now());
    }

    #[test]
    fn the_system_clock_is_near_the_wall_clock() {
        let wall = Utc::now().timestamp_millis();
        assert!((Clock::system().now_millis() - wall).abs() < 60_000);
    }
}
