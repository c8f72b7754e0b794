//! What every backend works from (a [`Policy`]) and what a backend's probe finds
//! ([`Probed`]: the backend that works and its truthful report).

use std::path::PathBuf;

use tether_protocol::capabilities::SandboxReport;

/// What a confined run may touch. Paths are absolute; the work folder is also the working
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Read-write, and the working directory.
    pub work_folder: PathBuf,
    /// Extra read-write paths (the run's private temporary folder, grants).
    pub writable: Vec<PathBuf>,
    /// Extra read-only paths (toolchains outside the usual places, a test's probe binary).
    pub readable: Vec<PathBuf>,
    /// Paths hidden whatever else says (added to the guard's protected paths).
    pub denied: Vec<PathBuf>,
    /// Whether the run may reach the network.
    pub network: bool,
    /// The complete environment of the program (nothing else is inherited).
    pub env: Vec<(String, String)>,
}

/// Which backend a sandbox uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Bubblewrap at this path; `proc` is false when `/proc` could not be mounted.
    Bwrap { path: PathBuf, proc: bool },
    /// Landlock plus seccomp, applied by the launcher to itself.
    Landlock,
    /// macOS `sandbox-exec`.
    Seatbelt,
    /// Nothing works (or nothing was chosen); `allow_unsandboxed` is the owner's switch.
    None { allow_unsandboxed: bool },
}

/// What a backend's probe found: the backend, ready to use, and what it guarantees.
#[derive(Debug, Clone)]
pub struct Probed {
    pub backend: Backend,
    pub report: SandboxReport,
}
