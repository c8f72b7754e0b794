//! Delivery on real git repositories in temporary folders, and the GitHub client against a
//! GitHub API double on loopback (real HTTP and JSON; GitHub itself is not reachable here).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::pin::Pin;
use std::process::Command;

use tether_protocol::decisions::{Answer, Scope};
use tether_protocol::git::{BranchChoice, MergeChoice, PullRequestState};

use super::github::Github;
use super::origin::GithubRepo;
use super::pull_request::{self, CheckWait, Merging, Proposal};
use super::repository::{Identity, Repository};
use super::signed_in::{Pushed, SignedInGit};
use super::{commit_leftovers, switch_branch, undo_commits};
use crate::local::github::{GithubHost, GithubSignIn, GithubToken};
use crate::policy::asking::{AnsweredOn, Ask, Outcome, Question};
use crate::run::stop::RunStop;

// Each test module that needs it includes it: the library has no test support of its own.
#[allow(clippy::duplicate_mod)]
#[path = "../../../../server/tests/support/external.rs"]
mod external;
#[path = "../../../tests/support/github_double.rs"]
mod github_double;
use github_double::{GithubDouble, Pull};

const TOKEN: &str = "ghp_thedoublestoken0123456789";

/// Plain git, as a person runs it, with a fixed identity and no user configuration.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Owner")
        .env("GIT_AUTHOR_EMAIL", "owner@example.com")
        .env("GIT_COMMITTER_NAME", "Owner")
        .env("GIT_COMMITTER_EMAIL", "owner@example.com")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A repository on `main` with one commit of `a.txt`.
fn repository(dir: &Path) -> Repository {
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("a.txt"), "one\n").unwrap();
    git(dir, &["add", "a.txt"]);
    git(dir, &["commit", "-q", "-m", "first"]);
    Repository::open(dir).unwrap().unwrap()
}

#[test]
fn a_new_branch_is_made_and_local_undoes_the_runs_commit() {
    if !external::git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = repository(tmp.path());
    let choice = BranchChoice::New("tether/fix".into());
    let branch = switch_branch(&repo, Some(&choice), false).unwrap();
    assert_eq!(branch.as_deref(), Some("tether/fix"));
    assert_eq!(
        git(tmp.path(), &["symbolic-ref", "--short", "HEAD"]),
        "tether/fix"
    );
    // Made again by a first attempt: refused; by a carry-on: checked out.
    git(tmp.path(), &["checkout", "-q", "main"]);
    assert!(switch_branch(&repo, Some(&choice), false).is_err());
    assert!(switch_branch(&repo, Some(&choice), true).is_ok());

    let start = repo.head().unwrap().unwrap();
    std::fs::write(tmp.path().join("a.txt"), "two\n").unwrap();
    git(tmp.path(), &["commit", "-q", "-am", "the run's own commit"]);
    let mut notes = Vec::new();
    undo_commits(&repo, &start, &mut notes).unwrap();
    assert_eq!(repo.head().unwrap().as_deref(), Some(start.as_str()));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("a.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(git(tmp.path(), &["status", "--porcelain"]), "M a.txt");
    assert!(notes[0].contains("Undid 1 commit"), "{notes:?}");
}

#[test]
fn an_existing_branch_is_not_checked_out_over_uncommitted_work() {
    if !external::git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = repository(tmp.path());
    git(tmp.path(), &["checkout", "-q", "-b", "other"]);
    std::fs::write(tmp.path().join("a.txt"), "other\n").unwrap();
    git(tmp.path(), &["commit", "-q", "-am", "other"]);
    git(tmp.path(), &["checkout", "-q", "main"]);
    std::fs::write(tmp.path().join("a.txt"), "the owner's work\n").unwrap();
    let choice = BranchChoice::Existing("other".into());
    let refused = switch_branch(&repo, Some(&choice), false).unwrap_err();
    assert!(refused.contains("cannot check out other"), "{refused}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("a.txt")).unwrap(),
        "the owner's work\n"
    );
    let missing = BranchChoice::Existing("nope".into());
    assert!(switch_branch(&repo, Some(&missing), false)
        .unwrap_err()
        .contains("no branch"));
}

#[test]
fn leftovers_are_committed_but_credentials_and_earlier_work() {
    if !external::git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = repository(tmp.path());
    std::fs::write(tmp.path().join("owner.txt"), "mine\n").unwrap();
    let dirty_before = repo.dirty_paths().unwrap();
    let start = repo.head().unwrap().unwrap();
    std::fs::write(tmp.path().join("new.txt"), "added\n").unwrap();
    std::fs::write(tmp.path().join(".env"), "TOKEN=x\n").unwrap();
    std::fs::write(tmp.path().join("a.txt"), "changed\n").unwrap();
    let mut notes = Vec::new();
    let by = Identity::fallback();
    commit_leftovers(
        &repo,
        &dirty_before,
        "Fix it\n\nThe summary.\n",
        &by,
        &mut notes,
    )
    .unwrap();
    let commits = repo.commits_since(&start).unwrap();
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].subject, "Fix it");
    let files = git(
        tmp.path(),
        &["show", "--name-only", "--format=%an <%ae>", "HEAD"],
    );
    assert_eq!(files, "Tether <tether@localhost>\n\na.txt\nnew.txt");
    let status = git(tmp.path(), &["status", "--porcelain"]);
    assert_eq!(status, "?? .env\n?? owner.txt");
    assert!(notes.iter().any(|note| note.contains(".env")), "{notes:?}");
}

