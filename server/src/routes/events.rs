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
//! A device that closes its stream with a normal (1000) or "going away" (1001) close frame,
//! as the agent does when it stops, is offline at once when no other stream of it is open
//! here: [`devices::mark_stopped`]. A stream that just breaks is not a stop.

use std::future::Future;
use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{CloseCode, CloseReason, Message, MessageStream, ProtocolError, Session};
use tether_protocol::frames::ServerFrame;
use tether_protocol::{Code, DeviceId};

use super::table::{Access, Table};
use crate::devices::secrets;
use crate::devices::{self, DeviceIdentity};
use crate::error::ApiError;
use crate::relay::EventStream;
use crate::state::AppState;

/// Largest frame a device may send (it sends only pongs and closes).
const MAX_INBOUND_FRAME: usize = 4 * 1024;
/// How often an open stream checks the database for a revocation whose frame was lost.
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
    // Registered before the handshake answers, so a frame sent once the client sees the
    // stream open reaches it.
    let stream = state.hub.open_stream(&device.device_id).await;
    let (response, session, messages) = actix_ws::handle(&req, body).map_err(|_| {
        ApiError::new(
            Code::InvalidRequest,
            "This route is a WebSocket; send an upgrade request.",
        )
    })?;
    let messages = messages.max_frame_size(MAX_INBOUND_FRAME);
    let settings = Settings {
        ping: Duration::from_secs(state.config.events_ping_secs.max(1)),
        idle: Duration::from_secs(state.config.events_idle_secs.max(1)),
    };
    tracing::info!(device_id = %device.device_id, "event stream opened");
    let connection = Connection {
        state,
        device_id: device.device_id,
        session,
        settings,
        last_heard: Instant::now(),
        last_pinged_by_device: None,
        last_check: Instant::now(),
    };
    actix_web::rt::spawn(serve(connection, stream, messages));
    Ok(response)
}

struct Settings {
    ping: Duration,
    idle: Duration,
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

/// What woke an open stream.
enum Event {
    Frame(ServerFrame),
    Message(Option<Result<Message, ProtocolError>>),
    Tick,
}

/// One open stream: what its events are handled with.
struct Connection {
    state: web::Data<AppState>,
    device_id: DeviceId,
    session: Session,
    settings: Settings,
    last_heard: Instant,
    /// When the device last pinged this stream itself.
    last_pinged_by_device: Option<Instant>,
    last_check: Instant,
}

/// Serves one stream until it ends.
///
/// Each connected device costs one such task for as long as it is connected, and the task's
/// future is as large as the largest state it can wait in. So the loop only waits for the
/// next event, and each event is handled in a boxed future: the sends and the database reads
/// it may await take room only while they run, not in every idle stream. (An `async` block
/// rather than an `async fn`, whose arguments would be stored twice.)
#[allow(clippy::manual_async_fn)]
fn serve(
    mut connection: Connection,
    stream: EventStream,
    mut messages: MessageStream,
) -> impl Future<Output = ()> {
    async move {
        if Box::pin(connection.send_pending_secrets()).await.is_err() {
            return;
        }
        let ping = connection.settings.ping;
        let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + ping, ping);
        pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = loop {
            let event = tokio::select! {
                frame = stream.next_frame() => Event::Frame(frame),
                message = messages.recv() => Event::Message(message),
                _ = pings.tick() => Event::Tick,
            };
            if let Some(end) = Box::pin(connection.handle(event)).await {
                break end;
            }
        };
        drop(stream);
        // Recorded before the close is answered, so the device is offline once it is gone.
        if matches!(end, End::ClientClosed { stopping: true }) {
            Box::pin(connection.stopped()).await;
        }
        Box::pin(connection.close(end)).await;
    }
}

impl Connection {
    /// Boxes that waited for this device go out again on every (re)connection; the device
    /// answers each once, and a box it already answered is no longer pending.
    async fn send_pending_secrets(&mut self) -> Result<(), actix_ws::Closed> {
        match secrets::pending_frames(&self.state.store, &self.device_id).await {
            Ok(frames) => {
                for frame in &frames {
                    send_frame(&mut self.session, frame).await?;
                }
            }
            Err(error) => {
                tracing::warn!(device_id = %self.device_id, %error, "pending secrets not read")
            }
        }
        Ok(())
    }

