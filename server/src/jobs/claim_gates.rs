//! This replica's turn-taking for the claims of one account.
//!
//! When a run of a full account ends, every device of the account with queued work is
//! woken, and all of them claim at once for the one free slot. In the database they would
//! each take a pooled connection, write their job and then wait on the account's lock, only
//! for all but one to roll back; a few such bursts exhaust the pool and stall every request
//! of the replica. Here they wait their turn without a connection, and each looks again,
//! with one read, once the claim before it committed: the losers stop at that read. A
//! claim that finds its gate free goes straight on.
//!
//! The database's account lock still makes the run limit hold across replicas; these gates
//! only keep one replica's claims of an account from piling up on it. An account's claims
//! are few (its run limit bounds them), so taking turns costs nothing measurable.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

use tether_protocol::AccountId;
use tokio::sync::{Mutex, MutexGuard};

/// How many gates accounts share (by hash): two accounts on one gate only take turns.
const GATES: usize = 1024;

/// One fair (first come, first served) gate per hash bucket of accounts.
pub struct ClaimGates {
    gates: Box<[Mutex<()>]>,
}

impl Default for ClaimGates {
    fn default() -> ClaimGates {
        ClaimGates {
            gates: (0..GATES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl ClaimGates {
    /// Waits for the account's turn to claim; the turn lasts as long as the guard. Also
    /// answers whether it had to wait (another claim went first).
    pub async fn enter(&self, account_id: &AccountId) -> (MutexGuard<'_, ()>, bool) {
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(account_id.as_str());
        let index = usize::try_from(hash % GATES as u64).unwrap_or(0);
        let gate = &self.gates[index];
        match gate.try_lock() {
            Ok(turn) => (turn, false),
            Err(_) => (gate.lock().await, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn one_accounts_claims_take_turns_and_another_account_does_not_wait() {
        let gates = ClaimGates::default();
        let ann = AccountId::generate();
        let (turn, waited) = gates.enter(&ann).await;
        assert!(!waited);
        let again = tokio::time::timeout(Duration::from_millis(50), gates.enter(&ann)).await;
        assert!(
            again.is_err(),
            "a second claim of the account got in during the first"
        );
        // Of ten other accounts at least one is on another gate (each shares ann's with
        // odds of 1 in 1,024).
        let free = (0..10).any(|_| gates.enter(&AccountId::generate()).now_or_never().is_some());
        assert!(free, "every other account waited on ann's gate");
        drop(turn);
        let next = tokio::time::timeout(Duration::from_millis(50), gates.enter(&ann)).await;
        assert!(
            next.is_ok_and(|(_, waited)| !waited),
            "the account's next claim did not get its turn"
        );
    }
}
