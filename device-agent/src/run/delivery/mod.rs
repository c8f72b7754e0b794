//! What becomes of a run's work in git when its job asks for it (`spec.git`): the branch
//! it works on, set up before the engine starts ([`prepare`]), and after it ends
//! ([`deliver`]) its commits — undone for `local`, made by Tether for what the engine left
//! uncommitted — a push with the computer's own sign-in, and a pull request. docs/DELIVERY.md.
//!
//! - [`repository`]: the git commands that need no sign-in, on the hardened runner;
//! - [`signed_in`]: the push, the one command run with the user's git sign-in;
//! - [`origin`]: which GitHub repository `origin` is;
//! - [`github`]: the GitHub REST calls; [`pull_request`]: opening, checks and merging.
//!
//! **Architecture Invariant:** the engine never receives a credential: the push and the
//! GitHub calls happen here, outside the sandbox, after the engine ended. A GitHub token
//! never appears in a summary, a log line or an error.
//!
//! **Architecture Invariant:** delivery always works on the folder path the run was given
//! (which may be a worktree), and never forces a push.

pub mod github;
pub mod origin;
pub mod pull_request;
pub mod repository;
pub mod signed_in;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::OnceLock;

use tether_protocol::capabilities::GitCapability;
use tether_protocol::git::{BranchChoice, Delivery, DeliveryReport, GitOptions, MergeChoice};
use tether_protocol::jobs::{ClaimedJob, CompleteParams, Outcome};

use crate::changes::git::{Git, Limits};
use crate::changes::record::Base;
use crate::changes::runs_later::is_credential;
use crate::changes::store::Store;
use crate::local::github::{GithubSignIn, GithubVault};
use crate::local::state::DataDir;
use crate::local::vault::redact;
use crate::policy::asking::Ask;
use crate::run::stop::RunStop;
use github::Github;
use origin::GithubRepo;
use pull_request::{CheckWait, Merging, Proposal};
use repository::{Identity, Repository};
use signed_in::{Pushed, SignedInGit};

/// Longest body of a commit Tether makes (the run's summary), in characters.
const MAX_BODY_CHARS: usize = 2000;

/// The branch set up for a run, and what the run started from.
#[derive(Debug, Clone)]
pub struct Prepared {
    repository: Repository,
    options: GitOptions,
    /// The branch the run works on; `None`: `HEAD` is detached.
    branch: Option<String>,
    /// The commit the run started from.
    start: String,
    /// Paths with uncommitted changes before the run: never Tether's to commit.
    dirty_before: Vec<String>,
    /// The repository's configuration before the run: pushing waits for it to be the same.
    config_before: Vec<u8>,
}

/// What the git of a job's folder is before its run.
#[derive(Debug)]
pub enum Preparation {
    /// The job asks for nothing.
    NotAsked,
    Ready(Box<Prepared>),
    /// The run cannot start; why.
    Blocked(String),
}

/// What [`deliver`] needs of the run.
pub struct Delivering<'a> {
    pub job: &'a ClaimedJob,
    pub data_dir: &'a Path,
    /// The run's own saved secret values, hidden in the commit message.
    pub hidden: &'a [String],
    pub asker: &'a dyn Ask,
    pub stop: &'a RunStop,
}

/// What this computer's git delivery can do, for heartbeats: `None` without a working git.
pub fn capability(data_dir: &DataDir) -> Option<GitCapability> {
    let version = git_version()?;
    let github_hosts = GithubVault::new(data_dir)
        .list()
        .map(|hosts| hosts.into_iter().map(|host| host.host).collect())
        .unwrap_or_else(|err| {
            tracing::warn!("cannot read the GitHub hosts: {err:#}");
            Vec::new()
        });
    Some(GitCapability {
        version,
        github_hosts,
    })
}

/// `git --version`'s number, asked once.
fn git_version() -> Option<String> {
    static VERSION: OnceLock<Option<String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            let git = Git::in_dir(Path::new("/")).ok()?;
            let stdout = git.run(&["--version"], Limits::QUICK).ok()?;
            let text = String::from_utf8_lossy(&stdout);
            let number = text.trim().strip_prefix("git version ")?;
            Some(number.split_whitespace().next()?.to_owned())
        })
        .clone()
}

