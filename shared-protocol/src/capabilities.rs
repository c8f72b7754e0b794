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
