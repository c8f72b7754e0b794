//! The tool channel: what a run may ask of this agent while it runs.
//!
//! Every run gets one, served by the agent for the run's lifetime on a Unix socket in the
//! run's own folder under `<data dir>-runs` (mode 0600 in a 0700 folder), shown to the run
//! as [`SOCKET_VAR`] with the random [`TOKEN_VAR`] that proves a caller is the run, and
//! this program as `TETHER_AGENT`, readable in its sandbox (as the secrets broker is). Two
//! clients speak it, both started inside the run's sandbox:
//!
//! - `tether-agent tool …`, for recipes;
//! - `tether-agent mcp`, the stdio MCP server an ACP coding agent starts from the
//!   `mcpServers` of its session ([`acp_servers`]), offering the same as MCP tools and
//!   resources.
//!
//! The wire is one JSON line each way ([`Request`], [`Answer`]); a request line is bounded
//! ([`MAX_REQUEST_LINE`]) and must arrive within [`READ_TIMEOUT`]. Every text answered has
//! the saved secret values hidden. The operations ([`Call`]):
//!
//! - `context {name, args}`: the server's context route under the run's lease (the job's
//!   chain, another job of the account, a search). A `stale_lease` answer is handled as any
//!   lease-bound call's: reattached after an outage, else the run is stopped;
//! - `attachments`: the files attached to the job, as placed for the run;
//! - `attachment {id}`: one of them, as text or base64;
//! - `report {report}`: the worker's report ([`crate::run::worker_report`]), refused with
//!   the problem when invalid so the worker can fix it; the last valid one wins;
//! - `attach {path, kind?, caption?}`: a file of the run's folder kept as evidence
//!   ([`crate::run::attach`]); the answer names the copy;
//! - `screenshot {url | path, width?, height?, fullPage?}`: a picture of a loopback page or
//!   a file of the run's folder, taken by this computer's browser confined like the run
//!   ([`crate::run::capture`]) and kept as evidence with its preview; the answer names it
//!   and carries the preview, so a coding agent can look at what it built.
//!
//! **Architecture Invariant:** the channel only answers from what the run already has (its
//! lease, its attachments, its folder); it never widens what the run may see.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::schema::{EnvVariable, McpServer, McpServerStdio};
use anyhow::{Context as _, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;
use tether_protocol::attachments::Attachment;
use tether_protocol::jobs::EvidenceKind;
use tether_protocol::task_context::{ContextRequest, MAX_CONTEXT_ANSWER_CHARS};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

use crate::local::private_files::create_private_dir;
use crate::local::vault::redact;
use crate::policy::guard::Guard;
use crate::remote::client::{DeviceClient, RemoteError};
use crate::run::attach::{attach, AttachRequest};
use crate::run::attachments::PlacedAttachment;
use crate::run::capture::{self, CaptureRun, ScreenshotRequest, Target};
use crate::run::lease::{Recovery, RunLease};
use crate::run::secret_http::{
    accept_each, agent_program, grant_vars, random_text, read_request_line, runs_root,
};
use crate::run::stop::{RunStop, StopReason};
use crate::run::worker_report::Handback;
use crate::sandbox::Sandbox;

/// The channel's socket, in the run's environment.
pub const SOCKET_VAR: &str = "TETHER_TOOL_SOCKET";
/// The run's proof that it is the run, in its environment.
pub const TOKEN_VAR: &str = "TETHER_TOOL_TOKEN";
/// The name the MCP server has in an ACP session (Claude Code calls its tool
/// `mcp__tether__tether_context`).
pub const MCP_SERVER_NAME: &str = "tether";
/// The largest request line.
pub const MAX_REQUEST_LINE: u64 = 64 * 1024;
/// How long a connection may take to send its request line.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a context call is sent again after its lease was renewed.
const MAX_RENEWED_TRIES: usize = 3;

/// What a client asks: the run's token and one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub token: String,
    pub call: Call,
}

