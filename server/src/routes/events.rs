//! `GET /api/devices/self/events`: the device's WebSocket wake-up stream.
//!
//! Authenticated like every device route (a bad or revoked token is a 401 before the
//! upgrade). The server sends [`ServerFrame`]s as JSON text frames; every `events_ping_secs`
//! it pings (a protocol ping, which clients answer by themselves, and a `ping` frame for
//! agents that only read text) unless the device pinged it meanwhile, and it closes a stream
//! it has not heard from for `events_idle_secs`. After `device.revoked` it closes the stream.
//! The device sends nothing but pings, pongs and closes; inbound frames are capped small.
//!
//! The agent pings every 15 s and takes its stream as dead after 40 s of silence, so a
//! stream it keeps alive needs no pings of ours: the pongs answering its pings are traffic
//! both ways, which also keeps a proxy's read timeout fed. Skipping ours halves an idle
//! fleet's frames.
//!
//! What the device sends keeps its contact time, as a heartbeat does: an idle device with its
//! stream open is asked to heartbeat only every `idle_heartbeat_secs` (`leases::heartbeat`).
//!
//! A device that closes its stream with a normal (1000) or "going away" (1001) close frame,
//! as the agent does when it stops, is offline at once when no other stream of it is open
//! here: [`devices::mark_stopped`]. A stream that just breaks is not a stop.
//!
//! Each connected device costs one [`DeviceStream`] for as long as it is connected: the
//! answer's body, polled by the connection's own task (see `upgrades`). It reads the
//! device's frames from the request's payload and writes its own into the body, so a stream
//! has no channel and no task of its own; the database reads it makes now and then (pending
//! secrets, a revocation recheck, a stop) take memory only while they run.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_codec::{Decoder, Encoder};
use actix_http::ws::{self, CloseCode, CloseReason, Codec, Frame, Message};
use actix_web::body::{BodyStream, MessageBody};
use actix_web::dev::Payload;
use actix_web::web::{Bytes, BytesMut};
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::future::LocalBoxFuture;
use futures_util::{FutureExt, Stream};
use tether_protocol::frames::ServerFrame;
use tether_protocol::{Code, DeviceId};
use tokio::time::{Interval, MissedTickBehavior};

use super::table::{Access, Table};
use crate::clock::{secs, Millis};
use crate::devices::secrets;
use crate::devices::{self, DeviceIdentity};
use crate::error::ApiError;
use crate::relay::EventStream;
use crate::state::AppState;

/// Largest frame a device may send (it sends only pings, pongs and closes).
const MAX_INBOUND_FRAME: usize = 4 * 1024;
/// How often an open stream that may have missed frames checks the database for a
/// revocation whose frame was lost. Every stream checks once, at its first tick: a
/// revocation committed between its token check and its registration in the hub sent its
/// frame before the stream could receive it.
const REVOCATION_RECHECK: Duration = Duration::from_secs(60);

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/devices/self/events",
            events,
            Access::Device,
            "The wake-up stream (WebSocket)",
        )
        .empty(101, "Switching to the WebSocket protocol.")
        .errors(&[400]);
}

async fn events(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
    device: DeviceIdentity,
) -> Result<HttpResponse, ApiError> {
    let handshake = ws::handshake(req.head()).map_err(|_| {
        ApiError::new(
            Code::InvalidRequest,
            "This route is a WebSocket; send an upgrade request.",
        )
    })?;
    // Registered before the handshake answers, so a frame sent once the client sees the
    // stream open reaches it.
    let stream = state.hub.open_stream(&device.device_id).await;
    let ping = Duration::from_secs(state.config.events_ping_secs.max(1));
    let idle = Duration::from_secs(state.config.events_idle_secs.max(1));
    tracing::info!(device_id = %device.device_id, "event stream opened");
    let connection = Connection {
        state,
        device_id: device.device_id,
        idle,
        ping,
        last_heard: Instant::now(),
        last_pinged_by_device: None,
        last_noted: None,
        last_check: None,
    };
    let served = DeviceStream::open(connection, stream, body.into_inner());
    let mut handshake = handshake;
    let response = handshake
        .message_body(BodyStream::new(served).boxed())
        .map_err(|_| ApiError::new(Code::Internal, "The stream could not be started."))?;
    Ok(HttpResponse::from(response))
}

