//! Confinement: one layer every program a job starts goes through.
//!
//! A [`Policy`] says what a run may touch (its work folder read-write, extra writable and
//! readable paths, denied paths, network on or off, an explicit environment). A [`Sandbox`],
//! probed once at start, turns a policy and an argv into the command that starts it confined:
//!
//! | backend | strength | what it is |
//! |---|---|---|
//! | `bwrap` | strong | bubblewrap namespaces around the agent's launcher, which adds seccomp |
//! | `landlock` | reduced | the launcher restricts itself (Landlock, explicit ABI, + seccomp, capabilities dropped) |
//! | `seatbelt` | strong | macOS `sandbox-exec` with a generated profile |
//! | `none` | advisory | a confined spawn is refused, unless the owner ran `run --allow-unsandboxed` |
//!
//! Every backend starts the program through the agent's own binary re-executed as a launcher
//! (the hidden `sandbox-exec` subcommand, [`launcher`]): it restricts itself, starts the
//! program, becomes the subreaper of everything the program starts, and kills that whole tree
//! on a stop, on a timeout, when the program ends, or when the agent dies.
//!
//! **Architecture Invariant:** never a silent fallback. Whatever runs reports itself in
//! [`SandboxReport`], the same object `sandbox status` prints and the heartbeat sends; a
//! weaker mode than probed lowers the strength and says why.

pub mod backend;
pub mod bwrap;
pub mod host;
#[cfg(target_os = "linux")]
pub mod landlock;
pub mod launch;
pub mod launcher;
pub mod program_sight;
pub mod seatbelt;
#[cfg(target_os = "linux")]
pub mod seccomp;

pub use backend::{Backend, Policy, Probed};
pub use launch::{
    Forward, Input, LaunchSpec, Layer, ProbeResult, SANDBOX_FAILED, SANDBOX_FAILED_PREFIX,
};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};

use tether_protocol::capabilities::{Guarantees, ProcessTreeKill, SandboxReport, SandboxStrength};

use crate::policy::guard::{self, Guard};

/// What to start under a [`Policy`]: the program, where, and what it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub argv: Vec<String>,
    /// The working directory: `None` for the work folder, else a folder inside it.
    pub cwd: Option<PathBuf>,
    pub stdin: Input,
}

impl Start {
    /// `argv` in the work folder, reading nothing.
    pub fn new(argv: &[String]) -> Start {
        Start {
            argv: argv.to_vec(),
            cwd: None,
            stdin: Input::Null,
        }
    }
}

/// How the owner asked to pick a backend (`TETHER_SANDBOX`, `TETHER_BWRAP`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `auto`, `bwrap`, `landlock`, `seatbelt` or `none`.
    pub choice: String,
    /// The bubblewrap binary.
    pub bwrap: PathBuf,
    /// The agent binary re-executed as the launcher.
    pub launcher: PathBuf,
    /// `run --allow-unsandboxed`.
    pub allow_unsandboxed: bool,
}

impl Settings {
    /// From the environment: `TETHER_SANDBOX` (default `auto`), `TETHER_BWRAP` (default
    /// `/usr/bin/bwrap`), this executable as the launcher.
    pub fn from_env(allow_unsandboxed: bool) -> Settings {
        Settings {
            choice: std::env::var("TETHER_SANDBOX")
                .ok()
                .filter(|choice| !choice.trim().is_empty())
                .unwrap_or_else(|| "auto".to_owned()),
            bwrap: std::env::var_os("TETHER_BWRAP")
                .filter(|path| !path.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(bwrap::DEFAULT_PATH)),
            launcher: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("tether-agent")),
            allow_unsandboxed,
        }
    }
}

/// The probed sandbox: its backend, its report, and what it needs to build commands.
#[derive(Debug, Clone)]
pub struct Sandbox {
    backend: Backend,
    report: SandboxReport,
    launcher: PathBuf,
}

/// Why a confined spawn was refused; the job ends `blocked` with this sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// A command ready to spawn, with what must be cleaned up after the run.
#[derive(Debug)]
pub struct Prepared {
    /// The command: stdout and stderr are piped, stdin too for [`Input::Pipe`] (the
    /// program's input; else nothing), the launcher leads a new process group.
    pub command: tokio::process::Command,
    /// The run's private temporary folder, removed when dropped.
    pub run_dir: tempfile::TempDir,
    /// Git hooks and configs to restore after the run where the backend cannot make them
    /// read-only.
    pub git_snapshot: Option<guard::GitSnapshot>,
}

