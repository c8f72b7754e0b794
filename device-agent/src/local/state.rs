//! The agent's local state: one JSON config file and a few secret files in the data dir.
//!
//! Layout of the data directory (mode 0700):
//!
//! | file | mode | holds |
//! |---|---|---|
//! | `config.json` | 0600 | install id, pairing (server, device id, name), folders, recipes |
//! | `device-token` | 0600 | the device token (`tdt_…`) while paired, unless the OS keyring holds it ([`token_store`](crate::local::token_store)) |
//! | `local.key` | 0600 | the 32-byte key that encrypts the seal key at rest |
//! | `seal-key.json` | 0600 | the seal key pair's private half, AES-256-GCM encrypted |
//!
//! Every write goes to a temporary file in the same directory and is renamed over the target,
//! so a crash never leaves a half-written file behind.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::local::presets::PresetName;
use crate::local::private_files::{create_private_dir, set_mode, DIR_MODE, FILE_MODE};
use crate::local::token_store::{TokenFile, TokenPlace, TokenStore};
use tether_protocol::evidence::EvidenceHold;
use tether_protocol::{AccountId, DeviceId};

/// The configuration's file in the data dir.
pub const CONFIG_FILE: &str = "config.json";
/// The device token's file, when the keyring does not hold it.
pub(crate) const TOKEN_FILE: &str = "device-token";

/// The agent's data directory. Only this type writes inside it.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

/// The non-secret configuration, as stored in `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// Identifies this installation across pairings, so pairing again is the same computer.
    /// Kept through `unpair`.
    pub install_id: String,
    /// Present while the computer is paired.
    #[serde(default)]
    pub pairing: Option<Pairing>,
    /// Folders a job may work in, by label.
    #[serde(default)]
    pub folders: Vec<SharedFolder>,
    /// Commands a job may run, by name.
    #[serde(default)]
    pub recipes: Vec<Recipe>,
    /// Coding agents speaking the Agent Client Protocol, by name.
    #[serde(default)]
    pub engines: Vec<AcpEngine>,
    /// Folders the owner trusts on this computer (`tether-agent trust`): canonical paths
    /// where ask mode goes ahead without asking. Only ever set locally, never from the web.
    #[serde(default)]
    pub trusted: Vec<PathBuf>,
    /// Whether answers given on the web count (`tether-agent approvals on|off`); when off,
    /// every decision is answered on this computer (`tether-agent decisions`).
    #[serde(default = "answers_from_the_web_by_default")]
    pub accept_web_approvals: bool,
    /// Whether a run's evidence files are uploaded (`tether-agent evidence on|off`); when
    /// off they stay on this computer and only their descriptions are sent.
    #[serde(default = "evidence_uploaded_by_default")]
    pub evidence_upload: bool,
    /// Which evidence files stay on this computer for their owner to preview, release or
    /// discard (`tether-agent evidence hold screenshots|all|none`; screenshots by default).
    #[serde(default)]
    pub evidence_hold: EvidenceHold,
    /// Whether the owner's console may reach this computer (`tether-agent console on|off`;
    /// on by default). Read again on every console request.
    #[serde(default = "console_on_by_default")]
    pub console: bool,
}

fn console_on_by_default() -> bool {
    true
}

fn evidence_uploaded_by_default() -> bool {
    true
}

fn answers_from_the_web_by_default() -> bool {
    true
}

/// Who this computer is on which server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pairing {
    /// Base URL of the server, without a trailing slash.
    pub server: String,
    pub device_id: DeviceId,
    pub account_id: AccountId,
    pub name: String,
}

/// A folder the owner shares with jobs under a label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SharedFolder {
    pub label: String,
    /// Canonical (absolute, symlinks resolved) at the time it was shared.
    pub path: PathBuf,
}

/// A named command the owner configured; jobs select it by name and pass only a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recipe {
    pub name: String,
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
}

/// A coding agent the owner configured (`engine add NAME --preset …` or `engine add NAME
/// --acp -- PROGRAM ARGS…`): the agent starts it confined in the job's folder and speaks
/// ACP with it over its stdio.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcpEngine {
    pub name: String,
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// The known agent it was set up as, which decides its state folders, sign-in folders,
    /// model hosts and quirks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<PresetName>,
    /// Variables its process gets on every run (`--env NAME=VALUE`), never its terminals.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Saved secrets its process gets as variables of the same name (`--secret NAME`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// What its process may reach; absent (engines set up before the choice existed): what
    /// the job allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<EngineNetwork>,
    /// Whether the owner's own sign-in folders of this agent (`~/.claude`, …) are granted to
    /// its process (`--use-my-sign-in`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_my_sign_in: bool,
}

/// What an engine's own process may reach on the network. The commands it asks Tether to
/// run follow the job's choice whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineNetwork {
    Off,
    /// Only its model endpoints: the preset's API hosts, or exactly the origin of the base
    /// URL it is configured with.
    Model,
    On,
}

impl EngineNetwork {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineNetwork::Off => "off",
            EngineNetwork::Model => "model",
            EngineNetwork::On => "on",
        }
    }
}

