//! A scripted model server on loopback, for running the real coding agents in tests (no
//! model provider is reachable from them): real HTTP/1.1 on a plain tokio listener,
//! speaking just enough of three providers' streaming APIs for an agent to take one turn.
//!
//! - Anthropic Messages: `POST /v1/messages` (SSE when `stream`, JSON otherwise) and
//!   `POST /v1/messages/count_tokens`; key in `x-api-key`;
//! - OpenAI Responses: `POST /v1/responses` (SSE), `GET /v1/models`; key as a bearer token;
//!   the WebSocket upgrade Codex may try first on `GET /v1/responses` is a quick 404;
//! - Gemini: `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, `:generateContent`
//!   (Gemini CLI's routing classifier) and `:countTokens`; key in `x-goog-api-key` or `?key=`.
//!
//! The [`Script`] says what the model does: its first step calls the agent's own tool for the
//! [`Action`] (found by name in the tool list each request carries), and once the tool's
//! result comes back it answers `done: MARKER`, or `not done: MARKER` when the result says
//! the call was refused or failed. Every request is recorded; a wrong key is a 401.
// Each test uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

// Each stand-in reads requests the same way; a test binary holding both has two copies.
#[allow(clippy::duplicate_mod)]
#[path = "http_request.rs"]
mod http_request;
use http_request::{read_request, HttpRequest};

/// The key [`ModelServer::start`] accepts.
pub const API_KEY: &str = "sk-tether-model-test";

/// Whose API a request spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    OpenAi,
    Gemini,
}

/// What the model asks the agent to do in its first step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `content` to the absolute `path` with the agent's file tool.
    WriteFile { path: String, content: String },
    /// Run `command` with the agent's shell tool.
    RunCommand { command: String },
    /// Call the tool `name` (or an MCP tool of that name, `mcp__SERVER__name`) with `input`.
    CallTool { name: String, input: Value },
    /// No tool: only the final text.
    Nothing,
}

/// The model's part in a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub action: Action,
    /// Ends the final text, so a test can find it.
    pub marker: String,
    /// Further calls, one after each tool result that is not a refusal (Anthropic only).
    pub then: Vec<Action>,
}

impl Script {
    pub fn write_file(path: impl Into<String>, content: impl Into<String>, marker: &str) -> Self {
        let (path, content) = (path.into(), content.into());
        Script::new(Action::WriteFile { path, content }, marker)
    }

    pub fn run_command(command: impl Into<String>, marker: &str) -> Self {
        let command = command.into();
        Script::new(Action::RunCommand { command }, marker)
    }

    pub fn call_tool(name: impl Into<String>, input: Value, marker: &str) -> Self {
        let name = name.into();
        Script::new(Action::CallTool { name, input }, marker)
    }

    pub fn say(marker: &str) -> Self {
        Script::new(Action::Nothing, marker)
    }

    fn new(action: Action, marker: &str) -> Self {
        let marker = marker.to_owned();
        Script {
            action,
            marker,
            then: Vec::new(),
        }
    }

    /// After the earlier calls' results, the model also calls the tool `name` with `input`.
    #[must_use]
    pub fn then_call_tool(mut self, name: impl Into<String>, input: Value) -> Self {
        let name = name.into();
        self.then.push(Action::CallTool { name, input });
        self
    }

    /// The call that follows the `rounds`-th tool result, if the script has one and the
    /// result was not a refusal.
    fn follow_up(&self, result: Option<&str>, rounds: usize) -> Option<&Action> {
        result.filter(|result| !refused(result))?;
        self.then.get(rounds.checked_sub(1)?)
    }

    /// The final text when the action was carried out.
    pub fn done(&self) -> String {
        format!("done: {}", self.marker)
    }

    /// The final text when the agent refused or failed the action.
    pub fn not_done(&self) -> String {
        format!("not done: {}", self.marker)
    }

    /// Whether what an agent `said` reports the action done (`not done` contains `done`).
    pub fn reports_done(&self, said: &str) -> bool {
        said.contains(&self.done()) && !said.contains(&self.not_done())
    }
}