impl Prepared {
    /// After the run: restores git hooks and configs the run changed; the sentences to add
    /// to the run's output.
    pub fn finish(self) -> Vec<String> {
        let Some(snapshot) = &self.git_snapshot else {
            return Vec::new();
        };
        snapshot
            .restore()
            .into_iter()
            .map(|path| {
                format!(
                    "tether: restored {} (git hooks and config cannot be changed by a job)",
                    path.display()
                )
            })
            .collect()
    }
}

static INSTALLED: OnceLock<Arc<Sandbox>> = OnceLock::new();

/// Makes `sandbox` the one this process uses (called once at start by `run`).
pub fn install(sandbox: Sandbox) -> Arc<Sandbox> {
    INSTALLED.get_or_init(|| Arc::new(sandbox)).clone()
}

/// The sandbox of this process: the installed one, else probed now from the environment.
pub fn current() -> Arc<Sandbox> {
    INSTALLED
        .get_or_init(|| Arc::new(Sandbox::probe(&Settings::from_env(false))))
        .clone()
}

/// The report of this process's sandbox, as `sandbox status` prints it and the heartbeat
/// sends it.
pub fn report() -> SandboxReport {
    current().report().clone()
}

impl Sandbox {
    /// Probes the backend `settings` asks for (or the best that works, for `auto`), by
    /// actually starting the launcher confined.
    pub fn probe(settings: &Settings) -> Sandbox {
        let choice = settings.choice.trim().to_ascii_lowercase();
        let mut reasons = Vec::new();
        let candidates: Vec<&str> = match choice.as_str() {
            "auto" if cfg!(target_os = "macos") => vec!["seatbelt"],
            "auto" => vec!["bwrap", "landlock"],
            "bwrap" | "landlock" | "seatbelt" => vec![choice.as_str()],
            "none" => {
                reasons.push(
                    "TETHER_SANDBOX=none: confinement was turned off by the owner".to_owned(),
                );
                Vec::new()
            }
            other => {
                reasons.push(format!(
                    "TETHER_SANDBOX={other:?} is not one of auto, bwrap, landlock, seatbelt, none"
                ));
                Vec::new()
            }
        };
        for candidate in candidates {
            let probed = match candidate {
                "bwrap" => bwrap::probe(&settings.bwrap, &settings.launcher),
                "landlock" => probe_landlock(&settings.launcher),
                _ => seatbelt::probe(),
            };
            match probed {
                Ok(Probed {
                    backend,
                    mut report,
                }) => {
                    // Earlier candidates that failed explain why this one was picked.
                    report.reasons.splice(0..0, reasons);
                    return Sandbox {
                        backend,
                        report,
                        launcher: settings.launcher.clone(),
                    };
                }
                Err(reason) => reasons.push(reason),
            }
        }
        Sandbox::none(settings, reasons)
    }

