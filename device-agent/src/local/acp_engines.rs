//! Engines beyond recipes: coding agents speaking the Agent Client Protocol, configured
//! locally by name (`engine add NAME --preset claude-code|codex|gemini|qwen`, or `engine add
//! NAME --acp -- PROGRAM [ARGS…]` for any other agent) and published to the server next to
//! the recipes.
//!
//! The server (and so the web) can select an engine by name and pass it a prompt; the
//! program, its arguments and everything the agent does go through this computer's own
//! configuration, guard, policy and sandbox (see [`crate::engines::acp`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use tether_protocol::capabilities::{Engine, EngineKind};

use crate::local::folders::check_name;
use crate::local::origins::Origin;
use crate::local::presets::PresetName;
use crate::local::recipes::shell_words;
use crate::local::state::{put_named, take_named, AcpEngine, Config, EngineNetwork};

/// What `engine add` was given, before it is checked.
#[derive(Debug, Clone, Default)]
pub struct NewEngine {
    pub name: String,
    pub preset: Option<PresetName>,
    /// `--program`, or the first word after `--` without a preset.
    pub program: Option<String>,
    /// Arguments after the program (with a preset: added after the preset's own).
    pub args: Vec<String>,
    /// `--env NAME=VALUE`, checked by the caller (no credential names).
    pub env: BTreeMap<String, String>,
    pub secrets: Vec<String>,
    pub network: Option<EngineNetwork>,
    pub use_my_sign_in: bool,
}

/// Where `engine add` looks for programs and sign-ins.
#[derive(Debug, Clone, Copy)]
pub struct Lookup<'a> {
    /// `PATH` of the person adding the engine.
    pub path_var: Option<&'a str>,
    pub home: Option<&'a Path>,
}

/// Adds (or replaces) the ACP engine `new` describes.
///
/// # Errors
/// When the name is invalid or names a recipe, the program is missing or cannot be found,
/// a secret name is invalid, `--network model` has no endpoint to allow, or
/// `--use-my-sign-in` has no preset or no sign-in to grant.
pub fn add(config: &mut Config, new: NewEngine, lookup: Lookup<'_>) -> Result<AcpEngine> {
    check_name("engine name", &new.name)?;
    if config.recipe(&new.name).is_some() {
        bail!(
            "{:?} already names a recipe; pick another name or remove the recipe first",
            new.name
        );
    }
    let program = program_of(&new, lookup)?;
    if let Some(bad) = new
        .secrets
        .iter()
        .find(|secret| !tether_protocol::secrets::valid_name(secret))
    {
        bail!("--secret {bad:?} is not a secret name (a letter or _, then letters, digits or _, at most 64)");
    }
    let engine = AcpEngine {
        name: new.name.clone(),
        program,
        args: new.args.clone(),
        preset: new.preset,
        env: new.env.clone(),
        secrets: dedup(new.secrets.clone()),
        network: new.network.or(new.preset.map(|_| EngineNetwork::Model)),
        use_my_sign_in: new.use_my_sign_in,
    };
    if engine.network == Some(EngineNetwork::Model) && model_origins(&engine)?.is_empty() {
        bail!(
            "--network model needs the model's address: give it as --env NAME_BASE_URL=URL (or use a --preset that knows its hosts)"
        );
    }
    if engine.use_my_sign_in {
        check_sign_in(&engine, lookup.home)?;
    }
    put_named(&mut config.engines, engine.clone());
    Ok(engine)
}

/// The program to start: `--program` or the command given, else the preset's program
/// found on `PATH` (kept as the absolute path found, so a run does not depend on the
/// daemon's `PATH`).
fn program_of(new: &NewEngine, lookup: Lookup<'_>) -> Result<String> {
    let given = new.program.as_deref().filter(|p| !p.trim().is_empty());
    let Some(preset) = new.preset.map(PresetName::preset) else {
        return given.map(str::to_owned).ok_or_else(|| {
            anyhow::anyhow!(
                "an engine needs a program: tether-agent engine add {} --acp -- PROGRAM [ARGS...], or --preset {}",
                new.name,
                preset_list()
            )
        });
    };
    let wanted = given.unwrap_or(preset.program);
    find_program(wanted, lookup.path_var).ok_or_else(|| {
        anyhow::anyhow!(
            "{wanted:?} was not found{}: install {} with `npm install -g {}`, or name its program with --program PATH",
            if wanted.contains('/') { "" } else { " on PATH" },
            preset.title,
            preset.package
        )
    })
}

fn preset_list() -> String {
    PresetName::ALL
        .iter()
        .map(|preset| preset.as_str())
        .collect::<Vec<_>>()
        .join("|")
}

