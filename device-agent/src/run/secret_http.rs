//! Secrets used by reference: `tether-agent secret-http`.
//!
//! A secret the owner limited to sites is never put in a run's environment, so the run cannot
//! send it anywhere else. Instead the run asks the agent to make one HTTP request for it:
//! `{{NAME}}` in a header or the body is replaced by the value here, outside the sandbox, and
//! only when every secret it names allows the request's origin ([`tether_protocol::sites`]).
//! A secret the run also has as a variable may be used the same way, to any site.
//!
//! - The run reaches its broker through a Unix socket shown as [`SOCKET_VAR`] (readable in
//!   its sandbox, working with the network off too) and proves it is this run with the
//!   random [`TOKEN_VAR`]. The broker lives as long as the run; the socket goes with it.
//! - A secret never goes in the address, redirects are answered, not followed, and the
//!   answer has every saved value hidden. A job without the internet gets no requests.
//! - Each request is one line in the job's output (method, address without its query, the
//!   secrets' names, the status): the owner sees where their secrets went.
//!
//! The wire between the command and the broker is one JSON line each way ([`Request`],
//! [`Answer`]).
//!
//! **Architecture Invariant:** this is the agent's only HTTP client besides
//! [`crate::remote::client`]: it sends only the owner's own requests, to the sites their
//! secrets admit, never one of the agent's calls to the Tether server.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::RngCore as _;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;
use tether_protocol::secrets::valid_name;
use tether_protocol::sites;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream as AsyncUnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::local::private_files::create_private_dir;
use crate::local::vault::{redact, Reference};

/// The broker's socket, in the run's environment.
pub const SOCKET_VAR: &str = "TETHER_SECRETS_SOCKET";
/// The run's proof that it is the run, in its environment.
pub const TOKEN_VAR: &str = "TETHER_SECRETS_TOKEN";
/// This agent's own program, in the run's environment and readable in its sandbox, so a
/// recipe can call `"$TETHER_AGENT" secret-http …` whatever its `PATH`.
pub const AGENT_VAR: &str = "TETHER_AGENT";
/// The largest request line (a body up to 1 MiB, JSON-escaped).
const MAX_REQUEST_LINE: u64 = 3 * 1024 * 1024;
/// The largest response body passed back; the rest is cut and said so.
pub const MAX_RESPONSE_BODY: usize = 1024 * 1024;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a connection may take to send its request line.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Headers the run may not set: they belong to the connection, not the request.
const RESERVED_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
];

/// What the command asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub token: String,
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    #[serde(default)]
    pub body: Option<String>,
}

/// The broker's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Answer {
    Sent {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
        /// The body was longer than [`MAX_RESPONSE_BODY`] and was cut.
        truncated: bool,
    },
    Refused {
        error: String,
    },
}

/// A request checked and filled in, ready to send.
#[derive(Debug)]
pub struct Prepared {
    pub method: Method,
    pub url: Url,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Option<String>,
    /// The names of the secrets it carries, in order of first use.
    pub used: Vec<String>,
}

/// Checks `request` against the run's secrets and fills in their values.
///
/// # Errors
/// Why the request is refused, as a sentence for the run's owner.
pub fn prepare(
    request: &Request,
    secrets: &[Reference],
    network: bool,
) -> Result<Prepared, String> {
    if !network {
        return Err("this job runs without the internet, so it sends no requests".into());
    }
    let method = Method::from_bytes(request.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| format!("{:?} is not an HTTP method", request.method))?;
    if request.url.contains("{{") {
        return Err("a secret goes in a header or the body, never in the address".into());
    }
    let url = Url::parse(&request.url).map_err(|err| format!("the address is not valid: {err}"))?;
    if !matches!(url.scheme(), "https" | "http") || url.host().is_none() {
        return Err("only http and https addresses are supported".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the address may not carry a user name or password".into());
    }
    let mut used = Vec::new();
    let mut headers = Vec::with_capacity(request.headers.len());
    for (name, value) in &request.headers {
        let header = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("{name:?} is not a header name"))?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(format!(
                "the header {header} is set by the agent, not the run"
            ));
        }
        let filled = fill(value, secrets, &mut used)?;
        let value = HeaderValue::from_str(&filled)
            .map_err(|_| format!("the header {header} is not a valid header value"))?;
        headers.push((header, value));
    }
    let body = match &request.body {
        Some(body) => Some(fill(body, secrets, &mut used)?),
        None => None,
    };
    if used.is_empty() {
        return Err("the request names no secret ({{NAME}} in a header or the body)".into());
    }
    for name in &used {
        check_site(name, secrets, &url)?;
    }
    Ok(Prepared {
        method,
        url,
        headers,
        body,
        used,
    })
}

