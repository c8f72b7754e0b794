//! The command line: parse with clap, then apply one command.

pub mod github;
pub mod mcp;
pub mod status;
pub mod tool;

use std::future::Future;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::daemon::{self, DaemonEnd};
use crate::local::presets::PresetName;
use crate::local::state::{Config, DataDir, EngineNetwork, Recipe};
use crate::local::{acp_engines, folders, recipes};
use crate::policy::guard::{Guard, Refusal};
use crate::policy::{explain, hard_floor, trust};
use crate::remote::pairing;
use crate::sandbox::program_sight;
use crate::{exit_code, sandbox};

/// What `run` prints when the server revoked this computer.
pub const REVOKED_MESSAGE: &str =
    "This computer was revoked from the server; pair it again with `tether-agent pair URL`";

/// What `run` prints when the agent's program stayed missing (`TETHER_INSTALL_PATH`).
pub const UNINSTALLED_MESSAGE: &str =
    "The agent was uninstalled (its program stayed missing), so this computer left its server and forgot its pairing";

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
    /// Coding agents jobs may run, by name, speaking the Agent Client Protocol.
    Engine {
        #[command(subcommand)]
        command: EngineCommand,
    },
    /// Secrets sent sealed from the web, kept encrypted on this computer (names only here).
    Secrets {
        #[command(subcommand)]
        command: SecretsCommand,
    },
    /// GitHub tokens for pull requests, one per host, kept apart from the secrets (never
    /// shown, never given to a job).
    Github {
        #[command(subcommand)]
        command: github::GithubCommand,
    },
    /// Inside a job: one HTTP request with `{{NAME}}` in a header or the body replaced by
    /// the saved secret NAME, sent by the agent only to that secret's allowed sites. Prints
    /// the answer's body with every secret hidden; exits 22 for a status from 400, 2 when
    /// refused.
    SecretHttp(SecretHttpArgs),
    /// Inside a job: ask the agent running it for more context (`tool context job.chain`,
    /// `job.get ID`, `jobs.search WORDS…`) or the job's attachments (`tool attachments`,
    /// `tool attachment ID`). Prints the answer; exits 1 when refused, 2 outside a job.
    Tool {
        #[command(subcommand)]
        command: tool::ToolCommand,
    },
    /// Internal: the stdio MCP server a job's coding agent starts (its tool channel).
    #[command(hide = true)]
    Mcp,
    /// Folders you trust on this computer: ask mode works there without asking.
    Trust {
        #[command(subcommand)]
        command: TrustCommand,
    },
    /// Whether answers given on the web count on this computer (shows the setting without
    /// `on` or `off`).
    Approvals {
        #[arg(value_enum)]
        state: Option<Switch>,
    },
    /// What becomes of the files a run leaves in $TETHER_EVIDENCE_DIR: uploaded (`on`), all
    /// kept here (`off`), and which are held here for you to preview, release or discard on
    /// the job page (`hold`). Shows the settings without a subcommand.
    Evidence {
        #[command(subcommand)]
        command: Option<EvidenceCommand>,
    },
    /// Whether the owner's console (a terminal, the Code tab and Watch, unlocked with a
    /// passkey on the web) may reach this computer (shows the setting without `on` or `off`).
    Console {
        #[arg(value_enum)]
        state: Option<Switch>,
    },
    /// Questions runs on this computer wait on: list them, answer them here.
    Decisions {
        #[command(subcommand)]
        command: DecisionsCommand,
    },
    /// Show what a run's policy does with an action, and the rule that decides (a dry run of
    /// the same check runs go through).
    Explain(ExplainArgs),
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
pub enum EngineCommand {
    /// Add an engine: `engine add NAME --preset claude-code|codex|gemini|qwen`, or `engine
    /// add NAME --acp -- PROGRAM [ARGS...]` for any other agent. The program is started
    /// confined in the job's folder and gets the job's prompt over the Agent Client Protocol.
    Add {
        name: String,
        /// A coding agent Tether knows: claude-code, codex, gemini or qwen (its program is
        /// found on PATH; its state, keys, sign-in and model hosts are known).
        #[arg(long, value_name = "PRESET", conflicts_with = "acp", value_parser = parse_preset)]
        preset: Option<PresetName>,
        /// The program speaks the Agent Client Protocol on its stdin and stdout (the program
        /// and its arguments follow `--`).
        #[arg(long, required_unless_present = "preset")]
        acp: bool,
        /// The preset's program, where it is not on PATH.
        #[arg(long, value_name = "PATH", requires = "preset")]
        program: Option<String>,
        /// A variable the engine's process gets on every run (never the commands it runs),
        /// such as a base URL; keys go with --secret.
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// A saved secret the engine's process gets as a variable of the same name on every
        /// run (send it sealed from the Computers page).
        #[arg(long = "secret", value_name = "NAME")]
        secrets: Vec<String>,
        /// What the engine's own process may reach: off, model (only its model's endpoints;
        /// the default with a preset) or on. The commands it runs follow the job's choice.
        #[arg(long, value_name = "off|model|on", value_parser = parse_network)]
        network: Option<EngineNetwork>,
        /// Let the engine use your own sign-in of this agent (~/.claude, ~/.codex, ~/.gemini,
        /// ~/.qwen), read-write for its process only.
        #[arg(long, requires = "preset")]
        use_my_sign_in: bool,
        /// With --acp: the program and its arguments; with a preset: arguments added to the
        /// preset's.
        #[arg(last = true, value_name = "PROGRAM [ARGS]")]
        command: Vec<String>,
    },
    /// List engines.
    List,
    /// Remove an engine.
    Remove { name: String },
    /// Start an engine as a run would, in a folder made for the check, and say whether a
    /// session starts (kept and shown on the Computers page). Exits 1 when it does not.
    Check {
        name: String,
        /// Print the check as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TrustCommand {
    /// Trust a folder (never /, system folders, the home folder itself, or a folder holding
    /// keys or the agent's data).
    Add { path: PathBuf },
    /// List trusted folders.
    List,
    /// Stop trusting a folder.
    Remove { path: PathBuf },
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// Upload a run's evidence files with its result (except the ones `hold` keeps here).
    On,
    /// Keep every evidence file on this computer: only its description goes up, and it can
    /// be previewed or discarded from the job page, never released.
    Off,
    /// Which files stay on this computer, described on the job page, until you preview,
    /// release or discard them there: `screenshots` (the default: screenshots and their
    /// small previews), `all`, or `none`. Held files are deleted 30 days after the run.
    Hold {
        #[arg(value_enum)]
        which: HoldChoice,
    },
}

/// The files `evidence hold` keeps on this computer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HoldChoice {
    Screenshots,
    All,
    None,
}

