//! One message to one subscription (RFC 8030 §5): encrypted for the browser, signed for the
//! push service, `POST`ed with `TTL` and `Urgency`, never following a redirect.
//!
//! What the push service answers decides what happens: 2xx notes the delivery; 404 and 410
//! remove the subscription (the browser dropped it); 429, 5xx and transport failures are
//! tried again a little later, at most [`ATTEMPTS`] times in all; any other answer drops
//! the message, logged. Logs name the subscription's id and the push service's origin, never
//! the endpoint.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use reqwest::StatusCode;

use super::encrypt::encrypt;
use super::endpoint::{Endpoint, PublicResolver};
use super::messages::Outgoing;
use super::subscriptions::{self, Target};
use super::vapid::{VapidKey, TOKEN_SECS};
use crate::metrics::Metrics;
use crate::store::Store;

/// Tries per message, the first included.
pub const ATTEMPTS: u32 = 3;
/// A push service that does not accept the connection in this long is down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A whole request, answer included, gives up after this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait before the second try; it doubles after that.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait a `Retry-After` may ask for; past it the message is dropped.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How one delivery ended, for the log and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// 404 or 410: the subscription was removed.
    Gone,
    /// A 4xx other than those: dropped.
    Refused,
    /// 429, 5xx or no answer, every try: dropped.
    Failed,
    /// The endpoint no longer passes the address rules, or the message did not encrypt.
    Skipped,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Delivered => "delivered",
            Delivery::Gone => "gone",
            Delivery::Refused => "refused",
            Delivery::Failed => "failed",
            Delivery::Skipped => "skipped",
        }
    }
}

/// What every send shares: the HTTP client, the VAPID key and the rules in force.
pub struct Sender {
    client: reqwest::Client,
    vapid: VapidKey,
    /// The VAPID `sub` claim.
    subject: Option<String>,
    allow_loopback: bool,
    metrics: Metrics,
}

/// What one try came to.
enum Try {
    Done(Delivery),
    Again(Option<Duration>),
}

impl Sender {
    /// # Errors
    /// When the HTTP client cannot be built (no TLS roots).
    pub fn new(
        vapid: VapidKey,
        subject: Option<String>,
        allow_loopback: bool,
        metrics: Metrics,
    ) -> anyhow::Result<Sender> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve the name itself, past the address check.
            .no_proxy()
            .dns_resolver(Arc::new(PublicResolver))
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(2)
            .user_agent(concat!("tether-server/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Sender {
            client,
            vapid,
            subject,
            allow_loopback,
            metrics,
        })
    }

    pub fn vapid(&self) -> &VapidKey {
        &self.vapid
    }

    /// Sends `outgoing` to `target`, trying again on 429, 5xx and transport failures, and
    /// records the result (delivery time, or the subscription's removal).
    pub async fn deliver(&self, store: &Store, target: &Target, outgoing: &Outgoing) -> Delivery {
        let delivery = self.attempt_all(store, target, outgoing).await;
        self.metrics.record_push(delivery.as_str());
        let recorded = match delivery {
            Delivery::Delivered => subscriptions::delivered(store, &target.id).await,
            Delivery::Gone => subscriptions::gone(store, &target.id).await,
            Delivery::Refused | Delivery::Failed | Delivery::Skipped => Ok(()),
        };
        if let Err(error) = recorded {
            tracing::warn!(subscription_id = %target.id, %error, "recording a push delivery failed");
        }
        delivery
    }

    async fn attempt_all(&self, store: &Store, target: &Target, outgoing: &Outgoing) -> Delivery {
        // Checked again: the rules may have changed since the browser subscribed.
        let Ok(endpoint) = Endpoint::parse(&target.endpoint, self.allow_loopback) else {
            tracing::warn!(subscription_id = %target.id, "push endpoint no longer allowed; skipped");
            return Delivery::Skipped;
        };
        let body = match serde_json::to_vec(&outgoing.message)
            .map_err(|error| error.to_string())
            .and_then(|json| encrypt(&json, &target.keys).map_err(|error| error.to_string()))
        {
            Ok(body) => body,
            Err(error) => {
                tracing::error!(subscription_id = %target.id, %error, "push message not encrypted");
                return Delivery::Skipped;
            }
        };
        let origin = endpoint.origin();
        let expires_at = store.now() / 1000 + TOKEN_SECS;
        let authorization = self
            .vapid
            .authorization(&origin, expires_at, self.subject.as_deref());
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            let wait = match self
                .attempt(&endpoint, &authorization, outgoing, &body)
                .await
            {
                Try::Done(delivery) => {
                    log(target, &origin, delivery, attempt);
                    return delivery;
                }
                Try::Again(asked) => asked.unwrap_or(backoff),
            };
            if attempt == ATTEMPTS || wait > MAX_BACKOFF {
                break;
            }
            tokio::time::sleep(wait).await;
            backoff *= 2;
        }
        log(target, &origin, Delivery::Failed, ATTEMPTS);
        Delivery::Failed
    }

    async fn attempt(
        &self,
        endpoint: &Endpoint,
        authorization: &str,
        outgoing: &Outgoing,
        body: &[u8],
    ) -> Try {
        let sent = self
            .client
            .post(endpoint.url().clone())
            .header(AUTHORIZATION, authorization)
            .header(CONTENT_TYPE, "application/octet-stream")
            .header(CONTENT_ENCODING, "aes128gcm")
            .header("ttl", outgoing.ttl_secs.to_string())
            .header("urgency", outgoing.urgency.as_str())
            .body(body.to_vec())
            .send()
            .await;
        match sent {
            Ok(answer) => judge(answer.status(), retry_after(&answer)),
            // Without the URL: reqwest's error text would carry the endpoint.
            Err(error) => {
                tracing::debug!(
                    timeout = error.is_timeout(),
                    connect = error.is_connect(),
                    "push request failed"
                );
                Try::Again(None)
            }
        }
    }
}

