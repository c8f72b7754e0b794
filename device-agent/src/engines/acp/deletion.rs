//! Answering a `session.delete`: the owner deletes, from a stopped job's page, the ACP
//! session that job worked in, which this computer kept so a follow-up could carry it on
//! ([`super::continuation`]). The answer goes to
//! `POST /api/devices/self/session-deletions/{id}`; `deleted: true` only once what is
//! deleted below is gone, otherwise the reason, and nothing is reported done.
//!
//! What is deleted:
//!
//! - this computer's record of the session (`acp-sessions.json`): the job's own entry and
//!   every entry naming the same engine's same session (a follow-up that loaded it carried
//!   the same conversation on), with the folders allowed beside it. No run loads it again:
//!   a follow-up starts a new session told of the earlier run.
//! - the agent's own copy, when its engine is still set up here: the engine is started
//!   confined as `engine check` starts it (in a private folder, no job's folder) and, when
//!   its `initialize` answer offers `sessionCapabilities.delete`, asked `session/delete`
//!   (a session it no longer knows counts as deleted).
//! - for the Claude Code preset, which does not offer that, the files its adapter loads a
//!   session from: `<session id>.jsonl`, and a `<session id>` folder beside it, in each
//!   folder of `$CLAUDE_CONFIG_DIR/projects` (the engine's own home, or the owner's
//!   `~/.claude` with `--use-my-sign-in`).
//!
//! What is not: anything else an engine keeps of its own (Codex, Gemini CLI and Qwen Code
//! history, Claude Code's other caches and logs) when it offers no `session/delete`, and the
//! copy of an engine no longer set up on this computer. The job's output, its changes and
//! its evidence are the job's, not the session's.
//!
//! A session a run of this computer still works in (its job is in the run journal) is not
//! deleted. When nothing is stored for the job (it never had an ACP session, or it was
//! deleted already, or dropped as one of the oldest), the answer is `deleted: true`: there
//! is nothing here a follow-up could load. If deleting the agent's copy fails, the records
//! are put back, so asking again tries again.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::DeleteSessionRequest;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client, ErrorCode};
use tether_protocol::engine_sessions::{SessionDeletion, MAX_DELETION_ERROR_CHARS};
use tether_protocol::JobId;
use tokio::sync::mpsc;

use super::check::{launch_for, safe_name, start};
use super::handshake::{self, describe};
use super::outfit::Outfit;
use super::process::Pipes;
use super::sign_in;
use super::transport;
use super::updates::cut_chars;
use crate::local::journal::Journal;
use crate::local::presets::PresetName;
use crate::local::sessions::{Sessions, StoredSession};
use crate::local::state::AcpEngine;
use crate::policy::guard::Guard;
use crate::remote::events::SessionDelete;
use crate::remote::frames::FrameContext;
use crate::run::process_group::TERMINATE_GRACE;
use crate::run::secret_http::runs_root;

/// How long the agent works on a request when the server does not say how long it waits.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(50);
/// How long the engine may take to exit on its own once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Lines of the engine's stderr a failure quotes.
const STDERR_QUOTED: usize = 3;

/// Deletions run one at a time: two of one session must not race.
static DELETING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// What became of the agent's own copy of a deleted session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineCopy {
    /// The agent deleted it (`session/delete`).
    Deleted,
    /// Its adapter's files were deleted (this many).
    Files(usize),
    /// The engine offers no deletion and Tether knows no files of it.
    Kept,
    /// The engine is no longer set up on this computer.
    NotAsked,
}

impl EngineCopy {
    fn said(self) -> String {
        match self {
            EngineCopy::Deleted => "the agent deleted its copy (session/delete)".to_owned(),
            EngineCopy::Files(n) => format!("{n} file(s) of the agent's copy deleted"),
            EngineCopy::Kept => "the agent offers no session/delete; its own files stay".to_owned(),
            EngineCopy::NotAsked => "the engine is no longer set up here".to_owned(),
        }
    }
}