/// Sets up the branch of `job`'s run in `folder`, before its start is recorded.
pub async fn prepare(job: &ClaimedJob, folder: &Path, data_dir: &Path) -> Preparation {
    let Some(options) = job.spec.git.clone() else {
        return Preparation::NotAsked;
    };
    let (folder, data_dir, job) = (folder.to_owned(), data_dir.to_owned(), job.clone());
    let prepared =
        tokio::task::spawn_blocking(move || prepare_now(&job, options, &folder, &data_dir)).await;
    match prepared {
        Ok(Ok(Some(prepared))) => Preparation::Ready(Box::new(prepared)),
        Ok(Ok(None)) => Preparation::NotAsked,
        Ok(Err(why)) => Preparation::Blocked(why),
        Err(err) => Preparation::Blocked(format!("setting up the branch failed: {err}")),
    }
}

fn prepare_now(
    job: &ClaimedJob,
    options: GitOptions,
    folder: &Path,
    data_dir: &Path,
) -> Result<Option<Prepared>, String> {
    // "Local only" on the current branch asks only that nothing be committed: a folder
    // outside git (or a repository without a commit) has nothing to keep from being
    // committed, so it runs as without git.
    let nothing_to_guard = options.delivery == Delivery::Local
        && matches!(options.branch, None | Some(BranchChoice::Current(_)));
    let repository = match Repository::open(folder) {
        Ok(Some(repository)) => repository,
        Ok(None) if nothing_to_guard => return Ok(None),
        Ok(None) => return Err(format!("{} is not in a git repository (or git is not installed), so its work cannot be delivered with git", folder.display())),
        Err(err) => return Err(format!("git cannot read {}: {err:#}", folder.display())),
    };
    let failed = |err: anyhow::Error| format!("git failed: {err:#}");
    if repository.head().map_err(failed)?.is_none() {
        if nothing_to_guard {
            return Ok(None);
        }
        return Err(
            "the repository has no commit yet; commit once, then assign the job again".to_owned(),
        );
    }
    let resumed = job.resumed.is_some();
    let branch = switch_branch(&repository, options.branch.as_ref(), resumed)?;
    let head = repository.head().map_err(failed)?.unwrap_or_default();
    let start = resumed
        .then(|| first_start(data_dir, job))
        .flatten()
        .unwrap_or(head);
    Ok(Some(Prepared {
        dirty_before: repository.dirty_paths().map_err(failed)?,
        config_before: repository.local_config().map_err(failed)?,
        repository,
        options,
        branch,
        start,
    }))
}

/// The commit the job's first attempt started from, as its start was recorded.
fn first_start(data_dir: &Path, job: &ClaimedJob) -> Option<String> {
    match Store::new(data_dir).load(&job.id).ok()??.base {
        Base::Git(start) => start.head,
        Base::Snapshot(_) => None,
    }
}

/// Checks out the branch the job names; the branch the run works on.
fn switch_branch(
    repository: &Repository,
    choice: Option<&BranchChoice>,
    resumed: bool,
) -> Result<Option<String>, String> {
    let current = repository
        .current_branch()
        .map_err(|err| format!("git failed: {err:#}"))?;
    let (name, create) = match choice {
        None | Some(BranchChoice::Current(_)) => return Ok(current),
        Some(BranchChoice::New(name)) => (name, true),
        Some(BranchChoice::Existing(name)) => (name, false),
    };
    tether_protocol::git::check_branch_name(name)
        .map_err(|err| format!("the branch name {name:?} {}", err.0))?;
    if current.as_deref() == Some(name.as_str()) {
        return Ok(current);
    }
    let exists = repository
        .has_branch(name)
        .map_err(|err| format!("git failed: {err:#}"))?;
    let switched = match (create, exists) {
        (true, false) => repository.create_branch(name),
        // A carry-on finds the branch its first attempt made.
        (true, true) if !resumed => {
            return Err(format!(
                "a branch named {name} already exists in the repository"
            ))
        }
        (_, true) => repository.check_out(name),
        (false, false) => return Err(format!("the repository has no branch named {name}")),
    };
    switched.map_err(|err| format!("cannot check out {name}: {err}"))?;
    Ok(Some(name.clone()))
}

