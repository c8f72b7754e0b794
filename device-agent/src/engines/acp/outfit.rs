//! What an engine's own process is given beyond what every program of the run gets: its
//! program files, its own home kept between runs, its variables and keys, its owner's
//! sign-in when asked for, and its network. Its terminals get none of it: they keep the
//! run's [`Launch`].

use std::path::{Path, PathBuf};

use crate::local::acp_engines::{self, model_origins, program_files, sign_in_paths};
use crate::local::presets::{Preset, PresetName};
use crate::local::private_files::create_private_dir;
use crate::local::state::DataDir;
use crate::local::state::{AcpEngine, EngineNetwork};
use crate::local::vault::Vault;
use crate::policy::guard::Guard;
use crate::run::model_network::ModelNetwork;
use crate::sandbox::Forward;

use super::terminals::Launch;

/// Folders under the engine's home that programs expect to write (XDG and the usual caches).
const XDG_FOLDERS: &[(&str, &str)] = &[
    ("XDG_CONFIG_HOME", ".config"),
    ("XDG_CACHE_HOME", ".cache"),
    ("XDG_DATA_HOME", ".local/share"),
    ("XDG_STATE_HOME", ".local/state"),
];

/// The engine's process as it will be started.
pub struct Outfit {
    pub argv: Vec<String>,
    /// Its whole environment: the run's, then the preset's defaults, `--env`, `--secret`
    /// values, its home and state folders, and the proxy of its `model` network.
    pub env: Vec<(String, String)>,
    /// The run's guard granting the engine its own folders.
    pub guard: Guard,
    pub writable: Vec<PathBuf>,
    pub readable: Vec<PathBuf>,
    pub network: bool,
    pub forwards: Vec<Forward>,
    /// Serves the `model` network for as long as the engine runs.
    pub model_network: Option<ModelNetwork>,
    /// The preset's command that signs the agent in, for a refusal's advice.
    pub sign_in_command: Option<&'static str>,
    /// Whether the agent reads files through this computer (the preset's quirk).
    pub client_reads_files: bool,
    /// The engine's own home.
    pub state_home: PathBuf,
}

/// Everything the outfit is made from besides the engine.
pub struct Fitting<'a> {
    pub launch: &'a Launch,
    /// The job's network choice (what an engine without its own choice gets).
    pub job_network: bool,
    /// The owner's home folder.
    pub home: Option<&'a Path>,
    /// Where the `model` network's sockets go (the run's private folder).
    pub sockets: &'a Path,
}

impl Outfit {
    /// Fits `engine` for one run.
    ///
    /// # Errors
    /// A sentence for the job's `blocked` summary: a secret the engine names is not saved or
    /// is limited to sites, its home cannot be made, or its `model` network cannot start.
    pub fn fit(engine: &AcpEngine, fitting: &Fitting<'_>) -> Result<Outfit, String> {
        let preset = engine.preset.map(PresetName::preset);
        let data_dir = fitting.launch.guard.data_dir();
        let state_home = acp_engines::state_home(data_dir, &engine.name);
        make_private_folder(&state_home)?;
        let mut env = fitting.launch.env.clone();
        for (name, value) in preset.map_or(&[][..], |preset| preset.defaults) {
            set(&mut env, name, value);
        }
        for (name, value) in &engine.env {
            set(&mut env, name, value);
        }
        for (name, value) in engine_secrets(engine, data_dir)? {
            set(&mut env, &name, &value);
        }
        let own = own_folders(engine, preset, &state_home, fitting.home, &mut env)?;
        let mut argv = vec![engine.program.clone()];
        argv.extend(
            preset
                .map_or(&[][..], |preset| preset.args)
                .iter()
                .map(|a| (*a).to_owned()),
        );
        argv.extend(
            preset
                .map(|preset| preset.args_from_env(&engine.env))
                .unwrap_or_default(),
        );
        argv.extend(engine.args.iter().cloned());
        let mut readable = fitting.launch.readable.clone();
        readable.extend(program_files(&engine.program, &engine.args));
        let mut writable = fitting.launch.writable.clone();
        writable.extend(own.iter().cloned());
        let mut outfit = Outfit {
            argv,
            env,
            guard: fitting.launch.guard.granting(&own),
            writable,
            readable,
            network: fitting.job_network,
            forwards: Vec::new(),
            model_network: None,
            sign_in_command: preset.map(|preset| preset.sign_in_command),
            client_reads_files: preset.is_none_or(|preset| preset.client_reads_files),
            state_home,
        };
        outfit.connect(engine, fitting.sockets)?;
        Ok(outfit)
    }

