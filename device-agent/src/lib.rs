//! `tether-agent`: the program on a paired computer.
//!
//! It pairs the computer with a Tether server, then runs as a daemon that heartbeats, claims
//! jobs under a fenced lease, runs them through locally configured recipes or ACP coding
//! agents in shared folders and reports their output and outcome.
//!
//! **Architecture Invariant:** the server names only a folder *label* and an engine *name*;
//! the path and the argv always come from this computer's own configuration.
//!
//! **Architecture Invariant:** only [`client`] knows HTTP (it also builds the event stream's
//! WebSocket request, which [`events`] drives); only [`state`] and [`journal`] write to the
//! data directory (plus the daemon's lock file).

pub mod acp;
pub mod backoff;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod decisions;
pub mod engines;
pub mod environment;
pub mod events;
pub mod evidence;
pub mod explain;
pub mod file_answers;
pub mod folders;
pub mod gate;
pub mod guard;
pub mod hard_floor;
pub mod journal;
pub mod lease;
pub mod pairing;
pub mod policy;
pub mod process_group;
pub mod progress;
pub mod recipes;
pub mod reconcile;
pub mod runner;
pub mod sandbox;
pub mod seal_key;
pub mod secret_http;
pub mod state;
pub mod status;
pub mod trust;
pub mod vault;

/// The version this agent reports to the server.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Process exit codes the command line uses, so scripts can tell failures apart.
pub mod exit_code {
    /// Something went wrong (bad input, a server error, a failed pairing).
    pub const FAILURE: i32 = 1;
    /// `run` on a computer that is not paired.
    pub const NOT_PAIRED: i32 = 2;
    /// The server revoked this computer; its token is forgotten.
    pub const REVOKED: i32 = 3;
}
