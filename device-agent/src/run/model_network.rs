//! The `model` network of an engine: it may reach its model endpoints and nothing else.
//!
//! Under bubblewrap the engine has no network but its own loopback, where the launcher
//! serves [`Forward`]s: each port bridged to a Unix socket in the run's private folder. On
//! this side of the sockets, [`ModelNetwork`] answers them:
//!
//! - a loopback origin (`http://127.0.0.1:41234`) gets `fwd-<port>.sock`, relayed to exactly
//!   that host and port;
//! - the other origins share one filtering proxy, `proxy.sock`, forwarded on a free port and
//!   named in `HTTPS_PROXY`: it tunnels `CONNECT host:port` for an allowed origin's host and
//!   port only, and resolves nothing before a request is allowed.
//!
//! Each connection is logged at debug level (host and port, never data); refused ones are
//! counted for the run's output.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::local::origins::{parse_authority, Origin};
use crate::local::private_files::{create_private_dir, hex};
use crate::sandbox::Forward;

/// The first port the proxy is offered on inside the sandbox (the usual proxy port).
const PROXY_PORT: u16 = 3128;
/// The largest request head the proxy reads.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long reaching an endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How many distinct refused endpoints are remembered.
const MAX_REFUSED_LISTED: usize = 20;
/// The loopback names clients must reach directly (through their forwards).
const NO_PROXY: &str = "127.0.0.1,localhost,::1";

/// One run's relays and proxy, serving until dropped (then the sockets are removed).
pub struct ModelNetwork {
    forwards: Vec<Forward>,
    proxy_port: Option<u16>,
    dir: PathBuf,
    tally: Arc<Tally>,
    tasks: Vec<JoinHandle<()>>,
}

impl ModelNetwork {
    /// Listens in `dir` (made private if missing): a relay socket per loopback port among
    /// `origins`, and the proxy when any origin is elsewhere. Needs a tokio runtime.
    ///
    /// # Errors
    /// When there is no origin, or the folder or a socket cannot be made.
    pub fn start(origins: &[Origin], dir: &Path) -> Result<ModelNetwork, String> {
        if origins.is_empty() {
            return Err("the engine names no model endpoint".to_owned());
        }
        let dir = private_folder(dir)?;
        let tally = Arc::new(Tally::default());
        let mut network = ModelNetwork {
            forwards: Vec::new(),
            proxy_port: None,
            dir,
            tally,
            tasks: Vec::new(),
        };
        for (port, hosts) in loopback_ports(origins) {
            let socket = network.dir.join(format!("fwd-{port}.sock"));
            let listener = listen(&socket)?;
            let targets = Arc::new(loopback_targets(&hosts, port));
            network
                .tasks
                .push(tokio::spawn(relay_all(listener, targets)));
            network.forwards.push(Forward { port, socket });
        }
        if origins.iter().any(|origin| !origin.is_loopback()) {
            let port = proxy_port(&network.forwards);
            let socket = network.dir.join("proxy.sock");
            let listener = listen(&socket)?;
            let allowed: BTreeSet<(String, u16)> = origins
                .iter()
                .map(|origin| (origin.host.clone(), origin.port))
                .collect();
            let proxy = Arc::new(Proxy {
                allowed,
                tally: network.tally.clone(),
            });
            network.tasks.push(tokio::spawn(proxy_all(listener, proxy)));
            network.forwards.push(Forward { port, socket });
            network.proxy_port = Some(port);
        }
        Ok(network)
    }

    /// What the sandbox serves on its loopback ports ([`crate::sandbox::Sandbox::prepare_forwarded`]).
    pub fn forwards(&self) -> Vec<Forward> {
        self.forwards.clone()
    }

    /// The sockets, for the policy's readable paths (`prepare_forwarded` adds them too).
    pub fn readable(&self) -> Vec<PathBuf> {
        self.forwards.iter().map(|f| f.socket.clone()).collect()
    }

