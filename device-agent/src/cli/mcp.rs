//! `tether-agent mcp`: the stdio MCP server a run's coding agent starts.
//!
//! The ACP engine lists it in the `mcpServers` of the session it opens
//! ([`crate::run::tool_channel::acp_servers`]), so the coding agent starts it as its child,
//! inside the run's sandbox, with the run's channel in its environment. Everything it
//! offers is forwarded to that channel, which the agent serves outside the sandbox:
//!
//! - the tool `tether_context`: more context from the Tether server, under the run's lease;
//! - the tool `tether_report`: the worker's report of the run, checked at once (the last
//!   valid one goes with the run's completion);
//! - the tool `tether_attach`: a file of the run's folder kept as evidence;
//! - the tool `tether_screenshot`: a picture of a page on this computer's loopback or a
//!   file of the run's folder, kept as evidence; its preview comes back as an image;
//! - the job's attachments as resources (`tether://attachments/<id>/<name>`).
//!
//! Built on the official Rust MCP SDK (`rmcp`), its handler written out by hand.

use percent_encoding::utf8_percent_encode;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::json;
use tether_protocol::task_context::{CHAIN, GET, SEARCH};

use crate::engines::acp::prompt::OUTSIDE_UNRESERVED;
use crate::run::tool_channel::{self, Answer, Call, Listed};

/// The context tool's name (Claude Code shows it as `mcp__tether__tether_context`).
pub const CONTEXT_TOOL: &str = "tether_context";
/// The report tool's name.
pub const REPORT_TOOL: &str = "tether_report";
/// The attach tool's name.
pub const ATTACH_TOOL: &str = "tether_attach";
/// The screenshot tool's name.
pub const SCREENSHOT_TOOL: &str = "tether_screenshot";
/// How an attachment's resource address begins.
const ATTACHMENT_URI: &str = "tether://attachments/";

/// Serves MCP on stdin and stdout until the client closes them; the exit code.
///
/// # Errors
/// When the server cannot start or its transport fails.
pub async fn command() -> Result<i32> {
    let Some((socket, token)) = tool_channel::from_env() else {
        eprintln!(
            "tether-agent mcp runs inside a job, started by its coding agent (no {})",
            tool_channel::SOCKET_VAR
        );
        return Ok(2);
    };
    let server = Server {
        channel: Arc::new((socket, token)),
    };
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP session did not start")?;
    running.waiting().await?;
    Ok(0)
}

/// The run's channel: its socket and token.
#[derive(Clone)]
struct Server {
    channel: Arc<(PathBuf, String)>,
}

impl Server {
    async fn ask(&self, call: Call) -> Result<Answer, ErrorData> {
        let (socket, token) = &*self.channel;
        tool_channel::ask(socket, token, call)
            .await
            .map_err(|err| ErrorData::internal_error(format!("{err:#}"), None))
    }
}

/// The context tool: its name, what a model reads of it, and its input schema.
pub fn context_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "enum": [CHAIN, GET, SEARCH],
                "description": "What to ask: \"job.chain\" for the earlier runs this job continues (their prompts, outcomes and reports, oldest first); \"job.get\" for another job of the same account by its id (its prompt, outcome, report and changed-file list, never file contents); \"jobs.search\" for the account's jobs whose title or prompt hold every given word (newest first, at most 20)."
            },
            "args": {
                "type": "object",
                "description": "The arguments: {} for job.chain, {\"id\": \"<job id>\"} for job.get, {\"query\": \"<words>\"} for jobs.search.",
                "properties": {
                    "id": {"type": "string", "description": "job.get: the job's id."},
                    "query": {"type": "string", "description": "jobs.search: the words to look for."}
                }
            }
        },
        "required": ["name"]
    });
    let schema = object(schema);
    Tool::new(
        CONTEXT_TOOL,
        "Ask Tether, the service that assigned this task, for more context about it: the earlier runs of the job it continues, another job of the same account, or the account's jobs matching some words. Answers plain text.",
        schema,
    )
}

