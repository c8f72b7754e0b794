//! The git commands of delivery that need no sign-in, each through the hardened runner
//! ([`crate::changes::git`]): no hook, filter, fsmonitor, pager, helper or signing program a
//! repository names ever starts.
//!
//! Unlike the changes wing, these commands do write the repository: they check out and
//! create branches, commit, and undo commits (keeping every file change).

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use tether_protocol::git::{DeliveredCommit, MAX_DELIVERED_COMMITS};

use crate::changes::git::{Git, GitError, Limits, Repo};
use crate::changes::tree::{self, Located};

/// Staging and committing a large folder hashes every changed file.
const WRITE_LIMITS: Limits = Limits {
    timeout: Duration::from_secs(300),
    max_output: 16 * 1024 * 1024,
};

/// Who a commit Tether makes is by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

impl Identity {
    /// When neither the repository nor the user names one.
    pub fn fallback() -> Identity {
        Identity {
            name: "Tether".to_owned(),
            email: "tether@localhost".to_owned(),
        }
    }
}

/// One repository a run's folder is in.
#[derive(Debug, Clone)]
pub struct Repository {
    git: Git,
    located: Located,
}

impl Repository {
    /// The repository `folder` is in, if git is installed and it is in one.
    ///
    /// # Errors
    /// When git does not answer.
    pub fn open(folder: &Path) -> Result<Option<Repository>> {
        let real = folder
            .canonicalize()
            .with_context(|| format!("cannot find {}", folder.display()))?;
        let Some(located) = tree::locate(&real)? else {
            return Ok(None);
        };
        // Signing would start the configuration's gpg program.
        let git = Git::for_repo(&located.repo, &located.object_format)?
            .with_config("commit.gpgSign", "false")
            .with_config("tag.gpgSign", "false")
            .with_config("core.autocrlf", "false");
        Ok(Some(Repository { git, located }))
    }

    pub fn repo(&self) -> &Repo {
        &self.located.repo
    }

    /// The commit `HEAD` names, if any.
    ///
    /// # Errors
    /// When git fails.
    pub fn head(&self) -> Result<Option<String>> {
        let args = ["rev-parse", "--verify", "-q", "HEAD^{commit}"];
        let output = self.git.output(&args, Limits::QUICK, &[0, 1])?;
        Ok((output.code == Some(0)).then(|| text(&output.stdout)))
    }

    /// The branch checked out, `None` when `HEAD` is detached.
    ///
    /// # Errors
    /// When git fails.
    pub fn current_branch(&self) -> Result<Option<String>> {
        let args = ["symbolic-ref", "-q", "--short", "HEAD"];
        let output = self.git.output(&args, Limits::QUICK, &[0, 1])?;
        Ok((output.code == Some(0)).then(|| text(&output.stdout)))
    }

    /// Whether the local branch `name` exists.
    ///
    /// # Errors
    /// When git fails.
    pub fn has_branch(&self, name: &str) -> Result<bool> {
        let reference = format!("refs/heads/{name}");
        let args = ["show-ref", "--verify", "-q", reference.as_str()];
        let output = self.git.output(&args, Limits::QUICK, &[0, 1])?;
        Ok(output.code == Some(0))
    }

    /// Creates `name` at `HEAD` and checks it out.
    ///
    /// # Errors
    /// When git refuses (with its reason).
    pub fn create_branch(&self, name: &str) -> Result<(), GitError> {
        self.git
            .run(&["checkout", "-q", "-b", name], WRITE_LIMITS)
            .map(drop)
    }

    /// Checks out the existing branch `name`; git refuses when uncommitted changes would be
    /// overwritten.
    ///
    /// # Errors
    /// When git refuses (with its reason).
    pub fn check_out(&self, name: &str) -> Result<(), GitError> {
        self.git
            .run(&["checkout", "-q", name, "--"], WRITE_LIMITS)
            .map(drop)
    }

    /// Paths (relative to the work tree) with uncommitted changes, untracked ones included,
    /// ignored ones left out; only inside the run's folder.
    ///
    /// # Errors
    /// When git fails.
    pub fn dirty_paths(&self) -> Result<Vec<String>> {
        let mut args = vec![
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=all",
        ];
        if !self.located.prefix.is_empty() {
            args.extend(["--", self.located.prefix.as_str()]);
        }
        let stdout = self.git.run(&args, WRITE_LIMITS)?;
        Ok(status_paths(&stdout))
    }

    /// The repository's own configuration (with includes), to tell whether it changed.
    ///
    /// # Errors
    /// When git fails.
    pub fn local_config(&self) -> Result<Vec<u8>> {
        let args = ["config", "--local", "--list", "--includes", "-z"];
        Ok(self.git.output(&args, Limits::QUICK, &[0, 1])?.stdout)
    }

