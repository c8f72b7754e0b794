//! A scripted ACP agent, built on the agent side of the `agent-client-protocol` crate, for
//! testing `tether-agent`'s `acp` engine end to end.
//!
//! It speaks ACP v1 on stdin/stdout. Its script is the prompt's text (its first text block:
//! the task's context and attachments follow in blocks of their own), or its last line that
//! is a script (so a prompt with a preface works too), or the file given as `--script FILE`:
//! JSON `{"steps": [...]}`, each step one of
//!
//! | step | what the agent does |
//! |---|---|
//! | `{"say": "text"}` | an `agent_message_chunk` |
//! | `{"plan": {"entries": [...]}}` | a `plan` update (ACP's own JSON) |
//! | `{"tool": {...}}` / `{"toolUpdate": {...}}` | a `tool_call` / `tool_call_update` (ACP's own JSON) |
//! | `{"permission": {"toolCall": {...}, "options": [...]}}` | `session/request_permission`; the answer is remembered under the tool call's id |
//! | `{"read": {"path", "line"?, "limit"?}}` | `fs/read_text_file` |
//! | `{"write": {"path", "content", "ifAllowed"?}}` | `fs/write_text_file` |
//! | `{"terminal": {"command", "args"?, "cwd"?, "env"?, "outputByteLimit"?, "kill"?, "ifAllowed"?}}` | `terminal/create`, then `kill` (if asked), `wait_for_exit`, `output`, `release` |
//! | `{"evidence": {"name", "content"}}` | writes the file itself into `$TETHER_EVIDENCE_DIR` (no request: the agent's own sandbox must allow it) |
//! | `"waitForCancel"` | waits for `session/cancel`, then ends the turn `cancelled` |
//! | `{"sleep": ms}` | waits |
//! | `{"crash": code}` | exits at once with that code |
//! | `{"stop": "end_turn"}` | ends the turn with that stop reason (the default after the last step) |
//! | `{"unlessLoaded": [steps]}` | those steps, unless the session was loaded with `session/load` |
//!
//! A `read` path may start with `$TETHER_ATTACHMENTS/`, taken from the agent's own
//! environment (the run's attachments folder).
//!
//! `ifAllowed: ID` skips the step unless the permission asked for tool call `ID` was answered
//! with an allow option. Relative paths are taken from the session's folder. A
//! `session/cancel` between steps ends the turn `cancelled`.
//!
//! With `--load-session` it advertises `loadSession` and accepts `session/load` of any session
//! id it could have made (`scripted-session-…`; each process makes a new one, so a session
//! made by an earlier process is taken on its word), replaying one agent message
//! ([`REPLAYED`]) before it answers; another id is refused.
//!
//! With `--delete-sessions` it advertises `sessionCapabilities.delete` and answers
//! `session/delete` of a session id it could have made; another id is refused with an
//! internal error (`cannot delete ID`), so a test can see a refusal said.
//!
//! With `--auth VAR` it lists two sign-in methods, `scripted-key` (`type: env_var`, reading
//! `VAR`) and `scripted-login` (no type: a sign-in the agent handles), and refuses
//! `session/new` with `auth_required` until `authenticate` of `scripted-key` succeeded, which
//! it does only when `VAR` is set in its environment.
//!
//! With `--images` it advertises `promptCapabilities.image` and `embeddedContext`.
//!
//! What each call answered goes to stderr as `scripted: STEP JSON`, one line each, so a test
//! reads it in the job's output (`stderr: scripted: …`); `scripted: pid N` comes first, and
//! `scripted: prompt {"text": …}` names the prompt received, then `scripted: block {…}`
//! each block after its first (an image by its type, URI, size and SHA-256).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthenticateRequest, AuthenticateResponse, CancelNotification, ContentBlock,
    ContentChunk, CreateTerminalRequest, DeleteSessionRequest, DeleteSessionResponse, EnvVariable,
    Implementation, InitializeRequest, InitializeResponse, KillTerminalRequest, LoadSessionRequest,
    LoadSessionResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, Plan, PromptCapabilities, PromptRequest, PromptResponse,
    ReadTextFileRequest, ReleaseTerminalRequest, RequestPermissionOutcome,
    RequestPermissionRequest, SessionCapabilities, SessionDeleteCapabilities, SessionId,
    SessionNotification, SessionUpdate, StopReason, TerminalOutputRequest, TextContent, ToolCall,
    ToolCallUpdate, WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client, JsonRpcMessage, JsonRpcRequest, UntypedMessage};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

