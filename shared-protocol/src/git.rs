//! Git delivery: what a job asks to become of its work (a branch, commits, a push, a pull
//! request), what the computer reports it became, and the branch-name rule both sides
//! check.
//!
//! Tether itself commits and pushes, outside the sandbox, with the computer's own git
//! sign-in; the engine never receives a credential.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How far a run's work goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// No commits: commit-producing git operations are refused, and a commit made another
    /// way is undone at the end (the file changes stay).
    Local,
    /// Commits on the branch, not pushed.
    Commit,
    /// Commits pushed to the branch (never forced).
    Push,
    /// Pushed, then a pull request into the base branch.
    PullRequest,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Local => "local",
            Delivery::Commit => "commit",
            Delivery::Push => "push",
            Delivery::PullRequest => "pull_request",
        }
    }
}

/// Which branch the run works on: `{"current": true}`, `{"new": NAME}` or
/// `{"existing": NAME}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BranchChoice {
    /// The branch checked out now; only `true` is meaningful.
    Current(bool),
    /// A new branch by this name, from the current commit.
    New(String),
    /// A branch that exists in the repository.
    Existing(String),
}

/// When a pull request is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MergeChoice {
    /// After the owner allows it (a decision), once its checks pass.
    Ask,
    /// As soon as its checks pass.
    Auto,
    /// Never: it stays open.
    Never,
}

/// `git` of `POST /api/jobs` and of the spec the device receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOptions {
    pub delivery: Delivery,
    /// Absent: the current branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<BranchChoice>,
    /// The branch a pull request goes into; absent: the repository's default branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// For a pull request; absent: `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeChoice>,
    /// Run in a separate git worktree on its own branch when another run holds the folder.
    #[serde(default)]
    pub worktree: bool,
}

/// One commit a run made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveredCommit {
    pub sha: String,
    pub subject: String,
}

/// The state of a pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PullRequestState {
    Open,
    Merged,
    Closed,
}

/// The pull request a run opened or reused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullRequest {
    pub number: u64,
    pub url: String,
    pub state: PullRequestState,
}

/// What became of a run's work, as `complete` reports it and `GET /api/jobs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryReport {
    pub branch: String,
    /// Newest last, at most [`MAX_DELIVERED_COMMITS`].
    pub commits: Vec<DeliveredCommit>,
    /// Always false for `local` and `commit`.
    pub pushed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequest>,
}

/// Most commits one delivery report lists.
pub const MAX_DELIVERED_COMMITS: usize = 100;
/// Longest branch name, in bytes.
pub const MAX_BRANCH_BYTES: usize = 200;

/// Why a branch name is refused, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchNameError(pub &'static str);

/// Checks a branch name as `git check-ref-format --branch` would, a little stricter
/// (ASCII only, at most [`MAX_BRANCH_BYTES`]).
///
/// # Errors
/// Which rule the name breaks.
pub fn check_branch_name(name: &str) -> Result<(), BranchNameError> {
    let bad = |why| Err(BranchNameError(why));
    if name.is_empty() || name.len() > MAX_BRANCH_BYTES {
        return bad("must be 1 to 200 characters");
    }
    if !name.is_ascii() {
        return bad("must be ASCII");
    }
    if name
        .bytes()
        .any(|b| b.is_ascii_control() || b" ~^:?*[\\".contains(&b))
    {
        return bad("must not contain spaces, control characters or any of ~^:?*[\\");
    }
    if name.starts_with('-') || name == "@" || name == "HEAD" {
        return bad("must not start with '-' or be '@' or 'HEAD'");
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") {
        return bad("must not contain '..', '@{' or '//'");
    }
    if name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return bad("must not start or end with '/' nor end with '.'");
    }
    let part_ok = |part: &str| !part.starts_with('.') && !part.ends_with(".lock");
    if !name.split('/').all(part_ok) {
        return bad("no part may start with '.' or end with '.lock'");
    }
    Ok(())
}

/// A short, branch-safe form of a title: lowercase ASCII letters and digits joined by
/// single dashes, at most `max` bytes (`"Fix the login bug!"` → `fix-the-login-bug`).
pub fn slug(title: &str, max: usize) -> String {
    let mut slug = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            if slug.len() >= max {
                break;
            }
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_follow_git_rules() {
        for good in [
            "main",
            "tether/0123abcd/fix-login",
            "feature/a.b",
            "v1.2",
            "a-b_c",
        ] {
            assert_eq!(check_branch_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-x",
            "a..b",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[",
            "a\\b",
            "a//b",
            "/a",
            "a/",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "@",
            "a@{1}",
            "HEAD",
            "é",
            "a\tb",
        ] {
            assert!(check_branch_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_branch_name(&"a".repeat(201)).is_err());
    }

    #[test]
    fn the_wire_forms_are_as_documented() {
        let parsed: Result<GitOptions, _> = serde_json::from_str(
            r#"{"delivery":"pull_request","branch":{"new":"tether/x"},"merge":"ask"}"#,
        );
        let expected = GitOptions {
            delivery: Delivery::PullRequest,
            branch: Some(BranchChoice::New("tether/x".into())),
            base: None,
            merge: Some(MergeChoice::Ask),
            worktree: false,
        };
        assert_eq!(parsed.ok(), Some(expected));
        let current: Result<BranchChoice, _> = serde_json::from_str(r#"{"current":true}"#);
        assert_eq!(current.ok(), Some(BranchChoice::Current(true)));
    }

    #[test]
    fn slugs_are_short_and_safe() {
        assert_eq!(slug("Fix the login bug!", 40), "fix-the-login-bug");
        assert_eq!(slug("  Ünïcode — only  ", 40), "n-code-only");
        assert_eq!(slug("a very long title indeed", 6), "a-very");
        assert!(check_branch_name(&slug("...", 40)).is_err());
    }
}
