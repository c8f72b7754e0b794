//! The strong Linux backend: bubblewrap (an external binary at a fixed absolute path).
//!
//! The program sees an explicit read-only system (`/usr`, `/etc`, `/lib*`, …), an empty
//! private home except the work folder and toolchains, private `/tmp` and `/run`, fresh `/dev`
//! and `/proc`, no network unless the job allows it, new user, PID, IPC, UTS and cgroup
//! namespaces with no way to make more (`--disable-userns`), a new session (no terminal
//! injection), no capabilities, an empty environment, and protected paths masked. Inside, the
//! agent's launcher adds seccomp and supervises the tree; `--die-with-parent` plus the PID
//! namespace end everything when the agent or bubblewrap dies.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use tether_protocol::capabilities::{Guarantees, ProcessTreeKill, SandboxReport, SandboxStrength};

use crate::sandbox::backend::{Backend, Policy, Probed};
use crate::sandbox::host::{self, SYSTEM_READ};
use crate::sandbox::launch::{self, Input, LaunchSpec, Layer};

/// Where bubblewrap is looked for unless `TETHER_BWRAP` names another binary.
pub const DEFAULT_PATH: &str = "/usr/bin/bwrap";
/// Where the launcher (the agent binary) appears inside the sandbox.
pub const LAUNCHER_INSIDE: &str = "/run/tether/launcher";

/// Everything the mounts depend on.
#[derive(Debug)]
pub struct Mounts<'a> {
    pub policy: &'a Policy,
    /// Protected and denied paths, masked where they would be visible.
    pub denied: &'a [PathBuf],
    pub home: Option<&'a Path>,
    /// `.git/hooks` and `.git/config` of the work folder's repositories (read-only).
    pub git: &'a [PathBuf],
    pub launcher: &'a Path,
    /// Whether to mount a fresh `/proc` (false only after the probe found it impossible).
    pub proc: bool,
}

/// The bubblewrap arguments, up to and including the launcher's path.
pub fn args(mounts: &Mounts<'_>) -> Vec<OsString> {
    let policy = mounts.policy;
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |words: &[&dyn AsRef<std::ffi::OsStr>]| {
        for word in words {
            args.push(word.as_ref().to_os_string());
        }
    };
    push(&[
        &"--unshare-all",
        &"--unshare-user",
        &"--disable-userns",
        &"--new-session",
        &"--die-with-parent",
        &"--clearenv",
        &"--cap-drop",
        &"ALL",
    ]);
    if policy.network {
        push(&[&"--share-net"]);
    }
    let mut visible: Vec<PathBuf> = Vec::new();
    for root in SYSTEM_READ {
        let root = Path::new(root);
        match fs::symlink_metadata(root) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = fs::read_link(root) {
                    push(&[&"--symlink", &target, &root]);
                }
            }
            Ok(_) => {
                push(&[&"--ro-bind", &root, &root]);
                visible.push(root.to_path_buf());
            }
            Err(_) => {}
        }
    }
    push(&[&"--dev", &"/dev"]);
    if mounts.proc {
        push(&[&"--proc", &"/proc"]);
    }
    push(&[
        &"--tmpfs", &"/tmp", &"--tmpfs", &"/run", &"--tmpfs", &"/var",
    ]);
    push(&[&"--dir", &"/var/tmp"]);
    if let Some(home) = mounts.home {
        push(&[&"--tmpfs", &home]);
    }
    // Parents before children, so a read-only path inside a writable one stays read-only.
    let path_var = policy
        .env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str());
    let mut binds: Vec<(PathBuf, bool)> = Vec::new();
    binds.extend(
        host::toolchains(mounts.home, path_var)
            .into_iter()
            .map(|p| (p, false)),
    );
    binds.extend(policy.readable.iter().map(|p| (p.clone(), false)));
    binds.push((policy.work_folder.clone(), true));
    binds.extend(policy.writable.iter().map(|p| (p.clone(), true)));
    binds.retain(|(path, _)| path.exists());
    binds.sort_by_key(|(path, _)| path.components().count());
    for (path, writable) in &binds {
        push(&[&if *writable { "--bind" } else { "--ro-bind" }, path, path]);
        visible.push(path.clone());
    }
    for path in mounts.git.iter().filter(|path| path.exists()) {
        push(&[&"--ro-bind", path, path]);
    }
    let mut masked: Vec<&PathBuf> = mounts
        .denied
        .iter()
        .filter(|path| visible.iter().any(|root| path.starts_with(root)))
        .collect();
    masked.sort_by_key(|path| path.components().count());
    for path in masked {
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => push(&[&"--tmpfs", path, &"--remount-ro", path]),
            Ok(meta) if meta.is_file() => push(&[&"--ro-bind", &"/dev/null", path]),
            _ => {}
        }
    }
    push(&[&"--ro-bind", &mounts.launcher, &LAUNCHER_INSIDE]);
    push(&[&"--chdir", &policy.work_folder, &"--", &LAUNCHER_INSIDE]);
    args
}

