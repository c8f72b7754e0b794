//! The command line: parse with clap, then apply one command.

use std::future::Future;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::daemon::{self, DaemonEnd};
use crate::state::DataDir;
use crate::{exit_code, folders, pairing, recipes, sandbox, status};

/// What `run` prints when the server revoked this computer.
pub const REVOKED_MESSAGE: &str =
    "This computer was revoked from the server; pair it again with `tether-agent pair URL`";

/// Tether's agent: pairs this computer with a Tether server and runs the work assigned to
/// it, in folders you share, with recipes you configure.
#[derive(Debug, Parser)]
#[command(name = "tether-agent", version)]
pub struct Cli {
    /// Where the agent keeps its configuration and keys.
    #[arg(long, global = true, env = "TETHER_AGENT_HOME", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pair this computer with a server: prints a code to approve on the web.
    Pair {
        /// The server's address, for example https://tether.example.com.
        url: String,
        /// The name the computer gets on the web (default: its host name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Run the agent in the foreground: heartbeat, claim and run jobs until Ctrl-C.
    Run {
        /// How many jobs may run at the same time.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        max_runs: u16,
        /// When no sandbox works on this computer, run jobs UNCONFINED instead of refusing
        /// them (reported to the server as such). Never used when a sandbox works.
        #[arg(long)]
        allow_unsandboxed: bool,
    },
    /// Show whether this computer is paired, and what it shares.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Remove this computer from its server and forget its token and seal key.
    Unpair,
    /// Folders jobs may work in, by label.
    Folders {
        #[command(subcommand)]
        command: FoldersCommand,
    },
    /// Commands jobs may run, by name.
    Recipe {
        #[command(subcommand)]
        command: RecipeCommand,
    },
    /// Secrets sent sealed from the web, kept encrypted on this computer (names only here).
    Secrets {
        #[command(subcommand)]
        command: SecretsCommand,
    },
    /// How this agent confines what it runs.
    Sandbox {
        #[command(subcommand)]
        command: SandboxCommand,
    },
    /// Internal: the launcher a confined run starts through (restricts itself, then runs the
    /// program its spec file names and supervises its whole process tree).
    #[command(hide = true)]
    SandboxExec {
        #[arg(long, value_name = "FILE")]
        spec_file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum FoldersCommand {
    /// Share an existing directory under a label (a-z, 0-9, _ and -).
    Share { label: String, path: PathBuf },
    /// List shared folders.
    List,
    /// Stop sharing a folder.
    Remove { label: String },
}

#[derive(Debug, Subcommand)]
pub enum RecipeCommand {
    /// Add a recipe: `recipe add NAME -- PROGRAM [ARGS...]`. The job's prompt reaches it as
    /// TETHER_TASK_PROMPT.
    Add {
        name: String,
        #[arg(last = true, required = true, num_args = 1.., value_name = "PROGRAM [ARGS]")]
        command: Vec<String>,
    },
    /// List recipes.
    List,
    /// Remove a recipe.
    Remove { name: String },
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// List the names of saved secrets and when they were saved (never values).
    List,
    /// Forget a saved secret.
    Forget { name: String },
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Report the confinement this agent gives recipes, truthfully.
    Status {
        #[arg(long)]
        json: bool,
    },
}

/// Applies the parsed command; returns the process exit code. `shutdown` ends `run`.
pub async fn execute(cli: Cli, shutdown: impl Future) -> i32 {
    match apply(cli, shutdown).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("Error: {err:#}");
            exit_code::FAILURE
        }
    }
}

async fn apply(cli: Cli, shutdown: impl Future) -> Result<i32> {
    let data_dir = DataDir::resolve(cli.data_dir)?;
    match cli.command {
        Command::Pair { url, name } => {
            let paired = pairing::pair(&data_dir, &url, name).await?;
            println!("Paired as {}", paired.name);
            Ok(0)
        }
        Command::Run {
            max_runs,
            allow_unsandboxed,
        } => {
            // Probe once, before anything runs; every run and heartbeat uses this result.
            let settings = sandbox::Settings::from_env(allow_unsandboxed);
            let sandbox = sandbox::install(sandbox::Sandbox::probe(&settings));
            sandbox::install_guard(crate::guard::Guard::for_user(data_dir.root()));
            eprint!("{}", status::render_sandbox(sandbox.report()));
            run(data_dir, usize::from(max_runs), shutdown).await
        }
        Command::SandboxExec { spec_file } => sandbox::launcher::run_main(&spec_file),
        Command::Status { json } => {
            let report = status::gather(&data_dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", status::render(&report));
            }
            Ok(0)
        }
        Command::Unpair => {
            match pairing::unpair(&data_dir).await? {
                Some(pairing) => println!("Unpaired {} from {}", pairing.name, pairing.server),
                None => println!("This computer was not paired; its token and seal key are gone."),
            }
            Ok(0)
        }
        Command::Folders { command } => apply_folders(&data_dir, command),
        Command::Recipe { command } => apply_recipes(&data_dir, command),
        Command::Secrets { command } => apply_secrets(&data_dir, command),
        Command::Sandbox {
            command: SandboxCommand::Status { json },
        } => {
            let report = sandbox::report();
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", status::render_sandbox(&report));
            }
            Ok(0)
        }
    }
}

