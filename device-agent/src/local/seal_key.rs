//! The device's seal key: a P-256 key pair the web encrypts secrets for.
//!
//! Each pairing makes a new pair. The private half is stored as PKCS#8 DER, encrypted with
//! AES-256-GCM under a local key that lives in its own 0600 file, so copying `seal-key.json`
//! alone reveals nothing. The public half is reported as [`SealKey`].

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey};
use p256::SecretKey;
use rand::rngs::OsRng;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tether_protocol::capabilities::{SealKey, SEAL_KEY_ALG};

use crate::local::state::DataDir;

const SEAL_KEY_FILE: &str = "seal-key.json";
const LOCAL_KEY_FILE: &str = "local.key";
/// Binds the ciphertext to its purpose, so the local key's other uses cannot be confused
/// with it.
const STORAGE_AAD: &[u8] = b"tether/seal-key-at-rest/v1";

/// The device's key pair, private half in memory.
pub struct SealKeyPair {
    secret: SecretKey,
    public: SealKey,
}

/// `seal-key.json`: the encrypted private key.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredSealKey {
    v: u32,
    alg: String,
    kid: String,
    /// base64url, 12 bytes.
    nonce: String,
    /// base64url AES-256-GCM ciphertext of the PKCS#8 DER private key.
    ciphertext: String,
}

impl SealKeyPair {
    /// A fresh random key pair.
    ///
    /// # Errors
    /// When the public key cannot be encoded (does not happen for a valid key).
    pub fn generate() -> Result<SealKeyPair> {
        SealKeyPair::from_secret(SecretKey::random(&mut OsRng))
    }

    fn from_secret(secret: SecretKey) -> Result<SealKeyPair> {
        let spki = secret
            .public_key()
            .to_public_key_der()
            .context("cannot encode the seal key's public half")?;
        let public = describe_public_key(spki.as_bytes());
        Ok(SealKeyPair { secret, public })
    }

    /// The private key, to open boxes sealed for this device.
    pub fn secret(&self) -> &SecretKey {
        &self.secret
    }

    /// The public key as reported to the server.
    pub fn public(&self) -> &SealKey {
        &self.public
    }

    /// Encrypts the private key under the local key (made if absent) and stores it.
    ///
    /// # Errors
    /// When a file cannot be written.
    pub fn save(&self, data_dir: &DataDir) -> Result<()> {
        let cipher = local_cipher(data_dir, true)?;
        let der = self
            .secret
            .to_pkcs8_der()
            .context("cannot encode the seal key")?;
        let mut nonce = [0u8; 12];
        OsRng.fill_bytes(&mut nonce);
        let ciphertext = cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: der.as_bytes(),
                    aad: STORAGE_AAD,
                },
            )
            .map_err(|_| anyhow::anyhow!("cannot encrypt the seal key"))?;
        let stored = StoredSealKey {
            v: 1,
            alg: SEAL_KEY_ALG.to_owned(),
            kid: self.public.kid.clone(),
            nonce: URL_SAFE_NO_PAD.encode(nonce),
            ciphertext: URL_SAFE_NO_PAD.encode(ciphertext),
        };
        data_dir.write_file(SEAL_KEY_FILE, &serde_json::to_vec_pretty(&stored)?)
    }

    /// Loads and decrypts the stored key pair, `None` when there is none.
    ///
    /// # Errors
    /// When the file or the local key is unreadable, or decryption fails (a tampered file or
    /// a different local key).
    pub fn load(data_dir: &DataDir) -> Result<Option<SealKeyPair>> {
        let Some(bytes) = data_dir.read_file(SEAL_KEY_FILE)? else {
            return Ok(None);
        };
        let stored: StoredSealKey =
            serde_json::from_slice(&bytes).context("seal-key.json is not valid")?;
        let cipher = local_cipher(data_dir, false)?;
        let nonce = URL_SAFE_NO_PAD
            .decode(&stored.nonce)
            .context("seal key nonce")?;
        let ciphertext = URL_SAFE_NO_PAD
            .decode(&stored.ciphertext)
            .context("seal key")?;
        let nonce: [u8; 12] = nonce
            .try_into()
            .map_err(|_| anyhow::anyhow!("seal-key.json has a bad nonce"))?;
        let der = cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &ciphertext,
                    aad: STORAGE_AAD,
                },
            )
            .map_err(|_| anyhow::anyhow!("cannot decrypt seal-key.json with local.key"))?;
        let secret = SecretKey::from_pkcs8_der(&der).context("seal key is not PKCS#8")?;
        let pair = SealKeyPair::from_secret(secret)?;
        if pair.public.kid != stored.kid {
            bail!("seal-key.json holds another key than its kid says");
        }
        Ok(Some(pair))
    }

    /// Deletes the stored key pair (unpairing). The local key stays for the next pairing.
    ///
    /// # Errors
    /// When the file exists but cannot be removed.
    pub fn forget(data_dir: &DataDir) -> Result<()> {
        data_dir.remove_file(SEAL_KEY_FILE)
    }
}

