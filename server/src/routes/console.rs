//! The console's two WebSockets: the browser's (`GET /api/devices/{id}/console`) and the
//! computer's (`GET /api/devices/self/console/{sessionId}`), joined by [`consoles`].
//!
//! The browser's end is for the computer's owner at a browser only: a signed-in session
//! (an API token is 403), a live console unlock (401 `console_locked`, before the upgrade),
//! and an `Origin` that is this server's (403), so no other site can open it with the
//! owner's cookie. Every few seconds the unlock is checked again — and, when the browser sent
//! anything since the last look, touched as console activity (its idle time starts again) —
//! so no message waits on the database; a locked one ends the session at both ends with
//! `closed` `console_locked`.
//!
//! Messages are passed on as they are: the server checks their shape and size, never their
//! content, which is sealed for the other end.

use std::time::Duration;

use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{AggregatedMessage, AggregatedMessageStream, CloseCode, CloseReason, Session};
use futures_util::StreamExt as _;
use tether_protocol::console::{
    BrowserToServer, DeviceToServer, ServerToBrowser, ServerToDevice, MAX_SEALED_CHARS,
};
use tether_protocol::{Code, DeviceId};

use super::table::{Access, Table};
use crate::accounts::console_unlocks;
use crate::auth::Caller;
use crate::consoles::{self, Joined, Started};
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::relay::pipes::Pipe;
use crate::state::AppState;

/// The largest text frame either end may send: a sealed message at its largest, framed.
const MAX_FRAME_BYTES: usize = MAX_SEALED_CHARS + 1024;
/// How long the browser has to send `open` after `ready`.
const OPEN_WITHIN: Duration = Duration::from_secs(30);
/// How often an open session checks (or touches) its unlock again.
const UNLOCK_RECHECK: Duration = Duration::from_secs(5);
/// How often both ends are pinged, so proxies keep the connections open.
const PING_EVERY: Duration = Duration::from_secs(20);

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/devices/self/console/{sessionId}",
            device_console,
            Access::Device,
            "The computer's end of a console session (WebSocket)",
        )
        .empty(101, "Switching to the WebSocket protocol.")
        .errors(&[400, 404]);
    table
        .get(
            "/api/devices/{id}/console",
            browser_console,
            Access::User,
            "A console session with this computer (WebSocket; a browser session with a live unlock)",
        )
        .empty(101, "Switching to the WebSocket protocol.")
        .errors(&[400, 401, 403, 404, 409]);
}

async fn browser_console(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
    caller: Caller,
    device_id: web::Path<DeviceId>,
) -> Result<HttpResponse, ApiError> {
    let browser_session = caller.require_session()?.clone();
    check_origin(&req, &state)?;
    let started = consoles::start(
        &state.store,
        &state.config,
        &caller.account.id,
        &browser_session,
        &device_id,
    )
    .await?;
    let pipe = state
        .hub
        .open_pipe(&consoles::browser_pipe(&started.session_id))
        .await?;
    let (response, session, messages) = upgrade(&req, body)?;
    tracing::info!(session = %started.session_id, device_id = %started.device_id, "console session started");
    actix_web::rt::spawn(serve_browser(state, started, session, messages, pipe));
    Ok(response)
}

async fn device_console(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
    device: DeviceIdentity,
    session_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let joined = consoles::join(&state.store, &state.hub, &device, &session_id).await?;
    let pipe = state
        .hub
        .open_pipe(&consoles::device_pipe(&joined.session_id))
        .await?;
    let (response, session, messages) = upgrade(&req, body)?;
    actix_web::rt::spawn(serve_device(state, joined, session, messages, pipe));
    Ok(response)
}

fn upgrade(
    req: &HttpRequest,
    body: web::Payload,
) -> Result<(HttpResponse, Session, AggregatedMessageStream), ApiError> {
    let (response, session, messages) = actix_ws::handle(req, body).map_err(|_| {
        ApiError::new(
            Code::InvalidRequest,
            "This route is a WebSocket; send an upgrade request.",
        )
    })?;
    let messages = messages
        .max_frame_size(MAX_FRAME_BYTES)
        .aggregate_continuations()
        .max_continuation_size(MAX_FRAME_BYTES);
    Ok((response, session, messages))
}