/// Makes sure every repository in the work folder has `.git/hooks` and `.git/config` (an
/// empty folder or file, as `git init` makes them) so they can be mounted read-only: bubblewrap
/// cannot mount over a path that does not exist. Returns the paths to protect.
pub fn prepare_git(work_folder: &Path, granted: &[PathBuf]) -> Vec<PathBuf> {
    let paths = crate::policy::guard::git_protected(work_folder, granted);
    for path in &paths {
        if fs::symlink_metadata(path).is_ok() {
            continue;
        }
        if path.ends_with("hooks") {
            let _ = fs::create_dir(path);
        } else {
            let _ = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path);
        }
    }
    paths
}

/// Probes bubblewrap by starting the launcher inside it, with the same flags as a real run.
/// A run without a fresh `/proc` is the one fallback, and it lowers the strength.
pub fn probe(bwrap: &Path, launcher: &Path) -> Result<Probed, String> {
    if !cfg!(target_os = "linux") {
        return Err("bwrap: only on Linux".to_owned());
    }
    if !bwrap.is_file() {
        return Err(format!(
            "bwrap: {} does not exist (install bubblewrap, or set TETHER_BWRAP)",
            bwrap.display()
        ));
    }
    let work = tempfile::tempdir().map_err(|err| format!("bwrap: cannot probe: {err}"))?;
    let work_path = work
        .path()
        .canonicalize()
        .unwrap_or_else(|_| work.path().to_path_buf());
    let policy = Policy {
        work_folder: work_path.clone(),
        writable: Vec::new(),
        readable: Vec::new(),
        denied: Vec::new(),
        network: false,
        env: Vec::new(),
    };
    let spec = LaunchSpec {
        layer: Layer::Seccomp,
        network: false,
        read: Vec::new(),
        write: Vec::new(),
        devices: Vec::new(),
        probe: true,
        argv: vec!["true".to_owned()],
        cwd: work_path.clone(),
        env: Vec::new(),
        stdin: Input::Null,
        agent_pid: None,
        forwards: Vec::new(),
    };
    let mut reasons = Vec::new();
    let mut proc = true;
    let result = loop {
        let args = args(&Mounts {
            policy: &policy,
            denied: &[],
            home: None,
            git: &[],
            launcher,
            proc,
        });
        let args: Vec<String> = args
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        match launch::run_probe(launcher, Some((bwrap, args)), &spec, &work_path) {
            Ok(result) => break result,
            Err(err) if proc && err.contains("proc") => {
                reasons.push(format!(
                    "bwrap could not mount a fresh /proc ({err}); running without /proc"
                ));
                proc = false;
            }
            Err(err) => return Err(format!("bwrap at {}: {err}", bwrap.display())),
        }
    };
    let mut strength = SandboxStrength::Strong;
    if !proc {
        strength = SandboxStrength::Reduced;
    }
    if !result.seccomp {
        strength = SandboxStrength::Reduced;
        reasons.push("seccomp could not be applied inside bubblewrap: ptrace, io_uring and TIOCSTI rely on the namespaces alone".to_owned());
    }
    reasons.extend(result.notes);
    reasons.extend(
        [
            "system folders (/usr, /etc, /lib, /opt) are readable, minus protected files",
            "a Unix socket inside the work folder or a granted folder stays reachable",
            "with network on, the network is the host's",
            "files that run later (build scripts, new git repositories made by the job) are not checked",
        ]
        .map(str::to_owned),
    );
    Ok(Probed {
        backend: Backend::Bwrap {
            path: bwrap.to_path_buf(),
            proc,
        },
        report: SandboxReport {
            backend: "bwrap".to_owned(),
            strength,
            guarantees: guarantees(proc, result.seccomp),
            reasons,
        },
    })
}

