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
    /// Named guarantees (for example `network`, `filesystem`) and whether each holds.
    #[serde(default)]
    pub guarantees: serde_json::Map<String, serde_json::Value>,
    /// Why the strength is what it is, in sentences.
    #[serde(default)]
    pub reasons: Vec<String>,
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
