//! Message encryption for Web Push (RFC 8291), in the `aes128gcm` content coding (RFC 8188):
//! an ephemeral P-256 key per message, ECDH with the browser's key, HKDF-SHA256 keyed by the
//! browser's auth secret, one AES-128-GCM record.
//!
//! ```text
//! IKM   = HKDF(salt = auth, ikm = ECDH, info = "WebPush: info\0" || ua_public || as_public, 32)
//! CEK   = HKDF(salt, IKM, "Content-Encoding: aes128gcm\0", 16)
//! NONCE = HKDF(salt, IKM, "Content-Encoding: nonce\0", 12)
//! body  = salt (16) || rs (u32 BE) || idlen (65) || as_public (65) || AES-GCM(plaintext || 0x02)
//! ```

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Key, Nonce};
use hkdf::Hkdf;
use p256::elliptic_curve::rand_core::{OsRng, RngCore};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{PublicKey, SecretKey};
use sha2::Sha256;

/// The record size written in the header; the one record is always smaller.
pub const RECORD_SIZE: u32 = 4096;
/// Header: salt, record size, key id length, the sender's public key.
const HEADER_BYTES: usize = 16 + 4 + 1 + 65;
/// Largest plaintext: push services take bodies of 4096 bytes, header, padding delimiter
/// and tag included.
pub const MAX_PLAINTEXT_BYTES: usize = 4096 - HEADER_BYTES - 1 - 16;

/// A browser's message keys, checked: its P-256 public key and its 16-byte auth secret.
#[derive(Clone)]
pub struct ReceiverKeys {
    pub public: PublicKey,
    pub auth: [u8; 16],
}

/// Why a message could not be encrypted.
#[derive(Debug, PartialEq, Eq)]
pub enum EncryptError {
    TooLong,
    Cipher,
}

impl std::fmt::Display for EncryptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncryptError::TooLong => write!(f, "the message is over {MAX_PLAINTEXT_BYTES} bytes"),
            EncryptError::Cipher => f.write_str("the message could not be encrypted"),
        }
    }
}

/// Encrypts `plaintext` for `receiver` with a fresh key and salt.
///
/// # Errors
/// [`EncryptError::TooLong`] past [`MAX_PLAINTEXT_BYTES`].
pub fn encrypt(plaintext: &[u8], receiver: &ReceiverKeys) -> Result<Vec<u8>, EncryptError> {
    let sender = SecretKey::random(&mut OsRng);
    let mut salt = [0u8; 16];
    OsRng.fill_bytes(&mut salt);
    encrypt_with(plaintext, receiver, &sender, &salt)
}

/// [`encrypt`] with a given sender key and salt (the RFC's example fixes both).
fn encrypt_with(
    plaintext: &[u8],
    receiver: &ReceiverKeys,
    sender: &SecretKey,
    salt: &[u8; 16],
) -> Result<Vec<u8>, EncryptError> {
    if plaintext.len() > MAX_PLAINTEXT_BYTES {
        return Err(EncryptError::TooLong);
    }
    let sender_public = sender.public_key().to_encoded_point(false);
    let receiver_public = receiver.public.to_encoded_point(false);
    let shared =
        p256::ecdh::diffie_hellman(sender.to_nonzero_scalar(), receiver.public.as_affine());
    let mut info = b"WebPush: info\0".to_vec();
    info.extend_from_slice(receiver_public.as_bytes());
    info.extend_from_slice(sender_public.as_bytes());
    let ikm: [u8; 32] = expand(&receiver.auth, shared.raw_secret_bytes(), &info)?;
    let cek: [u8; 16] = expand(salt, &ikm, b"Content-Encoding: aes128gcm\0")?;
    let nonce: [u8; 12] = expand(salt, &ikm, b"Content-Encoding: nonce\0")?;
    // One record, so it is the last: the 0x02 delimiter and no further padding.
    let mut record = Vec::with_capacity(plaintext.len() + 1);
    record.extend_from_slice(plaintext);
    record.push(0x02);
    let cipher = Aes128Gcm::new(&Key::<Aes128Gcm>::from(cek));
    let sealed = cipher
        .encrypt(&Nonce::from(nonce), record.as_slice())
        .map_err(|_| EncryptError::Cipher)?;
    let mut body = Vec::with_capacity(HEADER_BYTES + sealed.len());
    body.extend_from_slice(salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(65);
    body.extend_from_slice(sender_public.as_bytes());
    body.extend_from_slice(&sealed);
    Ok(body)
}

fn expand<const N: usize>(salt: &[u8], ikm: &[u8], info: &[u8]) -> Result<[u8; N], EncryptError> {
    let mut out = [0u8; N];
    Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand(info, &mut out)
        .map_err(|_| EncryptError::Cipher)?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn b64(text: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(text).unwrap()
    }

    /// RFC 8291 Appendix A: the keys and salt are fixed, so the body is the RFC's, byte for
    /// byte.
    #[test]
    fn rfc_8291_appendix_a() {
        let plaintext = b64("V2hlbiBJIGdyb3cgdXAsIEkgd2FudCB0byBiZSBhIHdhdGVybWVsb24");
        assert_eq!(plaintext, b"When I grow up, I want to be a watermelon");
        let sender =
            SecretKey::from_slice(&b64("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")).unwrap();
        assert_eq!(
            sender.public_key().to_encoded_point(false).as_bytes(),
            b64("BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8")
        );
        let receiver_secret =
            SecretKey::from_slice(&b64("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94")).unwrap();
        let receiver_public = PublicKey::from_sec1_bytes(&b64(
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
        ))
        .unwrap();
        assert_eq!(receiver_secret.public_key(), receiver_public);
        let receiver = ReceiverKeys {
            public: receiver_public,
            auth: b64("BTBZMqHH6r4Tts7J_aSIgg").try_into().unwrap(),
        };
        let salt: [u8; 16] = b64("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let body = encrypt_with(&plaintext, &receiver, &sender, &salt).unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.encode(&body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vC\
             YLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXL\
             WyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
        // The RFC's intermediate values too, so a failure says which step is wrong.
        let shared =
            p256::ecdh::diffie_hellman(sender.to_nonzero_scalar(), receiver.public.as_affine());
        assert_eq!(
            &shared.raw_secret_bytes()[..],
            b64("kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs")
        );
    }

    #[test]
    fn fresh_keys_and_salts_make_every_body_different() {
        let receiver = ReceiverKeys {
            public: SecretKey::random(&mut OsRng).public_key(),
            auth: [7; 16],
        };
        let one = encrypt(b"{}", &receiver).unwrap();
        let two = encrypt(b"{}", &receiver).unwrap();
        assert_ne!(one, two);
        assert_eq!(one.len(), HEADER_BYTES + 2 + 1 + 16);
    }

    #[test]
    fn a_message_too_long_for_one_push_is_refused() {
        let receiver = ReceiverKeys {
            public: SecretKey::random(&mut OsRng).public_key(),
            auth: [7; 16],
        };
        let long = vec![b'a'; MAX_PLAINTEXT_BYTES + 1];
        assert_eq!(encrypt(&long, &receiver), Err(EncryptError::TooLong));
        let fits = encrypt(&long[1..], &receiver).unwrap();
        assert_eq!(fits.len(), 4096);
    }
}
