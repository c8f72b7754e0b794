//! One idle computer, behaving as `tether-agent run` does with nothing to run.
//!
//! Two loops, as in the agent: the event stream (device-agent/src/remote/events.rs: connect,
//! claim on every connection, answer the server's pings and `ping` frames, ping it every
//! 15 s, reconnect with exponential backoff and full jitter) and the heartbeat
//! (device-agent/src/daemon/mod.rs: at the interval the server asks, with backoff while it
//! cannot be reached, a claim after each answer). The backoff is the agent's own code
//! (device-agent/src/remote/backoff.rs, compiled into this program); the constants below are
//! copied from the files named beside them. HTTP calls share one kept-alive connection,
//! like the agent's client pool: a new one when the server closed the last.
//!
//! The storm starts as a server restart does: every connection is gone at once, the stream
//! had been up long enough to reset its backoff, and the heartbeat's last try failed; each
//! loop tries again after one delay of a fresh backoff (0–500 ms). The agent never gives up;
//! the generator stops counting at its `--give-up-secs`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::backoff::Backoff;
use crate::tally::Tally;
use crate::wire::{self, EventStream, Target};

/// device-agent/src/remote/events.rs: the agent pings an idle stream this often,
const PING_EVERY: Duration = Duration::from_secs(15);
/// takes it as dead after this long without hearing anything,
const SILENCE_LIMIT: Duration = Duration::from_secs(40);
/// resets its backoff after a connection (or attempt) that lasted this long,
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// and gives a handshake this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
/// device-agent/src/remote/client.rs: the HTTP client's connect and whole-request timeouts.
const HTTP_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// device-agent/src/daemon/mod.rs: the heartbeat interval before the server names one, and
/// the bounds the agent keeps the server's to.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);
const MIN_HEARTBEAT: Duration = Duration::from_secs(1);
const MAX_HEARTBEAT: Duration = Duration::from_secs(300);
/// device-agent/src/remote/events.rs `refused`: a 429 without `Retry-After` waits 1 s, a
/// refusal that is neither a 5xx nor a 429 waits 30 s.
const RATE_LIMITED_WAIT: Duration = Duration::from_secs(1);
const REFUSED_WAIT: Duration = Duration::from_secs(30);

const HEARTBEAT: &str = "/api/devices/self/heartbeat";
const CLAIM: &str = "/api/devices/self/claim";

/// One simulated idle computer.
pub struct Agent {
    /// Its index in the whole fleet: picks its source address.
    pub index: usize,
    /// Its index in this generator process's tally.
    pub slot: usize,
    pub token: String,
    /// Its heartbeat's JSON body (capabilities, no running jobs).
    pub heartbeat_body: Vec<u8>,
    pub target: Arc<Target>,
    pub tally: Arc<Tally>,
    /// When every connection went.
    pub storm: Instant,
    /// Tells the HTTP loop to claim now (a connected stream, a `wake` frame).
    pub wake: Notify,
    pub milestones: Mutex<Milestones>,
}

/// When this device's stream first connected and its heartbeat was first answered.
#[derive(Debug, Default)]
pub struct Milestones {
    stream: Option<Instant>,
    heartbeat: Option<Instant>,
}

/// Why a stream (or an attempt at one) ended, and the least wait before the next.
struct Closed {
    reason: String,
    at_least: Duration,
    revoked: bool,
}

impl Closed {
    fn retry(reason: impl Into<String>) -> Closed {
        Closed {
            reason: reason.into(),
            at_least: Duration::ZERO,
            revoked: false,
        }
    }
}

impl Agent {
    /// Runs both loops until the task is aborted (or the device is revoked).
    pub async fn run(self: Arc<Self>) {
        tokio::join!(self.clone().stream_loop(), self.http_loop());
    }

    /// device-agent/src/remote/events.rs `run`.
    async fn stream_loop(self: Arc<Self>) {
        let mut backoff = Backoff::with_bounds(Duration::from_millis(500), Duration::from_secs(30));
        tokio::time::sleep_until(self.storm + backoff.next_delay()).await;
        loop {
            let started = Instant::now();
            let closed = match self.connect().await {
                Ok(stream) => {
                    self.reached(|milestones| &mut milestones.stream);
                    self.wake.notify_one();
                    self.serve(stream).await
                }
                Err(closed) => closed,
            };
            self.tally.failure(&closed.reason);
            if closed.revoked {
                return;
            }
            if started.elapsed() >= STABLE_AFTER {
                backoff.reset();
            }
            tokio::time::sleep(backoff.next_delay().max(closed.at_least)).await;
        }
    }