/// Why a stream ended, for the log and the close frame.
enum End {
    Revoked,
    Silent,
    /// The device closed the stream; `stopping` when with a normal or going-away code.
    ClientClosed {
        stopping: bool,
    },
    Broken,
}

/// The device and what the stream knows of it.
struct Connection {
    state: web::Data<AppState>,
    device_id: DeviceId,
    idle: Duration,
    ping: Duration,
    last_heard: Instant,
    /// When the device last pinged this stream itself.
    last_pinged_by_device: Option<Instant>,
    /// When this stream last noted the device's contact time (the store's clock).
    last_noted: Option<Millis>,
    /// When the revocation was last checked in the database (not yet: `None`).
    last_check: Option<Instant>,
}

/// What a database read came back with.
enum Read {
    /// Sealed boxes waiting for this device, sent on every (re)connection.
    PendingSecrets(Vec<ServerFrame>),
    /// Whether the device is revoked (the periodic recheck).
    Revoked(bool),
    /// The device's stop is recorded.
    Stopped,
}

/// Where a stream is in its life.
enum Phase {
    Serving,
    /// The device closed with a stop; its stop is being recorded before the close answer.
    Stopping,
    Closed,
}

/// One connected device's stream, served as the answer's body.
pub struct DeviceStream {
    connection: Connection,
    /// Its registration in the hub; let go as the stream ends (before a stop is recorded,
    /// which looks for other streams of the device).
    hub: Option<EventStream>,
    /// The request's payload: what the device sends.
    inbound: Payload,
    codec: Codec,
    /// Received bytes that are not a whole frame yet.
    unread: BytesMut,
    /// Frames encoded and not yet handed to the connection.
    outbound: BytesMut,
    pings: Interval,
    /// A database read in flight; nothing else is handled until it is done.
    read: Option<LocalBoxFuture<'static, Read>>,
    phase: Phase,
}

impl DeviceStream {
    /// A stream whose first step sends the secrets waiting for the device.
    fn open(connection: Connection, hub: EventStream, inbound: Payload) -> DeviceStream {
        let start = tokio::time::Instant::now() + connection.ping;
        let mut pings = tokio::time::interval_at(start, connection.ping);
        pings.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let read = pending_secrets(&connection).boxed_local();
        DeviceStream {
            connection,
            hub: Some(hub),
            inbound,
            codec: Codec::new().max_size(MAX_INBOUND_FRAME),
            unread: BytesMut::new(),
            outbound: BytesMut::new(),
            pings,
            read: Some(read),
            phase: Phase::Serving,
        }
    }