    /// Handles one event; says why the stream ends when it does.
    async fn handle(&mut self, event: Event) -> Option<End> {
        match event {
            Event::Frame(frame) => self.forward(frame).await,
            Event::Message(message) => self.receive(message).await,
            Event::Tick => self.tick().await,
        }
    }

    async fn forward(&mut self, frame: ServerFrame) -> Option<End> {
        if send_frame(&mut self.session, &frame).await.is_err() {
            return Some(End::Broken);
        }
        (frame == ServerFrame::DeviceRevoked).then_some(End::Revoked)
    }

    async fn receive(&mut self, message: Option<Result<Message, ProtocolError>>) -> Option<End> {
        match message {
            Some(Ok(Message::Ping(bytes))) => {
                self.last_heard = Instant::now();
                self.last_pinged_by_device = Some(self.last_heard);
                self.session.pong(&bytes).await.err().map(|_| End::Broken)
            }
            Some(Ok(Message::Close(reason))) => Some(End::ClientClosed {
                stopping: reason.is_some_and(|reason| {
                    matches!(reason.code, CloseCode::Normal | CloseCode::Away)
                }),
            }),
            None => Some(End::ClientClosed { stopping: false }),
            Some(Ok(_)) => {
                self.last_heard = Instant::now();
                None
            }
            Some(Err(_)) => Some(End::Broken),
        }
    }

    /// Ends a silent stream, rechecks the revocation now and then, and pings a device that
    /// did not ping since the last tick.
    async fn tick(&mut self) -> Option<End> {
        if self.last_heard.elapsed() >= self.settings.idle {
            return Some(End::Silent);
        }
        if self.last_check.elapsed() >= REVOCATION_RECHECK {
            self.last_check = Instant::now();
            if devices::is_revoked(&self.state.store, &self.device_id)
                .await
                .unwrap_or(false)
            {
                let _ = send_frame(&mut self.session, &ServerFrame::DeviceRevoked).await;
                return Some(End::Revoked);
            }
        }
        let pinged_by_device = self
            .last_pinged_by_device
            .is_some_and(|at| at.elapsed() < self.settings.ping);
        if pinged_by_device {
            return None;
        }
        if send_frame(&mut self.session, &ServerFrame::Ping)
            .await
            .is_err()
            || self.session.ping(b"tether").await.is_err()
        {
            return Some(End::Broken);
        }
        None
    }

    /// The device stopped: offline at once, unless another stream of it is still open here.
    /// Its next heartbeat is written at once, so it is online again as soon as it is back.
    async fn stopped(&self) {
        if self.state.hub.holds_stream(&self.device_id) {
            return;
        }
        self.state.presence.forget(self.device_id.as_str());
        match devices::mark_stopped(&self.state.store, &self.device_id).await {
            Ok(()) => tracing::info!(device_id = %self.device_id, "device stopped"),
            Err(error) => {
                tracing::warn!(device_id = %self.device_id, %error, "device stop not recorded")
            }
        }
    }

    async fn close(self, end: End) {
        let (reason, close) = match end {
            End::Revoked => ("revoked", Some((CloseCode::Policy, "revoked"))),
            End::Silent => ("silent", Some((CloseCode::Away, "silent too long"))),
            End::ClientClosed { .. } => ("closed by the device", Some((CloseCode::Normal, "bye"))),
            End::Broken => ("broken", None),
        };
        if let Some((code, description)) = close {
            let _ = self
                .session
                .close(Some(CloseReason {
                    code,
                    description: Some(description.to_owned()),
                }))
                .await;
        }
        tracing::info!(device_id = %self.device_id, reason, "event stream closed");
    }
}

async fn send_frame(session: &mut Session, frame: &ServerFrame) -> Result<(), actix_ws::Closed> {
    match serde_json::to_string(frame) {
        Ok(text) => session.text(text).await,
        // A frame always serialises; if one ever did not, skipping it is the right answer.
        Err(_) => Ok(()),
    }
}
