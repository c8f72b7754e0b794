//! One console command line: judged, then run confined on a pseudo-terminal.
//!
//! **Judged** ([`judge`]) as an ACP agent's terminal command is: the line becomes
//! `sh -c LINE` (as `terminal/create` without arguments does), run in the shared folder the
//! label names (checked by the guard as a job's folder is), and [`RunPolicy::judge`] decides
//! with the settings of an owner-attended run: mode `ask` (every command that changes
//! something asks, unless the owner trusts the folder with `tether-agent trust add`; a
//! command that only reads goes ahead), the owner's trusted folders, the network on (a
//! command that reaches another computer asks), no git delivery. So the hard floor, the
//! guard, git's rules and the zones refuse exactly what they refuse for a run; "ask" becomes
//! a [`Judged::Confirm`] the owner answers by sending the line again `confirmed` (judged
//! again, and then run).
//!
//! **Run** ([`run`]) through [`Sandbox::prepare`] like a run's terminal: the folder
//! read-write, nothing else writable, the run's allow-listed environment
//! ([`environment::scrub`]) plus `TERM=xterm-256color`, `COLUMNS` and `LINES`, on a
//! pseudo-terminal ([`super::pty`]) as stdin, stdout and stderr. Nothing is typed into it:
//! a program that waits for input waits until the time limit or Ctrl-C (`less` and other
//! pagers see a terminal and wait too; `cat` without a file reads nothing). Output is sent in
//! chunks of at most [`FLUSH_BYTES`], at most [`FLUSH_DELAY`] late. Limits
//! ([`Limits::DEFAULT`]): 10 minutes, 4 MiB of output; past either the command's whole tree
//! is stopped (`timed_out`, `truncated`), as on an interrupt (`interrupted`). The launcher
//! is the subreaper of the tree (inside bubblewrap, its PID namespace), so a stop reaches
//! what left the process group too.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use tether_protocol::capabilities::SandboxStrength;
use tether_protocol::console::{ConsoleReply, MAX_LINE_BYTES, MAX_PROGRAM_CHARS};
use tether_protocol::jobs::Mode;
use tokio::process::Command;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::console::pty::{self, Primary};
use crate::local::state::Config;
use crate::policy::guard::Guard;
use crate::policy::{hard_floor, zones, Action, RunPolicy, RunSettings, Verdict};
use crate::run::{environment, process_group};
use crate::sandbox::{self, Sandbox};

/// Output is sent once this much waits…
pub const FLUSH_BYTES: usize = 32 * 1024;
/// …or once the oldest waiting byte is this old.
pub const FLUSH_DELAY: Duration = Duration::from_millis(30);
/// How long output may still come after the command's launcher exited.
const DRAIN: Duration = Duration::from_secs(2);

/// How long a command may run and how much it may print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub time: Duration,
    pub output: usize,
}

impl Limits {
    /// 10 minutes, 4 MiB.
    pub const DEFAULT: Limits = Limits {
        time: Duration::from_secs(10 * 60),
        output: 4 * 1024 * 1024,
    };
}

/// A line the policy let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub argv: Vec<String>,
    /// The shared folder, canonical.
    pub folder: PathBuf,
    pub label: String,
    /// For the server's ledger: the first program the line runs (wrappers and `NAME=VALUE`
    /// words left out), at most [`MAX_PROGRAM_CHARS`] characters. Never an argument.
    pub program: String,
}

/// What the policy says about a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// Never: the reason, naming the rule.
    Refused(String),
    /// Destructive or reaching out: why; it runs when sent again `confirmed`.
    Confirm(String),
    Approved(Approved),
}

