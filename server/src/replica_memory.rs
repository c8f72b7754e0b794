//! A replica's memory of what it read recently and another request may end: the bearer
//! tokens it checked (device tokens and API tokens), so a heartbeat, claim or script's call
//! does not read the database to learn who is calling; and the accounts it found with no
//! browser that wants to hear of ended jobs, so an ended job reads nothing for them.
//!
//! Entries are kept by key (a token's hash, never the token; an account's id), each under its
//! owner: the device for a device token, the user for an API token, the account itself.
//! Whatever makes an entry untrue — revoking a token, removing or pairing a computer again, a
//! password change, a browser subscribing — forgets its owner here before the change is
//! answered, and through the hub on every other replica (Redis pub/sub). A replica whose
//! Redis subscriber is down stops trusting its memory until it is back, and clears it then,
//! since it may have missed a message. Entries also age out after [`TOKEN_MEMORY`], a last
//! bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tether_protocol::AccountId;

/// How long an entry is believed without asking the database again. Whatever ends it
/// forgets it at once, so this is only a last bound; at a minute, a fleet heartbeating
/// every 30 s read every device's row every other heartbeat.
pub const TOKEN_MEMORY: Duration = Duration::from_secs(300);

/// Entries kept at most; past it the memory starts over (a flood of callers costs reads, not
/// memory). Room for a fleet of 100,000 devices and more, at a few hundred bytes each.
const MAX_ENTRIES: usize = 250_000;

/// What a key resolves to, and whose it is: forgetting an owner forgets all its entries.
pub trait Remembered: Clone {
    fn owner(&self) -> &str;
}

/// An account remembered for itself (its key is its id).
impl Remembered for AccountId {
    fn owner(&self) -> &str {
        self.as_str()
    }
}

pub struct ReplicaMemory<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for ReplicaMemory<T> {
    fn clone(&self) -> Self {
        ReplicaMemory {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<T> {
    entries: Mutex<Entries<T>>,
    /// False while this replica may be missing other replicas' "forget" messages.
    trusted: AtomicBool,
}

struct Entries<T> {
    by_key: HashMap<String, Entry<T>>,
    /// Counts forgets: a check that read the database before one must not be remembered
    /// after it.
    generation: u64,
}

struct Entry<T> {
    known: T,
    checked_at: Instant,
}

impl<T: Remembered> ReplicaMemory<T> {
    /// An empty memory; `trusted` is false for a replica that must first hear from Redis.
    pub fn new(trusted: bool) -> ReplicaMemory<T> {
        ReplicaMemory {
            inner: Arc::new(Inner {
                entries: Mutex::new(Entries {
                    by_key: HashMap::new(),
                    generation: 0,
                }),
                trusted: AtomicBool::new(trusted),
            }),
        }
    }

    /// What `key` (a token's hash, an account's id) resolved to, if read recently.
    pub fn get(&self, key: &str) -> Option<T> {
        if !self.inner.trusted.load(Ordering::Acquire) {
            return None;
        }
        let entries = self.entries();
        let entry = entries.by_key.get(key)?;
        (entry.checked_at.elapsed() < TOKEN_MEMORY).then(|| entry.known.clone())
    }

    /// Taken before reading the database, for [`ReplicaMemory::remember`].
    pub fn generation(&self) -> u64 {
        self.entries().generation
    }

    /// Keeps what the database answered for `key`, unless something was forgotten since
    /// `generation` (the row read may predate that change).
    pub fn remember(&self, key: String, known: T, generation: u64) {
        let mut entries = self.entries();
        if entries.generation != generation {
            return;
        }
        if entries.by_key.len() >= MAX_ENTRIES {
            entries.by_key.clear();
        }
        let checked_at = Instant::now();
        entries.by_key.insert(key, Entry { known, checked_at });
    }

    /// Forgets every entry of `owner`.
    pub fn forget(&self, owner: &str) {
        let mut entries = self.entries();
        entries.generation += 1;
        entries
            .by_key
            .retain(|_, entry| entry.known.owner() != owner);
    }

    /// Trusts the memory again from empty (the Redis subscriber is back), or stops trusting it
    /// (the subscriber was lost).
    pub fn set_trusted(&self, trusted: bool) {
        let mut entries = self.entries();
        entries.generation += 1;
        if trusted {
            entries.by_key.clear();
        }
        self.inner.trusted.store(trusted, Ordering::Release);
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries<T>> {
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Known(String);

    impl Remembered for Known {
        fn owner(&self) -> &str {
            &self.0
        }
    }

    fn known(owner: &str) -> Known {
        Known(owner.to_owned())
    }

    #[test]
    fn remembers_until_the_owner_is_forgotten() {
        let tokens = ReplicaMemory::new(true);
        let generation = tokens.generation();
        tokens.remember("hash-a".into(), known("d1"), generation);
        tokens.remember("hash-b".into(), known("d2"), generation);
        tokens.remember("hash-c".into(), known("d1"), generation);
        assert_eq!(tokens.get("hash-a"), Some(known("d1")));
        tokens.forget("d1");
        assert!(tokens.get("hash-a").is_none());
        assert!(tokens.get("hash-c").is_none());
        assert!(tokens.get("hash-b").is_some());
    }

    #[test]
    fn an_untrusted_memory_answers_nothing_and_starts_over_when_trusted() {
        let tokens = ReplicaMemory::new(false);
        let generation = tokens.generation();
        tokens.remember("hash-a".into(), known("d1"), generation);
        assert!(tokens.get("hash-a").is_none());
        tokens.set_trusted(true);
        assert!(tokens.get("hash-a").is_none(), "cleared when trusted again");
        let generation = tokens.generation();
        tokens.remember("hash-a".into(), known("d1"), generation);
        assert!(tokens.get("hash-a").is_some());
    }

    #[test]
    fn a_check_read_before_a_forget_is_not_remembered() {
        let tokens = ReplicaMemory::new(true);
        let generation = tokens.generation();
        tokens.forget("d1");
        tokens.remember("hash-a".into(), known("d1"), generation);
        assert!(tokens.get("hash-a").is_none());
    }
}