fn object(schema: serde_json::Value) -> JsonObject {
    match schema {
        serde_json::Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

/// The report tool. Its input schema is [`tether_protocol::report::WorkerReport`]'s, written
/// here once with what a model reads of each field (the channel checks every bound).
pub fn report_tool() -> Tool {
    use tether_protocol::report::{
        MAX_REPORT_ITEMS, MAX_REPORT_ITEM_CHARS, MAX_REPORT_LINKS, MAX_REPORT_SUMMARY_CHARS,
    };
    let list = |description: &str| {
        json!({
            "type": "array",
            "maxItems": MAX_REPORT_ITEMS,
            "items": {"type": "string", "maxLength": MAX_REPORT_ITEM_CHARS},
            "description": description,
        })
    };
    let schema = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["summary"],
        "properties": {
            "summary": {
                "type": "string",
                "maxLength": MAX_REPORT_SUMMARY_CHARS,
                "description": "What the run did, in a few sentences. The first line leads the notification the owner gets, so make it say the outcome."
            },
            "done": list("What was done, one entry each."),
            "tested": {
                "type": "array",
                "maxItems": MAX_REPORT_ITEMS,
                "description": "How the work was tested: each command really run and how it came out. Leave out what was not run.",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["command", "outcome"],
                    "properties": {
                        "command": {"type": "string", "maxLength": MAX_REPORT_ITEM_CHARS, "description": "The command as it was run, e.g. `cargo test -p web`."},
                        "outcome": {"type": "string", "enum": ["passed", "failed", "skipped"]},
                        "detail": {"type": "string", "maxLength": MAX_REPORT_ITEM_CHARS, "description": "A line about it, e.g. `2 of 118 failed: both flaky on CI too`."}
                    }
                }
            },
            "notDone": list("What was asked and not done."),
            "risks": list("What a reviewer should look at twice."),
            "links": {
                "type": "array",
                "maxItems": MAX_REPORT_LINKS,
                "items": {"type": "string", "pattern": "^https?://"},
                "description": "Where to look: http or https addresses (a preview, a pull request, a document)."
            }
        }
    });
    Tool::new(
        REPORT_TOOL,
        "Hand Tether your report of this task before you finish: what you did, how you tested it, what you did not do and what could go wrong. Call it once at the end (a later call replaces the report); if it is refused, fix what the answer names and call again.",
        object(schema),
    )
}

/// The attach tool.
pub fn attach_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["path"],
        "properties": {
            "path": {"type": "string", "description": "The file, relative to the folder you work in (or absolute inside it)."},
            "kind": {
                "type": "string",
                "enum": ["screenshot", "image", "video", "trace", "report", "log", "file"],
                "description": "What it is; left out, it is told from the file's name."
            },
            "caption": {"type": "string", "maxLength": crate::run::attach::MAX_CAPTION_CHARS, "description": "One line saying what it shows."}
        }
    });
    Tool::new(
        ATTACH_TOOL,
        "Keep a file of your working folder (a screenshot, a log, a trace, a generated report) as evidence of this task, shown to the owner beside the result. Answers the name it was kept under. Keys, credential files and links are refused.",
        object(schema),
    )
}

/// The screenshot tool.
pub fn screenshot_tool() -> Tool {
    use crate::run::capture::{DEFAULT_SIZE, SIZE_RANGE};
    let size = |what: &str, default: u32| {
        json!({
            "type": "integer",
            "minimum": SIZE_RANGE.start(),
            "maximum": SIZE_RANGE.end(),
            "description": format!("The viewport's {what} in CSS pixels ({default} when left out)."),
        })
    };
    let schema = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "url": {"type": "string", "description": "A page served on this computer's loopback (http://127.0.0.1:PORT/…, http://localhost:PORT/…), such as the dev server you started. Pages elsewhere are refused."},
            "path": {"type": "string", "description": "Instead of url: a file of the folder you work in (an HTML page, an SVG, an image)."},
            "width": size("width", DEFAULT_SIZE.0),
            "height": size("height", DEFAULT_SIZE.1),
            "fullPage": {"type": "boolean", "description": "The whole page, as tall as it is, rather than the viewport."}
        }
    });
    Tool::new(
        SCREENSHOT_TOOL,
        "Take a screenshot of what you built, with this computer's browser: a page your dev server serves on loopback, or a file of your folder. It is kept as evidence of this task for the owner, and a small preview comes back so you can check it. Give url or path.",
        object(schema),
    )
}