    async fn connect(&self) -> Result<EventStream, Closed> {
        let opening = self.target.open_stream(self.index, &self.token);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, opening).await {
            Err(_) => Err(Closed::retry("stream: handshake timed out")),
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(tungstenite::Error::Http(response))) => Err(refused(&response)),
            Ok(Err(tungstenite::Error::Io(err))) => {
                Err(Closed::retry(format!("stream: {:?}", err.kind())))
            }
            Ok(Err(err)) => Err(Closed::retry(format!("stream: {err}"))),
        }
    }

    /// device-agent/src/remote/events.rs `serve`: until the stream ends.
    async fn serve(&self, mut stream: EventStream) -> Closed {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        let mut heard_at = Instant::now();
        loop {
            let silence_left = SILENCE_LIMIT.saturating_sub(heard_at.elapsed());
            let message = tokio::select! {
                message = stream.next() => message,
                _ = ping.tick() => {
                    if stream.send(Message::Ping(Vec::new().into())).await.is_err() {
                        return Closed::retry("stream: cannot ping");
                    }
                    continue;
                }
                () = tokio::time::sleep(silence_left) => return Closed::retry("stream: silent"),
            };
            heard_at = Instant::now();
            let message = match message {
                None => return Closed::retry("stream: closed by the server"),
                Some(Err(_)) => return Closed::retry("stream: broken"),
                Some(Ok(message)) => message,
            };
            match message {
                Message::Text(text) => match frame_type(text.as_str()).as_deref() {
                    Some("ping") => {
                        let pong = Message::text(r#"{"type":"pong"}"#);
                        if stream.send(pong).await.is_err() {
                            return Closed::retry("stream: cannot answer");
                        }
                    }
                    Some("wake") => self.wake.notify_one(),
                    Some("device.revoked") => {
                        return Closed {
                            revoked: true,
                            ..Closed::retry("stream: revoked")
                        }
                    }
                    _ => {}
                },
                Message::Ping(_) if stream.flush().await.is_err() => {
                    return Closed::retry("stream: cannot answer a ping");
                }
                Message::Close(_) => return Closed::retry("stream: closed by the server"),
                _ => {}
            }
        }
    }

    /// device-agent/src/daemon/mod.rs `heartbeat_loop`, with the claim loop's calls on the
    /// same kept-alive connection.
    async fn http_loop(self: Arc<Self>) {
        let mut backoff = Backoff::new();
        let mut period = DEFAULT_HEARTBEAT;
        let mut link: Option<TcpStream> = None;
        let mut next_beat = self.storm + backoff.next_delay();
        loop {
            let beat = tokio::select! {
                () = tokio::time::sleep_until(next_beat) => true,
                () = self.wake.notified() => false,
                () = closed_by_server(&mut link) => {
                    link = None;
                    continue;
                }
            };
            if !beat {
                self.claim(&mut link).await;
                continue;
            }
            let delay = match self.heartbeat(&mut link).await {
                Beat::Answered(interval) => {
                    backoff.reset();
                    period = interval.clamp(MIN_HEARTBEAT, MAX_HEARTBEAT);
                    self.claim(&mut link).await;
                    period
                }
                Beat::Revoked => return,
                Beat::Transient(at_least) => backoff.next_delay().min(period).max(at_least),
                Beat::Refused => period,
            };
            next_beat = Instant::now() + delay;
        }
    }

    async fn heartbeat(&self, link: &mut Option<TcpStream>) -> Beat {
        let sent = SystemTime::now();
        let started = Instant::now();
        let answer = match self.call(link, HEARTBEAT, &self.heartbeat_body).await {
            Ok(answer) => answer,
            Err(reason) => {
                self.tally.failure(&format!("heartbeat: {reason}"));
                return Beat::Transient(Duration::ZERO);
            }
        };
        match answer.status {
            200 => {
                self.tally.heartbeat(sent, started.elapsed());
                self.reached(|milestones| &mut milestones.heartbeat);
                let body: Value = serde_json::from_slice(&answer.body).unwrap_or_default();
                let secs = body["intervals"]["heartbeatSecs"].as_u64();
                Beat::Answered(secs.map_or(DEFAULT_HEARTBEAT, Duration::from_secs))
            }
            401 if is_revoked(&answer.body) => {
                self.tally.failure("heartbeat: revoked");
                Beat::Revoked
            }
            status => {
                self.tally.failure(&format!("heartbeat: {status}"));
                if status >= 500 || status == 429 {
                    let at_least = answer.retry_after.unwrap_or(0);
                    Beat::Transient(Duration::from_secs(if status == 429 {
                        at_least
                    } else {
                        0
                    }))
                } else {
                    Beat::Refused
                }
            }
        }
    }

    /// One claim; an idle fleet has nothing queued, so 204. A failed claim is not retried:
    /// the next heartbeat claims again.
    async fn claim(&self, link: &mut Option<TcpStream>) {
        match self.call(link, CLAIM, b"{}").await {
            Ok(answer) if answer.status == 204 || answer.status == 200 => {}
            Ok(answer) => self.tally.failure(&format!("claim: {}", answer.status)),
            Err(reason) => self.tally.failure(&format!("claim: {reason}")),
        }
    }

    /// One call on the kept-alive connection, opening one when there is none. A connection
    /// that failed or that the server closes is dropped.
    async fn call(
        &self,
        link: &mut Option<TcpStream>,
        path: &str,
        body: &[u8],
    ) -> Result<wire::Answer, String> {
        let calling = async {
            let stream = match link {
                Some(stream) => stream,
                None => {
                    let connecting = self.target.connect(self.index);
                    let stream = tokio::time::timeout(HTTP_CONNECT_TIMEOUT, connecting)
                        .await
                        .map_err(|_| "connect timed out".to_owned())?
                        .map_err(|err| format!("{:?}", err.kind()))?;
                    link.insert(stream)
                }
            };
            wire::post(stream, &self.target.host, path, &self.token, body)
                .await
                .map_err(|err| err.to_string())
        };
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, calling)
            .await
            .unwrap_or_else(|_| Err("timed out".to_owned()));
        if !matches!(&answer, Ok(answer) if !answer.closing) {
            *link = None;
        }
        answer
    }

    /// Records a milestone; the second one finishes this device's storm.
    fn reached(&self, milestone: impl FnOnce(&mut Milestones) -> &mut Option<Instant>) {
        let mut milestones = self
            .milestones
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = milestone(&mut milestones);
        if at.is_some() {
            return;
        }
        *at = Some(Instant::now());
        if let (Some(stream), Some(heartbeat)) = (milestones.stream, milestones.heartbeat) {
            let finished = stream.max(heartbeat);
            self.tally
                .finished(self.slot, finished.duration_since(self.storm));
        }
    }
}