/// 403 unless the request's `Origin` is this server's own: the public URL's origin when
/// one is set, else the origin the request was made to.
fn check_origin(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    let refused = || {
        ApiError::new(
            Code::Forbidden,
            "The console opens only from this server's own pages.",
        )
    };
    let origin = req
        .headers()
        .get(actix_web::http::header::ORIGIN)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(refused)?;
    let expected = match state.config.public_url.as_deref() {
        Some(url) => url::Url::parse(url)
            .map(|url| url.origin().ascii_serialization())
            .map_err(|_| refused())?,
        None => {
            let info = req.connection_info();
            format!("{}://{}", info.scheme(), info.host())
        }
    };
    if origin == expected {
        Ok(())
    } else {
        Err(refused())
    }
}

/// What woke one end of a session.
enum Event {
    /// A text frame (or the end) from this end's WebSocket.
    Socket(Option<String>),
    /// A message from the other end.
    Pipe(Option<String>),
    Tick,
}

/// Why an end stopped: the code and sentence both ends are told.
struct End {
    code: &'static str,
    message: String,
}

impl End {
    fn new(code: &'static str, message: impl Into<String>) -> End {
        End {
            code,
            message: message.into(),
        }
    }

    fn from_error(error: &ApiError) -> End {
        End::new(error.code().name(), error.message().to_owned())
    }
}

/// Reads the next event of one end: a text frame, a message from the pipe, or a tick.
/// Pings are answered here; binary frames end the session.
async fn next_event(
    session: &mut Session,
    messages: &mut AggregatedMessageStream,
    pipe: &mut Pipe,
    ticks: &mut tokio::time::Interval,
) -> Event {
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(Ok(AggregatedMessage::Text(text))) => return Event::Socket(Some(text.to_string())),
                Some(Ok(AggregatedMessage::Ping(bytes))) => {
                    if session.pong(&bytes).await.is_err() {
                        return Event::Socket(None);
                    }
                }
                Some(Ok(AggregatedMessage::Pong(_))) => {}
                _ => return Event::Socket(None),
            },
            message = pipe.next() => return Event::Pipe(message),
            _ = ticks.tick() => return Event::Tick,
        }
    }
}

fn ticker(period: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

async fn send_json<T: serde::Serialize>(session: &mut Session, value: &T) -> Result<(), ()> {
    let text = serde_json::to_string(value).map_err(drop)?;
    session.text(text).await.map_err(drop)
}

/// The browser's end, from `ready` to `closed`.
async fn serve_browser(
    state: web::Data<AppState>,
    started: Started,
    mut session: Session,
    mut messages: AggregatedMessageStream,
    mut pipe: Pipe,
) {
    let ready = ServerToBrowser::Ready {
        session_id: started.session_id.clone(),
        seal_key: started.seal_key.clone(),
    };
    let end = match send_json(&mut session, &ready).await {
        Ok(()) => {
            BrowserEnd {
                state: &state,
                started: &started,
                session: &mut session,
                active: false,
            }
            .run(&mut messages, &mut pipe)
            .await
        }
        Err(()) => End::new("closed", "The browser left."),
    };
    drop(pipe);
    let to_device = ServerToDevice::Closed {
        code: end.code.to_owned(),
    };
    if let Ok(text) = serde_json::to_string(&to_device) {
        let _ = state
            .hub
            .send_pipe(&consoles::device_pipe(&started.session_id), text)
            .await;
    }
    let closed = ServerToBrowser::Closed {
        code: end.code.to_owned(),
        message: end.message.clone(),
    };
    let _ = send_json(&mut session, &closed).await;
    let _ = session
        .close(Some(CloseReason {
            code: CloseCode::Normal,
            description: Some(end.code.to_owned()),
        }))
        .await;
    tracing::info!(session = %started.session_id, code = end.code, "console session ended");
}

struct BrowserEnd<'a> {
    state: &'a AppState,
    started: &'a Started,
    session: &'a mut Session,
    /// The browser sent something since the unlock was last looked at.
    active: bool,
}