/// Delivers the run's work as its job asks, after the engine ended: the completion's
/// `delivery`, and its outcome `blocked` when a push or pull request could not complete.
pub async fn deliver(prepared: Prepared, run: &Delivering<'_>, params: &mut CompleteParams) {
    let vault_dir = DataDir::resolve(Some(run.data_dir.to_path_buf())).ok();
    let tokens = vault_dir
        .as_ref()
        .map(|dir| GithubVault::new(dir).all_tokens())
        .unwrap_or_default();
    let result = deliver_steps(&prepared, run, params, vault_dir.as_ref()).await;
    let (report, notes, blocked) = match result {
        Ok(Delivered { report, notes }) => (Some(report), notes, None),
        Err(Stopped { report, notes, why }) => (report, notes, Some(why)),
    };
    params.delivery = report.and_then(|report| serde_json::to_value(report).ok());
    let mut summary = params.summary.clone();
    for note in notes {
        summary = format!("{summary}\n{note}");
    }
    if let Some(why) = blocked {
        params.outcome = Outcome::Blocked;
        summary = format!("{why}\n{summary}");
    }
    params.summary = redact(&summary, &tokens).trim().to_owned();
}

struct Delivered {
    report: DeliveryReport,
    notes: Vec<String>,
}

struct Stopped {
    report: Option<DeliveryReport>,
    notes: Vec<String>,
    why: String,
}

async fn deliver_steps(
    prepared: &Prepared,
    run: &Delivering<'_>,
    params: &CompleteParams,
    vault_dir: Option<&DataDir>,
) -> Result<Delivered, Stopped> {
    let mut notes = Vec::new();
    let stopped = |notes: &mut Vec<String>, report: Option<DeliveryReport>, why: String| Stopped {
        report,
        notes: std::mem::take(notes),
        why,
    };
    let committed = local_steps(prepared, run, params, &mut notes).await;
    let mut report = match committed {
        Ok(report) => report,
        Err(why) => return Err(stopped(&mut notes, None, why)),
    };
    let delivery = prepared.options.delivery;
    let pushes = matches!(delivery, Delivery::Push | Delivery::PullRequest);
    if !pushes || params.outcome != Outcome::Succeeded {
        return Ok(Delivered { report, notes });
    }
    if report.commits.is_empty() {
        notes.push("Nothing to push: the run made no commit.".to_owned());
        return Ok(Delivered { report, notes });
    }
    let Some(branch) = prepared.branch.clone() else {
        let why =
            "HEAD is detached, so there is no branch to push; the commits stay in the repository"
                .to_owned();
        return Err(stopped(&mut notes, Some(report), why));
    };
    // A pull request needs its host's token: found before anything is pushed.
    let github = match delivery {
        Delivery::PullRequest => match github_of(prepared, vault_dir) {
            Ok(found) => Some(found),
            Err(why) => return Err(stopped(&mut notes, Some(report), why)),
        },
        _ => None,
    };
    if let Err(why) = push(prepared, &branch).await {
        return Err(stopped(&mut notes, Some(report), why));
    }
    report.pushed = true;
    notes.push(format!("Pushed {branch} to origin."));
    let Some((repo, sign_in)) = github else {
        return Ok(Delivered { report, notes });
    };
    match open_pull_request(prepared, run, params, (&repo, &sign_in), &branch).await {
        Ok(proposed) => {
            notes.push(proposed.note);
            report.pull_request = Some(proposed.pull_request);
            Ok(Delivered { report, notes })
        }
        Err(why) => Err(stopped(&mut notes, Some(report), why)),
    }
}

