//! The one git command that runs with the computer's own sign-in: the push, outside the
//! sandbox, with the user's environment for git (home folder, ssh agent, global and system
//! configuration with their credential helper and ssh command).
//!
//! Nothing the repository's own configuration names runs: hooks and fsmonitor are off,
//! `credential.helper` is reset and only the global and system values are added back,
//! `core.sshCommand` comes from the global or system configuration, the receive-pack
//! program is git's own, and a repository whose configuration names a URL-specific
//! credential helper is not pushed from at all. No prompt: `GIT_TERMINAL_PROMPT=0`, no
//! askpass. Never `--force`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::process::Command;

use crate::changes::git::{absolute_path_entries, program, Repo};

/// How long a push may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(300);
/// How long reading one configuration value may take.
const CONFIG_TIMEOUT: Duration = Duration::from_secs(20);

/// The user's variables git and its helpers need to sign in as the user (passed when set).
const USER_ENV: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "XDG_CONFIG_HOME",
    "XDG_RUNTIME_DIR",
    "SSH_AUTH_SOCK",
    "DBUS_SESSION_BUS_ADDRESS",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// How a push ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    Done,
    /// Refused because the branch on `origin` moved on (not a fast-forward).
    Rejected,
}

/// Git with the computer's sign-in, for one repository.
#[derive(Debug, Clone)]
pub struct SignedInGit {
    program: PathBuf,
    repo: Repo,
}

impl SignedInGit {
    /// # Errors
    /// When git is not installed.
    pub fn new(repo: &Repo) -> Result<SignedInGit> {
        let program = program().context("git is not installed here")?;
        Ok(SignedInGit {
            program,
            repo: repo.clone(),
        })
    }

