//! The secrets vault: values the owner sent sealed from the web, opened with this device's
//! seal key and kept encrypted under the local key (`secrets.vault`, AES-256-GCM, 0600).
//!
//! **Invariant:** a box's `jti` is recorded as seen in the *same* atomic file write that
//! stores its value, so a crash can never keep the value without the replay record (or the
//! other way round); a `jti` seen before is refused, also after a restart. Values never
//! leave this module except as a run's environment variables, as the values `secret-http`
//! puts into a request to a secret's allowed sites, and as the redaction list.
//!
//! A secret sealed with allowed sites (the aad's `allow`) keeps that list beside its value
//! and is never put in an environment: a run uses it by reference ([`crate::run::secret_http`]).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tether_protocol::secrets::{valid_name, DeliveryAnswer};
use tether_protocol::sites::{self, Site};
use tether_protocol::{DeliveryId, DeviceId};
use tether_seal::{self as seal, AadExpectation, CheckedBox, Envelope, Kid, SealError};

use crate::local::encrypted_file::EncryptedFile;
use crate::local::seal_key::SealKeyPair;
use crate::local::state::DataDir;

const VAULT_FILE: &str = "secrets.vault";
/// How long a seen `jti` is kept after its box expired (boxes are refused once expired
/// anyway; the margin covers clock steps).
const SEEN_GRACE_SECS: i64 = 24 * 3600;
/// What replaces a saved value in anything that leaves this computer.
pub const HIDDEN: &str = "[hidden]";

/// `secrets.vault`, changed by the daemon (two boxes opening at once) and `secrets forget`.
static VAULT: EncryptedFile = EncryptedFile::new(
    VAULT_FILE,
    "secrets.lock",
    b"tether/secrets-vault/v1",
    "the secrets vault",
);

/// One saved secret.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    value: String,
    saved_at: i64,
    /// The sites it may be sent to, as sealed in its box; `None` for an environment secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allow: Option<Vec<String>>,
}

/// The decrypted vault.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Contents {
    secrets: BTreeMap<String, Entry>,
    /// `jti` → the box's expiry (unix seconds).
    seen: BTreeMap<String, i64>,
    /// Deliveries (the server's delivery ids) whose box was saved → the box's expiry. The
    /// server sends a box again when it never got the answer; the same delivery is then
    /// answered "saved" again without opening anything. A seen box under any other delivery
    /// stays a replay.
    #[serde(default)]
    saved_deliveries: BTreeMap<String, i64>,
}

/// A name the vault holds, for `secrets list` (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedName {
    pub name: String,
    pub saved_at: i64,
    pub allow: Option<Vec<String>>,
}

/// The secrets a job names, as its run gets them.
#[derive(Clone, Default)]
pub struct NamedSecrets {
    /// Name and value of each secret without allowed sites: the run's environment.
    pub env: Vec<(String, String)>,
    /// Every named secret, for `secret-http`; a limited one only to its sites.
    pub references: Vec<Reference>,
}

/// A secret a run may use by reference.
#[derive(Clone)]
pub struct Reference {
    pub name: String,
    pub value: String,
    /// Where it may go; `None` for a secret the run also has as a variable.
    pub sites: Option<Vec<Site>>,
}

/// Why a box was not saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("{0}")]
    Seal(#[from] SealError),
    #[error("the value is not UTF-8 text without NUL bytes")]
    NotText,
    #[error("the name is not a valid secret name")]
    BadName,
    #[error("cannot store the secret: {0:#}")]
    Storage(anyhow::Error),
}

/// The vault of one data dir.
pub struct Vault<'a> {
    data_dir: &'a DataDir,
}

