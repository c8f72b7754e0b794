//! The recipe engine: a command the owner configured on this computer (`recipe add NAME --
//! PROGRAM [ARGS…]`), run confined in the job's folder, in its own process group; its
//! output streamed, its time limit and stops enforced.
//!
//! **Architecture Invariant:** a recipe is the owner's own command, so starting it is
//! checked by the hard floor and the guard only, never by the run's mode; the server picks
//! it by name and can never change its program or arguments.

use std::process::ExitStatus;
use std::time::Duration;

use tether_protocol::jobs::{ClaimedJob, CompleteParams, Outcome};
use tokio::io::AsyncRead;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::local::state::{Recipe, SharedFolder};
use crate::policy::guard::Guard;
use crate::policy::hard_floor;
use crate::run::engine::{blocked, time_limit, Engine, RunContext};
use crate::run::evidence::RunEvidence;
use crate::run::grant::{start_broker, Granted};
use crate::run::process_group::{self, Signal, TERMINATE_GRACE};
use crate::run::progress::{report_output, OutputLines};
use crate::run::stop::{RunStop, StopReason};
use crate::run::tool_channel::ToolChannel;
use crate::run::worker_report;
use crate::sandbox;

/// Lines waiting for the reporter; when it is behind (server slow), the run's pipe fills and
/// the run waits, instead of the agent's memory growing.
const LINE_BUFFER: usize = 1024;
/// How long output may keep flowing after the run's first process exited, before whatever
/// it left behind in its group is killed.
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Once the group is killed, what is left in the pipe is only what it buffered: it is read
/// to the end however slowly the reporter takes it, unless a process outside the group
/// holds the pipe open this long.
const READ_REST_LIMIT: Duration = Duration::from_secs(60);

/// How the run's program ended.
#[derive(Debug)]
pub enum Ended {
    Exited(ExitStatus),
    TimedOut,
    Stopped(StopReason),
    SpawnFailed(String),
}

impl Engine for Recipe {
    async fn run(&self, ctx: RunContext<'_>) -> Result<CompleteParams, StopReason> {
        execute(self, ctx).await
    }
}

/// Runs `recipe` for the job of `ctx`; the completion to report, or why nothing may be
/// reported.
async fn execute(recipe: &Recipe, ctx: RunContext<'_>) -> Result<CompleteParams, StopReason> {
    let RunContext {
        client,
        job,
        config,
        folder,
        worktree,
        stop,
        lease,
        secrets,
        named,
        guard,
        hub: _,
        taps,
        attachments,
        tools,
    } = ctx;
    let (line_sender, line_receiver) = mpsc::channel(LINE_BUFFER);
    let references = named.references;
    let broker = match start_broker(guard.data_dir(), job, references, secrets, &line_sender) {
        Ok(broker) => broker,
        Err(refusal) => return Ok(blocked(refusal)),
    };
    let evidence = RunEvidence::prepare(job, guard);
    if let (Some(tools), Some(evidence)) = (tools, &evidence) {
        tools.handback().keep_evidence_in(evidence.recorder());
    }
    let granted = Granted {
        secret_env: named.env,
        evidence: evidence.as_ref(),
        broker: broker.as_ref(),
        worktree,
        attachments,
        tools,
    };
    let mut prepared = match confine(recipe, folder, job, guard, granted) {
        Ok(prepared) => prepared,
        Err(refusal) => {
            if let Some(evidence) = evidence {
                evidence.discard();
            }
            return Ok(blocked(refusal));
        }
    };
    let evidence_notes = line_sender.clone();
    let reporter = tokio::spawn(report_output(
        client.clone(),
        lease.clone(),
        line_receiver,
        None,
        stop.clone(),
        secrets.hidden.clone(),
        Some(taps.open(&job.id)),
    ));
    let spawned = |pid| lease.spawned(pid);
    let command = std::mem::replace(&mut prepared.command, Command::new("true"));
    let ended = supervise(command, time_limit(job), stop, line_sender, spawned).await;
    // Nothing of the run is left to use its secrets by reference.
    drop(broker);
    // What the sandbox kept from the repository (its hooks, its configuration) is put back
    // as soon as nothing of the run is left, whatever becomes of the report.
    let notes = prepared.finish();
    for note in &notes {
        tracing::warn!(job = %job.id, "{note}");
    }
    let mut outcome = completion(ended, job, recipe, stop.current())
        .map(|params| sandbox_checked(params, &notes));
    // The worker's report (its tool call, else `.tether/result.json`) goes with the outcome.
    if let Ok(params) = &mut outcome {
        let collected = worker_report::collect(
            tools.map(ToolChannel::handback),
            &folder.path,
            &secrets.hidden,
        )
        .await;
        if let Some(note) = &collected.note {
            let _ = evidence_notes.send(note.clone()).await;
        }
        params.report = collected.wire();
    }
    // Journaled the moment the program ended, before its output, evidence and delivery go
    // anywhere (the server may be unreachable for long): a restarted agent reports it and
    // never runs it again.
    if let Ok(params) = &outcome {
        lease.ended(params, &secrets.hidden);
    }
    // Evidence goes up after the program ended and before the run completes; what is left
    // out is said in the output.
    if let Some(evidence) = evidence {
        evidence
            .deliver(
                client,
                lease,
                config,
                &secrets.hidden,
                stop,
                &evidence_notes,
            )
            .await;
    }
    drop(evidence_notes);
    // The reporter ends once every line is sent (or the lease is gone).
    let _ = reporter.await;
    let params = outcome?;
    stop.reportable()?;
    Ok(params)
}

