//! The client side of one ACP session: what this computer answers when the agent reports
//! progress, asks permission, reads or writes a file, or runs a command.
//!
//! Every request that may wait for the owner runs outside the connection's dispatch loop
//! (the caller spawns it), so updates keep flowing while a decision is open.
//!
//! - `session/update` → output lines ([`super::updates`]);
//! - `session/request_permission` → the policy's actions ([`super::permissions`]), judged by
//!   the run's [`Gate`]; the answer is the offered option of the matching kind, `cancelled`
//!   once the turn is being cancelled;
//! - `fs/read_text_file`, `fs/write_text_file` → the real path ([`super::files`]), the guard,
//!   then the gate;
//! - `terminal/*` → the hard floor, the gate, then [`Terminals`].
//!
//! An action the owner just allowed through a permission request is not asked again when the
//! agent then carries it out (the same command in the same folder, the same file): each such
//! allowance is used once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use agent_client_protocol::v1::schema::{
    CreateTerminalRequest, CreateTerminalResponse, KillTerminalRequest, KillTerminalResponse,
    ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest, ReleaseTerminalResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionId,
    SessionNotification, SessionUpdate, TerminalId, TerminalOutputRequest, TerminalOutputResponse,
    WaitForTerminalExitRequest, WaitForTerminalExitResponse, WriteTextFileRequest,
    WriteTextFileResponse,
};
use agent_client_protocol::{Error, ErrorCode, RequestCancellation};
use tokio::sync::{mpsc, watch};

use super::continuation::Recall;
use super::files;
use super::observed::Observed;
use super::permissions::{self, CallFacts, ToolCalls};
use super::preview::{self, Proposal};
use super::terminals::{self, CommandRequest, Terminals};
use super::updates::Transcript;
use crate::policy::gate::{Gate, Passage, OWNER_DENIED};
use crate::policy::guard::Guard;
use crate::policy::{git, hard_floor};
use crate::policy::{shell_line, Action};

/// The JSON-RPC error code of a refusal (outside the ranges JSON-RPC and ACP reserve).
pub const REFUSED: i32 = -31000;
/// How long a permission request waits, once the turn is cancelled, for its open question
/// to be withdrawn.
const WITHDRAW_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Something the run did not let the agent do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The permission's title, or the read, write or command.
    pub what: String,
    /// Whether the owner answered no (else a rule of the run refused it).
    pub by_owner: bool,
}

/// Where the session's words go: the job's output lines, and the saved secret values hidden
/// in everything sent (a write's preview too).
#[derive(Debug, Clone)]
pub struct Said {
    pub lines: mpsc::Sender<String>,
    pub hidden: Arc<Vec<String>>,
    /// What the run uses, as the agent says it.
    pub observed: Arc<Observed>,
}

/// The state of the run's one session, shared by every handler.
#[derive(Debug)]
pub struct Session {
    folder: PathBuf,
    guard: Guard,
    gate: Gate,
    terminals: Terminals,
    lines: mpsc::Sender<String>,
    hidden: Arc<Vec<String>>,
    observed: Arc<Observed>,
    session_id: OnceLock<SessionId>,
    /// Set while `session/load` is in flight: what the agent sends then is the history it
    /// replays, already shown by the run it belongs to.
    replaying: AtomicBool,
    transcript: Mutex<Transcript>,
    tool_calls: Mutex<ToolCalls>,
    /// Actions allowed through a permission request, not yet carried out.
    allowed: Mutex<Vec<Action>>,
    /// Set once the turn is being cancelled: open permission requests answer `cancelled`.
    cancelled: watch::Sender<bool>,
    /// What the gate refused (the owner's or the policy's deny), in the order asked: a turn
    /// that ends after one did not do what it was asked.
    denied: Mutex<Vec<Denial>>,
    /// Where the run's session and the folders it may change are stored.
    recall: Recall,
    /// How many granted folders are stored so far.
    grants_kept: Mutex<usize>,
}