/// Replaces each `{{NAME}}` naming a secret with its value. Braces around anything that is
/// not a secret name are left as they are; a name the job does not give the run is refused.
fn fill(text: &str, secrets: &[Reference], used: &mut Vec<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        if !valid_name(name) {
            out.push_str("{{");
            rest = after;
            continue;
        }
        let secret = secrets
            .iter()
            .find(|secret| secret.name == name)
            .ok_or_else(|| format!("this job does not name the secret {name}"))?;
        out.push_str(&secret.value);
        if !used.iter().any(|seen| seen == name) {
            used.push(name.to_owned());
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn check_site(name: &str, secrets: &[Reference], url: &Url) -> Result<(), String> {
    let Some(secret) = secrets.iter().find(|secret| secret.name == name) else {
        return Err(format!("this job does not name the secret {name}"));
    };
    match &secret.sites {
        None => Ok(()),
        Some(allowed) if sites::any_admits(allowed, url) => Ok(()),
        Some(allowed) => {
            let listed: Vec<String> = allowed.iter().map(ToString::to_string).collect();
            Err(format!(
                "{name} may only be sent to {}, not to {}",
                if listed.is_empty() {
                    "no site (its list did not load)".to_owned()
                } else {
                    listed.join(", ")
                },
                url.origin().ascii_serialization()
            ))
        }
    }
}

/// One run's broker: listening until dropped.
pub struct Broker {
    socket: PathBuf,
    token: String,
    tasks: Option<tokio::task::JoinHandle<()>>,
}

/// What a broker needs from its run.
pub struct BrokerContext {
    pub secrets: Vec<Reference>,
    /// Every saved value, hidden in the answers.
    pub hidden: Arc<Vec<String>>,
    pub network: bool,
    /// The run's output, for one line per request.
    pub lines: mpsc::Sender<String>,
}

impl Broker {
    /// Listens on a new socket in `<data dir>-runs/`.
    ///
    /// # Errors
    /// When the folder or the socket cannot be made.
    pub fn start(data_dir: &Path, context: BrokerContext) -> Result<Broker> {
        let folder = runs_root(data_dir);
        create_private_dir(&folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        let folder = folder.canonicalize()?;
        let socket = folder.join(format!("{}.sock", random_text(9)));
        let listener = UnixListener::bind(&socket)
            .with_context(|| format!("cannot listen on {}", socket.display()))?;
        let token = random_text(24);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        let tasks = tokio::spawn(serve(
            listener,
            Arc::new(Served {
                token: token.clone(),
                context,
                client,
            }),
        ));
        Ok(Broker {
            socket,
            token,
            tasks: Some(tasks),
        })
    }

    /// Shows the broker to a run: its variables, and the socket and this program readable.
    pub fn grant(&self, env: &mut Vec<(String, String)>, readable: &mut Vec<PathBuf>) {
        let vars = vec![
            (SOCKET_VAR.to_owned(), self.socket.display().to_string()),
            (TOKEN_VAR.to_owned(), self.token.clone()),
        ];
        readable.push(self.socket.clone());
        grant_vars(vars, env, readable);
    }
}

/// Adds `vars` to a run's `env` (replacing variables of the same names), with this program
/// as [`AGENT_VAR`], readable in its sandbox: what every channel from a run to this agent
/// shows it.
pub fn grant_vars(
    mut vars: Vec<(String, String)>,
    env: &mut Vec<(String, String)>,
    readable: &mut Vec<PathBuf>,
) {
    if let Some(program) = agent_program() {
        vars.push((AGENT_VAR.to_owned(), program.display().to_string()));
        if !readable.contains(&program) {
            readable.push(program);
        }
    }
    env.retain(|(name, _)| !vars.iter().any(|(var, _)| var == name));
    env.extend(vars);
}

/// This agent's own program, with links resolved: what a run calls back into.
pub fn agent_program() -> Option<PathBuf> {
    std::env::current_exe()
        .and_then(|path| path.canonicalize())
        .ok()
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(tasks) = self.tasks.take() {
            tasks.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Where brokers' sockets live: `<data dir>-runs`, beside the data dir that runs never see.
pub fn runs_root(data_dir: &Path) -> PathBuf {
    let data_dir = crate::policy::guard::absolute(data_dir);
    let name = data_dir
        .file_name()
        .map_or_else(|| "tether-agent".into(), |name| name.to_string_lossy());
    data_dir.with_file_name(format!("{name}-runs"))
}

/// Removes the sockets in `<data dir>-runs` and its runs' folders (called by a daemon
/// holding the run lock, before any run starts, so every one there was left by an earlier
/// process).
pub fn clear_stale(data_dir: &Path) {
    remove_sockets(&runs_root(data_dir), 1);
}

/// Removes the `.sock` files in `folder`, then in its subfolders to `depth`, and the
/// subfolders left empty.
fn remove_sockets(folder: &Path, depth: usize) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if is_dir && depth > 0 {
            remove_sockets(&path, depth - 1);
            let _ = std::fs::remove_dir(&path);
        } else if path.extension().is_some_and(|ext| ext == "sock") {
            let _ = std::fs::remove_file(path);
        }
    }
}

pub(crate) fn random_text(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    URL_SAFE_NO_PAD.encode(raw)
}

struct Served {
    token: String,
    context: BrokerContext,
    client: reqwest::Client,
}

async fn serve(listener: UnixListener, served: Arc<Served>) {
    accept_each(listener, "the secret-http broker", move |stream| {
        answer_connection(stream, served.clone())
    })
    .await;
}

/// Answers each connection of a run's socket with `answer`, each on a task of its own, for
/// as long as the service lives (its task is aborted when the run ends).
pub(crate) async fn accept_each<F, Fut>(listener: UnixListener, service: &str, answer: F)
where
    F: Fn(AsyncUnixStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(answer(stream));
            }
            Err(err) => {
                // Out of descriptors, most likely: the run waits a moment, the service stays.
                tracing::warn!("{service} could not accept a connection: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        while connections.try_join_next().is_some() {}
    }
}

async fn answer_connection(stream: AsyncUnixStream, served: Arc<Served>) {
    let (reader, mut writer) = stream.into_split();
    let answer = match read_request_line(reader, MAX_REQUEST_LINE, READ_TIMEOUT).await {
        Ok(line) => match serde_json::from_str::<Request>(&line) {
            Ok(request) => answer(&served, request).await,
            Err(err) => Answer::Refused {
                error: format!("the request is not valid: {err}"),
            },
        },
        Err(err) => Answer::Refused { error: err },
    };
    let Ok(mut text) = serde_json::to_string(&answer) else {
        return;
    };
    text.push('\n');
    let _ = writer.write_all(text.as_bytes()).await;
}

/// Reads one line, refusing one that does not end within `max` bytes or `timeout`.
pub(crate) async fn read_request_line(
    reader: impl tokio::io::AsyncRead + Unpin,
    max: u64,
    timeout: Duration,
) -> Result<String, String> {
    let mut reader = tokio::io::BufReader::new(reader.take(max));
    let mut line = String::new();
    match tokio::time::timeout(timeout, reader.read_line(&mut line)).await {
        Ok(Ok(_)) if line.ends_with('\n') => Ok(line),
        Ok(Ok(_)) => Err("the request is too large or incomplete".into()),
        Ok(Err(err)) => Err(format!("the request could not be read: {err}")),
        Err(_) => Err("the request took too long to arrive".into()),
    }
}

async fn answer(served: &Served, request: Request) -> Answer {
    let context = &served.context;
    let proven: bool = request
        .token
        .as_bytes()
        .ct_eq(served.token.as_bytes())
        .into();
    if !proven {
        return Answer::Refused {
            error: "this is not the run's secrets token".into(),
        };
    }
    let prepared = match prepare(&request, &context.secrets, context.network) {
        Ok(prepared) => prepared,
        Err(error) => {
            let _ = context
                .lines
                .send(format!("secret-http refused: {error}"))
                .await;
            return Answer::Refused { error };
        }
    };
    let shown = format!(
        "{} {}{} with {}",
        prepared.method,
        prepared.url.origin().ascii_serialization(),
        prepared.url.path(),
        prepared.used.join(", ")
    );
    let answer = send(&served.client, prepared, &context.hidden).await;
    let outcome = match &answer {
        Answer::Sent { status, .. } => status.to_string(),
        Answer::Refused { error } => error.clone(),
    };
    tracing::info!("secret-http {shown} → {outcome}");
    let _ = context
        .lines
        .send(format!("secret-http: {shown} → {outcome}"))
        .await;
    answer
}

async fn send(client: &reqwest::Client, prepared: Prepared, hidden: &[String]) -> Answer {
    let mut builder = client.request(prepared.method, prepared.url);
    for (name, value) in prepared.headers {
        builder = builder.header(name, value);
    }
    if let Some(body) = prepared.body {
        builder = builder.body(body);
    }
    let mut response = match builder.send().await {
        Ok(response) => response,
        Err(err) => {
            return Answer::Refused {
                error: redact(&format!("the request failed: {err}"), hidden),
            }
        }
    };
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                redact(&String::from_utf8_lossy(value.as_bytes()), hidden),
            )
        })
        .collect();
    let mut body = Vec::new();
    let mut truncated = false;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_RESPONSE_BODY - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(err) => {
                return Answer::Refused {
                    error: format!("the answer could not be read: {err}"),
                }
            }
        }
    }
    Answer::Sent {
        status,
        headers,
        body: redact(&String::from_utf8_lossy(&body), hidden),
        truncated,
    }
}

