//! Where the device token rests: the OS keyring where this computer has one, else the
//! `device-token` file (0600) in the data dir.
//!
//! The keyring is the Secret Service on Linux (GNOME Keyring, KWallet, KeePassXC, reached
//! through `DBUS_SESSION_BUS_ADDRESS`) and the login Keychain on macOS; other systems have
//! only the file. The entry is service `tether-agent`, user the data dir's absolute path, so
//! two data dirs on one computer never share a token.
//!
//! `TETHER_TOKEN_STORE` chooses: `auto` (the default) keeps the token in the keyring when
//! storing it there and reading it back works, in the file otherwise; `keyring` does the same
//! but says so whenever it falls back; `file` never touches the keyring. Saving into the
//! keyring deletes the file; loading looks in the keyring first, then in the file; forgetting
//! removes both.
//!
//! A keyring that fails or does not answer never loses the token: it goes to the file and
//! the log (stderr) says why. In `auto`, a computer with no keyring at all (no session bus,
//! no Secret Service: a server) is normal and goes unmentioned.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

/// The variable that chooses the store.
pub const STORE_ENV: &str = "TETHER_TOKEN_STORE";
/// The keyring entry's service; its user is the data dir.
pub const SERVICE: &str = "tether-agent";
/// How long one keyring call may take (a locked keyring may show a prompt nobody answers)
/// before the file is used instead.
const KEYRING_WAIT: Duration = Duration::from_secs(30);

/// What `TETHER_TOKEN_STORE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Keyring,
    File,
}

impl Choice {
    fn parse(text: &str) -> Option<Choice> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(Choice::Auto),
            "keyring" => Some(Choice::Keyring),
            "file" => Some(Choice::File),
            _ => None,
        }
    }

    /// From `TETHER_TOKEN_STORE`; `auto` when unset or not understood (with a warning).
    /// Unit tests always use the file: they never reach this computer's own keyring.
    pub fn from_env() -> Choice {
        if cfg!(test) {
            return Choice::File;
        }
        let Ok(text) = std::env::var(STORE_ENV) else {
            return Choice::Auto;
        };
        Choice::parse(&text).unwrap_or_else(|| {
            tracing::warn!("{STORE_ENV}={text:?} is not auto, keyring or file; using auto");
            Choice::Auto
        })
    }
}

/// Where a token is kept, as `status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenPlace {
    Keyring,
    File,
}

/// Why a keyring call did not do its work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyringError {
    /// This computer has no keyring to speak to (no session bus, no Secret Service).
    Unavailable(String),
    /// There is one, and it failed or did not answer.
    Failed(String),
}

impl std::fmt::Display for KeyringError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyringError::Unavailable(why) | KeyringError::Failed(why) => f.write_str(why),
        }
    }
}

/// The one keyring entry the token goes in: the OS's, or a test's.
pub trait Keyring {
    /// The token, `None` when the entry holds none.
    fn get(&self) -> Result<Option<String>, KeyringError>;
    fn set(&self, token: &str) -> Result<(), KeyringError>;
    /// Removes the entry; absent is fine.
    fn delete(&self) -> Result<(), KeyringError>;
}

/// The token's file, as the data dir keeps it: `state::DataDir`, which owns every write
/// there, implements it.
pub trait TokenFile {
    /// The data dir, whose path names the keyring entry.
    fn dir(&self) -> &Path;
    /// Where the file is (for messages).
    fn file_path(&self) -> PathBuf;
    /// Its bytes, `None` when absent.
    fn read(&self) -> Result<Option<Vec<u8>>>;
    /// Writes it atomically, mode 0600.
    fn write(&self, bytes: &[u8]) -> Result<()>;
    /// Removes it; absent is fine.
    fn remove(&self) -> Result<()>;
}

/// The token's store for one data dir.
pub struct TokenStore<'a> {
    file: &'a dyn TokenFile,
    choice: Choice,
    /// `None` with `file`, and where the OS has no keyring this agent can use.
    keyring: Option<Box<dyn Keyring>>,
}