/// A run whose launcher could not apply the sandbox is `blocked`, nothing having run; the
/// sandbox's own `notes` close the summary.
fn sandbox_checked(mut params: CompleteParams, notes: &[String]) -> CompleteParams {
    if params.exit_code == Some(sandbox::SANDBOX_FAILED) {
        params = blocked(format!(
            "the sandbox could not be applied, so nothing ran (see the output): {}",
            sandbox::current().report().backend
        ));
    }
    if !notes.is_empty() {
        params.summary = format!("{}; {}", params.summary, notes.join("; "));
    }
    params
}

/// Everything checked before anything runs, whatever the backend: the hard floor on the
/// recipe's argv, the guard on the folder (still the one shared, not protected, not a
/// blocked root), then the confined command. A refusal is the blocked job's summary.
fn confine(
    recipe: &Recipe,
    folder: &SharedFolder,
    job: &ClaimedJob,
    guard: &Guard,
    granted: Granted<'_>,
) -> Result<sandbox::Prepared, String> {
    let argv: Vec<String> = std::iter::once(recipe.program.clone())
        .chain(recipe.args.iter().cloned())
        .collect();
    let evaluation = hard_floor::check(&argv);
    if let Some(refusal) = evaluation.refusal() {
        return Err(refusal);
    }
    let work_folder = guard
        .check_shared_folder(&folder.label, &folder.path)
        .map_err(|err| format!("the guard refused the folder: {err}"))?;
    let (env, writable, readable) = granted.into_parts(job);
    let policy = sandbox::Policy {
        work_folder,
        writable,
        readable,
        denied: Vec::new(),
        network: job.spec.network,
        env,
    };
    sandbox::current()
        .prepare(guard, &policy, &sandbox::Start::new(&argv))
        .map_err(|refused| refused.0)
}

/// Maps how the program ended to the completion to report.
fn completion(
    ended: Ended,
    job: &ClaimedJob,
    recipe: &Recipe,
    stop: Option<StopReason>,
) -> Result<CompleteParams, StopReason> {
    // Once the lease or the token is gone, nothing more may be reported, however it ended.
    if let Some(reason) = stop.filter(|reason| *reason >= StopReason::LeaseLost) {
        return Err(reason);
    }
    let (outcome, summary, exit_code) = match ended {
        Ended::Exited(status) => exited(status),
        Ended::TimedOut => (
            Outcome::Failed,
            format!("timed out after {} min", job.spec.timeout_minutes.max(1)),
            None,
        ),
        Ended::Stopped(StopReason::Cancel) => (Outcome::Cancelled, "cancelled".to_owned(), None),
        Ended::Stopped(reason) => return Err(reason),
        Ended::SpawnFailed(err) => (
            Outcome::Failed,
            format!("could not start {:?}: {err}", recipe.program),
            None,
        ),
    };
    Ok(CompleteParams {
        outcome,
        summary,
        exit_code,
        report: None,
        observed: None,
        changes: None,
        delivery: None,
    })
}

fn exited(status: ExitStatus) -> (Outcome, String, Option<i32>) {
    match status.code() {
        Some(0) => (Outcome::Succeeded, "exit code 0".to_owned(), Some(0)),
        Some(code) => (Outcome::Failed, format!("exit code {code}"), Some(code)),
        None => (Outcome::Failed, killed_by(status), None),
    }
}

