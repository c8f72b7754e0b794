//! Secrets the server hands out or checks: random tokens, their hashes, passwords.
//!
//! **Invariant:** a token's plaintext exists only in the answer that hands it out; the
//! database holds its SHA-256, and hashes are compared in constant time.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tether_protocol::LeaseToken;

use crate::error::ApiError;

/// A fresh random secret: `prefix` followed by 32 random bytes in base64url.
pub fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// The stored form of a token: lowercase hex SHA-256.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Compares two stored hashes without leaking where they differ.
pub fn hashes_match(stored: &str, presented: &str) -> bool {
    stored.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// Hashes a password with argon2id (CPU-heavy: call from a blocking thread).
///
/// # Errors
/// Only if argon2 rejects its own parameters, which is a server fault.
pub fn hash_password(password: &str) -> Result<String, ApiError> {
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| ApiError::internal(&error))
}

/// Whether `password` matches the stored argon2 hash.
pub fn verify_password(password: &str, stored: &str) -> bool {
    PasswordHash::new(stored).is_ok_and(|hash| {
        Argon2::default()
            .verify_password(password.as_bytes(), &hash)
            .is_ok()
    })
}

/// A hash no password matches, verified for unknown emails so their timing looks like a
/// wrong password's.
pub const DECOY_PASSWORD_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$Fr1EF0Tw5dYUNkQx2hT3I9mBq1Kz+1Q4NZS6XUnk7Zs";

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Every request with a token hashes it: no formatting machinery per byte.
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// A fresh lease token (43 base64url characters, always a well-formed [`LeaseToken`]).
///
/// # Errors
/// `internal` if the token's shape rule ever stopped admitting what this makes.
pub fn new_lease_token() -> Result<LeaseToken, ApiError> {
    LeaseToken::parse(&random_token("")).map_err(|error| ApiError::internal(&error))
}

/// SHA-256 of `bytes` in base64url without padding (seal key ids and fingerprints).
pub fn sha256_b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hash_stably() {
        let first = random_token("tdt_");
        let second = random_token("tdt_");
        assert!(first.starts_with("tdt_") && first.len() == 4 + 43);
        assert_ne!(first, second);
        assert_eq!(hash_token(&first), hash_token(&first));
        assert!(hashes_match(&hash_token(&first), &hash_token(&first)));
        assert!(!hashes_match(&hash_token(&first), &hash_token(&second)));
    }

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn passwords_verify_and_the_decoy_matches_nothing() {
        let stored = hash_password("correct horse").unwrap_or_default();
        assert!(verify_password("correct horse", &stored));
        assert!(!verify_password("wrong horse", &stored));
        assert!(PasswordHash::new(DECOY_PASSWORD_HASH).is_ok());
        assert!(!verify_password("correct horse", DECOY_PASSWORD_HASH));
    }
}