/// What bubblewrap holds to, given whether it mounted a fresh `/proc` and applied seccomp.
fn guarantees(proc: bool, seccomp: bool) -> Guarantees {
    Guarantees {
        confined: Some(true),
        filesystem_write_confined: Some(true),
        home_hidden: Some(true),
        protected_paths_hidden: Some(true),
        network_off_enforced: Some(true),
        network_model_enforced: Some(true),
        unix_sockets_blocked_when_offline: Some(true),
        pid_namespace: Some(true),
        proc_mounted: Some(proc),
        signals_scoped: Some(true),
        seccomp: Some(seccomp),
        capabilities_dropped: Some(true),
        new_session: Some(true),
        git_metadata_read_only: Some(true),
        process_tree_kill: Some(ProcessTreeKill::By(
            "pid namespace + die-with-parent".to_owned(),
        )),
        hard_floor: Some(true),
        environment_scrubbed: Some(true),
        ..Guarantees::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_guarantees_are_the_ones_the_report_has_always_had() {
        let sent =
            serde_json::to_value(guarantees(false, true)).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            sent,
            json!({
                "confined": true,
                "filesystemWriteConfined": true,
                "homeHidden": true,
                "protectedPathsHidden": true,
                "networkOffEnforced": true,
                "networkModelEnforced": true,
                "unixSocketsBlockedWhenOffline": true,
                "pidNamespace": true,
                "procMounted": false,
                "signalsScoped": true,
                "seccomp": true,
                "capabilitiesDropped": true,
                "newSession": true,
                "gitMetadataReadOnly": true,
                "processTreeKill": "pid namespace + die-with-parent",
                "hardFloor": true,
                "environmentScrubbed": true,
            })
        );
    }

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    /// The index of `words` as consecutive arguments.
    fn position(args: &[String], words: &[&str]) -> Option<usize> {
        args.windows(words.len()).position(|window| window == words)
    }

    #[test]
    fn the_flags_follow_the_design() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().canonicalize().unwrap_or_default();
        let home = root.join("home");
        let work = home.join("work");
        fs::create_dir_all(work.join(".git")).unwrap_or_default();
        fs::create_dir_all(home.join(".cargo")).unwrap_or_default();
        fs::write(home.join(".cargo/credentials.toml"), "x").unwrap_or_default();
        let git = prepare_git(&work, &[]);
        assert!(work.join(".git/hooks").is_dir() && work.join(".git/config").is_file());
        let policy = Policy {
            work_folder: work.clone(),
            writable: Vec::new(),
            readable: Vec::new(),
            denied: Vec::new(),
            network: false,
            env: Vec::new(),
        };
        let denied = vec![home.join(".cargo/credentials.toml"), home.join(".ssh")];
        let words = strings(&args(&Mounts {
            policy: &policy,
            denied: &denied,
            home: Some(&home),
            git: &git,
            launcher: Path::new("/usr/bin/tether-agent"),
            proc: true,
        }));
        for flag in [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--new-session",
            "--die-with-parent",
            "--clearenv",
        ] {
            assert!(words.contains(&flag.to_owned()), "{flag} in {words:?}");
        }
        assert!(position(&words, &["--cap-drop", "ALL"]).is_some());
        assert!(!words.contains(&"--share-net".to_owned()));
        let home_s = home.display().to_string();
        let work_s = work.display().to_string();
        let tmpfs_home = position(&words, &["--tmpfs", &home_s]);
        let bind_work = position(&words, &["--bind", &work_s, &work_s]);
        assert!(
            tmpfs_home.is_some() && bind_work.is_some() && tmpfs_home < bind_work,
            "{words:?}"
        );
        let cargo = home.join(".cargo").display().to_string();
        let creds = home.join(".cargo/credentials.toml").display().to_string();
        let bind_cargo = position(&words, &["--ro-bind", &cargo, &cargo]);
        let mask = position(&words, &["--ro-bind", "/dev/null", &creds]);
        assert!(
            bind_cargo.is_some() && mask.is_some() && bind_cargo < mask,
            "{words:?}"
        );
        let hooks = work.join(".git/hooks").display().to_string();
        let ro_hooks = position(&words, &["--ro-bind", &hooks, &hooks]);
        assert!(ro_hooks.is_some() && bind_work < ro_hooks, "{words:?}");
        assert!(
            position(&words, &["--ro-bind", "/usr", "/usr"]).is_some()
                || !Path::new("/usr").exists()
        );
        assert_eq!(words.last().map(String::as_str), Some(LAUNCHER_INSIDE));
        // `.ssh` does not exist and is not visible: nothing to mask.
        assert!(!words.iter().any(|arg| arg.ends_with("/.ssh")));

        let online = Policy {
            network: true,
            ..policy
        };
        let online_words = strings(&args(&Mounts {
            policy: &online,
            denied: &[],
            home: None,
            git: &[],
            launcher: Path::new("/x"),
            proc: false,
        }));
        assert!(online_words.contains(&"--share-net".to_owned()));
        assert!(!online_words.contains(&"--proc".to_owned()));
    }
}