#[cfg(unix)]
fn killed_by(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(signal) => format!("killed by signal {signal}"),
        None => "ended without an exit code".to_owned(),
    }
}

#[cfg(not(unix))]
fn killed_by(_status: ExitStatus) -> String {
    "ended without an exit code".to_owned()
}

/// The recipe's command, UNCONFINED, in the shared folder, as the leader of a new process
/// group, with a scrubbed environment and no stdin. Only the tests of [`supervise`] use it;
/// jobs start through [`sandbox::Sandbox::prepare`].
#[cfg(test)]
pub fn recipe_command(
    recipe: &Recipe,
    folder: &SharedFolder,
    job: &ClaimedJob,
    inherited: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Command {
    let mut command = Command::new(&recipe.program);
    command
        .args(&recipe.args)
        .current_dir(&folder.path)
        .env_clear()
        .envs(crate::run::grant::child_env(inherited, job))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // If the agent itself dies, do not leave the run behind unsupervised.
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    command
}

/// Spawns `command` and waits until it ends, times out or is stopped, sending each output
/// line (stdout and stderr through one pipe, in the order they were written) to `lines`.
///
/// On timeout or Cancel the whole group gets SIGTERM, then SIGKILL after a grace; on a lost
/// lease or revocation it gets SIGKILL at once. Whatever the program left running in its
/// group after it exited is killed too. `spawned` learns the leader's pid (also the group
/// id) as soon as the process exists, for the run journal.
pub async fn supervise(
    mut command: Command,
    timeout: Duration,
    stop: &RunStop,
    lines: mpsc::Sender<String>,
    spawned: impl FnOnce(u32),
) -> Ended {
    if let Some(reason) = stop.current() {
        return Ended::Stopped(reason);
    }
    let output = match one_output_pipe(&mut command) {
        Ok(output) => output,
        Err(err) => return Ended::SpawnFailed(format!("no pipe for its output: {err}")),
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return Ended::SpawnFailed(err.to_string()),
    };
    // The command holds this process's copies of the pipe's writing end: the reader sees
    // the end of the output only once they are closed.
    drop(command);
    let pgid = child.id().unwrap_or(0);
    spawned(pgid);
    let mut readers = JoinSet::new();
    readers.spawn(forward_lines(output, lines.clone()));
    drop(lines);

    let ended = tokio::select! {
        status = child.wait() => match status {
            Ok(status) => Ended::Exited(status),
            Err(err) => Ended::SpawnFailed(format!("lost track of the process: {err}")),
        },
        () = tokio::time::sleep(timeout) => {
            process_group::terminate(&mut child, pgid, TERMINATE_GRACE).await;
            Ended::TimedOut
        }
        reason = stop.raised() => {
            let grace = if reason >= StopReason::LeaseLost { Duration::ZERO } else { TERMINATE_GRACE };
            process_group::terminate(&mut child, pgid, grace).await;
            Ended::Stopped(reason)
        }
    };
    drain(&mut readers, pgid).await;
    ended
}

/// One pipe for both stdout and stderr, as a terminal is: the lines arrive in the order the
/// program wrote them, so an error printed last is the log's last line, not wherever a
/// second reader happened to catch up.
fn one_output_pipe(command: &mut Command) -> std::io::Result<tokio::net::unix::pipe::Receiver> {
    let (reader, writer) = std::io::pipe()?;
    command.stdout(writer.try_clone()?).stderr(writer);
    tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())
}

/// Lets the output readers reach end of file; kills the group's leftovers if they hold the
/// pipes open, reads what the pipe still holds, and gives up only on a pipe that someone
/// outside the group keeps open.
async fn drain(readers: &mut JoinSet<()>, pgid: u32) {
    if tokio::time::timeout(DRAIN_GRACE, join_all(readers))
        .await
        .is_ok()
    {
        if process_group::group_alive(pgid) {
            // Background processes that closed their output live on; the run is over.
            let _ = process_group::signal_group(pgid, Signal::Kill);
        }
        return;
    }
    let _ = process_group::signal_group(pgid, Signal::Kill);
    if tokio::time::timeout(READ_REST_LIMIT, join_all(readers))
        .await
        .is_err()
    {
        // Someone outside the group holds the pipe; stop reading it.
        readers.abort_all();
    }
}

