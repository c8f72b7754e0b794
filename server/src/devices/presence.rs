//! Device presence: when each device was last heard from, written in batches.
//!
//! A fleet heartbeats every 30 s, so one database write per heartbeat would make presence
//! the busiest writer of all (and on SQLite the one writer). Only what must be durable at
//! once is written at once: lease extensions, and a capability report that differs from the
//! one this replica last wrote (job creation checks engines and folders against it, and the
//! first seal key is pinned from it). A heartbeat that only says "still here" updates this
//! replica's memory, and `flush` writes every device's latest contact time in one statement
//! per few hundred devices, every `presence_flush_ms`.
//!
//! A single server also remembers which devices it last counted with an empty queue, so an
//! idle fleet's heartbeats read nothing at all, and neither does the claim a device makes
//! after each run when its last claim took the only queued job: jobs are queued only by
//! creation, and the routes that create one call `queue_changed` before they answer. With
//! several replicas a job may be created on another one, so there the count is always read.
//! A single server likewise trusts the report it wrote for an hour rather than a minute: no
//! other replica writes one behind its back.
//!
//! **Invariant:** a contact time reaches the database at most one flush interval late, which
//! is far inside the online window; losing a replica loses at most that interval of contact
//! times, never a lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::clock::Millis;
use crate::error::ApiError;
use crate::store::{on_tx, Store};

/// With other replicas, a report this replica wrote is trusted as the stored one for this
/// long; after it, the next heartbeat writes its report again (another replica may have
/// written a newer one).
const REPORT_TRUSTED_FOR_MS: Millis = 60_000;
/// The only replica writes every report itself, so it trusts the one it wrote until the
/// device sends another; an hour is a last bound. (At 60 s, an idle fleet wrote every
/// device's unchanged report every other heartbeat: 1,700 writes a second for 100,000.)
const REPORT_TRUSTED_ALONE_FOR_MS: Millis = 3_600_000;
/// Devices per flush statement (well under both backends' bind-parameter limits).
const FLUSH_CHUNK: usize = 500;
/// An empty queue is believed for this long without counting again (a last bound: every
/// creation forgets it at once). Well over the heartbeat interval: at 30 s, a heartbeat 30 s
/// after the count found it just expired, and every heartbeat counted again.
const EMPTY_QUEUE_TRUSTED_FOR_MS: Millis = 300_000;

/// This replica's view of device presence. Cheap to clone.
#[derive(Clone, Default)]
pub struct Presence {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// Contact times not yet written, by device id.
    unwritten: HashMap<String, Millis>,
    /// The digest of the report this replica last wrote per device, and when.
    written: HashMap<String, (ReportDigest, Millis)>,
    /// Whether this is the only replica: it then remembers empty queues, and trusts the
    /// reports it wrote longer.
    only_replica: bool,
    /// Devices counted with no queued job, and when.
    empty_queues: HashMap<String, Millis>,
    /// Counts queue changes: a count read before one must not be remembered after it.
    queue_generation: u64,
}

/// SHA-256 of a capability report's JSON.
pub type ReportDigest = [u8; 32];

/// The digest `needs_report` and `wrote_report` compare.
pub fn digest(report_json: &str) -> ReportDigest {
    Sha256::digest(report_json.as_bytes()).into()
}

impl Presence {
    /// `only_replica`: no other replica creates jobs, so empty queues may be remembered.
    pub fn new(only_replica: bool) -> Presence {
        let presence = Presence::default();
        presence.lock().only_replica = only_replica;
        presence
    }

    /// Whether the device was counted with an empty queue recently, with nothing queued for
    /// it since.
    pub fn queue_known_empty(&self, device_id: &str, now: Millis) -> bool {
        self.lock()
            .empty_queues
            .get(device_id)
            .is_some_and(|at| now - at < EMPTY_QUEUE_TRUSTED_FOR_MS)
    }

    /// Taken before counting a device's queue, for [`Presence::counted_queue`].
    pub fn queue_generation(&self) -> u64 {
        self.lock().queue_generation
    }

    /// Remembers a count read since `generation`: an empty queue is kept, unless a job was
    /// queued meanwhile.
    pub fn counted_queue(&self, device_id: &str, queued: i64, generation: u64, now: Millis) {
        let mut inner = self.lock();
        if queued == 0 && inner.only_replica && inner.queue_generation == generation {
            inner.empty_queues.insert(device_id.to_owned(), now);
        } else {
            inner.empty_queues.remove(device_id);
        }
    }

    /// A job was queued for the device: its queue must be counted again.
    pub fn queue_changed(&self, device_id: &str) {
        let mut inner = self.lock();
        inner.queue_generation += 1;
        inner.empty_queues.remove(device_id);
    }

    /// Whether the device's report must be written now: it is not the one this replica
    /// wrote last, or that write is too old to trust.
    pub fn needs_report(&self, device_id: &str, report: &ReportDigest, now: Millis) -> bool {
        let inner = self.lock();
        let trusted_for = if inner.only_replica {
            REPORT_TRUSTED_ALONE_FOR_MS
        } else {
            REPORT_TRUSTED_FOR_MS
        };
        match inner.written.get(device_id) {
            Some((written, at)) => written != report || now - at >= trusted_for,
            None => true,
        }
    }

    /// Remembers a report (with its contact time) written in a committed transaction.
    pub fn wrote_report(&self, device_id: &str, report: ReportDigest, now: Millis) {
        let mut inner = self.lock();
        inner.written.insert(device_id.to_owned(), (report, now));
        // The written contact time is at least as new as anything queued before it.
        if inner.unwritten.get(device_id).is_some_and(|at| *at <= now) {
            inner.unwritten.remove(device_id);
        }
    }