#[derive(Debug, Deserialize)]
struct Script {
    steps: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
enum Step {
    Say(String),
    Plan(Plan),
    Tool(ToolCall),
    ToolUpdate(ToolCallUpdate),
    Permission {
        tool_call: ToolCallUpdate,
        options: Vec<PermissionOption>,
    },
    Read {
        path: PathBuf,
        line: Option<u32>,
        limit: Option<u32>,
    },
    Write {
        path: PathBuf,
        content: String,
        if_allowed: Option<String>,
    },
    Terminal {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        cwd: Option<PathBuf>,
        #[serde(default)]
        env: BTreeMap<String, String>,
        output_byte_limit: Option<u64>,
        #[serde(default)]
        kill: bool,
        if_allowed: Option<String>,
    },
    Evidence {
        name: String,
        content: String,
    },
    WaitForCancel,
    Sleep(u64),
    Crash(i32),
    Stop(StopReason),
    UnlessLoaded(Vec<Step>),
}

/// What the agent knows across requests.
#[derive(Debug)]
struct State {
    /// The script given on the command line, if any.
    script: Option<String>,
    /// Whether `loadSession` is advertised.
    load_session: bool,
    /// Whether `sessionCapabilities.delete` is advertised.
    delete_sessions: bool,
    /// Whether images and embedded context are advertised.
    images: bool,
    /// The variable of the `env_var` sign-in, when one is required.
    auth: Option<String>,
    /// Set once `authenticate` succeeded.
    signed_in: Mutex<bool>,
    /// The session's id: made by `session/new`, or the one `session/load` named.
    session: Mutex<SessionId>,
    /// Set once a session was loaded.
    loaded: Mutex<bool>,
    cwd: Mutex<PathBuf>,
    cancelled: watch::Sender<bool>,
}

impl State {
    fn session(&self) -> SessionId {
        lock(&self.session).clone()
    }
}

/// What every session id this agent makes starts with.
const SESSION_PREFIX: &str = "scripted-session-";
/// The agent message replayed while a session loads: never to be shown as new output.
const REPLAYED: &str = "Replayed from the earlier session.";

/// The command line: `[--script FILE] [--load-session] [--delete-sessions] [--auth VAR]
/// [--images]`.
struct Options {
    script: Option<String>,
    load_session: bool,
    delete_sessions: bool,
    images: bool,
    auth: Option<String>,
}

/// `initialize`, read and answered as raw JSON: the typed answer cannot hold an `env_var`
/// sign-in method.
#[derive(Debug, Clone)]
struct RawInitialize(Value);

impl JsonRpcMessage for RawInitialize {
    fn matches_method(method: &str) -> bool {
        method == "initialize"
    }

    fn method(&self) -> &str {
        "initialize"
    }

    fn to_untyped_message(&self) -> Result<UntypedMessage, agent_client_protocol::Error> {
        UntypedMessage::new("initialize", &self.0)
    }

