//! Exponential backoff with full jitter, for calls that must eventually get through.
//!
//! Full jitter (a uniform wait between zero and the exponential bound) spreads a fleet that
//! lost the server at the same moment, so it does not come back in lockstep.

use std::time::Duration;

use rand::Rng;

/// The first bound and the cap of the waits.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    /// Starts at half a second and never waits more than 30 seconds.
    pub fn new() -> Backoff {
        Backoff::with_bounds(Duration::from_millis(500), Duration::from_secs(30))
    }

    pub fn with_bounds(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            attempt: 0,
        }
    }

    /// The bound of the next wait: `min(cap, base * 2^attempt)`.
    pub fn bound(&self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(20)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// How long to wait before the next attempt; each call doubles the bound.
    pub fn next_delay(&mut self) -> Duration {
        let bound = self.bound();
        self.attempt = self.attempt.saturating_add(1);
        let millis = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::thread_rng().gen_range(0..=millis))
    }

    /// Back to the first bound, after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_double_up_to_the_cap_and_waits_stay_below_them() {
        let mut backoff = Backoff::new();
        let mut bounds = Vec::new();
        for _ in 0..10 {
            let bound = backoff.bound();
            let delay = backoff.next_delay();
            assert!(delay <= bound, "{delay:?} > {bound:?}");
            bounds.push(bound.as_millis());
        }
        assert_eq!(
            bounds,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]
        );
        for _ in 0..100 {
            backoff.next_delay();
        }
        assert_eq!(backoff.bound(), Duration::from_secs(30));
        backoff.reset();
        assert_eq!(backoff.bound(), Duration::from_millis(500));
    }
}