#[tokio::test]
async fn a_push_never_overwrites_a_branch_someone_else_moved() {
    if !external::git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (work, bare, other) = (
        tmp.path().join("work"),
        tmp.path().join("origin.git"),
        tmp.path().join("other"),
    );
    for dir in [&work, &bare] {
        std::fs::create_dir(dir).unwrap();
    }
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    let repo = repository(&work);
    git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
    let config = repo.local_config().unwrap();
    let signed_in = SignedInGit::new(repo.repo()).unwrap();
    assert_eq!(
        signed_in.push("feature", &config).await.unwrap(),
        Pushed::Done
    );
    let head = repo.head().unwrap().unwrap();
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/feature"]), head);

    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "-b",
            "feature",
            bare.to_str().unwrap(),
            "other",
        ],
    );
    std::fs::write(other.join("b.txt"), "theirs\n").unwrap();
    git(&other, &["add", "b.txt"]);
    git(&other, &["commit", "-q", "-m", "theirs"]);
    git(&other, &["push", "-q", "origin", "feature"]);
    let theirs = git(&other, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("a.txt"), "ours\n").unwrap();
    git(&work, &["commit", "-q", "-am", "ours"]);
    assert_eq!(
        signed_in.push("feature", &config).await.unwrap(),
        Pushed::Rejected
    );
    assert_eq!(git(&bare, &["rev-parse", "refs/heads/feature"]), theirs);

    // A helper the repository names for one address: not pushed with.
    git(
        &work,
        &[
            "config",
            "credential.https://example.com.helper",
            "!touch /tmp/x",
        ],
    );
    let config = repo.local_config().unwrap();
    let refused = signed_in.push("feature", &config).await.unwrap_err();
    assert!(
        format!("{refused:#}").contains("credential helper"),
        "{refused:#}"
    );
}

/// Answers every question the same way, counting them.
#[derive(Debug)]
struct Answering(Answer, std::sync::Mutex<Vec<Question>>);

impl Ask for Answering {
    fn ask<'a>(
        &'a self,
        question: &'a Question,
    ) -> Pin<Box<dyn std::future::Future<Output = Outcome> + Send + 'a>> {
        self.1.lock().unwrap().push(question.clone());
        let answer = self.0;
        Box::pin(async move {
            Outcome::Answered {
                answer,
                scope: Scope::Once,
                on: AnsweredOn::Web,
            }
        })
    }
}