    /// The engine's proxy variables (none when every endpoint is on loopback): every client
    /// that honours `HTTPS_PROXY` reaches the other endpoints through the proxy.
    pub fn env(&self) -> Vec<(String, String)> {
        let Some(port) = self.proxy_port else {
            return Vec::new();
        };
        let proxy = format!("http://127.0.0.1:{port}");
        let mut env = Vec::new();
        for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
            env.push((name.to_owned(), proxy.clone()));
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.push((name.to_owned(), NO_PROXY.to_owned()));
        }
        env
    }

    /// How many connections the proxy refused.
    pub fn refused_count(&self) -> u64 {
        self.tally.count.load(Ordering::Relaxed)
    }

    /// The distinct `host:port` refused (the first [`MAX_REFUSED_LISTED`]).
    pub fn refused(&self) -> Vec<String> {
        self.tally.listed().into_iter().collect()
    }

    /// The line for the run's output, when anything was refused.
    pub fn summary(&self) -> Option<String> {
        let count = self.refused_count();
        if count == 0 {
            return None;
        }
        Some(format!(
            "tether: refused {count} connection{} outside the model endpoints ({})",
            if count == 1 { "" } else { "s" },
            self.refused().join(", ")
        ))
    }
}

impl Drop for ModelNetwork {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for forward in &self.forwards {
            let _ = std::fs::remove_file(&forward.socket);
        }
        // Only when empty: nothing else in the folder is ours to remove.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A new folder for one run's sockets: `<data dir>-runs/model-<random>/` (beside the data
/// dir runs never see, cleared with the brokers' sockets at the daemon's start).
pub fn run_folder(data_dir: &Path) -> PathBuf {
    let mut raw = [0u8; 9];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut raw);
    crate::run::secret_http::runs_root(data_dir).join(format!("model-{}", hex(&raw)))
}

/// The refused connections.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    listed: Mutex<BTreeSet<String>>,
}

impl Tally {
    fn refuse(&self, authority: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut listed) = self.listed.lock() {
            if listed.len() < MAX_REFUSED_LISTED {
                listed.insert(authority.to_owned());
            }
        }
    }

    fn listed(&self) -> BTreeSet<String> {
        self.listed.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// `dir`, made (0700) if missing, with links resolved: the path the sandbox binds.
fn private_folder(dir: &Path) -> Result<PathBuf, String> {
    create_private_dir(dir).map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    dir.canonicalize()
        .map_err(|err| format!("cannot open {}: {err}", dir.display()))
}

/// Listens on `socket`, replacing a socket an earlier run left there.
fn listen(socket: &Path) -> Result<UnixListener, String> {
    if std::fs::symlink_metadata(socket).is_ok_and(|meta| meta.file_type().is_socket()) {
        let _ = std::fs::remove_file(socket);
    }
    UnixListener::bind(socket)
        .map_err(|err| format!("cannot listen on {}: {err}", socket.display()))
}

/// The loopback origins' ports, each with its hosts.
fn loopback_ports(origins: &[Origin]) -> BTreeMap<u16, Vec<String>> {
    let mut ports: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for origin in origins.iter().filter(|origin| origin.is_loopback()) {
        let hosts = ports.entry(origin.port).or_default();
        if !hosts.contains(&origin.host) {
            hosts.push(origin.host.clone());
        }
    }
    ports
}

/// The addresses a loopback port is relayed to, in order, without asking any resolver.
fn loopback_targets(hosts: &[String], port: u16) -> Vec<SocketAddr> {
    let mut targets = Vec::new();
    for host in hosts {
        let addresses: &[SocketAddr] = match host.as_str() {
            "127.0.0.1" => &[SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)],
            "[::1]" => &[SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port)],
            _ => &[
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
                SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port),
            ],
        };
        for address in addresses {
            if !targets.contains(address) {
                targets.push(*address);
            }
        }
    }
    targets
}

