//! One console session, from the server's `console.open` frame to its end.
//!
//! [`serve`] opens the session's socket ([`console_socket`]), refuses at once
//! (`DeviceToServer::Refuse`) when the console is off, when [`MAX_SESSIONS`] already run,
//! or when the channel cannot be accepted (not paired, no seal key, a bad `enc`); then
//! [`run_channel`] serves it:
//!
//! - every `message` must carry the number right after the last one opened — the channel
//!   would allow a gap, the console does not: a gap (a dropped message), a repeat or a step
//!   back ends the session with an error, as does a message that does not open;
//! - its plaintext is a [`ConsoleRequest`] (at most [`MAX_SEALED_CHARS`] of ciphertext); the
//!   configuration is read again first, and the console being off ends the session;
//! - each answer is a sealed [`ConsoleReply`], numbered from 1 by the channel's sender;
//! - at most one command runs at a time ([`terminal`]); its ledger entry
//!   (`DeviceToServer::Command`: the program and the folder label, never arguments or
//!   output) goes out once it passed the judge; at most [`MAX_WATCHES`] watches;
//! - `closed` from the server, or the socket's end, stops everything of the session: the
//!   running command's whole tree is killed and waited for (bounded), watches end.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use tether_protocol::console::{
    ConsoleReply, ConsoleRequest, DeviceToServer, ServerToDevice, MAX_SEALED_CHARS,
};
use tether_seal::channel::{self, ChannelId, Message, Receiver, Sender};
use tether_seal::Kid;
use tokio::sync::{mpsc, Notify};
use tokio::task::{JoinHandle, JoinSet};

use crate::console::code::{self, CodeRequest};
use crate::console::terminal::{self, Judged, Limits};
use crate::console::{watch, ConsoleContext, MAX_SESSIONS};
use crate::local::seal_key::SealKeyPair;
use crate::remote::client::DeviceClient;
use crate::remote::console_socket::{self, ConsoleEnds};

/// Most jobs one session watches at once.
pub const MAX_WATCHES: usize = 4;
/// Replies waiting to be sealed and sent.
const REPLY_QUEUE: usize = 64;
/// How long a session's command gets to stop when the session ends.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// The server said `closed` (with its code).
    Closed(String),
    /// The socket ended.
    Gone,
    /// The console was turned off on this computer.
    Off,
    /// A message broke the channel's rules (out of order, unopenable, too large).
    Broken(String),
}

/// Serves console session `session_id`, whose channel the browser started with `enc`.
pub async fn serve(ctx: ConsoleContext, client: DeviceClient, session_id: String, enc: String) {
    let ends = match console_socket::connect(&client, &session_id).await {
        Ok(ends) => ends,
        Err(why) => {
            tracing::warn!(session = %session_id, "console session not joined: {why}");
            return;
        }
    };
    let ConsoleEnds { incoming, outgoing } = ends;
    let refuse = |code: &str, message: String| DeviceToServer::Refuse {
        code: code.to_owned(),
        message,
    };
    let config = (ctx.config)();
    if !config.console {
        let message = "the console is off on this computer (`tether-agent console on`)";
        let _ = outgoing
            .send(refuse("console_off", message.to_owned()))
            .await;
        return;
    }
    let Ok(_turn) = ctx.sessions.clone().try_acquire_owned() else {
        let message =
            format!("this computer serves at most {MAX_SESSIONS} console sessions at once");
        let _ = outgoing.send(refuse("console_busy", message)).await;
        return;
    };
    let data_dir = ctx.data_dir.clone();
    let (id, opening) = (session_id.clone(), enc);
    let accepted = tokio::task::spawn_blocking(move || {
        let pairing = config
            .pairing
            .ok_or_else(|| "this computer is not paired".to_owned())?;
        let key = match SealKeyPair::load(&data_dir) {
            Ok(Some(key)) => key,
            Ok(None) => return Err("this computer has no seal key".to_owned()),
            Err(err) => return Err(format!("the seal key cannot be opened: {err:#}")),
        };
        accept(&key, &pairing.device_id, &id, &opening)
    })
    .await
    .unwrap_or_else(|_| Err("the channel could not be accepted".to_owned()));
    let (sender, receiver) = match accepted {
        Ok(ends) => ends,
        Err(why) => {
            tracing::warn!(session = %session_id, "console session refused: {why}");
            let _ = outgoing.send(refuse("bad_channel", why)).await;
            return;
        }
    };
    tracing::info!(session = %session_id, "console session joined");
    let end = run_channel(&ctx, sender, receiver, incoming, outgoing).await;
    tracing::info!(session = %session_id, ?end, "console session ended");
}

