//! A TCP proxy between the agent and the server that a test can cut: to make a network
//! outage, to drop the event stream only, or to hold every connection open and silent (a
//! partition nobody is told of), while the server itself keeps running.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// What the proxy lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Open,
    /// Everything but the event stream.
    NoEvents,
    /// Nothing: every connection is closed at once.
    Down,
}

pub struct Proxy {
    /// `http://127.0.0.1:PORT`, to pair the agent with.
    pub base: String,
    state: Arc<State>,
    accept: AbortHandle,
}

struct State {
    upstream: String,
    mode: Mutex<Mode>,
    /// Open connections, and whether each is the event stream.
    connections: Mutex<Vec<(bool, AbortHandle)>>,
    /// How many event-stream connections were let through.
    events_opened: Mutex<usize>,
    /// While true, nothing goes either way and no connection is closed: open ones fall
    /// silent, new ones are accepted and never answered.
    held: watch::Sender<bool>,
}

impl Proxy {
    /// Forwards `127.0.0.1:<free port>` to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            upstream: upstream.trim_start_matches("http://").to_owned(),
            mode: Mutex::new(Mode::Open),
            connections: Mutex::new(Vec::new()),
            events_opened: Mutex::new(0),
            held: watch::Sender::new(false),
        });
        let accepting = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let state = accepting.clone();
                tokio::spawn(async move { forward(state, socket).await });
            }
        })
        .abort_handle();
        Proxy {
            base,
            state,
            accept,
        }
    }

    /// A network outage: every open connection dies, new ones are closed at once.
    pub fn cut(&self) {
        self.set(Mode::Down, |_| true);
    }

    /// Drops the event stream (and refuses it from now on); everything else goes through.
    pub fn drop_events(&self) {
        self.set(Mode::NoEvents, |is_events| is_events);
    }

    /// A partition that holds connections open: every call waits for an answer that does
    /// not come, until [`Proxy::release`].
    pub fn hold(&self) {
        self.state.held.send_replace(true);
    }

    /// Ends the hold: the connections it held are closed (their calls fail, as when a
    /// partition heals), new ones go through.
    pub fn release(&self) {
        self.state.held.send_replace(false);
    }

    /// Lets everything through again.
    pub fn restore(&self) {
        *self.state.mode.lock().unwrap() = Mode::Open;
    }

    pub fn events_opened(&self) -> usize {
        *self.state.events_opened.lock().unwrap()
    }

    fn set(&self, mode: Mode, kill: impl Fn(bool) -> bool) {
        *self.state.mode.lock().unwrap() = mode;
        let mut connections = self.state.connections.lock().unwrap();
        connections.retain(|(is_events, handle)| {
            if kill(*is_events) {
                handle.abort();
                false
            } else {
                !handle.is_finished()
            }
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.set(Mode::Down, |_| true);
    }
}

async fn forward(state: Arc<State>, mut client: TcpStream) {
    if *state.mode.lock().unwrap() == Mode::Down {
        return;
    }
    if *state.held.borrow() {
        return hold(&state, client).await;
    }
    // Read the request head to tell the event stream from the other calls.
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match client.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let is_events = head.starts_with(b"GET /api/devices/self/events");
    let mode = *state.mode.lock().unwrap();
    if mode == Mode::Down || (is_events && mode == Mode::NoEvents) {
        return;
    }
    if *state.held.borrow() {
        return hold(&state, client).await;
    }
    let Ok(mut server) = TcpStream::connect(&state.upstream).await else {
        return;
    };
    if is_events {
        *state.events_opened.lock().unwrap() += 1;
    }
    let mut held = state.held.subscribe();
    let task = tokio::spawn(async move {
        if server.write_all(&head).await.is_err() {
            return;
        }
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
            _ = held.wait_for(|held| *held) => {}
        }
        // Held: the server's side goes, the agent's stays open and silent until released.
        drop(server);
        let _ = held.wait_for(|held| !*held).await;
    });
    state
        .connections
        .lock()
        .unwrap()
        .push((is_events, task.abort_handle()));
    // Cut while this one was being set up: it goes too.
    let mode = *state.mode.lock().unwrap();
    if mode == Mode::Down || (is_events && mode == Mode::NoEvents) {
        task.abort();
    }
}

/// Keeps `client` open, reading and answering nothing, until the hold ends (or the client
/// gives up); then closes it.
async fn hold(state: &State, mut client: TcpStream) {
    let mut held = state.held.subscribe();
    let mut sink = [0u8; 4096];
    tokio::select! {
        _ = async { while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {} } => {}
        _ = held.wait_for(|held| !*held) => {}
    }
}
