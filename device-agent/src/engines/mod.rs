//! The engines a job can run with, each a [`run::Engine`](crate::run::Engine) taking the
//! run's context:
//!
//! - [`recipe`]: a command the owner configured (`recipe add`), run confined;
//! - [`acp`]: a coding agent speaking the Agent Client Protocol (`engine add --acp`), started
//!   confined, every request it makes going through the guard, the run's gate and the
//!   sandbox.
//!
//! [`select`] maps the engine name a job carries to one of them, from this computer's own
//! configuration only; a recipe of the same name as an ACP engine wins.

pub mod acp;
pub mod recipe;

use tether_protocol::jobs::CompleteParams;

use crate::local::acp_engines;
use crate::local::state::{AcpEngine, Config, Recipe};
use crate::run::engine::{Engine, RunContext};
use crate::run::stop::StopReason;

/// An engine configured on this computer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalEngine {
    Recipe(Recipe),
    Acp(AcpEngine),
}

/// The engine `name` selects in `config`: `None` when there is none by that name.
pub fn select(config: &Config, name: &str) -> Option<LocalEngine> {
    if let Some(agent) = acp_engines::selected(config, name) {
        return Some(LocalEngine::Acp(agent.clone()));
    }
    config.recipe(name).cloned().map(LocalEngine::Recipe)
}

impl Engine for LocalEngine {
    async fn run(&self, ctx: RunContext<'_>) -> Result<CompleteParams, StopReason> {
        match self {
            LocalEngine::Recipe(recipe) => recipe.run(ctx).await,
            LocalEngine::Acp(agent) => agent.run(ctx).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_wins_over_an_engine_of_the_same_name() {
        let config: Config = serde_json::from_value(serde_json::json!({
            "installId": "i",
            "recipes": [{"name": "tests", "program": "make", "args": ["test"]}],
            "engines": [
                {"name": "tests", "program": "b", "args": []},
                {"name": "agent", "program": "a", "args": []},
            ],
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        let name = |engine: Option<LocalEngine>| match engine {
            Some(LocalEngine::Recipe(recipe)) => format!("recipe {}", recipe.program),
            Some(LocalEngine::Acp(agent)) => format!("acp {}", agent.program),
            None => "none".to_owned(),
        };
        assert_eq!(name(select(&config, "tests")), "recipe make");
        assert_eq!(name(select(&config, "agent")), "acp a");
        assert_eq!(name(select(&config, "other")), "none");
    }
}
