//! Passwords: the rule a new one must pass, and the bounded queue argon2id runs in.
//!
//! Each argon2id hash or check takes 19 MiB and a core for tens of milliseconds, so they run
//! off the async threads, at most one per hashing slot (one per core) at a time, behind a
//! queue of [`crate::config::PASSWORD_QUEUE_PER_SLOT`] waiting places per slot. A request that finds every place
//! taken is answered 503 `unavailable` with `Retry-After` at once, instead of piling up: a
//! flood of sign-ins costs a bounded amount of CPU and memory, and the queue it leaves
//! behind drains in well under a second.
//!
//! The rule: 8 to 1024 characters, and hard to guess. zxcvbn (Dropbox's estimator: lists of
//! common passwords, words and names, sequences, repeats, keyboard walks, dates, and the
//! person's own email and name) must rate it [`MIN_STRENGTH`] or better, about 10^8
//! guesses. `password`, `12345678` and eight spaces rate 0.

use std::sync::Arc;

use tether_protocol::Code;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// Passwords shorter than this are refused.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longer passwords are refused: argon2 on megabytes is a denial of service.
pub const MAX_PASSWORD_CHARS: usize = 1024;
/// The zxcvbn score (0 to 4) a new password must reach: 3 is "safely unguessable", at least
/// about 10^8 guesses.
pub const MIN_STRENGTH: u8 = 3;
/// Characters of a password zxcvbn judges. Its matching grows quickly with length (a
/// hostile 100-character password took 0.3 s), and 64 strong characters are strong.
const JUDGED_CHARS: usize = 64;
/// `Retry-After` when the queue is full: it drains in well under a second.
const FULL_RETRY_SECS: u64 = 1;

/// The queue argon2id runs in: `slots` at once, `waiting` more may wait.
pub struct PasswordQueue {
    slots: Arc<Semaphore>,
    /// Running plus waiting. With none left, [`PasswordQueue::admit`] refuses.
    places: Arc<Semaphore>,
}

/// A place in the queue, taken before any other work of the request, so a request that
/// would be refused for a full queue has changed nothing yet.
pub struct Ticket {
    place: OwnedSemaphorePermit,
    slots: Arc<Semaphore>,
}

impl PasswordQueue {
    pub fn new(slots: usize, waiting: usize) -> PasswordQueue {
        let slots = slots.max(1);
        PasswordQueue {
            slots: Arc::new(Semaphore::new(slots)),
            places: Arc::new(Semaphore::new(slots.saturating_add(waiting))),
        }
    }

    /// Takes a place in the queue.
    ///
    /// # Errors
    /// 503 `unavailable` with `Retry-After` when every place is taken.
    pub fn admit(&self) -> Result<Ticket, ApiError> {
        let place = Arc::clone(&self.places).try_acquire_owned().map_err(|_| {
            tracing::warn!("password hashing queue full");
            ApiError::new(
                Code::Unavailable,
                "The server is busy checking passwords; try again in a second.",
            )
            .with_retry_after(FULL_RETRY_SECS)
        })?;
        Ok(Ticket {
            place,
            slots: Arc::clone(&self.slots),
        })
    }
}

impl Ticket {
    /// Runs `work` on a blocking thread once a slot is free. The slot and the place are
    /// held until `work` returns, even if the request is dropped meanwhile.
    ///
    /// # Errors
    /// `internal` if the blocking task panicked.
    pub async fn run<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let slot = self
            .slots
            .acquire_owned()
            .await
            .map_err(|error| ApiError::internal(&error))?;
        let place = self.place;
        tokio::task::spawn_blocking(move || {
            let _held = (slot, place);
            work()
        })
        .await
        .map_err(|error| ApiError::internal(&error))
    }
}

