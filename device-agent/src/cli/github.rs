//! `tether-agent github add|list|remove`: the GitHub tokens pull requests are opened with.
//!
//! A token comes from standard input (one line, never echoed) or from `gh auth token`; it is
//! never printed.

use std::io::BufRead as _;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use crate::local::github::{self, GithubHost, GithubToken, GithubVault, DEFAULT_HOST};
use crate::local::state::DataDir;

#[derive(Debug, Subcommand)]
pub enum GithubCommand {
    /// Save a token for HOST (default github.com), read from standard input, or from
    /// `gh auth token` with --from-gh. Another HOST is GitHub Enterprise.
    Add {
        #[arg(default_value = DEFAULT_HOST)]
        host: String,
        /// The REST API's address (default https://api.github.com for github.com, else
        /// https://HOST/api/v3); http:// only on this computer (loopback).
        #[arg(long, value_name = "URL")]
        api_url: Option<String>,
        /// Take the token the GitHub CLI is signed in with (`gh auth token --hostname HOST`).
        #[arg(long)]
        from_gh: bool,
    },
    /// List the hosts with a token and their API addresses (never a token).
    List,
    /// Forget HOST's token.
    Remove {
        #[arg(default_value = DEFAULT_HOST)]
        host: String,
    },
}

/// Applies one `github` command.
///
/// # Errors
/// Bad input, or a vault that cannot be read or written.
pub fn apply(data_dir: &DataDir, command: GithubCommand) -> Result<i32> {
    let vault = GithubVault::new(data_dir);
    match command {
        GithubCommand::Add {
            host,
            api_url,
            from_gh,
        } => {
            let host = github::parse_host(&host)?;
            let api_url = github::api_url_for(&host, api_url.as_deref())?;
            let token = if from_gh {
                token_from_gh(&host)?
            } else {
                token_from_stdin()?
            };
            let registered = GithubHost { host, api_url };
            vault.add(&registered, &token, chrono::Utc::now().timestamp())?;
            println!(
                "Saved a GitHub token for {} (API {}). Pull requests there are opened with it.",
                registered.host, registered.api_url
            );
        }
        GithubCommand::List => {
            let hosts = vault.list()?;
            if hosts.is_empty() {
                println!("No GitHub tokens saved.");
            }
            for host in hosts {
                println!("{}\t{}", host.host, host.api_url);
            }
        }
        GithubCommand::Remove { host } => {
            let host = github::parse_host(&host)?;
            if !vault.remove(&host)? {
                eprintln!("No GitHub token is saved for {host}.");
                return Ok(crate::exit_code::FAILURE);
            }
            println!("Forgot the GitHub token for {host}.");
        }
    }
    Ok(0)
}

/// One line of standard input.
fn token_from_stdin() -> Result<GithubToken> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the token from standard input")?;
    GithubToken::parse(&line).context("give the token on standard input")
}

/// What `gh auth token --hostname HOST` prints.
fn token_from_gh(host: &str) -> Result<GithubToken> {
    let output = Command::new("gh")
        .args(["auth", "token", "--hostname", host])
        .stdin(Stdio::null())
        .output()
        .context("cannot run the GitHub CLI (gh)")?;
    if !output.status.success() {
        bail!(
            "`gh auth token --hostname {host}` failed; sign in with `gh auth login --hostname {host}` first"
        );
    }
    let printed = String::from_utf8(output.stdout).context("gh printed no token")?;
    GithubToken::parse(&printed).context("gh printed no token")
}