impl BrowserEnd<'_> {
    async fn run(&mut self, messages: &mut AggregatedMessageStream, pipe: &mut Pipe) -> End {
        let enc = match tokio::time::timeout(OPEN_WITHIN, self.first_open(messages)).await {
            Ok(Ok(enc)) => enc,
            Ok(Err(end)) => return end,
            Err(_) => return End::new("invalid_request", "The console was not opened in time."),
        };
        if let Err(error) = consoles::invite(&self.state.hub, self.started, &enc).await {
            return End::from_error(&error);
        }
        let mut ticks = ticker(UNLOCK_RECHECK);
        let mut since_ping = tokio::time::Instant::now();
        let mut attached = false;
        let joined_by = tokio::time::Instant::now() + consoles::JOIN_WITHIN;
        loop {
            let event = next_event(self.session, messages, pipe, &mut ticks).await;
            let outcome = match event {
                Event::Socket(None) => Err(End::new("closed", "The browser left.")),
                Event::Socket(Some(text)) => self.on_browser_text(&text).await,
                Event::Pipe(None) => Err(End::new("closed", "The session was replaced.")),
                Event::Pipe(Some(text)) => self.on_device_text(&text, &mut attached).await,
                Event::Tick => {
                    if !attached && tokio::time::Instant::now() > joined_by {
                        Err(End::new(
                            Code::DeviceTimeout.name(),
                            "The computer did not join the console in time.",
                        ))
                    } else {
                        self.tick(&mut since_ping).await
                    }
                }
            };
            if let Err(end) = outcome {
                return end;
            }
        }
    }

    /// Waits for the browser's `open` and returns its `enc`.
    async fn first_open(&mut self, messages: &mut AggregatedMessageStream) -> Result<String, End> {
        loop {
            match messages.next().await {
                Some(Ok(AggregatedMessage::Text(text))) => {
                    return match serde_json::from_str::<BrowserToServer>(&text) {
                        Ok(BrowserToServer::Open { enc }) => Ok(enc),
                        _ => Err(End::new(
                            Code::InvalidRequest.name(),
                            "The first console message must be `open` with the channel's enc.",
                        )),
                    };
                }
                Some(Ok(AggregatedMessage::Ping(bytes))) => {
                    let _ = self.session.pong(&bytes).await;
                }
                Some(Ok(AggregatedMessage::Pong(_))) => {}
                _ => return Err(End::new("closed", "The browser left.")),
            }
        }
    }

    async fn on_browser_text(&mut self, text: &str) -> Result<(), End> {
        let Ok(BrowserToServer::Message { seq, ct }) = serde_json::from_str(text) else {
            return Err(End::new(
                Code::InvalidRequest.name(),
                "After `open`, the browser sends only sealed `message`s.",
            ));
        };
        self.active = true;
        let to_device = serde_json::to_string(&ServerToDevice::Message { seq, ct })
            .map_err(|_| End::new("internal", "A message could not be passed on."))?;
        let taken = self
            .state
            .hub
            .send_pipe(&consoles::device_pipe(&self.started.session_id), to_device)
            .await
            .map_err(|error| End::from_error(&error))?;
        if taken {
            Ok(())
        } else {
            Err(End::new(
                Code::DeviceOffline.name(),
                "The computer left the console.",
            ))
        }
    }

    async fn on_device_text(&mut self, text: &str, attached: &mut bool) -> Result<(), End> {
        let Ok(message) = serde_json::from_str::<ServerToBrowser>(text) else {
            return Ok(());
        };
        match message {
            ServerToBrowser::Closed { code, message } => {
                let code = known_code(&code);
                Err(End::new(code, message))
            }
            ServerToBrowser::Attached => {
                *attached = true;
                send_json(self.session, &ServerToBrowser::Attached)
                    .await
                    .map_err(|()| End::new("closed", "The browser left."))
            }
            other => send_json(self.session, &other)
                .await
                .map_err(|()| End::new("closed", "The browser left.")),
        }
    }

    async fn tick(&mut self, since_ping: &mut tokio::time::Instant) -> Result<(), End> {
        let (store, session, account) = (
            &self.state.store,
            &self.started.browser_session,
            &self.started.account_id,
        );
        let live = if std::mem::take(&mut self.active) {
            console_unlocks::touch(store, session, account).await
        } else {
            console_unlocks::check(store, session, account).await
        };
        live.map_err(|error| End::from_error(&error))?;
        if since_ping.elapsed() >= PING_EVERY {
            *since_ping = tokio::time::Instant::now();
            self.session
                .ping(b"tether")
                .await
                .map_err(|_| End::new("closed", "The browser left."))?;
        }
        Ok(())
    }
}