/// `tether-agent secret-http`, run inside a job: sends the request through the run's broker
/// and prints the answer's body (with `include`, the status and headers first). Returns the
/// exit code: 0 below 400, 22 from 400 (as `curl --fail-with-body`), 2 when refused.
///
/// # Errors
/// When not run inside a job that names secrets, or the broker cannot be reached.
pub fn command(
    method: String,
    url: String,
    headers: Vec<String>,
    body: Option<String>,
    include: bool,
) -> Result<i32> {
    let socket = std::env::var_os(SOCKET_VAR)
        .context("secret-http works inside a job that names secrets (no TETHER_SECRETS_SOCKET)")?;
    let token = std::env::var(TOKEN_VAR).context("no TETHER_SECRETS_TOKEN")?;
    let headers = headers
        .iter()
        .map(|header| match header.split_once(':') {
            Some((name, value)) => Ok((name.trim().to_owned(), value.trim().to_owned())),
            None => bail!("{header:?} is not a header (write it as \"Name: value\")"),
        })
        .collect::<Result<Vec<_>>>()?;
    let request = Request {
        token,
        method,
        url,
        headers,
        body,
    };
    let answer = exchange(Path::new(&socket), &request)?;
    match answer {
        Answer::Refused { error } => {
            eprintln!("secret-http: {error}");
            Ok(2)
        }
        Answer::Sent {
            status,
            headers,
            body,
            truncated,
        } => {
            let mut out = std::io::stdout().lock();
            if include {
                writeln!(out, "HTTP {status}")?;
                for (name, value) in &headers {
                    writeln!(out, "{name}: {value}")?;
                }
                writeln!(out)?;
            }
            out.write_all(body.as_bytes())?;
            out.flush()?;
            if truncated {
                eprintln!("secret-http: the answer was cut at {MAX_RESPONSE_BODY} bytes");
            }
            Ok(if status >= 400 { 22 } else { 0 })
        }
    }
}

