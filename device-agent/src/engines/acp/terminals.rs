//! The agent's terminals (`terminal/create`, `output`, `wait_for_exit`, `kill`, `release`):
//! each command runs through the same confinement layer as recipes, in the job's folder (or
//! a folder inside it), with the job's network choice and environment, and its output kept
//! up to the byte limit the agent asked for. What it prints is also shown in the job's
//! output as it comes, under its `$` line ([`shown`]).
//!
//! The hard floor and the policy are the caller's (they decide whether a command may start
//! at all); this module only starts, watches and stops what was allowed.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_client_protocol::v1::schema::TerminalExitStatus;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;

use super::shown::{self, CommandShown, RunShown};
use crate::policy::guard::Guard;
use crate::run::process_group;
use crate::sandbox;

/// Output kept when the agent names no limit.
pub const DEFAULT_OUTPUT_LIMIT: usize = 1 << 20;
/// Output kept at most, whatever the agent asks.
pub const MAX_OUTPUT_LIMIT: usize = 16 << 20;
/// Terminals one run may hold at once.
pub const MAX_TERMINALS: usize = 64;
/// How long stopping every terminal at the end of a run may take.
const STOP_ALL_WAIT: Duration = Duration::from_secs(5);

/// What every terminal of a run shares: where and how commands start.
#[derive(Debug, Clone)]
pub struct Launch {
    pub guard: Guard,
    /// The job's folder, canonical: a command's folder must be it or inside it.
    pub folder: PathBuf,
    pub network: bool,
    /// The run's environment (allow-listed, plus the job's named secrets and the evidence
    /// folder).
    pub env: Vec<(String, String)>,
    /// Folders every program of the run may write besides the job's (the evidence folder,
    /// the worktree's git folders). A terminal also writes the folders the owner allowed for
    /// the run so far ([`Launch::writable_with`]).
    pub writable: Vec<PathBuf>,
    /// Paths every program of the run may read besides the system's (the secrets broker's
    /// socket and this agent's program, for `secret-http`).
    pub readable: Vec<PathBuf>,
}

impl Launch {
    /// What a command started now may write besides the job's folder: the run's own
    /// folders, then each folder the owner allowed for this run (`granted`) that is still a
    /// folder and that the guard still lets a run be given (a protected path never is).
    pub fn writable_with(&self, granted: &[PathBuf]) -> Vec<PathBuf> {
        let mut writable = self.writable.clone();
        for folder in granted {
            let covered = folder.starts_with(&self.folder) || writable.contains(folder);
            if covered || !folder.is_dir() || self.guard.check_access(folder).is_err() {
                continue;
            }
            writable.push(folder.clone());
        }
        writable
    }
}

/// A command to start, as the agent asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRequest {
    pub argv: Vec<String>,
    /// Absolute, inside the job's folder (checked by [`Terminals::create`]).
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub output_limit: usize,
}

/// The terminals of one run.
#[derive(Debug)]
pub struct Terminals {
    launch: Launch,
    /// A std mutex: held only to look up, insert or remove.
    open: Mutex<HashMap<String, Arc<Terminal>>>,
    next_id: AtomicU64,
    /// One task per terminal, watching its process until it ends.
    watchers: tokio::sync::Mutex<JoinSet<()>>,
    /// The job's output: what commands print, how they end, notes about them.
    lines: mpsc::Sender<String>,
    /// What the run's commands showed in it so far.
    run_shown: Arc<Mutex<RunShown>>,
}

#[derive(Debug)]
struct Terminal {
    output: Mutex<Output>,
    /// What of the output reaches the job's output.
    shown: Mutex<CommandShown>,
    exit: watch::Sender<Option<TerminalExitStatus>>,
    kill: Arc<Notify>,
}

#[derive(Debug)]
struct Output {
    bytes: VecDeque<u8>,
    limit: usize,
    truncated: bool,
}

/// What `terminal/output` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub output: String,
    pub truncated: bool,
    pub exit: Option<TerminalExitStatus>,
}

impl Terminals {
    pub fn new(launch: Launch, lines: mpsc::Sender<String>) -> Terminals {
        Terminals {
            launch,
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            watchers: tokio::sync::Mutex::new(JoinSet::new()),
            lines,
            run_shown: Arc::new(Mutex::new(RunShown::default())),
        }
    }