/// Checks a new password's length (in characters); `field` is what the request calls it.
///
/// # Errors
/// 422 naming `field`.
pub fn check_length(field: &str, password: &str) -> Result<(), ApiError> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_CHARS {
        return Err(ApiError::invalid_field(
            field,
            "must be at least 8 characters.",
        ));
    }
    if chars > MAX_PASSWORD_CHARS {
        return Err(ApiError::invalid_field(
            field,
            "must be at most 1024 characters.",
        ));
    }
    Ok(())
}

/// Refuses a password that is easy to guess, saying why. `personal` are the person's own
/// words (email, name), which make a password weak when it is built from them. CPU work of
/// up to ~15 ms (and ~30 ms the first time, building the dictionaries): call it from a
/// blocking thread, as [`Ticket::run`] does. `field` is what the request calls it.
///
/// # Errors
/// 422 naming `field`, with zxcvbn's warning and suggestion.
pub fn check_strength(field: &str, password: &str, personal: &[&str]) -> Result<(), ApiError> {
    let judged: String = password.chars().take(JUDGED_CHARS).collect();
    let estimate = zxcvbn::zxcvbn(&judged, personal);
    if u8::from(estimate.score()) >= MIN_STRENGTH {
        return Ok(());
    }
    let mut why = String::from("is too easy to guess.");
    if let Some(feedback) = estimate.feedback() {
        if let Some(warning) = feedback.warning() {
            why.push(' ');
            why.push_str(&warning.to_string());
        }
        if let Some(suggestion) = feedback.suggestions().first() {
            why.push(' ');
            why.push_str(&suggestion.to_string());
        }
    }
    if why.len() == "is too easy to guess.".len() {
        why.push_str(" Add another word or two; uncommon words are better.");
    }
    Err(ApiError::invalid_field(field, &why))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn common_and_trivial_passwords_are_refused_with_a_reason() {
        for weak in [
            "password",
            "12345678",
            "        ",
            "aaaaaaaa",
            "abcdefgh",
            "qwertyuiop",
            "passw0rd!",
        ] {
            let error = check_strength("password", weak, &[]).err().unwrap();
            assert_eq!(error.code(), Code::InvalidField, "{weak:?}");
            assert!(
                error
                    .message()
                    .starts_with("password: is too easy to guess."),
                "{}",
                error.message()
            );
            assert!(
                error.message().len() > "password: is too easy to guess.".len() + 5,
                "{}",
                error.message()
            );
        }
        // Built from the person's own email.
        assert!(
            check_strength("password", "annexample", &["ann@example.com", "ann", "Ann"]).is_err()
        );
    }

    #[test]
    fn passphrases_pass() {
        for strong in [
            "correct horse battery",
            "correct horse",
            "Tr0ub4dor&3",
            "load-test-password",
        ] {
            assert!(
                check_strength("password", strong, &["ann@example.com"]).is_ok(),
                "{strong:?}"
            );
        }
        // Only the first 64 characters are judged, quickly.
        let long: String = "correct horse battery ".repeat(46);
        assert!(check_strength("password", &long, &[]).is_ok());
    }

    #[test]
    fn lengths_are_checked_in_characters() {
        assert!(check_length("password", "seven 7").is_err());
        assert!(check_length("password", "ééééééé").is_err());
        assert!(check_length("password", "eight 88").is_ok());
        assert!(check_length("password", &"x".repeat(MAX_PASSWORD_CHARS)).is_ok());
        assert!(check_length("password", &"x".repeat(MAX_PASSWORD_CHARS + 1)).is_err());
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_with_retry_after() {
        let queue = PasswordQueue::new(1, 1);
        let running = queue.admit().unwrap();
        let waiting = queue.admit().unwrap();
        let refused = queue.admit().err().unwrap();
        assert_eq!(refused.code(), Code::Unavailable);
        assert_eq!(refused.retry_after(), Some(1));
        drop(waiting);
        let again = queue.admit().unwrap();
        assert_eq!(running.run(|| 41 + 1).await.unwrap(), 42);
        assert_eq!(again.run(|| 7).await.unwrap(), 7);
        assert!(queue.admit().is_ok());
    }
}
