//! The macOS backend: a Seatbelt profile generated from the policy, run through
//! `/usr/bin/sandbox-exec`. Only the generation is tested on Linux; it runs live on macOS.
//!
//! The profile denies by default; allows reading the system and toolchains, reading and
//! writing the work folder and grants, running programs, signals only inside the sandbox, the
//! network only when the job allows it; and denies every protected path and the work folder's
//! git hooks and config last, so no earlier allow reaches them. Unix sockets are denied with
//! the network (Seatbelt file rules do not cover `connect`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tether_protocol::capabilities::{Guarantees, SandboxReport, SandboxStrength};

use crate::sandbox::backend::{Backend, Policy, Probed};
use crate::sandbox::host;

/// The only `sandbox-exec` the agent runs (never one found on `PATH`).
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The profile for `policy`, with `denied` (protected paths) denied whatever the grants.
pub fn profile(policy: &Policy, denied: &[PathBuf], home: Option<&Path>) -> String {
    let mut out = String::from("(version 1)\n(deny default)\n");
    out.push_str("(allow process-exec process-fork)\n");
    out.push_str("(allow signal (target same-sandbox))\n");
    out.push_str("(allow sysctl-read)\n(allow ipc-posix-shm)\n(allow mach-lookup (global-name \"com.apple.system.opendirectoryd.libinfo\"))\n");
    out.push_str("(allow file-read-metadata)\n");
    let path_var = policy
        .env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str());
    let mut read: Vec<PathBuf> = host::MAC_SYSTEM_READ.iter().map(PathBuf::from).collect();
    read.extend(host::toolchains(home, path_var));
    read.extend(policy.readable.iter().cloned());
    out.push_str("(allow file-read*\n");
    for path in &read {
        let _ = writeln!(out, "  (subpath {})", quote(path));
    }
    out.push_str(")\n");
    let mut write = vec![policy.work_folder.clone()];
    write.extend(policy.writable.iter().cloned());
    out.push_str("(allow file-read* file-write*\n");
    for path in &write {
        let _ = writeln!(out, "  (subpath {})", quote(path));
    }
    for device in ["/dev/null", "/dev/zero", "/dev/tty", "/dev/dtracehelper"] {
        let _ = writeln!(out, "  (literal {})", quote(Path::new(device)));
    }
    out.push_str(")\n");
    if policy.network {
        out.push_str(
            "(allow network*)\n(allow mach-lookup (global-name \"com.apple.dnssd.service\"))\n",
        );
    } else {
        out.push_str("(deny network*)\n");
    }
    out.push_str("(deny file-write*\n");
    for path in crate::policy::guard::git_protected(&policy.work_folder, &policy.writable) {
        let _ = writeln!(out, "  (subpath {})", quote(&path));
    }
    let _ = writeln!(
        out,
        "  (subpath {})",
        quote(&policy.work_folder.join(".git/hooks"))
    );
    let _ = writeln!(
        out,
        "  (literal {})",
        quote(&policy.work_folder.join(".git/config"))
    );
    out.push_str(")\n(deny file-read* file-write*\n");
    for path in denied {
        let _ = writeln!(out, "  (subpath {})", quote(path));
    }
    out.push_str(")\n");
    out
}

/// A path as an SBPL string literal.
fn quote(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// Probes `sandbox-exec` with a profile that denies by default.
pub fn probe() -> Result<Probed, String> {
    if !cfg!(target_os = "macos") {
        return Err("seatbelt: only on macOS".to_owned());
    }
    let status = std::process::Command::new(SANDBOX_EXEC)
        .args([
            "-p",
            "(version 1)(deny default)(allow process-exec process-fork)(allow file-read*)",
            "/usr/bin/true",
        ])
        .status()
        .map_err(|err| format!("seatbelt: cannot run {SANDBOX_EXEC}: {err}"))?;
    if !status.success() {
        return Err(format!("seatbelt: the probe failed ({status})"));
    }
    Ok(Probed {
        backend: Backend::Seatbelt,
        report: SandboxReport {
            backend: "seatbelt".to_owned(),
            strength: SandboxStrength::Strong,
            guarantees: guarantees(),
            reasons: vec![
                "no PID namespace: other processes are listed".to_owned(),
                "the process tree is killed by process group only (no subreaper on macOS)"
                    .to_owned(),
            ],
        },
    })
}

/// What the Seatbelt profile holds to.
fn guarantees() -> Guarantees {
    Guarantees {
        confined: Some(true),
        filesystem_write_confined: Some(true),
        home_hidden: Some(true),
        protected_paths_hidden: Some(true),
        network_off_enforced: Some(true),
        network_model_enforced: Some(false),
        pid_namespace: Some(false),
        git_metadata_read_only: Some(true),
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
        let sent = serde_json::to_value(guarantees()).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            sent,
            json!({
                "confined": true,
                "filesystemWriteConfined": true,
                "homeHidden": true,
                "protectedPathsHidden": true,
                "networkOffEnforced": true,
                "networkModelEnforced": false,
                "pidNamespace": false,
                "gitMetadataReadOnly": true,
                "hardFloor": true,
                "environmentScrubbed": true,
            })
        );
    }

    fn policy(network: bool) -> Policy {
        Policy {
            work_folder: PathBuf::from("/Users/me/src/app"),
            writable: vec![PathBuf::from("/private/tmp/tether-run-1")],
            readable: Vec::new(),
            denied: Vec::new(),
            network,
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        }
    }

    #[test]
    fn the_profile_denies_by_default_and_protected_paths_last() {
        let denied = vec![
            PathBuf::from("/Users/me/.ssh"),
            PathBuf::from("/Users/me/Library/Application Support/tether-agent"),
        ];
        let profile = profile(&policy(false), &denied, None);
        assert!(
            profile.starts_with("(version 1)\n(deny default)\n"),
            "{profile}"
        );
        assert!(profile.contains("(allow file-read* file-write*\n  (subpath \"/Users/me/src/app\")\n  (subpath \"/private/tmp/tether-run-1\")"), "{profile}");
        assert!(profile.contains("(deny network*)"));
        assert!(!profile.contains("(allow network*)"));
        assert!(profile.contains("(allow signal (target same-sandbox))"));
        let allow_work = profile
            .find("(subpath \"/Users/me/src/app\")")
            .unwrap_or(usize::MAX);
        let deny_hooks = profile
            .find("(subpath \"/Users/me/src/app/.git/hooks\")")
            .unwrap_or(0);
        let deny_ssh = profile.find("(subpath \"/Users/me/.ssh\")").unwrap_or(0);
        assert!(
            allow_work < deny_hooks && deny_hooks < deny_ssh,
            "{profile}"
        );
        assert!(
            profile.contains("(subpath \"/Users/me/Library/Application Support/tether-agent\")")
        );
        assert!(profile.contains("(literal \"/Users/me/src/app/.git/config\")"));
        assert!(profile.trim_end().ends_with(')'));
        assert_eq!(
            profile.matches('(').count(),
            profile.matches(')').count(),
            "{profile}"
        );
    }

    #[test]
    fn network_on_is_allowed_and_paths_are_quoted() {
        let mut policy = policy(true);
        policy.work_folder = PathBuf::from("/Users/me/odd \"name\"\\dir");
        let profile = profile(&policy, &[], None);
        assert!(profile.contains("(allow network*)"));
        assert!(
            profile.contains(r#"(subpath "/Users/me/odd \"name\"\\dir")"#),
            "{profile}"
        );
    }
}