/// One operation of the channel. New ones are a variant here and an arm in [`answer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Call {
    /// The server's context route: `name` is one of
    /// [`tether_protocol::task_context::CONTEXT_NAMES`].
    Context {
        name: String,
        #[serde(default)]
        args: serde_json::Value,
    },
    /// The job's attachments, as placed for the run.
    Attachments,
    /// One attachment's content.
    Attachment { id: String },
    /// The worker's report ([`tether_protocol::report::WorkerReport`]).
    Report { report: serde_json::Value },
    /// Keep a file of the run's folder as evidence.
    Attach {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<EvidenceKind>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        caption: Option<String>,
    },
    /// A screenshot of a loopback page (`url`) or a file of the run's folder (`path`).
    Screenshot {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        width: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        height: Option<u32>,
        #[serde(default, rename = "fullPage")]
        full_page: bool,
    },
}

/// The channel's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Answer {
    /// Plain text (a context answer).
    Text { text: String },
    /// The job's attachments.
    Attachments { attachments: Vec<Listed> },
    /// One attachment: `text` when it is text, else its bytes in `base64`.
    Content {
        attachment: Listed,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base64: Option<String>,
    },
    /// A file was attached: the name its copy has in the run's evidence.
    Attached { name: String },
    /// A screenshot was kept under `name`, `width` × `height` pixels; its JPEG preview's
    /// bytes in base64.
    Captured {
        name: String,
        width: u32,
        height: u32,
        preview_base64: String,
    },
    /// Why the call was not answered, as a sentence for whoever reads it.
    Refused { error: String },
}

/// One attachment of the run: what the server said it is, and its local copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    #[serde(flatten)]
    pub attachment: Attachment,
    pub path: PathBuf,
}

impl From<&PlacedAttachment> for Listed {
    fn from(placed: &PlacedAttachment) -> Listed {
        Listed {
            attachment: placed.attachment.clone(),
            path: placed.path.clone(),
        }
    }
}

fn refused(error: impl Into<String>) -> Answer {
    Answer::Refused {
        error: error.into(),
    }
}

/// What the channel answers from: the run's lease and its attachments.
pub struct ChannelContext {
    pub client: DeviceClient,
    pub lease: Arc<RunLease>,
    /// Raised when a context call finds the lease lost or the device revoked.
    pub stop: RunStop,
    pub attachments: Vec<PlacedAttachment>,
    /// Every saved value, hidden in the answers.
    pub hidden: Arc<Vec<String>>,
    /// The run's folder, report and evidence recorder.
    pub handback: Arc<Handback>,
    /// What a screenshot's browser is confined by: the guard and sandbox of the run's
    /// commands, and the environment scrubbed of this agent's own variables.
    pub guard: Guard,
    pub sandbox: Arc<Sandbox>,
    pub env: Arc<Vec<(String, String)>>,
}