    /// Handles whatever is ready: a database read's result, a frame for the device, one
    /// from it, a tick. Pending when nothing is.
    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(read) = &mut self.read {
            let outcome = std::task::ready!(read.as_mut().poll(cx));
            self.read = None;
            self.apply(outcome);
            return Poll::Ready(());
        }
        if let Some(hub) = &self.hub {
            if let Poll::Ready(frame) = hub.poll_frame(cx) {
                self.forward(&frame);
                return Poll::Ready(());
            }
        }
        if let Poll::Ready(received) = self.poll_received(cx) {
            self.receive(received);
            return Poll::Ready(());
        }
        if self.pings.poll_tick(cx).is_ready() {
            self.tick();
            return Poll::Ready(());
        }
        Poll::Pending
    }

    fn apply(&mut self, outcome: Read) {
        match outcome {
            Read::PendingSecrets(frames) => {
                for frame in &frames {
                    self.send(frame);
                }
            }
            Read::Revoked(true) => {
                self.send(&ServerFrame::DeviceRevoked);
                self.end(End::Revoked);
            }
            Read::Revoked(false) => self.ping(),
            Read::Stopped => self.close(&End::ClientClosed { stopping: true }),
        }
    }

    fn forward(&mut self, frame: &ServerFrame) {
        self.send(frame);
        if *frame == ServerFrame::DeviceRevoked {
            self.end(End::Revoked);
        }
    }

    /// The device's next frame: `Ok(None)` when its payload ended, `Err` when the stream
    /// broke.
    fn poll_received(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Frame>, ()>> {
        loop {
            match self.codec.decode(&mut self.unread) {
                Ok(Some(frame)) => {
                    self.release_unread();
                    return Poll::Ready(Ok(Some(frame)));
                }
                Ok(None) => {}
                Err(_) => return Poll::Ready(Err(())),
            }
            match std::task::ready!(Pin::new(&mut self.inbound).poll_next(cx)) {
                Some(Ok(bytes)) if self.unread.is_empty() => self.unread = BytesMut::from(bytes),
                Some(Ok(bytes)) => self.unread.extend_from_slice(&bytes),
                Some(Err(_)) => return Poll::Ready(Err(())),
                None => return Poll::Ready(Ok(None)),
            }
        }
    }

    /// An emptied buffer lets go of its memory: a device sends a few bytes a minute.
    fn release_unread(&mut self) {
        if self.unread.is_empty() {
            self.unread = BytesMut::new();
        }
    }

    fn receive(&mut self, received: Result<Option<Frame>, ()>) {
        match received {
            Ok(Some(Frame::Ping(bytes))) => {
                self.heard();
                self.connection.last_pinged_by_device = Some(self.connection.last_heard);
                self.encode(Message::Pong(bytes));
            }
            Ok(Some(Frame::Close(reason))) => self.end(End::ClientClosed {
                stopping: reason.is_some_and(|reason| {
                    matches!(reason.code, CloseCode::Normal | CloseCode::Away)
                }),
            }),
            Ok(None) => self.end(End::ClientClosed { stopping: false }),
            Ok(Some(Frame::Text(bytes))) if std::str::from_utf8(&bytes).is_err() => {
                self.end(End::Broken)
            }
            Ok(Some(_)) => self.heard(),
            Err(()) => self.end(End::Broken),
        }
    }

    /// The device said something: the stream is alive, and so is the device, which an idle
    /// one heartbeating at the idle pace relies on. Its contact time is noted (in memory, like
    /// a heartbeat's; see `presence`) at most once per heartbeat interval, so pings every 15 s
    /// write no more contact times than heartbeats every 30 s did.
    fn heard(&mut self) {
        let connection = &mut self.connection;
        connection.last_heard = Instant::now();
        let now = connection.state.store.now();
        let every = secs(connection.state.config.heartbeat_secs);
        if connection
            .last_noted
            .is_some_and(|noted| now - noted < every)
        {
            return;
        }
        connection.last_noted = Some(now);
        let device_id = connection.device_id.as_str();
        connection.state.presence.saw(device_id, now);
    }

    /// Ends a silent stream, rechecks the revocation when due, and pings a device that did
    /// not ping since the last tick.
    fn tick(&mut self) {
        if self.connection.last_heard.elapsed() >= self.connection.idle {
            self.end(End::Silent);
        } else if self.revocation_check_due() {
            self.connection.last_check = Some(Instant::now());
            self.read = Some(is_revoked(&self.connection).boxed_local());
        } else {
            self.ping();
        }
    }

    /// Once at the first tick; then every [`REVOCATION_RECHECK`] while frames may have been
    /// missed.
    fn revocation_check_due(&self) -> bool {
        match self.connection.last_check {
            None => true,
            Some(at) => {
                at.elapsed() >= REVOCATION_RECHECK
                    && self
                        .hub
                        .as_ref()
                        .is_some_and(EventStream::may_have_missed_frames)
            }
        }
    }

    fn ping(&mut self) {
        let pinged_by_device = self
            .connection
            .last_pinged_by_device
            .is_some_and(|at| at.elapsed() < self.connection.ping);
        if !pinged_by_device {
            self.send(&ServerFrame::Ping);
            self.encode(Message::Ping(Bytes::from_static(b"tether")));
        }
    }

    /// The stream ends: it leaves the hub, a stop is recorded, then the close is answered.
    fn end(&mut self, end: End) {
        self.hub = None;
        if matches!(end, End::ClientClosed { stopping: true }) {
            // Recorded before the close is answered, so the device is offline once it is gone.
            self.phase = Phase::Stopping;
            self.read = Some(stopped(&self.connection).boxed_local());
        } else {
            self.close(&end);
        }
    }

    fn close(&mut self, end: &End) {
        let (reason, close) = match end {
            End::Revoked => ("revoked", Some((CloseCode::Policy, "revoked"))),
            End::Silent => ("silent", Some((CloseCode::Away, "silent too long"))),
            End::ClientClosed { .. } => ("closed by the device", Some((CloseCode::Normal, "bye"))),
            End::Broken => ("broken", None),
        };
        if let Some((code, description)) = close {
            self.encode(Message::Close(Some(CloseReason {
                code,
                description: Some(description.to_owned()),
            })));
        }
        self.phase = Phase::Closed;
        tracing::info!(device_id = %self.connection.device_id, reason, "event stream closed");
    }

    fn send(&mut self, frame: &ServerFrame) {
        // A frame always serialises; if one ever did not, skipping it is the right answer.
        if let Ok(text) = serde_json::to_string(frame) {
            self.encode(Message::Text(text.into()));
        }
    }

    fn encode(&mut self, message: Message) {
        // Only a continuation out of order fails to encode; this stream sends none.
        let _ = self.codec.encode(message, &mut self.outbound);
    }
}