    pub fn folder(&self) -> &Path {
        &self.launch.folder
    }

    /// Starts `request` confined, also writing the folders the owner allowed for this run so
    /// far (`granted`); the new terminal's id. The caller said its `$` line just before: the
    /// run's N-th command is `term-N` whether it starts or not, so the job's output can show
    /// each command's lines (or why it did not start) under it.
    ///
    /// # Errors
    /// A sentence for the agent: a folder outside the job's, too many terminals, or a
    /// refusal of the sandbox.
    pub async fn create(
        &self,
        request: CommandRequest,
        granted: &[PathBuf],
    ) -> Result<String, String> {
        let id = format!("term-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        match self.start(&id, request, granted).await {
            Ok(()) => Ok(id),
            Err(why) => {
                let shown = CommandShown::new(&id);
                for line in [
                    shown.line(&format!("not started: {why}")),
                    format!("{id}: ended"),
                ] {
                    let _ = self.lines.send(line).await;
                }
                Err(why)
            }
        }
    }

    async fn start(
        &self,
        id: &str,
        request: CommandRequest,
        granted: &[PathBuf],
    ) -> Result<(), String> {
        if lock(&self.open).len() >= MAX_TERMINALS {
            return Err(format!(
                "at most {MAX_TERMINALS} terminals may be open at once; release some"
            ));
        }
        let cwd = self.inside_folder(&request.cwd)?;
        let mut env = self.launch.env.clone();
        for (name, value) in &request.env {
            env.retain(|(existing, _)| existing != name);
            env.push((name.clone(), value.clone()));
        }
        let policy = sandbox::Policy {
            work_folder: self.launch.folder.clone(),
            writable: self.launch.writable_with(granted),
            readable: self.launch.readable.clone(),
            denied: Vec::new(),
            network: self.launch.network,
            env,
        };
        let start = sandbox::Start {
            argv: request.argv,
            cwd: Some(cwd),
            stdin: sandbox::Input::Null,
        };
        let mut prepared = sandbox::current()
            .prepare(&self.launch.guard, &policy, &start)
            .map_err(|refused| refused.0)?;
        let mut child = prepared
            .command
            .spawn()
            .map_err(|err| format!("could not start the command: {err}"))?;
        let terminal = Arc::new(Terminal {
            output: Mutex::new(Output::new(request.output_limit)),
            shown: Mutex::new(CommandShown::new(id)),
            exit: watch::channel(None).0,
            kill: Arc::new(Notify::new()),
        });
        let show = Show {
            terminal: terminal.clone(),
            run: self.run_shown.clone(),
            lines: self.lines.clone(),
        };
        let mut readers = JoinSet::new();
        if let Some(stdout) = child.stdout.take() {
            readers.spawn(collect(stdout, show.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            readers.spawn(collect(stderr, show.clone()));
        }
        lock(&self.open).insert(id.to_owned(), terminal.clone());
        let shown = id.to_owned();
        self.watchers.lock().await.spawn(async move {
            let status = watch_until_exit(child, &terminal.kill).await;
            // The launcher ends the program's whole tree before it exits, so the pipes close.
            while readers.join_next().await.is_some() {}
            let notes = prepared.finish();
            let exit = exit_status(status);
            let last = {
                let mut command = lock(&terminal.shown);
                command.ended(&mut lock(&show.run))
            };
            show.send(last).await;
            let _ = show
                .lines
                .send(format!("{shown}: {}", describe(&exit)))
                .await;
            for note in notes {
                let _ = show.lines.send(note).await;
            }
            terminal.exit.send_replace(Some(exit));
        });
        Ok(())
    }

    /// The output so far and, once it ended, how the command ended.
    ///
    /// # Errors
    /// An unknown (or released) terminal.
    pub fn output(&self, id: &str) -> Result<Snapshot, String> {
        let terminal = self.get(id)?;
        let exit = terminal.exit.borrow().clone();
        let output = lock(&terminal.output);
        Ok(Snapshot {
            output: output.text(),
            truncated: output.truncated,
            exit,
        })
    }

    /// Waits until the command ends.
    ///
    /// # Errors
    /// An unknown terminal, or one released while waiting.
    pub async fn wait_for_exit(&self, id: &str) -> Result<TerminalExitStatus, String> {
        let terminal = self.get(id)?;
        let mut exit = terminal.exit.subscribe();
        let ended = exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| format!("terminal {id} was released"))?;
        ended
            .clone()
            .ok_or_else(|| format!("terminal {id} was released"))
    }

    /// Kills the command (its whole tree), keeping the terminal and its output.
    ///
    /// # Errors
    /// An unknown terminal.
    pub fn kill(&self, id: &str) -> Result<(), String> {
        self.get(id)?.kill.notify_one();
        Ok(())
    }

    /// Kills the command if it still runs and forgets the terminal.
    ///
    /// # Errors
    /// An unknown terminal.
    pub fn release(&self, id: &str) -> Result<(), String> {
        let terminal = lock(&self.open).remove(id).ok_or_else(|| unknown(id))?;
        terminal.kill.notify_one();
        Ok(())
    }

    /// The end of the run: kills every command still running and waits (bounded) until
    /// their trees are gone.
    pub async fn stop_all(&self) {
        for terminal in lock(&self.open).drain().map(|(_, terminal)| terminal) {
            terminal.kill.notify_one();
        }
        let mut watchers = self.watchers.lock().await;
        let all_ended = async { while watchers.join_next().await.is_some() {} };
        if tokio::time::timeout(STOP_ALL_WAIT, all_ended)
            .await
            .is_err()
        {
            tracing::warn!("terminals did not stop in time");
            watchers.abort_all();
        }
    }

    fn get(&self, id: &str) -> Result<Arc<Terminal>, String> {
        lock(&self.open).get(id).cloned().ok_or_else(|| unknown(id))
    }

    /// `cwd`, canonical, when it is the job's folder or inside it.
    fn inside_folder(&self, cwd: &Path) -> Result<PathBuf, String> {
        let real = cwd
            .canonicalize()
            .map_err(|_| format!("{} does not exist", cwd.display()))?;
        if !real.starts_with(&self.launch.folder) {
            return Err(format!(
                "{} is outside the job's folder ({}); commands run only there",
                cwd.display(),
                self.launch.folder.display()
            ));
        }
        if !real.is_dir() {
            return Err(format!("{} is not a folder", cwd.display()));
        }
        Ok(real)
    }
}

fn unknown(id: &str) -> String {
    format!("there is no terminal {id:?}")
}

/// Waits for the launcher to exit, killing its tree when asked.
async fn watch_until_exit(mut child: tokio::process::Child, kill: &Notify) -> Option<ExitStatus> {
    let pgid = child.id().unwrap_or(0);
    tokio::select! {
        status = child.wait() => status.ok(),
        () = kill.notified() => {
            // SIGHUP: the launcher kills the whole tree at once, then exits.
            process_group::terminate(&mut child, pgid, Duration::ZERO).await;
            child.wait().await.ok()
        }
    }
}

/// Where one terminal's lines go: its own bounds, the run's, and the job's output.
#[derive(Debug, Clone)]
struct Show {
    terminal: Arc<Terminal>,
    run: Arc<Mutex<RunShown>>,
    lines: mpsc::Sender<String>,
}

impl Show {
    /// The lines to send for `printed`, as the bounds allow.
    fn bounded(&self, printed: Vec<String>) -> Vec<String> {
        let mut command = lock(&self.terminal.shown);
        let mut run = lock(&self.run);
        printed
            .iter()
            .flat_map(|text| command.printed(&mut run, text))
            .collect()
    }