/// Derives the reported form of a public key from its SPKI DER.
pub fn describe_public_key(spki_der: &[u8]) -> SealKey {
    let digest = Sha256::digest(spki_der);
    SealKey {
        kid: URL_SAFE_NO_PAD.encode(&digest[..16]),
        alg: SEAL_KEY_ALG.to_owned(),
        spki: URL_SAFE_NO_PAD.encode(spki_der),
        fingerprint: format!("SHA256:{}", URL_SAFE_NO_PAD.encode(digest)),
    }
}

pub(crate) fn local_cipher(data_dir: &DataDir, create: bool) -> Result<Aes256Gcm> {
    let key = match data_dir.read_file(LOCAL_KEY_FILE)? {
        Some(key) => key,
        None if create => {
            let mut key = vec![0u8; 32];
            OsRng.fill_bytes(&mut key);
            data_dir.write_file(LOCAL_KEY_FILE, &key)?;
            key
        }
        None => bail!("local.key is missing, so the seal key cannot be opened; pair again"),
    };
    Aes256Gcm::new_from_slice(&key).map_err(|_| anyhow::anyhow!("local.key is not 32 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_key_description_has_the_documented_format() {
        // A fixed input so the expected values are checkable by hand:
        // SHA-256("abc") = ba7816bf 8f01cfea 414140de 5dae2223 b00361a3 96177a9c b410ff61 f20015ad.
        let described = describe_public_key(b"abc");
        assert_eq!(
            described,
            SealKey {
                kid: "ungWv48Bz-pBQUDeXa4iIw".to_owned(),
                alg: "ECDH-P256".to_owned(),
                spki: "YWJj".to_owned(),
                fingerprint: "SHA256:ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0".to_owned(),
            }
        );
    }

    #[test]
    fn generated_keys_are_p256_spki_and_distinct() -> Result<()> {
        let first = SealKeyPair::generate()?;
        let second = SealKeyPair::generate()?;
        let public = first.public();
        assert_ne!(public.kid, second.public().kid);
        assert_eq!(public.kid.len(), 22, "16 bytes in unpadded base64url");
        assert_eq!(public.fingerprint.len(), "SHA256:".len() + 43);
        let spki = URL_SAFE_NO_PAD.decode(&public.spki)?;
        // An uncompressed P-256 SubjectPublicKeyInfo is 91 bytes.
        assert_eq!(spki.len(), 91);
        assert_eq!(describe_public_key(&spki), *public);
        Ok(())
    }

    #[test]
    fn stored_key_round_trips_and_needs_the_local_key() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        assert!(SealKeyPair::load(&data_dir)?.is_none());
        let pair = SealKeyPair::generate()?;
        pair.save(&data_dir)?;
        let loaded = SealKeyPair::load(&data_dir)?;
        assert_eq!(
            loaded.map(|loaded| loaded.public().clone()),
            Some(pair.public().clone())
        );

        // The file holds no plaintext key material.
        let stored = data_dir.read_file(SEAL_KEY_FILE)?.unwrap_or_default();
        let der = pair.secret.to_pkcs8_der()?;
        let stored_text = String::from_utf8_lossy(&stored);
        assert!(!stored_text.contains(&URL_SAFE_NO_PAD.encode(der.as_bytes())));

        // Another local key cannot open it.
        data_dir.write_file(LOCAL_KEY_FILE, &[7u8; 32])?;
        assert!(SealKeyPair::load(&data_dir).is_err());

        SealKeyPair::forget(&data_dir)?;
        assert!(SealKeyPair::load(&data_dir)?.is_none());
        Ok(())
    }
}