    /// The engine's own network choice; `model` starts its relays and proxy.
    fn connect(&mut self, engine: &AcpEngine, sockets: &Path) -> Result<(), String> {
        match engine.network {
            None => {}
            Some(EngineNetwork::On) => self.network = true,
            Some(EngineNetwork::Off) => self.network = false,
            Some(EngineNetwork::Model) => {
                let origins = model_origins(engine).map_err(|err| format!("{err:#}"))?;
                let network = ModelNetwork::start(&origins, sockets)?;
                self.network = false;
                self.forwards = network.forwards();
                self.readable.extend(network.readable());
                for (name, value) in network.env() {
                    set(&mut self.env, &name, &value);
                }
                self.model_network = Some(network);
            }
        }
        Ok(())
    }

    /// The names of the engine's variables, for `authenticate`.
    pub fn variable_names(&self) -> Vec<String> {
        self.env.iter().map(|(name, _)| name.clone()).collect()
    }
}

/// The engine's `--secret` values from the vault; a missing or site-limited one is refused.
fn engine_secrets(engine: &AcpEngine, data_dir: &Path) -> Result<Vec<(String, String)>, String> {
    if engine.secrets.is_empty() {
        return Ok(Vec::new());
    }
    let data_dir =
        DataDir::resolve(Some(data_dir.to_path_buf())).map_err(|err| format!("{err:#}"))?;
    let named = Vault::new(&data_dir).named(&engine.secrets).map_err(|missing| {
        format!(
            "the engine {:?} needs the secret {}, which is not saved on this computer: send it sealed from the Computers page",
            engine.name, missing.0
        )
    })?;
    if let Some(limited) = engine
        .secrets
        .iter()
        .find(|name| !named.env.iter().any(|(saved, _)| saved == *name))
    {
        return Err(format!(
            "the secret {limited} is limited to sites, so it is never put in a process's environment; send it again without allowed sites for the engine {:?}",
            engine.name
        ));
    }
    Ok(named.env)
}

/// The engine's home (its state, kept between runs) and, with `--use-my-sign-in`, its
/// owner's sign-in; sets `HOME`, the XDG folders and the preset's state variables in `env`.
/// Returns the folders granted to the engine's process alone.
fn own_folders(
    engine: &AcpEngine,
    preset: Option<&Preset>,
    state_home: &Path,
    home: Option<&Path>,
    env: &mut Vec<(String, String)>,
) -> Result<Vec<PathBuf>, String> {
    let mut own = vec![state_home.to_path_buf()];
    let signed_in = engine.use_my_sign_in.then(|| sign_in_paths(engine, home));
    let owner_home = home.filter(|_| signed_in.is_some());
    match (preset, owner_home) {
        (Some(preset), Some(owner_home)) if preset.sign_in_needs_home => {
            set(env, "HOME", &owner_home.display().to_string());
        }
        _ => set(env, "HOME", &state_home.display().to_string()),
    }
    for (name, folder) in XDG_FOLDERS {
        let path = state_home.join(folder);
        make_private_folder(&path)?;
        set(env, name, &path.display().to_string());
    }
    for (name, folder) in preset.map_or(&[][..], |preset| preset.state_vars) {
        let base = owner_home.unwrap_or(state_home);
        let path = if folder.is_empty() {
            base.to_path_buf()
        } else {
            base.join(folder)
        };
        if owner_home.is_none() {
            make_private_folder(&path)?;
        }
        set(env, name, &path.display().to_string());
    }
    if let Some(preset) = preset {
        write_home_files(preset, state_home)?;
    }
    own.extend(signed_in.unwrap_or_default());
    Ok(own)
}

/// The preset's settings files in the engine's own home, where they are missing (the owner
/// may have changed them since).
fn write_home_files(preset: &Preset, state_home: &Path) -> Result<(), String> {
    for (relative, contents) in preset.home_files {
        let path = state_home.join(relative);
        if path.exists() {
            continue;
        }
        if let Some(parent) = path.parent() {
            make_private_folder(parent)?;
        }
        crate::local::state::write_atomic(&path, contents.as_bytes())
            .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    }
    Ok(())
}