/// One run's channel: listening until dropped.
pub struct ToolChannel {
    folder: PathBuf,
    socket: PathBuf,
    token: String,
    handback: Arc<Handback>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ToolChannel {
    /// Listens on a new socket in a new folder of `<data dir>-runs/`.
    ///
    /// # Errors
    /// When the folder or the socket cannot be made.
    pub fn start(data_dir: &Path, context: ChannelContext) -> Result<ToolChannel> {
        let folder = runs_root(data_dir).join(format!("tools-{}", random_text(9)));
        create_private_dir(&folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        let folder = folder.canonicalize()?;
        let socket = folder.join("tool.sock");
        let listener = UnixListener::bind(&socket)
            .with_context(|| format!("cannot listen on {}", socket.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        }
        let token = random_text(24);
        let handback = context.handback.clone();
        let task = tokio::spawn(serve(
            listener,
            Arc::new(Served {
                token: token.clone(),
                context,
            }),
        ));
        Ok(ToolChannel {
            folder,
            socket,
            token,
            handback,
            task: Some(task),
        })
    }

    /// What the run hands back through the channel: its report, where attached files go.
    pub fn handback(&self) -> &Handback {
        &self.handback
    }

    /// The channel's variables for a run's environment.
    pub fn vars(&self) -> Vec<(String, String)> {
        vec![
            (SOCKET_VAR.to_owned(), self.socket.display().to_string()),
            (TOKEN_VAR.to_owned(), self.token.clone()),
        ]
    }

    /// Shows the channel to a run: its variables, and the socket and this program readable.
    pub fn grant(&self, env: &mut Vec<(String, String)>, readable: &mut Vec<PathBuf>) {
        readable.push(self.socket.clone());
        grant_vars(self.vars(), env, readable);
    }
}

impl Drop for ToolChannel {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.folder);
    }
}

/// The `mcpServers` of an ACP session: `tether-agent mcp` over stdio, started by the agent
/// inside the run's sandbox and talking to the run's `channel`. None without a channel.
pub fn acp_servers(channel: Option<&ToolChannel>) -> Vec<McpServer> {
    let (Some(channel), Some(program)) = (channel, agent_program()) else {
        return Vec::new();
    };
    let env = channel
        .vars()
        .into_iter()
        .map(|(name, value)| EnvVariable::new(name, value))
        .collect();
    vec![McpServer::Stdio(
        McpServerStdio::new(MCP_SERVER_NAME, program)
            .args(vec!["mcp".to_owned()])
            .env(env),
    )]
}

struct Served {
    token: String,
    context: ChannelContext,
}

async fn serve(listener: UnixListener, served: Arc<Served>) {
    accept_each(listener, "the tool channel", move |stream| {
        answer_connection(stream, served.clone())
    })
    .await;
}

async fn answer_connection(stream: UnixStream, served: Arc<Served>) {
    let (reader, mut writer) = stream.into_split();
    let answer = match read_request_line(reader, MAX_REQUEST_LINE, READ_TIMEOUT).await {
        Ok(line) => match serde_json::from_str::<Request>(&line) {
            Ok(request) => answer(&served, request).await,
            Err(err) => refused(format!("the request is not valid: {err}")),
        },
        Err(err) => refused(err),
    };
    let Ok(mut text) = serde_json::to_string(&answer) else {
        return;
    };
    text.push('\n');
    let _ = writer.write_all(text.as_bytes()).await;
}

async fn answer(served: &Served, request: Request) -> Answer {
    let proven: bool = request
        .token
        .as_bytes()
        .ct_eq(served.token.as_bytes())
        .into();
    if !proven {
        return refused("this is not the run's tool token");
    }
    let context = &served.context;
    let answer = match request.call {
        Call::Context { name, args } => ask_context(context, ContextRequest { name, args }).await,
        Call::Attachments => Answer::Attachments {
            attachments: context.attachments.iter().map(Listed::from).collect(),
        },
        Call::Attachment { id } => content(context, &id).await,
        Call::Report { report } => match context.handback.report(report) {
            Ok(()) => Answer::Text {
                text: "the report is kept; it goes with the run's completion (a later report \
                       replaces it)"
                    .into(),
            },
            Err(problem) => refused(format!("the report is not valid: {problem}")),
        },
        Call::Attach {
            path,
            kind,
            caption,
        } => {
            attached(
                context,
                AttachRequest {
                    path,
                    kind,
                    caption,
                },
            )
            .await
        }
        Call::Screenshot {
            url,
            path,
            width,
            height,
            full_page,
        } => match screenshot_request(url, path, width, height, full_page) {
            Ok(request) => screenshot(context, request).await,
            Err(why) => refused(why),
        },
    };
    hide(answer, &context.hidden)
}

/// Every text of `answer` with the saved values hidden.
fn hide(answer: Answer, hidden: &[String]) -> Answer {
    match answer {
        Answer::Text { text } => Answer::Text {
            text: redact(&text, hidden),
        },
        Answer::Content {
            attachment,
            text,
            base64,
        } => Answer::Content {
            attachment,
            text: text.map(|text| redact(&text, hidden)),
            base64,
        },
        Answer::Refused { error } => refused(redact(&error, hidden)),
        Answer::Attached { name } => Answer::Attached {
            name: redact(&name, hidden),
        },
        Answer::Captured {
            name,
            width,
            height,
            preview_base64,
        } => Answer::Captured {
            name: redact(&name, hidden),
            width,
            height,
            preview_base64,
        },
        listed @ Answer::Attachments { .. } => listed,
    }
}

/// The context route, under the run's lease.
async fn ask_context(context: &ChannelContext, request: ContextRequest) -> Answer {
    let lease = &context.lease;
    for _ in 0..MAX_RENEWED_TRIES {
        let token = lease.token();
        let error = match context
            .client
            .task_context(lease.job_id(), &token, &request)
            .await
        {
            Ok(answer) => {
                lease.confirmed(&token);
                tracing::info!(job = %lease.job_id(), name = %request.name, "context answered");
                return Answer::Text {
                    text: cut(answer.text),
                };
            }
            Err(RemoteError::StaleLease) => match lease.recover(&token).await {
                Recovery::Renewed => continue,
                Recovery::Later(_) => {
                    "the server cannot be reached to renew this run's lease; try again later".into()
                }
                Recovery::Lost => {
                    context.stop.raise(StopReason::LeaseLost);
                    "this run no longer holds its job's lease; it is stopping".into()
                }
                Recovery::Revoked => {
                    context.stop.raise(StopReason::Revoked);
                    "this computer was revoked from the server".into()
                }
            },
            Err(RemoteError::Revoked) => {
                context.stop.raise(StopReason::Revoked);
                "this computer was revoked from the server".into()
            }
            Err(RemoteError::RateLimited { retry_after }) => format!(
                "context was asked too often; try again in {} s",
                retry_after.as_secs().max(1)
            ),
            Err(RemoteError::Http { message, .. }) => message,
            Err(RemoteError::Network(why)) => format!("the server cannot be reached: {why}"),
        };
        return refused(error);
    }
    refused("the server kept refusing this run's lease")
}

/// The server bounds its answers; a larger one is cut here too, and says so.
fn cut(text: String) -> String {
    match text.char_indices().nth(MAX_CONTEXT_ANSWER_CHARS) {
        Some((end, _)) => format!(
            "{}\n[cut at {MAX_CONTEXT_ANSWER_CHARS} characters]",
            &text[..end]
        ),
        None => text,
    }
}

/// One attachment's content: text when its type is text and its bytes are UTF-8, else
/// base64.
async fn content(context: &ChannelContext, id: &str) -> Answer {
    let Some(placed) = context
        .attachments
        .iter()
        .find(|placed| placed.attachment.id.as_str() == id)
    else {
        return refused(format!("this job has no attachment {id}"));
    };
    let bytes = match tokio::fs::read(&placed.path).await {
        Ok(bytes) => bytes,
        Err(err) => {
            return refused(format!(
                "the attachment {} cannot be read: {err}",
                placed.attachment.name
            ))
        }
    };
    let attachment = Listed::from(placed);
    if is_text(&placed.attachment.media_type) {
        if let Ok(text) = String::from_utf8(bytes.clone()) {
            return Answer::Content {
                attachment,
                text: Some(text),
                base64: None,
            };
        }
    }
    Answer::Content {
        attachment,
        text: None,
        base64: Some(STANDARD.encode(bytes)),
    }
}

/// Copies a file of the run's folder into its evidence, off the runtime's threads.
async fn attached(context: &ChannelContext, request: AttachRequest) -> Answer {
    let handback = &context.handback;
    let Some(recorder) = handback.recorder() else {
        return refused("this run has no evidence folder, so nothing can be attached");
    };
    let (folder, hidden) = (handback.folder().to_owned(), context.hidden.clone());
    let copied =
        tokio::task::spawn_blocking(move || attach(&folder, &recorder, &request, &hidden)).await;
    match copied {
        Ok(Ok(name)) => Answer::Attached { name },
        Ok(Err(why)) => refused(why),
        Err(err) => refused(format!("the file could not be attached: {err}")),
    }
}

/// The capture a `screenshot` call asks for: exactly one of `url` and `path`.
fn screenshot_request(
    url: Option<String>,
    path: Option<String>,
    width: Option<u32>,
    height: Option<u32>,
    full_page: bool,
) -> Result<ScreenshotRequest, String> {
    let target = match (url, path) {
        (Some(url), None) => Target::Url(url),
        (None, Some(path)) => Target::Path(PathBuf::from(path)),
        _ => return Err("give either url (a page on this computer's loopback) or path (a file of the run's folder)".into()),
    };
    let mut request = ScreenshotRequest::new(target);
    request.width = width.unwrap_or(request.width);
    request.height = height.unwrap_or(request.height);
    request.full_page = full_page;
    Ok(request)
}

/// Takes a screenshot into the run's evidence; its answer carries the preview.
async fn screenshot(context: &ChannelContext, request: ScreenshotRequest) -> Answer {
    let handback = &context.handback;
    let Some(recorder) = handback.recorder() else {
        return refused("this run has no evidence folder, so no screenshot can be kept");
    };
    let run = CaptureRun {
        folder: handback.folder(),
        recorder: &recorder,
        sandbox: &context.sandbox,
        guard: &context.guard,
        env: &context.env,
        stop: &context.stop,
    };
    let captured = match capture::screenshot(request, &run).await {
        Ok(captured) => captured,
        Err(why) => return refused(why),
    };
    tracing::info!(name = %captured.name, "a screenshot was taken for the run");
    let preview = tokio::fs::read(recorder.folder().join(&captured.preview_name))
        .await
        .unwrap_or_default();
    Answer::Captured {
        name: captured.name,
        width: captured.width,
        height: captured.height,
        preview_base64: STANDARD.encode(preview),
    }
}

/// Whether a media type names text a model reads as such.
pub fn is_text(media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || matches!(
            essence.as_str(),
            "application/json" | "application/xml" | "application/x-yaml" | "application/yaml"
        )
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
}

/// The client side: sends `call` with `token` to the channel at `socket` and reads its
/// answer.
///
/// # Errors
/// When the channel cannot be reached or its answer is not valid.
pub async fn ask(socket: &Path, token: &str, call: Call) -> Result<Answer> {
    let mut stream = match UnixStream::connect(socket).await {
        Ok(stream) => stream,
        // Landlock's sandbox of a job without the internet refuses every `connect`.
        Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => anyhow::bail!(
            "cannot reach the agent at {}: this job's sandbox allows no connections (a job \
             without the internet under Landlock); give the job the internet, or use \
             bubblewrap",
            socket.display()
        ),
        Err(err) => {
            return Err(err)
                .with_context(|| format!("cannot reach the agent at {}", socket.display()))
        }
    };
    let mut line = serde_json::to_vec(&Request {
        token: token.to_owned(),
        call,
    })?;
    line.push(b'\n');
    stream.write_all(&line).await?;
    let mut reader = tokio::io::BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).await?;
    serde_json::from_str(&answer).context("the agent's answer is not valid")
}

