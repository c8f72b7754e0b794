//! The lease token: the secret a claim hands a device, named by every write about that run.
//!
//! It travels in [`crate::routes::LEASE_HEADER`] and in heartbeat and reattach bodies. The
//! server stores only its hash. Parsing checks the shape only (printable ASCII, bounded):
//! whether a token is the current lease is the server's question, answered with
//! `stale_lease`, never with a parse error.

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Longest lease token accepted from the wire; the server issues 43 characters.
pub const MAX_LEASE_TOKEN_LEN: usize = 256;

/// A lease token. `Debug` never shows it, so a logged struct cannot leak one.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(try_from = "String", into = "String")]
pub struct LeaseToken(String);

/// Why a string is not a lease token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseTokenError;

impl fmt::Display for LeaseTokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a lease token is 1 to {MAX_LEASE_TOKEN_LEN} visible ASCII characters"
        )
    }
}

impl std::error::Error for LeaseTokenError {}

impl LeaseToken {
    /// Parses a token received from outside (a header or a body field).
    ///
    /// # Errors
    /// [`LeaseTokenError`] when it is empty, too long or holds anything but visible ASCII.
    pub fn parse(raw: &str) -> Result<Self, LeaseTokenError> {
        let shape_ok = !raw.is_empty()
            && raw.len() <= MAX_LEASE_TOKEN_LEN
            && raw.bytes().all(|b| b.is_ascii_graphic());
        if shape_ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(LeaseTokenError)
        }
    }

    /// The token itself, for hashing or for the header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for LeaseToken {
    type Error = LeaseTokenError;
    fn try_from(raw: String) -> Result<Self, LeaseTokenError> {
        Self::parse(&raw)
    }
}

impl From<LeaseToken> for String {
    fn from(token: LeaseToken) -> String {
        token.0
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseToken(…)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_the_shape_only() {
        assert!(LeaseToken::parse("Zm9vYmFyLWJhei1xdXV4LTAxMjM0NTY3ODlhYmNkZWY").is_ok());
        assert!(LeaseToken::parse("bogus").is_ok());
        assert!(LeaseToken::parse("").is_err());
        assert!(LeaseToken::parse("a b").is_err());
        assert!(LeaseToken::parse("é").is_err());
        assert!(LeaseToken::parse(&"x".repeat(MAX_LEASE_TOKEN_LEN + 1)).is_err());
        assert!(serde_json::from_str::<LeaseToken>("\"\"").is_err());
    }

    #[test]
    fn debug_hides_the_token() {
        let token = LeaseToken::parse("secret-lease").unwrap();
        assert_eq!(format!("{token:?}"), "LeaseToken(…)");
    }
}
