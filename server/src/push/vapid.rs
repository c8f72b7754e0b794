//! The server's VAPID identity (RFC 8292): one P-256 key pair, given by
//! `TETHER_VAPID_PRIVATE_KEY` or made once and kept in the data dir (`push-vapid.key`, mode
//! 0600), and the `Authorization: vapid t=…, k=…` header each push carries.
//!
//! Browsers bind a subscription to the public key they were given, so the key must outlive
//! restarts, and every replica must use the same one.

use std::fmt;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use p256::elliptic_curve::rand_core::OsRng;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::SecretKey;
use serde_json::json;

/// The file in the data dir that holds the key made there.
pub const KEY_FILE: &str = "push-vapid.key";
/// How long a VAPID token is valid; RFC 8292 allows at most 24 hours.
pub const TOKEN_SECS: i64 = 12 * 3600;

/// The server's VAPID key pair. Its `Debug` shows the public half only.
pub struct VapidKey {
    signing: SigningKey,
    /// The uncompressed public point, base64url without padding.
    public_key: String,
}

impl fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VapidKey({})", self.public_key)
    }
}

impl VapidKey {
    /// The key from `TETHER_VAPID_PRIVATE_KEY` when given, else the one in `data_dir`,
    /// made there first if there is none.
    ///
    /// # Errors
    /// A given key that is not base64url of a valid P-256 scalar, or a key file that cannot
    /// be read, made or parsed.
    pub fn load(configured: Option<&str>, data_dir: &Path) -> anyhow::Result<VapidKey> {
        match configured {
            Some(encoded) => VapidKey::from_base64(encoded).context("TETHER_VAPID_PRIVATE_KEY"),
            None => VapidKey::load_or_create(data_dir),
        }
    }

    /// # Errors
    /// When `encoded` is not base64url (padding allowed) of a 32-byte P-256 scalar.
    pub fn from_base64(encoded: &str) -> anyhow::Result<VapidKey> {
        let bytes = URL_SAFE_NO_PAD
            .decode(encoded.trim().trim_end_matches('='))
            // Without the decoder's detail, which would quote the key.
            .map_err(|_| anyhow::anyhow!("the key must be base64url"))?;
        let secret = SecretKey::from_slice(&bytes)
            .map_err(|_| anyhow::anyhow!("the key must be a 32-byte P-256 private scalar"))?;
        Ok(VapidKey::from_secret(&secret))
    }

    fn from_secret(secret: &SecretKey) -> VapidKey {
        let point = secret.public_key().to_encoded_point(false);
        VapidKey {
            signing: SigningKey::from(secret),
            public_key: URL_SAFE_NO_PAD.encode(point.as_bytes()),
        }
    }

    /// The uncompressed public point, base64url without padding (`applicationServerKey`).
    pub fn public_key(&self) -> &str {
        &self.public_key
    }

    /// `vapid t=<ES256 JWT>, k=<public key>` for a push to `audience` (the endpoint's
    /// origin), valid until `expires_at` (unix seconds), naming `subject` when there is one.
    pub fn authorization(&self, audience: &str, expires_at: i64, subject: Option<&str>) -> String {
        let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let mut claims = json!({ "aud": audience, "exp": expires_at });
        if let Some(subject) = subject {
            claims["sub"] = json!(subject);
        }
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signing_input = format!("{header}.{claims}");
        // ES256 is the raw r || s pair (JWS, RFC 7518 §3.4), not DER.
        let signature: Signature = self.signing.sign(signing_input.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(signature.to_bytes());
        format!("vapid t={signing_input}.{signature}, k={}", self.public_key)
    }

    /// The key in `data_dir/push-vapid.key`, made there when missing. Made keys are written
    /// to a temporary file and linked into place, so replicas starting together on one data
    /// dir end up with the one key that won.
    fn load_or_create(data_dir: &Path) -> anyhow::Result<VapidKey> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating data dir {}", data_dir.display()))?;
        let path = data_dir.join(KEY_FILE);
        if !path.exists() {
            create(data_dir, &path)?;
        }
        tighten_permissions(&path);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        VapidKey::from_base64(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

fn create(data_dir: &Path, path: &Path) -> anyhow::Result<()> {
    let secret = SecretKey::random(&mut OsRng);
    let encoded = URL_SAFE_NO_PAD.encode(secret.to_bytes());
    let temporary = data_dir.join(format!("{KEY_FILE}.{}.tmp", random_suffix()));
    let written = write_private(&temporary, &encoded);
    let linked = written.and_then(|()| std::fs::hard_link(&temporary, path));
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => {
            tracing::info!(file = %path.display(), "made the Web Push (VAPID) key");
            Ok(())
        }
        // Another process made it first; its key is the one.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error).with_context(|| format!("writing {}", path.display())),
    }
}

fn random_suffix() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Writes `text` to a new file readable by its owner only, synced.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// A key file others can read is made owner-only again, and said so.
fn tighten_permissions(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(metadata) = std::fs::metadata(path) else {
            return;
        };
        if metadata.permissions().mode() & 0o077 != 0 {
            tracing::warn!(file = %path.display(), "the VAPID key file was readable by others; made 0600");
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Verifier;
    use p256::ecdsa::VerifyingKey;

    #[test]
    fn the_header_is_an_es256_token_for_the_audience() {
        let key = VapidKey::from_secret(&SecretKey::random(&mut OsRng));
        let header = key.authorization(
            "https://push.example.com",
            1_900_000_000,
            Some("mailto:ops@example.com"),
        );
        let (token, public) = header
            .strip_prefix("vapid t=")
            .and_then(|rest| rest.split_once(", k="))
            .unwrap();
        assert_eq!(public, key.public_key());
        let (signing_input, signature) = token.rsplit_once('.').unwrap();
        let (head, claims) = signing_input.split_once('.').unwrap();
        let head: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head).unwrap()).unwrap();
        assert_eq!(head["alg"], "ES256");
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
        assert_eq!(
            claims,
            json!({ "aud": "https://push.example.com", "exp": 1_900_000_000,
                    "sub": "mailto:ops@example.com" })
        );
        let verifying =
            VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(public).unwrap()).unwrap();
        let signature = Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
        assert!(verifying
            .verify(signing_input.as_bytes(), &signature)
            .is_ok());
    }

    #[test]
    fn a_made_key_is_kept_owner_only_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let made = VapidKey::load(None, dir.path()).unwrap();
        let again = VapidKey::load(None, dir.path()).unwrap();
        assert_eq!(made.public_key(), again.public_key());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "only the key file is left");
    }

    #[test]
    fn a_configured_key_wins_and_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = SecretKey::random(&mut OsRng);
        let encoded = URL_SAFE_NO_PAD.encode(secret.to_bytes());
        let key = VapidKey::load(Some(&encoded), dir.path()).unwrap();
        assert_eq!(
            key.public_key(),
            VapidKey::from_secret(&secret).public_key()
        );
        assert!(!dir.path().join(KEY_FILE).exists());
        for bad in ["", "!!!", "AAAA", &URL_SAFE_NO_PAD.encode([0u8; 32])] {
            assert!(VapidKey::from_base64(bad).is_err(), "{bad}");
        }
        assert!(!format!("{key:?}").contains(&encoded));
    }
}