/// One request the server was sent.
#[derive(Debug, Clone)]
pub struct Request {
    /// `None` for a path no provider has.
    pub provider: Option<Provider>,
    pub method: String,
    /// Path and query.
    pub target: String,
    pub model: Option<String>,
    /// Whether it carried the key in the provider's header.
    pub keyed: bool,
    pub stream: bool,
    /// The tool names it offered the model.
    pub tools: Vec<String>,
    /// The tool result it brought back, if its last message was one.
    pub result: Option<String>,
    /// The media types of the images its messages carry (Anthropic's `image` blocks with a
    /// base64 source).
    pub images: Vec<String>,
    /// What the server answered, in short: `tool NAME`, `text TEXT`, or `status N`.
    pub answer: String,
}

impl Request {
    /// A request for a model step (not a count, a classifier call or a probe).
    pub fn is_turn(&self) -> bool {
        self.answer.starts_with("tool ") || self.answer.starts_with("text ")
    }
}

#[derive(Debug)]
struct State {
    key: String,
    script: Script,
    requests: Vec<Request>,
}

/// A running server.
pub struct ModelServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl ModelServer {
    /// Starts a server following `script` and taking [`API_KEY`], on a free loopback port.
    pub async fn start(script: Script) -> ModelServer {
        ModelServer::start_with_key(script, API_KEY).await
    }

    pub async fn start_with_key(script: Script, key: &str) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|err| panic!("cannot listen on loopback: {err}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|err| panic!("no local address: {err}"));
        let state = Arc::new(Mutex::new(State {
            key: key.to_owned(),
            script,
            requests: Vec::new(),
        }));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        ModelServer { addr, state }
    }

    /// What the provider's SDK takes as its base: `http://127.0.0.1:PORT`, with `/v1` for
    /// OpenAI (whose clients append `/responses`).
    pub fn base_url(&self, provider: Provider) -> String {
        match provider {
            Provider::OpenAi => format!("http://{}/v1", self.addr),
            Provider::Anthropic | Provider::Gemini => format!("http://{}", self.addr),
        }
    }

    pub fn key(&self) -> String {
        self.with(|state| state.key.clone())
    }

    pub fn script(&self) -> Script {
        self.with(|state| state.script.clone())
    }

