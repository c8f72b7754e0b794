//! `session/update` notifications turned into the job's output lines, the way a person
//! would follow the agent: its messages as text, each tool call's title and status, the plan.
//!
//! Agent messages arrive in chunks that may split a line anywhere; they are joined and sent
//! line by line. Anything else the agent reports ends the message being streamed. The last
//! complete message is the run's summary when the turn ends well.

use std::collections::HashMap;

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Plan, PlanEntryStatus, SessionUpdate, ToolCall, ToolCallStatus,
    ToolCallUpdate, ToolKind,
};

/// Most characters of the final message kept for the summary.
pub const MAX_SUMMARY_CHARS: usize = 2000;

/// What the agent said and did so far in the turn.
#[derive(Debug, Default)]
pub struct Transcript {
    /// The agent message being streamed, whole.
    message: String,
    /// The part of `message` after its last newline, not sent yet.
    partial: String,
    /// The id of the message being streamed, when the agent gives one.
    message_id: Option<String>,
    /// The last agent message that ended.
    last_message: String,
    /// Tool call titles by id, for updates that carry only a status.
    tool_titles: HashMap<String, String>,
}

impl Transcript {
    pub fn new() -> Transcript {
        Transcript::default()
    }

    /// The output lines one update adds.
    pub fn apply(&mut self, update: &SessionUpdate) -> Vec<String> {
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => self.message_chunk(chunk),
            // Thoughts and the echo of the user's own prompt are not output.
            SessionUpdate::AgentThoughtChunk(_) | SessionUpdate::UserMessageChunk(_) => Vec::new(),
            SessionUpdate::ToolCall(call) => {
                let line = self.tool_call(call);
                self.then(vec![line])
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let line = self.tool_update_line(update);
                self.then(line.into_iter().collect())
            }
            SessionUpdate::Plan(plan) => self.then(plan_lines(plan)),
            SessionUpdate::Notice(notice) => {
                let line = format!("notice: {}", notice.title.trim());
                self.then(vec![line])
            }
            _ => Vec::new(),
        }
    }

    /// The end of the turn: the rest of the message being streamed.
    pub fn finish(&mut self) -> Vec<String> {
        self.end_message()
    }

    /// The last complete agent message (or the one being streamed), trimmed and cut to
    /// [`MAX_SUMMARY_CHARS`].
    pub fn final_message(&self) -> String {
        let message = if self.message.trim().is_empty() {
            &self.last_message
        } else {
            &self.message
        };
        cut_chars(message.trim(), MAX_SUMMARY_CHARS)
    }

    fn message_chunk(&mut self, chunk: &ContentChunk) -> Vec<String> {
        let mut lines = Vec::new();
        let id = chunk.message_id.as_ref().map(|id| id.0.to_string());
        if id.is_some() && self.message_id.is_some() && id != self.message_id {
            lines.extend(self.end_message());
        }
        if id.is_some() {
            self.message_id = id;
        }
        let text = content_text(&chunk.content);
        self.message.push_str(&text);
        self.partial.push_str(&text);
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            lines.push(line.trim_end_matches(['\n', '\r']).to_owned());
        }
        lines
    }

    /// Ends the message being streamed, then adds `lines`.
    fn then(&mut self, lines: Vec<String>) -> Vec<String> {
        let mut out = self.end_message();
        out.extend(lines);
        out
    }

    fn end_message(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        let rest = std::mem::take(&mut self.partial);
        if !rest.trim().is_empty() {
            lines.push(rest);
        }
        if !self.message.trim().is_empty() {
            self.last_message = std::mem::take(&mut self.message);
        }
        self.message.clear();
        self.message_id = None;
        lines
    }

    /// Records a tool call's title; its line.
    fn tool_call(&mut self, call: &ToolCall) -> String {
        self.tool_titles
            .insert(call.tool_call_id.0.to_string(), call.title.clone());
        format!(
            "tool: {} ({}) {}",
            one_line(&call.title),
            kind_word(call.kind),
            status_word(call.status)
        )
    }

    fn tool_update_line(&mut self, update: &ToolCallUpdate) -> Option<String> {
        let id = update.tool_call_id.0.to_string();
        if let Some(title) = &update.fields.title {
            self.tool_titles.insert(id.clone(), title.clone());
        }
        let status = update.fields.status?;
        let title = self
            .tool_titles
            .get(&id)
            .cloned()
            .unwrap_or_else(|| id.clone());
        Some(format!(
            "tool: {} {}",
            one_line(&title),
            status_word(status)
        ))
    }
}

fn plan_lines(plan: &Plan) -> Vec<String> {
    let mut lines = vec!["plan:".to_owned()];
    for entry in &plan.entries {
        let mark = match entry.status {
            PlanEntryStatus::Completed => "[x]",
            PlanEntryStatus::InProgress => "[~]",
            _ => "[ ]",
        };
        lines.push(format!("  {mark} {}", one_line(&entry.content)));
    }
    lines
}