/// The local part: `local` undoes the run's commits; the others commit what the engine
/// left, after a successful run. The report of the commits made.
async fn local_steps(
    prepared: &Prepared,
    run: &Delivering<'_>,
    params: &CompleteParams,
    notes: &mut Vec<String>,
) -> Result<DeliveryReport, String> {
    let repository = prepared.repository.clone();
    let (start, dirty_before) = (prepared.start.clone(), prepared.dirty_before.clone());
    let delivery = prepared.options.delivery;
    let commits = params.outcome == Outcome::Succeeded && delivery != Delivery::Local;
    let message = commit_message(&run.job.spec.title, &redact(&params.summary, run.hidden));
    let identity = user_identity(&repository).await;
    let worked = tokio::task::spawn_blocking(move || {
        let mut notes = Vec::new();
        if delivery == Delivery::Local {
            undo_commits(&repository, &start, &mut notes)?;
        } else if commits {
            commit_leftovers(&repository, &dirty_before, &message, &identity, &mut notes)?;
        }
        let commits = repository.commits_since(&start)?;
        Ok::<_, anyhow::Error>((commits, notes))
    })
    .await;
    let (commits, said) = match worked {
        Ok(Ok(done)) => done,
        Ok(Err(err)) => return Err(format!("git failed while delivering the work: {err:#}")),
        Err(err) => return Err(format!("delivering the work failed: {err}")),
    };
    notes.extend(said);
    Ok(DeliveryReport {
        branch: prepared.branch.clone().unwrap_or_else(|| "HEAD".to_owned()),
        commits,
        pushed: false,
        pull_request: None,
    })
}

/// `local`: the commits made during the run are undone, every file change kept unstaged.
fn undo_commits(
    repository: &Repository,
    start: &str,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let made = repository.commits_since(start)?;
    if made.is_empty() {
        return Ok(());
    }
    repository.undo_commits(start)?;
    notes.push(format!(
        "Undid {} commit(s) made during the run (delivery: local); their changes stay in the folder, uncommitted.",
        made.len()
    ));
    Ok(())
}

/// Commits what the run changed and left uncommitted, but credential files and paths that
/// had uncommitted changes before the run.
fn commit_leftovers(
    repository: &Repository,
    dirty_before: &[String],
    message: &str,
    identity: &Identity,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let dirty = repository.dirty_paths()?;
    let (credentials, rest): (Vec<String>, Vec<String>) =
        dirty.into_iter().partition(|path| is_credential(path));
    let (earlier, paths): (Vec<String>, Vec<String>) = rest
        .into_iter()
        .partition(|path| dirty_before.contains(path));
    if !credentials.is_empty() {
        notes.push(format!(
            "Left uncommitted (credential files): {}.",
            credentials.join(", ")
        ));
    }
    if !earlier.is_empty() {
        notes.push(format!(
            "Left uncommitted ({} file(s) with changes from before the run).",
            earlier.len()
        ));
    }
    if paths.is_empty() {
        return Ok(());
    }
    repository.commit(&paths, message, identity)?;
    notes.push(format!(
        "Committed {} file(s) the run left uncommitted.",
        paths.len()
    ));
    Ok(())
}

/// The job's title, then the run's summary cut to [`MAX_BODY_CHARS`].
fn commit_message(title: &str, summary: &str) -> String {
    let title = title.lines().next().unwrap_or_default().trim();
    let title = if title.is_empty() {
        "Work from Tether"
    } else {
        title
    };
    let mut body: String = summary.trim().chars().take(MAX_BODY_CHARS).collect();
    if summary.trim().chars().count() > MAX_BODY_CHARS {
        body.push('…');
    }
    if body.is_empty() {
        format!("{title}\n")
    } else {
        format!("{title}\n\n{body}\n")
    }
}

/// The repository's identity, else the user's, else Tether's.
async fn user_identity(repository: &Repository) -> Identity {
    let name = repository.config_value("user.name").ok().flatten();
    let email = repository.config_value("user.email").ok().flatten();
    if let (Some(name), Some(email)) = (name, email) {
        return Identity { name, email };
    }
    let Ok(signed_in) = SignedInGit::new(repository.repo()) else {
        return Identity::fallback();
    };
    match signed_in.user_identity().await {
        Some((name, email)) => Identity { name, email },
        None => Identity::fallback(),
    }
}