/// The first port from [`PROXY_PORT`] that no loopback origin uses.
fn proxy_port(forwards: &[Forward]) -> u16 {
    let mut port = PROXY_PORT;
    while forwards.iter().any(|forward| forward.port == port) {
        port += 1;
    }
    port
}

async fn relay_all(listener: UnixListener, targets: Arc<Vec<SocketAddr>>) {
    let mut connections = JoinSet::new();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(relay(stream, targets.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
        while connections.try_join_next().is_some() {}
    }
}

/// One connection of a loopback origin, to the first of its addresses that answers.
async fn relay(mut client: UnixStream, targets: Arc<Vec<SocketAddr>>) {
    for target in targets.iter() {
        if let Ok(Ok(mut upstream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await
        {
            tracing::debug!("model network: relaying a connection to {target}");
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            return;
        }
    }
    tracing::debug!("model network: nothing answers on {targets:?}");
}

/// What the proxy allows, and where it counts what it refuses.
struct Proxy {
    /// Hosts (as [`Origin`] spells them) and ports.
    allowed: BTreeSet<(String, u16)>,
    tally: Arc<Tally>,
}

async fn proxy_all(listener: UnixListener, proxy: Arc<Proxy>) {
    let mut connections = JoinSet::new();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(tunnel(stream, proxy.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
        while connections.try_join_next().is_some() {}
    }
}

/// A refusal: the status line and a short reason.
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    status: &'static str,
    reason: String,
}

impl Reply {
    fn bad(reason: &str) -> Reply {
        Reply {
            status: "400 Bad Request",
            reason: reason.to_owned(),
        }
    }

    async fn send(&self, client: &mut UnixStream) {
        let body = format!("{}\n", self.reason);
        let text = format!(
            "HTTP/1.1 {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            body.len()
        );
        let _ = client.write_all(text.as_bytes()).await;
        let _ = client.shutdown().await;
    }
}

/// One proxy connection: its `CONNECT`, checked, then the bytes both ways.
async fn tunnel(mut client: UnixStream, proxy: Arc<Proxy>) {
    let (head, early) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(read)) => read,
        Ok(Err(reply)) => return reply.send(&mut client).await,
        Err(_) => {
            return Reply::bad("the request took too long to arrive")
                .send(&mut client)
                .await
        }
    };
    let (host, port) = match target(&head) {
        Ok(target) => target,
        Err(reply) => return reply.send(&mut client).await,
    };
    let authority = format!("{host}:{port}");
    if !proxy.allowed.contains(&(host.clone(), port)) {
        tracing::debug!("model network: refused a connection to {authority}");
        proxy.tally.refuse(&authority);
        let reason = format!("{authority} is not one of this engine's model endpoints");
        return Reply {
            status: "403 Forbidden",
            reason,
        }
        .send(&mut client)
        .await;
    }
    let mut upstream = match connect(&host, port).await {
        Ok(upstream) => upstream,
        Err(reason) => {
            return Reply {
                status: "502 Bad Gateway",
                reason,
            }
            .send(&mut client)
            .await
        }
    };
    tracing::debug!("model network: tunnelling a connection to {authority}");
    let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
    if client.write_all(established).await.is_err() || upstream.write_all(&early).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Reaches an allowed endpoint (resolving its name only now).
async fn connect(host: &str, port: u16) -> Result<TcpStream, String> {
    let name = host.trim_start_matches('[').trim_end_matches(']');
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((name, port))).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(err)) => Err(format!("{host}:{port} cannot be reached: {err}")),
        Err(_) => Err(format!("{host}:{port} did not answer in time")),
    }
}