impl<'a> Vault<'a> {
    pub fn new(data_dir: &'a DataDir) -> Vault<'a> {
        Vault { data_dir }
    }

    /// Names and saved times, by name.
    ///
    /// # Errors
    /// When the vault cannot be read or decrypted.
    pub fn list(&self) -> Result<Vec<SavedName>> {
        let contents = self.load()?;
        Ok(contents
            .secrets
            .iter()
            .map(|(name, entry)| SavedName {
                name: name.clone(),
                saved_at: entry.saved_at,
                allow: entry.allow.clone(),
            })
            .collect())
    }

    /// Forgets one secret. Returns whether it was there.
    ///
    /// # Errors
    /// When the vault cannot be read or written.
    pub fn forget(&self, name: &str) -> Result<bool> {
        self.update(|contents| Ok(contents.secrets.remove(name).is_some()))
    }

    /// The secrets `names` names, split into a run's environment and its references; the
    /// first missing name is the error. A stored site list that no longer parses keeps the
    /// secret out of the environment and unusable, rather than unlimited.
    ///
    /// # Errors
    /// [`Missing`] naming a secret the vault does not hold; or the vault is unreadable.
    pub fn named(&self, names: &[String]) -> Result<NamedSecrets, Missing> {
        let contents = self
            .load()
            .map_err(|err| Missing(format!("(vault unreadable: {err:#})")))?;
        let mut named = NamedSecrets::default();
        for name in names {
            let entry = contents
                .secrets
                .get(name)
                .ok_or_else(|| Missing(name.clone()))?;
            let sites = match &entry.allow {
                None => {
                    named.env.push((name.clone(), entry.value.clone()));
                    None
                }
                Some(allow) => Some(sites::parse_list(allow).unwrap_or_default()),
            };
            named.references.push(Reference {
                name: name.clone(),
                value: entry.value.clone(),
                sites,
            });
        }
        Ok(named)
    }

    /// Every saved value, for redaction. An unreadable vault gives none (and is logged).
    pub fn all_values(&self) -> Vec<String> {
        match self.load() {
            Ok(contents) => contents
                .secrets
                .into_values()
                .map(|entry| entry.value)
                .collect(),
            Err(err) => {
                tracing::warn!("cannot read the secrets vault for redaction: {err:#}");
                Vec::new()
            }
        }
    }

    /// Stores a checked box under `name`, refusing a `jti` seen before; the value, the `jti`
    /// and the delivery go to disk in one atomic write. The same delivery again (its answer
    /// was lost) is `Ok` and changes nothing.
    ///
    /// # Errors
    /// [`SealError::Replayed`] for a seen `jti`, or a storage failure.
    pub fn save(
        &self,
        delivery_id: &DeliveryId,
        name: &str,
        checked: CheckedBox,
        now: i64,
    ) -> Result<(), SaveError> {
        if !valid_name(name) {
            return Err(SaveError::BadName);
        }
        let jti = checked.jti().as_str().to_owned();
        let exp = checked.aad().exp;
        let allow = checked.aad().allow.clone();
        let outcome = self.update(|contents| {
            if contents.seen.contains_key(&jti) {
                if contents.saved_deliveries.contains_key(delivery_id.as_str()) {
                    return Ok(Ok(()));
                }
                return Ok(Err(SaveError::Seal(SealError::Replayed)));
            }
            // Only now, with the jti unseen, is the value taken.
            let Ok(value) = String::from_utf8(checked.into_plaintext().to_vec()) else {
                return Ok(Err(SaveError::NotText));
            };
            if value.contains('\0') {
                return Ok(Err(SaveError::NotText));
            }
            contents
                .seen
                .retain(|_, seen_exp| *seen_exp + SEEN_GRACE_SECS > now);
            contents
                .saved_deliveries
                .retain(|_, seen_exp| *seen_exp + SEEN_GRACE_SECS > now);
            contents.seen.insert(jti.clone(), exp);
            contents
                .saved_deliveries
                .insert(delivery_id.as_str().to_owned(), exp);
            contents.secrets.insert(
                name.to_owned(),
                Entry {
                    value,
                    saved_at: now,
                    allow,
                },
            );
            Ok(Ok(()))
        });
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refused)) => Err(refused),
            Err(err) => Err(SaveError::Storage(err)),
        }
    }

    /// Load, change and write back under both locks. The closure's `Err` aborts without
    /// writing; an `Ok` is written (even when it refused, the file is unchanged in meaning).
    fn update<T>(&self, change: impl FnOnce(&mut Contents) -> Result<T>) -> Result<T> {
        VAULT.update(self.data_dir, change)
    }

    fn load(&self) -> Result<Contents> {
        VAULT.load(self.data_dir)
    }
}

/// A secret a job names that this computer does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the secret {0} is not saved on this computer")]
pub struct Missing(pub String);