    /// Queues a contact time for the next flush.
    pub fn saw(&self, device_id: &str, now: Millis) {
        let mut inner = self.lock();
        let at = inner.unwritten.entry(device_id.to_owned()).or_insert(now);
        *at = (*at).max(now);
    }

    /// Forgets what this replica knows of a device (after revocation or re-pairing), so its
    /// next report is written.
    pub fn forget(&self, device_id: &str) {
        let mut inner = self.lock();
        inner.written.remove(device_id);
        inner.unwritten.remove(device_id);
        inner.empty_queues.remove(device_id);
    }

    /// Contact times queued and not yet written (for metrics and tests).
    pub fn unwritten(&self) -> usize {
        self.lock().unwritten.len()
    }

    /// Writes every queued contact time. A failed chunk is queued again, so a database
    /// outage delays contact times without losing them.
    ///
    /// # Errors
    /// The first database error; the remaining chunks are queued again.
    pub async fn flush(&self, store: &Store) -> Result<usize, ApiError> {
        let batch: Vec<(String, Millis)> = self.lock().unwritten.drain().collect();
        let mut written = 0;
        let mut chunks = batch.chunks(FLUSH_CHUNK);
        while let Some(chunk) = chunks.next() {
            if let Err(err) = write_contacts(store, chunk).await {
                for (device_id, at) in chunk.iter().chain(chunks.flatten()) {
                    self.saw(device_id, *at);
                }
                return Err(err);
            }
            written += chunk.len();
        }
        Ok(written)
    }

    /// Flushes every `every` until the task is dropped.
    pub async fn run(self, store: Store, every: Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(err) = self.flush(&store).await {
                tracing::warn!("writing contact times failed; retrying: {err}");
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps inconsistent (each change is
        // one insert or remove), so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One statement for a chunk: each device's contact time, never moving one backwards.
async fn write_contacts(store: &Store, chunk: &[(String, Millis)]) -> Result<(), ApiError> {
    // Parameters come in pairs: $1 id, $2 time, $3 id, $4 time, …
    let ids: Vec<String> = (0..chunk.len())
        .map(|i| format!("${}", 2 * i + 1))
        .collect();
    let time_of_id: String = ids
        .iter()
        .enumerate()
        .map(|(i, id)| format!(" WHEN {id} THEN ${}", 2 * i + 2))
        .collect();
    let sql = format!(
        "UPDATE devices SET last_seen_at = CASE id{time_of_id} END WHERE id IN ({}) \
         AND (last_seen_at IS NULL OR last_seen_at < CASE id{time_of_id} END)",
        ids.join(", ")
    );
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| {
        let mut query = sqlx::query(&sql);
        for (device_id, at) in chunk {
            query = query.bind(device_id.as_str()).bind(*at);
        }
        query.execute(conn).await.map(|done| done.rows_affected())
    })?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_written_when_new_changed_or_stale() {
        let presence = Presence::new(false);
        let report = digest(r#"{"engines":[]}"#);
        assert!(presence.needs_report("d1", &report, 1_000));
        presence.wrote_report("d1", report, 1_000);
        assert!(!presence.needs_report("d1", &report, 2_000));
        assert!(presence.needs_report("d1", &digest(r#"{"engines":["x"]}"#), 2_000));
        assert!(presence.needs_report("d1", &report, 1_000 + REPORT_TRUSTED_FOR_MS));
        presence.forget("d1");
        assert!(presence.needs_report("d1", &report, 2_000));
    }

    #[test]
    fn the_only_replica_trusts_the_report_it_wrote_for_longer() {
        let presence = Presence::new(true);
        let report = digest(r#"{"engines":[]}"#);
        presence.wrote_report("d1", report, 1_000);
        assert!(!presence.needs_report("d1", &report, 1_000 + REPORT_TRUSTED_FOR_MS));
        assert!(presence.needs_report("d1", &digest(r#"{"engines":["x"]}"#), 2_000));
        assert!(presence.needs_report("d1", &report, 1_000 + REPORT_TRUSTED_ALONE_FOR_MS));
    }

    #[test]
    fn an_empty_queue_is_remembered_until_a_job_is_queued_and_only_on_a_single_server() {
        let presence = Presence::new(true);
        let generation = presence.queue_generation();
        presence.counted_queue("d1", 0, generation, 1_000);
        assert!(presence.queue_known_empty("d1", 2_000));
        assert!(!presence.queue_known_empty("d1", 1_000 + EMPTY_QUEUE_TRUSTED_FOR_MS));
        presence.queue_changed("d1");
        assert!(!presence.queue_known_empty("d1", 2_000));
        // A count read before a job was queued is not remembered after it.
        let before = presence.queue_generation();
        presence.queue_changed("d2");
        presence.counted_queue("d1", 0, before, 3_000);
        assert!(!presence.queue_known_empty("d1", 3_000));
        presence.counted_queue("d1", 2, presence.queue_generation(), 3_000);
        assert!(!presence.queue_known_empty("d1", 3_000));

        let replica = Presence::new(false);
        replica.counted_queue("d1", 0, replica.queue_generation(), 1_000);
        assert!(!replica.queue_known_empty("d1", 1_000));
    }

    #[test]
    fn contact_times_keep_the_newest_and_a_written_report_supersedes_older_ones() {
        let presence = Presence::new(true);
        presence.saw("d1", 5_000);
        presence.saw("d1", 3_000);
        assert_eq!(presence.lock().unwritten.get("d1"), Some(&5_000));
        presence.wrote_report("d1", digest("{}"), 4_000);
        assert_eq!(
            presence.unwritten(),
            1,
            "an older write keeps the newer contact queued"
        );
        presence.wrote_report("d1", digest("{}"), 6_000);
        assert_eq!(presence.unwritten(), 0);
    }
}