/// Answers `request`: deletes the session, then says whether it did.
pub async fn handle(context: FrameContext, request: SessionDelete) {
    let deadline = Instant::now() + budget(request.timeout);
    tracing::info!(request = %request.id, job = %request.job_id, "session deletion");
    let client = context.client.clone();
    let job_id = request.job_id.clone();
    let deleted = tokio::time::timeout_at(deadline.into(), delete(context, &job_id, deadline));
    let answer = match deleted.await {
        Ok(Ok(Some(copy))) => {
            tracing::info!(job = %job_id, "session deleted: {}", copy.said());
            SessionDeletion {
                deleted: true,
                error: None,
            }
        }
        Ok(Ok(None)) => {
            tracing::info!(job = %job_id, "session deleted: nothing was stored for the job");
            SessionDeletion {
                deleted: true,
                error: None,
            }
        }
        Ok(Err(why)) => failed(&job_id, &why),
        Err(_) => failed(&job_id, "this computer could not delete it in time"),
    };
    if let Err(err) = client.answer_session_deletion(&request.id, &answer).await {
        tracing::warn!(request = %request.id, "session deletion answer not delivered: {err}");
    }
}

fn failed(job_id: &JobId, why: &str) -> SessionDeletion {
    tracing::warn!(job = %job_id, "session not deleted: {why}");
    SessionDeletion {
        deleted: false,
        error: Some(cut_chars(why, MAX_DELETION_ERROR_CHARS)),
    }
}

/// How long to work on a request the server waits `server_waits` for.
pub fn budget(server_waits: Option<Duration>) -> Duration {
    match server_waits {
        None => DEFAULT_BUDGET,
        Some(waits) => waits.saturating_sub((waits / 5).min(Duration::from_secs(1))),
    }
}

/// Deletes the session `job_id` worked in; what became of the agent's copy, or `None` when
/// nothing was stored for it.
///
/// # Errors
/// Why it is not deleted, in a sentence for the owner.
pub async fn delete(
    context: FrameContext,
    job_id: &JobId,
    deadline: Instant,
) -> Result<Option<EngineCopy>, String> {
    let _turn = DELETING.acquire().await;
    let sessions = Sessions::in_dir(context.guard.data_dir());
    let (blocking_sessions, journal, config) = (sessions.clone(), context.journal, context.config);
    let asked = job_id.clone();
    let forgotten = tokio::task::spawn_blocking(move || {
        let forgotten = forget(&blocking_sessions, &journal, &asked)?;
        Ok::<_, String>(forgotten.map(|records| {
            let engine = config().acp_engine(&records[0].engine).cloned();
            (records, engine)
        }))
    })
    .await
    .map_err(|_| "the deletion failed on this computer".to_owned())??;
    let Some((records, engine)) = forgotten else {
        return Ok(None);
    };
    let Some(engine) = engine else {
        return Ok(Some(EngineCopy::NotAsked));
    };
    let session_id = records[0].session_id.clone();
    let copy = delete_copy(&engine, &context.guard, &session_id, deadline).await;
    if copy.is_err() {
        let restored = tokio::task::spawn_blocking(move || sessions.restore(&records)).await;
        if !matches!(restored, Ok(Ok(()))) {
            tracing::warn!(job = %job_id, "a session whose deletion failed could not be put back");
        }
    }
    copy.map(Some)
}

/// Removes the records of the session `job_id` worked in, unless a run of this computer
/// still works in it; the records removed, or `None` when none was stored.
///
/// # Errors
/// Why not, in a sentence for the owner.
pub fn forget(
    sessions: &Sessions,
    journal: &Journal,
    job_id: &JobId,
) -> Result<Option<Vec<StoredSession>>, String> {
    let records = sessions
        .sharing(job_id)
        .map_err(|err| format!("this computer's record of its sessions cannot be read: {err:#}"))?;
    if records.is_empty() {
        return Ok(None);
    }
    for record in &records {
        let running = journal
            .get(&record.job_id)
            .map_err(|err| format!("this computer's journal of runs cannot be read: {err:#}"))?;
        if running.is_some() {
            return Err(format!(
                "a run of this computer (job {}) is working in that session now; delete it once that run ended",
                record.job_id
            ));
        }
    }
    sessions.forget(&records).map_err(|err| {
        format!("this computer's record of its sessions cannot be changed: {err:#}")
    })?;
    Ok(Some(records))
}