impl From<HoldChoice> for tether_protocol::evidence::EvidenceHold {
    fn from(choice: HoldChoice) -> Self {
        match choice {
            HoldChoice::Screenshots => Self::Screenshots,
            HoldChoice::All => Self::All,
            HoldChoice::None => Self::None,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum DecisionsCommand {
    /// List the questions waiting on this computer.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Allow one, once (or for the rest of its run with --for-run).
    Allow {
        id: String,
        #[arg(long)]
        for_run: bool,
    },
    /// Deny one (a deny counts once).
    Deny { id: String },
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["run", "read", "write", "fetch"])))]
pub struct ExplainArgs {
    /// The run's mode: ask, review or unattended.
    #[arg(long, default_value = "ask", value_parser = parse_mode)]
    pub mode: tether_protocol::jobs::Mode,
    /// The run's folder (default: the current directory).
    #[arg(long, value_name = "PATH")]
    pub folder: Option<PathBuf>,
    /// The job runs with the network on.
    #[arg(long)]
    pub network: bool,
    /// Take the folder as trusted (besides the folders `trust list` shows).
    #[arg(long)]
    pub trusted: bool,
    #[arg(long)]
    pub json: bool,
    /// Reading a file.
    #[arg(long, value_name = "PATH")]
    pub read: Option<PathBuf>,
    /// Creating, editing, deleting or moving a file.
    #[arg(long, value_name = "PATH")]
    pub write: Option<PathBuf>,
    /// Reaching another computer.
    #[arg(long, value_name = "TARGET")]
    pub fetch: Option<String>,
    /// Starting a program; put it last, everything after it is the command.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "PROGRAM [ARGS]")]
    pub run: Option<Vec<String>>,
}

