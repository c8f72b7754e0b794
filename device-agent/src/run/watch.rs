//! Taps on running jobs' output, for the owner's console to watch (read-only).
//!
//! Each run opens a [`Tap`] on its job while it reports output; the run's reporter feeds it
//! every line it sends to the server (after saved secret values were hidden), ended with
//! `\r\n` for a terminal. A watcher [`Taps::subscribe`]s by job id and gets the lines from
//! then on; nothing of a watcher ever reaches the run (there is no way to type into a job).
//!
//! - Cheap when nobody watches: a line is copied only while a receiver exists.
//! - Bounded: each tap keeps at most [`TAP_BACKLOG`] chunks for a slow watcher, who then
//!   misses the oldest (told as `Lagged` by the broadcast channel), never slowing the run.
//! - A tap closes when its run's reporter ends: the watcher's receiver then ends too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tether_protocol::JobId;
use tokio::sync::broadcast;

/// Chunks a tap keeps for a watcher that has not read them yet.
pub const TAP_BACKLOG: usize = 1024;

/// The taps of the runs of one agent process, by job id.
#[derive(Debug, Default)]
pub struct Taps {
    /// A std mutex: held only to insert, look up or remove.
    open: Mutex<HashMap<JobId, broadcast::Sender<Arc<[u8]>>>>,
}

impl Taps {
    /// Opens the tap of `job_id`'s output (replacing an older one of the same job).
    pub fn open(self: &Arc<Self>, job_id: &JobId) -> Tap {
        let (sender, _) = broadcast::channel(TAP_BACKLOG);
        lock(&self.open).insert(job_id.clone(), sender.clone());
        Tap {
            taps: self.clone(),
            job_id: job_id.clone(),
            sender,
        }
    }

    /// The output of `job_id` from now on; `None` when it is not running here.
    pub fn subscribe(&self, job_id: &JobId) -> Option<broadcast::Receiver<Arc<[u8]>>> {
        lock(&self.open)
            .get(job_id)
            .map(broadcast::Sender::subscribe)
    }

    /// Whether `job_id` has an open tap (it is running here).
    pub fn is_open(&self, job_id: &JobId) -> bool {
        lock(&self.open).contains_key(job_id)
    }
}

/// One run's end of its tap; closed when dropped.
#[derive(Debug)]
pub struct Tap {
    taps: Arc<Taps>,
    job_id: JobId,
    sender: broadcast::Sender<Arc<[u8]>>,
}

impl Tap {
    /// Feeds one output line to whoever watches (nothing is copied when nobody does).
    pub fn line(&self, line: &str) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let mut bytes = Vec::with_capacity(line.len() + 2);
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        let _ = self.sender.send(bytes.into());
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let mut open = lock(&self.taps.open);
        if open
            .get(&self.job_id)
            .is_some_and(|sender| sender.same_channel(&self.sender))
        {
            open.remove(&self.job_id);
        }
    }
}

/// A poisoned lock only means a task panicked while holding it; the map stays valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str) -> JobId {
        JobId::parse(id).unwrap_or_else(|err| panic!("{err}"))
    }

    #[tokio::test]
    async fn a_watcher_sees_lines_from_then_on_and_the_end() {
        let taps = Arc::new(Taps::default());
        assert!(taps.subscribe(&job("job1")).is_none());
        let tap = taps.open(&job("job1"));
        tap.line("before anyone watches");
        let mut watcher = taps
            .subscribe(&job("job1"))
            .unwrap_or_else(|| panic!("the tap is open"));
        tap.line("hello");
        assert_eq!(
            watcher.recv().await.ok().as_deref(),
            Some(&b"hello\r\n"[..])
        );
        drop(tap);
        assert!(!taps.is_open(&job("job1")));
        assert!(matches!(
            watcher.recv().await,
            Err(broadcast::error::RecvError::Closed)
        ));
    }

    #[test]
    fn an_older_tap_of_the_same_job_does_not_close_the_newer() {
        let taps = Arc::new(Taps::default());
        let old = taps.open(&job("job2"));
        let new = taps.open(&job("job2"));
        drop(old);
        assert!(taps.is_open(&job("job2")));
        drop(new);
        assert!(!taps.is_open(&job("job2")));
    }
}
