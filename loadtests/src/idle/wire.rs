//! The idle fleet's connections to the server: each from one of several loopback source
//! addresses, an agent's HTTP/1.1 calls on a kept-alive connection, and its event stream.
//!
//! One source address has about 28,000 ephemeral ports (`ip_local_port_range`), and a port
//! bound before `connect` is not shared between destinations, so a fleet of more devices
//! spreads its connections over 127.0.0.2, 127.0.0.3, … (all of 127/8 is loopback on Linux).
//! The HTTP client is a small one of its own: a simulated device costs the generator little
//! CPU, which on a shared machine is CPU the server gets.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;

/// Ports one source address gives in practice (the default range has 28,232).
pub const PORTS_PER_SOURCE: usize = 25_000;

/// The largest answer head or body a device call takes; the server's are far smaller.
const MAX_ANSWER: usize = 64 * 1024;

/// An open event stream.
pub type EventStream = WebSocketStream<TcpStream>;

/// Where the devices connect, and from which addresses.
#[derive(Debug, Clone)]
pub struct Target {
    pub address: SocketAddr,
    /// The `Host` header: the server URL's authority.
    pub host: String,
    /// Source addresses, used in turn by device index; empty: the kernel chooses.
    pub sources: Vec<IpAddr>,
}

impl Target {
    /// The server of `url` (`http://HOST:PORT`), with `sources` loopback source addresses
    /// from 127.0.0.2 on when the server is on loopback.
    pub fn new(url: &str, sources: usize) -> anyhow::Result<Target> {
        let host = url
            .strip_prefix("http://")
            .context("the server URL must be http://HOST:PORT")?
            .trim_end_matches('/')
            .to_owned();
        let address: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&host)?
            .next()
            .with_context(|| format!("{host} does not resolve"))?;
        let sources = if address.ip().is_loopback() && address.is_ipv4() {
            source_addresses(sources)?
        } else {
            Vec::new()
        };
        Ok(Target {
            address,
            host,
            sources,
        })
    }

    /// A new TCP connection for device `index`, from its source address.
    pub async fn connect(&self, index: usize) -> io::Result<TcpStream> {
        let socket = TcpSocket::new_v4()?;
        if !self.sources.is_empty() {
            let source = self.sources[index % self.sources.len()];
            socket.bind(SocketAddr::new(source, 0))?;
        }
        let stream = socket.connect(self.address).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Opens device `index`'s event stream with its token, as the agent does.
    pub async fn open_stream(
        &self,
        index: usize,
        token: &str,
    ) -> Result<EventStream, tungstenite::Error> {
        let mut request =
            format!("ws://{}/api/devices/self/events", self.host).into_client_request()?;
        let headers = request.headers_mut();
        let bearer = HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|err| tungstenite::Error::HttpFormat(err.into()))?;
        headers.insert("authorization", bearer);
        headers.insert("x-tether-protocol", HeaderValue::from_static("1"));
        let tcp = self.connect(index).await?;
        // An idle stream reads a few small frames a minute: a small read buffer, no write
        // batching (tungstenite's defaults are 128 KiB each).
        let config = WebSocketConfig::default()
            .read_buffer_size(4096)
            .write_buffer_size(0);
        let (stream, _) =
            tokio_tungstenite::client_async_with_config(request, tcp, Some(config)).await?;
        Ok(stream)
    }
}

/// 127.0.0.2, 127.0.0.3, …: `count` addresses.
fn source_addresses(count: usize) -> anyhow::Result<Vec<IpAddr>> {
    if count > 250 {
        bail!("at most 250 source addresses (127.0.0.2 to 127.0.0.251)");
    }
    Ok((0..count)
        .map(|n| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + n as u8)))
        .collect())
}

/// Source addresses a fleet of `devices` needs: each device holds its stream and, for a few
/// seconds after each heartbeat, a second connection; a storm's retries leave more behind.
pub fn sources_for(devices: usize) -> usize {
    (devices * 2).div_ceil(PORTS_PER_SOURCE).max(1)
}

/// A device call's answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// The server will close the connection (`Connection: close`).
    pub closing: bool,
    /// `Retry-After` in seconds, when sent.
    pub retry_after: Option<u64>,
}

/// `POST path` with a JSON body on `stream`, as the agent's HTTP client sends it; reads the
/// whole answer. The connection stays usable unless the answer says it closes.
pub async fn post(
    stream: &mut TcpStream,
    host: &str,
    path: &str,
    token: &str,
    body: &[u8],
) -> anyhow::Result<Answer> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {token}\r\n\
         x-tether-protocol: 1\r\nuser-agent: tether-agent/loadtest\r\naccept: */*\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).await?;
    read_answer(stream).await
}

/// Reads one answer: its head, then a `Content-Length` body.
async fn read_answer(stream: &mut TcpStream) -> anyhow::Result<Answer> {
    let mut buffer = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(end) = find(&buffer, b"\r\n\r\n") {
            break end;
        }
        if buffer.len() > MAX_ANSWER {
            bail!("an answer head over {MAX_ANSWER} bytes");
        }
        read_more(stream, &mut buffer).await?;
    };
    let head = std::str::from_utf8(&buffer[..head_end]).context("an answer head not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .context("an answer without a status line")?;
    let mut length = 0;
    let mut closing = false;
    let mut retry_after = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().context("a bad Content-Length")?,
            "connection" => closing = value.eq_ignore_ascii_case("close"),
            "retry-after" => retry_after = value.parse().ok(),
            "transfer-encoding" => bail!("a chunked answer (the device routes send sized ones)"),
            _ => {}
        }
    }
    if length > MAX_ANSWER {
        bail!("an answer body of {length} bytes");
    }
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        read_more(stream, &mut buffer).await?;
    }
    Ok(Answer {
        status,
        body: buffer[body_start..body_start + length].to_vec(),
        closing,
        retry_after,
    })
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> anyhow::Result<()> {
    let mut chunk = [0u8; 2048];
    let read = stream.read(&mut chunk).await?;
    if read == 0 {
        bail!("the server closed the connection");
    }
    buffer.extend_from_slice(&chunk[..read]);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Resolves once the server closes a kept-alive connection (or sends on it, which it never
/// does unasked): the agent's HTTP client then drops it from its pool.
pub async fn closed_by_server(stream: &mut TcpStream) {
    let mut byte = [0u8; 1];
    let _ = stream.read(&mut byte).await;
}