/// A configuration entry known by a unique name (a recipe, an ACP engine).
pub trait Named {
    fn name(&self) -> &str;
}

impl Named for Recipe {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for AcpEngine {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Adds `entry` to `list`, replacing one of the same name, and keeps the list sorted by name.
pub fn put_named<T: Named>(list: &mut Vec<T>, entry: T) {
    list.retain(|existing| existing.name() != entry.name());
    list.push(entry);
    list.sort_by(|a, b| a.name().cmp(b.name()));
}

/// Removes and returns the entry named `name`, if any.
pub fn take_named<T: Named>(list: &mut Vec<T>, name: &str) -> Option<T> {
    let index = list.iter().position(|entry| entry.name() == name)?;
    Some(list.remove(index))
}

impl Config {
    fn fresh() -> Config {
        Config {
            install_id: uuid::Uuid::now_v7().simple().to_string(),
            pairing: None,
            folders: Vec::new(),
            recipes: Vec::new(),
            engines: Vec::new(),
            trusted: Vec::new(),
            accept_web_approvals: true,
            evidence_upload: true,
            evidence_hold: EvidenceHold::default(),
            console: true,
        }
    }

    pub fn folder(&self, label: &str) -> Option<&SharedFolder> {
        self.folders.iter().find(|folder| folder.label == label)
    }

    pub fn recipe(&self, name: &str) -> Option<&Recipe> {
        self.recipes.iter().find(|recipe| recipe.name == name)
    }

    pub fn acp_engine(&self, name: &str) -> Option<&AcpEngine> {
        self.engines.iter().find(|engine| engine.name == name)
    }
}

impl DataDir {
    /// The directory given on the command line (or `TETHER_AGENT_HOME`), else the platform's
    /// data directory plus `tether-agent`.
    ///
    /// # Errors
    /// When no directory is given and the platform has no data directory.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<DataDir> {
        let root = match explicit {
            Some(root) => root,
            None => dirs::data_dir()
                .context("this platform has no data directory; pass --data-dir")?
                .join("tether-agent"),
        };
        Ok(DataDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Path of a file inside the data dir (for files other modules own the format of).
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Creates the directory (mode 0700) if needed.
    ///
    /// # Errors
    /// When it cannot be created.
    pub fn ensure(&self) -> Result<()> {
        create_tightened(&self.root)
            .with_context(|| format!("cannot create data directory {}", self.root.display()))
    }

    /// Reads `config.json`, making (and saving) a fresh one with a new install id if absent.
    ///
    /// # Errors
    /// When the file cannot be read or parsed, or a fresh one cannot be written.
    pub fn load_or_init_config(&self) -> Result<Config> {
        if let Some(config) = self.load_config()? {
            return Ok(config);
        }
        let config = Config::fresh();
        self.save_config(&config)?;
        Ok(config)
    }

    /// Reads `config.json`, or `None` when there is none yet.
    ///
    /// # Errors
    /// When the file exists but cannot be read or parsed.
    pub fn load_config(&self) -> Result<Option<Config>> {
        let path = self.path(CONFIG_FILE);
        let Some(bytes) = read_if_exists(&path)? else {
            return Ok(None);
        };
        let config = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a valid agent config", path.display()))?;
        Ok(Some(config))
    }

    /// Writes `config.json` atomically, mode 0600.
    ///
    /// # Errors
    /// When the directory or file cannot be written.
    pub fn save_config(&self, config: &Config) -> Result<()> {
        let mut bytes = serde_json::to_vec_pretty(config)?;
        bytes.push(b'\n');
        self.write_file(CONFIG_FILE, &bytes)
    }

    /// The device token, if the computer is paired: from the keyring, else the file.
    ///
    /// # Errors
    /// When the file exists but cannot be read.
    pub fn load_token(&self) -> Result<Option<String>> {
        Ok(TokenStore::open(self).load()?.map(|(token, _)| token))
    }

    /// Stores the device token in the keyring, else in the file (mode 0600); says which.
    ///
    /// # Errors
    /// When the keyring did not take it and the file cannot be written.
    pub fn save_token(&self, token: &str) -> Result<TokenPlace> {
        TokenStore::open(self).save(token)
    }

    /// Deletes the device token from the keyring and the file; absent is fine.
    ///
    /// # Errors
    /// When the file exists but cannot be removed.
    pub fn forget_token(&self) -> Result<()> {
        TokenStore::open(self).forget()
    }

    /// The device token's file (when the keyring does not hold it).
    pub fn token_path(&self) -> PathBuf {
        self.path(TOKEN_FILE)
    }

    /// An exclusive lock on the file `name` (made if absent), held while the returned file
    /// is open: writers of one store in several agent processes take turns.
    ///
    /// # Errors
    /// The data dir cannot be made, or the file opened or locked.
    pub fn lock_file(&self, name: &str) -> Result<fs::File> {
        self.ensure()?;
        let path = self.path(name);
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        file.lock()
            .with_context(|| format!("cannot lock {}", path.display()))?;
        Ok(file)
    }

    /// Reads a file of the data dir, `None` when absent.
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>> {
        read_if_exists(&self.path(name))
    }

    /// Writes a file of the data dir atomically with mode 0600.
    ///
    /// # Errors
    /// When the directory or file cannot be written.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.ensure()?;
        let path = self.path(name);
        write_atomic(&path, bytes).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Creates a private directory of the data dir (and the data dir) if needed, so files
    /// can be written inside it with [`DataDir::write_file`].
    ///
    /// # Errors
    /// When it cannot be created.
    pub fn ensure_dir(&self, name: &str) -> Result<()> {
        self.ensure()?;
        let path = self.path(name);
        create_tightened(&path).with_context(|| format!("cannot create {}", path.display()))
    }

    /// The names of the files in a directory of the data dir; empty when it does not exist.
    /// Temporary files of interrupted writes are left out.
    ///
    /// # Errors
    /// When it exists but cannot be read.
    pub fn list_dir(&self, name: &str) -> Result<Vec<String>> {
        let path = self.path(name);
        let entries = match fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
        };
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Removes a file of the data dir; absent is fine.
    ///
    /// # Errors
    /// When it exists but cannot be removed.
    pub fn remove_file(&self, name: &str) -> Result<()> {
        let path = self.path(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err).with_context(|| format!("cannot remove {}", path.display())),
        }
    }
}

impl TokenFile for DataDir {
    fn dir(&self) -> &Path {
        &self.root
    }