/// This device's ends of the channel the browser started with `enc` (base64url) for session
/// `session_id`.
///
/// # Errors
/// Why it cannot be accepted, in a sentence.
pub fn accept(
    key: &SealKeyPair,
    device_id: &tether_protocol::DeviceId,
    session_id: &str,
    enc: &str,
) -> Result<(Sender, Receiver), String> {
    let kid = Kid::parse(&key.public().kid).map_err(|err| err.to_string())?;
    let enc = URL_SAFE_NO_PAD
        .decode(enc)
        .map_err(|_| "the channel's enc is not base64url".to_owned())?;
    let channel_id = ChannelId::new(session_id.as_bytes()).map_err(|err| err.to_string())?;
    let keys =
        channel::accept(key.secret(), &kid, device_id, &enc).map_err(|err| err.to_string())?;
    Ok(keys.device_ends(&channel_id))
}

/// The command running in a session.
struct Running {
    id: u32,
    kill: Arc<Notify>,
    task: JoinHandle<()>,
}

/// One session's state while it is served.
struct Session<'a> {
    ctx: &'a ConsoleContext,
    sender: Sender,
    outgoing: mpsc::Sender<DeviceToServer>,
    replies: mpsc::Sender<ConsoleReply>,
    running: Option<Running>,
    watches: JoinSet<()>,
}

/// Serves an accepted channel until the session ends; see the module's header.
pub async fn run_channel(
    ctx: &ConsoleContext,
    sender: Sender,
    mut receiver: Receiver,
    mut incoming: mpsc::Receiver<ServerToDevice>,
    outgoing: mpsc::Sender<DeviceToServer>,
) -> SessionEnd {
    let (replies, mut replies_out) = mpsc::channel(REPLY_QUEUE);
    let mut session = Session {
        ctx,
        sender,
        outgoing,
        replies,
        running: None,
        watches: JoinSet::new(),
    };
    let end = loop {
        tokio::select! {
            frame = incoming.recv() => {
                let (seq, ct) = match frame {
                    None => break SessionEnd::Gone,
                    Some(ServerToDevice::Closed { code }) => break SessionEnd::Closed(code),
                    Some(ServerToDevice::Message { seq, ct }) => (seq, ct),
                };
                let request = match open(&mut receiver, seq, &ct) {
                    Ok(request) => request,
                    Err(why) => {
                        session.send(ConsoleReply::Error { reason: why.clone() }).await;
                        break SessionEnd::Broken(why);
                    }
                };
                let request = match request {
                    Ok(request) => request,
                    Err(why) => {
                        session.send(ConsoleReply::Error { reason: why }).await;
                        continue;
                    }
                };
                if let Some(end) = session.handle(request).await {
                    break end;
                }
            }
            Some(reply) = replies_out.recv() => {
                if let ConsoleReply::Exit { id, .. } | ConsoleReply::Refused { id, .. } = &reply {
                    if session.running.as_ref().is_some_and(|running| running.id == *id) {
                        session.running = None;
                    }
                }
                session.send(reply).await;
            }
        }
    };
    // Nothing more is sent: a command still printing is not held up by a full queue.
    drop(replies_out);
    session.stop().await;
    end
}

/// Opens message `seq`: the request, or why the request is not one (answered, the session
/// goes on).
///
/// # Errors
/// Why the session ends: the number is not the next one, the message is too large or does
/// not open.
fn open(
    receiver: &mut Receiver,
    seq: u64,
    ct: &str,
) -> Result<Result<ConsoleRequest, String>, String> {
    let expected = receiver.last_seq() + 1;
    if seq != expected {
        return Err(format!(
            "console message {seq} arrived where {expected} was due: the session ends"
        ));
    }
    if ct.len() > MAX_SEALED_CHARS {
        return Err("a console message is too large".to_owned());
    }
    let ct = URL_SAFE_NO_PAD
        .decode(ct)
        .map_err(|_| "a console message is not base64url".to_owned())?;
    let plaintext = receiver
        .open(&Message { seq, ct })
        .map_err(|err| err.to_string())?;
    Ok(serde_json::from_slice::<ConsoleRequest>(&plaintext)
        .map_err(|err| format!("not a console request: {err}")))
}