fn parse_mode(raw: &str) -> Result<tether_protocol::jobs::Mode, String> {
    tether_protocol::jobs::Mode::ALL
        .into_iter()
        .find(|mode| mode.as_str() == raw)
        .ok_or_else(|| "one of ask, review, unattended".to_owned())
}

/// `tether-agent secret-http`.
#[derive(Debug, clap::Args)]
pub struct SecretHttpArgs {
    /// The address (a secret never goes here).
    url: String,
    /// The method.
    #[arg(short = 'X', long, default_value = "GET")]
    method: String,
    /// A header, "Name: value"; repeat for more.
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// The body.
    #[arg(short = 'd', long, conflicts_with = "data_file")]
    data: Option<String>,
    /// The body, read from a file (text).
    #[arg(long)]
    data_file: Option<PathBuf>,
    /// Print the status and headers before the body.
    #[arg(short = 'i', long)]
    include: bool,
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

/// Setup every run would refuse, refused when it is configured: the reason and the fix, in
/// one line. The command exits with [`exit_code::REFUSED`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(String);

/// Applies the parsed command; returns the process exit code. `shutdown` ends `run`.
pub async fn execute(cli: Cli, shutdown: impl Future) -> i32 {
    match apply(cli, shutdown).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("Error: {err:#}");
            if err.downcast_ref::<Refused>().is_some() {
                exit_code::REFUSED
            } else {
                exit_code::FAILURE
            }
        }
    }
}

async fn apply(cli: Cli, shutdown: impl Future) -> Result<i32> {
    // Run inside a job's sandbox, where this computer's data dir is out of sight.
    match cli.command {
        Command::SecretHttp(args) => return secret_http(args).await,
        Command::Tool { command } => return tool::apply(command).await,
        Command::Mcp => return mcp::command().await,
        _ => {}
    }
    let data_dir = DataDir::resolve(cli.data_dir)?;
    match cli.command {
        Command::SecretHttp(args) => secret_http(args).await,
        Command::Tool { command } => tool::apply(command).await,
        Command::Mcp => mcp::command().await,
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
        Command::Engine {
            command: EngineCommand::Check { name, json },
        } => check_engine(&data_dir, &name, json).await,
        Command::Engine { command } => apply_engines(&data_dir, command),
        Command::Secrets { command } => apply_secrets(&data_dir, command),
        Command::Github { command } => github::apply(&data_dir, command),
        Command::Trust { command } => apply_trust(&data_dir, command),
        Command::Approvals { state } => apply_approvals(&data_dir, state),
        Command::Evidence { command } => apply_evidence(&data_dir, command),
        Command::Console { state } => apply_console(&data_dir, state),
        Command::Decisions { command } => apply_decisions(&data_dir, command),
        Command::Explain(args) => apply_explain(&data_dir, args),
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

async fn secret_http(args: SecretHttpArgs) -> Result<i32> {
    let body = match &args.data_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|err| anyhow::anyhow!("cannot read {} as text: {err}", path.display()))?,
        ),
        None => args.data,
    };
    tokio::task::spawn_blocking(move || {
        crate::run::secret_http::command(args.method, args.url, args.headers, body, args.include)
    })
    .await?
}