async fn join_all(readers: &mut JoinSet<()>) {
    while readers.join_next().await.is_some() {}
}

/// Reads `pipe` line by line into `lines` (bounded: [`OutputLines`]).
async fn forward_lines(pipe: impl AsyncRead + Unpin, lines: mpsc::Sender<String>) {
    let mut output = OutputLines::new(pipe);
    while let Some(line) = output.next_line().await {
        if lines.send(line).await.is_err() {
            // The reporter gave up (lease lost); the run is being stopped.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::grant::tests::claimed_job as job;

    #[test]
    fn outcomes_follow_how_the_program_ended() {
        let recipe = Recipe {
            name: "tests".into(),
            program: "nope".into(),
            args: Vec::new(),
        };
        let job = job("p", 7);
        let check = |ended: Ended, stop: Option<StopReason>| {
            completion(ended, &job, &recipe, stop)
                .map(|params| (params.outcome, params.summary, params.exit_code))
        };
        assert_eq!(
            check(Ended::TimedOut, None),
            Ok((Outcome::Failed, "timed out after 7 min".into(), None))
        );
        assert_eq!(
            check(Ended::Stopped(StopReason::Cancel), None),
            Ok((Outcome::Cancelled, "cancelled".into(), None))
        );
        assert_eq!(
            check(Ended::Stopped(StopReason::Shutdown), None),
            Err(StopReason::Shutdown)
        );
        assert_eq!(
            check(Ended::TimedOut, Some(StopReason::LeaseLost)),
            Err(StopReason::LeaseLost)
        );
        assert_eq!(
            check(Ended::SpawnFailed("not found".into()), None),
            Ok((
                Outcome::Failed,
                "could not start \"nope\": not found".into(),
                None
            ))
        );
    }

    async fn run_script(
        script: &str,
        timeout: Duration,
        stop: &RunStop,
    ) -> (Ended, Vec<String>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("tempdir: {err}"));
        let recipe = Recipe {
            name: "tests".into(),
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
        };
        let folder = SharedFolder {
            label: "work".into(),
            path: dir.path().to_path_buf(),
        };
        let command = recipe_command(
            &recipe,
            &folder,
            &job("hello prompt", 1),
            std::env::vars_os(),
        );
        let (sender, mut receiver) = mpsc::channel(LINE_BUFFER);
        let collector = tokio::spawn(async move {
            let mut lines = Vec::new();
            while let Some(line) = receiver.recv().await {
                lines.push(line);
            }
            lines
        });
        let ended = supervise(command, timeout, stop, sender, |_| {}).await;
        let lines = collector.await.unwrap_or_default();
        (ended, lines, dir)
    }

    #[tokio::test]
    async fn output_left_in_the_pipe_when_the_program_exits_is_all_read() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("tempdir: {err}"));
        let recipe = Recipe {
            name: "tests".into(),
            program: "seq".into(),
            args: vec!["1".into(), "12000".into()],
        };
        let folder = SharedFolder {
            label: "work".into(),
            path: dir.path().to_path_buf(),
        };
        let job = job("p", 1);
        let command = recipe_command(&recipe, &folder, &job, std::env::vars_os());
        // A reporter slower than the program: the pipe still holds thousands of lines when
        // `seq` exits, more than the grace lets through.
        let (sender, mut receiver) = mpsc::channel(16);
        let collector = tokio::spawn(async move {
            let mut count = 0_usize;
            while receiver.recv().await.is_some() {
                count += 1;
                if count.is_multiple_of(2) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            count
        });
        let stop = RunStop::new();
        let ended = supervise(command, Duration::from_secs(60), &stop, sender, |_| {}).await;
        assert!(matches!(ended, Ended::Exited(status) if status.success()));
        assert_eq!(collector.await.unwrap_or_default(), 12000);
    }

    #[tokio::test]
    async fn stdout_and_stderr_keep_the_order_they_were_written_in() {
        let stop = RunStop::new();
        let script = "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done";
        let (ended, lines, _dir) = run_script(script, Duration::from_secs(30), &stop).await;
        assert!(matches!(ended, Ended::Exited(status) if status.success()));
        let written: Vec<String> = (1..=200)
            .flat_map(|i| [format!("out{i}"), format!("err{i}")])
            .collect();
        assert_eq!(lines, written);
    }

    #[tokio::test]
    async fn a_run_gets_its_prompt_folder_and_exit_code() {
        let stop = RunStop::new();
        let script =
            r#"echo "$TETHER_TASK_PROMPT"; pwd; echo oops >&2; printf 'no newline'; exit 3"#;
        let (ended, lines, dir) = run_script(script, Duration::from_secs(30), &stop).await;
        assert!(
            matches!(ended, Ended::Exited(status) if status.code() == Some(3)),
            "{ended:?}"
        );
        let canonical = dir
            .path()
            .canonicalize()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        for expected in ["hello prompt", canonical.as_str(), "oops", "no newline"] {
            assert!(
                lines.iter().any(|line| line == expected),
                "{expected:?} not in {lines:?}"
            );
        }
    }

    /// Starts a script that records its background child's pid, then waits for `stop`.
    /// Returns how the run ended and whether the shell was sent SIGTERM before the end.
    async fn check_group_is_killed(
        timeout: Duration,
        stop_after: Option<(Duration, StopReason)>,
    ) -> (Ended, bool) {
        let stop = RunStop::new();
        if let Some((delay, reason)) = stop_after {
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                stop.raise(reason);
            });
        }
        // The child starts with SIGTERM ignored, so SIGKILL must follow; the shell then only
        // notes a SIGTERM and goes on waiting.
        let script = "trap '' TERM; sleep 60 & echo \"child $!\"; \
                      trap 'echo got-term' TERM; wait; sleep 60";
        let (ended, lines, _dir) = run_script(script, timeout, &stop).await;
        let child: u32 = lines
            .iter()
            .find_map(|line| line.strip_prefix("child "))
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("no child pid in {lines:?}"));
        assert!(dies_soon(child).await, "background child {child} survived");
        (ended, lines.iter().any(|line| line == "got-term"))
    }

    /// SIGKILL is delivered asynchronously: give the kernel a moment to end the process.
    async fn dies_soon(pid: u32) -> bool {
        for _ in 0..50 {
            if !process_alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    fn process_alive(pid: u32) -> bool {
        // A zombie (state Z) is dead; it only waits for its new parent to reap it.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let (ended, _) = check_group_is_killed(Duration::from_millis(500), None).await;
        assert!(matches!(ended, Ended::TimedOut), "{ended:?}");
    }

    #[tokio::test]
    async fn a_cancel_kills_the_whole_group() {
        let (ended, asked_first) = check_group_is_killed(
            Duration::from_secs(60),
            Some((Duration::from_millis(300), StopReason::Cancel)),
        )
        .await;
        assert!(
            matches!(ended, Ended::Stopped(StopReason::Cancel)),
            "{ended:?}"
        );
        assert!(asked_first, "a cancel sends SIGTERM before SIGKILL");
    }

    #[tokio::test]
    async fn a_lost_lease_kills_at_once() {
        let (ended, asked_first) = check_group_is_killed(
            Duration::from_secs(60),
            Some((Duration::from_millis(300), StopReason::LeaseLost)),
        )
        .await;
        assert!(
            matches!(ended, Ended::Stopped(StopReason::LeaseLost)),
            "{ended:?}"
        );
        assert!(!asked_first, "no SIGTERM and no grace for a lost lease");
    }

    #[tokio::test]
    async fn leftovers_are_killed_when_the_run_exits() {
        let stop = RunStop::new();
        let script = "sleep 60 >/dev/null 2>&1 & echo \"child $!\"";
        let (ended, lines, _dir) = run_script(script, Duration::from_secs(30), &stop).await;
        assert!(
            matches!(ended, Ended::Exited(status) if status.success()),
            "{ended:?}"
        );
        let child: u32 = lines
            .iter()
            .find_map(|line| line.strip_prefix("child "))
            .and_then(|pid| pid.parse().ok())
            .unwrap_or(0);
        assert!(
            child > 0 && dies_soon(child).await,
            "leftover {child} survived"
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_failure() {
        let stop = RunStop::new();
        let recipe = Recipe {
            name: "x".into(),
            program: "/nonexistent/tether-test".into(),
            args: Vec::new(),
        };
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("tempdir: {err}"));
        let folder = SharedFolder {
            label: "work".into(),
            path: dir.path().to_path_buf(),
        };
        let command = recipe_command(&recipe, &folder, &job("p", 1), Vec::new());
        let (sender, _receiver) = mpsc::channel(1);
        let ended = supervise(command, Duration::from_secs(5), &stop, sender, |_| {}).await;
        assert!(matches!(ended, Ended::SpawnFailed(_)), "{ended:?}");
    }
}
