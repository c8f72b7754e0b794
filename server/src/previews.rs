//! Previews: the bytes of a held evidence file its owner asked to look at
//! (`POST /api/jobs/{id}/evidence/{evidenceId}/preview`), kept for a short look only.
//!
//! With Redis a preview is one `SET … EX` (every replica serves it, Redis forgets it); in
//! process it is kept in memory, at most [`MEMORY_BYTES`] in all, the entries closest to
//! their end going first, and expired ones are dropped as new ones come.
//!
//! **Invariant:** a preview is never written to the blob store or the database; it lives
//! at most [`PREVIEW_TTL_SECS`] and is at most [`MAX_PREVIEW_BYTES`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use actix_web::web::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_protocol::evidence::{MAX_PREVIEW_BYTES, PREVIEW_TTL_SECS};
use tether_protocol::{AccountId, JobId};

use crate::clock::Clock;
use crate::error::ApiError;
use crate::relay::Hub;

/// Most bytes of previews one replica keeps in memory (without Redis).
pub const MEMORY_BYTES: u64 = 160_000_000;

/// Whose preview: one file of one job of one account.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreviewKey {
    pub account_id: AccountId,
    pub job_id: JobId,
    pub evidence_id: String,
}

impl PreviewKey {
    fn redis_key(&self) -> String {
        format!(
            "tether:preview:{}:{}:{}",
            self.account_id, self.job_id, self.evidence_id
        )
    }
}

/// A kept preview: the bytes and their sniffed type.
#[derive(Debug, Clone)]
pub struct Preview {
    pub bytes: Bytes,
    pub mime: String,
    pub expires_at: DateTime<Utc>,
}

/// What goes before the bytes in Redis, on one line.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    mime: String,
    expires_at: DateTime<Utc>,
}

/// The previews of this replica (or, with Redis, of all of them); cheap to clone.
#[derive(Clone)]
pub struct Previews {
    hub: Hub,
    clock: Clock,
    /// A std mutex: it is never held across an await.
    memory: Arc<Mutex<HashMap<PreviewKey, Preview>>>,
}

impl Previews {
    pub fn new(hub: Hub, clock: Clock) -> Previews {
        Previews {
            hub,
            clock,
            memory: Arc::default(),
        }
    }

    /// When a preview kept now expires.
    pub fn expiry(&self) -> DateTime<Utc> {
        self.clock.now() + chrono::Duration::seconds(PREVIEW_TTL_SECS.cast_signed())
    }

    /// Keeps `bytes` of type `mime` under `key` until `expires_at` (replacing an earlier
    /// preview of the same file).
    ///
    /// # Errors
    /// 413 over [`MAX_PREVIEW_BYTES`]; 503 `unavailable` when Redis cannot be reached.
    pub async fn keep(&self, key: &PreviewKey, preview: Preview) -> Result<(), ApiError> {
        if preview.bytes.len() as u64 > MAX_PREVIEW_BYTES {
            return Err(too_large());
        }
        let header = serde_json::to_vec(&Header {
            mime: preview.mime.clone(),
            expires_at: preview.expires_at,
        })?;
        let mut value = Vec::with_capacity(header.len() + 1 + preview.bytes.len());
        value.extend_from_slice(&header);
        value.push(b'\n');
        value.extend_from_slice(&preview.bytes);
        let command = redis::cmd("SET")
            .arg(key.redis_key())
            .arg(value)
            .arg("EX")
            .arg(PREVIEW_TTL_SECS)
            .to_owned();
        match self.hub.redis_query::<()>(&command).await {
            Some(result) => result,
            None => {
                self.keep_in_memory(key.clone(), preview);
                Ok(())
            }
        }
    }

    fn keep_in_memory(&self, key: PreviewKey, preview: Preview) {
        let now = self.clock.now();
        let mut memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        memory.retain(|kept, entry| entry.expires_at > now && *kept != key);
        let mut total: u64 = memory.values().map(|entry| entry.bytes.len() as u64).sum();
        while total + preview.bytes.len() as u64 > MEMORY_BYTES {
            let soonest = memory
                .iter()
                .min_by_key(|(_, entry)| entry.expires_at)
                .map(|(kept, _)| kept.clone());
            let Some(soonest) = soonest else { break };
            if let Some(dropped) = memory.remove(&soonest) {
                total -= dropped.bytes.len() as u64;
            }
        }
        memory.insert(key, preview);
    }

    /// The preview kept under `key`, unless it expired.
    ///
    /// # Errors
    /// 503 `unavailable` when Redis cannot be reached.
    pub async fn get(&self, key: &PreviewKey) -> Result<Option<Preview>, ApiError> {
        let command = redis::cmd("GET").arg(key.redis_key()).to_owned();
        let Some(result) = self.hub.redis_query::<Option<Vec<u8>>>(&command).await else {
            let now = self.clock.now();
            let memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
            return Ok(memory
                .get(key)
                .filter(|entry| entry.expires_at > now)
                .cloned());
        };
        Ok(result?.and_then(|value| decode(&value)))
    }
}

/// The header line, then the bytes; `None` for a value this module did not write.
fn decode(value: &[u8]) -> Option<Preview> {
    let split = value.iter().position(|b| *b == b'\n')?;
    let header: Header = serde_json::from_slice(&value[..split]).ok()?;
    Some(Preview {
        bytes: Bytes::copy_from_slice(&value[split + 1..]),
        mime: header.mime,
        expires_at: header.expires_at,
    })
}

/// 413 for a preview over [`MAX_PREVIEW_BYTES`].
pub fn too_large() -> ApiError {
    ApiError::new(
        tether_protocol::Code::PayloadTooLarge,
        format!("A preview is at most {MAX_PREVIEW_BYTES} bytes; release the file instead."),
    )
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn key(evidence_id: &str) -> PreviewKey {
        PreviewKey {
            account_id: AccountId::generate(),
            job_id: JobId::generate(),
            evidence_id: evidence_id.to_owned(),
        }
    }

    #[tokio::test]
    async fn a_preview_is_served_until_it_expires_and_memory_stays_bounded() {
        let clock = ManualClock::starting_at(Utc::now());
        let previews = Previews::new(Hub::in_process(), clock.clone().into());
        let first = key("a");
        let preview = |size: u64| Preview {
            bytes: Bytes::from(vec![1_u8; usize::try_from(size).expect("fits")]),
            mime: "image/png".to_owned(),
            expires_at: previews.expiry(),
        };
        previews.keep(&first, preview(3)).await.expect("kept");
        assert_eq!(
            previews
                .get(&first)
                .await
                .expect("read")
                .map(|p| p.bytes.len()),
            Some(3)
        );
        // Filling memory drops the oldest first.
        for n in 0..(MEMORY_BYTES / MAX_PREVIEW_BYTES) {
            clock.advance(std::time::Duration::from_secs(1));
            let other = key(&format!("b{n}"));
            previews
                .keep(&other, preview(MAX_PREVIEW_BYTES))
                .await
                .expect("kept");
        }
        assert!(previews.get(&first).await.expect("read").is_none());
        let total: u64 = previews
            .memory
            .lock()
            .expect("lock")
            .values()
            .map(|entry| entry.bytes.len() as u64)
            .sum();
        assert!(total <= MEMORY_BYTES);
        let last = key("c");
        previews.keep(&last, preview(5)).await.expect("kept");
        clock.advance(std::time::Duration::from_secs(PREVIEW_TTL_SECS));
        assert!(previews.get(&last).await.expect("read").is_none());
        assert!(previews
            .keep(&last, preview(MAX_PREVIEW_BYTES + 1))
            .await
            .is_err());
    }
}