fn apply_secrets(data_dir: &DataDir, command: SecretsCommand) -> Result<i32> {
    let vault = crate::local::vault::Vault::new(data_dir);
    match command {
        SecretsCommand::List => {
            let names = vault.list()?;
            if names.is_empty() {
                println!("No secrets saved.");
            }
            for saved in names {
                let at = chrono::DateTime::from_timestamp(saved.saved_at, 0)
                    .map_or_else(|| saved.saved_at.to_string(), |at| at.to_rfc3339());
                match saved.allow {
                    Some(sites) => println!(
                        "{}\tsaved {at}\tonly to {} (by reference, never in a job's environment)",
                        saved.name,
                        sites.join(", ")
                    ),
                    None => println!("{}\tsaved {at}", saved.name),
                }
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

fn apply_trust(data_dir: &DataDir, command: TrustCommand) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    match command {
        TrustCommand::Add { path } => {
            let guard = crate::policy::guard::Guard::for_user(data_dir.root());
            let folder = trust::add(&mut config, &guard, &path)?;
            data_dir.save_config(&config)?;
            println!(
                "Trusting {}: runs in ask mode work there without asking.",
                folder.display()
            );
        }
        TrustCommand::List => print!("{}", trust::render(&config.trusted)),
        TrustCommand::Remove { path } => {
            let folder = trust::remove(&mut config, &path)?;
            data_dir.save_config(&config)?;
            println!("No longer trusting {}", folder.display());
        }
    }
    Ok(0)
}

fn apply_approvals(data_dir: &DataDir, state: Option<Switch>) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    if let Some(state) = state {
        config.accept_web_approvals = state == Switch::On;
        data_dir.save_config(&config)?;
    }
    if config.accept_web_approvals {
        println!("Approvals on: answers given on the web count on this computer (the first valid answer, web or here, wins).");
    } else {
        println!("Approvals off: answers given on the web are ignored; runs wait for `tether-agent decisions allow|deny` on this computer. The web shows each question as waiting on the computer.");
    }
    if state.is_some() {
        println!("A running agent tells the server at its next heartbeat.");
    }
    Ok(0)
}

fn apply_evidence(data_dir: &DataDir, command: Option<EvidenceCommand>) -> Result<i32> {
    use tether_protocol::evidence::EvidenceHold;
    let mut config = data_dir.load_or_init_config()?;
    match command {
        Some(EvidenceCommand::On) => config.evidence_upload = true,
        Some(EvidenceCommand::Off) => config.evidence_upload = false,
        Some(EvidenceCommand::Hold { which }) => config.evidence_hold = which.into(),
        None => {}
    }
    if command.is_some() {
        data_dir.save_config(&config)?;
    }
    if config.evidence_upload {
        println!("Evidence on: the files a run leaves in $TETHER_EVIDENCE_DIR are uploaded with its result (text with saved secret values hidden).");
    } else {
        println!("Evidence off: the files a run leaves in $TETHER_EVIDENCE_DIR stay on this computer; only their names, sizes and digests are sent. From the job page they can be previewed or discarded, not released.");
    }
    match (config.evidence_upload, config.evidence_hold) {
        (false, _) => println!("Held: every file (evidence is off)."),
        (true, EvidenceHold::Screenshots) => println!("Held: screenshots and their previews stay on this computer until you preview, release or discard them on the job page."),
        (true, EvidenceHold::All) => println!("Held: every file stays on this computer until you preview, release or discard it on the job page."),
        (true, EvidenceHold::None) => println!("Held: nothing."),
    }
    if command.is_some() {
        println!("A running agent tells the server at its next heartbeat.");
    }
    Ok(0)
}

fn apply_console(data_dir: &DataDir, state: Option<Switch>) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    if let Some(state) = state {
        config.console = state == Switch::On;
        data_dir.save_config(&config)?;
    }
    if config.console {
        println!("Console on: after unlocking with a passkey, you can run commands in this computer's shared folders (judged by the same policy as a run's, confined by the same sandbox), edit their files and watch its running jobs from the web.");
    } else {
        println!("Console off: console sessions are refused; a session open now ends at its next request.");
    }
    if state.is_some() {
        println!("A running agent applies it to the next console request and tells the server at its next heartbeat.");
    }
    Ok(0)
}

fn apply_decisions(data_dir: &DataDir, command: DecisionsCommand) -> Result<i32> {
    use tether_protocol::decisions::{Answer, Scope};
    let local = crate::local::decisions::LocalDecisions::new(data_dir.clone());
    let (id, answer) = match command {
        DecisionsCommand::List { json } => {
            let pending = local.list()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&pending)?);
            } else {
                print!(
                    "{}",
                    crate::local::decisions::render(&pending, chrono::Utc::now())
                );
            }
            return Ok(0);
        }
        DecisionsCommand::Allow { id, for_run } => {
            let scope = if for_run { Scope::Session } else { Scope::Once };
            (
                id,
                crate::local::decisions::LocalAnswer {
                    answer: Answer::Allow,
                    scope,
                },
            )
        }
        DecisionsCommand::Deny { id } => (
            id,
            crate::local::decisions::LocalAnswer {
                answer: Answer::Deny,
                scope: Scope::Once,
            },
        ),
    };
    let pending = local.answer(&id, answer)?;
    let what = match (answer.answer, answer.scope) {
        (Answer::Allow, Scope::Once) => "Allowed once",
        (Answer::Allow, Scope::Session) => "Allowed for the rest of the run",
        (Answer::Deny, _) => "Denied",
    };
    println!("{what}: {}", pending.question);
    Ok(0)
}