fn exchange(socket: &Path, request: &Request) -> Result<Answer> {
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot reach the agent at {}", socket.display()))?;
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer)?;
    serde_json::from_str(&answer).context("the agent's answer is not valid")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;
    use tether_protocol::sites::Site;

    fn secrets() -> Vec<Reference> {
        vec![
            Reference {
                name: "API_TOKEN".into(),
                value: "t0k3n".into(),
                sites: Some(vec![Site::parse("api.example.com").expect("site")]),
            },
            Reference {
                name: "LOCAL".into(),
                value: "l0c4l".into(),
                sites: Some(vec![Site::parse("http://127.0.0.1:8080").expect("site")]),
            },
            Reference {
                name: "PLAIN".into(),
                value: "pl41n".into(),
                sites: None,
            },
        ]
    }

    fn request(url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Request {
        Request {
            token: String::new(),
            method: "post".into(),
            url: url.into(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.map(str::to_owned),
        }
    }

    #[test]
    fn values_go_into_headers_and_body_for_allowed_sites() {
        let prepared = prepare(
            &request(
                "https://v2.api.example.com/items?q=1",
                &[("Authorization", "Bearer {{API_TOKEN}}")],
                Some(r#"{"key":"{{PLAIN}}","template":"{{ not.a.name }}","t":"{{API_TOKEN}}"}"#),
            ),
            &secrets(),
            true,
        )
        .expect("allowed");
        assert_eq!(prepared.method, Method::POST);
        assert_eq!(prepared.headers[0].1, "Bearer t0k3n");
        assert_eq!(
            prepared.body.as_deref(),
            Some(r#"{"key":"pl41n","template":"{{ not.a.name }}","t":"t0k3n"}"#)
        );
        assert_eq!(prepared.used, vec!["API_TOKEN", "PLAIN"]);
    }

    #[test]
    fn other_sites_addresses_and_names_are_refused() {
        let refused = |url: &str, headers: &[(&str, &str)], body: Option<&str>| {
            prepare(&request(url, headers, body), &secrets(), true).expect_err(url)
        };
        let auth = [("Authorization", "Bearer {{API_TOKEN}}")];
        assert!(refused("https://evil.example.net/", &auth, None).contains(
            "API_TOKEN may only be sent to api.example.com, not to https://evil.example.net"
        ));
        assert!(refused("http://api.example.com/", &auth, None).contains("may only be sent"));
        assert!(refused("https://api.example.com:8443/", &auth, None).contains("may only be sent"));
        assert!(refused("https://api.example.com.evil.net/", &auth, None).contains("may only"));
        assert!(
            refused("http://127.0.0.1:8081/", &[("X", "{{LOCAL}}")], None).contains("may only")
        );
        assert!(refused("https://api.example.com/{{API_TOKEN}}", &[], None)
            .contains("never in the address"));
        assert!(refused("https://u:p@api.example.com/", &auth, None).contains("user name"));
        assert!(refused("https://api.example.com/", &[], Some("{{OTHER}}"))
            .contains("does not name the secret OTHER"));
        assert!(
            refused("https://api.example.com/", &[], Some("no secret")).contains("names no secret")
        );
        assert!(refused(
            "https://api.example.com/",
            &[("Host", "{{API_TOKEN}}")],
            None
        )
        .contains("set by the agent"));
        assert!(refused("ftp://api.example.com/", &auth, None).contains("only http and https"));
        // A value that would break the header is refused, not sent.
        let broken = vec![Reference {
            name: "NL".into(),
            value: "a\r\nX-Injected: 1".into(),
            sites: None,
        }];
        assert!(prepare(
            &request("https://a.example/", &[("X", "{{NL}}")], None),
            &broken,
            true
        )
        .expect_err("newline")
        .contains("not a valid header value"));
        // Without the internet nothing goes anywhere.
        assert!(prepare(
            &request("https://api.example.com/", &auth, None),
            &secrets(),
            false
        )
        .expect_err("offline")
        .contains("without the internet"));
    }

    async fn ask(socket: &Path, line: &[u8]) -> Answer {
        let mut stream = AsyncUnixStream::connect(socket).await.expect("connect");
        stream.write_all(line).await.expect("write");
        stream.shutdown().await.expect("shutdown");
        let mut answer = String::new();
        tokio::io::BufReader::new(stream)
            .read_line(&mut answer)
            .await
            .expect("read");
        serde_json::from_str(&answer).expect("an answer")
    }

    fn refused(answer: Answer) -> String {
        match answer {
            Answer::Refused { error } => error,
            sent @ Answer::Sent { .. } => panic!("sent: {sent:?}"),
        }
    }

    #[tokio::test]
    async fn the_broker_answers_only_its_run_and_refuses_bad_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (lines, mut output) = mpsc::channel(16);
        let broker = Broker::start(
            &dir.path().join("data"),
            BrokerContext {
                secrets: secrets(),
                hidden: Arc::new(vec!["t0k3n".into()]),
                network: true,
                lines,
            },
        )
        .expect("broker");
        let (mut env, mut readable) = (Vec::new(), Vec::new());
        broker.grant(&mut env, &mut readable);
        let socket = PathBuf::from(&env[0].1);
        assert_eq!(env[0].0, SOCKET_VAR);
        assert!(readable.contains(&socket));
        assert!(socket.starts_with(dir.path().join("data-runs")));

        let mut wrong = request("https://api.example.com/", &[], Some("{{API_TOKEN}}"));
        wrong.token = "not-the-token".into();
        let mut line = serde_json::to_vec(&wrong).expect("json");
        line.push(b'\n');
        assert!(refused(ask(&socket, &line).await).contains("not the run's secrets token"));
        assert!(refused(ask(&socket, b"{\"token\": 1}\n").await).contains("not valid"));
        assert!(refused(ask(&socket, b"no newline").await).contains("too large or incomplete"));
        let huge = vec![b' '; usize::try_from(MAX_REQUEST_LINE).expect("fits") + 10];
        assert!(refused(ask(&socket, &huge).await).contains("too large or incomplete"));

        let mut offsite = request("https://elsewhere.example/", &[], Some("{{API_TOKEN}}"));
        offsite.token.clone_from(&broker.token);
        let mut line = serde_json::to_vec(&offsite).expect("json");
        line.push(b'\n');
        assert!(refused(ask(&socket, &line).await).contains("may only be sent to api.example.com"));
        let said = output.recv().await.expect("a line");
        assert!(
            said.starts_with("secret-http refused: API_TOKEN may only"),
            "{said}"
        );

        drop(broker);
        assert!(!socket.exists(), "the socket outlived its run");
        // One an earlier process left behind goes when the next daemon starts.
        let stale = dir.path().join("data-runs").join("left.sock");
        std::fs::write(&stale, b"").expect("stale socket");
        clear_stale(&dir.path().join("data"));
        assert!(!stale.exists());
    }
}