/// An attachment as a resource.
fn resource(listed: &Listed) -> Resource {
    let attachment = &listed.attachment;
    Resource::new(uri(listed), attachment.name.clone())
        .with_mime_type(attachment.media_type.clone())
        .with_size(attachment.size)
        .with_description(format!(
            "Attached to this job's task; also on this computer at {}",
            listed.path.display()
        ))
}

/// `tether://attachments/<id>/<name>`, the name percent-encoded.
fn uri(listed: &Listed) -> String {
    let name = utf8_percent_encode(&listed.attachment.name, OUTSIDE_UNRESERVED);
    format!("{ATTACHMENT_URI}{}/{name}", listed.attachment.id.as_str())
}

/// `tether_context`'s call from its arguments.
fn context_call(arguments: &JsonObject) -> Result<Call, String> {
    let Some(name) = arguments.get("name").and_then(|name| name.as_str()) else {
        return Err(format!("name is required: one of {CHAIN}, {GET}, {SEARCH}"));
    };
    let args = arguments.get("args").cloned().unwrap_or_else(|| json!({}));
    Ok(Call::Context {
        name: name.to_owned(),
        args,
    })
}

/// The call `op` from a tool's arguments, as the channel reads it (`tether_attach`,
/// `tether_screenshot`).
fn call_from(op: &str, mut arguments: JsonObject) -> Result<Call, String> {
    arguments.insert("op".into(), json!(op));
    serde_json::from_value(serde_json::Value::Object(arguments))
        .map_err(|err| format!("the arguments are not valid: {err}"))
}

