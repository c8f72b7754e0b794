//! Recipes: commands the owner configured locally, published to the server by name.
//!
//! The server (and so the web) can select a recipe and pass it a prompt; it can never
//! change the program or its arguments.

use anyhow::{bail, Result};

use crate::local::folders::check_name;
use crate::local::state::{put_named, take_named, Config, Recipe};

/// Adds (or replaces) the recipe `name` running `program args…`.
///
/// # Errors
/// When the name is invalid or the program is empty.
pub fn add(config: &mut Config, name: &str, program: &str, args: &[String]) -> Result<Recipe> {
    check_name("recipe name", name)?;
    if program.trim().is_empty() {
        bail!("a recipe needs a program: tether-agent recipe add {name} -- PROGRAM [ARGS...]");
    }
    let recipe = Recipe {
        name: name.to_owned(),
        program: program.to_owned(),
        args: args.to_vec(),
    };
    put_named(&mut config.recipes, recipe.clone());
    Ok(recipe)
}

/// Removes the recipe `name`.
///
/// # Errors
/// When there is no such recipe.
pub fn remove(config: &mut Config, name: &str) -> Result<Recipe> {
    let Some(recipe) = take_named(&mut config.recipes, name) else {
        bail!("there is no recipe named {name:?}");
    };
    Ok(recipe)
}

/// The recipe as a person would type it, for listings.
pub fn command_line(recipe: &Recipe) -> String {
    shell_words(&recipe.program, &recipe.args)
}

/// A program and its arguments as a person would type them, each quoted for a POSIX shell
/// when it needs to be.
pub fn shell_words(program: &str, args: &[String]) -> String {
    std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipes_are_added_replaced_and_removed() -> Result<()> {
        let mut config = Config {
            install_id: "i".into(),
            pairing: None,
            folders: Vec::new(),
            recipes: Vec::new(),
            engines: Vec::new(),
            trusted: Vec::new(),
            accept_web_approvals: true,
            evidence_upload: true,
            evidence_hold: Default::default(),
            console: true,
        };
        let args = vec![
            "-c".to_owned(),
            "echo \"$TETHER_TASK_PROMPT\"; echo it's".to_owned(),
        ];
        let recipe = add(&mut config, "tests", "sh", &args)?;
        assert_eq!(
            command_line(&recipe),
            r#"sh -c 'echo "$TETHER_TASK_PROMPT"; echo it'\''s'"#
        );
        add(&mut config, "tests", "make", &["test".to_owned()])?;
        assert_eq!(config.recipes.len(), 1);
        assert_eq!(
            config.recipe("tests").map(|r| r.program.as_str()),
            Some("make")
        );
        assert!(add(&mut config, "Bad Name", "sh", &[]).is_err());
        assert!(add(&mut config, "empty", " ", &[]).is_err());
        remove(&mut config, "tests")?;
        assert!(remove(&mut config, "tests").is_err());
        Ok(())
    }
}
