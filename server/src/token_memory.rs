//! A replica's memory of the bearer tokens it checked recently — device tokens and API
//! tokens — so a heartbeat, claim or script's call does not read the database to learn who
//! is calling.
//!
//! Only tokens that checked out are kept (by their hash, never the token), each under its
//! owner: the device for a device token, the user for an API token. Whatever ends or changes
//! a token — revocation, removal, pairing the computer again, a password change — forgets
//! its owner here before the change is answered, and through the hub on every other replica
//! (Redis pub/sub). A replica whose Redis subscriber is down stops trusting its memory until
//! it is back, and clears it then, since it may have missed a message. Entries also age out
//! after [`TOKEN_MEMORY`], a last bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a checked token is believed without asking the database again. Whatever ends a
/// token forgets it at once, so this is only a last bound; at a minute, a fleet heartbeating
/// every 30 s read every device's row every other heartbeat.
pub const TOKEN_MEMORY: Duration = Duration::from_secs(300);

/// Entries kept at most; past it the memory starts over (a flood of callers costs reads, not
/// memory). Room for a fleet of 100,000 devices and more, at a few hundred bytes each.
const MAX_ENTRIES: usize = 250_000;

/// What a token resolves to, and whose it is: forgetting an owner forgets all its tokens.
pub trait Remembered: Clone {
    fn owner(&self) -> &str;
}

pub struct TokenMemory<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for TokenMemory<T> {
    fn clone(&self) -> Self {
        TokenMemory {
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
    by_hash: HashMap<String, Entry<T>>,
    /// Counts forgets: a check that read the database before one must not be remembered
    /// after it.
    generation: u64,
}

struct Entry<T> {
    known: T,
    checked_at: Instant,
}

impl<T: Remembered> TokenMemory<T> {
    /// An empty memory; `trusted` is false for a replica that must first hear from Redis.
    pub fn new(trusted: bool) -> TokenMemory<T> {
        TokenMemory {
            inner: Arc::new(Inner {
                entries: Mutex::new(Entries {
                    by_hash: HashMap::new(),
                    generation: 0,
                }),
                trusted: AtomicBool::new(trusted),
            }),
        }
    }

    /// What the token hashing to `token_hash` resolved to, if checked recently.
    pub fn get(&self, token_hash: &str) -> Option<T> {
        if !self.inner.trusted.load(Ordering::Acquire) {
            return None;
        }
        let entries = self.entries();
        let entry = entries.by_hash.get(token_hash)?;
        (entry.checked_at.elapsed() < TOKEN_MEMORY).then(|| entry.known.clone())
    }

    /// Taken before reading a token's row, for [`TokenMemory::remember`].
    pub fn generation(&self) -> u64 {
        self.entries().generation
    }

    /// Keeps a token that checked out against the database, unless something was forgotten
    /// since `generation` (the row read may predate that change).
    pub fn remember(&self, token_hash: String, known: T, generation: u64) {
        let mut entries = self.entries();
        if entries.generation != generation {
            return;
        }
        if entries.by_hash.len() >= MAX_ENTRIES {
            entries.by_hash.clear();
        }
        let checked_at = Instant::now();
        entries
            .by_hash
            .insert(token_hash, Entry { known, checked_at });
    }

    /// Forgets every token of `owner`.
    pub fn forget(&self, owner: &str) {
        let mut entries = self.entries();
        entries.generation += 1;
        entries.by_hash.retain(|_, entry| entry.known.owner() != owner);
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
        let tokens = TokenMemory::new(true);
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
        let tokens = TokenMemory::new(false);
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
        let tokens = TokenMemory::new(true);
        let generation = tokens.generation();
        tokens.forget("d1");
        tokens.remember("hash-a".into(), known("d1"), generation);
        assert!(tokens.get("hash-a").is_none());
    }
}