    fn parse_message(method: &str, params: &Value) -> Result<Self, agent_client_protocol::Error> {
        if !Self::matches_method(method) {
            return Err(agent_client_protocol::Error::method_not_found());
        }
        Ok(RawInitialize(params.clone()))
    }
}

impl JsonRpcRequest for RawInitialize {
    type Response = Value;
}

/// The answer to `initialize`, with the sign-in methods `--auth` asks for.
fn introduction(state: &State) -> Value {
    let (images, auth) = (state.images, state.auth.as_deref());
    let prompts = PromptCapabilities::new()
        .image(images)
        .embedded_context(images);
    let mut sessions = SessionCapabilities::new();
    if state.delete_sessions {
        sessions = sessions.delete(SessionDeleteCapabilities::new());
    }
    let typed = InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(state.load_session)
                .prompt_capabilities(prompts)
                .session_capabilities(sessions),
        )
        .agent_info(Implementation::new("scripted-acp-agent", "1.0.0"));
    let mut answer = serde_json::to_value(typed).unwrap_or_else(|_| json!({"protocolVersion": 1}));
    if let Some(var) = auth {
        answer["authMethods"] = json!([
            {"type": "env_var", "id": "scripted-key", "name": format!("Use {var}"),
             "description": format!("Reads {var}"), "vars": [{"name": var}]},
            {"id": "scripted-login", "name": "Log in to the scripted agent",
             "description": "Run `scripted-acp-agent login` in the terminal"}
        ]);
    }
    answer
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), agent_client_protocol::Error> {
    let options = options()?;
    let state = Arc::new(State {
        script: options.script,
        load_session: options.load_session,
        delete_sessions: options.delete_sessions,
        images: options.images,
        auth: options.auth,
        signed_in: Mutex::new(false),
        session: Mutex::new(SessionId::new(new_session_id())),
        loaded: Mutex::new(false),
        cwd: Mutex::new(PathBuf::from(".")),
        cancelled: watch::channel(false).0,
    });
    let transport =
        tether_agent::engines::acp::transport::lines(tokio::io::stdin(), tokio::io::stdout());
    Agent
        .v1()
        .name("scripted-acp-agent")
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: RawInitialize, responder, _cx: ConnectionTo<Client>| {
                    let request: InitializeRequest = serde_json::from_value(request.0)?;
                    report("initialize", json!(request.client_capabilities));
                    report("pid", json!(std::process::id()));
                    responder.respond(introduction(&state))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: AuthenticateRequest, responder, _cx: ConnectionTo<Client>| {
                    let method = request.method_id.0.to_string();
                    let has_key = state
                        .auth
                        .as_ref()
                        .is_some_and(|var| std::env::var_os(var).is_some());
                    report(
                        "authenticate",
                        json!({ "methodId": method, "hasKey": has_key }),
                    );
                    if method != "scripted-key" || !has_key {
                        return responder.respond_with_error(
                            agent_client_protocol::Error::invalid_params()
                                .data(json!("no key in the environment")),
                        );
                    }
                    *lock(&state.signed_in) = true;
                    responder.respond(AuthenticateResponse::new())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: NewSessionRequest, responder, _cx: ConnectionTo<Client>| {
                    if state.auth.is_some() && !*lock(&state.signed_in) {
                        report("session/new", json!({ "error": "auth_required" }));
                        return responder
                            .respond_with_error(agent_client_protocol::Error::auth_required());
                    }
                    let session = state.session();
                    report(
                        "session/new",
                        json!({ "cwd": request.cwd, "sessionId": session }),
                    );
                    *lock(&state.cwd) = request.cwd.clone();
                    // What it runs with, as a real agent says it: a mode, a model and an effort.
                    let modes = serde_json::from_value(json!({
                        "currentModeId": "default",
                        "availableModes": [{"id": "default", "name": "Default"}]
                    }))
                    .ok();
                    let options: Option<Vec<_>> = serde_json::from_value(json!([
                        {"id": "model", "name": "Model", "category": "model", "type": "select",
                         "currentValue": "scripted-model",
                         "options": [{"value": "scripted-model", "name": "Scripted"}]},
                        {"id": "effort", "name": "Effort", "category": "thought_level",
                         "type": "select", "currentValue": "medium",
                         "options": [{"value": "medium", "name": "Medium"}]}
                    ]))
                    .ok();
                    responder.respond(
                        NewSessionResponse::new(session)
                            .modes(modes)
                            .config_options(options),
                    )
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
                    report(
                        "load",
                        json!({
                            "sessionId": request.session_id,
                            "cwd": request.cwd,
                            "mcpServers": request.mcp_servers,
                        }),
                    );
                    if !state.load_session || !request.session_id.0.starts_with(SESSION_PREFIX) {
                        let unknown = agent_client_protocol::v1::schema::Error::session_not_found(
                            request.session_id,
                        );
                        return responder.respond_with_error(unknown.into());
                    }
                    *lock(&state.session) = request.session_id.clone();
                    *lock(&state.cwd) = request.cwd.clone();
                    *lock(&state.loaded) = true;
                    // The history goes out before the answer, as ACP has it.
                    say(&cx, &request.session_id, REPLAYED);
                    responder.respond(LoadSessionResponse::new())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: DeleteSessionRequest, responder, _cx: ConnectionTo<Client>| {
                    report("delete", json!({ "sessionId": request.session_id }));
                    if !state.delete_sessions {
                        return responder
                            .respond_with_error(agent_client_protocol::Error::method_not_found());
                    }
                    if !request.session_id.0.starts_with(SESSION_PREFIX) {
                        let refused = agent_client_protocol::Error::internal_error()
                            .data(json!(format!("cannot delete {}", request.session_id.0)));
                        return responder.respond_with_error(refused);
                    }
                    responder.respond(DeleteSessionResponse::new())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: PromptRequest, responder, cx: ConnectionTo<Client>| {
                    let state = state.clone();
                    let connection = cx.clone();
                    cx.spawn(async move {
                        let stop = perform(&connection, &state, &request).await;
                        report("stop", json!(stop));
                        responder.respond(PromptResponse::new(stop))
                    })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let state = state.clone();
                async move |_cancel: CancelNotification, _cx: ConnectionTo<Client>| {
                    report("session/cancel", json!({}));
                    state.cancelled.send_replace(true);
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
}

fn options() -> Result<Options, agent_client_protocol::Error> {
    let mut options = Options {
        script: None,
        load_session: false,
        delete_sessions: false,
        images: false,
        auth: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut rest = args.as_slice();
    loop {
        match rest {
            [] => return Ok(options),
            [flag, tail @ ..] if flag == "--load-session" => {
                options.load_session = true;
                rest = tail;
            }
            [flag, tail @ ..] if flag == "--delete-sessions" => {
                options.delete_sessions = true;
                rest = tail;
            }
            [flag, tail @ ..] if flag == "--images" => {
                options.images = true;
                rest = tail;
            }
            [flag, var, tail @ ..] if flag == "--auth" => {
                options.auth = Some(var.clone());
                rest = tail;
            }
            [flag, path, tail @ ..] if flag == "--script" => {
                let script = std::fs::read_to_string(path)
                    .map_err(agent_client_protocol::Error::into_internal_error)?;
                options.script = Some(script);
                rest = tail;
            }
            _ => {
                return Err(agent_client_protocol::Error::invalid_params().data(json!(
                    "usage: scripted-acp-agent [--script FILE] [--load-session] [--delete-sessions] [--auth VAR] [--images]"
                )))
            }
        }
    }
}

/// A session id no other process of this agent makes.
fn new_session_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.subsec_nanos())
        .unwrap_or_default();
    format!("{SESSION_PREFIX}{}-{nanos}", std::process::id())
}

/// Runs the script; the turn's stop reason.
async fn perform(cx: &ConnectionTo<Client>, state: &State, request: &PromptRequest) -> StopReason {
    let text = match request.prompt.first() {
        Some(ContentBlock::Text(text)) => text.text.clone(),
        _ => String::new(),
    };
    report("prompt", json!({ "text": text }));
    for block in request.prompt.iter().skip(1) {
        report("block", described(block));
    }
    let session = state.session();
    let source = state.script.clone().unwrap_or(text);
    let script = match script_in(&source) {
        Ok(script) => script,
        Err(err) => {
            report("script", json!({ "error": err.to_string() }));
            say(cx, &session, &format!("I cannot read this script: {err}"));
            return StopReason::Refusal;
        }
    };
    let cwd = lock(&state.cwd).clone();
    let mut answers: HashMap<String, bool> = HashMap::new();
    let mut cancelled = state.cancelled.subscribe();
    let loaded = *lock(&state.loaded);
    for step in expand(script.steps, loaded) {
        if *cancelled.borrow() {
            return StopReason::Cancelled;
        }
        match step {
            Step::Say(text) => say(cx, &session, &text),
            Step::Plan(plan) => update(cx, &session, SessionUpdate::Plan(plan)),
            Step::Tool(call) => update(cx, &session, SessionUpdate::ToolCall(call)),
            Step::ToolUpdate(call) => update(cx, &session, SessionUpdate::ToolCallUpdate(call)),
            Step::Permission { tool_call, options } => {
                let id = tool_call.tool_call_id.0.to_string();
                let allowed = permission(cx, &session, tool_call, options).await;
                answers.insert(id, allowed);
            }
            Step::Read { path, line, limit } => {
                let mut request =
                    ReadTextFileRequest::new(session.clone(), cwd.join(attached(path)));
                request.line = line;
                request.limit = limit;
                let answer = cx.send_request(request).block_task().await;
                report("read", result(answer.map(|read| json!(read.content))));
            }
            Step::Write {
                path,
                content,
                if_allowed,
            } => {
                if skipped("write", if_allowed.as_deref(), &answers) {
                    continue;
                }
                let request = WriteTextFileRequest::new(session.clone(), cwd.join(path), content);
                let answer = cx.send_request(request).block_task().await;
                report("write", result(answer.map(|_| json!("written"))));
            }
            Step::Terminal {
                command,
                args,
                cwd: folder,
                env,
                output_byte_limit,
                kill,
                if_allowed,
            } => {
                if skipped("terminal", if_allowed.as_deref(), &answers) {
                    continue;
                }
                let request = CreateTerminalRequest::new(session.clone(), command)
                    .args(args)
                    .cwd(folder.map(|folder| cwd.join(folder)))
                    .env(
                        env.into_iter()
                            .map(|(name, value)| EnvVariable::new(name, value))
                            .collect(),
                    )
                    .output_byte_limit(output_byte_limit);
                report("terminal", terminal(cx, &session, request, kill).await);
            }
            Step::Evidence { name, content } => report("evidence", evidence(&name, &content)),
            Step::WaitForCancel => {
                let _ = cancelled.wait_for(|cancelled| *cancelled).await;
                return StopReason::Cancelled;
            }
            Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            Step::Crash(code) => {
                report("crash", json!(code));
                // Let what was sent so far leave the connection's queue first.
                tokio::time::sleep(Duration::from_millis(300)).await;
                std::process::exit(code);
            }
            Step::Stop(reason) => return reason,
            // Expanded away before the loop.
            Step::UnlessLoaded(_) => {}
        }
    }
    StopReason::EndTurn
}

/// A prompt block in a report's words: an image by its type, URI, size and SHA-256.
fn described(block: &ContentBlock) -> Value {
    use base64::Engine as _;
    use sha2::Digest as _;
    match block {
        ContentBlock::Text(text) => json!({ "type": "text", "text": text.text }),
        ContentBlock::Image(image) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&image.data)
                .unwrap_or_default();
            let digest: String = sha2::Sha256::digest(&bytes)
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            json!({
                "type": "image", "mimeType": image.mime_type, "uri": image.uri,
                "size": bytes.len(), "sha256": digest,
            })
        }
        other => serde_json::to_value(other).unwrap_or_default(),
    }
}

/// The script in `text`: all of it, else its last line that is one.
fn script_in(text: &str) -> Result<Script, serde_json::Error> {
    serde_json::from_str(text).or_else(|whole| {
        text.lines()
            .rev()
            .find_map(|line| serde_json::from_str(line).ok())
            .ok_or(whole)
    })
}

/// `steps` with each `unlessLoaded` replaced by its steps, or by nothing in a loaded session.
fn expand(steps: Vec<Step>, loaded: bool) -> Vec<Step> {
    steps
        .into_iter()
        .flat_map(|step| match step {
            Step::UnlessLoaded(_) if loaded => Vec::new(),
            Step::UnlessLoaded(inner) => expand(inner, loaded),
            step => vec![step],
        })
        .collect()
}

fn say(cx: &ConnectionTo<Client>, session: &SessionId, text: &str) {
    let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(text.to_owned())));
    update(cx, session, SessionUpdate::AgentMessageChunk(chunk));
}

fn update(cx: &ConnectionTo<Client>, session: &SessionId, update: SessionUpdate) {
    let notification = SessionNotification::new(session.clone(), update);
    if let Err(err) = cx.send_notification(notification) {
        report("update", json!({ "error": err.to_string() }));
    }
}

/// Writes `name` into the run's evidence folder, as a program of the run would.
fn evidence(name: &str, content: &str) -> Value {
    let Some(folder) = std::env::var_os("TETHER_EVIDENCE_DIR") else {
        return json!({ "error": "TETHER_EVIDENCE_DIR is not set" });
    };
    match std::fs::write(PathBuf::from(folder).join(name), content) {
        Ok(()) => json!({ "ok": name }),
        Err(err) => json!({ "error": err.to_string() }),
    }
}

/// Asks; whether an allow option was selected.
async fn permission(
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    tool_call: ToolCallUpdate,
    options: Vec<PermissionOption>,
) -> bool {
    let kinds: HashMap<String, PermissionOptionKind> = options
        .iter()
        .map(|option| (option.option_id.0.to_string(), option.kind))
        .collect();
    let id = tool_call.tool_call_id.0.to_string();
    let request = RequestPermissionRequest::new(session.clone(), tool_call, options);
    let answer = cx.send_request(request).block_task().await;
    let (shown, allowed) = match &answer {
        Ok(response) => match &response.outcome {
            RequestPermissionOutcome::Selected(selected) => {
                let option = selected.option_id.0.to_string();
                let allowed = matches!(
                    kinds.get(&option),
                    Some(PermissionOptionKind::AllowOnce | PermissionOptionKind::AllowAlways)
                );
                (json!({ "selected": option }), allowed)
            }
            _ => (json!({ "outcome": "cancelled" }), false),
        },
        Err(err) => (json!({ "error": err.message }), false),
    };
    report("permission", json!({ "toolCallId": id, "answer": shown }));
    allowed
}

/// `terminal/create`, then `kill` if asked, `wait_for_exit`, `output` and `release`.
async fn terminal(
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    request: CreateTerminalRequest,
    kill: bool,
) -> Value {
    let created = match cx.send_request(request).block_task().await {
        Ok(created) => created,
        Err(err) => return json!({ "error": err.message }),
    };
    let id = created.terminal_id;
    if kill {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Err(err) = cx
            .send_request(KillTerminalRequest::new(session.clone(), id.clone()))
            .block_task()
            .await
        {
            return json!({ "error": err.message });
        }
    }
    let exit = cx
        .send_request(WaitForTerminalExitRequest::new(session.clone(), id.clone()))
        .block_task()
        .await;
    let output = cx
        .send_request(TerminalOutputRequest::new(session.clone(), id.clone()))
        .block_task()
        .await;
    let released = cx
        .send_request(ReleaseTerminalRequest::new(session.clone(), id.clone()))
        .block_task()
        .await;
    let after_release = cx
        .send_request(TerminalOutputRequest::new(session.clone(), id))
        .block_task()
        .await;
    match (exit, output) {
        (Ok(exit), Ok(output)) => json!({
            "exit": exit.exit_status,
            "output": output.output,
            "truncated": output.truncated,
            "released": released.is_ok(),
            "goneAfterRelease": after_release.is_err(),
        }),
        (Err(err), _) | (_, Err(err)) => json!({ "error": err.message }),
    }
}

fn skipped(step: &str, if_allowed: Option<&str>, answers: &HashMap<String, bool>) -> bool {
    let Some(id) = if_allowed else {
        return false;
    };
    if answers.get(id).copied().unwrap_or(false) {
        return false;
    }
    report(step, json!({ "skipped": format!("{id} was not allowed") }));
    true
}

/// `$TETHER_ATTACHMENTS/NAME` read from this process's own environment (the run's
/// attachments folder), so a script can name a task's file before its path is known.
fn attached(path: PathBuf) -> PathBuf {
    match (
        path.strip_prefix("$TETHER_ATTACHMENTS"),
        std::env::var_os("TETHER_ATTACHMENTS"),
    ) {
        (Ok(name), Some(folder)) => PathBuf::from(folder).join(name),
        _ => path,
    }
}

fn result(answer: Result<Value, agent_client_protocol::Error>) -> Value {
    match answer {
        Ok(value) => json!({ "ok": value }),
        Err(err) => json!({ "error": err.message }),
    }
}

fn report(step: &str, value: Value) {
    eprintln!("scripted: {step} {value}");
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
