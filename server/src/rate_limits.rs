//! Rate limits: one token bucket per (bucket, key), in this replica's memory.
//!
//! Each bucket has a burst of N requests refilled at N per period; a request past it is 429
//! `rate_limited` with `Retry-After`. Keys are the device, the account or the client address,
//! as each route chooses. **Each replica limits independently**: behind a load balancer with
//! R replicas a client may get up to R times the rate. That is enough to stop a runaway loop
//! or a guessing script; the limits that must hold globally (the account's concurrent runs,
//! wrong link codes) live in the database.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tether_protocol::Code;

use crate::error::ApiError;

/// Entries kept before full buckets are forgotten.
const MAX_ENTRIES: usize = 50_000;

/// The limited kinds of request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// `POST /api/devices/pair`, per peer address.
    Pairing,
    /// `POST /api/devices/link`, per account.
    Link,
    /// `POST /api/devices/register`, per peer address.
    Register,
    /// `POST /api/devices/self/heartbeat`, per device.
    Heartbeat,
    /// `POST /api/devices/self/jobs/{id}/progress`, per device.
    Progress,
    /// `GET /api/jobs/{id}/tree|file`, per account.
    Files,
    /// `POST /api/devices/self/jobs/{id}/context`, per device.
    Context,
    /// `POST /api/attachments`, per account.
    Uploads,
    /// `POST /api/auth/signup`, per client address.
    Signup,
    /// `POST /api/auth/login`, per client address (the per-email backoff is
    /// `login_failures`, in the database).
    Login,
}

impl Bucket {
    pub const ALL: [Bucket; 10] = [
        Bucket::Pairing,
        Bucket::Link,
        Bucket::Register,
        Bucket::Heartbeat,
        Bucket::Progress,
        Bucket::Files,
        Bucket::Context,
        Bucket::Uploads,
        Bucket::Signup,
        Bucket::Login,
    ];

    /// The name used in `TETHER_RATE_LIMITS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Pairing => "pairing",
            Bucket::Link => "link",
            Bucket::Register => "register",
            Bucket::Heartbeat => "heartbeat",
            Bucket::Progress => "progress",
            Bucket::Files => "files",
            Bucket::Context => "context",
            Bucket::Uploads => "uploads",
            Bucket::Signup => "signup",
            Bucket::Login => "login",
        }
    }
}

/// `burst` requests at once, refilled at `burst` per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub burst: u32,
    pub per: Duration,
}

impl Rate {
    pub const fn per_minute(burst: u32) -> Rate {
        Rate {
            burst,
            per: Duration::from_secs(60),
        }
    }

    pub const fn per_hour(burst: u32) -> Rate {
        Rate {
            burst,
            per: Duration::from_secs(3600),
        }
    }
}

/// Which limits apply. `TETHER_RATE_LIMITS=off` disables them all; a list such as
/// `heartbeat=120/min,files=30/min` changes some (units `s`, `min`, `h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitConfig {
    pub enabled: bool,
    pub pairing: Rate,
    pub link: Rate,
    pub register: Rate,
    pub heartbeat: Rate,
    pub progress: Rate,
    pub files: Rate,
    pub context: Rate,
    pub uploads: Rate,
    pub signup: Rate,
    pub login: Rate,
}

impl RateLimitConfig {
    /// The defaults: generous for one agent's normal pace (a heartbeat every 30 s, a progress
    /// batch every half second per run), tight for guessing. Sign-up and sign-in are per
    /// hour: a burst for a shared address (an office behind one NAT), then one every 3
    /// minutes (sign-up) or every minute (sign-in).
    pub fn defaults() -> RateLimitConfig {
        RateLimitConfig {
            enabled: true,
            pairing: Rate::per_minute(10),
            link: Rate::per_minute(10),
            register: Rate::per_minute(60),
            heartbeat: Rate::per_minute(60),
            progress: Rate::per_minute(600),
            files: Rate::per_minute(60),
            context: Rate::per_minute(60),
            // A phone attaching a job's 20 files and retrying some of them, several times.
            uploads: Rate::per_minute(120),
            signup: Rate::per_hour(20),
            login: Rate::per_hour(60),
        }
    }

    pub fn off() -> RateLimitConfig {
        RateLimitConfig {
            enabled: false,
            ..RateLimitConfig::defaults()
        }
    }

    pub fn rate(&self, bucket: Bucket) -> Rate {
        match bucket {
            Bucket::Pairing => self.pairing,
            Bucket::Link => self.link,
            Bucket::Register => self.register,
            Bucket::Heartbeat => self.heartbeat,
            Bucket::Progress => self.progress,
            Bucket::Files => self.files,
            Bucket::Context => self.context,
            Bucket::Uploads => self.uploads,
            Bucket::Signup => self.signup,
            Bucket::Login => self.login,
        }
    }

    fn rate_mut(&mut self, bucket: Bucket) -> &mut Rate {
        match bucket {
            Bucket::Pairing => &mut self.pairing,
            Bucket::Link => &mut self.link,
            Bucket::Register => &mut self.register,
            Bucket::Heartbeat => &mut self.heartbeat,
            Bucket::Progress => &mut self.progress,
            Bucket::Files => &mut self.files,
            Bucket::Context => &mut self.context,
            Bucket::Uploads => &mut self.uploads,
            Bucket::Signup => &mut self.signup,
            Bucket::Login => &mut self.login,
        }
    }

