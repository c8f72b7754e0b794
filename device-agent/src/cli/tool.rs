//! `tether-agent tool …`: a recipe's way into the run's tool channel
//! ([`crate::run::tool_channel`]), the same one a coding agent reaches through MCP.
//!
//! ```text
//! "$TETHER_AGENT" tool context job.chain
//! "$TETHER_AGENT" tool context job.get JOB_ID
//! "$TETHER_AGENT" tool context jobs.search WORDS…
//! "$TETHER_AGENT" tool context NAME --args '{"…": "…"}'
//! "$TETHER_AGENT" tool attachments
//! "$TETHER_AGENT" tool attachment ID > copy
//! "$TETHER_AGENT" tool report report.json       # or - for stdin
//! "$TETHER_AGENT" tool attach out/screen.png --kind screenshot --caption "The new page"
//! "$TETHER_AGENT" tool screenshot http://127.0.0.1:5173/ --width 1280 --height 800
//! "$TETHER_AGENT" tool screenshot --path out/report.html --full-page
//! ```
//!
//! The answer goes to stdout; a refusal goes to stderr and the command exits 1; outside a
//! run (no channel in the environment) it says so and exits 2.

use std::io::{Read as _, Write as _};

use anyhow::{bail, Context as _, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use clap::Subcommand;
use serde_json::json;
use tether_protocol::jobs::EvidenceKind;
use tether_protocol::report::MAX_RESULT_FILE_BYTES;
use tether_protocol::task_context::{CHAIN, GET, SEARCH};

use crate::run::tool_channel::{self, Answer, Call};

/// Exit code of a call the channel refused.
const REFUSED: i32 = 1;
/// Exit code outside a run.
const OUTSIDE_A_RUN: i32 = 2;

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Ask the server for more context, under the run's lease: `job.chain` (the runs this
    /// job continues), `job.get ID` (another job of the account), `jobs.search WORDS…`
    /// (the account's jobs holding every word, newest first). Prints the answer's text.
    Context {
        /// job.chain, job.get or jobs.search.
        name: String,
        /// job.get: the job's id; jobs.search: the words to look for.
        words: Vec<String>,
        /// The arguments as a JSON object, instead of words (for example '{"id": "…"}').
        #[arg(long, value_name = "JSON", conflicts_with = "words")]
        args: Option<String>,
    },
    /// List the job's attachments: id, name, media type, size in bytes and where the copy
    /// is, tab-separated, one a line.
    Attachments {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print one attachment's bytes.
    Attachment {
        /// Its id (from `tool attachments`).
        id: String,
    },
    /// Hand over the run's report (a JSON object: summary, done, tested, notDone, risks,
    /// links); checked at once, and the last one sent goes with the run's completion.
    Report {
        /// The report's file; `-` or nothing reads it from stdin.
        file: Option<std::path::PathBuf>,
    },
    /// Keep a file of the run's folder as evidence of the run; prints the name it was kept
    /// under.
    Attach {
        /// Relative to the run's folder, or absolute inside it.
        path: String,
        /// screenshot, image, video, trace, report, log or file (default: from the name).
        #[arg(long, value_parser = parse_kind)]
        kind: Option<EvidenceKind>,
        /// A line saying what it shows.
        #[arg(long)]
        caption: Option<String>,
    },
    /// Take a screenshot of a page the run serves on this computer's loopback (its dev
    /// server), or of a file of its folder, with this computer's Chromium; it is kept as
    /// evidence with a small preview. Prints the name it was kept under and its size.
    Screenshot {
        /// An http(s) address on 127.0.0.1, ::1 or localhost.
        #[arg(required_unless_present = "path", conflicts_with = "path")]
        url: Option<String>,
        /// A file of the run's folder instead (an HTML page, an SVG, an image).
        #[arg(long)]
        path: Option<String>,
        /// The viewport's width in CSS pixels (100 to 4096; 1280 when not given).
        #[arg(long)]
        width: Option<u32>,
        /// The viewport's height in CSS pixels (100 to 4096; 800 when not given).
        #[arg(long)]
        height: Option<u32>,
        /// The whole page, as tall as it is (at most 16384 pixels), not just the viewport.
        #[arg(long)]
        full_page: bool,
    },
}

/// Runs the command inside a job; the exit code.
///
/// # Errors
/// When the arguments are not valid or the channel cannot be reached.
pub async fn apply(command: ToolCommand) -> Result<i32> {
    let Some((socket, token)) = tool_channel::from_env() else {
        eprintln!(
            "tether-agent tool works inside a job run by this agent (no {} here)",
            tool_channel::SOCKET_VAR
        );
        return Ok(OUTSIDE_A_RUN);
    };
    let (call, json) = match command {
        ToolCommand::Context { name, words, args } => {
            let args = match args {
                Some(raw) => parse_args(&raw)?,
                None => args_from_words(&name, &words)?,
            };
            (Call::Context { name, args }, false)
        }
        ToolCommand::Attachments { json } => (Call::Attachments, json),
        ToolCommand::Attachment { id } => (Call::Attachment { id }, false),
        ToolCommand::Report { file } => (
            Call::Report {
                report: read_report(file.as_deref())?,
            },
            false,
        ),
        ToolCommand::Attach {
            path,
            kind,
            caption,
        } => (
            Call::Attach {
                path,
                kind,
                caption,
            },
            false,
        ),
        ToolCommand::Screenshot {
            url,
            path,
            width,
            height,
            full_page,
        } => (
            Call::Screenshot {
                url,
                path,
                width,
                height,
                full_page,
            },
            false,
        ),
    };
    let answer = tool_channel::ask(&socket, &token, call).await?;
    print(answer, json)
}

/// The arguments of a name, from the words after it.
fn args_from_words(name: &str, words: &[String]) -> Result<serde_json::Value> {
    Ok(match (name, words) {
        (_, []) if name != GET && name != SEARCH => json!({}),
        (GET, [id]) => json!({ "id": id }),
        (GET, _) => bail!("job.get takes one job id: tool context job.get ID"),
        (SEARCH, []) => bail!("jobs.search takes the words to look for"),
        (SEARCH, words) => json!({ "query": words.join(" ") }),
        (CHAIN, _) => bail!("job.chain takes no words"),
        _ => bail!("give the arguments of {name} with --args '{{…}}'"),
    })
}

fn parse_kind(raw: &str) -> Result<EvidenceKind, String> {
    serde_json::from_value(serde_json::Value::String(raw.to_owned()))
        .map_err(|_| "one of screenshot, image, video, trace, report, log, file".to_owned())
}

/// The report's JSON from `file` (stdin when `None` or `-`), bounded as the result file is.
fn read_report(file: Option<&std::path::Path>) -> Result<serde_json::Value> {
    let mut bytes = Vec::new();
    let limit = MAX_RESULT_FILE_BYTES + 1;
    match file.filter(|path| path.as_os_str() != "-") {
        Some(path) => std::fs::File::open(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .take(limit)
            .read_to_end(&mut bytes)?,
        None => std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut bytes)?,
    };
    if bytes.len() as u64 > MAX_RESULT_FILE_BYTES {
        bail!("the report is over {MAX_RESULT_FILE_BYTES} bytes");
    }
    serde_json::from_slice(&bytes).context("the report is not JSON")
}

fn parse_args(raw: &str) -> Result<serde_json::Value> {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(_) => bail!("--args is a JSON object, for example '{{\"id\": \"…\"}}'"),
        Err(err) => bail!("--args is not JSON: {err}"),
    }
}

