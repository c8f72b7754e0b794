//! Pairing a computer to an account, modelled on the OAuth device grant (RFC 8628).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::capabilities::SealKey;
use crate::ids::{AccountId, DeviceId};

/// The alphabet of user codes: RFC 8628 §6.1's consonants, no vowels, no look-alikes.
pub const USER_CODE_ALPHABET: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";
/// Seconds a pairing code stays valid.
pub const PAIRING_EXPIRES_SECS: u64 = 600;
/// Seconds an agent waits between polls of `/api/devices/register`.
pub const PAIRING_INTERVAL_SECS: u64 = 5;
/// Seconds added to the interval after each `slow_down`.
pub const SLOW_DOWN_STEP_SECS: u64 = 5;

/// `POST /api/devices/pair`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PairParams {
    pub name: String,
    pub platform: String,
    /// Stable per installation: pairing again from it is the same computer.
    pub install_id: String,
    pub agent_version: String,
    pub seal_key: SealKey,
}

/// Answer of `POST /api/devices/pair`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PairResponse {
    pub device_code: String,
    pub user_code: String,
    pub verification_uri: String,
    pub verification_uri_complete: String,
    pub expires_in: u64,
    pub interval: u64,
}

/// `POST /api/devices/register`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterParams {
    pub device_code: String,
}

/// Answer of `POST /api/devices/register` once a person linked the code.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterResponse {
    pub device_id: DeviceId,
    pub token: String,
    pub account_id: AccountId,
}

/// `POST /api/devices/link`: a signed-in person approves a code.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkParams {
    pub user_code: String,
}

/// Answer of `POST /api/devices/link`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkedDevice {
    pub device_id: DeviceId,
    pub name: String,
    pub platform: String,
    pub fingerprint: String,
}

/// Normalizes a user code as typed: case, spaces and hyphens do not matter.
///
/// Returns the eight code letters in upper case, or `None` when the text cannot be a code.
pub fn normalize_user_code(typed: &str) -> Option<String> {
    let letters: String = typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| c.to_ascii_uppercase())
        .collect();
    let valid = letters.len() == 8 && letters.bytes().all(|b| USER_CODE_ALPHABET.contains(&b));
    valid.then_some(letters)
}

/// Formats eight code letters as `XXXX-XXXX`.
pub fn format_user_code(letters: &str) -> String {
    let (head, tail) = letters.split_at(letters.len().min(4));
    format!("{head}-{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(typed: &str, expected: Option<&str>) {
        assert_eq!(normalize_user_code(typed).as_deref(), expected, "{typed:?}");
    }

    #[test]
    fn user_codes_ignore_case_spaces_and_hyphens() {
        check("BCDF-GHJK", Some("BCDFGHJK"));
        check("bcdf ghjk", Some("BCDFGHJK"));
        check(" b-c-d-f-g-h-j-k ", Some("BCDFGHJK"));
        check("BCDF-GHJ", None);
        check("ABCD-EFGH", None);
        check("BCDF-GHJK-L", None);
        check("", None);
        check("ßCDF-GHJK", None);
        assert_eq!(format_user_code("BCDFGHJK"), "BCDF-GHJK");
    }
}
