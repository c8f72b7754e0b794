//! The contract between the agent and its launcher (the agent's own binary re-executed as
//! `sandbox-exec`, [`super::launcher`]): the spec the agent writes, what the launcher applies
//! to itself, what it reports when probed, and how it says the sandbox could not be applied.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};

use crate::local::state::write_atomic;

/// Exit code of the launcher when it could not apply the sandbox (the program never ran).
pub const SANDBOX_FAILED: i32 = 121;
/// The line the launcher prints (on stderr) before exiting with [`SANDBOX_FAILED`].
pub const SANDBOX_FAILED_PREFIX: &str = "tether-sandbox: ";

/// What the confined program reads on its stdin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Input {
    /// Nothing (`/dev/null`): recipes and terminals.
    #[default]
    Null,
    /// A pipe the agent writes to ([`super::Prepared::command`]'s stdin, passed through the
    /// launcher): an ACP agent's side of the protocol.
    Pipe,
}

/// What the launcher applies to itself before it starts the program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Layer {
    /// Landlock (the rules below), capabilities dropped, seccomp.
    Landlock,
    /// Only seccomp: bubblewrap already confines the filesystem and the network.
    Seccomp,
    /// Nothing: the owner allowed unconfined runs (or Seatbelt confines it).
    Unconfined,
}

/// The launcher's instructions, written by the agent to a private file in the run's folder
/// (so the environment never shows up in a process list). An IPC boundary, hence `Serialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchSpec {
    pub layer: Layer,
    /// Whether the network is allowed (with [`Layer::Landlock`], off also means seccomp
    /// denies every socket but Unix ones and every `connect`).
    pub network: bool,
    /// Read (and execute) access, Landlock only.
    pub read: Vec<PathBuf>,
    /// Full access but device creation, Landlock only.
    pub write: Vec<PathBuf>,
    /// Read-write device files (`/dev/null`, terminals), Landlock only.
    pub devices: Vec<PathBuf>,
    /// Only report what could be applied (as JSON on stdout), run nothing.
    pub probe: bool,
    pub argv: Vec<String>,
    /// The program's working directory: the work folder or a folder inside it.
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// What the program reads: nothing, or the launcher's own stdin.
    #[serde(default)]
    pub stdin: Input,
    /// The agent's pid, when the launcher is its child (every backend but bubblewrap, whose
    /// PID namespace hides it and whose `--die-with-parent` ends the run with the agent):
    /// the launcher runs nothing if its parent is already another process, and ends the
    /// run's tree as soon as its parent changes (the agent died and it was re-parented).
    #[serde(default)]
    pub agent_pid: Option<u32>,
    /// Loopback ports the launcher serves inside the sandbox's own network, each bridged to
    /// a Unix socket outside (bubblewrap with the network off only).
    #[serde(default)]
    pub forwards: Vec<Forward>,
}

/// Inside the sandbox, TCP `127.0.0.1:port` (and `[::1]:port`) served by the launcher, every
/// connection bridged to the Unix socket `socket`: how an engine limited to its model
/// endpoints reaches the agent's relay and proxy without any network of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Forward {
    pub port: u16,
    /// A path the sandbox can see (granted readable).
    pub socket: PathBuf,
}

/// What the launcher reports in probe mode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeResult {
    /// The Landlock ABI of the kernel, when Landlock is available.
    pub landlock_abi: Option<i32>,
    /// `full`, `partial` or `none` for the applied ruleset; absent when not asked.
    pub landlock: Option<String>,
    pub seccomp: bool,
    pub no_new_privs: bool,
    /// Whether the launcher holds any capability after restricting itself.
    pub capabilities_left: bool,
    /// Problems, in sentences.
    pub notes: Vec<String>,
}

/// Runs the launcher in probe mode (under `wrapper` when given) and reads its report.
pub fn run_probe(
    launcher: &Path,
    wrapper: Option<(&Path, Vec<String>)>,
    spec: &LaunchSpec,
    dir: &Path,
) -> Result<ProbeResult, String> {
    let spec_path = dir.join(".tether-probe.json");
    let bytes = serde_json::to_vec(spec).map_err(|err| err.to_string())?;
    write_atomic(&spec_path, &bytes).map_err(|err| err.to_string())?;
    let mut command = match &wrapper {
        Some((program, args)) => {
            let mut command = std::process::Command::new(program);
            command.args(args);
            command
        }
        None => std::process::Command::new(launcher),
    };
    let output = command
        .args(["sandbox-exec", "--spec-file"])
        .arg(&spec_path)
        .current_dir(dir)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|err| {
            format!(
                "cannot start {}: {err}",
                wrapper.as_ref().map_or(launcher, |w| w.0).display()
            )
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let said = stderr.trim();
        return Err(format!(
            "the probe failed ({}){}",
            output.status,
            if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            }
        ));
    }
    serde_json::from_str(stdout.trim()).map_err(|err| format!("the probe said {stdout:?}: {err}"))
}