/// The request head (up to its blank line, at most [`MAX_HEAD`] bytes), and whatever came
/// after it already (a client may send its TLS hello at once).
async fn read_head(client: &mut UnixStream) -> Result<(String, Vec<u8>), Reply> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find_blank_line(&buffer) {
            let early = buffer.split_off(end);
            let head =
                String::from_utf8(buffer).map_err(|_| Reply::bad("the request is not text"))?;
            return Ok((head, early));
        }
        if buffer.len() > MAX_HEAD {
            return Err(Reply::bad("the request head is larger than 8 KiB"));
        }
        let read = client
            .read(&mut chunk)
            .await
            .map_err(|_| Reply::bad("the request could not be read"))?;
        if read == 0 {
            return Err(Reply::bad("the request ended before its blank line"));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// Where the head ends: just past its first `\r\n\r\n`, within [`MAX_HEAD`].
fn find_blank_line(buffer: &[u8]) -> Option<usize> {
    let limit = buffer.len().min(MAX_HEAD);
    buffer[..limit]
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// The host and port of a `CONNECT host:port HTTP/1.x` head.
fn target(head: &str) -> Result<(String, u16), Reply> {
    let line = head.split("\r\n").next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(authority), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(Reply::bad("the request line is not METHOD TARGET VERSION"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Reply::bad("only HTTP/1 requests are understood"));
    }
    if method != "CONNECT" {
        return Err(Reply {
            status: "405 Method Not Allowed",
            reason: "this proxy only tunnels (CONNECT); reach the model endpoint over https"
                .to_owned(),
        });
    }
    match parse_authority(authority) {
        Ok((host, Some(port))) => Ok((host, port)),
        Ok((_, None)) => Err(Reply::bad("CONNECT needs host:port")),
        Err(why) => Err(Reply::bad(&format!("the target is not host:port ({why})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::AtomicUsize;
    use tokio::net::TcpListener;

    fn origin(url: &str) -> Origin {
        Origin::parse(url).unwrap_or_else(|err| panic!("{err}"))
    }

    /// A loopback TCP server that echoes what it reads, counting connections.
    async fn echo_server() -> (u16, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut reader, mut writer) = stream.split();
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                });
            }
        });
        (port, count)
    }

    async fn connect_unix(path: &Path) -> UnixStream {
        UnixStream::connect(path)
            .await
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    /// Sends `request` to the proxy and reads the answer's first line (and the stream).
    async fn ask(socket: &Path, request: &[u8]) -> (String, UnixStream) {
        let mut stream = connect_unix(socket).await;
        let _ = stream.write_all(request).await;
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n") {
            match stream.read(&mut byte).await {
                Ok(1) => answer.push(byte[0]),
                _ => break,
            }
        }
        (String::from_utf8_lossy(&answer).trim().to_owned(), stream)
    }

    async fn echoes(stream: &mut UnixStream) -> bool {
        if stream.write_all(b"ping").await.is_err() {
            return false;
        }
        let mut got = [0u8; 4];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut got)).await;
        matches!(read, Ok(Ok(_))) && &got == b"ping"
    }

    #[tokio::test]
    async fn the_proxy_tunnels_only_to_allowed_endpoints() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let (allowed_port, allowed_count) = echo_server().await;
        let (other_port, other_count) = echo_server().await;
        let origins = [
            origin(&format!("http://127.0.0.1:{allowed_port}")),
            origin("https://model.invalid"),
        ];
        let dir = tmp.path().join("run");
        let network = ModelNetwork::start(&origins, &dir).unwrap_or_else(|err| panic!("{err}"));
        let forwards = network.forwards();
        assert_eq!(forwards.len(), 2, "{forwards:?}");
        assert_eq!(forwards[0].port, allowed_port);
        assert_eq!(forwards[1].port, proxy_port(&forwards[..1]));
        let proxy = forwards[1].socket.clone();
        assert!(proxy.ends_with("proxy.sock"));
        let env = network.env();
        let proxy_url = format!("http://127.0.0.1:{}", forwards[1].port);
        assert!(
            env.contains(&("HTTPS_PROXY".to_owned(), proxy_url)),
            "{env:?}"
        );
        assert!(env.contains(&("NO_PROXY".to_owned(), NO_PROXY.to_owned())));

        // The loopback origin's own socket relays to it.
        let mut relayed = connect_unix(&forwards[0].socket).await;
        assert!(echoes(&mut relayed).await);

        let request = format!("CONNECT 127.0.0.1:{allowed_port} HTTP/1.1\r\nHost: x\r\n\r\n");
        let (answer, mut tunnel) = ask(&proxy, request.as_bytes()).await;
        assert_eq!(answer, "HTTP/1.1 200 Connection established");
        let mut blank = [0u8; 2];
        let _ = tunnel.read_exact(&mut blank).await;
        assert!(echoes(&mut tunnel).await);
        assert_eq!(allowed_count.load(Ordering::SeqCst), 2);

        let request = format!("CONNECT 127.0.0.1:{other_port} HTTP/1.1\r\n\r\n");
        let (answer, _) = ask(&proxy, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let (answer, _) = ask(&proxy, b"CONNECT model.invalid:444 HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(other_count.load(Ordering::SeqCst), 0);
        assert_eq!(network.refused_count(), 2);
        assert_eq!(
            network.refused(),
            [
                format!("127.0.0.1:{other_port}"),
                "model.invalid:444".to_owned()
            ]
        );
        assert!(network
            .summary()
            .is_some_and(|line| line.contains("refused 2 connections")));

        drop(network);
        assert!(!proxy.exists() && !dir.exists());
    }

    #[tokio::test]
    async fn stale_run_folders_are_cleared() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let data_dir = tmp.path().join("data");
        let folder = run_folder(&data_dir);
        assert!(
            folder.starts_with(tmp.path().join("data-runs")),
            "{folder:?}"
        );
        let network = ModelNetwork::start(&[origin("https://model.invalid")], &folder)
            .unwrap_or_else(|err| panic!("{err}"));
        std::mem::forget(network);
        assert!(folder.join("proxy.sock").exists());
        crate::run::secret_http::clear_stale(&data_dir);
        assert!(!folder.exists());
    }

    #[tokio::test]
    async fn the_proxy_answers_bad_requests_without_connecting() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let network = ModelNetwork::start(&[origin("https://model.invalid")], tmp.path())
            .unwrap_or_else(|err| panic!("{err}"));
        let proxy = network.forwards()[0].socket.clone();
        assert_eq!(network.forwards()[0].port, PROXY_PORT);
        for request in [
            &b"\x16\x03\x01garbage\r\n\r\n"[..],
            b"hello\r\n\r\n",
            b"CONNECT model.invalid HTTP/1.1\r\n\r\n",
            b"CONNECT user@model.invalid:443 HTTP/1.1\r\n\r\n",
            b"CONNECT model.invalid:443 SPDY/3\r\n\r\n",
            b"CONNECT  model.invalid:443 HTTP/1.1\r\n\r\n",
        ] {
            let (answer, _) = ask(&proxy, request).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{request:?}: {answer}");
        }
        let (answer, _) = ask(&proxy, b"GET http://model.invalid/ HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
        let mut huge = b"CONNECT model.invalid:443 HTTP/1.1\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 9000));
        let (answer, _) = ask(&proxy, &huge).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert_eq!(network.refused_count(), 0);
    }

    #[test]
    fn requests_are_read_strictly() {
        assert_eq!(
            target("CONNECT API.Example:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(("api.example".to_owned(), 443))
        );
        assert_eq!(
            target("CONNECT [::1]:8080 HTTP/1.0\r\n\r\n"),
            Ok(("[::1]".to_owned(), 8080))
        );
        assert!(target("CONNECT a.example:443 HTTP/1.1 extra\r\n\r\n").is_err());
        assert_eq!(find_blank_line(b"a\r\n\r\nrest"), Some(5));
        assert_eq!(
            loopback_targets(&["localhost".to_owned(), "127.0.0.1".to_owned()], 9).len(),
            2
        );
    }
}
