//! Pipes and tickets: the hub's parts for two-way streams between a browser and a device
//! whose ends may be held by different replicas (the owner's console).
//!
//! - A **pipe** is a named one-way queue read on one replica. [`Hub::open_pipe`] registers
//!   its reader (with Redis: subscribes `tether:pipe:{name}` before it returns);
//!   [`Hub::send_pipe`] hands it a text from any replica and says whether a reader took it.
//!   A reader that falls [`PIPE_BUFFER`] messages behind loses the next ones: the console's
//!   numbered channel sees the gap and ends the session, so nothing is silently lost.
//! - A **ticket** is a short-lived value under a key, taken once ([`Hub::put_ticket`],
//!   [`Hub::take_ticket`]): `SET … NX EX` and `GETDEL` with Redis, a map in process.
//!
//! What a pipe carries is opaque here.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::{pipe_channel as channel, Bus, Command, Hub, KEY_PREFIX, SUBSCRIBE_TIMEOUT};
use crate::error::ApiError;

/// Messages a pipe's reader may fall behind by.
pub const PIPE_BUFFER: usize = 1024;
/// The longest pipe name or ticket key, in bytes.
const MAX_NAME_BYTES: usize = 100;

/// The reading end of a pipe on this replica. Dropping it closes the pipe here (and its
/// Redis subscription).
pub struct Pipe {
    hub: Hub,
    name: String,
    number: u64,
    messages: mpsc::Receiver<String>,
}

impl Pipe {
    /// The next message; `None` once the pipe was replaced by another reader of its name.
    pub async fn next(&mut self) -> Option<String> {
        self.messages.recv().await
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let mut local = self.hub.local();
        if local
            .pipes
            .get(&self.name)
            .is_some_and(|(number, _)| *number == self.number)
        {
            local.pipes.remove(&self.name);
            if let Bus::Redis(bus) = &self.hub.inner.bus {
                let _ = bus.commands.send(Command::Unsubscribe(channel(&self.name)));
            }
        }
    }
}

fn ticket_key(key: &str) -> String {
    format!("{KEY_PREFIX}ticket:{key}")
}

fn bad_name() -> ApiError {
    ApiError::internal(&"a pipe name or ticket key too long")
}