impl<'a> TokenStore<'a> {
    /// The store `TETHER_TOKEN_STORE` chooses for the data dir's `file`.
    pub fn open(file: &'a dyn TokenFile) -> TokenStore<'a> {
        let choice = Choice::from_env();
        let keyring = match choice {
            Choice::File => None,
            Choice::Auto | Choice::Keyring => os_keyring(file.dir()),
        };
        TokenStore::with(file, choice, keyring)
    }

    pub fn with(
        file: &'a dyn TokenFile,
        choice: Choice,
        keyring: Option<Box<dyn Keyring>>,
    ) -> TokenStore<'a> {
        let keyring = if choice == Choice::File {
            None
        } else {
            keyring
        };
        TokenStore {
            file,
            choice,
            keyring,
        }
    }

    /// The token and where it was found: the keyring first, then the file.
    ///
    /// # Errors
    /// When the file exists but cannot be read.
    pub fn load(&self) -> Result<Option<(String, TokenPlace)>> {
        if let Some(keyring) = &self.keyring {
            match keyring.get() {
                Ok(Some(token)) => return Ok(Some((token, TokenPlace::Keyring))),
                Ok(None) => {}
                Err(err) => self.fell_back("cannot read the device token from the keyring", &err),
            }
        }
        let bytes = self.file.read()?;
        Ok(bytes
            .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
            .filter(|token| !token.is_empty())
            .map(|token| (token, TokenPlace::File)))
    }

    /// Keeps `token` in the keyring (read back to be sure, and the file deleted), or in the
    /// file; says where.
    ///
    /// # Errors
    /// When the keyring did not take it and the file cannot be written.
    pub fn save(&self, token: &str) -> Result<TokenPlace> {
        if let Some(keyring) = &self.keyring {
            let stored = keyring.set(token).and_then(|()| keyring.get());
            match stored {
                Ok(Some(back)) if back == token => {
                    if let Err(err) = self.file.remove() {
                        tracing::warn!(
                            "the device token is in the keyring, but an older copy stays: {err:#}"
                        );
                    }
                    return Ok(TokenPlace::Keyring);
                }
                Ok(_) => self.fell_back(
                    "cannot keep the device token in the keyring",
                    &KeyringError::Failed("it read back something else".to_owned()),
                ),
                Err(err) => self.fell_back("cannot keep the device token in the keyring", &err),
            }
            // An older token left there would be found before the file's.
            let _ = keyring.delete();
        }
        self.file.write(token.as_bytes())?;
        Ok(TokenPlace::File)
    }

    /// Removes the token from the keyring and the file; absent is fine. A keyring that cannot
    /// be reached is said, not an error: the file goes anyway.
    ///
    /// # Errors
    /// When the file exists but cannot be removed.
    pub fn forget(&self) -> Result<()> {
        if let Some(keyring) = &self.keyring {
            if let Err(err) = keyring.delete() {
                self.fell_back("cannot remove the device token from the keyring", &err);
            }
        }
        self.file.remove()
    }

    /// Says why the keyring was passed over, unless `auto` found none to speak to.
    fn fell_back(&self, what: &str, err: &KeyringError) {
        match (self.choice, err) {
            (Choice::Auto, KeyringError::Unavailable(_)) => {}
            _ => tracing::warn!("{what} ({err}); using {}", self.file.file_path().display()),
        }
    }
}