fn print(answer: Answer, json: bool) -> Result<i32> {
    let mut out = std::io::stdout().lock();
    match answer {
        Answer::Text { text } => {
            out.write_all(text.as_bytes())?;
            if !text.ends_with('\n') {
                writeln!(out)?;
            }
        }
        Answer::Attachments { attachments } if json => {
            writeln!(out, "{}", serde_json::to_string_pretty(&attachments)?)?;
        }
        Answer::Attachments { attachments } => {
            for listed in attachments {
                let attachment = &listed.attachment;
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}",
                    attachment.id.as_str(),
                    attachment.name,
                    attachment.media_type,
                    attachment.size,
                    listed.path.display()
                )?;
            }
        }
        Answer::Content {
            text: Some(text), ..
        } => out.write_all(text.as_bytes())?,
        Answer::Content {
            base64: Some(blob), ..
        } => out.write_all(&STANDARD.decode(blob)?)?,
        Answer::Content { .. } => bail!("the agent answered an attachment without content"),
        Answer::Attached { name } => writeln!(out, "kept as {name} in the run's evidence")?,
        Answer::Captured {
            name,
            width,
            height,
            ..
        } => writeln!(
            out,
            "kept as {name} ({width}×{height}) in the run's evidence"
        )?,
        Answer::Refused { error } => {
            eprintln!("tether-agent tool: {error}");
            return Ok(REFUSED);
        }
    }
    out.flush()?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_become_each_names_arguments() -> Result<()> {
        let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        assert_eq!(args_from_words(CHAIN, &[])?, json!({}));
        assert_eq!(args_from_words(GET, &words(&["j1"]))?, json!({"id": "j1"}));
        assert_eq!(
            args_from_words(SEARCH, &words(&["login", "bug"]))?,
            json!({"query": "login bug"})
        );
        assert!(args_from_words(GET, &[]).is_err());
        assert!(args_from_words(GET, &words(&["a", "b"])).is_err());
        assert!(args_from_words(SEARCH, &[]).is_err());
        assert!(args_from_words(CHAIN, &words(&["x"])).is_err());
        assert!(args_from_words("other.name", &words(&["x"])).is_err());
        assert_eq!(parse_args(r#"{"id":"j2"}"#)?, json!({"id": "j2"}));
        assert!(parse_args("[1]").is_err());
        assert!(parse_args("{").is_err());
        assert_eq!(parse_kind("screenshot"), Ok(EvidenceKind::Screenshot));
        assert!(parse_kind("photo").is_err());
        Ok(())
    }
}