impl Session<'_> {
    /// Seals `reply` and sends it.
    async fn send(&mut self, reply: ConsoleReply) {
        let Ok(plaintext) = serde_json::to_vec(&reply) else {
            return;
        };
        match self.sender.seal(&plaintext) {
            Ok(message) => {
                let frame = DeviceToServer::Message {
                    seq: message.seq,
                    ct: URL_SAFE_NO_PAD.encode(&message.ct),
                };
                let _ = self.outgoing.send(frame).await;
            }
            Err(err) => tracing::warn!("a console reply could not be sealed: {err}"),
        }
    }

    /// Answers one request; `Some` when the session ends.
    async fn handle(&mut self, request: ConsoleRequest) -> Option<SessionEnd> {
        let config = (self.ctx.config)();
        if !config.console {
            let reason = "the console was turned off on this computer".to_owned();
            self.send(ConsoleReply::Error { reason }).await;
            return Some(SessionEnd::Off);
        }
        let code_request = match request {
            ConsoleRequest::Folders {} => {
                let folders = config.folders.iter().map(|f| f.label.clone()).collect();
                self.send(ConsoleReply::Folders { folders }).await;
                return None;
            }
            ConsoleRequest::Run {
                id,
                folder,
                line,
                confirmed,
                cols,
                rows,
            } => {
                let strength = self.ctx.sandbox.report().strength;
                let judged = terminal::judge(
                    &config,
                    &self.ctx.guard,
                    strength,
                    &folder,
                    &line,
                    confirmed,
                );
                self.start(id, judged, (cols, rows)).await;
                return None;
            }
            ConsoleRequest::Interrupt { id } => {
                match &self.running {
                    Some(running) if running.id == id => running.kill.notify_one(),
                    _ => {
                        let reason = format!("no command {id} is running");
                        self.send(ConsoleReply::Error { reason }).await;
                    }
                }
                return None;
            }
            ConsoleRequest::Watch { job_id } => {
                self.watch(job_id).await;
                return None;
            }
            ConsoleRequest::List { folder, path } => CodeRequest::List { folder, path },
            ConsoleRequest::Read { folder, path } => CodeRequest::Read { folder, path },
            ConsoleRequest::Write {
                folder,
                path,
                base_hash,
                text,
            } => CodeRequest::Write {
                folder,
                path,
                base_hash,
                text,
            },
        };
        let (data_dir, guard) = (self.ctx.data_dir.clone(), self.ctx.guard.clone());
        let reply = tokio::task::spawn_blocking(move || {
            code::answer(&data_dir, &guard, &config, code_request)
        })
        .await
        .unwrap_or_else(|_| ConsoleReply::Error {
            reason: "the request failed".to_owned(),
        });
        self.send(reply).await;
        None
    }

    /// Starts command `id` when it passed the judge and none runs.
    async fn start(&mut self, id: u32, judged: Judged, window: (u16, u16)) {
        if let Some(running) = &self.running {
            let reason = format!(
                "command {} is still running: interrupt it or wait for it to end",
                running.id
            );
            self.send(ConsoleReply::Refused { id, reason }).await;
            return;
        }
        let approved = match judged {
            Judged::Refused(reason) => {
                self.send(ConsoleReply::Refused { id, reason }).await;
                return;
            }
            Judged::Confirm(reason) => {
                self.send(ConsoleReply::Confirm { id, reason }).await;
                return;
            }
            Judged::Approved(approved) => approved,
        };
        let entry = DeviceToServer::Command {
            program: approved.program.clone(),
            folder: approved.label.clone(),
        };
        let _ = self.outgoing.send(entry).await;
        let kill = Arc::new(Notify::new());
        let (sandbox, guard) = (self.ctx.sandbox.clone(), self.ctx.guard.clone());
        let (stop, replies) = (kill.clone(), self.replies.clone());
        let task = tokio::spawn(async move {
            let limits = Limits::DEFAULT;
            let output = replies.clone();
            let ended = terminal::run(
                &sandbox, &guard, &approved, id, window, limits, stop, output,
            )
            .await;
            let _ = replies.send(ended).await;
        });
        self.running = Some(Running { id, kill, task });
    }

    async fn watch(&mut self, job_id: tether_protocol::JobId) {
        while self.watches.try_join_next().is_some() {}
        if self.watches.len() >= MAX_WATCHES {
            let reason = format!("a session watches at most {MAX_WATCHES} jobs at once");
            self.send(ConsoleReply::Error { reason }).await;
            return;
        }
        match watch::subscribe(&self.ctx.taps, &job_id) {
            Ok(output) => {
                self.watches
                    .spawn(watch::forward(job_id, output, self.replies.clone()));
            }
            Err(ended) => self.send(ended).await,
        }
    }

    /// Stops the running command (its whole tree, waited for) and every watch.
    async fn stop(&mut self) {
        self.watches.abort_all();
        if let Some(running) = self.running.take() {
            running.kill.notify_one();
            let mut task = running.task;
            if tokio::time::timeout(STOP_WAIT, &mut task).await.is_err() {
                tracing::warn!("a console command did not stop in time");
                task.abort();
            }
        }
    }
}
