//! The event stream (`GET /api/devices/self/events`, DESIGN §4): a WebSocket the server uses
//! to wake this computer at once instead of at its next heartbeat.
//!
//! Every frame is a hint. Persisted job and lease state on the server is the truth, and the
//! agent claims on every (re)connect and on every heartbeat anyway, so a lost frame — or a
//! stream that is down for an hour — costs latency, never work. The heartbeat does not
//! depend on the stream: it runs on its own task whatever happens here.
//!
//! The stream reconnects forever with exponential backoff and full jitter (honouring a
//! 429's `Retry-After`), pings the server and reconnects when nothing at all has come back
//! for a while (a half-open connection looks healthy otherwise). A frame of an unknown type
//! is logged and ignored: a newer server must never crash an older agent.
//!
//! When the agent stops, the stream ends with a "going away" close frame: the server takes
//! that as the computer stopping and shows it offline at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tether_protocol::files::FileOp;
use tether_protocol::frames::ServerFrame;
use tether_protocol::{DecisionId, DeliveryId, JobId};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::remote::backoff::Backoff;
use crate::remote::client::{classify, parse_retry_after, DeviceClient, RemoteError};

/// How often the agent pings the server on an idle stream.
pub const PING_EVERY: Duration = Duration::from_secs(15);
/// With nothing received for this long (not even a pong), the connection is taken as dead.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(40);
/// A connection that lasted this long resets the backoff: the next drop reconnects quickly.
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// The handshake must finish within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// On stop, how long the server has to answer the close frame.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the daemon does with the frames.
pub trait EventSink: Send + Sync + 'static {
    /// Work may be queued (a `wake` frame, or a fresh connection): claim now.
    fn wake(&self);
    /// The stream that was connected is lost (it reconnects on its own).
    fn lost(&self) {}
    /// The owner asked to stop this run.
    fn cancel(&self, job_id: &JobId);
    /// The device was revoked: the same path as a 401 `revoked`.
    fn revoked(&self);
    /// The web asks for a listing or a file of a job's folder; answer it (off this task).
    fn file_request(&self, request: FileRequest);
    /// A sealed secret for this computer: open, store and answer it (off this task).
    fn secret_save(&self, delivery: SecretDelivery) {
        tracing::debug!(id = %delivery.id, "ignoring a secret.save frame");
    }
    /// The owner asks to preview, release or discard a file this computer holds; answer it
    /// (off this task).
    fn evidence_request(&self, request: EvidenceRequest) {
        tracing::debug!(id = %request.id, "ignoring an evidence.request frame");
    }
    /// The owner asks to delete a stopped job's engine session; answer it (off this task).
    fn session_delete(&self, request: SessionDelete) {
        tracing::debug!(id = %request.id, "ignoring a session.delete frame");
    }
    /// The owner opened a console session: join or refuse it (off this task).
    fn console_open(&self, session_id: String, enc: String) {
        let _ = enc;
        tracing::debug!(session = %session_id, "ignoring a console.open frame");
    }
    /// A decision of this computer was answered on the web: wake the run waiting on it,
    /// which reads the answer from the server itself.
    fn decision_answered(&self, decision_id: &DecisionId) {
        tracing::debug!(decision = %decision_id, "ignoring a decision.answered frame");
    }
}

/// A `secret.save` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretDelivery {
    pub id: DeliveryId,
    pub name: String,
    pub sealed: serde_json::Value,
}

/// An `evidence.request` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceRequest {
    pub id: String,
    pub job_id: JobId,
    pub evidence_id: String,
    pub action: tether_protocol::evidence::EvidenceAction,
    /// Where the answer goes (single use, bound to this device and the request).
    pub upload_id: String,
    /// How long the server waits for the answer (`timeoutMs`), when it says.
    pub timeout: Option<Duration>,
}

/// A `session.delete` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDelete {
    /// Where the answer goes (single use, bound to this device and the job).
    pub id: String,
    pub job_id: JobId,
    /// How long the server waits for the answer (`timeoutMs`), when it says.
    pub timeout: Option<Duration>,
}

