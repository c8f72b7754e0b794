//! A scripted ACP agent, built on the agent side of the `agent-client-protocol` crate, for
//! testing `tether-agent`'s `acp` engine end to end.
//!
//! It speaks ACP v1 on stdin/stdout. Its script is the prompt's text (or the file given as
//! `--script FILE`): JSON `{"steps": [...]}`, each step one of
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
//!
//! `ifAllowed: ID` skips the step unless the permission asked for tool call `ID` was answered
//! with an allow option. Relative paths are taken from the session's folder. A
//! `session/cancel` between steps ends the turn `cancelled`.
//!
//! What each call answered goes to stderr as `scripted: STEP JSON`, one line each, so a test
//! reads it in the job's output (`stderr: scripted: …`); `scripted: pid N` comes first.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, CreateTerminalRequest,
    EnvVariable, Implementation, InitializeRequest, InitializeResponse, KillTerminalRequest,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind, Plan,
    PromptRequest, PromptResponse, ReadTextFileRequest, ReleaseTerminalRequest,
    RequestPermissionOutcome, RequestPermissionRequest, SessionNotification, SessionUpdate,
    StopReason, TerminalOutputRequest, TextContent, ToolCall, ToolCallUpdate,
    WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client};
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
}

/// What the agent knows across requests.
#[derive(Debug)]
struct State {
    /// The script given on the command line, if any.
    script: Option<String>,
    cwd: Mutex<PathBuf>,
    cancelled: watch::Sender<bool>,
}

const SESSION: &str = "scripted-session-1";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), agent_client_protocol::Error> {
    let script = script_file()?;
    let state = Arc::new(State {
        script,
        cwd: Mutex::new(PathBuf::from(".")),
        cancelled: watch::channel(false).0,
    });
    let transport =
        tether_agent::engines::acp::transport::lines(tokio::io::stdin(), tokio::io::stdout());
    Agent
        .v1()
        .name("scripted-acp-agent")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx: ConnectionTo<Client>| {
                report("initialize", json!(request.client_capabilities));
                report("pid", json!(std::process::id()));
                responder.respond(
                    InitializeResponse::new(ProtocolVersion::V1)
                        .agent_capabilities(AgentCapabilities::new())
                        .agent_info(Implementation::new("scripted-acp-agent", "1.0.0")),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let state = state.clone();
                async move |request: NewSessionRequest, responder, _cx: ConnectionTo<Client>| {
                    report("session/new", json!({ "cwd": request.cwd }));
                    *lock(&state.cwd) = request.cwd.clone();
                    responder.respond(NewSessionResponse::new(SESSION))
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

fn script_file() -> Result<Option<String>, agent_client_protocol::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(None),
        [flag, path] if flag == "--script" => std::fs::read_to_string(path)
            .map(Some)
            .map_err(agent_client_protocol::Error::into_internal_error),
        _ => Err(agent_client_protocol::Error::invalid_params()
            .data(json!("usage: scripted-acp-agent [--script FILE]"))),
    }
}

/// Runs the script; the turn's stop reason.
async fn perform(cx: &ConnectionTo<Client>, state: &State, request: &PromptRequest) -> StopReason {
    let text: String = request
        .prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect();
    let source = state.script.clone().unwrap_or(text);
    let script: Script = match serde_json::from_str(&source) {
        Ok(script) => script,
        Err(err) => {
            report("script", json!({ "error": err.to_string() }));
            say(cx, &format!("I cannot read this script: {err}"));
            return StopReason::Refusal;
        }
    };
    let cwd = lock(&state.cwd).clone();
    let mut answers: HashMap<String, bool> = HashMap::new();
    let mut cancelled = state.cancelled.subscribe();
    for step in script.steps {
        if *cancelled.borrow() {
            return StopReason::Cancelled;
        }
        match step {
            Step::Say(text) => say(cx, &text),
            Step::Plan(plan) => update(cx, SessionUpdate::Plan(plan)),
            Step::Tool(call) => update(cx, SessionUpdate::ToolCall(call)),
            Step::ToolUpdate(call) => update(cx, SessionUpdate::ToolCallUpdate(call)),
            Step::Permission { tool_call, options } => {
                let id = tool_call.tool_call_id.0.to_string();
                let allowed = permission(cx, tool_call, options).await;
                answers.insert(id, allowed);
            }
            Step::Read { path, line, limit } => {
                let mut request = ReadTextFileRequest::new(SESSION, cwd.join(path));
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
                let request = WriteTextFileRequest::new(SESSION, cwd.join(path), content);
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
                let request = CreateTerminalRequest::new(SESSION, command)
                    .args(args)
                    .cwd(folder.map(|folder| cwd.join(folder)))
                    .env(
                        env.into_iter()
                            .map(|(name, value)| EnvVariable::new(name, value))
                            .collect(),
                    )
                    .output_byte_limit(output_byte_limit);
                report("terminal", terminal(cx, request, kill).await);
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
        }
    }
    StopReason::EndTurn
}

fn say(cx: &ConnectionTo<Client>, text: &str) {
    let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(text.to_owned())));
    update(cx, SessionUpdate::AgentMessageChunk(chunk));
}

fn update(cx: &ConnectionTo<Client>, update: SessionUpdate) {
    if let Err(err) = cx.send_notification(SessionNotification::new(SESSION, update)) {
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
    tool_call: ToolCallUpdate,
    options: Vec<PermissionOption>,
) -> bool {
    let kinds: HashMap<String, PermissionOptionKind> = options
        .iter()
        .map(|option| (option.option_id.0.to_string(), option.kind))
        .collect();
    let id = tool_call.tool_call_id.0.to_string();
    let request = RequestPermissionRequest::new(SESSION, tool_call, options);
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
async fn terminal(cx: &ConnectionTo<Client>, request: CreateTerminalRequest, kill: bool) -> Value {
    let created = match cx.send_request(request).block_task().await {
        Ok(created) => created,
        Err(err) => return json!({ "error": err.message }),
    };
    let id = created.terminal_id;
    if kill {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Err(err) = cx
            .send_request(KillTerminalRequest::new(SESSION, id.clone()))
            .block_task()
            .await
        {
            return json!({ "error": err.message });
        }
    }
    let exit = cx
        .send_request(WaitForTerminalExitRequest::new(SESSION, id.clone()))
        .block_task()
        .await;
    let output = cx
        .send_request(TerminalOutputRequest::new(SESSION, id.clone()))
        .block_task()
        .await;
    let released = cx
        .send_request(ReleaseTerminalRequest::new(SESSION, id.clone()))
        .block_task()
        .await;
    let after_release = cx
        .send_request(TerminalOutputRequest::new(SESSION, id))
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