impl Session {
    /// `folder` is the job's folder, canonical and checked by the guard.
    pub fn new(
        folder: PathBuf,
        guard: Guard,
        gate: Gate,
        terminals: Terminals,
        said: Said,
        recall: Recall,
    ) -> Session {
        Session {
            folder,
            guard,
            gate,
            terminals,
            lines: said.lines,
            hidden: said.hidden,
            observed: said.observed,
            session_id: OnceLock::new(),
            replaying: AtomicBool::new(false),
            transcript: Mutex::new(Transcript::new()),
            tool_calls: Mutex::new(ToolCalls::new()),
            allowed: Mutex::new(Vec::new()),
            cancelled: watch::channel(false).0,
            denied: Mutex::new(Vec::new()),
            recall,
            grants_kept: Mutex::new(0),
        }
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// What the run uses, as the agent said it.
    pub fn observed(&self) -> &Observed {
        &self.observed
    }

    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    pub fn terminals(&self) -> &Terminals {
        &self.terminals
    }

    /// `session/load` goes out: updates are the agent's replay until [`Session::started`].
    pub fn loading(&self) {
        self.replaying.store(true, Ordering::SeqCst);
    }

    /// The agent created (or loaded) the session: requests must name it from now on.
    pub fn started(&self, session_id: SessionId) {
        let _ = self.session_id.set(session_id);
        // Notifications are handled in order, so every replayed one came before the answer.
        self.replaying.store(false, Ordering::SeqCst);
    }

    /// The turn is being cancelled (`session/cancel` goes out).
    pub fn cancel(&self) {
        self.cancelled.send_replace(true);
    }

    /// Resolves once the turn is being cancelled.
    async fn turn_cancelled(&self) {
        let mut cancelled = self.cancelled.subscribe();
        let _ = cancelled.wait_for(|cancelled| *cancelled).await;
    }

    /// What the gate refused during the run, in order: permission titles and the reads,
    /// writes and commands it did not let through.
    pub fn denied(&self) -> Vec<Denial> {
        lock(&self.denied).clone()
    }

    fn deny(&self, what: &str, reason: &str) {
        lock(&self.denied).push(Denial {
            what: what.to_owned(),
            by_owner: reason.starts_with(OWNER_DENIED),
        });
    }

    /// A line of the job's output.
    pub async fn say(&self, line: String) {
        // The reporter only goes away when the run is over; nothing to tell then.
        let _ = self.lines.send(line).await;
    }

    /// The end of the turn: the rest of the agent's message, and its last message.
    pub fn finish_transcript(&self) -> (Vec<String>, String) {
        let mut transcript = lock(&self.transcript);
        let lines = transcript.finish();
        (lines, transcript.final_message())
    }

    /// `session/update`.
    pub async fn update(&self, notification: SessionNotification) {
        if self.replaying.load(Ordering::SeqCst) {
            tracing::debug!("history replayed by session/load, not output");
            return;
        }
        if self.check_session(&notification.session_id).is_err() {
            tracing::debug!("an update for another session, ignored");
            return;
        }
        match &notification.update {
            SessionUpdate::ToolCall(call) => lock(&self.tool_calls).record_call(call),
            SessionUpdate::ToolCallUpdate(update) => lock(&self.tool_calls).record_update(update),
            SessionUpdate::CurrentModeUpdate(update) => self
                .observed
                .update(|seen| seen.mode = Some(update.current_mode_id.to_string())),
            _ => {}
        }
        let lines = lock(&self.transcript).apply(&notification.update);
        for line in lines {
            self.say(line).await;
        }
    }

    /// `session/request_permission`.
    ///
    /// # Errors
    /// A request for another session.
    pub async fn permission(
        &self,
        request: RequestPermissionRequest,
        cancellation: RequestCancellation,
    ) -> Result<RequestPermissionResponse, Error> {
        self.check_session(&request.session_id)?;
        let facts = lock(&self.tool_calls).merged(&request.tool_call);
        let actions = permissions::actions_of(&facts, &self.folder);
        let check = self.pass_all(&actions, &facts);
        tokio::pin!(check);
        let passage = tokio::select! {
            passage = &mut check => Some(passage),
            () = cancellation.cancelled() => None,
            () = self.turn_cancelled() => {
                // The run is stopping: an open question is withdrawn by its asker, which
                // sees the stop too; let it settle before answering.
                let _ = tokio::time::timeout(WITHDRAW_WAIT, &mut check).await;
                None
            }
        };
        let title = if facts.title.trim().is_empty() {
            request.tool_call.tool_call_id.0.to_string()
        } else {
            facts.title.clone()
        };
        let outcome = match passage {
            None => RequestPermissionOutcome::Cancelled,
            Some(Passage::Allowed { note }) => {
                lock(&self.allowed).extend(actions.iter().map(|action| self.normalize(action)));
                self.say(format!("allowed: {title}{}", note_suffix(note.as_deref())))
                    .await;
                permissions::choose(&request.options, true)
            }
            Some(Passage::Refused { reason }) => {
                self.deny(&title, &reason);
                self.say(format!("refused: {title}: {reason}")).await;
                permissions::choose(&request.options, false)
            }
        };
        Ok(RequestPermissionResponse::new(outcome))
    }

    /// `fs/read_text_file`.
    ///
    /// # Errors
    /// A bad path, a protected one, the policy's refusal, or a file that cannot be read.
    pub async fn read_text_file(
        &self,
        request: ReadTextFileRequest,
    ) -> Result<ReadTextFileResponse, Error> {
        self.check_session(&request.session_id)?;
        let real = files::resolve_existing(&request.path).map_err(invalid)?;
        let what = format!("read {}", self.shown(&real));
        self.guarded(&[&request.path, &real], &what).await?;
        self.pass(Action::ReadFile { path: real.clone() }, &what)
            .await?;
        let (line, limit) = (request.line, request.limit);
        let content = blocking(move || files::read_text(&real, line, limit)).await?;
        Ok(ReadTextFileResponse::new(content))
    }

    /// `fs/write_text_file`.
    ///
    /// # Errors
    /// A bad path, a protected one, the policy's refusal, or a file that cannot be written.
    pub async fn write_text_file(
        &self,
        request: WriteTextFileRequest,
    ) -> Result<WriteTextFileResponse, Error> {
        self.check_session(&request.session_id)?;
        let real = files::resolve_for_write(&request.path).map_err(invalid)?;
        let shown = self.shown(&real);
        let what = format!("write {shown}");
        self.guarded(&[&request.path, &real], &what).await?;
        let preview = self.preview(&real, &request.content);
        self.pass_previewed(Action::WriteFile { path: real.clone() }, &what, preview)
            .await?;
        let content = request.content;
        blocking(move || files::write_text(&real, &content)).await?;
        self.say(format!("wrote {shown}")).await;
        Ok(WriteTextFileResponse::new())
    }

    /// `terminal/create`.
    ///
    /// # Errors
    /// A bad folder, the hard floor's or the policy's refusal, or the sandbox's.
    pub async fn create_terminal(
        &self,
        request: CreateTerminalRequest,
    ) -> Result<CreateTerminalResponse, Error> {
        self.check_session(&request.session_id)?;
        let argv = if request.args.is_empty() {
            vec!["sh".to_owned(), "-c".to_owned(), request.command.clone()]
        } else {
            std::iter::once(request.command.clone())
                .chain(request.args.iter().cloned())
                .collect()
        };
        let cwd = match &request.cwd {
            Some(cwd) if cwd.is_absolute() => cwd.clone(),
            Some(cwd) => {
                return Err(invalid(format!(
                    "{} is not an absolute path",
                    cwd.display()
                )))
            }
            None => self.folder.clone(),
        };
        if let Some(refusal) = hard_floor::check(&argv).refusal() {
            self.say(format!("refused: $ {}: {refusal}", shell_line(&argv)))
                .await;
            return Err(refused(&refusal));
        }
        // The terminal's own variables reach git as surely as `NAME=VALUE` in the line.
        if let Some(variable) = request
            .env
            .iter()
            .find(|variable| !git::safe_variable(&variable.name))
        {
            let refusal = format!(
                "{} would set git's configuration, repository or programs (rule git-programs)",
                variable.name
            );
            self.say(format!("refused: $ {}: {refusal}", shell_line(&argv)))
                .await;
            return Err(refused(&refusal));
        }
        let what = format!("$ {}", shell_line(&argv));
        self.pass(
            Action::Command {
                argv: argv.clone(),
                cwd: cwd.clone(),
            },
            &what,
        )
        .await?;
        let output_limit = request
            .output_byte_limit
            .map_or(terminals::DEFAULT_OUTPUT_LIMIT, |limit| {
                usize::try_from(limit).unwrap_or(usize::MAX)
            });
        let env = request
            .env
            .iter()
            .map(|variable| (variable.name.clone(), variable.value.clone()))
            .collect();
        self.say(what).await;
        let granted = self.gate.policy().granted_folders();
        let id = self
            .terminals
            .create(
                CommandRequest {
                    argv,
                    cwd,
                    env,
                    output_limit,
                },
                &granted,
            )
            .await
            .map_err(|why| refused(&why))?;
        Ok(CreateTerminalResponse::new(TerminalId::new(id)))
    }

    /// `terminal/output`.
    ///
    /// # Errors
    /// An unknown terminal.
    pub fn terminal_output(
        &self,
        request: &TerminalOutputRequest,
    ) -> Result<TerminalOutputResponse, Error> {
        self.check_session(&request.session_id)?;
        let snapshot = self
            .terminals
            .output(&request.terminal_id.0)
            .map_err(invalid)?;
        Ok(
            TerminalOutputResponse::new(snapshot.output, snapshot.truncated)
                .exit_status(snapshot.exit),
        )
    }

    /// `terminal/wait_for_exit`.
    ///
    /// # Errors
    /// An unknown terminal, or one released while waiting.
    pub async fn wait_for_terminal_exit(
        &self,
        request: &WaitForTerminalExitRequest,
    ) -> Result<WaitForTerminalExitResponse, Error> {
        self.check_session(&request.session_id)?;
        let exit = self
            .terminals
            .wait_for_exit(&request.terminal_id.0)
            .await
            .map_err(invalid)?;
        Ok(WaitForTerminalExitResponse::new(exit))
    }

    /// `terminal/kill`.
    ///
    /// # Errors
    /// An unknown terminal.
    pub fn kill_terminal(
        &self,
        request: &KillTerminalRequest,
    ) -> Result<KillTerminalResponse, Error> {
        self.check_session(&request.session_id)?;
        self.terminals
            .kill(&request.terminal_id.0)
            .map_err(invalid)?;
        Ok(KillTerminalResponse::new())
    }

    /// `terminal/release`.
    ///
    /// # Errors
    /// An unknown terminal.
    pub fn release_terminal(
        &self,
        request: &ReleaseTerminalRequest,
    ) -> Result<ReleaseTerminalResponse, Error> {
        self.check_session(&request.session_id)?;
        self.terminals
            .release(&request.terminal_id.0)
            .map_err(invalid)?;
        Ok(ReleaseTerminalResponse::new())
    }

    fn check_session(&self, session_id: &SessionId) -> Result<(), Error> {
        match self.session_id.get() {
            Some(ours) if ours == session_id => Ok(()),
            _ => Err(agent_client_protocol::v1::schema::Error::session_not_found(
                session_id.clone(),
            )
            .into()),
        }
    }

    /// Protected paths are refused before the policy is even asked.
    async fn guarded(&self, paths: &[&Path], what: &str) -> Result<(), Error> {
        for path in paths {
            if let Err(refusal) = self.guard.check_access(path) {
                let refusal = refusal.to_string();
                self.say(format!("refused: {what}: {refusal}")).await;
                return Err(refused(&refusal));
            }
        }
        Ok(())
    }

    /// The gate's passage for `action` (`what` names it in the job's output), unless a
    /// permission request just allowed it.
    async fn pass(&self, action: Action, what: &str) -> Result<(), Error> {
        self.pass_previewed(action, what, std::future::ready(None))
            .await
    }

    /// [`Session::pass`], showing `preview` if the owner is asked.
    async fn pass_previewed(
        &self,
        action: Action,
        what: &str,
        preview: impl std::future::Future<Output = Option<String>>,
    ) -> Result<(), Error> {
        if self.take_allowed(&action) {
            return Ok(());
        }
        let passage = self.gate.check_previewed(action, preview).await;
        self.keep_grants();
        match passage {
            Passage::Allowed { note: None } => Ok(()),
            Passage::Allowed { note: Some(note) } => {
                self.say(format!("allowed: {what} ({note})")).await;
                Ok(())
            }
            Passage::Refused { reason } => {
                self.deny(what, &reason);
                self.say(format!("refused: {what}: {reason}")).await;
                Err(refused(&reason))
            }
        }
    }

    /// Stores the folders the run may change beside its session as soon as the owner grants
    /// another, so a carry-on after a restart starts with it too.
    fn keep_grants(&self) {
        let granted = self.gate.policy().granted_folders();
        let mut kept = self
            .grants_kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if granted.len() > *kept {
            self.recall.keep_granted(&granted);
            *kept = granted.len();
        }
    }

    /// Every action must pass; the first refusal wins. A write the tool call carries a
    /// `diff` for shows its preview when asked.
    async fn pass_all(&self, actions: &[Action], facts: &CallFacts) -> Passage {
        let mut notes = Vec::new();
        for action in actions {
            let proposed = match action {
                Action::WriteFile { path } => facts.proposed_text(path),
                _ => None,
            };
            let preview = async {
                let (path, text) = proposed?;
                self.preview(&files::resolve_for_write(&path).ok()?, &text)
                    .await
            };
            let passage = self.gate.check_previewed(action.clone(), preview).await;
            self.keep_grants();
            match passage {
                Passage::Allowed { note } => notes.extend(note),
                refused @ Passage::Refused { .. } => return refused,
            }
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        Passage::Allowed { note }
    }

    /// The preview of writing `text` to `real` (a resolved path), made off the runtime's
    /// threads when (and only if) it is awaited.
    fn preview(
        &self,
        real: &Path,
        text: &str,
    ) -> impl std::future::Future<Output = Option<String>> {
        let (folder, path, text) = (self.folder.clone(), real.to_path_buf(), text.to_owned());
        let (guard, hidden) = (self.guard.clone(), self.hidden.clone());
        async move {
            let made = tokio::task::spawn_blocking(move || {
                let proposal = Proposal {
                    folder: &folder,
                    path: &path,
                    new_text: &text,
                };
                preview::preview(&proposal, &guard, &hidden)
            });
            made.await.ok().flatten()
        }
    }

    fn take_allowed(&self, action: &Action) -> bool {
        let action = self.normalize(action);
        let mut allowed = lock(&self.allowed);
        match allowed.iter().position(|granted| *granted == action) {
            Some(index) => {
                allowed.remove(index);
                true
            }
            None => false,
        }
    }

    fn normalize(&self, action: &Action) -> Action {
        self.gate.policy().normalize(action)
    }

    /// A path as the job's output shows it: relative inside the folder.
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.folder).map_or_else(
            |_| path.display().to_string(),
            |inside| inside.display().to_string(),
        )
    }
}

fn note_suffix(note: Option<&str>) -> String {
    note.map(|note| format!(" ({note})")).unwrap_or_default()
}

/// A refusal, as the agent is told.
pub fn refused(reason: &str) -> Error {
    Error::new(ErrorCode::new(REFUSED), format!("refused: {reason}"))
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, message.into())
}

/// File work off the runtime's threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, Error> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|why| Error::new(ErrorCode::INTERNAL_ERROR, why)),
        Err(_) => Err(Error::internal_error()),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
