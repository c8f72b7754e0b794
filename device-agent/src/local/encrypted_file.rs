//! A JSON document kept in one file of the data dir, AES-256-GCM-encrypted under the local
//! key (`{"v":1,"nonce","ciphertext"}`, 0600, written atomically): `secrets.vault` and
//! `github.vault`. A change loads, changes and writes it back under an in-process mutex and
//! a lock file, so neither two tasks nor two processes (the daemon and the command line)
//! lose each other's writes.

use std::sync::{Mutex, PoisonError};

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::Nonce;
use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::rngs::OsRng;
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::local::seal_key::local_cipher;
use crate::local::state::DataDir;

/// One encrypted file of the data dir.
pub struct EncryptedFile {
    /// Its name in the data dir.
    name: &'static str,
    /// The lock file changes take across processes.
    lock_name: &'static str,
    /// Binds the ciphertext to what the file is for, so one file cannot pass for another.
    aad: &'static [u8],
    /// What an encryption failure calls it.
    described: &'static str,
    /// Serialises changes inside this process.
    mutex: Mutex<()>,
}

/// The file on disk.
#[derive(Serialize, Deserialize)]
struct Stored {
    v: u32,
    nonce: String,
    ciphertext: String,
}

impl EncryptedFile {
    pub const fn new(
        name: &'static str,
        lock_name: &'static str,
        aad: &'static [u8],
        described: &'static str,
    ) -> EncryptedFile {
        EncryptedFile {
            name,
            lock_name,
            aad,
            described,
            mutex: Mutex::new(()),
        }
    }

    /// Loads `document`, changes it and writes it back under both locks. The closure's
    /// `Err` aborts without writing; an `Ok` is written.
    ///
    /// # Errors
    /// The closure's, or when the file cannot be read, decrypted or written.
    pub fn update<D, T>(
        &self,
        data_dir: &DataDir,
        change: impl FnOnce(&mut D) -> Result<T>,
    ) -> Result<T>
    where
        D: Default + Serialize + DeserializeOwned,
    {
        let _guard = self.mutex.lock().unwrap_or_else(PoisonError::into_inner);
        let _file_lock = data_dir.lock_file(self.lock_name)?;
        let mut document = self.load(data_dir)?;
        let answer = change(&mut document)?;
        self.store(data_dir, &document)?;
        Ok(answer)
    }

    /// The document, empty when there is no file yet.
    ///
    /// # Errors
    /// When the file cannot be read or decrypted (tampered, or another `local.key`).
    pub fn load<D: Default + DeserializeOwned>(&self, data_dir: &DataDir) -> Result<D> {
        let Some(bytes) = data_dir.read_file(self.name)? else {
            return Ok(D::default());
        };
        let name = self.name;
        let stored: Stored =
            serde_json::from_slice(&bytes).with_context(|| format!("{name} is not valid"))?;
        if stored.v != 1 {
            bail!("{name} has an unknown version");
        }
        let nonce: [u8; 12] = URL_SAFE_NO_PAD
            .decode(&stored.nonce)
            .ok()
            .and_then(|nonce| nonce.try_into().ok())
            .with_context(|| format!("{name} has a bad nonce"))?;
        let ciphertext = URL_SAFE_NO_PAD
            .decode(&stored.ciphertext)
            .with_context(|| format!("{name} has a bad ciphertext"))?;
        let payload = Payload {
            msg: &ciphertext,
            aad: self.aad,
        };
        let plain = local_cipher(data_dir, false)?
            .decrypt(&Nonce::from(nonce), payload)
            .map_err(|_| {
                anyhow::anyhow!("cannot decrypt {name} (tampered, or another local.key)")
            })?;
        serde_json::from_slice(&plain).with_context(|| format!("{name} holds no vault"))
    }

    fn store<D: Serialize>(&self, data_dir: &DataDir, document: &D) -> Result<()> {
        let cipher = local_cipher(data_dir, true)?;
        let plain = serde_json::to_vec(document)?;
        let mut nonce = [0u8; 12];
        OsRng.fill_bytes(&mut nonce);
        let payload = Payload {
            msg: &plain,
            aad: self.aad,
        };
        let ciphertext = cipher
            .encrypt(&Nonce::from(nonce), payload)
            .map_err(|_| anyhow::anyhow!("cannot encrypt {}", self.described))?;
        let stored = Stored {
            v: 1,
            nonce: URL_SAFE_NO_PAD.encode(nonce),
            ciphertext: URL_SAFE_NO_PAD.encode(ciphertext),
        };
        data_dir.write_file(self.name, &serde_json::to_vec(&stored)?)
    }
}