/// A `file.request` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRequest {
    pub id: String,
    pub job_id: JobId,
    pub op: FileOp,
    pub path: String,
    /// How long the server waits for the answer (`timeoutMs`), when it says.
    pub timeout: Option<Duration>,
    /// For a diff: the run's end (`None`, or asked) or the folder now.
    pub against: Option<tether_protocol::changes::DiffAgainst>,
}

/// Why one connection ended.
#[derive(Debug)]
enum Closed {
    /// The server revoked the device (401 `revoked`, or a `device.revoked` frame).
    Revoked,
    /// Try again, not before this wait.
    Retry { at_least: Duration, reason: String },
}

/// Keeps the stream connected until the device is revoked or `stop` turns true; then an open
/// stream is closed with a "going away" frame. With the sender of `stop` gone it runs until
/// the caller aborts the task.
pub async fn run(client: DeviceClient, sink: Arc<dyn EventSink>, mut stop: watch::Receiver<bool>) {
    let mut backoff = Backoff::with_bounds(Duration::from_millis(500), Duration::from_secs(30));
    let mut connected_before = false;
    loop {
        let started = Instant::now();
        let connected = tokio::select! {
            connected = connect(&client) => connected,
            // Not connected yet: nothing to close.
            () = stopping(&mut stop) => return,
        };
        let closed = match connected {
            Err(closed) => closed,
            Ok(mut stream) => {
                tracing::info!("event stream connected");
                connected_before = true;
                // A frame may have been sent while we were away: claim now.
                sink.wake();
                let served = tokio::select! {
                    closed = serve(&mut stream, sink.as_ref()) => Some(closed),
                    () = stopping(&mut stop) => None,
                };
                match served {
                    Some(closed) => closed,
                    None => {
                        close(&mut stream).await;
                        return;
                    }
                }
            }
        };
        match closed {
            Closed::Revoked => {
                sink.revoked();
                return;
            }
            Closed::Retry { at_least, reason } => {
                if started.elapsed() >= STABLE_AFTER {
                    backoff.reset();
                }
                let wait = backoff.next_delay().max(at_least);
                tracing::debug!("event stream: {reason}; reconnecting in {wait:?}");
                if connected_before {
                    tracing::warn!("event stream lost ({reason}); reconnecting");
                    connected_before = false;
                    sink.lost();
                }
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = stopping(&mut stop) => return,
                }
            }
        }
    }
}

/// Resolves once the agent stops: `stop` is true. Never when its sender is gone.
async fn stopping(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|stopping| *stopping).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Ends the stream as a stop: a "going away" close frame, then the server's answer (at most
/// [`CLOSE_TIMEOUT`]), so the server sees the computer stop rather than a broken stream.
async fn close(stream: &mut Stream) {
    let frame = CloseFrame {
        code: CloseCode::Away,
        reason: "the agent stopped".into(),
    };
    let closing = async {
        stream.close(Some(frame)).await?;
        while stream.next().await.transpose()?.is_some() {}
        Ok::<(), tungstenite::Error>(())
    };
    match tokio::time::timeout(CLOSE_TIMEOUT, closing).await {
        Ok(Ok(())) | Ok(Err(tungstenite::Error::ConnectionClosed)) => {
            tracing::info!("event stream closed")
        }
        Ok(Err(err)) => tracing::debug!("event stream: closing: {err}"),
        Err(_) => tracing::debug!("event stream: the server did not answer the close"),
    }
}

type Stream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the stream.
async fn connect(client: &DeviceClient) -> Result<Stream, Closed> {
    let request = match client.events_request() {
        Ok(request) => request,
        Err(err) => {
            return Err(Closed::Retry {
                at_least: Duration::from_secs(60),
                reason: format!("bad server address: {err:#}"),
            })
        }
    };
    let connecting = tokio_tungstenite::connect_async(request);
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Err(_) => Err(retry("the handshake timed out")),
        Ok(Err(tungstenite::Error::Http(response))) => Err(refused(&response)),
        Ok(Err(err)) => Err(retry(format!("cannot connect: {err}"))),
        Ok(Ok((stream, _))) => Ok(stream),
    }
}

