//! `session/request_permission`: what the agent's tool call would do, as the policy's
//! actions, and the answer to give it, chosen among the options it offered by their kind
//! (never by position or name).
//!
//! A permission request may carry only the tool call's id and what changed; the rest (kind,
//! title, locations, raw input) was reported earlier in `session/update`, so the facts of
//! every tool call are kept for the turn and merged with the request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, SelectedPermissionOutcome,
    ToolCall, ToolCallContent, ToolCallUpdate, ToolKind,
};
use serde_json::Value;

use super::updates::kind_word;
use crate::policy::Action;

/// What is known of one tool call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallFacts {
    pub kind: Option<ToolKind>,
    pub title: String,
    pub locations: Vec<PathBuf>,
    pub raw_input: Option<Value>,
    /// The `diff` contents: each file's path and its proposed text.
    pub diffs: Vec<(PathBuf, String)>,
}

impl CallFacts {
    /// The text the tool call proposes for `path`, when it carries a `diff` for it.
    pub fn proposed_text(&self, path: &Path) -> Option<(PathBuf, String)> {
        self.diffs
            .iter()
            .find(|(diff_path, _)| diff_path == path)
            .cloned()
    }
}

/// The `diff` contents of a tool call's content.
fn diffs_of(content: &[ToolCallContent]) -> Vec<(PathBuf, String)> {
    content
        .iter()
        .filter_map(|item| match item {
            ToolCallContent::Diff(diff) => Some((diff.path.clone(), diff.new_text.clone())),
            _ => None,
        })
        .collect()
}

/// The facts of the turn's tool calls, by id.
#[derive(Debug, Default)]
pub struct ToolCalls {
    calls: HashMap<String, CallFacts>,
}

impl ToolCalls {
    pub fn new() -> ToolCalls {
        ToolCalls::default()
    }

    /// A `tool_call` update.
    pub fn record_call(&mut self, call: &ToolCall) {
        let facts = CallFacts {
            kind: Some(call.kind),
            title: call.title.clone(),
            locations: call.locations.iter().map(|at| at.path.clone()).collect(),
            raw_input: call.raw_input.clone(),
            diffs: diffs_of(&call.content),
        };
        self.calls.insert(call.tool_call_id.0.to_string(), facts);
    }

    /// A `tool_call_update`.
    pub fn record_update(&mut self, update: &ToolCallUpdate) {
        let merged = self.merged(update);
        self.calls.insert(update.tool_call_id.0.to_string(), merged);
    }

    /// What is known of the tool call `update` names, with `update`'s own fields on top.
    pub fn merged(&self, update: &ToolCallUpdate) -> CallFacts {
        let mut facts = self
            .calls
            .get(update.tool_call_id.0.as_ref())
            .cloned()
            .unwrap_or_default();
        let fields = &update.fields;
        if let Some(kind) = fields.kind {
            facts.kind = Some(kind);
        }
        if let Some(title) = &fields.title {
            facts.title.clone_from(title);
        }
        if let Some(locations) = &fields.locations {
            facts.locations = locations.iter().map(|at| at.path.clone()).collect();
        }
        if let Some(raw_input) = &fields.raw_input {
            facts.raw_input = Some(raw_input.clone());
        }
        if let Some(content) = &fields.content {
            facts.diffs = diffs_of(content);
        }
        facts
    }
}

