//! The device's end of a console session (`GET /api/devices/self/console/{sessionId}`, a
//! WebSocket with the device token, like the event stream): text frames of
//! [`ServerToDevice`] in, [`DeviceToServer`] out. What they carry is sealed end to end; this
//! module only moves frames, and never reads a [`Sealed`](tether_protocol::console::Sealed)
//! message.
//!
//! - One connection per session, never reconnected: a dropped socket ends the session (a
//!   reconnect would be a new channel with a new exchange).
//! - Bounded: a frame longer than [`MAX_FRAME_CHARS`] ends the connection; at most
//!   [`QUEUE`] frames wait in each direction.
//! - The socket is pinged every [`PING_EVERY`](super::events::PING_EVERY) and closed with a
//!   normal close frame once the session drops its sender.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tether_protocol::console::{DeviceToServer, ServerToDevice, MAX_SEALED_CHARS};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::remote::client::DeviceClient;
use crate::remote::events::PING_EVERY;

/// The longest text frame taken, in characters: a sealed message at its largest, with room.
pub const MAX_FRAME_CHARS: usize = MAX_SEALED_CHARS + 1024;
/// Frames waiting in each direction.
pub const QUEUE: usize = 64;
/// The handshake must finish within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A session's two directions: what the server relays, what goes back. The session ends
/// when `incoming` ends; dropping `outgoing` closes the socket.
#[derive(Debug)]
pub struct ConsoleEnds {
    pub incoming: mpsc::Receiver<ServerToDevice>,
    pub outgoing: mpsc::Sender<DeviceToServer>,
}

/// Opens the device's end of console session `session_id` and moves its frames on a task
/// of their own until either side ends.
///
/// # Errors
/// A sentence when the socket cannot be opened.
pub async fn connect(client: &DeviceClient, session_id: &str) -> Result<ConsoleEnds, String> {
    let request = client
        .console_request(session_id)
        .map_err(|err| format!("bad console address: {err:#}"))?;
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_CHARS))
        .max_frame_size(Some(MAX_FRAME_CHARS));
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Err(_) => return Err("the console handshake timed out".to_owned()),
        Ok(Err(err)) => return Err(format!("cannot open the console socket: {err}")),
        Ok(Ok((stream, _))) => stream,
    };
    let (incoming_sender, incoming) = mpsc::channel(QUEUE);
    let (outgoing, outgoing_receiver) = mpsc::channel(QUEUE);
    tokio::spawn(pump(stream, incoming_sender, outgoing_receiver));
    Ok(ConsoleEnds { incoming, outgoing })
}

type Stream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Moves frames both ways until the server hangs up or the session drops its sender.
async fn pump(
    mut stream: Stream,
    incoming: mpsc::Sender<ServerToDevice>,
    mut outgoing: mpsc::Receiver<DeviceToServer>,
) {
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await;
    loop {
        tokio::select! {
            message = stream.next() => {
                let text = match message {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Ping(_))) => {
                        if stream.flush().await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Some(Ok(Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Binary(_))) => {
                        tracing::debug!("console socket: a binary frame; closing");
                        break;
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                };
                if text.len() > MAX_FRAME_CHARS {
                    break;
                }
                let frame = match serde_json::from_str::<ServerToDevice>(text.as_str()) {
                    Ok(frame) => frame,
                    Err(err) => {
                        tracing::debug!("console socket: ignoring a frame: {err}");
                        continue;
                    }
                };
                if incoming.send(frame).await.is_err() {
                    break;
                }
            }
            frame = outgoing.recv() => {
                let Some(frame) = frame else { break };
                let Ok(text) = serde_json::to_string(&frame) else { continue };
                if stream.send(Message::text(text)).await.is_err() {
                    return;
                }
            }
            _ = ping.tick() => {
                if stream.send(Message::Ping(Vec::new().into())).await.is_err() {
                    return;
                }
            }
        }
    }
    // The session ended (or the frame was refused): what it sent last goes first.
    while let Ok(frame) = outgoing.try_recv() {
        if let Ok(text) = serde_json::to_string(&frame) {
            let _ = stream.send(Message::text(text)).await;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.close(None)).await;
}