fn judge(status: StatusCode, retry_after: Option<Duration>) -> Try {
    match status.as_u16() {
        200..=299 => Try::Done(Delivery::Delivered),
        404 | 410 => Try::Done(Delivery::Gone),
        429 | 500..=599 => Try::Again(retry_after),
        _ => Try::Done(Delivery::Refused),
    }
}

/// `Retry-After` in seconds (the HTTP-date form is rare from push services; it is ignored).
fn retry_after(answer: &reqwest::Response) -> Option<Duration> {
    let seconds = answer.headers().get(RETRY_AFTER)?.to_str().ok()?;
    seconds.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn log(target: &Target, origin: &str, delivery: Delivery, attempts: u32) {
    match delivery {
        Delivery::Delivered => {
            tracing::debug!(subscription_id = %target.id, %origin, attempts, "push delivered");
        }
        Delivery::Gone => {
            tracing::info!(subscription_id = %target.id, %origin, "push subscription gone; removed");
        }
        Delivery::Refused | Delivery::Failed | Delivery::Skipped => {
            tracing::warn!(subscription_id = %target.id, %origin, attempts, result = delivery.as_str(), "push not delivered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: u16) -> Option<Delivery> {
        match judge(StatusCode::from_u16(status).ok()?, None) {
            Try::Done(delivery) => Some(delivery),
            Try::Again(_) => None,
        }
    }

    #[test]
    fn answers_decide_the_fate_of_a_message() {
        assert_eq!(outcome(201), Some(Delivery::Delivered));
        assert_eq!(outcome(202), Some(Delivery::Delivered));
        assert_eq!(outcome(404), Some(Delivery::Gone));
        assert_eq!(outcome(410), Some(Delivery::Gone));
        for refused in [400, 401, 403, 413] {
            assert_eq!(outcome(refused), Some(Delivery::Refused), "{refused}");
        }
        // A redirect is never followed, and not retried either.
        assert_eq!(outcome(307), Some(Delivery::Refused));
        for again in [429, 500, 502, 503] {
            assert_eq!(outcome(again), None, "{again}");
        }
    }
}