fn client(double: &GithubDouble, token: &str) -> Github {
    let sign_in = GithubSignIn {
        host: GithubHost {
            host: double.addr.to_string(),
            api_url: double.url(),
        },
        token: GithubToken::parse(token).unwrap(),
    };
    Github::new(&sign_in).unwrap()
}

const WAIT: CheckWait = CheckWait {
    limit: std::time::Duration::from_secs(2),
    first: std::time::Duration::from_millis(50),
    longest: std::time::Duration::from_millis(200),
};

/// Proposes `feature` of `owner/repo` with `choice`, answering questions with `answer`.
async fn propose(
    github: &Github,
    choice: MergeChoice,
    answer: Answer,
) -> (
    Result<pull_request::Proposed, super::github::GithubError>,
    usize,
) {
    let repo = GithubRepo {
        host: "127.0.0.1".into(),
        owner: "owner".into(),
        name: "repo".into(),
    };
    let proposal = Proposal {
        repo: &repo,
        branch: "feature",
        base: None,
        title: "Fix the bug",
        body: "What the run did.",
        head_sha: "0123abc",
    };
    let asker = Answering(answer, std::sync::Mutex::new(Vec::new()));
    let stop = RunStop::new();
    let merging = Merging {
        choice,
        asker: &asker,
        stop: &stop,
        wait: WAIT,
    };
    let proposed = pull_request::propose(github, &proposal, &merging).await;
    let asked = asker.1.lock().unwrap().len();
    (proposed, asked)
}

#[tokio::test]
async fn a_pull_request_is_opened_into_the_default_branch_and_left_open() {
    let double = GithubDouble::start(TOKEN).await.unwrap();
    let github = client(&double, TOKEN);
    let (proposed, _) = propose(&github, MergeChoice::Never, Answer::Allow).await;
    let proposed = proposed.unwrap();
    assert_eq!(proposed.pull_request.number, 1);
    assert_eq!(proposed.pull_request.state, PullRequestState::Open);
    assert!(
        proposed.note.contains("Opened pull request #1 into main"),
        "{}",
        proposed.note
    );
    let pulls = double.with(|state| state.pulls.clone());
    assert_eq!(
        (
            pulls[0].head.as_str(),
            pulls[0].base.as_str(),
            pulls[0].title.as_str()
        ),
        ("feature", "main", "Fix the bug")
    );
    // Again: the open one is reused, none made.
    let (again, _) = propose(&github, MergeChoice::Never, Answer::Allow).await;
    assert_eq!(again.unwrap().pull_request.number, 1);
    assert_eq!(double.with(|state| state.pulls.len()), 1);
}

#[tokio::test]
async fn auto_merges_the_exact_commit_once_its_checks_pass() {
    let double = GithubDouble::start(TOKEN).await.unwrap();
    double.with(|state| {
        state.pulls.push(Pull {
            number: 7,
            head: "feature".into(),
            base: "main".into(),
            title: "earlier".into(),
            body: String::new(),
            open: true,
            merged_sha: None,
        });
        state
            .check_runs
            .push(("build".into(), "completed".into(), Some("success".into())));
        state.statuses.push(("lint".into(), "success".into()));
    });
    let (proposed, asked) = propose(&client(&double, TOKEN), MergeChoice::Auto, Answer::Deny).await;
    let proposed = proposed.unwrap();
    assert_eq!(asked, 0);
    assert_eq!(proposed.pull_request.number, 7);
    assert_eq!(proposed.pull_request.state, PullRequestState::Merged);
    let merged = double.with(|state| state.pulls[0].merged_sha.clone());
    assert_eq!(merged.as_deref(), Some("0123abc"));
}