fn apply_explain(data_dir: &DataDir, args: ExplainArgs) -> Result<i32> {
    use crate::policy::Action;
    let config = data_dir.load_or_init_config()?;
    let folder = match args.folder {
        Some(folder) => folder,
        None => std::env::current_dir()?,
    };
    let folder = folder.canonicalize().unwrap_or(folder);
    let mut trusted = config.trusted.clone();
    if args.trusted {
        trusted.push(folder.clone());
    }
    let action = if let Some(argv) = args.run {
        Action::Command {
            argv,
            cwd: folder.clone(),
        }
    } else if let Some(path) = args.read {
        Action::ReadFile {
            path: crate::policy::guard::absolute(&path),
        }
    } else if let Some(path) = args.write {
        Action::WriteFile {
            path: crate::policy::guard::absolute(&path),
        }
    } else if let Some(target) = args.fetch {
        Action::Network { target }
    } else {
        anyhow::bail!("name an action: --run, --read, --write or --fetch");
    };
    let situation = explain::Situation {
        mode: args.mode,
        folder,
        network: args.network,
        trusted,
        sandbox: sandbox::report().strength,
        guard: crate::policy::guard::Guard::for_user(data_dir.root()),
    };
    let explanation = explain::explain(situation, &action);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&explanation)?);
    } else {
        print!("{}", explain::render(&explanation));
    }
    Ok(0)
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
        DaemonEnd::Uninstalled { server_told } => {
            eprintln!("{UNINSTALLED_MESSAGE}");
            if !server_told {
                eprintln!("The server could not be reached: remove this computer on the web too.");
            }
            Ok(exit_code::UNINSTALLED)
        }
    }
}

fn apply_folders(data_dir: &DataDir, command: FoldersCommand) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    match command {
        FoldersCommand::Share { label, path } => {
            let guard = Guard::for_user(data_dir.root());
            let said = share_folder(&mut config, &guard, &label, &path)?;
            data_dir.save_config(&config)?;
            println!("{said}");
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

/// `folders share`: refuses a folder the guard would refuse at run time (the run's own check,
/// [`Guard::check_shared_folder`], on the folder as shared), then shares it. Returns the line
/// to print, which names the folder a re-shared label no longer points to.
///
/// # Errors
/// [`Refused`] for what the guard refuses; an invalid label, or a path that is not a
/// directory.
pub fn share_folder(
    config: &mut Config,
    guard: &Guard,
    label: &str,
    path: &Path,
) -> Result<String> {
    folders::check_name("label", label)?;
    let checked = guard
        .check_folder(path)
        .and_then(|canonical| guard.check_shared_folder(label, &canonical))
        .map_err(|refusal| Refused(format!("not sharing {label}: {}", with_fix(&refusal))))?;
    let was = config.folder(label).map(|folder| folder.path.clone());
    let folder = folders::share(config, label, &checked)?;
    Ok(match was {
        Some(was) if was != folder.path => format!(
            "{label}: now {} (was {})",
            folder.path.display(),
            was.display()
        ),
        _ => format!("Sharing {} as {:?}", folder.path.display(), folder.label),
    })
}

/// A guard refusal with what to do instead, when its sentence does not say.
fn with_fix(refusal: &Refusal) -> String {
    match refusal {
        Refusal::Missing { .. } => format!("{refusal}; share an existing directory"),
        Refusal::Protected { .. } => format!("{refusal}; share a project folder outside it"),
        Refusal::BlockedRoot { .. } | Refusal::HoldsProtected { .. } | Refusal::Moved { .. } => {
            refusal.to_string()
        }
    }
}

/// `recipe add`: refuses a command the hard floor refuses (the check every run makes on the
/// recipe's command line, [`hard_floor::check`]), then adds the recipe.
///
/// # Errors
/// [`Refused`] for what the hard floor refuses; an invalid name or an empty program.
pub fn add_recipe(config: &mut Config, name: &str, command: &[String]) -> Result<Recipe> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("a recipe needs a program"))?;
    if let Some(refusal) = hard_floor::check(command).refusal() {
        return Err(Refused(format!(
            "recipe {name:?} would never run: {refusal}; no mode or answer lifts the hard floor, so give the recipe a command without it (docs/POLICY.md)"
        ))
        .into());
    }
    recipes::add(config, name, program, args)
}