/// Handles a `secret.save` frame: opens the box with this device's key (pinned kid, strict
/// aad: purpose secret, this device, no decision, the frame's name, expiry), refuses a seen
/// `jti`, stores the value. Returns the answer for the server — never the value.
pub fn receive(
    data_dir: &DataDir,
    delivery_id: &DeliveryId,
    key: &SealKeyPair,
    device_id: &DeviceId,
    name: &str,
    sealed: &serde_json::Value,
    now: i64,
) -> DeliveryAnswer {
    let refused = |error: String| {
        tracing::warn!(name, "secret refused: {error}");
        DeliveryAnswer {
            saved: false,
            name: name.to_owned(),
            error: Some(error),
        }
    };
    let opened = (|| -> Result<CheckedBox, SaveError> {
        if !valid_name(name) {
            return Err(SaveError::BadName);
        }
        let envelope = Envelope::from_json(sealed)?;
        let kid = Kid::parse(&key.public().kid)?;
        let opened = seal::open(key.secret(), &kid, device_id, &envelope)?;
        let expected = AadExpectation {
            device: device_id,
            kid: &kid,
            decision: None,
            name,
        };
        Ok(opened.check(&expected, now)?)
    })();
    let checked = match opened {
        Ok(checked) => checked,
        Err(err) => return refused(err.to_string()),
    };
    match Vault::new(data_dir).save(delivery_id, name, checked, now) {
        Ok(()) => {
            tracing::info!(name, "secret saved");
            DeliveryAnswer {
                saved: true,
                name: name.to_owned(),
                error: None,
            }
        }
        Err(err) => refused(err.to_string()),
    }
}

/// Values shorter than this many characters are not hidden: a value such as `1` or `yes`
/// would turn every line into `[hidden]` and protect nothing (the Computers page says so).
pub const MIN_HIDDEN_CHARS: usize = 6;

/// Whether [`redact`] hides `value`.
pub fn is_hidden_in_output(value: &str) -> bool {
    value.chars().count() >= MIN_HIDDEN_CHARS
}