/// The actions a tool call would take, for the policy to judge; all must pass.
///
/// - `execute`: the command of its raw input (`command` as a string runs in `sh -c`, as an
///   array it is the argv; `args`, `cwd`/`workdir` when given), else a tool call;
/// - `edit`, `delete`, `move`: writing each location (or the raw input's paths);
/// - `read`, `search`: reading each location;
/// - `fetch`: reaching the raw input's `url`;
/// - anything else, or a call whose target is unknown: the tool call itself.
pub fn actions_of(facts: &CallFacts, folder: &Path) -> Vec<Action> {
    let kind = facts.kind.unwrap_or_default();
    let tool = || Action::Tool {
        kind: kind_word(kind).to_owned(),
        title: facts.title.clone(),
    };
    let actions: Vec<Action> = match kind {
        ToolKind::Execute => command_of(facts.raw_input.as_ref(), folder)
            .map(|(argv, cwd)| Action::Command { argv, cwd })
            .into_iter()
            .collect(),
        ToolKind::Edit | ToolKind::Delete | ToolKind::Move => paths_of(facts)
            .into_iter()
            .map(|path| Action::WriteFile { path })
            .collect(),
        ToolKind::Read | ToolKind::Search => facts
            .locations
            .iter()
            .map(|path| Action::ReadFile { path: path.clone() })
            .collect(),
        ToolKind::Fetch => url_of(facts.raw_input.as_ref())
            .map(|target| Action::Network { target })
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    if actions.is_empty() {
        vec![tool()]
    } else {
        actions
    }
}

/// The command a raw input describes, and where it runs (the job's folder by default).
pub fn command_of(raw_input: Option<&Value>, folder: &Path) -> Option<(Vec<String>, PathBuf)> {
    let raw_input = raw_input?;
    let (command, args, cwd) = match raw_input {
        Value::String(line) => (Value::String(line.clone()), None, None),
        Value::Object(fields) => {
            let command = ["command", "argv", "cmd"]
                .iter()
                .find_map(|name| fields.get(*name))?
                .clone();
            let args = fields.get("args").and_then(strings);
            let cwd = ["cwd", "workdir", "working_directory"]
                .iter()
                .find_map(|name| fields.get(*name))
                .and_then(Value::as_str)
                .map(PathBuf::from);
            (command, args, cwd)
        }
        _ => return None,
    };
    let argv = match command {
        Value::String(line) if line.trim().is_empty() => return None,
        Value::String(line) => match args {
            Some(args) if !args.is_empty() => std::iter::once(line).chain(args).collect(),
            _ => vec!["sh".to_owned(), "-c".to_owned(), line],
        },
        other => strings(&other).filter(|argv| !argv.is_empty())?,
    };
    let cwd = match cwd {
        Some(cwd) if cwd.is_absolute() => cwd,
        Some(cwd) => folder.join(cwd),
        None => folder.to_path_buf(),
    };
    Some((argv, cwd))
}

fn strings(value: &Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|word| word.as_str().map(str::to_owned))
        .collect()
}

/// The locations of an edit, or the paths its raw input names.
fn paths_of(facts: &CallFacts) -> Vec<PathBuf> {
    if !facts.locations.is_empty() {
        return facts.locations.clone();
    }
    let Some(Value::Object(fields)) = &facts.raw_input else {
        return Vec::new();
    };
    [
        "path",
        "file_path",
        "filePath",
        "abs_path",
        "source",
        "destination",
        "new_path",
    ]
    .iter()
    .filter_map(|name| fields.get(*name).and_then(Value::as_str))
    .map(PathBuf::from)
    .collect()
}

fn url_of(raw_input: Option<&Value>) -> Option<String> {
    match raw_input? {
        Value::String(url) => Some(url.clone()),
        Value::Object(fields) => ["url", "uri", "target"]
            .iter()
            .find_map(|name| fields.get(*name).and_then(Value::as_str))
            .map(str::to_owned),
        _ => None,
    }
}