/// Removes the API key the agent wrote in plain text into its own home while
/// authenticating (the vault holds it; the next run authenticates again). The owner's own
/// sign-in (`--use-my-sign-in`) is never touched.
pub fn forget_written_key(engine: &AcpEngine, state_home: &Path) {
    let Some(relative) = engine
        .preset
        .and_then(|name| name.preset().written_key_file)
    else {
        return;
    };
    let path = state_home.join(relative);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let holds_key = serde_json::from_str::<serde_json::Value>(&text)
        .is_ok_and(|auth| auth.get("auth_mode").and_then(|mode| mode.as_str()) == Some("apikey"));
    if holds_key {
        if let Err(err) = std::fs::remove_file(&path) {
            tracing::warn!("could not remove the key {} wrote: {err}", engine.name);
        }
    }
}

/// Creates `path` (and its parents) readable by this user only.
fn make_private_folder(path: &Path) -> Result<(), String> {
    create_private_dir(path)
        .map_err(|err| format!("cannot make the engine's folder {}: {err}", path.display()))
}

/// Sets `name` to `value`, replacing an earlier value.
fn set(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    env.retain(|(existing, _)| existing != name);
    env.push((name.to_owned(), value.to_owned()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        launch: Launch,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().canonicalize().unwrap_or_default();
        let home = root.join("home");
        std::fs::create_dir_all(home.join("work")).unwrap_or_default();
        let data = root.join("data/tether-agent");
        let launch = Launch {
            guard: Guard::new(Some(home.clone()), &data),
            folder: home.join("work"),
            network: false,
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                ("HOME".into(), home.display().to_string()),
            ],
            writable: Vec::new(),
            readable: Vec::new(),
        };
        Fixture {
            _tmp: tmp,
            root,
            launch,
        }
    }

    fn fit(fx: &Fixture, engine: &AcpEngine) -> Result<Outfit, String> {
        let home = fx.root.join("home");
        Outfit::fit(
            engine,
            &Fitting {
                launch: &fx.launch,
                job_network: true,
                home: Some(&home),
                sockets: &fx.root.join("sockets"),
            },
        )
    }

    fn var<'a>(outfit: &'a Outfit, name: &str) -> Option<&'a str> {
        outfit
            .env
            .iter()
            .find(|(existing, _)| existing == name)
            .map(|(_, value)| value.as_str())
    }

    #[test]
    fn a_preset_gets_its_own_home_state_folder_variables_and_arguments() {
        let fx = fixture();
        let engine = AcpEngine {
            name: "codex".into(),
            program: "/usr/bin/codex-acp".into(),
            preset: Some(PresetName::Codex),
            env: BTreeMap::from([(
                "OPENAI_BASE_URL".to_owned(),
                "http://127.0.0.1:9/v1".to_owned(),
            )]),
            network: Some(EngineNetwork::On),
            ..AcpEngine::default()
        };
        let outfit = fit(&fx, &engine).unwrap_or_else(|why| panic!("{why}"));
        let state = fx.root.join("data/tether-agent-engines/codex/home");
        assert_eq!(
            var(&outfit, "HOME"),
            Some(state.to_str().unwrap_or_default())
        );
        assert_eq!(
            var(&outfit, "CODEX_HOME"),
            Some(state.join(".codex").to_str().unwrap_or_default())
        );
        assert!(state.join(".codex").is_dir() && state.join(".cache").is_dir());
        assert_eq!(
            var(&outfit, "OPENAI_BASE_URL"),
            Some("http://127.0.0.1:9/v1")
        );
        assert!(outfit
            .argv
            .iter()
            .any(|arg| arg.contains("danger-full-access")));
        assert!(outfit.argv.iter().any(|arg| arg.contains("base_url")));
        assert!(outfit.network);
        assert!(outfit.writable.contains(&state));
        assert!(outfit.guard.check_access(&state).is_ok());
        assert!(
            fx.launch.guard.check_access(&state).is_err(),
            "terminals never see it"
        );
        let other = fx.root.join("data/tether-agent-engines/claude/home");
        assert!(!outfit.writable.contains(&other));
    }

    #[test]
    fn the_owners_sign_in_is_granted_only_when_asked_for() {
        let fx = fixture();
        let home = fx.root.join("home");
        std::fs::create_dir_all(home.join(".claude")).unwrap_or_default();
        let mut engine = AcpEngine {
            name: "claude".into(),
            program: "/usr/bin/claude-code-acp".into(),
            preset: Some(PresetName::ClaudeCode),
            network: Some(EngineNetwork::Off),
            ..AcpEngine::default()
        };
        let plain = fit(&fx, &engine).unwrap_or_else(|why| panic!("{why}"));
        assert!(!plain.writable.contains(&home.join(".claude")));
        assert!(plain.guard.check_access(&home.join(".claude")).is_err());
        assert!(!plain.network);
        engine.use_my_sign_in = true;
        let signed_in = fit(&fx, &engine).unwrap_or_else(|why| panic!("{why}"));
        assert!(signed_in.writable.contains(&home.join(".claude")));
        assert!(signed_in.guard.check_access(&home.join(".claude")).is_ok());
        assert!(signed_in.guard.check_access(&home.join(".codex")).is_err());
        assert_eq!(
            var(&signed_in, "CLAUDE_CONFIG_DIR"),
            Some(home.join(".claude").to_str().unwrap_or_default())
        );
    }

    #[test]
    fn gemini_keeps_its_folder_in_the_engines_home_with_quiet_settings() {
        let fx = fixture();
        let engine = AcpEngine {
            name: "gemini".into(),
            program: "/usr/bin/gemini".into(),
            preset: Some(PresetName::Gemini),
            network: Some(EngineNetwork::On),
            ..AcpEngine::default()
        };
        let outfit = fit(&fx, &engine).unwrap_or_else(|why| panic!("{why}"));
        let state = fx.root.join("data/tether-agent-engines/gemini/home");
        assert_eq!(
            var(&outfit, "GEMINI_CLI_HOME"),
            Some(state.to_str().unwrap_or_default())
        );
        assert_eq!(outfit.argv[1..], ["--experimental-acp".to_owned()]);
        assert!(!outfit.client_reads_files);
        let settings =
            std::fs::read_to_string(state.join(".gemini/settings.json")).unwrap_or_default();
        assert!(
            settings.contains("\"usageStatisticsEnabled\": false"),
            "{settings}"
        );
        std::fs::write(state.join(".gemini/settings.json"), "{}").unwrap_or_default();
        fit(&fx, &engine).unwrap_or_else(|why| panic!("{why}"));
        assert_eq!(
            std::fs::read_to_string(state.join(".gemini/settings.json")).unwrap_or_default(),
            "{}",
            "the owner's changes are kept"
        );
    }

    #[test]
    fn a_key_codex_wrote_in_its_home_is_removed_and_a_sign_in_kept() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let engine = AcpEngine {
            name: "codex".into(),
            preset: Some(PresetName::Codex),
            ..AcpEngine::default()
        };
        let auth = tmp.path().join(".codex/auth.json");
        std::fs::create_dir_all(tmp.path().join(".codex")).unwrap_or_default();
        std::fs::write(&auth, r#"{"auth_mode":"chatgpt","tokens":{}}"#).unwrap_or_default();
        forget_written_key(&engine, tmp.path());
        assert!(auth.exists(), "a sign-in stays");
        std::fs::write(&auth, r#"{"auth_mode":"apikey","OPENAI_API_KEY":"sk-x"}"#)
            .unwrap_or_default();
        forget_written_key(&engine, tmp.path());
        assert!(!auth.exists());
    }

    #[test]
    fn a_secret_the_engine_names_must_be_saved() {
        let fx = fixture();
        let engine = AcpEngine {
            name: "claude".into(),
            program: "/usr/bin/claude-code-acp".into(),
            secrets: vec!["ANTHROPIC_API_KEY".into()],
            ..AcpEngine::default()
        };
        let refused = fit(&fx, &engine).err().unwrap_or_default();
        assert!(refused.contains("ANTHROPIC_API_KEY"), "{refused}");
        assert!(refused.contains("Computers page"), "{refused}");
    }
}