fn apply_secrets(data_dir: &DataDir, command: SecretsCommand) -> Result<i32> {
    let vault = crate::vault::Vault::new(data_dir);
    match command {
        SecretsCommand::List => {
            let names = vault.list()?;
            if names.is_empty() {
                println!("No secrets saved.");
            }
            for saved in names {
                let at = chrono::DateTime::from_timestamp(saved.saved_at, 0)
                    .map_or_else(|| saved.saved_at.to_string(), |at| at.to_rfc3339());
                println!("{}\tsaved {at}", saved.name);
            }
            Ok(0)
        }
        SecretsCommand::Forget { name } => {
            if vault.forget(&name)? {
                println!("Forgot {name}.");
                Ok(0)
            } else {
                eprintln!("No secret named {name} is saved.");
                Ok(exit_code::FAILURE)
            }
        }
    }
}

async fn run(data_dir: DataDir, max_runs: usize, shutdown: impl Future) -> Result<i32> {
    let Some(ctx) = daemon::load_ctx(data_dir, max_runs)? else {
        eprintln!("This computer is not paired; run `tether-agent pair URL` first.");
        return Ok(exit_code::NOT_PAIRED);
    };
    if let Some(pairing) = &ctx.config.pairing {
        eprintln!(
            "tether-agent {} running as {:?} ({}) with {}; Ctrl-C to stop",
            crate::AGENT_VERSION,
            pairing.name,
            pairing.device_id,
            pairing.server
        );
    }
    match daemon::run(ctx, shutdown).await? {
        DaemonEnd::Shutdown => {
            eprintln!("Stopped.");
            Ok(0)
        }
        DaemonEnd::Revoked => {
            eprintln!("{REVOKED_MESSAGE}");
            Ok(exit_code::REVOKED)
        }
    }
}

fn apply_folders(data_dir: &DataDir, command: FoldersCommand) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    match command {
        FoldersCommand::Share { label, path } => {
            let folder = folders::share(&mut config, &label, &path)?;
            data_dir.save_config(&config)?;
            println!("Sharing {} as {:?}", folder.path.display(), folder.label);
        }
        FoldersCommand::List => print!("{}", status::render_folders(&config.folders)),
        FoldersCommand::Remove { label } => {
            let folder = folders::remove(&mut config, &label)?;
            data_dir.save_config(&config)?;
            println!(
                "No longer sharing {} ({:?})",
                folder.path.display(),
                folder.label
            );
        }
    }
    Ok(0)
}

fn apply_recipes(data_dir: &DataDir, command: RecipeCommand) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    match command {
        RecipeCommand::Add { name, command } => {
            let (program, args) = command
                .split_first()
                .ok_or_else(|| anyhow::anyhow!("a recipe needs a program"))?;
            let recipe = recipes::add(&mut config, &name, program, args)?;
            data_dir.save_config(&config)?;
            println!(
                "Recipe {:?}: {}",
                recipe.name,
                recipes::command_line(&recipe)
            );
        }
        RecipeCommand::List => print!("{}", status::render_recipes(&config.recipes)),
        RecipeCommand::Remove { name } => {
            let recipe = recipes::remove(&mut config, &name)?;
            data_dir.save_config(&config)?;
            println!("Removed recipe {:?}", recipe.name);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn recipe_add_takes_everything_after_the_double_dash() {
        let cli = Cli::try_parse_from([
            "tether-agent",
            "--data-dir",
            "/tmp/x",
            "recipe",
            "add",
            "tests",
            "--",
            "sh",
            "-c",
            "echo --x",
        ]);
        let command = cli.map(|cli| cli.command).map_err(|err| err.to_string());
        match command {
            Ok(Command::Recipe {
                command: RecipeCommand::Add { name, command },
            }) => {
                assert_eq!(name, "tests");
                assert_eq!(command, ["sh", "-c", "echo --x"]);
            }
            other => panic!("{other:?}"),
        }
    }
}