/// The answer to give the agent: the first option of the preferred kinds it offered (allow
/// once before allow always, reject once before reject always), else `cancelled`.
pub fn choose(options: &[PermissionOption], allowed: bool) -> RequestPermissionOutcome {
    let preferred: [PermissionOptionKind; 2] = if allowed {
        [
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ]
    } else {
        [
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ]
    };
    preferred
        .iter()
        .find_map(|kind| options.iter().find(|option| option.kind == *kind))
        .map_or(RequestPermissionOutcome::Cancelled, |option| {
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                option.option_id.clone(),
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ToolCallLocation, ToolCallUpdateFields};
    use serde_json::json;

    fn facts(kind: ToolKind, locations: &[&str], raw_input: Option<Value>) -> CallFacts {
        CallFacts {
            kind: Some(kind),
            title: "the title".into(),
            locations: locations.iter().map(PathBuf::from).collect(),
            raw_input,
            diffs: Vec::new(),
        }
    }

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|word| (*word).to_owned()).collect()
    }

    #[test]
    fn tool_calls_become_the_policys_actions() {
        let folder = Path::new("/work");
        let check = |facts: CallFacts, expected: Vec<Action>| {
            assert_eq!(actions_of(&facts, folder), expected, "{facts:?}");
        };
        check(
            facts(
                ToolKind::Execute,
                &[],
                Some(json!({"command": "make test"})),
            ),
            vec![Action::Command {
                argv: argv(&["sh", "-c", "make test"]),
                cwd: folder.into(),
            }],
        );
        check(
            facts(
                ToolKind::Execute,
                &[],
                Some(json!({"command": ["bash", "-lc", "ls"], "cwd": "/work/sub"})),
            ),
            vec![Action::Command {
                argv: argv(&["bash", "-lc", "ls"]),
                cwd: "/work/sub".into(),
            }],
        );
        check(
            facts(
                ToolKind::Execute,
                &[],
                Some(json!({"command": "cargo", "args": ["test"], "workdir": "crate"})),
            ),
            vec![Action::Command {
                argv: argv(&["cargo", "test"]),
                cwd: "/work/crate".into(),
            }],
        );
        check(
            facts(ToolKind::Execute, &[], Some(json!({"description": "?"}))),
            vec![Action::Tool {
                kind: "execute".into(),
                title: "the title".into(),
            }],
        );
        check(
            facts(ToolKind::Edit, &["/work/a.rs", "/work/b.rs"], None),
            vec![
                Action::WriteFile {
                    path: "/work/a.rs".into(),
                },
                Action::WriteFile {
                    path: "/work/b.rs".into(),
                },
            ],
        );
        check(
            facts(ToolKind::Delete, &[], Some(json!({"file_path": "/etc/x"}))),
            vec![Action::WriteFile {
                path: "/etc/x".into(),
            }],
        );
        check(
            facts(ToolKind::Read, &["/work/a.rs"], None),
            vec![Action::ReadFile {
                path: "/work/a.rs".into(),
            }],
        );
        check(
            facts(ToolKind::Search, &[], None),
            vec![Action::Tool {
                kind: "search".into(),
                title: "the title".into(),
            }],
        );
        check(
            facts(
                ToolKind::Fetch,
                &[],
                Some(json!({"url": "https://x.test/a"})),
            ),
            vec![Action::Network {
                target: "https://x.test/a".into(),
            }],
        );
        check(
            facts(ToolKind::Think, &[], None),
            vec![Action::Tool {
                kind: "think".into(),
                title: "the title".into(),
            }],
        );
    }

    #[test]
    fn a_request_is_merged_with_what_the_updates_said() {
        let mut calls = ToolCalls::new();
        let call = ToolCall::new("call-1", "Edit a.rs")
            .kind(ToolKind::Edit)
            .locations(vec![ToolCallLocation::new("/work/a.rs")]);
        calls.record_call(&call);
        let request = ToolCallUpdate::new(
            "call-1",
            ToolCallUpdateFields::new().title("Edit a.rs and b.rs".to_owned()),
        );
        let merged = calls.merged(&request);
        assert_eq!(merged.kind, Some(ToolKind::Edit));
        assert_eq!(merged.title, "Edit a.rs and b.rs");
        assert_eq!(merged.locations, [PathBuf::from("/work/a.rs")]);
        let unknown = ToolCallUpdate::new("call-2", ToolCallUpdateFields::new());
        assert_eq!(calls.merged(&unknown), CallFacts::default());
    }

    #[test]
    fn options_are_chosen_by_kind_never_by_position() {
        let option = |id: &str, kind| PermissionOption::new(id.to_owned(), id.to_owned(), kind);
        let options = vec![
            option("no-forever", PermissionOptionKind::RejectAlways),
            option("yes-forever", PermissionOptionKind::AllowAlways),
            option("no", PermissionOptionKind::RejectOnce),
            option("yes", PermissionOptionKind::AllowOnce),
        ];
        let selected = |outcome: RequestPermissionOutcome| match outcome {
            RequestPermissionOutcome::Selected(selected) => Some(selected.option_id.0.to_string()),
            _ => None,
        };
        assert_eq!(selected(choose(&options, true)), Some("yes".into()));
        assert_eq!(selected(choose(&options, false)), Some("no".into()));
        assert_eq!(
            selected(choose(&options[..2], true)),
            Some("yes-forever".into())
        );
        assert_eq!(selected(choose(&options[..1], true)), None);
        assert_eq!(selected(choose(&options[1..2], false)), None);
    }
}