/// The text of a content block; other kinds are named.
pub fn content_text(content: &ContentBlock) -> String {
    match content {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(_) => "[image]".to_owned(),
        ContentBlock::Audio(_) => "[audio]".to_owned(),
        ContentBlock::ResourceLink(link) => format!("[{}]", link.uri),
        ContentBlock::Resource(_) => "[resource]".to_owned(),
        _ => "[content]".to_owned(),
    }
}

/// A tool kind as ACP spells it.
pub fn kind_word(kind: ToolKind) -> &'static str {
    match kind {
        ToolKind::Read => "read",
        ToolKind::Edit => "edit",
        ToolKind::Delete => "delete",
        ToolKind::Move => "move",
        ToolKind::Search => "search",
        ToolKind::Execute => "execute",
        ToolKind::Think => "think",
        ToolKind::Fetch => "fetch",
        ToolKind::SwitchMode => "switch_mode",
        _ => "other",
    }
}

fn status_word(status: ToolCallStatus) -> &'static str {
    match status {
        ToolCallStatus::Pending => "pending",
        ToolCallStatus::InProgress => "running",
        ToolCallStatus::Completed => "done",
        ToolCallStatus::Failed => "failed",
        _ => "updated",
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        MessageId, PlanEntry, PlanEntryPriority, TextContent, ToolCallUpdateFields,
    };

    fn chunk(text: &str) -> SessionUpdate {
        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(
            text.to_owned(),
        ))))
    }

    fn feed(updates: &[SessionUpdate]) -> (Vec<String>, Transcript) {
        let mut transcript = Transcript::new();
        let mut lines: Vec<String> = updates
            .iter()
            .flat_map(|update| transcript.apply(update))
            .collect();
        lines.extend(transcript.finish());
        (lines, transcript)
    }

    #[test]
    fn message_chunks_are_joined_into_lines() {
        let (lines, transcript) = feed(&[
            chunk("Hel"),
            chunk("lo\nwor"),
            chunk("ld"),
            chunk("\n\nBye"),
        ]);
        assert_eq!(lines, ["Hello", "world", "", "Bye"]);
        assert_eq!(transcript.final_message(), "Hello\nworld\n\nBye");
    }

    #[test]
    fn tool_calls_and_plans_end_the_message_and_show_their_status() {
        let call = ToolCall::new("t1", "Run the tests")
            .kind(ToolKind::Execute)
            .status(ToolCallStatus::Pending);
        let done = ToolCallUpdate::new(
            "t1",
            ToolCallUpdateFields::new().status(ToolCallStatus::Completed),
        );
        let plan = Plan::new(vec![
            PlanEntry::new("read", PlanEntryPriority::High, PlanEntryStatus::Completed),
            PlanEntry::new(
                "fix  it",
                PlanEntryPriority::Low,
                PlanEntryStatus::InProgress,
            ),
            PlanEntry::new("test", PlanEntryPriority::Low, PlanEntryStatus::Pending),
        ]);
        let (lines, transcript) = feed(&[
            chunk("First I look"),
            SessionUpdate::ToolCall(call),
            SessionUpdate::ToolCallUpdate(done),
            SessionUpdate::Plan(plan),
            chunk("All done."),
        ]);
        assert_eq!(
            lines,
            [
                "First I look",
                "tool: Run the tests (execute) pending",
                "tool: Run the tests done",
                "plan:",
                "  [x] read",
                "  [~] fix it",
                "  [ ] test",
                "All done.",
            ]
        );
        assert_eq!(transcript.final_message(), "All done.");
    }

    #[test]
    fn the_final_message_is_the_last_one_and_is_cut() {
        let first = |text: &str| {
            SessionUpdate::AgentMessageChunk(
                ContentChunk::new(ContentBlock::Text(TextContent::new(text.to_owned())))
                    .message_id(MessageId::new("m1")),
            )
        };
        let second = SessionUpdate::AgentMessageChunk(
            ContentChunk::new(ContentBlock::Text(TextContent::new("second".to_owned())))
                .message_id(MessageId::new("m2")),
        );
        let (lines, transcript) = feed(&[first("first"), second]);
        assert_eq!(lines, ["first", "second"]);
        assert_eq!(transcript.final_message(), "second");
        // A turn that ends on a tool call keeps the message before it.
        let call = SessionUpdate::ToolCall(ToolCall::new("t", "x"));
        let (_, transcript) = feed(&[chunk("  the answer  "), call]);
        assert_eq!(transcript.final_message(), "the answer");
        let long = "é".repeat(MAX_SUMMARY_CHARS + 10);
        let (_, transcript) = feed(&[chunk(&long)]);
        assert_eq!(
            transcript.final_message().chars().count(),
            MAX_SUMMARY_CHARS + 1
        );
    }
}