fn refusal(error: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error)])
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("tether", crate::AGENT_VERSION))
        .with_instructions(
            "Tether assigned this task. Call tether_context for more context about it (the \
             runs it continues, other jobs of the account); the files attached to the task \
             are this server's resources. Keep files that show your work with tether_attach, \
             take screenshots of pages you serve on loopback with tether_screenshot, and \
             before you finish hand over your report with tether_report.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            context_tool(),
            report_tool(),
            attach_tool(),
            screenshot_tool(),
        ]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match name {
            CONTEXT_TOOL => Some(context_tool()),
            REPORT_TOOL => Some(report_tool()),
            ATTACH_TOOL => Some(attach_tool()),
            SCREENSHOT_TOOL => Some(screenshot_tool()),
            _ => None,
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let call = match request.name.as_ref() {
            CONTEXT_TOOL => context_call(&arguments),
            REPORT_TOOL => Ok(Call::Report {
                report: serde_json::Value::Object(arguments),
            }),
            ATTACH_TOOL => call_from("attach", arguments),
            SCREENSHOT_TOOL => call_from("screenshot", arguments),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool named {other}"),
                    None,
                ))
            }
        };
        let call = match call {
            Ok(call) => call,
            Err(problem) => return Ok(refusal(problem).into()),
        };
        // Every failure is the tool's result, so the model reads why.
        let result = match self.ask(call).await {
            Ok(Answer::Text { text }) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Ok(Answer::Attached { name }) => CallToolResult::success(vec![ContentBlock::text(
                format!("kept as {name} in this run's evidence"),
            )]),
            Ok(Answer::Captured {
                name,
                width,
                height,
                preview_base64,
            }) => {
                let mut content = vec![ContentBlock::text(format!(
                    "kept as {name} ({width}×{height}) in this run's evidence; its preview follows"
                ))];
                if !preview_base64.is_empty() {
                    content.push(ContentBlock::image(preview_base64, "image/jpeg"));
                }
                CallToolResult::success(content)
            }
            Ok(Answer::Refused { error }) => refusal(error),
            Ok(other) => refusal(format!("the agent answered something else: {other:?}")),
            Err(err) => refusal(err.message.into_owned()),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        match self.ask(Call::Attachments).await? {
            Answer::Attachments { attachments } => Ok(ListResourcesResult::with_all_items(
                attachments.iter().map(resource).collect(),
            )),
            Answer::Refused { error } => Err(ErrorData::internal_error(error, None)),
            _ => Err(ErrorData::internal_error(
                "the agent answered something else",
                None,
            )),
        }
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let Some(id) = request
            .uri
            .strip_prefix(ATTACHMENT_URI)
            .and_then(|rest| rest.split('/').next())
            .filter(|id| !id.is_empty())
        else {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        };
        let (attachment, contents) = match self.ask(Call::Attachment { id: id.to_owned() }).await? {
            Answer::Content {
                attachment,
                text: Some(text),
                ..
            } => {
                let contents = ResourceContents::text(text, request.uri.clone());
                (attachment, contents)
            }
            Answer::Content {
                attachment,
                base64: Some(blob),
                ..
            } => (
                attachment,
                ResourceContents::blob(blob, request.uri.clone()),
            ),
            Answer::Refused { error } => {
                return Err(ErrorData::resource_not_found(error, None));
            }
            _ => {
                return Err(ErrorData::internal_error(
                    "the agent answered something else",
                    None,
                ))
            }
        };
        let contents = contents.with_mime_type(attachment.attachment.media_type);
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::jobs::EvidenceKind;
    use tether_protocol::report::WorkerReport;

    #[test]
    fn the_report_tools_schema_takes_what_a_report_is() -> Result<(), Box<dyn std::error::Error>> {
        let tool = report_tool();
        let schema = serde_json::Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["required"], json!(["summary"]));
        let properties = schema["properties"].as_object().ok_or("no properties")?;
        let mut named: Vec<&str> = properties.keys().map(String::as_str).collect();
        named.sort_unstable();
        assert_eq!(
            named,
            ["done", "links", "notDone", "risks", "summary", "tested"]
        );
        // Every field the schema names is one a report has.
        let sample = json!({"summary": "s", "done": [], "tested": [], "notDone": [],
                            "risks": [], "links": []});
        WorkerReport::parse(sample)?;
        Ok(())
    }

    #[test]
    fn attach_arguments_become_the_channels_call() {
        let arguments = object(json!({"path": "out/a.png", "kind": "screenshot"}));
        assert_eq!(
            call_from("attach", arguments),
            Ok(Call::Attach {
                path: "out/a.png".into(),
                kind: Some(EvidenceKind::Screenshot),
                caption: None,
            })
        );
        let wrong = call_from("attach", object(json!({"path": "a", "kind": "photo"})));
        assert!(wrong.is_err_and(|why| why.contains("not valid")));
        assert!(call_from("attach", object(json!({"token": "x", "path": "a"}))).is_err());
    }

    #[test]
    fn screenshot_arguments_become_the_channels_call_as_the_schema_names_them() {
        let arguments = object(json!({"url": "http://127.0.0.1:5173/", "width": 640,
                                      "height": 480, "fullPage": true}));
        assert_eq!(
            call_from("screenshot", arguments),
            Ok(Call::Screenshot {
                url: Some("http://127.0.0.1:5173/".into()),
                path: None,
                width: Some(640),
                height: Some(480),
                full_page: true,
            })
        );
        let schema = serde_json::Value::Object((*screenshot_tool().input_schema).clone());
        let mut named: Vec<&str> = schema["properties"]
            .as_object()
            .map(|properties| properties.keys().map(String::as_str).collect())
            .unwrap_or_default();
        named.sort_unstable();
        assert_eq!(named, ["fullPage", "height", "path", "url", "width"]);
        let negative = call_from("screenshot", object(json!({"url": "x", "width": -1})));
        assert!(negative.is_err());
        assert!(call_from("screenshot", object(json!({"url": "x", "shell": "rm"}))).is_err());
    }
}