/// The channel a program inside a run reaches: its socket and token from the environment;
/// `None` outside a run.
pub fn from_env() -> Option<(PathBuf, String)> {
    let socket = std::env::var_os(SOCKET_VAR)?;
    let token = std::env::var(TOKEN_VAR).ok()?;
    Some((PathBuf::from(socket), token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::journal::Journal;
    use crate::local::state::DataDir;
    use crate::remote::client::ServerClient;
    use crate::run::lease::LeasePeriod;
    use crate::run::test_http::read_request;
    use tether_protocol::jobs::Mode;
    use tether_protocol::AttachmentId;
    use tokio::sync::mpsc;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    /// A stand-in for the server's context route: answers `answers` in turn, passing on
    /// each request's target, lease header and body.
    async fn context_server(
        answers: Vec<(u16, &'static str)>,
    ) -> Result<(String, mpsc::UnboundedReceiver<(String, String, String)>)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (requests, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for (status, body) in answers {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let Some(request) = read_request(&mut socket).await else {
                    return;
                };
                let lease = request
                    .header(tether_protocol::routes::LEASE_HEADER)
                    .unwrap_or_default()
                    .to_owned();
                let _ = requests.send((
                    format!("{} {}", request.method, request.target),
                    lease,
                    String::from_utf8_lossy(&request.body).into_owned(),
                ));
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        Ok((base, received))
    }

    struct Started {
        channel: ToolChannel,
        stop: RunStop,
        _tmp: tempfile::TempDir,
        folder: PathBuf,
    }

    async fn start(base: &str, attachments: Vec<(&str, &str, &[u8])>) -> Result<Started> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("agent")))?;
        let folder = tmp.path().join("attachments");
        std::fs::create_dir_all(&folder)?;
        let mut placed = Vec::new();
        for (name, media_type, bytes) in attachments {
            let path = folder.join(name);
            std::fs::write(&path, bytes)?;
            placed.push(PlacedAttachment {
                attachment: Attachment {
                    id: AttachmentId::generate(),
                    name: name.to_owned(),
                    size: bytes.len() as u64,
                    sha256: "0".repeat(64),
                    media_type: media_type.to_owned(),
                },
                path,
            });
        }
        let client = DeviceClient::new(ServerClient::new(base)?, "tdt_x".into());
        let job = crate::test_job::claimed_job("agent", Mode::Ask);
        let journal = Arc::new(Journal::new(&data_dir));
        journal.record(&crate::local::journal::RunRecord::claimed(&job))?;
        let lease = RunLease::new(client.clone(), journal, Arc::new(LeasePeriod::new()), &job);
        let stop = RunStop::new();
        let channel = ToolChannel::start(
            data_dir.root(),
            ChannelContext {
                client,
                lease,
                stop: stop.clone(),
                attachments: placed,
                hidden: Arc::new(vec!["hunter22".to_owned()]),
                handback: Handback::new(folder.clone(), Arc::new(vec!["hunter22".to_owned()])),
                guard: crate::policy::guard::Guard::new(None, data_dir.root()),
                sandbox: crate::sandbox::current(),
                env: Arc::new(Vec::new()),
            },
        )?;
        Ok(Started {
            channel,
            stop,
            _tmp: tmp,
            folder,
        })
    }

    async fn raw(socket: &Path, line: &[u8]) -> Result<Answer> {
        let mut stream = UnixStream::connect(socket).await?;
        stream.write_all(line).await?;
        stream.shutdown().await?;
        let mut answer = String::new();
        tokio::io::BufReader::new(stream)
            .read_line(&mut answer)
            .await?;
        Ok(serde_json::from_str(&answer)?)
    }

    fn refusal(answer: Answer) -> String {
        match answer {
            Answer::Refused { error } => error,
            other => panic!("answered: {other:?}"),
        }
    }

    #[tokio::test]
    async fn only_the_run_is_answered_and_bad_lines_are_refused() -> Result<()> {
        let started = start("http://127.0.0.1:9", Vec::new()).await?;
        let channel = &started.channel;
        let (mut env, mut readable) = (Vec::new(), Vec::new());
        channel.grant(&mut env, &mut readable);
        assert_eq!(env[0].0, SOCKET_VAR);
        assert_eq!(env[1], (TOKEN_VAR.to_owned(), channel.token.clone()));
        assert!(env.iter().any(|(name, _)| name == "TETHER_AGENT"));
        assert!(readable.contains(&channel.socket));
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&channel.socket)?.permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the socket is its owner's alone");
        }

        let wrong = ask(&channel.socket, "not-the-token", Call::Attachments).await?;
        assert_eq!(refusal(wrong), "this is not the run's tool token");
        let near = &channel.token[..channel.token.len() - 1];
        assert!(
            refusal(ask(&channel.socket, near, Call::Attachments).await?).contains("not the run's")
        );
        assert!(refusal(raw(&channel.socket, b"{\"token\": 1}\n").await?).contains("not valid"));
        let unknown = format!(
            "{{\"token\":\"{}\",\"call\":{{\"op\":\"format_disk\"}}}}\n",
            channel.token
        );
        assert!(refusal(raw(&channel.socket, unknown.as_bytes()).await?).contains("not valid"));
        assert!(
            refusal(raw(&channel.socket, b"no newline").await?).contains("too large or incomplete")
        );
        let mut huge = format!(
            "{{\"token\":\"{}\",\"call\":{{\"op\":\"context\",\"name\":\"jobs.search\",\"args\":{{\"query\":\"",
            channel.token
        )
        .into_bytes();
        huge.resize(usize::try_from(MAX_REQUEST_LINE)? + 10, b'a');
        huge.extend_from_slice(b"\"}}}\n");
        assert!(refusal(raw(&channel.socket, &huge).await?).contains("too large or incomplete"));

        let (socket, folder) = (channel.socket.clone(), channel.folder.clone());
        drop(started);
        assert!(!socket.exists(), "the socket outlived its run");
        assert!(!folder.exists(), "the run's folder outlived it");
        Ok(())
    }

    #[tokio::test]
    async fn attachments_are_listed_and_read_as_text_or_base64() -> Result<()> {
        let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        let started = start(
            "http://127.0.0.1:9",
            vec![
                ("notes.md", "text/markdown", b"step one; password hunter22"),
                ("shot.png", "image/png", png),
            ],
        )
        .await?;
        let (socket, token) = (&started.channel.socket, started.channel.token.as_str());
        let Answer::Attachments { attachments } = ask(socket, token, Call::Attachments).await?
        else {
            panic!("no list");
        };
        let names: Vec<&str> = attachments
            .iter()
            .map(|l| l.attachment.name.as_str())
            .collect();
        assert_eq!(names, ["notes.md", "shot.png"]);
        assert_eq!(attachments[1].path, started.folder.join("shot.png"));

        let text = ask(
            socket,
            token,
            Call::Attachment {
                id: attachments[0].attachment.id.as_str().to_owned(),
            },
        )
        .await?;
        let Answer::Content {
            text: Some(text),
            base64: None,
            ..
        } = text
        else {
            panic!("not text: {text:?}");
        };
        assert_eq!(text, "step one; password [hidden]");
        let image = ask(
            socket,
            token,
            Call::Attachment {
                id: attachments[1].attachment.id.as_str().to_owned(),
            },
        )
        .await?;
        let Answer::Content {
            text: None,
            base64: Some(blob),
            attachment,
        } = image
        else {
            panic!("not base64: {image:?}");
        };
        assert_eq!(STANDARD.decode(blob)?, png);
        assert_eq!(attachment.attachment.media_type, "image/png");
        let other = ask(
            socket,
            token,
            Call::Attachment {
                id: "att-other".into(),
            },
        )
        .await?;
        assert_eq!(refusal(other), "this job has no attachment att-other");
        Ok(())
    }

    #[tokio::test]
    async fn a_report_is_kept_and_a_file_attached_through_the_channel() -> Result<()> {
        let started = start("http://127.0.0.1:9", Vec::new()).await?;
        let (socket, token) = (&started.channel.socket, started.channel.token.as_str());
        let report = |report| Call::Report { report };
        let bad = ask(socket, token, report(serde_json::json!({"summary": 3}))).await?;
        assert!(refusal(bad).starts_with("the report is not valid: not a report"));
        let good = serde_json::json!({"summary": "done with hunter22"});
        assert!(matches!(
            ask(socket, token, report(good)).await?,
            Answer::Text { .. }
        ));
        let kept = started.channel.handback().kept_report().ok_or("not kept")?;
        assert_eq!(kept.summary, "done with [hidden]");

        std::fs::write(started.folder.join("run.log"), "ok\n")?;
        let attach = Call::Attach {
            path: "run.log".into(),
            kind: None,
            caption: None,
        };
        let early = refusal(ask(socket, token, attach.clone()).await?);
        assert!(early.contains("no evidence folder"), "{early}");
        let evidence = started.folder.join("evidence");
        std::fs::create_dir_all(&evidence)?;
        let recorder = crate::run::evidence::Recorder::new(evidence.clone());
        started
            .channel
            .handback()
            .keep_evidence_in(recorder.clone());
        let answer = ask(socket, token, attach).await?;
        assert_eq!(
            answer,
            Answer::Attached {
                name: "run.log".into()
            }
        );
        assert_eq!(std::fs::read(evidence.join("run.log"))?, b"ok\n");
        assert_eq!(recorder.recorded()[0].kind, EvidenceKind::Log);
        Ok(())
    }

    #[tokio::test]
    async fn a_screenshot_is_refused_before_a_browser_starts() -> Result<()> {
        let started = start("http://127.0.0.1:9", Vec::new()).await?;
        let (socket, token) = (&started.channel.socket, started.channel.token.as_str());
        let shot = |url: Option<&str>, path: Option<&str>, width| Call::Screenshot {
            url: url.map(str::to_owned),
            path: path.map(str::to_owned),
            width,
            height: None,
            full_page: false,
        };
        let early =
            refusal(ask(socket, token, shot(Some("http://127.0.0.1:1/"), None, None)).await?);
        assert!(early.contains("no evidence folder"), "{early}");
        let evidence = started.folder.join("evidence");
        std::fs::create_dir_all(&evidence)?;
        started
            .channel
            .handback()
            .keep_evidence_in(crate::run::evidence::Recorder::new(evidence.clone()));
        let both = refusal(
            ask(
                socket,
                token,
                shot(Some("http://127.0.0.1/"), Some("a.html"), None),
            )
            .await?,
        );
        assert!(both.contains("either url"), "{both}");
        let neither = refusal(ask(socket, token, shot(None, None, None)).await?);
        assert!(neither.contains("either url"), "{neither}");
        let outside = refusal(
            ask(
                socket,
                token,
                shot(Some("https://example.com/"), None, None),
            )
            .await?,
        );
        assert!(
            outside.contains("not on this computer's loopback"),
            "{outside}"
        );
        let huge = refusal(
            ask(
                socket,
                token,
                shot(Some("http://127.0.0.1/"), None, Some(9000)),
            )
            .await?,
        );
        assert!(huge.contains("the width must be 100 to 4096"), "{huge}");
        std::os::unix::fs::symlink("/etc/passwd", started.folder.join("link.html"))?;
        let escape = refusal(ask(socket, token, shot(None, Some("link.html"), None)).await?);
        assert!(escape.contains("leads out of the run's folder"), "{escape}");
        assert_eq!(std::fs::read_dir(&evidence)?.count(), 0, "nothing was kept");
        Ok(())
    }

    #[tokio::test]
    async fn context_is_asked_under_the_lease_and_a_lost_lease_stops_the_run() -> Result<()> {
        let (base, mut requests) = context_server(vec![
            (
                200,
                r#"{"text":"Earlier run: fixed login (used hunter22)"}"#,
            ),
            (
                422,
                r#"{"error":{"code":"validation","message":"job.get needs an id"}}"#,
            ),
            (409, r#"{"error":{"code":"stale_lease","message":"stale"}}"#),
        ])
        .await?;
        let started = start(&base, Vec::new()).await?;
        let (socket, token) = (&started.channel.socket, started.channel.token.as_str());
        let chain = Call::Context {
            name: "job.chain".into(),
            args: serde_json::json!({}),
        };
        let answer = ask(socket, token, chain).await?;
        assert_eq!(
            answer,
            Answer::Text {
                text: "Earlier run: fixed login (used [hidden])".into()
            }
        );
        let (target, lease, body) = requests.recv().await.ok_or("no request")?;
        assert_eq!(target, "POST /api/devices/self/jobs/job1/context");
        assert_eq!(lease, "lease");
        let body: serde_json::Value = serde_json::from_str(&body)?;
        assert_eq!(body, serde_json::json!({"name": "job.chain", "args": {}}));

        let get = Call::Context {
            name: "job.get".into(),
            args: serde_json::json!({}),
        };
        assert_eq!(
            refusal(ask(socket, token, get.clone()).await?),
            "job.get needs an id"
        );
        assert_eq!(started.stop.current(), None);
        // The server no longer holds the lease, and it was reachable all along: the run stops.
        assert!(refusal(ask(socket, token, get).await?).contains("no longer holds its job's lease"));
        assert_eq!(started.stop.current(), Some(StopReason::LeaseLost));
        Ok(())
    }
}