impl Stream for DeviceStream {
    type Item = Result<Bytes, std::io::Error>;

    /// The frames for the device as they come; ends once the stream closed (after its close
    /// frame).
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if !this.outbound.is_empty() {
                // Taken whole, so no buffer stays with an idle stream.
                let frames = std::mem::take(&mut this.outbound).freeze();
                return Poll::Ready(Some(Ok(frames)));
            }
            if matches!(this.phase, Phase::Closed) {
                return Poll::Ready(None);
            }
            std::task::ready!(this.poll_step(cx));
        }
    }
}

impl Drop for DeviceStream {
    /// A connection that went away before the stream ended (it could not be written).
    fn drop(&mut self) {
        if !matches!(self.phase, Phase::Closed) {
            tracing::info!(device_id = %self.connection.device_id, reason = "broken", "event stream closed");
        }
    }
}

/// Boxes that waited for this device go out again on every (re)connection; the device
/// answers each once, and a box it already answered is no longer pending.
fn pending_secrets(connection: &Connection) -> impl Future<Output = Read> + 'static {
    let (state, device_id) = (connection.state.clone(), connection.device_id.clone());
    async move {
        match secrets::pending_frames(&state.store, &device_id).await {
            Ok(frames) => Read::PendingSecrets(frames),
            Err(error) => {
                tracing::warn!(device_id = %device_id, %error, "pending secrets not read");
                Read::PendingSecrets(Vec::new())
            }
        }
    }
}

fn is_revoked(connection: &Connection) -> impl Future<Output = Read> + 'static {
    let (state, device_id) = (connection.state.clone(), connection.device_id.clone());
    async move {
        let revoked = devices::is_revoked(&state.store, &device_id)
            .await
            .unwrap_or(false);
        Read::Revoked(revoked)
    }
}

/// The device stopped: offline at once, unless another stream of it is still open here.
/// Its next heartbeat is written at once, so it is online again as soon as it is back.
fn stopped(connection: &Connection) -> impl Future<Output = Read> + 'static {
    let (state, device_id) = (connection.state.clone(), connection.device_id.clone());
    async move {
        if !state.hub.holds_stream(&device_id) {
            state.presence.forget(device_id.as_str());
            match devices::mark_stopped(&state.store, &device_id).await {
                Ok(()) => tracing::info!(device_id = %device_id, "device stopped"),
                Err(error) => {
                    tracing::warn!(device_id = %device_id, %error, "device stop not recorded")
                }
            }
        }
        Read::Stopped
    }
}