/// Pushes the branch with the computer's sign-in; why not, when it did not.
async fn push(prepared: &Prepared, branch: &str) -> Result<(), String> {
    let repository = prepared.repository.clone();
    let config_now = tokio::task::spawn_blocking(move || repository.local_config())
        .await
        .map_err(|err| format!("reading the repository's configuration failed: {err}"))?
        .map_err(|err| format!("git failed: {err:#}"))?;
    if config_now != prepared.config_before {
        return Err("the repository's git configuration changed during the run, so Tether does not push with this computer's sign-in; review .git/config, then push yourself".to_owned());
    }
    let signed_in =
        SignedInGit::new(prepared.repository.repo()).map_err(|err| format!("{err:#}"))?;
    match signed_in.push(branch, &config_now).await {
        Ok(Pushed::Done) => Ok(()),
        Ok(Pushed::Rejected) => Err(format!(
            "the branch {branch} on origin has commits this one does not (someone else pushed to it), so it was not pushed; the run's commits stay on the local branch {branch}"
        )),
        Err(err) => Err(format!("{err:#}")),
    }
}

/// `origin`'s GitHub repository and its host's sign-in; why not, naming the fix.
fn github_of(
    prepared: &Prepared,
    vault_dir: Option<&DataDir>,
) -> Result<(GithubRepo, GithubSignIn), String> {
    let url = prepared
        .repository
        .config_value("remote.origin.url")
        .map_err(|err| format!("git failed: {err:#}"))?
        .ok_or("the repository has no remote named origin to open a pull request on")?;
    let repo = origin::parse(&url).ok_or_else(|| {
        format!(
            "origin ({}) is not a GitHub repository address, so no pull request can be opened",
            signed_in::hide_url_passwords(&url)
        )
    })?;
    let vault_dir = vault_dir.ok_or("the agent's data folder cannot be found")?;
    let vault = GithubVault::new(vault_dir);
    let sign_in = vault
        .sign_in(&repo.host)
        .and_then(|found| match found {
            Some(found) => Ok(Some(found)),
            None => vault.sign_in(repo.host_name()),
        })
        .map_err(|err| format!("cannot read the GitHub tokens: {err:#}"))?;
    let sign_in = sign_in.ok_or_else(|| {
        format!(
            "this computer has no GitHub token for {}; run `tether-agent github add {}` on it",
            repo.host, repo.host
        )
    })?;
    Ok((repo, sign_in))
}

async fn open_pull_request(
    prepared: &Prepared,
    run: &Delivering<'_>,
    params: &CompleteParams,
    (repo, sign_in): (&GithubRepo, &GithubSignIn),
    branch: &str,
) -> Result<pull_request::Proposed, String> {
    let github = Github::new(sign_in).map_err(|err| err.message)?;
    let repository = prepared.repository.clone();
    let head = tokio::task::spawn_blocking(move || repository.head())
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
        .ok_or("cannot read the pushed commit")?;
    let body = redact(&params.summary, run.hidden);
    let body: String = body.chars().take(MAX_BODY_CHARS).collect();
    let proposal = Proposal {
        repo,
        branch,
        base: prepared.options.base.as_deref(),
        title: &run.job.spec.title,
        body: &body,
        head_sha: &head,
    };
    let merging = Merging {
        choice: prepared.options.merge.unwrap_or(MergeChoice::Never),
        asker: run.asker,
        stop: run.stop,
        wait: check_wait(),
    };
    pull_request::propose(&github, &proposal, &merging)
        .await
        .map_err(|err| format!("the pull request could not be opened: {err}"))
}

/// [`CheckWait::DEFAULT`], its limit shortened by `TETHER_MERGE_WAIT_SECS` (tests).
fn check_wait() -> CheckWait {
    let mut wait = CheckWait::DEFAULT;
    if let Some(secs) = std::env::var("TETHER_MERGE_WAIT_SECS")
        .ok()
        .and_then(|secs| secs.trim().parse::<u64>().ok())
    {
        wait.limit = std::time::Duration::from_secs(secs);
        wait.first = wait.first.min(wait.limit);
    }
    wait
}