    /// Follows `script` from the next request on.
    pub fn set_script(&self, script: Script) {
        self.with(|state| state.script = script);
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.with(|state| state.requests.clone())
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The path and query of a request.
trait Target {
    fn path(&self) -> &str;
    fn query(&self, name: &str) -> Option<&str>;
}

impl Target for HttpRequest {
    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    fn query(&self, name: &str) -> Option<&str> {
        let (_, query) = self.target.split_once('?')?;
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    }
}

/// A body to send: JSON, or server-sent events as `(event name, data)`.
enum Body {
    Json(Value),
    Events(Vec<(Option<&'static str>, Value)>),
}

/// What a request asks and what is answered, before it is recorded.
struct Exchange {
    request: Request,
    status: u16,
    body: Body,
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some(http) = read_request(&mut stream).await else {
        return;
    };
    let (status, body) = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        let exchange = answer(&state, &http);
        state.requests.push(exchange.request);
        (exchange.status, exchange.body)
    };
    let (kind, text) = match body {
        Body::Json(value) => ("application/json", value.to_string()),
        Body::Events(events) => ("text/event-stream", events_text(&events)),
    };
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
        reason(status),
        text.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(text.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Other",
    }
}

fn events_text(events: &[(Option<&'static str>, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| match name {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        })
        .collect()
}

fn answer(state: &State, http: &HttpRequest) -> Exchange {
    let body: Value = serde_json::from_slice(&http.body).unwrap_or(Value::Null);
    let provider = provider_of(http);
    let mut request = Request {
        provider,
        method: http.method.clone(),
        target: http.target.clone(),
        model: body["model"].as_str().map(str::to_owned),
        keyed: provider.is_some_and(|provider| given_key(http, provider) == Some(&state.key)),
        stream: body["stream"].as_bool().unwrap_or(false),
        tools: Vec::new(),
        result: None,
        images: Vec::new(),
        answer: String::new(),
    };
    let (status, reply) = match provider {
        None => (404, Body::Json(json!({ "error": "no such route" }))),
        Some(provider) if !request.keyed => (401, Body::Json(unauthorized(provider))),
        Some(Provider::Anthropic) => anthropic(http, &body, &state.script, &mut request),
        Some(Provider::OpenAi) => openai(http, &body, &state.script, &mut request),
        Some(Provider::Gemini) => gemini(http, &body, &state.script, &mut request),
    };
    if request.answer.is_empty() {
        request.answer = format!("status {status}");
    }
    Exchange {
        request,
        status,
        body: reply,
    }
}

fn provider_of(http: &HttpRequest) -> Option<Provider> {
    let path = http.path();
    if path.starts_with("/v1/messages") {
        Some(Provider::Anthropic)
    } else if path == "/v1/responses" || path == "/v1/models" {
        Some(Provider::OpenAi)
    } else if path.starts_with("/v1beta/models/") {
        Some(Provider::Gemini)
    } else {
        None
    }
}

fn given_key(http: &HttpRequest, provider: Provider) -> Option<&str> {
    match provider {
        Provider::Anthropic => http.header("x-api-key"),
        Provider::OpenAi => http.header("authorization")?.strip_prefix("Bearer "),
        Provider::Gemini => http.header("x-goog-api-key").or(http.query("key")),
    }
}

fn unauthorized(provider: Provider) -> Value {
    match provider {
        Provider::Anthropic => json!({
            "type": "error",
            "error": { "type": "authentication_error", "message": "invalid x-api-key" },
        }),
        Provider::OpenAi => json!({
            "error": {
                "message": "Incorrect API key provided", "type": "invalid_request_error",
                "code": "invalid_api_key",
            },
        }),
        Provider::Gemini => json!({
            "error": { "code": 401, "message": "API key not valid", "status": "UNAUTHENTICATED" },
        }),
    }
}

/// The model's next step.
enum Step {
    /// Call the tool `name` with `input` (a JSON object, or the text of a freeform tool).
    Call {
        name: String,
        input: Value,
        freeform: bool,
    },
    Say(String),
}

impl Step {
    fn summary(&self) -> String {
        match self {
            Step::Call { name, .. } => format!("tool {name}"),
            Step::Say(text) => format!("text {text}"),
        }
    }
}

/// The step after the agent's `result` (if it brought one), or the first step of the
/// script, given the call an agent's `tools` allow for it (`None`: none fits). A request
/// offering no tools at all is an aside (a title, a summary) and gets the final text.
fn next_step(script: &Script, result: Option<&str>, tools: &[String], call: Option<Step>) -> Step {
    match (result, &script.action, call) {
        (Some(result), _, _) if refused(result) => Step::Say(script.not_done()),
        (Some(_), _, _) | (None, Action::Nothing, _) => Step::Say(script.done()),
        (None, _, Some(call)) => call,
        (None, _, None) if tools.is_empty() => Step::Say(script.done()),
        (None, _, None) => Step::Say(format!("{} (no tool for it)", script.not_done())),
    }
}

/// Whether a tool result says the call was refused or failed.
fn refused(result: &str) -> bool {
    let text = result.to_ascii_lowercase();
    let words = [
        "denied",
        "refused",
        "rejected",
        "aborted",
        "canceled",
        "cancelled",
        "not allowed",
        "permission",
        "error",
        "failed",
    ];
    words.iter().any(|word| text.contains(word)) || nonzero_exit(&text)
}

/// Codex reports `Exit code: N` (or `Process exited with code N`) in its tool output.
fn nonzero_exit(text: &str) -> bool {
    ["exit code: ", "exited with code "].iter().any(|lead| {
        text.split(lead)
            .skip(1)
            .any(|rest| rest.split(|c: char| !c.is_ascii_digit()).next() != Some("0"))
    })
}

/// The first of `wanted` among `names`, matching MCP-prefixed names (`mcp__acp__Write`) too.
fn find_tool<'a>(names: &'a [String], wanted: &[&str]) -> Option<&'a String> {
    wanted.iter().find_map(|want| {
        names
            .iter()
            .find(|name| name == want || name.ends_with(&format!("__{want}")))
    })
}

fn anthropic(
    http: &HttpRequest,
    body: &Value,
    script: &Script,
    request: &mut Request,
) -> (u16, Body) {
    if http.path() == "/v1/messages/count_tokens" {
        request.answer = "count".to_owned();
        return (200, Body::Json(json!({ "input_tokens": 10 })));
    }
    request.tools = names(&body["tools"], "/name");
    request.result = anthropic_result(body);
    request.images = anthropic_images(body);
    let call = anthropic_call(&request.tools, &script.action);
    let mut step = next_step(script, request.result.as_deref(), &request.tools, call);
    let rounds = anthropic_rounds(body);
    let follow_up = script.follow_up(request.result.as_deref(), rounds);
    if let Some(call) = follow_up.and_then(|action| anthropic_call(&request.tools, action)) {
        step = call;
    }
    request.answer = step.summary();
    let model = body["model"].clone();
    let id = if rounds == 0 {
        "toolu_scripted".to_owned()
    } else {
        format!("toolu_scripted_{rounds}")
    };
    if request.stream {
        (200, Body::Events(anthropic_events(&step, &model, &id)))
    } else {
        (200, Body::Json(anthropic_message(&step, &model, &id)))
    }
}

/// How many tool results the conversation holds: the calls answered so far.
fn anthropic_rounds(body: &Value) -> usize {
    let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
    messages
        .iter()
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .filter(|part| part["type"] == "tool_result")
        .count()
}

/// The tool result in the last message, with `(error)` when flagged so.
fn anthropic_result(body: &Value) -> Option<String> {
    let last = body["messages"].as_array()?.last()?;
    let result = last["content"]
        .as_array()?
        .iter()
        .find(|part| part["type"] == "tool_result")?;
    let flag = if result["is_error"] == true {
        " (error)"
    } else {
        ""
    };
    // Only the result's text: an image beside it (a screenshot's preview) is not its word.
    let content = match result["content"].as_array() {
        Some(parts) => parts
            .iter()
            .filter(|part| part["type"] == "text")
            .map(|part| part["text"].as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n"),
        None => result["content"].to_string(),
    };
    Some(format!("{content}{flag}"))
}

fn anthropic_images(body: &Value) -> Vec<String> {
    let parts = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|message| message["content"].as_array())
        .flatten();
    parts
        .filter(|part| part["type"] == "image" && part["source"]["type"] == "base64")
        .filter_map(|part| part["source"]["media_type"].as_str().map(str::to_owned))
        .collect()
}

fn anthropic_call(tools: &[String], action: &Action) -> Option<Step> {
    let (name, input) = match action {
        Action::WriteFile { path, content } => (
            find_tool(tools, &["Write"])?,
            json!({ "file_path": path, "content": content }),
        ),
        // Claude Code's Bash tool under ACP insists on a timeout.
        Action::RunCommand { command } => (
            find_tool(tools, &["Bash"])?,
            json!({ "command": command, "description": "Run the scripted command", "timeout": 120000 }),
        ),
        Action::CallTool { name, input } => (find_tool(tools, &[name.as_str()])?, input.clone()),
        Action::Nothing => return None,
    };
    let name = name.clone();
    Some(Step::Call {
        name,
        input,
        freeform: false,
    })
}

fn anthropic_events(step: &Step, model: &Value, id: &str) -> Vec<(Option<&'static str>, Value)> {
    let (block, delta, stop) = match step {
        Step::Call { name, input, .. } => (
            json!({ "type": "tool_use", "id": id, "name": name, "input": {} }),
            json!({ "type": "input_json_delta", "partial_json": input.to_string() }),
            "tool_use",
        ),
        Step::Say(text) => (
            json!({ "type": "text", "text": "" }),
            json!({ "type": "text_delta", "text": text }),
            "end_turn",
        ),
    };
    let message = json!({
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": { "input_tokens": 10, "output_tokens": 1 },
    });
    vec![
        (
            Some("message_start"),
            json!({ "type": "message_start", "message": message }),
        ),
        (
            Some("content_block_start"),
            json!({ "type": "content_block_start", "index": 0, "content_block": block }),
        ),
        (
            Some("content_block_delta"),
            json!({ "type": "content_block_delta", "index": 0, "delta": delta }),
        ),
        (
            Some("content_block_stop"),
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        (
            Some("message_delta"),
            json!({
                "type": "message_delta",
                "delta": { "stop_reason": stop, "stop_sequence": null },
                "usage": { "output_tokens": 5 },
            }),
        ),
        (Some("message_stop"), json!({ "type": "message_stop" })),
    ]
}

fn anthropic_message(step: &Step, model: &Value, id: &str) -> Value {
    let (content, stop) = match step {
        Step::Call { name, input, .. } => (
            json!({ "type": "tool_use", "id": id, "name": name, "input": input }),
            "tool_use",
        ),
        Step::Say(text) => (json!({ "type": "text", "text": text }), "end_turn"),
    };
    json!({
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
        "content": [content], "stop_reason": stop, "stop_sequence": null,
        "usage": { "input_tokens": 10, "output_tokens": 5 },
    })
}

fn openai(http: &HttpRequest, body: &Value, script: &Script, request: &mut Request) -> (u16, Body) {
    match (http.method.as_str(), http.path()) {
        ("GET", "/v1/models") => {
            request.answer = "models".to_owned();
            return (200, Body::Json(json!({ "object": "list", "data": [] })));
        }
        ("POST", "/v1/responses") => {}
        // Codex's WebSocket upgrade: refused at once, so it falls back to HTTPS.
        _ => {
            return (
                404,
                Body::Json(json!({ "error": { "message": "no websockets" } })),
            )
        }
    }
    request.tools = names(&body["tools"], "/name");
    request.result = openai_result(body);
    let call = openai_call(&body["tools"], &script.action);
    let step = next_step(script, request.result.as_deref(), &request.tools, call);
    request.answer = step.summary();
    (200, Body::Events(openai_events(&step)))
}

fn openai_result(body: &Value) -> Option<String> {
    let last = body["input"].as_array()?.last()?;
    let kind = last["type"].as_str()?;
    (kind == "function_call_output" || kind == "custom_tool_call_output").then(|| {
        match &last["output"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    })
}

fn openai_call(tools: &Value, action: &Action) -> Option<Step> {
    let listed = names(tools, "/name");
    let freeform = |name: &str| {
        tools.as_array().is_some_and(|tools| {
            tools
                .iter()
                .any(|tool| tool["name"] == name && tool["type"] == "custom")
        })
    };
    let (name, input) = match action {
        Action::WriteFile { path, content } => {
            let name = find_tool(&listed, &["apply_patch"])?;
            let patch = add_file_patch(path, content);
            if freeform(name) {
                (name.clone(), Value::String(patch))
            } else {
                (name.clone(), json!({ "input": patch }))
            }
        }
        Action::RunCommand { command } => {
            let name = find_tool(&listed, &["exec_command", "shell_command", "shell"])?;
            let input = match name.as_str() {
                "exec_command" => json!({ "cmd": command }),
                "shell_command" => json!({ "command": command }),
                _ => json!({ "command": ["bash", "-lc", command] }),
            };
            (name.clone(), input)
        }
        Action::CallTool { name, input } => {
            (find_tool(&listed, &[name.as_str()])?.clone(), input.clone())
        }
        Action::Nothing => return None,
    };
    let freeform = freeform(&name);
    Some(Step::Call {
        name,
        input,
        freeform,
    })
}

/// An `apply_patch` patch creating `path` with `content`.
fn add_file_patch(path: &str, content: &str) -> String {
    let lines: String = content.lines().map(|line| format!("+{line}\n")).collect();
    format!("*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n")
}

fn openai_events(step: &Step) -> Vec<(Option<&'static str>, Value)> {
    let created = json!({ "type": "response.created", "response": { "id": "resp_scripted" } });
    let (item, deltas) = match step {
        Step::Call {
            name,
            input,
            freeform: true,
        } => (
            json!({ "type": "custom_tool_call", "id": "ctc_scripted", "call_id": "call_scripted",
                    "name": name, "input": input }),
            Vec::new(),
        ),
        Step::Call { name, input, .. } => {
            let arguments = input.to_string();
            let delta = json!({ "type": "response.function_call_arguments.delta",
                                "item_id": "fc_scripted", "output_index": 0, "delta": arguments });
            let done = json!({ "type": "response.function_call_arguments.done",
                               "item_id": "fc_scripted", "output_index": 0, "arguments": arguments });
            (
                json!({ "type": "function_call", "id": "fc_scripted", "call_id": "call_scripted",
                        "name": name, "arguments": arguments }),
                vec![
                    (Some("response.function_call_arguments.delta"), delta),
                    (Some("response.function_call_arguments.done"), done),
                ],
            )
        }
        Step::Say(text) => (
            json!({ "type": "message", "id": "msg_scripted", "role": "assistant", "status": "completed",
                    "content": [{ "type": "output_text", "text": text, "annotations": [] }] }),
            vec![(
                Some("response.output_text.delta"),
                json!({ "type": "response.output_text.delta", "item_id": "msg_scripted",
                        "output_index": 0, "content_index": 0, "delta": text }),
            )],
        ),
    };
    let added = json!({ "type": "response.output_item.added", "output_index": 0, "item": item });
    let done = json!({ "type": "response.output_item.done", "output_index": 0, "item": item });
    let usage = json!({ "input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
                        "output_tokens_details": null, "total_tokens": 15 });
    let completed = json!({ "type": "response.completed",
                            "response": { "id": "resp_scripted", "usage": usage } });
    let mut events = vec![
        (Some("response.created"), created),
        (Some("response.output_item.added"), added),
    ];
    events.extend(deltas);
    events.push((Some("response.output_item.done"), done));
    events.push((Some("response.completed"), completed));
    events
}

fn gemini(http: &HttpRequest, body: &Value, script: &Script, request: &mut Request) -> (u16, Body) {
    let Some((model, method)) = http
        .path()
        .strip_prefix("/v1beta/models/")
        .and_then(|rest| rest.split_once(':'))
    else {
        return (404, Body::Json(json!({ "error": { "code": 404 } })));
    };
    request.model = Some(model.to_owned());
    match method {
        "countTokens" => {
            request.answer = "count".to_owned();
            return (200, Body::Json(json!({ "totalTokens": 10 })));
        }
        // Gemini CLI's routing classifier (a middling score keeps its default model).
        "generateContent" => {
            request.answer = "classifier".to_owned();
            let verdict = json!({ "complexity_reasoning": "scripted", "complexity_score": 50 });
            return (
                200,
                Body::Json(gemini_chunk(&Step::Say(verdict.to_string()))),
            );
        }
        "streamGenerateContent" => request.stream = true,
        _ => return (404, Body::Json(json!({ "error": { "code": 404 } }))),
    }
    request.tools = names(&body["tools"], "/functionDeclarations/*/name");
    request.result = gemini_result(body);
    let call = gemini_call(&request.tools, &script.action);
    let step = next_step(script, request.result.as_deref(), &request.tools, call);
    request.answer = step.summary();
    (200, Body::Events(vec![(None, gemini_chunk(&step))]))
}

fn gemini_result(body: &Value) -> Option<String> {
    let last = body["contents"].as_array()?.last()?;
    let response = last["parts"]
        .as_array()?
        .iter()
        .find_map(|part| part.get("functionResponse"))?;
    Some(response["response"].to_string())
}

fn gemini_call(tools: &[String], action: &Action) -> Option<Step> {
    let (name, input) = match action {
        Action::WriteFile { path, content } => (
            find_tool(tools, &["write_file"])?,
            json!({ "file_path": path, "content": content }),
        ),
        Action::RunCommand { command } => (
            find_tool(tools, &["run_shell_command"])?,
            json!({ "command": command, "description": "Run the scripted command" }),
        ),
        Action::CallTool { name, input } => (find_tool(tools, &[name.as_str()])?, input.clone()),
        Action::Nothing => return None,
    };
    let name = name.clone();
    Some(Step::Call {
        name,
        input,
        freeform: false,
    })
}

fn gemini_chunk(step: &Step) -> Value {
    let part = match step {
        Step::Call { name, input, .. } => {
            json!({ "functionCall": { "name": name, "args": input } })
        }
        Step::Say(text) => json!({ "text": text }),
    };
    json!({
        "candidates": [{
            "content": { "role": "model", "parts": [part] },
            "finishReason": "STOP", "index": 0,
        }],
        "usageMetadata": { "promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15 },
        "modelVersion": "scripted",
    })
}

/// The strings at `pointer` in each element of the array `list`; a `*` in the pointer walks
/// into every element of an inner array.
fn names(list: &Value, pointer: &str) -> Vec<String> {
    let Some(items) = list.as_array() else {
        return Vec::new();
    };
    match pointer.split_once("/*") {
        Some((outer, inner)) => items
            .iter()
            .flat_map(|item| names(item.pointer(outer).unwrap_or(&Value::Null), inner))
            .collect(),
        None => items
            .iter()
            .filter_map(|item| item.pointer(pointer)?.as_str())
            .map(str::to_owned)
            .collect(),
    }
}