impl Hub {
    /// Registers the reader of pipe `name` on this replica (replacing an earlier one).
    ///
    /// # Errors
    /// 503 `unavailable` when Redis does not confirm the subscription in time.
    pub async fn open_pipe(&self, name: &str) -> Result<Pipe, ApiError> {
        if name.len() > MAX_NAME_BYTES {
            return Err(bad_name());
        }
        let (sender, messages) = mpsc::channel(PIPE_BUFFER);
        let (number, subscribed) = {
            let mut local = self.local();
            local.next_stream += 1;
            let number = local.next_stream;
            let first = local
                .pipes
                .insert(name.to_owned(), (number, sender))
                .is_none();
            let subscribed = match &self.inner.bus {
                Bus::Redis(bus) if first => {
                    let (ack, acked) = oneshot::channel();
                    let command = Command::Subscribe(channel(name), ack);
                    // Sent under the lock, so subscribes and unsubscribes keep their order.
                    bus.commands.send(command).ok().map(|()| acked)
                }
                _ => None,
            };
            (number, subscribed)
        };
        let pipe = Pipe {
            hub: self.clone(),
            name: name.to_owned(),
            number,
            messages,
        };
        if let Some(acked) = subscribed {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, acked).await {
                Ok(Ok(true)) => {}
                _ => {
                    return Err(ApiError::new(
                        tether_protocol::Code::Unavailable,
                        "The relay service is unavailable; try again.",
                    ))
                }
            }
        }
        Ok(pipe)
    }

    /// Hands `text` to the reader of pipe `name`, on any replica; says whether one took it.
    ///
    /// # Errors
    /// 503 `unavailable` when Redis cannot be reached.
    pub async fn send_pipe(&self, name: &str, text: String) -> Result<bool, ApiError> {
        match &self.inner.bus {
            Bus::InProcess => Ok(self.deliver_to_pipe_text(name, text)),
            Bus::Redis(bus) => {
                let receivers: i64 = bus
                    .query(redis::cmd("PUBLISH").arg(channel(name)).arg(text))
                    .await?;
                Ok(receivers > 0)
            }
        }
    }

    /// Hands a message published on Redis to this replica's reader of pipe `name`.
    pub(super) fn deliver_to_pipe(&self, name: &str, payload: &[u8]) {
        match std::str::from_utf8(payload) {
            Ok(text) => {
                self.deliver_to_pipe_text(name, text.to_owned());
            }
            Err(_) => tracing::warn!("a pipe message that is not text on Redis"),
        }
    }

    fn deliver_to_pipe_text(&self, name: &str, text: String) -> bool {
        let local = self.local();
        let Some((_, sender)) = local.pipes.get(name) else {
            return false;
        };
        match sender.try_send(text) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(pipe = name, "pipe reader behind; message dropped");
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Keeps `value` under `key` for `ttl`, unless the key is taken.
    ///
    /// # Errors
    /// 500 when the key exists (ids are random, so it never does); 503 `unavailable` when
    /// Redis cannot be reached.
    pub async fn put_ticket(
        &self,
        key: &str,
        value: String,
        ttl: Duration,
    ) -> Result<(), ApiError> {
        if key.len() > MAX_NAME_BYTES {
            return Err(bad_name());
        }
        match &self.inner.bus {
            Bus::InProcess => {
                let mut local = self.local();
                let now = Instant::now();
                local.tickets.retain(|_, (_, until)| *until > now);
                if local.tickets.contains_key(key) {
                    return Err(ApiError::internal(&"ticket key collision"));
                }
                local.tickets.insert(key.to_owned(), (value, now + ttl));
                Ok(())
            }
            Bus::Redis(bus) => {
                let set: Option<String> = bus
                    .query(
                        redis::cmd("SET")
                            .arg(ticket_key(key))
                            .arg(value)
                            .arg("NX")
                            .arg("PX")
                            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)),
                    )
                    .await?;
                set.map(drop)
                    .ok_or_else(|| ApiError::internal(&"ticket key collision"))
            }
        }
    }

    /// Takes the value under `key` once; `None` when there is none (never put, taken, or
    /// expired).
    ///
    /// # Errors
    /// 503 `unavailable` when Redis cannot be reached.
    pub async fn take_ticket(&self, key: &str) -> Result<Option<String>, ApiError> {
        if key.len() > MAX_NAME_BYTES {
            return Ok(None);
        }
        match &self.inner.bus {
            Bus::InProcess => {
                let mut local = self.local();
                let now = Instant::now();
                Ok(local
                    .tickets
                    .remove(key)
                    .filter(|(_, until)| *until > now)
                    .map(|(value, _)| value))
            }
            Bus::Redis(bus) => bus.query(redis::cmd("GETDEL").arg(ticket_key(key))).await,
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pipe_carries_texts_to_its_reader_until_it_is_dropped() {
        let hub = Hub::in_process();
        let mut pipe = hub.open_pipe("con_1:b").await.expect("opened");
        assert!(hub.send_pipe("con_1:b", "one".into()).await.expect("sent"));
        assert!(!hub
            .send_pipe("con_1:d", "nobody".into())
            .await
            .expect("sent"));
        assert_eq!(pipe.next().await.as_deref(), Some("one"));
        drop(pipe);
        assert!(!hub.send_pipe("con_1:b", "late".into()).await.expect("sent"));
    }

    #[tokio::test]
    async fn a_ticket_is_taken_once() {
        let hub = Hub::in_process();
        hub.put_ticket("con_1", "v".into(), Duration::from_secs(5))
            .await
            .expect("put");
        assert!(hub
            .put_ticket("con_1", "w".into(), Duration::from_secs(5))
            .await
            .is_err());
        assert_eq!(
            hub.take_ticket("con_1").await.expect("taken").as_deref(),
            Some("v")
        );
        assert_eq!(hub.take_ticket("con_1").await.expect("taken"), None);
        hub.put_ticket("con_2", "v".into(), Duration::ZERO)
            .await
            .expect("put");
        assert_eq!(hub.take_ticket("con_2").await.expect("taken"), None);
    }
}
