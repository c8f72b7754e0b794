//! The owner's console on this computer: a terminal in a shared folder, the Code tab (list,
//! read, save a file) and Watch (a running job's output, read-only), reached from the web
//! after a passkey unlock, over a numbered channel sealed end to end (the server relays
//! ciphertext it cannot read).
//!
//! - [`session`]: one console session — its socket ([`crate::remote::console_socket`]), the
//!   channel accepted with this computer's seal key, message numbers taken strictly one
//!   after the other, every request answered, everything of the session stopped when it
//!   ends;
//! - [`terminal`]: one command line — judged by the same policy as a run's terminal command
//!   (the hard floor, the guard, git's rules, the mode `ask`), started through the same
//!   sandbox on a pseudo-terminal ([`pty`]), bounded in time and output, stopped with its
//!   whole process tree;
//! - [`code`]: the Code tab, under the live file view's path rules and redaction;
//! - [`watch`]: forwarding a running job's output tap ([`crate::run::watch`]).
//!
//! **Rules.** The console is a switch of the owner's local configuration (`tether-agent
//! console on|off`, on by default), read again on every request: off refuses a new session
//! and ends an open one at its next request. At most [`MAX_SESSIONS`] sessions at once, at
//! most one running command per session. The server can name a folder *label*, a line and
//! a path relative to the folder; what runs and where is this computer's decision, and
//! every program goes through `sandbox::Sandbox::prepare` after the policy's judgement.

pub mod code;
pub mod pty;
pub mod session;
pub mod terminal;
pub mod watch;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::local::state::{Config, DataDir};
use crate::policy::guard::Guard;
use crate::run::watch::Taps;
use crate::sandbox::Sandbox;

/// Most console sessions one agent serves at once.
pub const MAX_SESSIONS: usize = 2;

/// What every console session of one agent works with.
#[derive(Clone)]
pub struct ConsoleContext {
    pub data_dir: DataDir,
    /// The guard built for the data dir (the runs' own).
    pub guard: Guard,
    /// The running jobs' output taps.
    pub taps: Arc<Taps>,
    /// The configuration as it is on disk now; called on every request.
    pub config: Arc<dyn Fn() -> Config + Send + Sync>,
    /// The sandbox every command starts in.
    pub sandbox: Arc<Sandbox>,
    /// The sessions' turns ([`MAX_SESSIONS`]).
    pub sessions: Arc<Semaphore>,
}

impl ConsoleContext {
    /// The turns of [`MAX_SESSIONS`] sessions, made once per agent.
    pub fn turns() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(MAX_SESSIONS))
    }
}