/// Deletes the agent's own copy of `session_id`, starting `engine` confined to ask it.
async fn delete_copy(
    engine: &AcpEngine,
    guard: &Guard,
    session_id: &str,
    deadline: Instant,
) -> Result<EngineCopy, String> {
    let folder = tempfile::Builder::new()
        .prefix("tether-session-delete-")
        .tempdir()
        .map_err(|err| format!("a folder to start the engine in could not be made: {err}"))?;
    let folder = folder
        .path()
        .canonicalize()
        .map_err(|err| format!("a folder to start the engine in could not be read: {err}"))?;
    let launch = launch_for(guard, &folder);
    let sockets =
        runs_root(guard.data_dir()).join(format!("net-delete-{}", safe_name(&engine.name)));
    let (lines, mut stderr_lines) = mpsc::channel(64);
    // Its stderr is shown nowhere: the tail explains a failure.
    let drain = tokio::spawn(async move { while stderr_lines.recv().await.is_some() {} });
    let (outfit, agent, pipes) = start(engine, &launch, &sockets, lines).map_err(|why| {
        drain.abort();
        format!(
            "the engine {} could not be started to delete its copy: {why}",
            engine.name
        )
    })?;
    let env = outfit.variable_names();
    let asked = ask(pipes, &env, outfit.client_reads_files, session_id);
    let answered = tokio::time::timeout_at(deadline.into(), asked).await;
    let stderr = agent.stderr_handle();
    let _ = agent.stop(EXIT_GRACE, TERMINATE_GRACE).await;
    drain.abort();
    let offered = match answered {
        Ok(Ok(offered)) => offered,
        Ok(Err(why)) => return Err(quoting(why, &stderr.lines())),
        Err(_) => return Err("the engine did not answer in time".to_owned()),
    };
    if offered {
        return Ok(EngineCopy::Deleted);
    }
    let Some(projects) = claude_projects(engine, &outfit) else {
        return Ok(EngineCopy::Kept);
    };
    drop(outfit);
    let session = session_id.to_owned();
    let removed = tokio::task::spawn_blocking(move || remove_transcripts(&projects, &session))
        .await
        .map_err(|_| "the deletion failed on this computer".to_owned())?;
    removed
        .map(EngineCopy::Files)
        .map_err(|err| format!("the agent's copy could not be deleted: {err}"))
}

/// `why`, with the last lines the engine printed.
fn quoting(mut why: String, tail: &[String]) -> String {
    let start = tail.len().saturating_sub(STDERR_QUOTED);
    let quoted: Vec<&str> = tail[start..].iter().map(String::as_str).collect();
    if !quoted.is_empty() {
        why.push_str(&format!("; it said: {}", quoted.join(" / ")));
    }
    why
}

/// `initialize`, then `session/delete` when offered; whether it was offered.
async fn ask(
    pipes: Pipes,
    env: &[String],
    reads_files: bool,
    session_id: &str,
) -> Result<bool, String> {
    let transport = transport::lines(pipes.stdout, pipes.input);
    let talked = Client
        .v1()
        .name("tether-agent")
        .connect_with(transport, async |cx: ConnectionTo<Agent>| {
            Ok(delete_over(&cx, env, reads_files, session_id).await)
        })
        .await;
    talked.unwrap_or_else(|err| Err(format!("the connection to the engine broke: {err}")))
}