/// `program` as an absolute path: itself when it names a path that exists, else the first
/// executable file of that name on `path_var`.
pub fn find_program(program: &str, path_var: Option<&str>) -> Option<String> {
    if program.contains('/') {
        let path = Path::new(program);
        return (path.is_absolute() && path.is_file()).then(|| program.to_owned());
    }
    path_var?
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| is_executable(candidate))
        .map(|found| found.display().to_string())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The origins `network: model` allows the engine: exactly those of its base-URL variables
/// when one is set (the preset's, or any `*_BASE_URL` of a custom engine), else the
/// preset's hosts.
///
/// # Errors
/// A base URL that is not an http or https address.
pub fn model_origins(engine: &AcpEngine) -> Result<Vec<Origin>> {
    let preset = engine.preset.map(PresetName::preset);
    let is_base_url = |name: &str| match preset {
        Some(preset) => preset.base_url_vars.contains(&name),
        None => name.ends_with("_BASE_URL"),
    };
    let mut origins = Vec::new();
    for (name, value) in engine.env.iter().filter(|(name, _)| is_base_url(name)) {
        origins.push(Origin::parse(value).map_err(|why| anyhow::anyhow!("--env {name}: {why}"))?);
    }
    if origins.is_empty() {
        for host in preset.map_or(&[][..], |preset| preset.hosts) {
            origins.push(Origin::parse(host).map_err(anyhow::Error::msg)?);
        }
    }
    origins.sort();
    origins.dedup();
    Ok(origins)
}

/// The owner's sign-in paths of the engine's preset that exist under `home`.
pub fn sign_in_paths(engine: &AcpEngine, home: Option<&Path>) -> Vec<PathBuf> {
    let (Some(preset), Some(home)) = (engine.preset.map(PresetName::preset), home) else {
        return Vec::new();
    };
    preset
        .sign_in
        .iter()
        .map(|relative| home.join(relative))
        .filter(|path| path.exists())
        .collect()
}

fn check_sign_in(engine: &AcpEngine, home: Option<&Path>) -> Result<()> {
    let Some(preset) = engine.preset.map(PresetName::preset) else {
        bail!("--use-my-sign-in needs a --preset ({}): only a preset knows where its agent keeps its sign-in", preset_list());
    };
    if sign_in_paths(engine, home).is_empty() {
        bail!(
            "there is no {} sign-in to use on this computer (looked for ~/{}): sign in first with `{}`, or leave out --use-my-sign-in",
            preset.title,
            preset.sign_in.join(" and ~/"),
            preset.sign_in_command
        );
    }
    Ok(())
}

/// The files a confined run needs to read to start `program` wherever it is installed:
/// the program itself, and for a script inside a package (an npm install keeps them in
/// `node_modules`) the outermost `node_modules` folder above it, or else the folder of its
/// `package.json`. Links are followed (`node_modules/.bin/x` is a link into the package).
pub fn program_files(program: &str, args: &[String]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let scripts = std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .filter(|word| word.starts_with('/'));
    for word in scripts {
        let Ok(real) = Path::new(word).canonicalize() else {
            continue;
        };
        if !real.is_file() {
            continue;
        }
        files.push(package_folder(&real).unwrap_or_else(|| real.clone()));
    }
    files.sort();
    files.dedup();
    files
}

/// The outermost `node_modules` above `file`, else the nearest folder with a
/// `package.json` (not the file system's root nor a home folder's own).
fn package_folder(file: &Path) -> Option<PathBuf> {
    let outermost_modules = file
        .ancestors()
        .filter(|dir| dir.file_name().is_some_and(|name| name == "node_modules"))
        .last();
    if let Some(modules) = outermost_modules {
        return Some(modules.to_path_buf());
    }
    file.ancestors()
        .skip(1)
        .take_while(|dir| dir.parent().is_some())
        .find(|dir| dir.join("package.json").is_file() && dir.join("node_modules").is_dir())
        .map(Path::to_path_buf)
}

fn dedup(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.dedup();
    names
}

/// Where engines keep their state, beside the data dir (`<data dir>-engines`): the guard
/// keeps it from every run, and a run of an engine is granted only its own folder.
pub fn engines_root(data_dir: &Path) -> PathBuf {
    let mut name = data_dir
        .file_name()
        .map(std::ffi::OsStr::to_os_string)
        .unwrap_or_else(|| "tether-agent".into());
    name.push("-engines");
    data_dir.with_file_name(name)
}

/// The engine `name`'s own home folder, kept between its runs.
pub fn state_home(data_dir: &Path, name: &str) -> PathBuf {
    engines_root(data_dir).join(name).join("home")
}

/// Removes the ACP engine `name`.
///
/// # Errors
/// When there is no such engine.
pub fn remove(config: &mut Config, name: &str) -> Result<AcpEngine> {
    let Some(engine) = take_named(&mut config.engines, name) else {
        bail!("there is no engine named {name:?}");
    };
    Ok(engine)
}