    /// One value of the repository's configuration (`--local`: never the user's).
    ///
    /// # Errors
    /// When git fails.
    pub fn config_value(&self, key: &str) -> Result<Option<String>> {
        let args = ["config", "--local", "--get", key];
        let output = self.git.output(&args, Limits::QUICK, &[0, 1])?;
        Ok((output.code == Some(0)).then(|| text(&output.stdout)))
    }

    /// Moves the branch back to `start`, keeping every file as it is and nothing staged.
    ///
    /// # Errors
    /// When git fails.
    pub fn undo_commits(&self, start: &str) -> Result<()> {
        self.git
            .run(&["reset", "-q", "--soft", start], WRITE_LIMITS)?;
        self.git
            .run(&["reset", "-q", "--mixed", start], WRITE_LIMITS)?;
        Ok(())
    }

    /// Stages exactly `paths` (changes, additions and deletions) and commits them.
    ///
    /// # Errors
    /// When git fails.
    pub fn commit(&self, paths: &[String], message: &str, by: &Identity) -> Result<()> {
        let pathspecs = temp_file(paths.join("\0").as_bytes())?;
        let message_file = temp_file(message.as_bytes())?;
        let spec_arg = format!("--pathspec-from-file={}", pathspecs.path().display());
        let add = ["add", "-A", spec_arg.as_str(), "--pathspec-file-nul"];
        self.git.run(&add, WRITE_LIMITS)?;
        let git = self
            .git
            .with_config("user.name", &by.name)
            .with_config("user.email", &by.email);
        let message_arg = format!("--file={}", message_file.path().display());
        let commit = [
            "commit",
            "-q",
            "--no-verify",
            "--cleanup=verbatim",
            message_arg.as_str(),
        ];
        git.run(&commit, WRITE_LIMITS)?;
        Ok(())
    }

    /// The commits from `start` (excluded) to `HEAD`, oldest first, the newest
    /// [`MAX_DELIVERED_COMMITS`] of them.
    ///
    /// # Errors
    /// When git fails.
    pub fn commits_since(&self, start: &str) -> Result<Vec<DeliveredCommit>> {
        let range = format!("{start}..HEAD");
        let count = format!("-n{MAX_DELIVERED_COMMITS}");
        let args = [
            "log",
            "--no-decorate",
            "--format=%h%x00%s%x00",
            count.as_str(),
            range.as_str(),
            "--",
        ];
        let stdout = self.git.run(&args, Limits::QUICK)?;
        let mut commits = parse_log(&stdout);
        commits.reverse();
        Ok(commits)
    }
}

/// A private temporary file holding `bytes` (pathspecs, a commit message): git reads it.
fn temp_file(bytes: &[u8]) -> Result<tempfile::NamedTempFile> {
    let mut file = tempfile::NamedTempFile::new().context("cannot make a temporary file")?;
    file.write_all(bytes)
        .context("cannot write a temporary file")?;
    Ok(file)
}

/// The paths of `git status --porcelain=v1 -z --no-renames`.
fn status_paths(stdout: &[u8]) -> Vec<String> {
    stdout
        .split(|byte| *byte == 0)
        .filter(|entry| entry.len() > 3)
        .filter_map(|entry| std::str::from_utf8(&entry[3..]).ok())
        .map(str::to_owned)
        .collect()
}

/// `sha NUL subject NUL` records of `git log`, newest first.
fn parse_log(stdout: &[u8]) -> Vec<DeliveredCommit> {
    let text = String::from_utf8_lossy(stdout);
    let fields: Vec<&str> = text.split('\0').collect();
    fields
        .chunks_exact(2)
        .map(|pair| DeliveredCommit {
            sha: pair[0].trim().to_owned(),
            subject: pair[1].to_owned(),
        })
        .filter(|commit| !commit.sha.is_empty())
        .collect()
}

fn text(stdout: &[u8]) -> String {
    String::from_utf8_lossy(stdout).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_log_are_read() {
        let status = b" M a.txt\0?? new dir/b.txt\0D  gone.txt\0";
        assert_eq!(status_paths(status), ["a.txt", "new dir/b.txt", "gone.txt"]);
        let log = b"abc1234\0second\0\ndef5678\0first\0";
        let commits = parse_log(log);
        assert_eq!(
            commits,
            [
                DeliveredCommit {
                    sha: "abc1234".into(),
                    subject: "second".into()
                },
                DeliveredCommit {
                    sha: "def5678".into(),
                    subject: "first".into()
                }
            ]
        );
    }
}
