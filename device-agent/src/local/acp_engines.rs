//! Engines beyond recipes: coding agents speaking the Agent Client Protocol, configured
//! locally by name (`engine add NAME --acp -- PROGRAM [ARGS…]`) and published to the server
//! next to the recipes.
//!
//! The server (and so the web) can select an engine by name and pass it a prompt; the
//! program, its arguments and everything the agent does go through this computer's own
//! configuration, guard, policy and sandbox (see [`crate::engines::acp`]).

use std::fmt::Write as _;

use anyhow::{bail, Result};
use tether_protocol::capabilities::{Engine, EngineKind};

use crate::local::folders::check_name;
use crate::local::recipes::shell_words;
use crate::local::state::{put_named, take_named, AcpEngine, Config};

/// Adds (or replaces) the ACP engine `name` starting `program args…`.
///
/// # Errors
/// When the name is invalid or already names a recipe, or the program is empty.
pub fn add(config: &mut Config, name: &str, program: &str, args: &[String]) -> Result<AcpEngine> {
    check_name("engine name", name)?;
    if program.trim().is_empty() {
        bail!(
            "an engine needs a program: tether-agent engine add {name} --acp -- PROGRAM [ARGS...]"
        );
    }
    if config.recipe(name).is_some() {
        bail!("{name:?} already names a recipe; pick another name or remove the recipe first");
    }
    let engine = AcpEngine {
        name: name.to_owned(),
        program: program.to_owned(),
        args: args.to_vec(),
    };
    put_named(&mut config.engines, engine.clone());
    Ok(engine)
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
    });
    let agents = config
        .engines
        .iter()
        .filter(|engine| config.recipe(&engine.name).is_none())
        .map(|engine| Engine {
            name: engine.name.clone(),
            kind: EngineKind::Acp,
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
        return "ACP engines: none (add one with `tether-agent engine add NAME --acp -- PROGRAM [ARGS...]`)\n".to_owned();
    }
    let mut out = "ACP engines:\n".to_owned();
    for engine in engines {
        let _ = writeln!(out, "  {:<20} {}", engine.name, command_line(engine));
    }
    out
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

    #[test]
    fn engines_are_added_replaced_listed_and_removed() -> Result<()> {
        let mut config = config();
        let engine = add(
            &mut config,
            "claude",
            "npx",
            &["claude-code-acp".to_owned()],
        )?;
        assert_eq!(command_line(&engine), "npx claude-code-acp");
        add(
            &mut config,
            "claude",
            "claude-acp",
            &["--flag it".to_owned()],
        )?;
        assert_eq!(config.engines.len(), 1);
        assert_eq!(
            config.acp_engine("claude").map(command_line),
            Some("claude-acp '--flag it'".to_owned())
        );
        assert!(add(&mut config, "Bad Name", "x", &[]).is_err());
        assert!(add(&mut config, "empty", " ", &[]).is_err());
        assert!(
            add(&mut config, "tests", "x", &[]).is_err(),
            "a recipe's name"
        );
        assert!(render(&config.engines).contains("claude-acp '--flag it'"));
        remove(&mut config, "claude")?;
        assert!(remove(&mut config, "claude").is_err());
        assert!(render(&config.engines).contains("none"));
        Ok(())
    }

    #[test]
    fn engines_are_published_next_to_recipes_and_recipes_win() {
        let mut config = config();
        config.engines.push(AcpEngine {
            name: "agent".into(),
            program: "a".into(),
            args: Vec::new(),
        });
        // Written by hand (or by an older agent): the recipe of the same name wins.
        config.engines.push(AcpEngine {
            name: "tests".into(),
            program: "b".into(),
            args: Vec::new(),
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