async fn delete_over(
    cx: &ConnectionTo<Agent>,
    env: &[String],
    reads_files: bool,
    session_id: &str,
) -> Result<bool, String> {
    let introduced = handshake::initialize(cx, reads_files).await?;
    handshake::check_version(&introduced.agent)?;
    let capabilities = &introduced.agent.agent_capabilities.session_capabilities;
    if capabilities.delete.is_none() {
        return Ok(false);
    }
    let methods = sign_in::methods(&introduced.raw);
    if let Some(method) = sign_in::env_method(&methods, env) {
        // Whether deleting needs it is the agent's to say, in its answer below.
        let _ = sign_in::authenticate(cx, method).await;
    }
    let request = DeleteSessionRequest::new(session_id.to_owned());
    match cx.send_request(request).block_task().await {
        Ok(_) => Ok(true),
        // Deleted already (an earlier request that failed after it).
        Err(err) if err.code == ErrorCode::RESOURCE_NOT_FOUND => Ok(true),
        Err(err) => Err(format!(
            "the agent did not delete its session: {}",
            describe(&err)
        )),
    }
}

/// Where the Claude Code preset's adapter keeps its sessions: `$CLAUDE_CONFIG_DIR/projects`
/// as its process got it.
fn claude_projects(engine: &AcpEngine, outfit: &Outfit) -> Option<PathBuf> {
    if engine.preset != Some(PresetName::ClaudeCode) {
        return None;
    }
    let (_, config) = outfit
        .env
        .iter()
        .rev()
        .find(|(name, _)| name == "CLAUDE_CONFIG_DIR")?;
    Some(Path::new(config).join("projects"))
}

