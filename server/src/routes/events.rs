//! `GET /api/devices/self/events`: the device's WebSocket wake-up stream.
//!
//! Authenticated like every device route (a bad or revoked token is a 401 before the
//! upgrade). The server sends [`ServerFrame`]s as JSON text frames; it pings every
//! `events_ping_secs` (a protocol ping, which clients answer by themselves, and a `ping`
//! frame for agents that only read text) and closes a stream it has not heard from for
//! `events_idle_secs`. After `device.revoked` it closes the stream. The device sends nothing
//! but pongs; inbound frames are capped small.

use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{CloseCode, CloseReason, Message, MessageStream, Session};
use tether_protocol::frames::ServerFrame;
use tether_protocol::Code;

use crate::auth::DeviceCaller;
use crate::error::ApiError;
use crate::relay::EventStream;
use crate::{devices, secrets, AppState};

/// Largest frame a device may send (it sends only pongs and closes).
const MAX_INBOUND_FRAME: usize = 4 * 1024;
/// How often an open stream checks the database for a revocation whose frame was lost.
const REVOCATION_RECHECK: Duration = Duration::from_secs(60);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/api/devices/self/events").route(web::get().to(events)));
}

async fn events(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
    device: DeviceCaller,
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
    actix_web::rt::spawn(serve(state, device, stream, session, messages, settings));
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
    ClientClosed,
    Broken,
}

async fn serve(
    state: web::Data<AppState>,
    device: DeviceCaller,
    mut stream: EventStream,
    mut session: Session,
    mut messages: MessageStream,
    settings: Settings,
) {
    let mut last_heard = Instant::now();
    let mut last_check = Instant::now();
    // Boxes that waited for this device go out again on every (re)connection; the device
    // answers each once, and a box it already answered is no longer pending.
    match secrets::pending_frames(&state.store, &device.device_id).await {
        Ok(frames) => {
            for frame in &frames {
                if send_frame(&mut session, frame).await.is_err() {
                    return;
                }
            }
        }
        Err(error) => {
            tracing::warn!(device_id = %device.device_id, %error, "pending secrets not read")
        }
    }
    let mut pings =
        tokio::time::interval_at(tokio::time::Instant::now() + settings.ping, settings.ping);
    pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = loop {
        tokio::select! {
            frame = stream.frames.recv() => {
                let Some(frame) = frame else { break End::Broken };
                if send_frame(&mut session, &frame).await.is_err() {
                    break End::Broken;
                }
                if frame == ServerFrame::DeviceRevoked {
                    break End::Revoked;
                }
            }
            message = messages.recv() => match message {
                Some(Ok(Message::Ping(bytes))) => {
                    last_heard = Instant::now();
                    if session.pong(&bytes).await.is_err() {
                        break End::Broken;
                    }
                }
                Some(Ok(Message::Close(_))) | None => break End::ClientClosed,
                Some(Ok(_)) => last_heard = Instant::now(),
                Some(Err(_)) => break End::Broken,
            },
            _ = pings.tick() => {
                if last_heard.elapsed() >= settings.idle {
                    break End::Silent;
                }
                if last_check.elapsed() >= REVOCATION_RECHECK {
                    last_check = Instant::now();
                    if devices::is_revoked(&state.store, &device.device_id).await.unwrap_or(false) {
                        let _ = send_frame(&mut session, &ServerFrame::DeviceRevoked).await;
                        break End::Revoked;
                    }
                }
                if send_frame(&mut session, &ServerFrame::Ping).await.is_err()
                    || session.ping(b"tether").await.is_err()
                {
                    break End::Broken;
                }
            }
        }
    };
    drop(stream);
    let (reason, close) = match end {
        End::Revoked => ("revoked", Some((CloseCode::Policy, "revoked"))),
        End::Silent => ("silent", Some((CloseCode::Away, "silent too long"))),
        End::ClientClosed => ("closed by the device", Some((CloseCode::Normal, "bye"))),
        End::Broken => ("broken", None),
    };
    if let Some((code, description)) = close {
        let _ = session
            .close(Some(CloseReason {
                code,
                description: Some(description.to_owned()),
            }))
            .await;
    }
    tracing::info!(device_id = %device.device_id, reason, "event stream closed");
}

async fn send_frame(session: &mut Session, frame: &ServerFrame) -> Result<(), actix_ws::Closed> {
    match serde_json::to_string(frame) {
        Ok(text) => session.text(text).await,
        // A frame always serialises; if one ever did not, skipping it is the right answer.
        Err(_) => Ok(()),
    }
}
