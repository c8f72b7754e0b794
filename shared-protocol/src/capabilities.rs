//! What a device says it can do, sent with every heartbeat.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The device's public seal key, pinned by the server at first report.
///
/// `kid` is base64url(first 16 bytes of SHA-256(SPKI DER)); `fingerprint` is
/// `SHA256:` + base64url(SHA-256(SPKI DER)); `spki` is base64url(SPKI DER).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SealKey {
    pub kid: String,
    pub alg: String,
    pub spki: String,
    pub fingerprint: String,
}

/// The seal key algorithm of protocol v1.
pub const SEAL_KEY_ALG: &str = "ECDH-P256";

/// What kind of engine runs a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// A command the device owner configured locally.
    Recipe,
    /// A coding agent speaking the Agent Client Protocol.
    Acp,
}

/// An engine the device publishes by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Engine {
    pub name: String,
    pub kind: EngineKind,
    /// The last `tether-agent engine check` of an ACP engine, when one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<EngineCheck>,
}

/// Longest text of an [`EngineCheck`] (a name, a version, the problem), in characters.
pub const MAX_CHECK_TEXT_CHARS: usize = 300;
/// Most sign-in methods an [`EngineCheck`] lists.
pub const MAX_CHECK_AUTH_METHODS: usize = 10;

/// What starting an ACP engine the way a run would showed: whether a session could start,
/// and what the agent said of itself. Texts are cut to [`MAX_CHECK_TEXT_CHARS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineCheck {
    /// When the check ran, unix milliseconds.
    pub checked_at: i64,
    /// A session started.
    pub ok: bool,
    /// The agent's `agentInfo`, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<CheckedAgent>,
    /// The ACP version the agent answered `initialize` with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<u16>,
    /// The agent offers `session/load` (a follow-up goes on in the same session).
    #[serde(default)]
    pub load_session: bool,
    /// The sign-in methods the agent lists, at most [`MAX_CHECK_AUTH_METHODS`].
    #[serde(default)]
    pub auth_methods: Vec<CheckedAuthMethod>,
    /// What went wrong, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// How long the check took, in milliseconds.
    #[serde(default)]
    pub took_ms: u64,
}

/// The agent's name and version, as it gave them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckedAgent {
    pub name: String,
    pub version: String,
}

/// A sign-in method an agent lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckedAuthMethod {
    pub id: String,
    pub name: String,
    /// `env_var` (a key in the environment), `agent` (the agent signs in itself), or the
    /// type the agent named.
    pub kind: String,
}

impl EngineCheck {
    /// The check with every text cut to [`MAX_CHECK_TEXT_CHARS`] and at most
    /// [`MAX_CHECK_AUTH_METHODS`] methods, as the device sends it and the server keeps it.
    #[must_use]
    pub fn bounded(mut self) -> EngineCheck {
        if let Some(agent) = &mut self.agent {
            cut(&mut agent.name);
            cut(&mut agent.version);
        }
        self.auth_methods.truncate(MAX_CHECK_AUTH_METHODS);
        for method in &mut self.auth_methods {
            cut(&mut method.id);
            cut(&mut method.name);
            cut(&mut method.kind);
        }
        if let Some(problem) = &mut self.problem {
            cut(problem);
        }
        self
    }
}

/// Cuts `text` to [`MAX_CHECK_TEXT_CHARS`] characters, marking the cut with `…`.
fn cut(text: &mut String) {
    if let Some((at, _)) = text.char_indices().nth(MAX_CHECK_TEXT_CHARS) {
        text.truncate(at);
        text.push('…');
    }
}

/// How strongly the device confines what it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxStrength {
    Strong,
    Reduced,
    Advisory,
}

/// The confinement the device reports, truthfully.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxReport {
    pub backend: String,
    pub strength: SandboxStrength,
    /// What the backend holds to, one named guarantee each; a backend leaves out those it
    /// has nothing to say about.
    #[serde(default)]
    pub guarantees: Guarantees,
    /// Why the strength is what it is, in sentences.
    #[serde(default)]
    pub reasons: Vec<String>,
}

/// The guarantees of a [`SandboxReport`], as `tether-agent sandbox status --json` prints them.
///
/// Each is absent when the backend does not report it: `none` reports what holds without
/// confinement (the hard floor, the scrubbed environment), the confining backends what their
/// confinement does. The fields are in the order the confining backends report them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Guarantees {
    /// Runs are confined by an OS sandbox; `false` for the `none` backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confined: Option<bool>,
    /// With no backend, the owner allowed runs without confinement
    /// (`tether-agent run --allow-unsandboxed`); otherwise they are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfined_allowed: Option<bool>,
    /// The Landlock ABI the kernel gave (Landlock only); below 4 TCP is left to seccomp,
    /// below 6 signals and abstract sockets are not scoped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_abi: Option<i32>,
    /// A run writes only its work folder, its grants and its private temporary folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem_write_confined: Option<bool>,
    /// The home folder is unreadable, except the toolchains in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_hidden: Option<bool>,
    /// Protected paths (keys, sign-ins, the agent's data dir) are unreadable to a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected_paths_hidden: Option<bool>,
    /// Without confinement, the guard still refuses a job or a grant on a protected path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected_paths_refused: Option<bool>,
    /// A run with the network off cannot reach the network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_off_enforced: Option<bool>,
    /// An engine can be limited to its model endpoints; when `false`, such runs are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_model_enforced: Option<bool>,
    /// With the network off, Unix sockets outside the run's folders are unreachable too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_sockets_blocked_when_offline: Option<bool>,
    /// A run sees only its own processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<bool>,
    /// A fresh `/proc` is mounted for the run (bubblewrap; without it the strength is reduced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proc_mounted: Option<bool>,
    /// A run cannot signal processes outside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals_scoped: Option<bool>,
    /// The seccomp filter (ptrace, io_uring, namespaces, mounts, `TIOCSTI`, …) was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<bool>,
    /// The run holds no capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities_dropped: Option<bool>,
    /// A run starts in a session of its own, away from the agent's terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_session: Option<bool>,
    /// Git hooks and config in the work folder are read-only to the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_metadata_read_only: Option<bool>,
    /// How the whole process tree of a run is ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_tree_kill: Option<ProcessTreeKill>,
    /// Known-dangerous commands are refused before anything runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_floor: Option<bool>,
    /// A run's environment is built from an allow list, credentials dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_scrubbed: Option<bool>,
}

