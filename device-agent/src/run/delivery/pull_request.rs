//! A pushed branch's pull request: reused when one is open, else opened into the base
//! branch; then merged as the job says — never, as soon as the head commit's checks pass,
//! or once the owner allows it and they pass.
//!
//! Waiting for checks is bounded and stops with the run; a failed check, a refusal, a wait
//! that ran out or a merge GitHub refuses leave the pull request open, and the note says
//! why.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tether_protocol::decisions::Answer;
use tether_protocol::git::{MergeChoice, PullRequest, PullRequestState};

use crate::local::private_files::hex;
use crate::policy::asking::{Ask, Outcome, Question};
use crate::policy::canonical_text;
use crate::run::delivery::github::{Checks, Github, GithubError};
use crate::run::delivery::origin::GithubRepo;
use crate::run::stop::RunStop;

/// The decision kind of "Merge pull request #N into BASE?".
pub const MERGE_KIND: &str = "merge";

/// How long to wait for checks and how often to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckWait {
    pub limit: Duration,
    pub first: Duration,
    pub longest: Duration,
}

impl CheckWait {
    /// Up to 10 minutes, looking after 5 s, then less and less often (at most every 60 s).
    pub const DEFAULT: CheckWait = CheckWait {
        limit: Duration::from_secs(600),
        first: Duration::from_secs(5),
        longest: Duration::from_secs(60),
    };
}

/// What the pull request is of.
#[derive(Debug, Clone)]
pub struct Proposal<'a> {
    pub repo: &'a GithubRepo,
    pub branch: &'a str,
    /// `None`: the repository's default branch.
    pub base: Option<&'a str>,
    pub title: &'a str,
    pub body: &'a str,
    /// The pushed commit: what is merged, and whose checks count.
    pub head_sha: &'a str,
}

/// How the pull request ended up, with a sentence for the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposed {
    pub pull_request: PullRequest,
    pub note: String,
}

/// What the merge step needs besides GitHub.
pub struct Merging<'a> {
    pub choice: MergeChoice,
    pub asker: &'a dyn Ask,
    pub stop: &'a RunStop,
    pub wait: CheckWait,
}

/// Opens (or reuses) the pull request, then merges it as `merging` says.
///
/// # Errors
/// When the pull request can be neither found nor opened.
pub async fn propose(
    github: &Github,
    proposal: &Proposal<'_>,
    merging: &Merging<'_>,
) -> Result<Proposed, GithubError> {
    let (owner, name) = (proposal.repo.owner.as_str(), proposal.repo.name.as_str());
    let base = match proposal.base {
        Some(base) => base.to_owned(),
        None => github.default_branch(owner, name).await?,
    };
    let (mut pull_request, opened) = match github.open_pull(owner, name, proposal.branch).await? {
        Some(open) => (open, "Updated"),
        None => {
            let heads = (proposal.branch, base.as_str());
            let created = github
                .create_pull((owner, name), heads, proposal.title, proposal.body)
                .await?;
            (created, "Opened")
        }
    };
    let number = pull_request.number;
    let said = format!(
        "{opened} pull request #{number} into {base}: {}",
        pull_request.url
    );
    let merged = merge(github, proposal, merging, number, &base).await;
    if merged.is_ok() {
        pull_request.state = PullRequestState::Merged;
    }
    let note = match merged {
        Ok(()) => format!("{said}; merged."),
        Err(why) => format!("{said}; {why}"),
    };
    Ok(Proposed { pull_request, note })
}

/// Merges when the choice allows it and the checks pass; else why it stays open.
async fn merge(
    github: &Github,
    proposal: &Proposal<'_>,
    merging: &Merging<'_>,
    number: u64,
    base: &str,
) -> Result<(), String> {
    match merging.choice {
        MergeChoice::Never => return Err("left open (merge: never).".to_owned()),
        MergeChoice::Auto => {}
        MergeChoice::Ask => ask_to_merge(merging.asker, proposal, number, base).await?,
    }
    wait_for_checks(github, proposal, merging).await?;
    let (owner, name) = (proposal.repo.owner.as_str(), proposal.repo.name.as_str());
    github
        .merge(owner, name, number, proposal.head_sha)
        .await
        .map_err(|err| format!("left open: GitHub did not merge it ({err})."))
}

/// Asks the owner; `Err` unless allowed.
async fn ask_to_merge(
    asker: &dyn Ask,
    proposal: &Proposal<'_>,
    number: u64,
    base: &str,
) -> Result<(), String> {
    let action = serde_json::json!({
        "merge": {
            "repository": format!("{}/{}", proposal.repo.owner, proposal.repo.name),
            "host": proposal.repo.host,
            "pullRequest": number,
            "base": base,
            "sha": proposal.head_sha,
        }
    });
    let action_hash = hex(&Sha256::digest(canonical_text(&action).as_bytes()));
    let question = Question {
        kind: MERGE_KIND.to_owned(),
        question: format!("Merge pull request #{number} into {base}?"),
        action,
        action_hash,
        preview: None,
    };
    match asker.ask(&question).await {
        Outcome::Answered {
            answer: Answer::Allow,
            ..
        } => Ok(()),
        Outcome::Answered {
            answer: Answer::Deny,
            on,
            ..
        } => Err(format!("left open: merging was denied {}.", on.describe())),
        Outcome::Expired => Err("left open: nobody answered whether to merge it.".to_owned()),
        Outcome::Withdrawn(why) => Err(format!("left open: the run stopped ({why}).")),
        Outcome::Unasked(why) => Err(format!("left open: the owner could not be asked ({why}).")),
    }
}

/// Waits until the head commit's checks passed (or none are configured); `Err` with why not.
async fn wait_for_checks(
    github: &Github,
    proposal: &Proposal<'_>,
    merging: &Merging<'_>,
) -> Result<(), String> {
    let (owner, name) = (proposal.repo.owner.as_str(), proposal.repo.name.as_str());
    let deadline = tokio::time::Instant::now() + merging.wait.limit;
    let mut pause = merging.wait.first;
    loop {
        match github.checks(owner, name, proposal.head_sha).await {
            Ok(Checks::Passed) => return Ok(()),
            Ok(Checks::Failed(check)) => {
                return Err(format!("left open: the check {check:?} failed."))
            }
            Ok(Checks::Pending) => {}
            Err(err) => tracing::warn!("cannot read the checks: {err}"),
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            let minutes = merging.wait.limit.as_secs().div_ceil(60);
            return Err(format!(
                "left open: its checks did not finish within {minutes} min."
            ));
        }
        let wake = (now + pause).min(deadline);
        tokio::select! {
            reason = merging.stop.raised() => {
                return Err(format!("left open: the run stopped ({}).", reason.describe()))
            }
            () = tokio::time::sleep_until(wake) => {}
        }
        pause = (pause * 2).min(merging.wait.longest);
    }
}