/// Serves an open stream until it ends.
async fn serve(stream: &mut Stream, sink: &dyn EventSink) -> Closed {
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    let mut heard_at = Instant::now();
    loop {
        let silence_left = SILENCE_LIMIT.saturating_sub(heard_at.elapsed());
        let message = tokio::select! {
            message = stream.next() => message,
            _ = ping.tick() => {
                if let Err(err) = stream.send(Message::Ping(Vec::new().into())).await {
                    return retry(format!("cannot ping: {err}"));
                }
                continue;
            }
            () = tokio::time::sleep(silence_left) => {
                return retry(format!("nothing heard for {SILENCE_LIMIT:?}"));
            }
        };
        heard_at = Instant::now();
        let message = match message {
            None => return retry("the server closed the stream"),
            Some(Err(err)) => return retry(format!("the stream broke: {err}")),
            Some(Ok(message)) => message,
        };
        match message {
            Message::Text(text) => match handle_text(text.as_str(), sink) {
                Handled::Revoked => return Closed::Revoked,
                Handled::Reply(reply) => {
                    if let Err(err) = stream.send(Message::text(reply)).await {
                        return retry(format!("cannot answer: {err}"));
                    }
                }
                Handled::Done => {}
            },
            // tungstenite queues the pong itself; flushing sends it now.
            Message::Ping(_) => {
                if let Err(err) = stream.flush().await {
                    return retry(format!("cannot answer a ping: {err}"));
                }
            }
            Message::Close(frame) => {
                let reason = frame.map_or_else(String::new, |frame| frame.reason.to_string());
                return retry(format!("the server closed the stream {reason}"));
            }
            Message::Pong(_) | Message::Binary(_) | Message::Frame(_) => {}
        }
    }
}

fn retry(reason: impl Into<String>) -> Closed {
    Closed::Retry {
        at_least: Duration::ZERO,
        reason: reason.into(),
    }
}

/// A handshake answered with an HTTP error: revoked, rate limited, or something to retry.
fn refused(response: &tungstenite::http::Response<Option<Vec<u8>>>) -> Closed {
    let status = response.status().as_u16();
    if status == 429 {
        let at_least = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, std::time::SystemTime::now()))
            .unwrap_or(Duration::from_secs(1));
        return Closed::Retry {
            at_least,
            reason: "rate limited".to_owned(),
        };
    }
    let body = response.body().as_deref().unwrap_or_default();
    match classify(status, body) {
        RemoteError::Revoked => Closed::Revoked,
        err => Closed::Retry {
            // A server without the stream (404) or refusing it otherwise: polling still
            // works, so retry slowly rather than hammer it.
            at_least: if status >= 500 {
                Duration::ZERO
            } else {
                Duration::from_secs(30)
            },
            reason: err.to_string(),
        },
    }
}

/// What a text frame asks of the connection.
#[derive(Debug, PartialEq, Eq)]
enum Handled {
    Done,
    /// Send this text back.
    Reply(String),
    Revoked,
}

