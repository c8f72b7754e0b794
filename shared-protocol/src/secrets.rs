//! Secrets relayed from the web to one device (DESIGN §3.1, §3.3, §5). The server only ever
//! carries the sealed box; these types never hold a value.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::DeliveryId;

/// The longest secret name.
pub const MAX_NAME_LEN: usize = 64;

/// Whether `name` is a valid secret name: `[A-Za-z_][A-Za-z0-9_]{0,63}`, usable as an
/// environment variable.
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    match bytes.first() {
        Some(first) if first.is_ascii_alphabetic() || *first == b'_' => {}
        _ => return false,
    }
    bytes.len() <= MAX_NAME_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// `POST /api/devices/{id}/secrets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendSecretParams {
    pub name: String,
    /// The sealed box (`tether_seal::Envelope` as JSON).
    pub sealed: serde_json::Value,
    /// Sites the secret may be sent to ([`crate::sites`]), for the web's listing. The device
    /// obeys only the list sealed in the box's aad; this one must be the same list (422
    /// otherwise), and absent or empty when the box has none.
    #[serde(default)]
    pub allow: Option<Vec<String>>,
}

/// The 202 answer of `POST /api/devices/{id}/secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendSecretResponse {
    pub delivery_id: DeliveryId,
}

/// `POST /api/devices/self/secret-deliveries/{id}`: only whether the device saved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryAnswer {
    pub saved: bool,
    pub name: String,
    /// Why the device refused the box (no value, ever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A delivery's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Saved,
    Refused,
}

/// A name a device holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavedName {
    pub name: String,
    pub saved_at: DateTime<Utc>,
    /// The sites it may be sent to; absent for a secret a job gets as a variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
}

/// One delivery, without its box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub id: DeliveryId,
    pub name: String,
    pub state: DeliveryState,
    pub error: Option<String>,
    /// The sites it may be sent to; absent for a secret a job gets as a variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
}

/// `GET /api/devices/{id}/secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretsListing {
    pub names: Vec<SavedName>,
    pub deliveries: Vec<Delivery>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_environment_variable_names() {
        for good in ["A", "_", "API_KEY", "a1", &"x".repeat(64)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "A B", "É", &"x".repeat(65), "A=B"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