    /// Sends `lines` to the job's output as they come (batched by the run's reporter).
    async fn send(&self, lines: Vec<String>) {
        for line in lines {
            if self.lines.send(line).await.is_err() {
                return;
            }
        }
    }
}

/// Reads one of a terminal's pipes: kept for the agent, and shown line by line.
async fn collect(mut pipe: impl AsyncRead + Unpin, show: Show) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut split = shown::Lines::default();
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                lock(&show.terminal.output).push(&buffer[..read]);
                let printed = split.push(&buffer[..read]);
                show.send(show.bounded(printed)).await;
            }
        }
    }
    let last = split.finish().into_iter().collect();
    show.send(show.bounded(last)).await;
}

impl Output {
    fn new(limit: usize) -> Output {
        Output {
            bytes: VecDeque::new(),
            limit: limit.clamp(1, MAX_OUTPUT_LIMIT),
            truncated: false,
        }
    }

    /// Appends, dropping the oldest bytes past the limit, then any partial character left
    /// at the front, so the text always starts on a character boundary.
    fn push(&mut self, bytes: &[u8]) {
        self.bytes.extend(bytes);
        if self.bytes.len() > self.limit {
            let excess = self.bytes.len() - self.limit;
            self.bytes.drain(..excess);
            while self.bytes.front().is_some_and(|byte| byte & 0xC0 == 0x80) {
                self.bytes.pop_front();
            }
            self.truncated = true;
        }
    }

