//! `tether-agent`: the program on a paired computer.
//!
//! It pairs the computer with a Tether server, then runs as a daemon that heartbeats, claims
//! jobs under a fenced lease, runs them through locally configured recipes or ACP coding
//! agents in shared folders and reports their output and outcome.
//!
//! The crate is made of wings, each depending only on the ones listed before it:
//!
//! - [`local`]: what this computer keeps on its own disk (the data dir, shared folders,
//!   recipes and engines, the vault, the seal key, the run journal, local decisions);
//! - [`policy`]: what a run may do (the hard floor, the guard, the run's policy and the gate
//!   in front of it, trusted folders, `explain`);
//! - [`changes`]: what a run changed in its folder (its start recorded, the change list, one
//!   file's diff) and the hardened git runner;
//! - [`sandbox`]: how every program a run starts is confined;
//! - [`remote`]: talking to the Tether server (the HTTP client, the event stream, pairing,
//!   the handlers of the frames that are answered outside a run);
//! - [`run`]: one run's parts (its stop signal, what it is granted, its lease, output,
//!   evidence, questions to the owner) and the dispatch to an engine;
//! - [`console`]: the owner's console on this computer (a terminal judged and confined like
//!   a run's commands, the Code tab, Watch), over a sealed channel;
//! - [`engines`]: the recipe engine and the ACP engine, each a [`run::Engine`];
//! - [`daemon`]: `tether-agent run`, the loop that ties the server to the runs;
//! - [`cli`]: the command line.
//!
//! **Architecture Invariant:** the server names only a folder *label* and an engine *name*;
//! the path and the argv always come from this computer's own configuration.
//!
//! **Architecture Invariant:** only [`remote::client`] talks to the Tether server (it also
//! builds the event stream's and the console's WebSocket requests, which [`remote::events`]
//! and [`remote::console_socket`] drive). The other
//! HTTP clients are [`run::secret_http`], which sends only the owner's own requests that use
//! saved secrets by reference, to the sites those secrets admit, and
//! [`run::delivery::github`], which calls only the GitHub API registered for `origin`'s host.
//!
//! **Architecture Invariant:** only [`local`] and [`changes`] (its `snapshots/`) write to the
//! data directory, every file through [`local::state`]'s atomic writes (plus the lock files
//! of the daemon and of the vault, and the git indexes `changes` has git write there).

pub mod changes;
pub mod cli;
pub mod console;
pub mod daemon;
pub mod engines;
pub mod local;
pub mod policy;
pub mod remote;
pub mod run;
pub mod sandbox;
#[cfg(test)]
mod test_job;

/// The version this agent reports to the server.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Process exit codes the command line uses, so scripts can tell failures apart.
pub mod exit_code {
    /// Something went wrong (bad input, a server error, a failed pairing).
    pub const FAILURE: i32 = 1;
    /// `run` on a computer that is not paired.
    pub const NOT_PAIRED: i32 = 2;
    /// Setup a run would always refuse: `folders share` of a folder the guard refuses,
    /// `recipe add` of a command the hard floor refuses.
    pub const REFUSED: i32 = 2;
    /// The server revoked this computer; its token is forgotten.
    pub const REVOKED: i32 = 3;
    /// `run` found the agent uninstalled (`TETHER_INSTALL_PATH` missing for the whole grace):
    /// the computer removed itself from its server when it could and forgot its pairing.
    pub const UNINSTALLED: i32 = 4;
}