    fn none(settings: &Settings, mut reasons: Vec<String>) -> Sandbox {
        if settings.allow_unsandboxed {
            reasons.push(
                "the owner ran `tether-agent run --allow-unsandboxed`: jobs run UNCONFINED, with this user's permissions"
                    .to_owned(),
            );
        } else {
            reasons.push(
                "confined runs are refused (jobs end blocked); `tether-agent run --allow-unsandboxed` runs them unconfined"
                    .to_owned(),
            );
        }
        // What still holds unconfined: the checks made before a run starts, and on Linux the
        // launcher as the subreaper of the tree.
        let guarantees = Guarantees {
            confined: Some(false),
            unconfined_allowed: Some(settings.allow_unsandboxed),
            hard_floor: Some(true),
            network_model_enforced: Some(false),
            protected_paths_refused: Some(true),
            environment_scrubbed: Some(true),
            process_tree_kill: Some(ProcessTreeKill::Holds(cfg!(target_os = "linux"))),
            ..Guarantees::default()
        };
        Sandbox {
            backend: Backend::None {
                allow_unsandboxed: settings.allow_unsandboxed,
            },
            report: SandboxReport {
                backend: "none".to_owned(),
                strength: SandboxStrength::Advisory,
                guarantees,
                reasons,
            },
            launcher: settings.launcher.clone(),
        }
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    /// Builds the confined command that starts `start` under `policy`, after the guard
    /// checked every path the policy grants.
    ///
    /// # Errors
    /// [`Refused`] when no backend works (and unconfined runs are not allowed), when the
    /// guard refuses a granted path, or when the working directory is not the work folder
    /// or inside it.
    pub fn prepare(
        &self,
        guard: &Guard,
        policy: &Policy,
        start: &Start,
    ) -> Result<Prepared, Refused> {
        self.prepare_forwarded(guard, policy, start, &[])
    }

    /// [`Sandbox::prepare`], with `forwards`: loopback ports inside the sandbox bridged to
    /// Unix sockets outside (an engine limited to its model endpoints). The sockets are
    /// granted readable; only bubblewrap with the network off can keep everything else out.
    ///
    /// # Errors
    /// As [`Sandbox::prepare`], and [`Refused`] when `forwards` is not empty and this
    /// backend cannot enforce them, or the policy allows the whole network anyway.
    pub fn prepare_forwarded(
        &self,
        guard: &Guard,
        policy: &Policy,
        start: &Start,
        forwards: &[Forward],
    ) -> Result<Prepared, Refused> {
        if start.argv.is_empty() {
            return Err(Refused("nothing to run".to_owned()));
        }
        let cwd = match &start.cwd {
            Some(cwd) => working_folder(cwd, &policy.work_folder)?,
            None => policy.work_folder.clone(),
        };
        if let Backend::None {
            allow_unsandboxed: false,
        } = self.backend
        {
            let why = self.report.reasons.first().cloned().unwrap_or_default();
            return Err(Refused(format!(
                "no working sandbox on this computer, so confined runs are refused ({why}); the owner can run `tether-agent run --allow-unsandboxed` to run jobs unconfined"
            )));
        }
        let policy = &with_forwards(&self.backend, policy, forwards)?;
        for path in std::iter::once(&policy.work_folder)
            .chain(&policy.writable)
            .chain(&policy.readable)
        {
            guard
                .check_access(path)
                .map_err(|err| Refused(err.to_string()))?;
        }
        let run_dir = tempfile::Builder::new()
            .prefix("tether-run-")
            .tempdir()
            .map_err(|err| Refused(format!("cannot create the run's temporary folder: {err}")))?;
        let run_dir_path = run_dir
            .path()
            .canonicalize()
            .unwrap_or_else(|_| run_dir.path().to_path_buf());
        let mut policy = policy.clone();
        policy.writable.push(run_dir_path.clone());
        set_env(
            &mut policy.env,
            "TMPDIR",
            &run_dir_path.display().to_string(),
        );

        let mut denied: Vec<PathBuf> = guard.protected().to_vec();
        denied.extend(policy.denied.iter().cloned());
        // The launcher is the agent's own child, except inside bubblewrap's PID namespace.
        let agent_pid = match &self.backend {
            Backend::Bwrap { .. } => None,
            Backend::Landlock | Backend::Seatbelt | Backend::None { .. } => {
                Some(std::process::id())
            }
        };
        let (layer, mut command, git_snapshot) = match &self.backend {
            Backend::Bwrap { path, proc } => {
                let protected_git = bwrap::prepare_git(&policy.work_folder, &policy.writable);
                let args = bwrap::args(&bwrap::Mounts {
                    policy: &policy,
                    denied: &denied,
                    home: guard.home(),
                    git: &protected_git,
                    launcher: &self.launcher,
                    proc: *proc,
                });
                let mut command = tokio::process::Command::new(path);
                command.args(args);
                (Layer::Seccomp, command, None)
            }
            Backend::Landlock => {
                let command = tokio::process::Command::new(&self.launcher);
                let snapshot = guard::GitSnapshot::take(&policy.work_folder, &policy.writable);
                (Layer::Landlock, command, Some(snapshot))
            }
            Backend::Seatbelt => {
                let profile = seatbelt::profile(&policy, &denied, guard.home());
                let mut command = tokio::process::Command::new(seatbelt::SANDBOX_EXEC);
                command.args(["-p", &profile, "--"]).arg(&self.launcher);
                (Layer::Unconfined, command, None)
            }
            Backend::None { .. } => {
                let command = tokio::process::Command::new(&self.launcher);
                let snapshot = guard::GitSnapshot::take(&policy.work_folder, &policy.writable);
                (Layer::Unconfined, command, Some(snapshot))
            }
        };
        let rules = landlock_rules(&policy, &denied, guard.home());
        let spec = LaunchSpec {
            layer,
            network: policy.network,
            read: rules.read,
            write: rules.write,
            devices: rules.devices,
            probe: false,
            argv: start.argv.clone(),
            cwd,
            env: policy.env.clone(),
            stdin: start.stdin,
            agent_pid,
            forwards: forwards.to_vec(),
        };
        let spec_path = run_dir_path.join(".tether-launch.json");
        let bytes = serde_json::to_vec(&spec).map_err(|err| Refused(err.to_string()))?;
        crate::local::state::write_atomic(&spec_path, &bytes)
            .map_err(|err| Refused(format!("cannot write the launch spec: {err}")))?;
        command
            .args(["sandbox-exec", "--spec-file"])
            .arg(&spec_path)
            .current_dir(&policy.work_folder)
            .env_clear()
            .stdin(match start.stdin {
                Input::Null => Stdio::null(),
                Input::Pipe => Stdio::piped(),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        Ok(Prepared {
            command,
            run_dir,
            git_snapshot,
        })
    }
}

/// `cwd` as a folder under `work_folder` (links and `..` resolved first), the way the work
/// folder appears inside the sandbox.
fn working_folder(cwd: &Path, work_folder: &Path) -> Result<PathBuf, Refused> {
    let outside = || {
        Refused(format!(
            "{} is not inside the work folder {}",
            cwd.display(),
            work_folder.display()
        ))
    };
    let real = cwd.canonicalize().map_err(|_| outside())?;
    let real_work = work_folder
        .canonicalize()
        .unwrap_or_else(|_| work_folder.to_path_buf());
    let inside = real.strip_prefix(&real_work).map_err(|_| outside())?;
    if !real.is_dir() {
        return Err(Refused(format!("{} is not a folder", cwd.display())));
    }
    if inside.as_os_str().is_empty() {
        return Ok(work_folder.to_path_buf());
    }
    Ok(work_folder.join(inside))
}

/// `policy` with the forwards' sockets readable, when `backend` can enforce `forwards`:
/// only bubblewrap has a network namespace of its own to serve them in, so elsewhere an
/// engine limited to its model endpoints would reach every other one as well.
fn with_forwards(
    backend: &Backend,
    policy: &Policy,
    forwards: &[Forward],
) -> Result<Policy, Refused> {
    let mut policy = policy.clone();
    if forwards.is_empty() {
        return Ok(policy);
    }
    let name = match backend {
        Backend::Bwrap { .. } => None,
        Backend::Landlock => Some("Landlock"),
        Backend::Seatbelt => Some("Seatbelt"),
        Backend::None { .. } => Some("none"),
    };
    if let Some(name) = name {
        return Err(Refused(format!(
            "this computer's sandbox ({name}) cannot limit an engine to its model endpoints; set the engine's network to `on` (`tether-agent engine add NAME … --network on`) or install bubblewrap"
        )));
    }
    if policy.network {
        return Err(Refused(
            "an engine limited to its model endpoints runs with the network off; this one has it on".to_owned(),
        ));
    }
    let mut ports = std::collections::BTreeSet::new();
    for forward in forwards {
        if forward.port == 0 || !ports.insert(forward.port) {
            return Err(Refused(format!(
                "the model endpoints ask for port {} twice (or port 0)",
                forward.port
            )));
        }
        if !policy.readable.contains(&forward.socket) {
            policy.readable.push(forward.socket.clone());
        }
    }
    Ok(policy)
}

fn set_env(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    env.retain(|(existing, _)| existing != name);
    env.push((name.to_owned(), value.to_owned()));
}

/// Landlock rules of a policy: host paths, split around denied paths.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub devices: Vec<PathBuf>,
}

/// Landlock only allows; to keep a denied path out of an allowed folder, the folder is
/// replaced by its entries (recursively, only along the way to the denied path). Entries made
/// later in a split folder are not covered, so they are denied too.
pub fn landlock_rules(policy: &Policy, denied: &[PathBuf], home: Option<&Path>) -> Rules {
    let path_var = policy
        .env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str());
    let mut read_roots: Vec<PathBuf> = host::SYSTEM_READ.iter().map(PathBuf::from).collect();
    read_roots.push(PathBuf::from("/proc"));
    read_roots.extend(host::toolchains(home, path_var));
    read_roots.extend(policy.readable.iter().cloned());
    let mut write_roots = vec![policy.work_folder.clone()];
    write_roots.extend(policy.writable.iter().cloned());
    let split = |roots: Vec<PathBuf>| -> Vec<PathBuf> {
        let mut out = Vec::new();
        for root in roots {
            if root.exists() {
                split_around(&root, denied, &mut out);
            }
        }
        out.sort();
        out.dedup();
        out
    };
    Rules {
        read: split(read_roots),
        write: split(write_roots),
        devices: host::DEVICES_RW
            .iter()
            .chain(host::DEVICES_READ)
            .map(PathBuf::from)
            .filter(|path| path.exists())
            .collect(),
    }
}

fn split_around(root: &Path, denied: &[PathBuf], out: &mut Vec<PathBuf>) {
    if denied.iter().any(|hole| root.starts_with(hole)) {
        return;
    }
    if !denied.iter().any(|hole| hole.starts_with(root)) {
        out.push(root.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        split_around(&entry.path(), denied, out);
    }
}

/// Probes Landlock by starting the launcher with the full restriction in probe mode.
fn probe_landlock(launcher: &Path) -> Result<Probed, String> {
    if !cfg!(target_os = "linux") {
        return Err("landlock: only on Linux".to_owned());
    }
    let work = tempfile::tempdir().map_err(|err| format!("landlock: cannot probe: {err}"))?;
    let spec = LaunchSpec {
        layer: Layer::Landlock,
        network: false,
        read: host::SYSTEM_READ
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect(),
        write: vec![work.path().to_path_buf()],
        devices: vec![PathBuf::from("/dev/null")],
        probe: true,
        argv: vec!["true".to_owned()],
        cwd: work.path().to_path_buf(),
        env: Vec::new(),
        stdin: Input::Null,
        agent_pid: None,
        forwards: Vec::new(),
    };
    let result = launch::run_probe(launcher, None, &spec, work.path())
        .map_err(|err| format!("landlock: {err}"))?;
    let mut reasons = Vec::new();
    let mut strength = SandboxStrength::Reduced;
    match result.landlock.as_deref() {
        Some("full") => {}
        Some("partial") => {
            strength = SandboxStrength::Advisory;
            reasons
                .push("landlock: the kernel enforces only part of the requested rules".to_owned());
        }
        _ => {
            return Err(format!(
                "landlock: not enforced on this kernel ({})",
                result.notes.join("; ")
            ))
        }
    }
    let abi = result.landlock_abi.unwrap_or(0);
    if abi < 4 {
        reasons.push(format!(
            "landlock ABI {abi}: TCP is not confined by Landlock, only by seccomp"
        ));
    }
    if abi < 6 {
        strength = SandboxStrength::Advisory;
        reasons.push(format!(
            "landlock ABI {abi}: signals and abstract sockets are not scoped"
        ));
    }
    if !result.seccomp {
        strength = SandboxStrength::Advisory;
        reasons
            .push("seccomp could not be applied: sockets, ptrace and io_uring are open".to_owned());
    }
    if result.capabilities_left {
        strength = SandboxStrength::Advisory;
        reasons.push("the launcher kept capabilities after dropping them".to_owned());
    }
    reasons.extend(result.notes);
    reasons.extend(
        [
            "Landlock is reduced: no PID namespace (other processes are listed, their command lines readable)",
            "home is unreadable except toolchains, but the system folders are shared with the host (read-only)",
            "with network on, nothing is confined on the network, pathname Unix sockets included",
            "model-only networking (an engine limited to its model endpoints) is not enforced: such runs are refused",
            "git hooks and config in the work folder cannot be made read-only; the agent restores them after the run",
        ]
        .map(str::to_owned),
    );
    let guarantees = landlock_guarantees(abi, result.seccomp, !result.capabilities_left);
    Ok(Probed {
        backend: Backend::Landlock,
        report: SandboxReport {
            backend: "landlock".to_owned(),
            strength,
            guarantees,
            reasons,
        },
    })
}

/// What Landlock holds to under the kernel's `abi`, with or without seccomp and the
/// capabilities dropped.
fn landlock_guarantees(abi: i32, seccomp: bool, capabilities_dropped: bool) -> Guarantees {
    Guarantees {
        confined: Some(true),
        landlock_abi: Some(abi),
        filesystem_write_confined: Some(true),
        home_hidden: Some(true),
        protected_paths_hidden: Some(true),
        network_off_enforced: Some(true),
        network_model_enforced: Some(false),
        unix_sockets_blocked_when_offline: Some(true),
        pid_namespace: Some(false),
        signals_scoped: Some(abi >= 6),
        seccomp: Some(seccomp),
        capabilities_dropped: Some(capabilities_dropped),
        git_metadata_read_only: Some(false),
        process_tree_kill: Some(ProcessTreeKill::By("subreaper".to_owned())),
        hard_floor: Some(true),
        environment_scrubbed: Some(true),
        ..Guarantees::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn settings(choice: &str, bwrap: &str) -> Settings {
        Settings {
            choice: choice.to_owned(),
            bwrap: PathBuf::from(bwrap),
            launcher: PathBuf::from("/nonexistent/tether-agent"),
            allow_unsandboxed: false,
        }
    }

    fn sent(guarantees: &Guarantees) -> serde_json::Value {
        serde_json::to_value(guarantees).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn the_guarantees_are_the_ones_the_report_has_always_had() {
        let mut unconfined = settings("none", "/nonexistent/bwrap");
        unconfined.allow_unsandboxed = true;
        assert_eq!(
            sent(&Sandbox::probe(&unconfined).report().guarantees),
            json!({
                "confined": false,
                "unconfinedAllowed": true,
                "hardFloor": true,
                "networkModelEnforced": false,
                "protectedPathsRefused": true,
                "environmentScrubbed": true,
                "processTreeKill": cfg!(target_os = "linux"),
            })
        );
        assert_eq!(
            sent(&landlock_guarantees(5, true, false)),
            json!({
                "confined": true,
                "landlockAbi": 5,
                "filesystemWriteConfined": true,
                "homeHidden": true,
                "protectedPathsHidden": true,
                "networkOffEnforced": true,
                "networkModelEnforced": false,
                "unixSocketsBlockedWhenOffline": true,
                "pidNamespace": false,
                "signalsScoped": false,
                "seccomp": true,
                "capabilitiesDropped": false,
                "gitMetadataReadOnly": false,
                "processTreeKill": "subreaper",
                "hardFloor": true,
                "environmentScrubbed": true,
            })
        );
    }

    #[test]
    fn a_missing_backend_is_reported_and_refused() {
        let sandbox = Sandbox::probe(&settings("bwrap", "/nonexistent/bwrap"));
        let report = sandbox.report();
        assert_eq!(report.backend, "none");
        assert_eq!(report.strength, SandboxStrength::Advisory);
        assert!(
            report.reasons[0].contains("/nonexistent/bwrap"),
            "{report:?}"
        );
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let guard = Guard::new(None, &tmp.path().join("data"));
        let policy = Policy {
            work_folder: tmp.path().to_path_buf(),
            writable: Vec::new(),
            readable: Vec::new(),
            denied: Vec::new(),
            network: false,
            env: Vec::new(),
        };
        let refused = sandbox.prepare(&guard, &policy, &Start::new(&["true".to_owned()]));
        assert!(
            matches!(&refused, Err(Refused(why)) if why.contains("no working sandbox") && why.contains("/nonexistent/bwrap")),
            "{refused:?}"
        );
    }

    /// The launcher's spec as `prepare` wrote it (unconfined runs allowed, so no backend is
    /// needed to build one).
    fn spec_of(policy: &Policy, start: &Start) -> Result<LaunchSpec, Refused> {
        let mut settings = settings("none", "/nonexistent/bwrap");
        settings.allow_unsandboxed = true;
        let sandbox = Sandbox::probe(&settings);
        let guard = Guard::new(None, Path::new("/nonexistent/tether-data"));
        let prepared = sandbox.prepare(&guard, policy, start)?;
        let bytes = std::fs::read(prepared.run_dir.path().join(".tether-launch.json"))
            .unwrap_or_else(|err| panic!("{err}"));
        Ok(serde_json::from_slice(&bytes).unwrap_or_else(|err| panic!("{err}")))
    }

    #[test]
    fn the_spec_names_the_input_the_working_folder_and_the_agent() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().canonicalize().unwrap_or_default();
        let work = root.join("work");
        std::fs::create_dir_all(work.join("sub")).unwrap_or_default();
        std::fs::create_dir_all(root.join("other")).unwrap_or_default();
        let policy = Policy {
            work_folder: work.clone(),
            writable: Vec::new(),
            readable: Vec::new(),
            denied: Vec::new(),
            network: false,
            env: Vec::new(),
        };
        let argv = ["agent-acp".to_owned()];
        let plain = spec_of(&policy, &Start::new(&argv)).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            (plain.cwd, plain.stdin, plain.agent_pid),
            (work.clone(), Input::Null, Some(std::process::id()))
        );
        let piped = Start {
            argv: argv.to_vec(),
            cwd: Some(work.join("sub/../sub")),
            stdin: Input::Pipe,
        };
        let spec = spec_of(&policy, &piped).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!((spec.cwd, spec.stdin), (work.join("sub"), Input::Pipe));
        for outside in [
            root.join("other"),
            work.join("sub/../.."),
            work.join("missing"),
        ] {
            let start = Start {
                cwd: Some(outside.clone()),
                ..Start::new(&argv)
            };
            let refused = spec_of(&policy, &start);
            assert!(
                matches!(&refused, Err(Refused(why)) if why.contains("not inside the work folder")),
                "{outside:?}: {refused:?}"
            );
        }
    }

    #[test]
    fn forwards_are_refused_without_bubblewrap() {
        let mut settings = settings("none", "/nonexistent/bwrap");
        settings.allow_unsandboxed = true;
        let sandbox = Sandbox::probe(&settings);
        assert_eq!(
            sandbox.report().guarantees.network_model_enforced,
            Some(false)
        );
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let guard = Guard::new(None, Path::new("/nonexistent/tether-data"));
        let policy = Policy {
            work_folder: tmp.path().to_path_buf(),
            writable: Vec::new(),
            readable: Vec::new(),
            denied: Vec::new(),
            network: false,
            env: Vec::new(),
        };
        let forward = Forward {
            port: 3128,
            socket: tmp.path().join("proxy.sock"),
        };
        let start = Start::new(&["true".to_owned()]);
        let refused = sandbox.prepare_forwarded(&guard, &policy, &start, &[forward]);
        assert!(
            matches!(&refused, Err(Refused(why)) if why.contains("(none) cannot limit an engine to its model endpoints")),
            "{refused:?}"
        );
        assert!(sandbox
            .prepare_forwarded(&guard, &policy, &start, &[])
            .is_ok());
    }

    #[test]
    fn an_unknown_choice_is_none_with_the_reason() {
        let report = Sandbox::probe(&settings("docker", "/usr/bin/bwrap"))
            .report()
            .clone();
        assert_eq!(report.backend, "none");
        assert!(report.reasons[0].contains("\"docker\""), "{report:?}");
        let mut allowed = settings("none", "/usr/bin/bwrap");
        allowed.allow_unsandboxed = true;
        let report = Sandbox::probe(&allowed).report().clone();
        assert_eq!(report.guarantees.unconfined_allowed, Some(true));
        assert!(
            report
                .reasons
                .iter()
                .any(|reason| reason.contains("UNCONFINED")),
            "{report:?}"
        );
    }

    #[test]
    fn landlock_rules_split_folders_around_denied_paths() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().canonicalize().unwrap_or_default();
        let home = root.join("home");
        for dir in [".cargo/bin", ".cargo/registry", "work/src", ".ssh"] {
            std::fs::create_dir_all(home.join(dir)).unwrap_or_default();
        }
        std::fs::write(home.join(".cargo/credentials.toml"), "token").unwrap_or_default();
        std::fs::write(home.join(".cargo/config.toml"), "").unwrap_or_default();
        let policy = Policy {
            work_folder: home.join("work"),
            writable: Vec::new(),
            readable: Vec::new(),
            denied: Vec::new(),
            network: false,
            env: vec![(
                "PATH".into(),
                format!("/usr/bin:{}", home.join(".cargo/bin").display()),
            )],
        };
        let denied = vec![home.join(".cargo/credentials.toml"), home.join(".ssh")];
        let rules = landlock_rules(&policy, &denied, Some(&home));
        let under_home: Vec<&PathBuf> =
            rules.read.iter().filter(|p| p.starts_with(&home)).collect();
        assert_eq!(
            under_home,
            [
                &home.join(".cargo/bin"),
                &home.join(".cargo/config.toml"),
                &home.join(".cargo/registry")
            ]
        );
        assert_eq!(rules.write, [home.join("work")]);
        assert!(rules.read.contains(&PathBuf::from("/usr")));
        assert!(!rules.read.iter().any(|p| p == Path::new("/dev")));
    }
}
