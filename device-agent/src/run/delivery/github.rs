//! The GitHub REST calls a pull request takes, with the host's token from
//! [`crate::local::github`]: the repository (its default branch), an open pull request of
//! the branch, a new one, the head commit's checks and statuses, and the merge.
//!
//! Every request has the bearer token, GitHub's media type and API version, a User-Agent and
//! a timeout, and follows no redirect (a redirect could carry the token elsewhere). No error
//! text holds the token: an answer's body is cut short and the token replaced before it is
//! kept.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tether_protocol::git::{PullRequest, PullRequestState};

use crate::local::github::{GithubSignIn, GithubToken};
use crate::local::vault::HIDDEN;

/// Longest one call may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How much of an error answer's body is kept.
const MAX_ERROR_CHARS: usize = 300;

/// A call that did not give what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GithubError {
    /// The answer's status, when there was one.
    pub status: Option<u16>,
    /// What went wrong, without the token.
    pub message: String,
}

/// The checks of one commit, summed up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checks {
    /// All finished and passed, or none are configured.
    Passed,
    /// Some have not finished.
    Pending,
    /// This check (or status context) failed.
    Failed(String),
}

/// A client for one GitHub host.
#[derive(Debug, Clone)]
pub struct Github {
    http: reqwest::Client,
    api_url: String,
    token: GithubToken,
}

#[derive(Deserialize)]
struct RepoAnswer {
    default_branch: String,
}

#[derive(Deserialize)]
struct PullAnswer {
    number: u64,
    html_url: String,
    state: String,
    #[serde(default)]
    merged: bool,
}

#[derive(Deserialize)]
struct CheckRuns {
    #[serde(default)]
    check_runs: Vec<CheckRun>,
}

#[derive(Deserialize)]
struct CheckRun {
    name: String,
    status: String,
    conclusion: Option<String>,
}

#[derive(Deserialize)]
struct CombinedStatus {
    #[serde(default)]
    statuses: Vec<StatusContext>,
}

#[derive(Deserialize)]
struct StatusContext {
    context: String,
    state: String,
}

impl Github {
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(sign_in: &GithubSignIn) -> Result<Github, GithubError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("tether-agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| failure(None, format!("cannot make an HTTP client: {err}")))?;
        Ok(Github {
            http,
            api_url: sign_in.host.api_url.clone(),
            token: sign_in.token.clone(),
        })
    }

    /// The repository's default branch.
    ///
    /// # Errors
    /// A [`GithubError`].
    pub async fn default_branch(&self, owner: &str, repo: &str) -> Result<String, GithubError> {
        let path = format!("/repos/{owner}/{repo}");
        let answer: RepoAnswer = self.call(Method::GET, &path, None).await?;
        Ok(answer.default_branch)
    }

    /// The open pull request from `owner:branch`, if there is one.
    ///
    /// # Errors
    /// A [`GithubError`].
    pub async fn open_pull(
        &self,
        owner: &str,
        repo: &str,
        branch: &str,
    ) -> Result<Option<PullRequest>, GithubError> {
        let head = url_escape(&format!("{owner}:{branch}"));
        let path = format!("/repos/{owner}/{repo}/pulls?head={head}&state=open");
        let answers: Vec<PullAnswer> = self.call(Method::GET, &path, None).await?;
        Ok(answers.into_iter().next().map(pull_request))
    }

    /// Opens a pull request of `branch` into `base`.
    ///
    /// # Errors
    /// A [`GithubError`].
    pub async fn create_pull(
        &self,
        (owner, repo): (&str, &str),
        (branch, base): (&str, &str),
        title: &str,
        body: &str,
    ) -> Result<PullRequest, GithubError> {
        let path = format!("/repos/{owner}/{repo}/pulls");
        let request = json!({ "title": title, "head": branch, "base": base, "body": body });
        let answer: PullAnswer = self.call(Method::POST, &path, Some(request)).await?;
        Ok(pull_request(answer))
    }