/// Every engine this computer offers, as published in `capabilities.engines`: the recipes,
/// then the ACP engines. A recipe shadows an ACP engine of the same name (a job runs
/// the recipe), so such an engine is left out rather than published twice.
pub fn published(config: &Config) -> Vec<Engine> {
    let recipes = config.recipes.iter().map(|recipe| Engine {
        name: recipe.name.clone(),
        kind: EngineKind::Recipe,
        check: None,
    });
    let agents = config
        .engines
        .iter()
        .filter(|engine| config.recipe(&engine.name).is_none())
        .map(|engine| Engine {
            name: engine.name.clone(),
            kind: EngineKind::Acp,
            check: None,
        });
    recipes.chain(agents).collect()
}

/// The ACP engine a job's engine name selects: none when a recipe has that name.
pub fn selected<'a>(config: &'a Config, name: &str) -> Option<&'a AcpEngine> {
    if config.recipe(name).is_some() {
        return None;
    }
    config.acp_engine(name)
}

/// The listing `engine list` prints.
pub fn render(engines: &[AcpEngine]) -> String {
    if engines.is_empty() {
        return format!(
            "ACP engines: none (add one with `tether-agent engine add NAME --preset {}`, or `--acp -- PROGRAM [ARGS...]`)\n",
            preset_list()
        );
    }
    let mut out = "ACP engines:\n".to_owned();
    for engine in engines {
        let _ = writeln!(out, "  {:<20} {}", engine.name, command_line(engine));
        let _ = writeln!(out, "  {:<20} {}", "", settings_line(engine));
    }
    out
}

/// The engine's settings in one line: preset, network, variables (names only), secrets,
/// sign-in.
pub fn settings_line(engine: &AcpEngine) -> String {
    let mut parts = Vec::new();
    if let Some(preset) = engine.preset {
        parts.push(format!("preset {}", preset.as_str()));
    }
    parts.push(format!(
        "network {}",
        engine
            .network
            .map_or("as the job says", EngineNetwork::as_str)
    ));
    if !engine.env.is_empty() {
        let names: Vec<&str> = engine.env.keys().map(String::as_str).collect();
        parts.push(format!("env {}", names.join(", ")));
    }
    if !engine.secrets.is_empty() {
        parts.push(format!("secrets {}", engine.secrets.join(", ")));
    }
    if engine.use_my_sign_in {
        parts.push("your own sign-in".to_owned());
    }
    parts.join("; ")
}