/// Judges `line` in the folder `label` of `config` (see the module's header).
pub fn judge(
    config: &Config,
    guard: &Guard,
    strength: SandboxStrength,
    label: &str,
    line: &str,
    confirmed: bool,
) -> Judged {
    if line.trim().is_empty() {
        return Judged::Refused("there is nothing to run".to_owned());
    }
    if line.len() > MAX_LINE_BYTES {
        return Judged::Refused(format!("a line is at most {MAX_LINE_BYTES} bytes"));
    }
    if line.contains('\0') {
        return Judged::Refused("a line cannot hold a NUL character".to_owned());
    }
    let Some(shared) = config.folder(label) else {
        return Judged::Refused(format!("this computer shares no folder {label:?}"));
    };
    let folder = match guard.check_shared_folder(&shared.label, &shared.path) {
        Ok(folder) => folder,
        Err(refusal) => return Judged::Refused(refusal.to_string()),
    };
    let argv = vec!["sh".to_owned(), "-c".to_owned(), line.to_owned()];
    let policy = RunPolicy::new(RunSettings {
        mode: Mode::Ask,
        folder: folder.clone(),
        trusted: config.trusted.clone(),
        network: true,
        sandbox: strength,
        guard: guard.clone(),
        temporary: zones::temporary_folders(),
        delivery: None,
    });
    let judgement = policy.judge(&Action::Command {
        argv: argv.clone(),
        cwd: folder.clone(),
    });
    match judgement.verdict {
        Verdict::Refuse { reason } => {
            return Judged::Refused(format!("{reason} (rule {})", judgement.rule))
        }
        Verdict::Ask { .. } if !confirmed => {
            return Judged::Confirm(format!("{} (rule {})", judgement.reason, judgement.rule))
        }
        Verdict::Ask { .. } | Verdict::Allow => {}
    }
    let program = program_of(&argv);
    Judged::Approved(Approved {
        argv,
        folder,
        label: label.to_owned(),
        program,
    })
}

/// The first program `argv` runs, as the hard floor finds it, cut to
/// [`MAX_PROGRAM_CHARS`] characters.
fn program_of(argv: &[String]) -> String {
    let first = hard_floor::simple_commands(argv)
        .into_iter()
        .find_map(|command| command.words.into_iter().next())
        .unwrap_or_else(|| "sh".to_owned());
    first.chars().take(MAX_PROGRAM_CHARS).collect()
}

/// Why a command stopped before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Interrupted,
    TimedOut,
    Truncated,
}

enum Event {
    Read(Option<Vec<u8>>),
    Exited(Option<ExitStatus>),
    Stop(Stop),
    Flush,
    Drained,
}

/// Runs `approved` as command `id` under `sandbox` on a `cols` × `rows` terminal, sending
/// its output to `output` as [`ConsoleReply::Output`]; `kill` stops it (an interrupt). The
/// answer to end with: [`ConsoleReply::Exit`], or [`ConsoleReply::Refused`] when it could not
/// start.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    sandbox: &Sandbox,
    guard: &Guard,
    approved: &Approved,
    id: u32,
    (cols, rows): (u16, u16),
    limits: Limits,
    kill: Arc<Notify>,
    output: mpsc::Sender<ConsoleReply>,
) -> ConsoleReply {
    let refused = |reason: String| ConsoleReply::Refused { id, reason };
    let mut env = environment::scrub(std::env::vars_os());
    env.retain(|(name, _)| !matches!(name.as_str(), "TERM" | "COLUMNS" | "LINES"));
    env.push(("TERM".to_owned(), "xterm-256color".to_owned()));
    env.push(("COLUMNS".to_owned(), cols.max(1).to_string()));
    env.push(("LINES".to_owned(), rows.max(1).to_string()));
    let policy = sandbox::Policy {
        work_folder: approved.folder.clone(),
        writable: Vec::new(),
        readable: Vec::new(),
        denied: Vec::new(),
        network: true,
        env,
    };
    // The launcher passes its own stdin to the program: here, the terminal.
    let start = sandbox::Start {
        argv: approved.argv.clone(),
        cwd: None,
        stdin: sandbox::Input::Pipe,
    };
    let mut prepared = match sandbox.prepare(guard, &policy, &start) {
        Ok(prepared) => prepared,
        Err(refusal) => return refused(refusal.0),
    };
    let (mut primary, secondary) = match pty::open(cols, rows) {
        Ok(ends) => ends,
        Err(err) => return refused(format!("no terminal could be opened: {err}")),
    };
    let mut command = std::mem::replace(&mut prepared.command, Command::new("true"));
    if let Err(err) = attach(&mut command, secondary) {
        return refused(format!("no terminal could be opened: {err}"));
    }
    let child = command.spawn();
    // The command's copies of the terminal go with it: only the program holds it now.
    drop(command);
    let child = match child {
        Ok(child) => child,
        Err(err) => return refused(format!("could not start the command: {err}")),
    };
    let ended = supervise(child, &mut primary, id, limits, &kill, &output).await;
    for note in prepared.finish() {
        let data = STANDARD.encode(format!("\r\n{note}\r\n"));
        let _ = output.send(ConsoleReply::Output { id, data }).await;
    }
    ended
}

