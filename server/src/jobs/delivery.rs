//! Git delivery as the server sees it: the `git` choices of a new job, checked against the
//! computer's report, and the delivery report a completion carries (branch, commits, push,
//! pull request), checked before it is stored and entered in the ledger.
//!
//! The server never runs git and never holds a git credential: the computer commits,
//! pushes and opens pull requests with its own sign-in. It keeps metadata only.

use serde_json::json;
use tether_protocol::capabilities::Capabilities;
use tether_protocol::git::{
    check_branch_name, slug, BranchChoice, Delivery, DeliveryReport, GitOptions, MergeChoice,
    PullRequestState, MAX_DELIVERED_COMMITS,
};
use tether_protocol::jobs::{JobSpec, Mode};
use tether_protocol::text::{self, TextKind};
use tether_protocol::{AccountId, JobId};

use crate::clock::Millis;
use crate::error::ApiError;
use crate::store::job_rows::truncate;
use crate::store::ledger::{self, LedgerKind};
use crate::store::Tx;

/// Longest commit subject kept, in bytes.
const MAX_SUBJECT_BYTES: usize = 500;
/// Longest pull request address kept, in bytes.
const MAX_URL_BYTES: usize = 2048;

/// Checks a new job's `git` choices on their own (names, combinations, mode and network).
///
/// # Errors
/// 422 `invalid_field` naming the field (`git.branch`, `git.base`, `git.merge`,
/// `git.delivery`).
pub fn check_options(options: &GitOptions, spec: &JobSpec) -> Result<(), ApiError> {
    match &options.branch {
        None | Some(BranchChoice::Current(true)) => {}
        Some(BranchChoice::Current(false)) => {
            return Err(ApiError::invalid_field(
                "git.branch",
                "current must be true.",
            ))
        }
        // Empty: the default name, given when the job's id is known.
        Some(BranchChoice::New(name)) if name.is_empty() => {}
        Some(BranchChoice::New(name) | BranchChoice::Existing(name)) => {
            check_name("git.branch", name)?
        }
    }
    let pull_request = options.delivery == Delivery::PullRequest;
    if let Some(base) = &options.base {
        if !pull_request {
            return Err(ApiError::invalid_field(
                "git.base",
                "is for a pull request only.",
            ));
        }
        check_name("git.base", base)?;
    }
    if options.merge.is_some() && !pull_request {
        return Err(ApiError::invalid_field(
            "git.merge",
            "is for a pull request only.",
        ));
    }
    if pull_request && !spec.network {
        return Err(ApiError::invalid_field(
            "git.delivery",
            "a pull request needs network: true.",
        ));
    }
    if options.merge == Some(MergeChoice::Ask) && spec.mode == Mode::Unattended {
        return Err(ApiError::invalid_field(
            "git.merge",
            "ask needs someone to answer; an unattended job cannot ask.",
        ));
    }
    Ok(())
}

fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    check_branch_name(name).map_err(|why| ApiError::invalid_field(field, &format!("{}.", why.0)))
}

/// The computer must report that it delivers with git.
///
/// # Errors
/// 422 `invalid_field` naming `git`.
pub fn check_capable(capabilities: Option<&Capabilities>) -> Result<(), ApiError> {
    if capabilities.is_some_and(|caps| caps.git.is_some()) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            "git",
            "this computer does not report git delivery (update its agent).",
        ))
    }
}

/// Fills the default name of a new branch: `tether/<short job id>/<slug of the title>`.
pub fn with_default_branch(mut options: GitOptions, job_id: &JobId, title: &str) -> GitOptions {
    if matches!(&options.branch, Some(BranchChoice::New(name)) if name.is_empty()) {
        // A job id's first characters are its time; its last ones tell jobs apart.
        let id = job_id.as_str();
        let short = id.get(id.len().saturating_sub(8)..).unwrap_or(id);
        let slug = slug(title, 40);
        let name = if slug.is_empty() {
            format!("tether/{short}")
        } else {
            format!("tether/{short}/{slug}")
        };
        options.branch = Some(BranchChoice::New(name));
    }
    options
}

/// A completion's delivery report: checked, or why it was dropped.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportedDelivery {
    None,
    Checked(DeliveryReport),
    Dropped(String),
}

impl ReportedDelivery {
    pub fn check(raw: Option<serde_json::Value>) -> ReportedDelivery {
        let Some(raw) = raw.filter(|raw| !raw.is_null()) else {
            return ReportedDelivery::None;
        };
        let parsed = serde_json::from_value::<DeliveryReport>(raw).map_err(|err| err.to_string());
        match parsed.and_then(checked) {
            Ok(report) => ReportedDelivery::Checked(report),
            Err(why) => ReportedDelivery::Dropped(truncate(&why, 300)),
        }
    }
}

/// The report's shape: a valid branch, bounded commits with hex ids, a pull request with a
/// web address; subjects made visible, never refused.
fn checked(mut report: DeliveryReport) -> Result<DeliveryReport, String> {
    check_branch_name(&report.branch).map_err(|why| format!("branch {}", why.0))?;
    if report.commits.len() > MAX_DELIVERED_COMMITS {
        return Err(format!("at most {MAX_DELIVERED_COMMITS} commits"));
    }
    for commit in &mut report.commits {
        let hex = (4..=64).contains(&commit.sha.len())
            && commit.sha.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            return Err("a commit's sha must be hex".into());
        }
        let subject = text::sanitize(&commit.subject, TextKind::Name);
        commit.subject = truncate(&subject, MAX_SUBJECT_BYTES);
    }
    if let Some(pull) = &report.pull_request {
        let url = url::Url::parse(&pull.url).map_err(|_| "the pull request url does not parse")?;
        let web = matches!(url.scheme(), "https" | "http") && pull.url.len() <= MAX_URL_BYTES;
        if !web || pull.number == 0 {
            return Err("a pull request has a number and an http(s) url".into());
        }
    }
    Ok(report)
}