#[tokio::test]
async fn a_failed_check_leaves_it_open_and_says_which() {
    let double = GithubDouble::start(TOKEN).await.unwrap();
    double.with(|state| {
        state
            .check_runs
            .push(("build".into(), "completed".into(), Some("success".into())));
        state
            .check_runs
            .push(("tests".into(), "completed".into(), Some("failure".into())));
    });
    let (proposed, asked) = propose(&client(&double, TOKEN), MergeChoice::Ask, Answer::Allow).await;
    let proposed = proposed.unwrap();
    assert_eq!(asked, 1);
    assert_eq!(proposed.pull_request.state, PullRequestState::Open);
    assert!(
        proposed.note.contains("\"tests\" failed"),
        "{}",
        proposed.note
    );
    assert!(double.with(|state| state.pulls[0].open));
}

#[tokio::test]
async fn a_denied_merge_leaves_it_open_and_pending_checks_are_waited_out() {
    let double = GithubDouble::start(TOKEN).await.unwrap();
    let (proposed, asked) = propose(&client(&double, TOKEN), MergeChoice::Ask, Answer::Deny).await;
    let proposed = proposed.unwrap();
    assert_eq!(asked, 1);
    assert_eq!(proposed.pull_request.state, PullRequestState::Open);
    assert!(proposed.note.contains("denied"), "{}", proposed.note);

    double.with(|state| {
        state
            .check_runs
            .push(("slow".into(), "in_progress".into(), None))
    });
    let (proposed, _) = propose(&client(&double, TOKEN), MergeChoice::Auto, Answer::Allow).await;
    let proposed = proposed.unwrap();
    assert_eq!(proposed.pull_request.state, PullRequestState::Open);
    assert!(
        proposed.note.contains("did not finish"),
        "{}",
        proposed.note
    );
}

#[tokio::test]
async fn a_refused_token_is_never_repeated() {
    let double = GithubDouble::start(TOKEN).await.unwrap();
    let wrong = "ghp_wrongtoken_that_must_not_leak";
    let (proposed, _) = propose(&client(&double, wrong), MergeChoice::Never, Answer::Allow).await;
    let err = proposed.unwrap_err();
    assert_eq!(err.status, Some(401));
    let text = format!("{err} {err:?}");
    assert!(!text.contains(wrong), "{text}");
    assert!(
        text.contains("[hidden]") && text.contains("github add"),
        "{text}"
    );
    let requests = double.with(|state| state.requests.clone());
    assert_eq!(requests, ["GET /repos/owner/repo"]);
}

#[test]
fn local_only_outside_git_runs_as_without_git_and_other_choices_are_blocked() {
    use tether_protocol::git::{Delivery, GitOptions};
    let folder = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let job = crate::run::grant::tests::claimed_job("", 1);
    let options = |delivery| GitOptions {
        delivery,
        branch: None,
        base: None,
        merge: None,
        worktree: false,
    };
    let local = super::prepare_now(&job, options(Delivery::Local), folder.path(), data.path());
    assert!(matches!(local, Ok(None)));
    let commit = super::prepare_now(&job, options(Delivery::Commit), folder.path(), data.path());
    assert!(commit.is_err_and(|why| why.contains("not in a git repository")));
    let mut on_new_branch = options(Delivery::Local);
    on_new_branch.branch = Some(BranchChoice::New("x".into()));
    let branch = super::prepare_now(&job, on_new_branch, folder.path(), data.path());
    assert!(branch.is_err());
}

#[tokio::test]
async fn an_allowed_merge_waits_for_passing_checks_and_merges_the_head_commit() {
    let double = GithubDouble::start(TOKEN).await.unwrap();
    double.with(|state| {
        state
            .check_runs
            .push(("build".into(), "completed".into(), Some("success".into())));
    });
    let (proposed, asked) = propose(&client(&double, TOKEN), MergeChoice::Ask, Answer::Allow).await;
    let proposed = proposed.unwrap();
    assert_eq!(asked, 1, "the owner is asked once");
    assert_eq!(proposed.pull_request.state, PullRequestState::Merged);
    let merged = double.with(|state| state.pulls[0].merged_sha.clone());
    assert_eq!(merged.as_deref(), Some("0123abc"));
}
