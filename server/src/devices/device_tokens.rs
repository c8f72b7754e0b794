//! A replica's memory of the device tokens it checked recently, so a heartbeat, claim or
//! progress call does not read the `devices` table to learn who is calling.
//!
//! Only tokens that checked out are kept (by their hash, never the token). Whatever ends a
//! token — revocation, removal, pairing the computer again — forgets its device here before
//! the change is answered, and through the hub on every other replica (Redis pub/sub). A
//! replica whose Redis subscriber is down stops trusting its memory until it is back, and
//! clears it then, since it may have missed a message. Entries also age out after
//! [`TOKEN_MEMORY`], a last bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::devices::DeviceIdentity;

/// How long a checked token is believed without asking the database again. Whatever ends a
/// token forgets it at once, so this is only a last bound; at a minute, a fleet heartbeating
/// every 30 s read every device's row every other heartbeat.
pub const TOKEN_MEMORY: Duration = Duration::from_secs(300);

/// Entries kept at most; past it the memory starts over (a flood of devices costs reads, not
/// memory). Room for a fleet of 100,000 devices and more, at a few hundred bytes each.
const MAX_ENTRIES: usize = 250_000;

#[derive(Clone)]
pub struct DeviceTokens {
    inner: Arc<Inner>,
}

struct Inner {
    entries: Mutex<Entries>,
    /// False while this replica may be missing other replicas' "forget" messages.
    trusted: AtomicBool,
}

#[derive(Default)]
struct Entries {
    by_hash: HashMap<String, Entry>,
    /// Counts forgets: a check that read the database before one must not be remembered
    /// after it.
    generation: u64,
}

struct Entry {
    identity: DeviceIdentity,
    checked_at: Instant,
}

impl DeviceTokens {
    /// An empty memory; `trusted` is false for a replica that must first hear from Redis.
    pub fn new(trusted: bool) -> DeviceTokens {
        DeviceTokens {
            inner: Arc::new(Inner {
                entries: Mutex::new(Entries::default()),
                trusted: AtomicBool::new(trusted),
            }),
        }
    }

    /// The device whose token hashes to `token_hash`, if checked recently.
    pub fn get(&self, token_hash: &str) -> Option<DeviceIdentity> {
        if !self.inner.trusted.load(Ordering::Acquire) {
            return None;
        }
        let entries = self.entries();
        let entry = entries.by_hash.get(token_hash)?;
        (entry.checked_at.elapsed() < TOKEN_MEMORY).then(|| entry.identity.clone())
    }

    /// Taken before reading a token's row, for [`DeviceTokens::remember`].
    pub fn generation(&self) -> u64 {
        self.entries().generation
    }

    /// Keeps a token that checked out against the database, unless something was forgotten
    /// since `generation` (the row read may predate that change).
    pub fn remember(&self, token_hash: String, identity: DeviceIdentity, generation: u64) {
        let mut entries = self.entries();
        if entries.generation != generation {
            return;
        }
        if entries.by_hash.len() >= MAX_ENTRIES {
            entries.by_hash.clear();
        }
        let checked_at = Instant::now();
        entries.by_hash.insert(
            token_hash,
            Entry {
                identity,
                checked_at,
            },
        );
    }

    /// Forgets every token of `device_id` (it was revoked, removed or paired again).
    pub fn forget(&self, device_id: &str) {
        let mut entries = self.entries();
        entries.generation += 1;
        entries
            .by_hash
            .retain(|_, entry| entry.identity.device_id.as_str() != device_id);
    }

    /// Trusts the memory again from empty (the Redis subscriber is back), or stops trusting it
    /// (the subscriber was lost).
    pub fn set_trusted(&self, trusted: bool) {
        let mut entries = self.entries();
        entries.generation += 1;
        if trusted {
            entries.by_hash.clear();
        }
        self.inner.trusted.store(trusted, Ordering::Release);
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::{AccountId, DeviceId};

    fn identity(device_id: &DeviceId) -> DeviceIdentity {
        DeviceIdentity {
            device_id: device_id.clone(),
            account_id: AccountId::generate(),
            name: "laptop".into(),
        }
    }

    #[test]
    fn remembers_until_the_device_is_forgotten() {
        let tokens = DeviceTokens::new(true);
        let device = DeviceId::generate();
        let generation = tokens.generation();
        tokens.remember("hash-a".into(), identity(&device), generation);
        tokens.remember("hash-b".into(), identity(&DeviceId::generate()), generation);
        assert_eq!(
            tokens.get("hash-a").map(|known| known.device_id),
            Some(device.clone())
        );
        tokens.forget(device.as_str());
        assert!(tokens.get("hash-a").is_none());
        assert!(tokens.get("hash-b").is_some());
    }

    #[test]
    fn an_untrusted_memory_answers_nothing_and_starts_over_when_trusted() {
        let tokens = DeviceTokens::new(false);
        let generation = tokens.generation();
        tokens.remember("hash-a".into(), identity(&DeviceId::generate()), generation);
        assert!(tokens.get("hash-a").is_none());
        tokens.set_trusted(true);
        assert!(tokens.get("hash-a").is_none(), "cleared when trusted again");
        let generation = tokens.generation();
        tokens.remember("hash-a".into(), identity(&DeviceId::generate()), generation);
        assert!(tokens.get("hash-a").is_some());
    }

    #[test]
    fn a_check_read_before_a_forget_is_not_remembered() {
        let tokens = DeviceTokens::new(true);
        let device = DeviceId::generate();
        let generation = tokens.generation();
        tokens.forget(device.as_str());
        tokens.remember("hash-a".into(), identity(&device), generation);
        assert!(tokens.get("hash-a").is_none());
    }
}