/// A close code from the computer, as one of the codes the page knows (anything else is
/// `closed`): the computer's words are passed on, its codes are not trusted blindly.
fn known_code(code: &str) -> &'static str {
    match Code::from_name(code) {
        Some(Code::ConsoleOff) => Code::ConsoleOff.name(),
        Some(Code::ConsoleLocked) => Code::ConsoleLocked.name(),
        Some(Code::InvalidRequest) => Code::InvalidRequest.name(),
        _ => "closed",
    }
}

/// The computer's end, from joining to `closed`.
async fn serve_device(
    state: web::Data<AppState>,
    joined: Joined,
    mut session: Session,
    mut messages: AggregatedMessageStream,
    mut pipe: Pipe,
) {
    let to_browser = consoles::browser_pipe(&joined.session_id);
    let attached = serde_json::to_string(&ServerToBrowser::Attached).unwrap_or_default();
    let end = match state.hub.send_pipe(&to_browser, attached).await {
        Ok(true) => {
            DeviceEnd {
                state: &state,
                joined: &joined,
                session: &mut session,
                to_browser: &to_browser,
            }
            .run(&mut messages, &mut pipe)
            .await
        }
        _ => End::new("closed", "The browser left the console."),
    };
    drop(pipe);
    let closed = ServerToBrowser::Closed {
        code: end.code.to_owned(),
        message: end.message.clone(),
    };
    if let Ok(text) = serde_json::to_string(&closed) {
        let _ = state.hub.send_pipe(&to_browser, text).await;
    }
    let _ = send_json(
        &mut session,
        &ServerToDevice::Closed {
            code: end.code.to_owned(),
        },
    )
    .await;
    let _ = session
        .close(Some(CloseReason {
            code: CloseCode::Normal,
            description: Some(end.code.to_owned()),
        }))
        .await;
}

struct DeviceEnd<'a> {
    state: &'a AppState,
    joined: &'a Joined,
    session: &'a mut Session,
    to_browser: &'a str,
}

impl DeviceEnd<'_> {
    async fn run(&mut self, messages: &mut AggregatedMessageStream, pipe: &mut Pipe) -> End {
        let mut ticks = ticker(PING_EVERY);
        loop {
            let event = next_event(self.session, messages, pipe, &mut ticks).await;
            let outcome = match event {
                Event::Socket(None) => Err(End::new("closed", "The computer left the console.")),
                Event::Socket(Some(text)) => self.on_device_text(&text).await,
                Event::Pipe(None) => Err(End::new("closed", "The session was replaced.")),
                Event::Pipe(Some(text)) => self.on_browser_text(&text).await,
                Event::Tick => self
                    .session
                    .ping(b"tether")
                    .await
                    .map_err(|_| End::new("closed", "The computer left the console.")),
            };
            if let Err(end) = outcome {
                return end;
            }
        }
    }

    async fn on_device_text(&mut self, text: &str) -> Result<(), End> {
        let message = serde_json::from_str::<DeviceToServer>(text).map_err(|_| {
            End::new(
                Code::InvalidRequest.name(),
                "The computer sent a console frame this server does not know.",
            )
        })?;
        match message {
            DeviceToServer::Message { seq, ct } => {
                let to_browser = serde_json::to_string(&ServerToBrowser::Message { seq, ct })
                    .map_err(|_| End::new("internal", "A message could not be passed on."))?;
                let taken = self
                    .state
                    .hub
                    .send_pipe(self.to_browser, to_browser)
                    .await
                    .map_err(|error| End::from_error(&error))?;
                if taken {
                    Ok(())
                } else {
                    Err(End::new("closed", "The browser left the console."))
                }
            }
            DeviceToServer::Command { program, folder } => {
                consoles::record_command(&self.state.store, self.joined, &program, &folder)
                    .await
                    .map_err(|error| End::from_error(&error))
            }
            DeviceToServer::Refuse { code, message } => Err(End::new(
                known_code(&code),
                message.chars().take(500).collect::<String>(),
            )),
        }
    }

    async fn on_browser_text(&mut self, text: &str) -> Result<(), End> {
        match serde_json::from_str::<ServerToDevice>(text) {
            Ok(ServerToDevice::Closed { code }) => Err(End::new(known_code(&code), "")),
            Ok(message) => send_json(self.session, &message)
                .await
                .map_err(|()| End::new("closed", "The computer left the console.")),
            Err(_) => Ok(()),
        }
    }
}