/// The keyring entry of the data dir at `root`, where this system has a keyring.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn os_keyring(root: &Path) -> Option<Box<dyn Keyring>> {
    // Absolute and, once it exists, with links resolved: the same dir is the same entry
    // however it was named.
    let absolute = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let user = std::fs::canonicalize(&absolute).unwrap_or(absolute);
    Some(Box::new(os::OsKeyring {
        user: user.to_string_lossy().into_owned(),
    }))
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn os_keyring(_root: &Path) -> Option<Box<dyn Keyring>> {
    None
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
mod os {
    use std::sync::mpsc;

    use super::{KeyringError, KEYRING_WAIT, SERVICE};

    pub(super) struct OsKeyring {
        pub(super) user: String,
    }

    impl super::Keyring for OsKeyring {
        fn get(&self) -> Result<Option<String>, KeyringError> {
            self.call(|entry| match entry.get_password() {
                Ok(token) => Ok(Some(token)),
                Err(keyring::Error::NoEntry) => Ok(None),
                Err(err) => Err(err),
            })
        }

        fn set(&self, token: &str) -> Result<(), KeyringError> {
            let token = token.to_owned();
            self.call(move |entry| entry.set_password(&token))
        }

        fn delete(&self) -> Result<(), KeyringError> {
            self.call(|entry| match entry.delete_credential() {
                Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
                Err(err) => Err(err),
            })
        }
    }

    impl OsKeyring {
        /// Runs `work` on the entry in a thread of its own, waiting at most [`KEYRING_WAIT`]:
        /// a keyring stuck on a prompt costs that wait, never the agent.
        fn call<T: Send + 'static>(
            &self,
            work: impl FnOnce(&keyring::Entry) -> keyring::Result<T> + Send + 'static,
        ) -> Result<T, KeyringError> {
            reachable()?;
            let user = self.user.clone();
            let (answer, answered) = mpsc::channel();
            std::thread::spawn(move || {
                let done = entry(&user).and_then(|entry| work(&entry));
                let _ = answer.send(done.map_err(describe));
            });
            match answered.recv_timeout(KEYRING_WAIT) {
                Ok(done) => done,
                Err(_) => Err(KeyringError::Failed(format!(
                    "the keyring did not answer within {} s",
                    KEYRING_WAIT.as_secs()
                ))),
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn entry(user: &str) -> keyring::Result<keyring::Entry> {
        let credential =
            keyring::secret_service::SsCredential::new_with_target(None, SERVICE, user)?;
        Ok(keyring::Entry::new_with_credential(Box::new(credential)))
    }

    #[cfg(target_os = "macos")]
    fn entry(user: &str) -> keyring::Result<keyring::Entry> {
        let credential = keyring::macos::MacCredential::new_with_target(None, SERVICE, user)?;
        Ok(keyring::Entry::new_with_credential(Box::new(credential)))
    }

    /// The Secret Service is reached only through the session bus the environment names (the
    /// vendored libdbus neither guesses one nor starts one).
    #[cfg(target_os = "linux")]
    fn reachable() -> Result<(), KeyringError> {
        match std::env::var_os("DBUS_SESSION_BUS_ADDRESS") {
            Some(address) if !address.is_empty() => Ok(()),
            _ => Err(KeyringError::Unavailable(
                "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)".to_owned(),
            )),
        }
    }

    #[cfg(target_os = "macos")]
    fn reachable() -> Result<(), KeyringError> {
        Ok(())
    }

    /// A bus with nobody serving the Secret Service is no keyring; anything else is a failure.
    fn describe(err: keyring::Error) -> KeyringError {
        let text = err.to_string();
        let no_service = [
            "org.freedesktop.secrets",
            "ServiceUnknown",
            "Failed to connect",
        ];
        match err {
            keyring::Error::PlatformFailure(_)
                if no_service.iter().any(|sign| text.contains(sign)) =>
            {
                KeyringError::Unavailable(text)
            }
            _ => KeyringError::Failed(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::local::state::{DataDir, TOKEN_FILE};

    /// A keyring in memory that can be told to fail, and counts what it was asked.
    #[derive(Default, Clone)]
    struct FakeKeyring(Arc<Mutex<Fake>>);

    #[derive(Default)]
    struct Fake {
        token: Option<String>,
        failing: Option<KeyringError>,
        /// `set` stores something else (a keyring that mangles what it is given).
        mangles: bool,
        calls: usize,
    }

    impl FakeKeyring {
        fn failing(err: KeyringError) -> FakeKeyring {
            let fake = FakeKeyring::default();
            fake.0.lock().unwrap_or_else(|e| e.into_inner()).failing = Some(err);
            fake
        }

        fn state(&self) -> std::sync::MutexGuard<'_, Fake> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }

        fn boxed(&self) -> Option<Box<dyn Keyring>> {
            Some(Box::new(self.clone()))
        }
    }

    impl Keyring for FakeKeyring {
        fn get(&self) -> Result<Option<String>, KeyringError> {
            let mut fake = self.state();
            fake.calls += 1;
            match &fake.failing {
                Some(err) => Err(err.clone()),
                None => Ok(fake.token.clone()),
            }
        }

        fn set(&self, token: &str) -> Result<(), KeyringError> {
            let mut fake = self.state();
            fake.calls += 1;
            if let Some(err) = &fake.failing {
                return Err(err.clone());
            }
            fake.token = Some(if fake.mangles {
                format!("{token}?")
            } else {
                token.to_owned()
            });
            Ok(())
        }

        fn delete(&self) -> Result<(), KeyringError> {
            let mut fake = self.state();
            fake.calls += 1;
            if let Some(err) = &fake.failing {
                return Err(err.clone());
            }
            fake.token = None;
            Ok(())
        }
    }

    fn data_dir() -> Result<(tempfile::TempDir, DataDir)> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("home")))?;
        Ok((tmp, data_dir))
    }

    #[test]
    fn choices_parse() {
        assert_eq!(Choice::parse(""), Some(Choice::Auto));
        assert_eq!(Choice::parse("auto"), Some(Choice::Auto));
        assert_eq!(Choice::parse(" Keyring "), Some(Choice::Keyring));
        assert_eq!(Choice::parse("file"), Some(Choice::File));
        assert_eq!(Choice::parse("vault"), None);
        assert_eq!(Choice::from_env(), Choice::File, "unit tests keep to files");
    }

    #[test]
    fn a_working_keyring_holds_the_token_and_the_file_goes() -> Result<()> {
        let (_tmp, data_dir) = data_dir()?;
        // A file from before the keyring was used.
        data_dir.write_file(TOKEN_FILE, b"tdt_old")?;
        let keyring = FakeKeyring::default();
        let store = TokenStore::with(&data_dir, Choice::Auto, keyring.boxed());
        assert_eq!(store.save("tdt_new")?, TokenPlace::Keyring);
        assert!(!data_dir.token_path().exists());
        assert_eq!(keyring.state().token.as_deref(), Some("tdt_new"));
        assert_eq!(
            store.load()?,
            Some(("tdt_new".to_owned(), TokenPlace::Keyring))
        );
        store.forget()?;
        assert_eq!(keyring.state().token, None);
        assert_eq!(store.load()?, None);
        Ok(())
    }

    #[test]
    fn no_keyring_or_a_failing_one_keeps_the_token_in_the_file() -> Result<()> {
        for (choice, err) in [
            (Choice::Auto, KeyringError::Unavailable("no bus".into())),
            (Choice::Auto, KeyringError::Failed("locked".into())),
            (Choice::Keyring, KeyringError::Unavailable("no bus".into())),
            (Choice::Keyring, KeyringError::Failed("timed out".into())),
        ] {
            let (_tmp, data_dir) = data_dir()?;
            let keyring = FakeKeyring::failing(err);
            let store = TokenStore::with(&data_dir, choice, keyring.boxed());
            assert_eq!(store.save("tdt_x")?, TokenPlace::File);
            assert_eq!(store.load()?, Some(("tdt_x".to_owned(), TokenPlace::File)));
            store.forget()?;
            assert_eq!(store.load()?, None);
        }
        Ok(())
    }

    #[test]
    fn a_token_that_reads_back_wrong_goes_to_the_file_and_leaves_the_keyring() -> Result<()> {
        let (_tmp, data_dir) = data_dir()?;
        let keyring = FakeKeyring::default();
        keyring.state().mangles = true;
        let store = TokenStore::with(&data_dir, Choice::Auto, keyring.boxed());
        assert_eq!(store.save("tdt_x")?, TokenPlace::File);
        assert_eq!(keyring.state().token, None);
        assert_eq!(store.load()?, Some(("tdt_x".to_owned(), TokenPlace::File)));
        Ok(())
    }

    #[test]
    fn a_keyring_that_fails_later_still_finds_the_file() -> Result<()> {
        let (_tmp, data_dir) = data_dir()?;
        data_dir.write_file(TOKEN_FILE, b"tdt_file\n")?;
        let keyring = FakeKeyring::failing(KeyringError::Failed("locked".into()));
        let store = TokenStore::with(&data_dir, Choice::Auto, keyring.boxed());
        assert_eq!(
            store.load()?,
            Some(("tdt_file".to_owned(), TokenPlace::File))
        );
        // Forgetting removes the file even though the keyring cannot be reached.
        store.forget()?;
        assert!(!data_dir.token_path().exists());
        Ok(())
    }

    #[test]
    fn the_file_choice_never_asks_the_keyring() -> Result<()> {
        let (_tmp, data_dir) = data_dir()?;
        let keyring = FakeKeyring::default();
        keyring.state().token = Some("tdt_elsewhere".into());
        let store = TokenStore::with(&data_dir, Choice::File, keyring.boxed());
        assert_eq!(store.load()?, None);
        assert_eq!(store.save("tdt_x")?, TokenPlace::File);
        store.forget()?;
        assert_eq!(keyring.state().calls, 0);
        assert_eq!(keyring.state().token.as_deref(), Some("tdt_elsewhere"));
        Ok(())
    }
}