    fn file_path(&self) -> PathBuf {
        self.token_path()
    }

    fn read(&self) -> Result<Option<Vec<u8>>> {
        self.read_file(TOKEN_FILE)
    }

    fn write(&self, bytes: &[u8]) -> Result<()> {
        self.write_file(TOKEN_FILE, bytes)
    }

    fn remove(&self) -> Result<()> {
        self.remove_file(TOKEN_FILE)
    }
}

fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// A folder of the data dir, made private; one that already exists is tightened too, in case
/// it was made by hand with the default umask.
fn create_tightened(path: &Path) -> io::Result<()> {
    create_private_dir(path)?;
    set_mode(path, DIR_MODE)
}

/// Writes `bytes` to a temporary sibling (created 0600, so the content is never readable by
/// others even for a moment), syncs it and renames it over `path`.
///
/// # Errors
/// Any I/O error; the temporary file is removed on failure.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp-{:016x}", rand::random::<u64>()));
    let result = write_new_private(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    // Make the rename itself durable; not every filesystem supports syncing a directory.
    if let Ok(dir_handle) = fs::File::open(dir) {
        let _ = dir_handle.sync_all();
    }
    Ok(())
}

fn write_new_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    set_mode(path, FILE_MODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    use crate::local::private_files::mode_of;

    #[test]
    fn config_round_trips_and_files_are_private() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("home")))?;
        assert_eq!(data_dir.load_config()?, None);

        let mut config = data_dir.load_or_init_config()?;
        assert_eq!(config.install_id.len(), 32);
        config.pairing = Some(Pairing {
            server: "http://127.0.0.1:8080".to_owned(),
            device_id: DeviceId::parse("dev1")?,
            account_id: AccountId::parse("acc1")?,
            name: "box".to_owned(),
        });
        config.folders.push(SharedFolder {
            label: "work".to_owned(),
            path: tmp.path().into(),
        });
        config.recipes.push(Recipe {
            name: "tests".to_owned(),
            program: "sh".to_owned(),
            args: vec!["-c".to_owned(), "echo hi".to_owned()],
        });
        data_dir.save_config(&config)?;
        assert_eq!(data_dir.load_config()?, Some(config.clone()));
        assert_eq!(data_dir.load_or_init_config()?, config);

        // Unit tests keep the token in its file (`token_store::Choice::from_env`).
        assert_eq!(data_dir.save_token("tdt_secret")?, TokenPlace::File);
        assert_eq!(data_dir.load_token()?.as_deref(), Some("tdt_secret"));

        #[cfg(unix)]
        {
            assert_eq!(mode_of(&fs::metadata(data_dir.root())?), DIR_MODE);
            assert_eq!(
                mode_of(&fs::metadata(data_dir.path(CONFIG_FILE))?),
                FILE_MODE
            );
            assert_eq!(mode_of(&fs::metadata(data_dir.token_path())?), FILE_MODE);
        }
        // No temporary files are left behind.
        let names: Vec<String> = fs::read_dir(data_dir.root())?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|name| !name.contains(".tmp-")),
            "{names:?}"
        );

        data_dir.forget_token()?;
        data_dir.forget_token()?;
        assert_eq!(data_dir.load_token()?, None);
        Ok(())
    }

    #[test]
    fn a_config_from_before_trust_and_approvals_loads_with_approvals_on() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        data_dir.write_file(
            CONFIG_FILE,
            br#"{"installId":"i","folders":[],"recipes":[]}"#,
        )?;
        let config = data_dir.load_or_init_config()?;
        assert!(config.trusted.is_empty());
        assert!(config.accept_web_approvals);
        Ok(())
    }

    #[test]
    fn a_corrupt_config_is_an_error_not_a_reset() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        data_dir.write_file(CONFIG_FILE, b"{not json")?;
        assert!(data_dir.load_or_init_config().is_err());
        Ok(())
    }
}