/// The terminal's command end as stdin, stdout and stderr.
fn attach(command: &mut Command, secondary: OwnedFd) -> std::io::Result<()> {
    command
        .stdin(Stdio::from(secondary.try_clone()?))
        .stdout(Stdio::from(secondary.try_clone()?))
        .stderr(Stdio::from(secondary));
    Ok(())
}

/// Forwards the output and watches the command until its tree is gone and its output read.
async fn supervise(
    mut child: tokio::process::Child,
    primary: &mut Primary,
    id: u32,
    limits: Limits,
    kill: &Notify,
    output: &mpsc::Sender<ConsoleReply>,
) -> ConsoleReply {
    let pgid = child.id().unwrap_or(0);
    let deadline = Instant::now() + limits.time;
    let far = Instant::now() + Duration::from_secs(365 * 24 * 60 * 60);
    let mut pending: Vec<u8> = Vec::new();
    let mut sent = 0usize;
    let mut flush_at: Option<Instant> = None;
    let mut drain_until: Option<Instant> = None;
    let mut status: Option<Option<ExitStatus>> = None;
    let mut stop: Option<Stop> = None;
    let mut eof = false;
    while !(eof && status.is_some()) {
        let running = status.is_none();
        let event = tokio::select! {
            read = primary.read(), if !eof => Event::Read(read),
            exited = child.wait(), if running => Event::Exited(exited.ok()),
            () = kill.notified(), if running && stop.is_none() => Event::Stop(Stop::Interrupted),
            () = tokio::time::sleep_until(deadline), if running && stop.is_none() => {
                Event::Stop(Stop::TimedOut)
            }
            () = tokio::time::sleep_until(flush_at.unwrap_or(far)), if flush_at.is_some() => {
                Event::Flush
            }
            () = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => {
                Event::Drained
            }
        };
        match event {
            Event::Read(None) => eof = true,
            Event::Read(Some(bytes)) => {
                let read = bytes.len();
                // Past the limit nothing more is kept; the terminal is still read to its end.
                if stop == Some(Stop::Truncated) {
                    continue;
                }
                let room = limits.output.saturating_sub(sent + pending.len());
                pending.extend_from_slice(&bytes[..read.min(room)]);
                if read > room {
                    stop = Some(Stop::Truncated);
                    if status.is_none() {
                        process_group::terminate(&mut child, pgid, Duration::ZERO).await;
                    }
                }
                if pending.len() >= FLUSH_BYTES {
                    sent += flush(id, &mut pending, output).await;
                    flush_at = None;
                } else if flush_at.is_none() {
                    flush_at = Some(Instant::now() + FLUSH_DELAY);
                }
            }
            Event::Exited(exited) => {
                status = Some(exited);
                drain_until = Some(Instant::now() + DRAIN);
            }
            Event::Stop(why) => {
                stop = Some(why);
                // SIGHUP: the launcher kills the whole tree at once, then exits.
                process_group::terminate(&mut child, pgid, Duration::ZERO).await;
            }
            Event::Flush => {
                sent += flush(id, &mut pending, output).await;
                flush_at = None;
            }
            Event::Drained => eof = true,
        }
    }
    flush(id, &mut pending, output).await;
    let status = status.flatten();
    ConsoleReply::Exit {
        id,
        code: if stop.is_some() {
            None
        } else {
            status.and_then(|status| status.code())
        },
        interrupted: stop == Some(Stop::Interrupted),
        timed_out: stop == Some(Stop::TimedOut),
        truncated: stop == Some(Stop::Truncated),
    }
}

/// Sends what waits (in chunks of at most [`FLUSH_BYTES`]); how many bytes that was.
async fn flush(id: u32, pending: &mut Vec<u8>, output: &mpsc::Sender<ConsoleReply>) -> usize {
    let total = pending.len();
    for chunk in pending.chunks(FLUSH_BYTES) {
        let data = STANDARD.encode(chunk);
        // A session that ended stops the command itself; nothing to do here.
        let _ = output.send(ConsoleReply::Output { id, data }).await;
    }
    pending.clear();
    total
}