/// Applies one text frame. Never fails: what cannot be understood is logged and ignored.
fn handle_text(text: &str, sink: &dyn EventSink) -> Handled {
    let frame = match serde_json::from_str::<ServerFrame>(text) {
        Ok(frame) => frame,
        Err(err) => {
            let kind = serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|value| {
                    value
                        .get("type")
                        .and_then(|t| t.as_str().map(str::to_owned))
                });
            match kind {
                Some(kind) => tracing::debug!("ignoring a frame of type {kind:?}: {err}"),
                None => tracing::warn!("ignoring a frame that is not protocol JSON: {err}"),
            }
            return Handled::Done;
        }
    };
    match frame {
        ServerFrame::Wake => sink.wake(),
        ServerFrame::JobCancel { job_id } => sink.cancel(&job_id),
        ServerFrame::DeviceRevoked => return Handled::Revoked,
        ServerFrame::FileRequest {
            id,
            job_id,
            op,
            path,
            timeout_ms,
            against,
        } => sink.file_request(FileRequest {
            id,
            job_id,
            op,
            path,
            timeout: timeout_ms.map(Duration::from_millis),
            against,
        }),
        ServerFrame::Ping => return Handled::Reply(r#"{"type":"pong"}"#.to_owned()),
        ServerFrame::SecretSave { id, name, sealed } => {
            sink.secret_save(SecretDelivery { id, name, sealed });
        }
        ServerFrame::DecisionAnswered { decision_id } => sink.decision_answered(&decision_id),
        ServerFrame::EvidenceRequest {
            id,
            job_id,
            evidence_id,
            action,
            upload_id,
            timeout_ms,
        } => sink.evidence_request(EvidenceRequest {
            id,
            job_id,
            evidence_id,
            action,
            upload_id,
            timeout: timeout_ms.map(Duration::from_millis),
        }),
        ServerFrame::SessionDelete {
            id,
            job_id,
            timeout_ms,
        } => sink.session_delete(SessionDelete {
            id,
            job_id,
            timeout: timeout_ms.map(Duration::from_millis),
        }),
        ServerFrame::ConsoleOpen { session_id, enc } => sink.console_open(session_id, enc),
        // `ServerFrame` is non-exhaustive: frames added later are ignored.
        #[allow(unreachable_patterns)]
        _ => tracing::debug!("ignoring a frame this agent does not know"),
    }
    Handled::Done
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::net::TcpListener;

    use super::*;
    use crate::remote::client::ServerClient;

    #[derive(Default)]
    struct Recorder {
        seen: Mutex<Vec<String>>,
        woken: tokio::sync::Notify,
    }

    impl Recorder {
        fn seen(&self) -> Vec<String> {
            self.seen
                .lock()
                .map(|seen| seen.clone())
                .unwrap_or_default()
        }

        fn push(&self, what: String) {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(what);
            }
            self.woken.notify_one();
        }
    }

    impl EventSink for Recorder {
        fn wake(&self) {
            self.push("wake".into());
        }
        fn cancel(&self, job_id: &JobId) {
            self.push(format!("cancel {job_id}"));
        }
        fn revoked(&self) {
            self.push("revoked".into());
        }
        fn file_request(&self, request: FileRequest) {
            self.push(format!(
                "file {} {} {:?} {} {:?}",
                request.id, request.job_id, request.op, request.path, request.timeout
            ));
        }
        fn decision_answered(&self, decision_id: &DecisionId) {
            self.push(format!("answered {decision_id}"));
        }
        fn evidence_request(&self, request: EvidenceRequest) {
            self.push(format!(
                "evidence {} {} {} {} {} {:?}",
                request.id,
                request.job_id,
                request.evidence_id,
                request.action.as_str(),
                request.upload_id,
                request.timeout
            ));
        }
        fn session_delete(&self, request: SessionDelete) {
            self.push(format!(
                "session {} {} {:?}",
                request.id, request.job_id, request.timeout
            ));
        }
    }

    #[test]
    fn frames_are_hints_and_unknown_ones_are_ignored() {
        let recorder = Recorder::default();
        let check = |text: &str, expected: Handled| {
            assert_eq!(handle_text(text, &recorder), expected, "{text}");
        };
        check(r#"{"type":"wake"}"#, Handled::Done);
        check(r#"{"type":"job.cancel","jobId":"job1"}"#, Handled::Done);
        check(
            r#"{"type":"file.request","id":"r1","jobId":"job1","op":"tree","path":""}"#,
            Handled::Done,
        );
        check(
            r#"{"type":"file.request","id":"r2","jobId":"job1","op":"file","path":"a","timeoutMs":1500}"#,
            Handled::Done,
        );
        check(
            r#"{"type":"ping"}"#,
            Handled::Reply(r#"{"type":"pong"}"#.into()),
        );
        check(r#"{"type":"device.revoked"}"#, Handled::Revoked);
        check(r#"{"type":"something.new","x":1}"#, Handled::Done);
        check(
            r#"{"type":"job.cancel","jobId":"../bad id"}"#,
            Handled::Done,
        );
        check("not json", Handled::Done);
        check(
            r#"{"type":"decision.answered","decisionId":"d1"}"#,
            Handled::Done,
        );
        check(
            r#"{"type":"evidence.request","id":"e1","jobId":"job1","evidenceId":"ab12","action":"release","uploadId":"u1","timeoutMs":30000}"#,
            Handled::Done,
        );
        check(
            r#"{"type":"evidence.request","id":"e2","jobId":"job1","evidenceId":"ab12","action":"explode","uploadId":"u2"}"#,
            Handled::Done,
        );
        check(
            r#"{"type":"session.delete","id":"s1","jobId":"job1","timeoutMs":60000}"#,
            Handled::Done,
        );
        assert_eq!(
            recorder.seen(),
            [
                "wake",
                "cancel job1",
                "file r1 job1 Tree  None",
                "file r2 job1 File a Some(1.5s)",
                "answered d1",
                "evidence e1 job1 ab12 release u1 Some(30s)",
                "session s1 job1 Some(60s)"
            ]
        );
    }

    /// A real WebSocket server on loopback: frames arrive, the stream is dropped, the agent
    /// comes back and claims again on reconnect, and a revocation ends it.
    #[tokio::test]
    async fn the_stream_reconnects_and_ends_on_revocation() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(async move {
            // First connection: a wake, an unknown frame, a cancel, then a drop.
            let (socket, _) = listener.accept().await?;
            let mut ws = tokio_tungstenite::accept_async(socket).await?;
            for text in [
                r#"{"type":"something.new"}"#,
                r#"{"type":"job.cancel","jobId":"job7"}"#,
            ] {
                ws.send(Message::text(text)).await?;
            }
            drop(ws);
            // Second connection: revoked.
            let (socket, _) = listener.accept().await?;
            let mut ws = tokio_tungstenite::accept_async(socket).await?;
            ws.send(Message::text(r#"{"type":"device.revoked"}"#))
                .await?;
            // Wait for the agent to hang up.
            while let Some(Ok(_)) = ws.next().await {}
            anyhow::Ok(())
        });
        let recorder = Arc::new(Recorder::default());
        let client = DeviceClient::new(ServerClient::new(&base)?, "tdt_test".into());
        let (_, never) = watch::channel(false);
        let stream = tokio::spawn(run(client, recorder.clone(), never));
        tokio::time::timeout(Duration::from_secs(20), stream).await??;
        server.await??;
        assert_eq!(recorder.seen(), ["wake", "cancel job7", "wake", "revoked"]);
        Ok(())
    }

    /// When the agent stops, the stream ends with a "going away" close frame, which the
    /// server answers, and `run` returns.
    #[tokio::test]
    async fn stopping_closes_the_stream_with_going_away() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await?;
            let mut ws = tokio_tungstenite::accept_async(socket).await?;
            while let Some(message) = ws.next().await {
                if let Message::Close(frame) = message? {
                    return anyhow::Ok(frame.map(|frame| u16::from(frame.code)));
                }
            }
            anyhow::Ok(None)
        });
        let recorder = Arc::new(Recorder::default());
        let client = DeviceClient::new(ServerClient::new(&base)?, "tdt_test".into());
        let (stop, stop_stream) = watch::channel(false);
        let stream = tokio::spawn(run(client, recorder.clone(), stop_stream));
        while recorder.seen().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stop.send(true)?;
        tokio::time::timeout(Duration::from_secs(5), stream).await??;
        assert_eq!(server.await??, Some(1001));
        Ok(())
    }
}