/// `recipe add`: refuses a program a job's sandbox could not start (not on `PATH`, or
/// outside what the sandbox shows), as a run would later end `blocked` on it. Looked up
/// with this command's `PATH`, which the agent started from the same account passes on.
///
/// # Errors
/// [`Refused`] naming the path and what to do.
fn check_recipe_program(data_dir: &DataDir, config: &Config, recipe: &Recipe) -> Result<()> {
    let path_var = std::env::var("PATH").ok();
    let home = dirs::home_dir();
    let folders: Vec<PathBuf> = config.folders.iter().map(|f| f.path.clone()).collect();
    let guard = Guard::for_user(data_dir.root());
    let sight = program_sight::Sight {
        path_var: path_var.as_deref(),
        home: home.as_deref(),
        folders: &folders,
        guard: &guard,
    };
    program_sight::check_program(&recipe.program, &sight)
        .map_err(|why| Refused(format!("recipe {:?} would never start: {why}", recipe.name)).into())
}

fn apply_recipes(data_dir: &DataDir, command: RecipeCommand) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    match command {
        RecipeCommand::Add { name, command } => {
            let recipe = add_recipe(&mut config, &name, &command)?;
            check_recipe_program(data_dir, &config, &recipe)?;
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

fn apply_engines(data_dir: &DataDir, command: EngineCommand) -> Result<i32> {
    let mut config = data_dir.load_or_init_config()?;
    match command {
        EngineCommand::Add {
            name,
            preset,
            acp: _,
            program,
            env,
            secrets,
            network,
            use_my_sign_in,
            command,
        } => {
            let (program, args) = match (preset, program) {
                (Some(_), program) => (program, command),
                (None, _) => match command.split_first() {
                    Some((program, args)) => (Some(program.clone()), args.to_vec()),
                    None => (None, Vec::new()),
                },
            };
            let new = acp_engines::NewEngine {
                name,
                preset,
                program,
                args,
                env: engine_variables(&env)?,
                secrets,
                network,
                use_my_sign_in,
            };
            let path_var = std::env::var("PATH").ok();
            let home = dirs::home_dir();
            let lookup = acp_engines::Lookup {
                path_var: path_var.as_deref(),
                home: home.as_deref(),
            };
            let engine = acp_engines::add(&mut config, new, lookup)?;
            check_program_files(data_dir, &engine)?;
            data_dir.save_config(&config)?;
            println!(
                "Engine {:?} (acp): {}",
                engine.name,
                acp_engines::command_line(&engine)
            );
            println!("  {}", acp_engines::settings_line(&engine));
            for note in unsaved_secrets(data_dir, &engine) {
                println!("  {note}");
            }
            println!(
                "  Check it with `tether-agent engine check {}`.",
                engine.name
            );
        }
        EngineCommand::List => print!("{}", acp_engines::render(&config.engines)),
        EngineCommand::Remove { name } => {
            let engine = acp_engines::remove(&mut config, &name)?;
            data_dir.save_config(&config)?;
            println!("Removed engine {:?}", engine.name);
        }
        EngineCommand::Check { name, .. } => {
            anyhow::bail!("checking the engine {name:?} needs the agent's runtime")
        }
    }
    Ok(0)
}

/// `engine check NAME`: the check is kept for the heartbeat to publish, then printed.
async fn check_engine(data_dir: &DataDir, name: &str, json: bool) -> Result<i32> {
    let config = data_dir.load_or_init_config()?;
    let Some(engine) = config.acp_engine(name) else {
        anyhow::bail!("there is no ACP engine named {name:?} (see `tether-agent engine list`)");
    };
    let guard = crate::policy::guard::Guard::for_user(data_dir.root());
    let check = crate::engines::acp::check::check(engine, &guard).await;
    crate::local::engine_checks::save(data_dir, name, &check)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&check)?);
    } else {
        print!("{}", crate::engines::acp::check::render_check(name, &check));
    }
    Ok(if check.ok { 0 } else { 1 })
}

fn parse_preset(name: &str) -> Result<PresetName, String> {
    PresetName::parse(name)
}