/// [`Guarantees::process_tree_kill`]: the mechanism by name, or without confinement whether
/// the tree is ended at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ProcessTreeKill {
    /// Whether the whole tree is ended (`none`: the launcher is its subreaper on Linux only).
    Holds(bool),
    /// How, such as `subreaper` or `pid namespace + die-with-parent`.
    By(String),
}

/// The capability report of a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub protocol: u32,
    pub agent_version: String,
    pub install_id: String,
    pub engines: Vec<Engine>,
    /// Labels of the folders the device shares; a job names one of these.
    pub folders: Vec<String>,
    pub sandbox: SandboxReport,
    pub seal_key: SealKey,
    /// Off keeps every decision answer on the computer.
    pub accept_web_approvals: bool,
    /// Present when the computer delivers work with git (branches, commits, pushes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitCapability>,
    /// Whether evidence goes up and which captures are held (absent from older agents:
    /// uploads on, nothing held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<crate::evidence::EvidenceSettings>,
    /// Whether the owner's console may reach this computer (`tether-agent console on|off`;
    /// absent from older agents, which have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console: Option<bool>,
}

/// What the computer's git delivery can do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitCapability {
    /// `git --version`'s number, e.g. `2.47.3`.
    pub version: String,
    /// Hosts with a GitHub token in the vault (pull requests), e.g. `github.com`.
    #[serde(default)]
    pub github_hosts: Vec<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    /// Every guarantee set, as an agent would never send them all at once.
    fn every() -> Guarantees {
        Guarantees {
            confined: Some(true),
            unconfined_allowed: Some(false),
            landlock_abi: Some(6),
            filesystem_write_confined: Some(true),
            home_hidden: Some(true),
            protected_paths_hidden: Some(true),
            protected_paths_refused: Some(true),
            network_off_enforced: Some(true),
            network_model_enforced: Some(false),
            unix_sockets_blocked_when_offline: Some(true),
            pid_namespace: Some(false),
            proc_mounted: Some(true),
            signals_scoped: Some(true),
            seccomp: Some(true),
            capabilities_dropped: Some(true),
            new_session: Some(true),
            git_metadata_read_only: Some(false),
            process_tree_kill: Some(ProcessTreeKill::By("subreaper".to_owned())),
            hard_floor: Some(true),
            environment_scrubbed: Some(true),
        }
    }

    #[test]
    fn guarantees_keep_the_keys_and_types_of_the_wire() {
        // The keys agents have always sent, camelCase, in the confining backends' order.
        assert_eq!(
            serde_json::to_string(&every()).unwrap(),
            concat!(
                r#"{"confined":true,"unconfinedAllowed":false,"landlockAbi":6,"#,
                r#""filesystemWriteConfined":true,"homeHidden":true,"protectedPathsHidden":true,"#,
                r#""protectedPathsRefused":true,"networkOffEnforced":true,"#,
                r#""networkModelEnforced":false,"unixSocketsBlockedWhenOffline":true,"#,
                r#""pidNamespace":false,"procMounted":true,"signalsScoped":true,"seccomp":true,"#,
                r#""capabilitiesDropped":true,"newSession":true,"gitMetadataReadOnly":false,"#,
                r#""processTreeKill":"subreaper","hardFloor":true,"environmentScrubbed":true}"#,
            )
        );
        let back: Guarantees =
            serde_json::from_str(&serde_json::to_string(&every()).unwrap()).unwrap();
        assert_eq!(back, every());
    }

    #[test]
    fn an_unreported_guarantee_is_absent_not_null() {
        let none = Guarantees {
            confined: Some(false),
            process_tree_kill: Some(ProcessTreeKill::Holds(true)),
            ..Guarantees::default()
        };
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            json!({"confined": false, "processTreeKill": true})
        );
        assert_eq!(
            serde_json::to_value(Guarantees::default()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn a_report_reads_as_before() {
        // Without guarantees, with an empty object, and with a key this version does not know.
        let report: SandboxReport =
            serde_json::from_value(json!({"backend": "none", "strength": "advisory"})).unwrap();
        assert_eq!(report.guarantees, Guarantees::default());
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            json!({"backend": "none", "strength": "advisory", "guarantees": {}, "reasons": []})
        );
        let report: SandboxReport = serde_json::from_value(json!({
            "backend": "bwrap",
            "strength": "strong",
            "guarantees": {
                "pidNamespace": true,
                "processTreeKill": "pid namespace + die-with-parent",
                "laterGuarantee": {"any": "shape"}
            },
            "reasons": []
        }))
        .unwrap();
        assert_eq!(report.guarantees.pid_namespace, Some(true));
        assert_eq!(
            report.guarantees.process_tree_kill,
            Some(ProcessTreeKill::By(
                "pid namespace + die-with-parent".to_owned()
            ))
        );
    }
}