/// Deletes `<session id>.jsonl` and a `<session id>` folder in each folder of `projects`
/// (links are removed, never followed); how many were deleted. A session id that is not a
/// plain name names no file.
///
/// # Errors
/// When a folder cannot be read or a file deleted.
pub fn remove_transcripts(projects: &Path, session_id: &str) -> io::Result<usize> {
    let plain = !session_id.is_empty()
        && session_id.len() <= 200
        && session_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !plain {
        return Ok(0);
    }
    let entries = match fs::read_dir(projects) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut removed = 0;
    for entry in entries {
        let project = entry?.path();
        if !fs::symlink_metadata(&project)?.is_dir() {
            continue;
        }
        for name in [format!("{session_id}.jsonl"), session_id.to_owned()] {
            let path = project.join(name);
            let found = match fs::symlink_metadata(&path) {
                Ok(found) => found,
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            if found.is_dir() {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use anyhow::Result;
    use chrono::Utc;
    use tether_protocol::jobs::{EarlierRun, Outcome};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::engines::acp::continuation::{Place, Recall, SUMMARISED};
    use crate::local::journal::RunRecord;
    use crate::local::state::{Config, DataDir};
    use crate::remote::client::{DeviceClient, ServerClient};
    use crate::run::grant::tests::claimed_job;

    fn id(text: &str) -> JobId {
        JobId::parse(text).unwrap_or_else(|err| panic!("{err}"))
    }

    fn stored(job: &str, engine: &str) -> StoredSession {
        StoredSession {
            job_id: id(job),
            engine: engine.to_owned(),
            session_id: format!("session-of-{job}"),
            folder: "work".to_owned(),
            cwd: PathBuf::from("/home/me/work"),
            at: Utc::now(),
            granted: vec![PathBuf::from("/srv/other")],
        }
    }

    /// A data dir, its guard, and a server on loopback that takes one answer per call.
    struct Computer {
        _dir: tempfile::TempDir,
        data_dir: DataDir,
        guard: Guard,
        client: DeviceClient,
        listener: tokio::net::TcpListener,
    }

    impl Computer {
        async fn new() -> Result<Computer> {
            let dir = tempfile::tempdir()?;
            let data_dir = DataDir::resolve(Some(dir.path().join("agent")))?;
            data_dir.ensure()?;
            let guard = Guard::new(None, data_dir.root());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let base = format!("http://{}", listener.local_addr()?);
            let client = DeviceClient::new(ServerClient::new(&base)?, "tdt_x".into());
            Ok(Computer {
                _dir: dir,
                data_dir,
                guard,
                client,
                listener,
            })
        }

        fn sessions(&self) -> Sessions {
            Sessions::in_dir(self.guard.data_dir())
        }

        fn journal(&self) -> Journal {
            Journal::new(&self.data_dir)
        }

        /// Answers `job`'s deletion with `engines` set up; the request line and the body.
        async fn delete(&self, job: &str, engines: Vec<AcpEngine>) -> Result<(String, String)> {
            let mut config: Config = serde_json::from_value(serde_json::json!({"installId": "i"}))?;
            config.engines = engines;
            let context = FrameContext {
                client: self.client.clone(),
                data_dir: self.data_dir.clone(),
                guard: self.guard.clone(),
                journal: Arc::new(self.journal()),
                config: Box::new(move || config),
            };
            let request = SessionDelete {
                id: "sdl_1".to_owned(),
                job_id: id(job),
                timeout: Some(Duration::from_secs(20)),
            };
            let answered = tokio::spawn(handle(context, request));
            let (mut socket, _) = self.listener.accept().await?;
            let mut seen = Vec::new();
            let mut buffer = [0_u8; 4096];
            let (head, body) = loop {
                let read = socket.read(&mut buffer).await?;
                anyhow::ensure!(read > 0, "the answer ended early");
                seen.extend_from_slice(&buffer[..read]);
                let text = String::from_utf8_lossy(&seen).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|line| {
                            line.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(str::to_owned)
                        })
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if body.len() >= length {
                        break (head.to_owned(), body.to_owned());
                    }
                }
            };
            socket.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await?;
            socket.shutdown().await?;
            answered.await?;
            let line = head.lines().next().unwrap_or_default().to_owned();
            Ok((line, body))
        }
    }

    /// A follow-up of `earlier`, and how it opens with what is stored now.
    fn follow_up_opening(
        computer: &Computer,
        earlier: &str,
    ) -> crate::engines::acp::continuation::Opening {
        let mut job = claimed_job("now the lexer", 5);
        job.spec.engine = "claude".to_owned();
        job.continues = Some(EarlierRun {
            job_id: id(earlier),
            prompt: "fix the parser".to_owned(),
            summary: "Done.".to_owned(),
            outcome: Some(Outcome::Succeeded),
        });
        let place = Place {
            job_id: job.id.clone(),
            engine: "claude".to_owned(),
            folder: "work".to_owned(),
            cwd: PathBuf::from("/home/me/work"),
        };
        Recall::new(computer.guard.data_dir(), place).opening(&job)
    }

    #[tokio::test]
    async fn a_deleted_session_is_never_loaded_by_a_follow_up() -> Result<()> {
        let computer = Computer::new().await?;
        let sessions = computer.sessions();
        sessions.remember(stored("earlier", "claude"))?;
        // A follow-up that loaded it carried the same session on.
        sessions.remember(StoredSession {
            job_id: id("second"),
            ..stored("earlier", "claude")
        })?;
        sessions.remember(stored("other", "claude"))?;
        assert!(follow_up_opening(&computer, "earlier").load.is_some());
        // The engine is no longer set up here: the record alone is deleted.
        let (line, body) = computer.delete("earlier", Vec::new()).await?;
        assert!(
            line.starts_with("POST /api/devices/self/session-deletions/sdl_1 "),
            "{line}"
        );
        assert_eq!(body, r#"{"deleted":true}"#);
        assert_eq!(sessions.find(&id("earlier")), None);
        assert_eq!(sessions.find(&id("second")), None);
        assert!(sessions.find(&id("other")).is_some());
        let opening = follow_up_opening(&computer, "earlier");
        assert_eq!((opening.load, opening.note), (None, Some(SUMMARISED)));
        assert!(opening
            .prompt
            .contains("--- earlier request ---\nfix the parser"));
        // Nothing left to delete: deleted, honestly.
        let (_, body) = computer.delete("earlier", Vec::new()).await?;
        assert_eq!(body, r#"{"deleted":true}"#);
        Ok(())
    }

    #[tokio::test]
    async fn a_session_in_use_or_unreadable_is_not_deleted_and_says_why() -> Result<()> {
        let computer = Computer::new().await?;
        let sessions = computer.sessions();
        sessions.remember(stored("earlier", "claude"))?;
        sessions.remember(StoredSession {
            job_id: id("second"),
            ..stored("earlier", "claude")
        })?;
        // The follow-up that carried it on is running.
        let mut running = claimed_job("p", 5);
        running.id = id("second");
        computer.journal().record(&RunRecord::claimed(&running))?;
        let (_, body) = computer.delete("earlier", Vec::new()).await?;
        let answer: SessionDeletion = serde_json::from_str(&body)?;
        assert!(!answer.deleted);
        assert!(answer.error.is_some_and(
            |why| why.contains("job second") && why.contains("working in that session")
        ));
        assert!(sessions.find(&id("earlier")).is_some());
        computer.journal().remove(&id("second"))?;

        // An engine that cannot be started: not deleted, and the records stay for a retry.
        let engine = AcpEngine {
            name: "claude".to_owned(),
            program: "/nonexistent/claude-code-acp".to_owned(),
            args: Vec::new(),
            preset: None,
            env: Default::default(),
            secrets: Vec::new(),
            network: None,
            use_my_sign_in: false,
        };
        let (_, body) = computer.delete("earlier", vec![engine]).await?;
        let answer: SessionDeletion = serde_json::from_str(&body)?;
        assert!(!answer.deleted, "{body}");
        assert!(
            answer
                .error
                .is_some_and(|why| why.contains("could not be started")),
            "{body}"
        );
        assert!(sessions.find(&id("earlier")).is_some() && sessions.find(&id("second")).is_some());

        // A record that cannot be read is never taken for "nothing there".
        let file = computer
            .guard
            .data_dir()
            .join(crate::local::sessions::SESSIONS_FILE);
        fs::remove_file(&file)?;
        fs::create_dir(&file)?;
        let (_, body) = computer.delete("earlier", Vec::new()).await?;
        let answer: SessionDeletion = serde_json::from_str(&body)?;
        assert!(!answer.deleted);
        assert!(
            answer
                .error
                .is_some_and(|why| why.contains("cannot be read")),
            "{body}"
        );
        Ok(())
    }

    #[test]
    fn claude_transcripts_are_deleted_by_name_and_links_are_not_followed() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let projects = tmp.path().join("projects");
        let (one, two) = (projects.join("-home-me-work"), projects.join("-tmp-x"));
        fs::create_dir_all(&one)?;
        fs::create_dir_all(two.join("abc-123/subagents"))?;
        fs::write(one.join("abc-123.jsonl"), "{}")?;
        fs::write(one.join("other.jsonl"), "{}")?;
        fs::write(two.join("abc-123/subagents/agent-1.jsonl"), "{}")?;
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&outside)?;
        fs::write(outside.join("abc-123.jsonl"), "keep")?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(&outside, projects.join("linked"))?;
        assert_eq!(remove_transcripts(&projects, "abc-123")?, 2);
        assert!(!one.join("abc-123.jsonl").exists() && !two.join("abc-123").exists());
        assert!(one.join("other.jsonl").exists());
        assert!(outside.join("abc-123.jsonl").exists());
        // Not a plain name: nothing is looked for.
        assert_eq!(remove_transcripts(&projects, "../other")?, 0);
        assert_eq!(remove_transcripts(&tmp.path().join("none"), "abc-123")?, 0);
        // A folder that cannot be read is an error, never "nothing there".
        assert!(remove_transcripts(&one.join("other.jsonl"), "abc-123").is_err());
        Ok(())
    }

    #[test]
    fn the_budget_follows_the_server_wait() {
        assert_eq!(budget(None), DEFAULT_BUDGET);
        assert_eq!(
            budget(Some(Duration::from_secs(60))),
            Duration::from_secs(59)
        );
    }
}
