//! `initialize`, as a run and `engine check` both send it.
//!
//! The answer is read as raw JSON first: the typed schema knows no `env_var` sign-in method
//! and drops its variables, which [`super::sign_in`] needs.

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, FileSystemCapabilities, Implementation, InitializeRequest,
    InitializeResponse,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, UntypedMessage};
use serde_json::Value;

use crate::AGENT_VERSION;

/// What the agent answered `initialize` with.
#[derive(Debug, Clone)]
pub struct Introduced {
    /// The answer, typed.
    pub agent: InitializeResponse,
    /// The answer as the agent sent it.
    pub raw: Value,
}

/// What this computer offers the agent: exactly what [`super::client`] implements, file
/// reads only when `reads_files` (an agent that cannot take a refused read reads from its
/// own sandbox instead: [`crate::local::presets::Preset::client_reads_files`]).
pub fn initialize_request(reads_files: bool) -> InitializeRequest {
    let capabilities = ClientCapabilities::new()
        .fs(FileSystemCapabilities::new()
            .read_text_file(reads_files)
            .write_text_file(true))
        .terminal(true);
    InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(capabilities)
        .client_info(Implementation::new("tether-agent", AGENT_VERSION).title("Tether".to_owned()))
}

/// Sends `initialize`; the answer, or why there is none, in words.
///
/// # Errors
/// The agent's error, its going away, or an answer that is not an `initialize` answer.
pub async fn initialize(cx: &ConnectionTo<Agent>, reads_files: bool) -> Result<Introduced, String> {
    let request = UntypedMessage::new("initialize", initialize_request(reads_files))
        .map_err(|err| format!("the initialize request could not be made: {err}"))?;
    let raw = cx
        .send_request(request)
        .block_task()
        .await
        .map_err(|err| format!("the agent did not initialize: {}", describe(&err)))?;
    let agent = serde_json::from_value(raw.clone())
        .map_err(|err| format!("the agent's answer to initialize is not ACP: {err}"))?;
    Ok(Introduced { agent, raw })
}

/// The ACP version number the agent answered with.
pub fn protocol_number(agent: &InitializeResponse) -> Option<u16> {
    serde_json::to_value(agent.protocol_version)
        .ok()
        .and_then(|version| version.as_u64())
        .and_then(|version| u16::try_from(version).ok())
}

/// Refuses an agent speaking another version than this computer's.
///
/// # Errors
/// The mismatch, in words.
pub fn check_version(agent: &InitializeResponse) -> Result<(), String> {
    if agent.protocol_version == ProtocolVersion::V1 {
        return Ok(());
    }
    Err(format!(
        "the agent speaks ACP version {}, this computer version 1",
        serde_json::to_string(&agent.protocol_version).unwrap_or_default()
    ))
}

/// An SDK error in words; the agent going away is said so.
pub fn describe(err: &agent_client_protocol::Error) -> String {
    if agent_client_protocol::is_incoming_transport_closed(err)
        || agent_client_protocol::is_connection_terminated(err)
    {
        return "the agent exited".to_owned();
    }
    let mut text = err.message.clone();
    if let Some(data) = &err.data {
        text.push_str(&format!(" ({data})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_client_offers_exactly_what_it_implements() {
        let request = serde_json::to_value(initialize_request(true)).unwrap_or_default();
        assert_eq!(request["protocolVersion"], json!(1));
        assert_eq!(
            request["clientCapabilities"]["fs"],
            json!({"readTextFile": true, "writeTextFile": true})
        );
        assert_eq!(request["clientCapabilities"]["terminal"], json!(true));
        assert_eq!(request["clientInfo"]["name"], json!("tether-agent"));
    }

    #[test]
    fn the_protocol_version_is_a_number() {
        let agent: InitializeResponse = serde_json::from_value(json!({"protocolVersion": 1}))
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(protocol_number(&agent), Some(1));
        assert_eq!(check_version(&agent), Ok(()));
    }
}