/// The engine's command as a person would type it.
pub fn command_line(engine: &AcpEngine) -> String {
    shell_words(&engine.program, &engine.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration with one recipe, `tests` (from JSON, so fields added later default).
    fn config() -> Config {
        serde_json::from_value(serde_json::json!({
            "installId": "i",
            "recipes": [{"name": "tests", "program": "make", "args": ["test"]}],
        }))
        .unwrap_or_else(|err| panic!("{err}"))
    }

    fn custom(name: &str, program: &str, args: &[&str]) -> NewEngine {
        NewEngine {
            name: name.to_owned(),
            program: Some(program.to_owned()),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            ..NewEngine::default()
        }
    }

    const NOWHERE: Lookup<'static> = Lookup {
        path_var: None,
        home: None,
    };

    #[test]
    fn engines_are_added_replaced_listed_and_removed() -> Result<()> {
        let mut config = config();
        let engine = add(
            &mut config,
            custom("claude", "npx", &["claude-code-acp"]),
            NOWHERE,
        )?;
        assert_eq!(command_line(&engine), "npx claude-code-acp");
        assert_eq!(engine.network, None, "a custom engine follows the job");
        add(
            &mut config,
            custom("claude", "claude-acp", &["--flag it"]),
            NOWHERE,
        )?;
        assert_eq!(config.engines.len(), 1);
        assert_eq!(
            config.acp_engine("claude").map(command_line),
            Some("claude-acp '--flag it'".to_owned())
        );
        assert!(add(&mut config, custom("Bad Name", "x", &[]), NOWHERE).is_err());
        assert!(add(&mut config, custom("empty", " ", &[]), NOWHERE).is_err());
        assert!(
            add(&mut config, custom("tests", "x", &[]), NOWHERE).is_err(),
            "a recipe's name"
        );
        assert!(render(&config.engines).contains("claude-acp '--flag it'"));
        remove(&mut config, "claude")?;
        assert!(remove(&mut config, "claude").is_err());
        assert!(render(&config.engines).contains("none"));
        Ok(())
    }

    #[test]
    fn a_preset_finds_its_program_on_the_path_and_limits_the_network_to_its_model() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin)?;
        let mut config = config();
        let preset = |program: Option<&str>| NewEngine {
            name: "claude".to_owned(),
            preset: Some(PresetName::ClaudeCode),
            program: program.map(str::to_owned),
            ..NewEngine::default()
        };
        let path_var = bin.display().to_string();
        let lookup = Lookup {
            path_var: Some(&path_var),
            home: Some(tmp.path()),
        };
        let missing = add(&mut config, preset(None), lookup);
        let said = missing.err().map(|err| err.to_string()).unwrap_or_default();
        assert!(
            said.contains("npm install -g @zed-industries/claude-code-acp"),
            "{said}"
        );
        let program = bin.join("claude-code-acp");
        std::fs::write(&program, "#!/bin/sh\n")?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
        let engine = add(&mut config, preset(None), lookup)?;
        assert_eq!(engine.program, program.display().to_string());
        assert_eq!(engine.network, Some(EngineNetwork::Model));
        assert_eq!(
            model_origins(&engine)?
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["https://api.anthropic.com:443"]
        );
        let mut local = engine.clone();
        local.env.insert(
            "ANTHROPIC_BASE_URL".to_owned(),
            "http://127.0.0.1:4100/v1".to_owned(),
        );
        assert_eq!(
            model_origins(&local)?
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["http://127.0.0.1:4100"],
            "a base URL replaces the hosts, exactly"
        );
        let no_sign_in = add(
            &mut config,
            NewEngine {
                use_my_sign_in: true,
                ..preset(None)
            },
            lookup,
        );
        let said = no_sign_in
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(said.contains("claude /login"), "{said}");
        std::fs::create_dir_all(tmp.path().join(".claude"))?;
        let signed_in = add(
            &mut config,
            NewEngine {
                use_my_sign_in: true,
                ..preset(None)
            },
            lookup,
        )?;
        assert_eq!(
            sign_in_paths(&signed_in, Some(tmp.path())),
            [tmp.path().join(".claude")]
        );
        Ok(())
    }

    #[test]
    fn a_custom_engine_limited_to_its_model_must_name_it() {
        let mut config = config();
        let mut engine = custom("local", "/usr/bin/agent", &[]);
        engine.network = Some(EngineNetwork::Model);
        assert!(add(&mut config, engine.clone(), NOWHERE).is_err());
        engine
            .env
            .insert("MODEL_BASE_URL".to_owned(), "ftp://x".to_owned());
        assert!(add(&mut config, engine.clone(), NOWHERE).is_err());
        engine.env.insert(
            "MODEL_BASE_URL".to_owned(),
            "http://127.0.0.1:8080".to_owned(),
        );
        assert!(add(&mut config, engine.clone(), NOWHERE).is_ok());
        engine.use_my_sign_in = true;
        assert!(
            add(&mut config, engine, NOWHERE).is_err(),
            "no preset, no sign-in"
        );
    }

    #[test]
    fn a_script_in_an_npm_install_brings_its_whole_node_modules() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().canonicalize()?;
        let package = root.join("tools/node_modules/@scope/agent");
        std::fs::create_dir_all(package.join("dist"))?;
        std::fs::create_dir_all(root.join("tools/node_modules/.bin"))?;
        std::fs::write(package.join("dist/index.js"), "#!/usr/bin/env node\n")?;
        let link = root.join("tools/node_modules/.bin/agent");
        std::os::unix::fs::symlink("../@scope/agent/dist/index.js", &link)?;
        assert_eq!(
            program_files(&link.display().to_string(), &[]),
            [root.join("tools/node_modules")]
        );
        let lone = root.join("lone-binary");
        std::fs::write(&lone, "")?;
        assert_eq!(
            program_files("/usr/bin/node", &[lone.display().to_string()]),
            [lone, Path::new("/usr/bin/node").canonicalize()?]
        );
        Ok(())
    }

    #[test]
    fn engines_are_published_next_to_recipes_and_recipes_win() {
        let mut config = config();
        config.engines.push(AcpEngine {
            name: "agent".into(),
            program: "a".into(),
            ..AcpEngine::default()
        });
        // Written by hand (or by an older agent): the recipe of the same name wins.
        config.engines.push(AcpEngine {
            name: "tests".into(),
            program: "b".into(),
            ..AcpEngine::default()
        });
        let published: Vec<(String, EngineKind)> = published(&config)
            .into_iter()
            .map(|engine| (engine.name, engine.kind))
            .collect();
        assert_eq!(
            published,
            [
                ("tests".to_owned(), EngineKind::Recipe),
                ("agent".to_owned(), EngineKind::Acp)
            ]
        );
        assert_eq!(
            selected(&config, "agent").map(|e| e.program.as_str()),
            Some("a")
        );
        assert_eq!(selected(&config, "tests"), None);
    }
}
