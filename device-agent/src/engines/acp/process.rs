//! The coding agent's process: started through the same confinement layer as recipes, in
//! the job's folder, as its [`Outfit`] says (its own home, variables, keys and network).
//!
//! Its stdin is a pipe this process writes ACP to (the launcher passes it through,
//! [`sandbox::Input::Pipe`]); its stdout carries ACP back; its stderr goes to the job's
//! output, and the last lines of it explain a failure.

use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::outfit::Outfit;
use super::terminals::Launch;
use crate::run::process_group;
use crate::run::progress::OutputLines;
use crate::sandbox;

/// Lines of the agent's stderr kept to explain a failure.
const TAIL_LINES: usize = 8;
/// How long the stderr reader may take to finish after the agent ended.
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// The agent's running process.
#[derive(Debug)]
pub struct AgentProcess {
    child: Child,
    pgid: u32,
    prepared: sandbox::Prepared,
    stderr: Option<JoinHandle<()>>,
    tail: StderrTail,
}

/// The last lines the agent printed on stderr, shared with the task reading them.
#[derive(Debug, Clone, Default)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    pub fn lines(&self) -> Vec<String> {
        lock(&self.0).iter().cloned().collect()
    }

    fn push(&self, line: String) {
        let mut tail = lock(&self.0);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

/// The agent's end of the conversation.
#[derive(Debug)]
pub struct Pipes {
    /// What the agent prints: ACP messages.
    pub stdout: ChildStdout,
    /// What the agent reads; dropping it closes the agent's input.
    pub input: ChildStdin,
}

/// Starts the engine confined as `outfit` says, in `launch`'s folder.
///
/// # Errors
/// The sandbox's refusal, or why the process or its input could not be set up.
pub fn start(
    outfit: &Outfit,
    launch: &Launch,
    lines: mpsc::Sender<String>,
) -> Result<(AgentProcess, Pipes), String> {
    let policy = sandbox::Policy {
        work_folder: launch.folder.clone(),
        writable: outfit.writable.clone(),
        readable: outfit.readable.clone(),
        denied: Vec::new(),
        network: outfit.network,
        env: outfit.env.clone(),
    };
    let start = sandbox::Start {
        argv: outfit.argv.clone(),
        cwd: None,
        stdin: sandbox::Input::Pipe,
    };
    let mut prepared = sandbox::current()
        .prepare_forwarded(&outfit.guard, &policy, &start, &outfit.forwards)
        .map_err(|refused| refused.0)?;
    let mut child = prepared
        .command
        .spawn()
        .map_err(|err| format!("could not start {:?}: {err}", outfit.argv.first()))?;
    let pgid = child.id().unwrap_or(0);
    let input = child
        .stdin
        .take()
        .ok_or_else(|| "the agent's input is not piped".to_owned())?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| "the agent's output is not piped".to_owned())?;
    let tail = StderrTail::default();
    let stderr = child
        .stderr
        .take()
        .map(|stderr| tokio::spawn(forward_stderr(stderr, lines, tail.clone())));
    let process = AgentProcess {
        child,
        pgid,
        prepared,
        stderr,
        tail,
    };
    Ok((process, Pipes { stdout, input }))
}

impl AgentProcess {
    /// The process group of the run (the launcher's pid), for the run journal.
    pub fn pgid(&self) -> u32 {
        self.pgid
    }

    /// How the process ended, if it did.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last lines the agent printed on stderr (also after [`AgentProcess::stop`]).
    pub fn stderr_handle(&self) -> StderrTail {
        self.tail.clone()
    }

    /// Ends the agent: it gets `grace` to exit on its own (its input is closed by then),
    /// then its whole tree is stopped, TERM then KILL after `kill_grace` (at once when zero).
    /// Returns how it ended and the sentences to add to the run's output.
    pub async fn stop(
        mut self,
        grace: Duration,
        kill_grace: Duration,
    ) -> (Option<ExitStatus>, Vec<String>) {
        let exited = tokio::time::timeout(grace, self.child.wait()).await;
        let status = match exited {
            Ok(status) => status.ok(),
            Err(_) => {
                process_group::terminate(&mut self.child, self.pgid, kill_grace).await;
                self.child.wait().await.ok()
            }
        };
        // Whatever the agent left in its group goes with it.
        if process_group::group_alive(self.pgid) {
            let _ = process_group::signal_group(self.pgid, process_group::Signal::Kill);
        }
        if let Some(stderr) = self.stderr.take() {
            if tokio::time::timeout(DRAIN_WAIT, stderr).await.is_err() {
                tracing::warn!("the agent's stderr stayed open after it ended");
            }
        }
        (status, self.prepared.finish())
    }
}

/// Sends each stderr line to the job's output (bounded: [`OutputLines`]).
async fn forward_stderr(
    stderr: tokio::process::ChildStderr,
    lines: mpsc::Sender<String>,
    tail: StderrTail,
) {
    let mut output = OutputLines::new(stderr);
    while let Some(line) = output.next_line().await {
        tail.push(line.clone());
        if lines.send(format!("stderr: {line}")).await.is_err() {
            return;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