/// Ledger entries for what the delivery did: `git.pushed`, `git.pull_request`,
/// `git.merged`.
///
/// # Errors
/// A database error.
pub async fn record(
    tx: &mut Tx,
    account_id: &AccountId,
    job_id: &str,
    report: &DeliveryReport,
    now: Millis,
) -> Result<(), ApiError> {
    if report.pushed {
        let detail = json!({ "jobId": job_id, "branch": report.branch,
                             "commits": report.commits.len() });
        ledger::record(tx, account_id, now, LedgerKind::GitPushed, job_id, detail).await?;
    }
    if let Some(pull) = &report.pull_request {
        let detail = json!({ "jobId": job_id, "number": pull.number, "url": pull.url });
        ledger::record(
            tx,
            account_id,
            now,
            LedgerKind::GitPullRequest,
            job_id,
            detail.clone(),
        )
        .await?;
        if pull.state == PullRequestState::Merged {
            ledger::record(tx, account_id, now, LedgerKind::GitMerged, job_id, detail).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::git::{DeliveredCommit, PullRequest};

    fn spec(mode: Mode, network: bool) -> JobSpec {
        JobSpec {
            title: "Fix it".into(),
            prompt: String::new(),
            folder: "work".into(),
            engine: "agent".into(),
            mode,
            network,
            timeout_minutes: 10,
            secrets: Vec::new(),
            git: None,
            attachments: Vec::new(),
            links: Vec::new(),
        }
    }

    fn options(delivery: Delivery) -> GitOptions {
        GitOptions {
            delivery,
            branch: None,
            base: None,
            merge: None,
            worktree: false,
        }
    }

    fn field_of(result: Result<(), ApiError>) -> Option<String> {
        result.err().map(|err| err.to_string())
    }

    #[test]
    fn choices_are_checked_together() {
        let ask = spec(Mode::Ask, true);
        assert!(check_options(&options(Delivery::Local), &ask).is_ok());
        let mut pr = options(Delivery::PullRequest);
        pr.merge = Some(MergeChoice::Ask);
        pr.base = Some("main".into());
        assert!(check_options(&pr, &ask).is_ok());
        assert!(field_of(check_options(&pr, &spec(Mode::Ask, false)))
            .is_some_and(|m| m.contains("git.delivery")));
        assert!(field_of(check_options(&pr, &spec(Mode::Unattended, true)))
            .is_some_and(|m| m.contains("git.merge")));
        let mut push = options(Delivery::Push);
        push.merge = Some(MergeChoice::Auto);
        assert!(field_of(check_options(&push, &ask)).is_some_and(|m| m.contains("git.merge")));
        let mut bad = options(Delivery::Commit);
        bad.branch = Some(BranchChoice::New("a..b".into()));
        assert!(field_of(check_options(&bad, &ask)).is_some_and(|m| m.contains("git.branch")));
        bad.branch = Some(BranchChoice::Current(false));
        assert!(check_options(&bad, &ask).is_err());
    }

    #[test]
    fn a_new_branch_without_a_name_gets_the_default() {
        let job_id = JobId::generate();
        let mut choice = options(Delivery::Push);
        choice.branch = Some(BranchChoice::New(String::new()));
        let filled = with_default_branch(choice, &job_id, "Fix the login bug!");
        let Some(BranchChoice::New(name)) = filled.branch else {
            panic!("no new branch");
        };
        assert!(
            name.starts_with("tether/") && name.ends_with("/fix-the-login-bug"),
            "{name}"
        );
        assert!(check_branch_name(&name).is_ok());
    }

    #[test]
    fn reports_of_the_wrong_shape_are_dropped() {
        let good = DeliveryReport {
            branch: "tether/1/x".into(),
            commits: vec![DeliveredCommit {
                sha: "abc1234".into(),
                subject: "Fix\u{0}it".into(),
            }],
            pushed: true,
            pull_request: Some(PullRequest {
                number: 3,
                url: "https://github.com/o/r/pull/3".into(),
                state: PullRequestState::Open,
            }),
        };
        let ReportedDelivery::Checked(kept) =
            ReportedDelivery::check(serde_json::to_value(&good).ok())
        else {
            panic!("refused a good report");
        };
        assert_eq!(kept.commits[0].subject, "Fix\u{fffd}it");
        for bad in [
            json!({ "branch": "a..b", "commits": [], "pushed": false }),
            json!({ "branch": "x", "commits": [{ "sha": "zz", "subject": "s" }], "pushed": false }),
            json!({ "branch": "x", "commits": [], "pushed": true,
                    "pullRequest": { "number": 1, "url": "javascript:alert(1)", "state": "open" } }),
            json!("nonsense"),
        ] {
            assert!(
                matches!(
                    ReportedDelivery::check(Some(bad.clone())),
                    ReportedDelivery::Dropped(_)
                ),
                "{bad}"
            );
        }
        assert_eq!(ReportedDelivery::check(None), ReportedDelivery::None);
    }
}
