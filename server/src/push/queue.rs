//! The bounded queue between the requests that cause notifications and the worker that
//! sends them. Putting never waits and never fails: when the queue is full the oldest notice
//! is dropped (and counted), so a slow push service costs late or lost notifications, never
//! memory or a request's time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

/// A bounded first-in, first-out queue for one consumer.
pub struct Queue<T> {
    items: Mutex<VecDeque<T>>,
    /// Wakes the consumer; `notify_one` keeps a permit when nobody waits, so a put between
    /// the consumer's check and its wait is not missed.
    ready: Notify,
    capacity: usize,
    dropped: AtomicU64,
}

impl<T> Queue<T> {
    pub fn new(capacity: usize) -> Queue<T> {
        Queue {
            items: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
        }
    }

    /// Adds `item` at the back; returns `true` when the oldest item was dropped for it.
    pub fn put(&self, item: T) -> bool {
        let dropped = {
            let mut items = self.lock();
            let full = items.len() >= self.capacity;
            if full {
                items.pop_front();
            }
            items.push_back(item);
            full
        };
        if dropped {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.ready.notify_one();
        dropped
    }

    /// The oldest item, waiting for one.
    pub async fn take(&self) -> T {
        loop {
            if let Some(item) = self.lock().pop_front() {
                return item;
            }
            self.ready.notified().await;
        }
    }

    /// Items waiting now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items dropped since the start because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<T>> {
        // A panic while holding the lock cannot leave the deque half-changed.
        self.items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_full_queue_drops_the_oldest_and_counts_it() {
        let queue = Queue::new(2);
        assert!(!queue.put(1));
        assert!(!queue.put(2));
        assert!(queue.put(3));
        assert_eq!(queue.dropped(), 1);
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.take().await, 2);
        assert_eq!(queue.take().await, 3);
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn take_waits_for_a_put() {
        let queue = std::sync::Arc::new(Queue::new(4));
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.take().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        queue.put("hello");
        let taken = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(matches!(taken, Ok(Ok("hello"))));
    }
}