/// Replaces every occurrence of each value with [`HIDDEN`], longest values first (so a value
/// containing another is hidden whole). Values shorter than [`MIN_HIDDEN_CHARS`] are ignored.
pub fn redact(text: &str, values: &[String]) -> String {
    let mut values: Vec<&str> = values
        .iter()
        .map(String::as_str)
        .filter(|v| is_hidden_in_output(v))
        .collect();
    if values.is_empty() {
        return text.to_owned();
    }
    values.sort_by_key(|value| std::cmp::Reverse(value.len()));
    let mut out = text.to_owned();
    for value in values {
        if out.contains(value) {
            out = out.replace(value, HIDDEN);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use rand::rngs::OsRng;
    use tether_seal::{Aad, Jti, Recipient};

    fn delivery(raw: &str) -> DeliveryId {
        DeliveryId::parse(raw).unwrap_or_else(|err| panic!("{err}"))
    }

    fn setup() -> Result<(tempfile::TempDir, DataDir, SealKeyPair, DeviceId)> {
        let dir = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(dir.path().join("data")))?;
        let key = SealKeyPair::generate()?;
        key.save(&data_dir)?;
        Ok((dir, data_dir, key, DeviceId::generate()))
    }

    fn sealed(
        key: &SealKeyPair,
        device: &DeviceId,
        name: &str,
        value: &str,
        jti: &Jti,
        exp: i64,
    ) -> Result<serde_json::Value> {
        sealed_for_sites(key, device, name, value, jti, exp, None)
    }

    fn sealed_for_sites(
        key: &SealKeyPair,
        device: &DeviceId,
        name: &str,
        value: &str,
        jti: &Jti,
        exp: i64,
        allow: Option<Vec<String>>,
    ) -> Result<serde_json::Value> {
        let recipient = Recipient::from_seal_key(key.public())?;
        let mut aad = Aad::secret(
            device.clone(),
            recipient.kid().clone(),
            None,
            name.to_owned(),
            exp,
            jti.clone(),
        );
        aad.allow = allow;
        let envelope = seal::seal(
            &recipient,
            device,
            &aad.to_bytes(),
            value.as_bytes(),
            &mut OsRng,
        )?;
        Ok(serde_json::to_value(envelope)?)
    }

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn saves_lists_and_forgets() -> Result<()> {
        let (_dir, data_dir, key, device) = setup()?;
        let jti = Jti::random(&mut OsRng);
        let answer = receive(
            &data_dir,
            &delivery("delivery-1"),
            &key,
            &device,
            "API_KEY",
            &sealed(&key, &device, "API_KEY", "s3cr3t", &jti, NOW + 60)?,
            NOW,
        );
        assert!(answer.saved, "{answer:?}");
        let vault = Vault::new(&data_dir);
        assert_eq!(
            vault.list()?,
            vec![SavedName {
                name: "API_KEY".into(),
                saved_at: NOW,
                allow: None,
            }]
        );
        assert_eq!(
            vault.named(&["API_KEY".into()])?.env,
            vec![("API_KEY".into(), "s3cr3t".into())]
        );
        assert_eq!(
            vault.named(&["NOPE".into()]).err(),
            Some(Missing("NOPE".into()))
        );
        // Encrypted at rest, 0600.
        let raw = std::fs::read(data_dir.path(VAULT_FILE))?;
        assert!(!String::from_utf8_lossy(&raw).contains("s3cr3t"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(data_dir.path(VAULT_FILE))?
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(vault.forget("API_KEY")?);
        assert!(!vault.forget("API_KEY")?);
        assert!(vault.list()?.is_empty());
        Ok(())
    }

    #[test]
    fn a_secret_limited_to_sites_is_never_in_the_environment() -> Result<()> {
        let (_dir, data_dir, key, device) = setup()?;
        let sites = vec!["api.example.com".to_owned()];
        for (name, value, allow) in [
            ("LIMITED", "l1m1t3d", Some(sites.clone())),
            ("PLAIN", "pl41n", None),
        ] {
            let box_ = sealed_for_sites(
                &key,
                &device,
                name,
                value,
                &Jti::random(&mut OsRng),
                NOW + 60,
                allow,
            )?;
            assert!(receive(&data_dir, &delivery("d"), &key, &device, name, &box_, NOW).saved);
        }
        let vault = Vault::new(&data_dir);
        let listed = vault.list()?;
        assert_eq!(listed[0].name, "LIMITED");
        assert_eq!(listed[0].allow, Some(sites));
        let named = vault.named(&["LIMITED".into(), "PLAIN".into()])?;
        assert_eq!(named.env, vec![("PLAIN".into(), "pl41n".into())]);
        let limited = &named.references[0];
        assert_eq!(
            (limited.name.as_str(), limited.value.as_str()),
            ("LIMITED", "l1m1t3d")
        );
        assert_eq!(
            limited
                .sites
                .as_ref()
                .map(|s| s.iter().map(ToString::to_string).collect()),
            Some(vec!["api.example.com".to_owned()])
        );
        assert!(named.references[1].sites.is_none());
        // A box whose list is not canonical is refused whole.
        let bad = sealed_for_sites(
            &key,
            &device,
            "BAD",
            "v",
            &Jti::random(&mut OsRng),
            NOW + 60,
            Some(vec!["http://api.example.com".into()]),
        )?;
        let answer = receive(&data_dir, &delivery("d2"), &key, &device, "BAD", &bad, NOW);
        assert!(!answer.saved);
        assert!(answer.error.unwrap_or_default().contains("allowed sites"));
        Ok(())
    }

    #[test]
    fn a_replayed_box_is_refused_also_after_reload_and_forget() -> Result<()> {
        let (_dir, data_dir, key, device) = setup()?;
        let jti = Jti::random(&mut OsRng);
        let box_ = sealed(&key, &device, "TOKEN", "one", &jti, NOW + 60)?;
        assert!(
            receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "TOKEN",
                &box_,
                NOW
            )
            .saved
        );
        let again = receive(
            &data_dir,
            &delivery("delivery-2"),
            &key,
            &device,
            "TOKEN",
            &box_,
            NOW + 1,
        );
        assert!(!again.saved);
        assert!(again.error.unwrap_or_default().contains("already opened"));
        // A fresh process (new key load, new Vault) still refuses it, even once forgotten.
        let reloaded = SealKeyPair::load(&data_dir)?.context("no key")?;
        Vault::new(&data_dir).forget("TOKEN")?;
        assert!(
            !receive(
                &data_dir,
                &delivery("delivery-3"),
                &reloaded,
                &device,
                "TOKEN",
                &box_,
                NOW + 2
            )
            .saved
        );
        assert!(Vault::new(&data_dir).list()?.is_empty());
        Ok(())
    }

    #[test]
    fn a_delivery_sent_again_after_a_lost_answer_is_saved_once() -> Result<()> {
        let (_dir, data_dir, key, device) = setup()?;
        let first = sealed(
            &key,
            &device,
            "TOKEN",
            "one",
            &Jti::random(&mut OsRng),
            NOW + 60,
        )?;
        assert!(
            receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "TOKEN",
                &first,
                NOW
            )
            .saved
        );
        let second = sealed(
            &key,
            &device,
            "TOKEN",
            "two",
            &Jti::random(&mut OsRng),
            NOW + 60,
        )?;
        assert!(
            receive(
                &data_dir,
                &delivery("delivery-2"),
                &key,
                &device,
                "TOKEN",
                &second,
                NOW
            )
            .saved
        );
        // The server sends delivery 1 again (it lost the answer): saved, and nothing changes.
        assert!(
            receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "TOKEN",
                &first,
                NOW + 1
            )
            .saved
        );
        let vault = Vault::new(&data_dir);
        assert_eq!(
            vault
                .named(&["TOKEN".to_owned()])
                .ok()
                .map(|named| named.env),
            Some(vec![("TOKEN".to_owned(), "two".to_owned())])
        );
        Ok(())
    }

    #[test]
    fn racing_opens_of_one_box_save_once() -> Result<()> {
        let (_dir, data_dir, key, device) = setup()?;
        let jti = Jti::random(&mut OsRng);
        let box_ = sealed(&key, &device, "RACE", "v", &jti, NOW + 60)?;
        let saved = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|n| {
                    let delivery = delivery(&format!("delivery-{n}"));
                    let (data_dir, key, device, box_) = (&data_dir, &key, &device, &box_);
                    scope.spawn(move || {
                        receive(data_dir, &delivery, key, device, "RACE", box_, NOW).saved
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(false))
                .filter(|s| *s)
                .count()
        });
        assert_eq!(saved, 1);
        Ok(())
    }

    #[test]
    fn wrong_name_device_expiry_and_tampering_are_refused() -> Result<()> {
        let (_dir, data_dir, key, device) = setup()?;
        let jti = Jti::random(&mut OsRng);
        let box_ = sealed(&key, &device, "NAME", "v", &jti, NOW + 60)?;
        assert!(
            !receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "OTHER",
                &box_,
                NOW
            )
            .saved
        );
        assert!(
            !receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &DeviceId::generate(),
                "NAME",
                &box_,
                NOW
            )
            .saved
        );
        assert!(
            !receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "NAME",
                &box_,
                NOW + 61
            )
            .saved
        );
        let far = sealed(
            &key,
            &device,
            "NAME",
            "v",
            &Jti::random(&mut OsRng),
            NOW + 3600,
        )?;
        assert!(
            !receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "NAME",
                &far,
                NOW
            )
            .saved
        );
        let other_key = SealKeyPair::generate()?;
        assert!(
            !receive(
                &data_dir,
                &delivery("delivery-1"),
                &other_key,
                &device,
                "NAME",
                &box_,
                NOW
            )
            .saved
        );
        // None of the refusals burnt the jti.
        assert!(
            receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "NAME",
                &box_,
                NOW
            )
            .saved
        );
        Ok(())
    }

    #[test]
    fn a_tampered_vault_is_refused() -> Result<()> {
        let (_dir, data_dir, key, device) = setup()?;
        let box_ = sealed(&key, &device, "A", "v", &Jti::random(&mut OsRng), NOW + 60)?;
        assert!(
            receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "A",
                &box_,
                NOW
            )
            .saved
        );
        let raw = std::fs::read(data_dir.path(VAULT_FILE))?;
        let mut stored: serde_json::Value = serde_json::from_slice(&raw)?;
        let mut ct = URL_SAFE_NO_PAD.decode(stored["ciphertext"].as_str().unwrap_or_default())?;
        ct[0] ^= 1;
        stored["ciphertext"] = URL_SAFE_NO_PAD.encode(ct).into();
        std::fs::write(data_dir.path(VAULT_FILE), serde_json::to_vec(&stored)?)?;
        assert!(Vault::new(&data_dir).list().is_err());
        // And a new box is not saved over it (that would drop the replay records).
        let other = sealed(&key, &device, "B", "w", &Jti::random(&mut OsRng), NOW + 60)?;
        assert!(
            !receive(
                &data_dir,
                &delivery("delivery-1"),
                &key,
                &device,
                "B",
                &other,
                NOW
            )
            .saved
        );
        Ok(())
    }

    #[test]
    fn redaction_hides_every_value_of_six_characters_or_more() -> Result<()> {
        let values = vec![
            "abcdef".to_owned(),
            "abcdefgh".to_owned(),
            "1".to_owned(),
            "yes".to_owned(),
            String::new(),
        ];
        assert_eq!(
            redact("x abcdefgh y abcdef z 1 yes", &values),
            "x [hidden] y [hidden] z 1 yes"
        );
        assert!(is_hidden_in_output("éééééé"), "characters, not bytes");
        assert!(!is_hidden_in_output("ééééé"));
        assert_eq!(redact("nothing here", &values), "nothing here");
        assert_eq!(redact("nothing here", &[]), "nothing here");
        Ok(())
    }
}