fn parse_network(value: &str) -> Result<EngineNetwork, String> {
    match value {
        "off" => Ok(EngineNetwork::Off),
        "model" => Ok(EngineNetwork::Model),
        "on" => Ok(EngineNetwork::On),
        _ => Err(format!("{value:?} is not off, model or on")),
    }
}

/// Variables the engine itself sets up (its home, state folders, proxy) or that are the
/// agent's own; `--env` may not set them.
const RESERVED_VARIABLES: &[&str] = &[
    "HOME",
    "TMPDIR",
    "PATH",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
];

/// `--env NAME=VALUE` words as variables: a name a shell accepts, not one a secret belongs
/// under (those go with `--secret`, sent sealed), nor one the engine's setup owns.
fn engine_variables(words: &[String]) -> Result<std::collections::BTreeMap<String, String>> {
    let mut variables = std::collections::BTreeMap::new();
    for word in words {
        let Some((name, value)) = word.split_once('=') else {
            anyhow::bail!("--env {word:?} is not NAME=VALUE");
        };
        if !tether_protocol::secrets::valid_name(name) {
            anyhow::bail!("--env {name:?} is not a variable name");
        }
        if crate::run::environment::names_a_credential(name) {
            anyhow::bail!(
                "--env {name}: a key never goes in the configuration file; send it sealed from the Computers page and name it with --secret {name}"
            );
        }
        let upper = name.to_ascii_uppercase();
        if RESERVED_VARIABLES.contains(&upper.as_str()) || upper.starts_with("TETHER_") {
            anyhow::bail!("--env {name}: Tether sets this variable for the engine itself");
        }
        variables.insert(name.to_owned(), value.to_owned());
    }
    Ok(variables)
}

/// The engine's program files must be readable in the sandbox: refused here, with the fix,
/// when the guard would hide them from every run.
fn check_program_files(data_dir: &DataDir, engine: &crate::local::state::AcpEngine) -> Result<()> {
    let guard = Guard::for_user(data_dir.root());
    for path in acp_engines::program_files(&engine.program, &engine.args) {
        if let Err(refusal) = guard.check_access(&path) {
            anyhow::bail!(
                "the engine's program files at {} cannot be shown to a confined run ({refusal}); install the agent elsewhere, for example with `npm install -g`, or under a folder of its own",
                path.display()
            );
        }
    }
    Ok(())
}