    fn text(&self) -> String {
        let (front, back) = self.bytes.as_slices();
        let mut bytes = Vec::with_capacity(self.bytes.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// How the program ended, as ACP reports it. The launcher exits with the program's code, or
/// ends by the program's signal.
fn exit_status(status: Option<ExitStatus>) -> TerminalExitStatus {
    let Some(status) = status else {
        return TerminalExitStatus::new().signal("SIGKILL".to_owned());
    };
    if let Some(code) = status.code() {
        return TerminalExitStatus::new().exit_code(u32::try_from(code).unwrap_or(u32::MAX));
    }
    TerminalExitStatus::new().signal(signal_name(&status))
}

#[cfg(unix)]
fn signal_name(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(libc::SIGKILL) => "SIGKILL".to_owned(),
        Some(libc::SIGTERM) => "SIGTERM".to_owned(),
        Some(libc::SIGHUP) => "SIGHUP".to_owned(),
        Some(libc::SIGINT) => "SIGINT".to_owned(),
        Some(libc::SIGSEGV) => "SIGSEGV".to_owned(),
        Some(libc::SIGABRT) => "SIGABRT".to_owned(),
        Some(other) => format!("signal {other}"),
        None => "unknown".to_owned(),
    }
}

#[cfg(not(unix))]
fn signal_name(_status: &ExitStatus) -> String {
    "unknown".to_owned()
}

fn describe(exit: &TerminalExitStatus) -> String {
    match (&exit.exit_code, &exit.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by {signal}"),
        (None, None) => "ended".to_owned(),
    }
}

/// A poisoned lock only means a task panicked while holding it; the data stays valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(limit: usize, chunks: &[&str]) -> (String, bool) {
        let mut output = Output::new(limit);
        for chunk in chunks {
            output.push(chunk.as_bytes());
        }
        (output.text(), output.truncated)
    }

    #[test]
    fn a_folder_allowed_for_the_run_is_writable_unless_the_guard_refuses_it() -> std::io::Result<()>
    {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().canonicalize()?;
        let data = root.join("data");
        for dir in ["work/sub", "evidence", "other", "data/keys"] {
            std::fs::create_dir_all(root.join(dir))?;
        }
        let launch = Launch {
            guard: Guard::new(Some(root.join("home")), &data),
            folder: root.join("work"),
            network: false,
            env: Vec::new(),
            writable: vec![root.join("evidence")],
            readable: Vec::new(),
        };
        assert_eq!(launch.writable_with(&[]), [root.join("evidence")]);
        let granted = [
            root.join("other"),
            // Already writable: the job's folder (and what is in it), the run's own.
            root.join("work/sub"),
            root.join("evidence"),
            // Gone since it was granted.
            root.join("removed"),
            // The agent's own data, and a folder holding it, stay refused.
            data.join("keys"),
            root.clone(),
            root.join("other"),
        ];
        assert_eq!(
            launch.writable_with(&granted),
            [root.join("evidence"), root.join("other")]
        );
        Ok(())
    }

    #[test]
    fn output_keeps_the_latest_bytes_on_a_character_boundary() {
        assert_eq!(kept(10, &["abc", "def"]), ("abcdef".to_owned(), false));
        assert_eq!(kept(4, &["abc", "def"]), ("cdef".to_owned(), true));
        // "é" is two bytes: cutting through it drops its second half too.
        assert_eq!(kept(4, &["aé", "xyz"]), ("xyz".to_owned(), true));
        assert_eq!(kept(5, &["aé", "xyz"]), ("éxyz".to_owned(), true));
    }
}