    /// The checks and statuses of commit `sha`, summed up.
    ///
    /// # Errors
    /// A [`GithubError`].
    pub async fn checks(&self, owner: &str, repo: &str, sha: &str) -> Result<Checks, GithubError> {
        let runs_path = format!("/repos/{owner}/{repo}/commits/{sha}/check-runs");
        let runs: CheckRuns = self.call(Method::GET, &runs_path, None).await?;
        let status_path = format!("/repos/{owner}/{repo}/commits/{sha}/status");
        let status: CombinedStatus = self.call(Method::GET, &status_path, None).await?;
        Ok(sum_up(&runs, &status))
    }

    /// Merges pull request `number` at exactly `sha` (a merge commit).
    ///
    /// # Errors
    /// A [`GithubError`]; GitHub answers 405 or 409 when it cannot be merged.
    pub async fn merge(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        sha: &str,
    ) -> Result<(), GithubError> {
        let path = format!("/repos/{owner}/{repo}/pulls/{number}/merge");
        let request = json!({ "sha": sha, "merge_method": "merge" });
        let _: Value = self.call(Method::PUT, &path, Some(request)).await?;
        Ok(())
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, GithubError> {
        let url = format!("{}{path}", self.api_url);
        let mut request = self
            .http
            .request(method, &url)
            .bearer_auth(self.token.expose())
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.map_err(|err| {
            failure(
                None,
                format!("GitHub could not be reached ({})", err.without_url()),
            )
        })?;
        let status = answer.status();
        let text = answer.text().await.map_err(|err| {
            failure(
                Some(status),
                format!("GitHub's answer could not be read ({})", err.without_url()),
            )
        })?;
        if !status.is_success() {
            return Err(self.refused(status, path, &text));
        }
        serde_json::from_str(&text).map_err(|err| {
            failure(
                Some(status),
                format!("GitHub's answer to {path} is not as expected: {err}"),
            )
        })
    }

    /// The error of a refusal: its status and GitHub's `message`, cut short, token hidden.
    fn refused(&self, status: StatusCode, path: &str, body: &str) -> GithubError {
        let said = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|value| {
                value
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| body.to_owned());
        let said: String = said.chars().take(MAX_ERROR_CHARS).collect();
        let said = said.replace(self.token.expose(), HIDDEN);
        let why = match status {
            StatusCode::UNAUTHORIZED => {
                " (the saved token is refused; save a new one with `tether-agent github add`)"
            }
            StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
                " (the token may lack access to this repository)"
            }
            _ => "",
        };
        failure(
            Some(status),
            format!("GitHub answered {status} to {path}: {said}{why}"),
        )
    }
}

fn failure(status: Option<StatusCode>, message: String) -> GithubError {
    GithubError {
        status: status.map(|status| status.as_u16()),
        message,
    }
}

fn pull_request(answer: PullAnswer) -> PullRequest {
    let state = match (answer.merged, answer.state.as_str()) {
        (true, _) => PullRequestState::Merged,
        (false, "open") => PullRequestState::Open,
        (false, _) => PullRequestState::Closed,
    };
    PullRequest {
        number: answer.number,
        url: answer.html_url,
        state,
    }
}

/// Check runs and status contexts as one verdict: the first failure, else pending while any
/// has not finished, else passed (also when there are none).
fn sum_up(runs: &CheckRuns, status: &CombinedStatus) -> Checks {
    let run_failed = |run: &&CheckRun| {
        run.status == "completed"
            && !matches!(
                run.conclusion.as_deref(),
                Some("success" | "neutral" | "skipped")
            )
    };
    if let Some(run) = runs.check_runs.iter().find(run_failed) {
        return Checks::Failed(run.name.clone());
    }
    let context_failed =
        |context: &&StatusContext| matches!(context.state.as_str(), "failure" | "error");
    if let Some(context) = status.statuses.iter().find(context_failed) {
        return Checks::Failed(context.context.clone());
    }
    let pending = runs.check_runs.iter().any(|run| run.status != "completed")
        || status
            .statuses
            .iter()
            .any(|context| context.state == "pending");
    if pending {
        Checks::Pending
    } else {
        Checks::Passed
    }
}

/// `text` percent-encoded for a query value (branch names are ASCII without spaces).
fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