/// A sentence for each of the engine's secrets this computer has not saved yet.
fn unsaved_secrets(data_dir: &DataDir, engine: &crate::local::state::AcpEngine) -> Vec<String> {
    let saved: Vec<String> = crate::local::vault::Vault::new(data_dir)
        .list()
        .map(|names| names.into_iter().map(|saved| saved.name).collect())
        .unwrap_or_default();
    engine
        .secrets
        .iter()
        .filter(|name| !saved.contains(name))
        .map(|name| {
            format!(
                "The secret {name} is not saved on this computer yet: send it sealed from the Computers page (a run of this engine is blocked until then)."
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn config() -> Config {
        Config {
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
        }
    }

    fn refusal(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(err) if err.downcast_ref::<Refused>().is_some() => err.to_string(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn sharing_refuses_what_the_guard_refuses_at_run_time() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().canonicalize()?.join("home");
        let data_dir = home.join("projects").join("agent-data");
        let project = home.join("projects").join("app");
        for dir in [&data_dir.join("inside"), &project, &home.join(".ssh")] {
            std::fs::create_dir_all(dir)?;
        }
        let guard = Guard::new(Some(home.clone()), &data_dir);
        let mut config = config();
        for (path, says) in [
            (PathBuf::from("/"), "a blocked root"),
            (home.clone(), "the home folder itself"),
            (home.join("projects"), "the agent's own data"),
            (data_dir.join("inside"), "the agent's own data"),
            (home.join(".ssh"), "is protected"),
            (home.join("nope"), "share an existing directory"),
        ] {
            let said = refusal(share_folder(&mut config, &guard, "work", &path));
            assert!(said.starts_with("not sharing work: "), "{said}");
            assert!(said.contains(says), "{path:?}: {said}");
            assert!(!said.contains('\n'), "{said}");
        }
        assert!(config.folders.is_empty());

        let said = share_folder(&mut config, &guard, "work", &project)?;
        assert_eq!(said, format!("Sharing {} as \"work\"", project.display()));
        let other = home.join("projects").join("other");
        std::fs::create_dir(&other)?;
        let said = share_folder(&mut config, &guard, "work", &other)?;
        assert_eq!(
            said,
            format!("work: now {} (was {})", other.display(), project.display())
        );
        let said = share_folder(&mut config, &guard, "work", &other)?;
        assert!(
            said.starts_with("Sharing "),
            "the same folder again: {said}"
        );
        assert_eq!(config.folders.len(), 1);
        Ok(())
    }

    #[test]
    fn recipes_the_hard_floor_refuses_are_not_added() -> Result<()> {
        let mut config = config();
        let words = |line: &str| line.split(' ').map(str::to_owned).collect::<Vec<_>>();
        for (line, rule) in [
            ("sudo ls", "privilege"),
            ("su", "privilege"),
            ("rm -rf /", "delete-system-or-home"),
            ("sh -c reboot", "power"),
        ] {
            let said = refusal(add_recipe(&mut config, "bad", &words(line)));
            assert!(said.contains(&format!("rule {rule}")), "{line}: {said}");
            assert!(
                said.starts_with("recipe \"bad\" would never run: "),
                "{said}"
            );
        }
        assert!(config.recipes.is_empty());
        add_recipe(&mut config, "tests", &words("cargo test"))?;
        assert_eq!(config.recipes.len(), 1);
        Ok(())
    }

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

    #[test]
    fn engine_add_needs_acp_and_takes_everything_after_the_double_dash() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(args)
                .map(|cli| cli.command)
                .map_err(|err| err.kind())
        };
        match parse(&[
            "tether-agent",
            "engine",
            "add",
            "claude",
            "--acp",
            "--",
            "npx",
            "-y",
            "agent",
        ]) {
            Ok(Command::Engine {
                command:
                    EngineCommand::Add {
                        name, acp, command, ..
                    },
            }) => {
                assert_eq!(name, "claude");
                assert!(acp);
                assert_eq!(command, ["npx", "-y", "agent"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse(&["tether-agent", "engine", "add", "claude", "--", "npx"]).err(),
            Some(clap::error::ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(
            parse(&[
                "tether-agent",
                "engine",
                "add",
                "claude",
                "--preset",
                "claude-code",
                "--acp"
            ])
            .err(),
            Some(clap::error::ErrorKind::ArgumentConflict)
        );
        assert_eq!(
            parse(&["tether-agent", "engine", "add", "c", "--preset", "claude"]).err(),
            Some(clap::error::ErrorKind::ValueValidation)
        );
        match parse(&[
            "tether-agent",
            "engine",
            "add",
            "claude",
            "--preset",
            "claude-code",
            "--env",
            "ANTHROPIC_BASE_URL=http://127.0.0.1:9",
            "--secret",
            "ANTHROPIC_API_KEY",
            "--network",
            "model",
        ]) {
            Ok(Command::Engine {
                command:
                    EngineCommand::Add {
                        preset,
                        env,
                        secrets,
                        network,
                        ..
                    },
            }) => {
                assert_eq!(preset, Some(PresetName::ClaudeCode));
                assert_eq!(env, ["ANTHROPIC_BASE_URL=http://127.0.0.1:9"]);
                assert_eq!(secrets, ["ANTHROPIC_API_KEY"]);
                assert_eq!(network, Some(EngineNetwork::Model));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn engine_variables_refuse_keys_and_what_tether_sets() {
        let words =
            |words: &[&str]| -> Vec<String> { words.iter().map(|w| (*w).to_owned()).collect() };
        assert!(engine_variables(&words(&["ANTHROPIC_BASE_URL=http://x=y"]))
            .is_ok_and(|vars| vars["ANTHROPIC_BASE_URL"] == "http://x=y"));
        for bad in [
            "ANTHROPIC_API_KEY=sk-1",
            "MY_TOKEN=1",
            "HOME=/root",
            "TETHER_X=1",
            "NOEQUALS",
            "1BAD=x",
        ] {
            assert!(engine_variables(&words(&[bad])).is_err(), "{bad}");
        }
        let said = engine_variables(&words(&["OPENAI_API_KEY=sk"]))
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        assert!(said.contains("--secret OPENAI_API_KEY"), "{said}");
    }
}