    /// Parses `off`, `on` (or empty: the defaults) or `name=N/unit,…` over the defaults.
    ///
    /// # Errors
    /// A sentence naming the part that does not parse.
    pub fn parse(spec: &str) -> Result<RateLimitConfig, String> {
        let spec = spec.trim();
        match spec {
            "off" | "false" | "0" => return Ok(RateLimitConfig::off()),
            "" | "on" | "true" | "1" => return Ok(RateLimitConfig::defaults()),
            _ => {}
        }
        let mut config = RateLimitConfig::defaults();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, rate) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected NAME=N/UNIT"))?;
            let bucket = Bucket::ALL
                .into_iter()
                .find(|bucket| bucket.as_str() == name.trim())
                .ok_or_else(|| format!("{name:?}: not a rate-limit bucket"))?;
            let (count, unit) = rate
                .split_once('/')
                .ok_or_else(|| format!("{part:?}: expected NAME=N/UNIT"))?;
            let burst: u32 = count
                .trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{part:?}: N must be a positive number"))?;
            let per = match unit.trim() {
                "s" | "sec" => Duration::from_secs(1),
                "min" | "m" => Duration::from_secs(60),
                "h" | "hour" => Duration::from_secs(3600),
                other => return Err(format!("{other:?}: the unit is s, min or h")),
            };
            *config.rate_mut(bucket) = Rate { burst, per };
        }
        Ok(config)
    }
}

/// The buckets of this replica.
pub struct RateLimits {
    config: RateLimitConfig,
    /// Tokens left and when they were counted, per (bucket, key). A std mutex: held for a
    /// few arithmetic steps, never across an await.
    buckets: Mutex<HashMap<(Bucket, String), (f64, Instant)>>,
}

impl RateLimits {
    pub fn new(config: RateLimitConfig) -> RateLimits {
        RateLimits {
            config,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token from `bucket` for `key`.
    ///
    /// # Errors
    /// 429 `rate_limited` with the seconds until a token is back (`Retry-After`).
    pub fn check(&self, bucket: Bucket, key: &str) -> Result<(), ApiError> {
        if !self.config.enabled {
            return Ok(());
        }
        let rate = self.config.rate(bucket);
        let capacity = f64::from(rate.burst);
        let per_sec = capacity / rate.per.as_secs_f64().max(0.001);
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_ENTRIES {
            // Forget buckets that refilled: they hold nothing a new one would not.
            buckets.retain(|(bucket, _), (tokens, at)| {
                let rate = self.config.rate(*bucket);
                let refill = f64::from(rate.burst) / rate.per.as_secs_f64().max(0.001);
                *tokens + now.duration_since(*at).as_secs_f64() * refill < f64::from(rate.burst)
            });
        }
        let (tokens, at) = buckets
            .entry((bucket, key.to_owned()))
            .or_insert((capacity, now));
        let available = (*tokens + now.duration_since(*at).as_secs_f64() * per_sec).min(capacity);
        *at = now;
        if available >= 1.0 {
            *tokens = available - 1.0;
            return Ok(());
        }
        *tokens = available;
        let wait = ((1.0 - available) / per_sec).ceil().max(1.0);
        // Saturating float-to-int cast: the wait is at most `per`.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let retry_after = wait as u64;
        Err(ApiError::new(
            Code::RateLimited,
            format!(
                "Too many {} requests; try again in {retry_after} s.",
                bucket.as_str()
            ),
        )
        .with_retry_after(retry_after))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_off_defaults_and_lists() {
        assert!(!RateLimitConfig::parse("off").unwrap().enabled);
        assert_eq!(
            RateLimitConfig::parse("").unwrap(),
            RateLimitConfig::defaults()
        );
        let config = RateLimitConfig::parse("heartbeat=5/s, files=2/h").unwrap();
        assert_eq!(
            config.heartbeat,
            Rate {
                burst: 5,
                per: Duration::from_secs(1)
            }
        );
        assert_eq!(config.files.per, Duration::from_secs(3600));
        let config = RateLimitConfig::parse("signup=3/h,login=10/min").unwrap();
        assert_eq!(config.signup, Rate::per_hour(3));
        assert_eq!(config.login, Rate::per_minute(10));
        assert!(RateLimitConfig::parse("naps=1/s").is_err());
        assert!(RateLimitConfig::parse("files=0/s").is_err());
        assert!(RateLimitConfig::parse("files=3/week").is_err());
    }

    #[test]
    fn a_bucket_empties_and_says_when_to_retry() {
        let mut config = RateLimitConfig::defaults();
        config.files = Rate::per_minute(2);
        let limits = RateLimits::new(config);
        assert!(limits.check(Bucket::Files, "a").is_ok());
        assert!(limits.check(Bucket::Files, "a").is_ok());
        let refused = limits.check(Bucket::Files, "a");
        let error = refused.err();
        assert_eq!(error.as_ref().map(ApiError::code), Some(Code::RateLimited));
        let retry = error.and_then(|error| error.retry_after());
        assert!(
            retry.is_some_and(|secs| (1..=30).contains(&secs)),
            "{retry:?}"
        );
        // Another key has its own bucket.
        assert!(limits.check(Bucket::Files, "b").is_ok());
        assert!(RateLimits::new(RateLimitConfig::off())
            .check(Bucket::Files, "a")
            .is_ok());
    }
}