    /// Pushes `HEAD` to `origin`'s `refs/heads/BRANCH`, never forced. `local_config` is the
    /// repository's configuration listing (`git config --local --list -z`).
    ///
    /// # Errors
    /// When the push fails for another reason than a moved branch (git's words).
    pub async fn push(&self, branch: &str, local_config: &[u8]) -> Result<Pushed> {
        if let Some(key) = url_credential_helper(local_config) {
            bail!(
                "the repository's own configuration names a credential helper ({key}); Tether does not push with it"
            );
        }
        let mut command = self.command().await;
        let destination = format!("HEAD:refs/heads/{branch}");
        command.args([
            "push",
            "--porcelain",
            "--no-verify",
            "origin",
            destination.as_str(),
        ]);
        let output = run(command, PUSH_TIMEOUT).await?;
        if output.status.success() {
            return Ok(Pushed::Done);
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        if is_rejected(&stdout) {
            return Ok(Pushed::Rejected);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        bail!("git push failed: {}", hide_url_passwords(stderr.trim()))
    }

    /// The user's own identity (`user.name`, `user.email` of the global configuration).
    pub async fn user_identity(&self) -> Option<(String, String)> {
        let name = self.global_values("user.name").await.pop()?;
        let email = self.global_values("user.email").await.pop()?;
        Some((name, email))
    }

    /// `git` in the repository, with the user's environment and every program the
    /// repository's configuration could name turned off.
    async fn command(&self) -> Command {
        let mut helpers = self.system_values("credential.helper").await;
        helpers.extend(self.global_values("credential.helper").await);
        let mut ssh = self.global_values("core.sshCommand").await;
        if ssh.is_empty() {
            ssh = self.system_values("core.sshCommand").await;
        }
        let mut command = self.base(true);
        let mut config = vec![
            ("core.hooksPath", "/dev/null".to_owned()),
            ("core.fsmonitor", "false".to_owned()),
            ("core.askPass", String::new()),
            ("core.sshCommand", ssh.pop().unwrap_or_default()),
            ("remote.origin.receivepack", "git-receive-pack".to_owned()),
            ("remote.origin.uploadpack", "git-upload-pack".to_owned()),
            ("push.gpgSign", "false".to_owned()),
            ("push.recurseSubmodules", "no".to_owned()),
            ("submodule.recurse", "false".to_owned()),
            ("protocol.ext.allow", "never".to_owned()),
            ("credential.helper", String::new()),
        ];
        config.extend(
            helpers
                .into_iter()
                .map(|helper| ("credential.helper", helper)),
        );
        command.arg("--no-pager");
        for (key, value) in config {
            command.arg("-c").arg(format!("{key}={value}"));
        }
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.repo.git_dir);
        let mut work_tree = OsString::from("--work-tree=");
        work_tree.push(&self.repo.work_tree);
        command.arg(git_dir).arg(work_tree);
        command
    }

    /// The user's environment for git, in the work tree (`in_repo`) or in `/`.
    fn base(&self, in_repo: bool) -> Command {
        let mut command = Command::new(&self.program);
        command.env_clear();
        command.env("PATH", absolute_path_entries());
        for name in USER_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .env("LANG", "C")
            .env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PROXY_COMMAND", "")
            .current_dir(if in_repo {
                self.repo.work_tree.clone()
            } else {
                PathBuf::from("/")
            })
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn global_values(&self, key: &str) -> Vec<String> {
        self.values("--global", key).await
    }

    async fn system_values(&self, key: &str) -> Vec<String> {
        self.values("--system", key).await
    }

    /// Every value of `key` in one configuration file (nothing runs to read it).
    async fn values(&self, scope: &str, key: &str) -> Vec<String> {
        let mut command = self.base(false);
        command.args(["config", scope, "--get-all", key]);
        match run(command, CONFIG_TIMEOUT).await {
            Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    }
}

async fn run(mut command: Command, timeout: Duration) -> Result<std::process::Output> {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = command.spawn().context("git could not be started")?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(output) => output.context("git could not be read"),
        Err(_) => bail!("git took longer than {}s", timeout.as_secs()),
    }
}

/// Whether `git push --porcelain` says the branch was refused for having moved on.
fn is_rejected(porcelain: &str) -> bool {
    porcelain.lines().any(|line| {
        line.starts_with('!')
            && (line.contains("non-fast-forward")
                || line.contains("fetch first")
                || line.contains("stale info"))
    })
}

/// A `credential.<url>.helper` key of a `git config --list -z` listing: a helper for one
/// address, which no `-c credential.helper=` resets.
fn url_credential_helper(listing: &[u8]) -> Option<String> {
    listing
        .split(|byte| *byte == 0)
        .filter_map(|entry| entry.split(|byte| *byte == b'\n').next())
        .filter_map(|key| std::str::from_utf8(key).ok())
        .map(str::to_ascii_lowercase)
        .find(|key| {
            key.starts_with("credential.") && key.ends_with(".helper") && key != "credential.helper"
        })
}

/// `scheme://user:password@` spelled `scheme://user:[hidden]@` in git's words.
pub fn hide_url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| c.is_whitespace() || c == '/' || c == '\'' || c == '"')
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rsplit_once('@') {
            Some((user, host)) if user.contains(':') => {
                let name = user.split(':').next().unwrap_or_default();
                out.push_str(&format!("{name}:[hidden]@{host}"));
            }
            _ => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_branch_is_told_from_other_failures() {
        assert!(is_rejected(
            "To /tmp/x.git\n!\tHEAD:refs/heads/main\t[rejected] (fetch first)\nDone\n"
        ));
        assert!(is_rejected(
            "!\tHEAD:refs/heads/a\t[rejected] (non-fast-forward)\n"
        ));
        assert!(!is_rejected(
            "!\tHEAD:refs/heads/a\t[remote rejected] (hook declined)\n"
        ));
        assert!(!is_rejected("*\tHEAD:refs/heads/a\t[new branch]\n"));
    }

    #[test]
    fn url_helpers_and_url_passwords_are_caught() {
        let listing = b"core.bare\nfalse\0credential.https://github.com.helper\n!evil\0";
        assert_eq!(
            url_credential_helper(listing).as_deref(),
            Some("credential.https://github.com.helper")
        );
        assert_eq!(url_credential_helper(b"credential.helper\nstore\0"), None);
        assert_eq!(
            hide_url_passwords("fatal: unable to access 'https://me:ghp_x@github.com/a/b/': 403"),
            "fatal: unable to access 'https://me:[hidden]@github.com/a/b/': 403"
        );
        assert_eq!(hide_url_passwords("git://h/a"), "git://h/a");
    }
}