/// How one heartbeat went.
enum Beat {
    /// Answered; the server's interval.
    Answered(Duration),
    Revoked,
    /// No answer, a 5xx or a 429 (and its `Retry-After`): retried with backoff.
    Transient(Duration),
    /// Any other refusal: tried again at the interval.
    Refused,
}

/// Resolves when the server closes the kept-alive connection; never when there is none.
async fn closed_by_server(link: &mut Option<TcpStream>) {
    match link {
        Some(stream) => wire::closed_by_server(stream).await,
        None => std::future::pending().await,
    }
}

/// device-agent/src/remote/events.rs `refused`: a handshake answered with an HTTP error.
fn refused(response: &tungstenite::http::Response<Option<Vec<u8>>>) -> Closed {
    let status = response.status().as_u16();
    let body = response.body().as_deref().unwrap_or_default();
    let reason = format!("stream: {status}");
    if status == 401 && is_revoked(body) {
        return Closed {
            revoked: true,
            ..Closed::retry(reason)
        };
    }
    let at_least = match status {
        429 => response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok()?.trim().parse().ok())
            .map_or(RATE_LIMITED_WAIT, Duration::from_secs),
        500.. => Duration::ZERO,
        _ => REFUSED_WAIT,
    };
    Closed {
        at_least,
        ..Closed::retry(reason)
    }
}

fn is_revoked(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|error| error["error"]["code"].as_str() == Some("revoked"))
}

fn frame_type(text: &str) -> Option<String> {
    let frame: Value = serde_json::from_str(text).ok()?;
    frame["type"].as_str().map(str::to_owned)
}
