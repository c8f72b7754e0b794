//! Where a run works: its shared folder, held by one run at a time, or a git worktree of it.
//!
//! With `tether-agent run --max-runs N` several runs go on at once, and two of them never
//! change one shared folder at the same time by accident. A run takes its folder before its
//! engine starts ([`FolderClaims`]); one whose folder another run holds waits, saying so in
//! a status line, its lease kept alive by the heartbeat (the daemon reports every run it
//! holds), until the folder is free or the run is stopped — unless the job asks for a
//! worktree (`git.worktree`) and the folder is a repository with a commit: it then starts at
//! once in its own ([`crate::changes::worktree`]), holding no shared folder. The worktree is
//! the folder its engine, its changes record and its delivery see.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tether_protocol::git::{BranchChoice, GitOptions};
use tether_protocol::jobs::{ClaimedJob, CompleteParams, Outcome};
use tether_protocol::JobId;
use tokio::sync::Notify;

use crate::changes::worktree::{self, Settled, Worktree};
use crate::local::private_files::create_private_dir;
use crate::local::state::SharedFolder;
use crate::remote::client::DeviceClient;
use crate::run::engine::blocked;
use crate::run::lease::RunLease;
use crate::run::progress::say;
use crate::run::stop::{RunStop, StopReason};

/// Which shared folders runs of this process hold, and by which job.
#[derive(Debug, Default)]
pub struct FolderClaims {
    /// Canonical folder → the job holding it. A std mutex: held only to look and change.
    held: Mutex<HashMap<PathBuf, JobId>>,
    /// Woken whenever a folder is let go.
    released: Notify,
}

/// A shared folder one run holds; let go when dropped, however the run ends.
#[derive(Debug)]
pub struct FolderHold {
    claims: Arc<FolderClaims>,
    folder: PathBuf,
}

impl Drop for FolderHold {
    fn drop(&mut self) {
        self.claims
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.folder);
        self.claims.released.notify_waiters();
    }
}

impl FolderClaims {
    /// Takes `folder` for `job` if no run holds it.
    ///
    /// # Errors
    /// The job that holds it.
    pub fn try_take(self: &Arc<Self>, folder: &Path, job: &JobId) -> Result<FolderHold, JobId> {
        let folder = folder
            .canonicalize()
            .unwrap_or_else(|_| folder.to_path_buf());
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(holder) = held.get(&folder) {
            return Err(holder.clone());
        }
        held.insert(folder.clone(), job.clone());
        Ok(FolderHold {
            claims: self.clone(),
            folder,
        })
    }

    /// Takes `folder` for `job`, waiting while another run holds it.
    ///
    /// # Errors
    /// The reason the run was stopped while it waited.
    pub async fn take(
        self: &Arc<Self>,
        folder: &Path,
        job: &JobId,
        stop: &RunStop,
    ) -> Result<FolderHold, StopReason> {
        loop {
            // Listening before looking, so a release in between is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Ok(hold) = self.try_take(folder, job) {
                return Ok(hold);
            }
            tokio::select! {
                () = released => {}
                reason = stop.raised() => return Err(reason),
            }
        }
    }
}

/// What a run needs to take its place: the job, how to say it waits, and the claims every
/// run of the process shares.
#[derive(Clone, Copy)]
pub struct Entry<'a> {
    pub claims: &'a Arc<FolderClaims>,
    pub client: &'a DeviceClient,
    pub job: &'a ClaimedJob,
    pub lease: &'a RunLease,
    pub stop: &'a RunStop,
    /// The agent's data dir, beside which worktrees go.
    pub data_dir: &'a Path,
}

/// Where a run works, held until it is dropped.
#[derive(Debug)]
pub struct Workplace {
    /// The folder the run is given: the shared one, or its worktree under the same label.
    pub folder: SharedFolder,
    pub worktree: Option<Worktree>,
    _hold: Option<FolderHold>,
}

/// How taking a place ended.
#[derive(Debug)]
pub enum Entered {
    Ready(Workplace),
    /// The run ends before its engine starts, with this completion.
    Ended(CompleteParams),
}

/// Takes the run's place in `folder` (the shared folder, which exists): the folder itself
/// when no other run holds it; else the job's own worktree when it asks for one and the
/// folder can have one; else the folder once it is free, waiting. A carry-on whose first
/// attempt made a worktree goes on in it.
///
/// # Errors
/// The reason the run was stopped while it waited, when it was not the owner's cancel.
pub async fn enter(entry: Entry<'_>, folder: &SharedFolder) -> Result<Entered, StopReason> {
    let claims = entry.claims;
    let wants_worktree = entry.job.spec.git.as_ref().filter(|git| git.worktree);
    let made_before = worktree_path(entry).is_dir();
    let holder = match claims.try_take(&folder.path, &entry.job.id) {
        Ok(hold) if !(made_before && wants_worktree.is_some()) => {
            return Ok(Entered::Ready(Workplace {
                folder: folder.clone(),
                worktree: None,
                _hold: Some(hold),
            }))
        }
        Ok(_) => None,
        Err(holder) => Some(holder),
    };
    if let Some(git) = wants_worktree {
        match open_worktree(entry, folder, git).await {
            Ok(Some(place)) => return Ok(Entered::Ready(place)),
            Ok(None) => {}
            Err(why) => {
                return Ok(Entered::Ended(blocked(format!(
                    "a worktree of the folder {:?} could not be made: {why}",
                    folder.label
                ))))
            }
        }
    }
    if let Some(holder) = holder {
        let status = format!(
            "waiting for the folder {}, used by job {holder}",
            folder.label
        );
        tracing::info!(job = %entry.job.id, "{status}");
        say(
            entry.client,
            entry.lease,
            entry.stop,
            Vec::new(),
            Some(status),
        )
        .await;
    }
    match claims.take(&folder.path, &entry.job.id, entry.stop).await {
        Ok(hold) => Ok(Entered::Ready(Workplace {
            folder: folder.clone(),
            worktree: None,
            _hold: Some(hold),
        })),
        Err(StopReason::Cancel) => Ok(Entered::Ended(cancelled_waiting(folder))),
        Err(reason) => Err(reason),
    }
}

/// Where the job's worktree is (or would be).
fn worktree_path(entry: Entry<'_>) -> PathBuf {
    worktree::root(entry.data_dir).join(entry.job.id.as_str())
}

impl Workplace {
    /// Ends the run's stay: a worktree is removed when nothing would be lost, else kept and
    /// the output says where. The shared folder is let go when this is dropped.
    pub async fn leave(self, entry: Entry<'_>) {
        let Some(worktree) = self.worktree.clone() else {
            return;
        };
        let settled = tokio::task::spawn_blocking(move || worktree.settle()).await;
        let Some(worktree) = &self.worktree else {
            return;
        };
        let line = match settled {
            Ok(Ok(Settled::Removed)) => format!(
                "the worktree {} was removed; the work is on the branch {}",
                worktree.path.display(),
                worktree.branch
            ),
            Ok(Ok(Settled::Kept(why))) => format!(
                "the worktree is kept at {} (branch {}): {why}",
                worktree.path.display(),
                worktree.branch
            ),
            Ok(Err(err)) => format!(
                "the worktree is kept at {} (branch {}): {err}",
                worktree.path.display(),
                worktree.branch
            ),
            Err(err) => format!("the worktree is kept at {}: {err}", worktree.path.display()),
        };
        tracing::info!(job = %entry.job.id, "{line}");
        say(entry.client, entry.lease, entry.stop, vec![line], None).await;
    }
}

/// The job's worktree of `folder`, made (or found again, for a carry-on) off the async
/// threads. `None` when the folder is not the top of a repository with a commit.
async fn open_worktree(
    entry: Entry<'_>,
    folder: &SharedFolder,
    git: &GitOptions,
) -> Result<Option<Workplace>, String> {
    let root = worktree::root(entry.data_dir);
    let path = worktree_path(entry);
    let branch = worktree::branch_for(&entry.job.id, git);
    tether_protocol::git::check_branch_name(&branch)
        .map_err(|err| format!("the branch name {branch:?} {}", err.0))?;
    let existing = matches!(git.branch, Some(BranchChoice::Existing(_)));
    let repository = folder.path.clone();
    let opened = tokio::task::spawn_blocking(move || {
        if !worktree::can_branch(&repository) {
            return Ok(None);
        }
        create_private_dir(&root)
            .map_err(|err| format!("cannot create {}: {err}", root.display()))?;
        let path = root
            .canonicalize()
            .map_err(|err| format!("{}: {err}", root.display()))?
            .join(path.file_name().unwrap_or_default());
        Worktree::open(&repository, &path, &branch, existing)
            .map(Some)
            .map_err(|err| err.to_string())
    })
    .await
    .map_err(|err| err.to_string())??;
    let Some(worktree) = opened else {
        tracing::info!(job = %entry.job.id, "the folder {:?} is not a repository with a commit: no worktree", folder.label);
        return Ok(None);
    };
    entry.lease.worktree(&folder.label, &worktree.path);
    let line = format!(
        "working in the worktree {} on the branch {}",
        worktree.path.display(),
        worktree.branch
    );
    say(entry.client, entry.lease, entry.stop, vec![line], None).await;
    Ok(Some(Workplace {
        folder: SharedFolder {
            label: folder.label.clone(),
            path: worktree.path.clone(),
        },
        worktree: Some(worktree),
        _hold: None,
    }))
}

fn cancelled_waiting(folder: &SharedFolder) -> CompleteParams {
    CompleteParams {
        outcome: Outcome::Cancelled,
        summary: format!("cancelled while waiting for the folder {}", folder.label),
        ..blocked(String::new())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn id(text: &str) -> JobId {
        JobId::parse(text).unwrap_or_else(|err| panic!("{err:?}"))
    }

    #[test]
    fn a_folder_is_held_by_one_job_at_a_time() {
        let claims = Arc::new(FolderClaims::default());
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        for dir in [&one, &two] {
            std::fs::create_dir(dir).unwrap_or_else(|err| panic!("{err}"));
        }
        let first = claims.try_take(&one, &id("a"));
        assert!(first.is_ok());
        // Spelled another way, it is the same folder.
        let same = one.join("../one");
        assert_eq!(claims.try_take(&same, &id("b")).err(), Some(id("a")));
        assert!(claims.try_take(&two, &id("b")).is_ok());
        drop(first);
        assert!(claims.try_take(&one, &id("b")).is_ok());
    }

    #[tokio::test]
    async fn a_waiting_run_starts_when_the_folder_is_let_go() {
        let claims = Arc::new(FolderClaims::default());
        let folder = PathBuf::from("/nonexistent/tether-test-folder");
        let first = claims.try_take(&folder, &id("a"));
        let waiter = {
            let claims = claims.clone();
            let folder = folder.clone();
            tokio::spawn(async move {
                let stop = RunStop::new();
                claims.take(&folder, &id("b"), &stop).await.map(|_| ())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(first);
        let taken = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert!(matches!(taken, Ok(Ok(Ok(())))), "{taken:?}");
    }

    #[tokio::test]
    async fn a_stop_ends_the_wait() {
        let claims = Arc::new(FolderClaims::default());
        let folder = PathBuf::from("/nonexistent/tether-test-folder");
        let _first = claims.try_take(&folder, &id("a"));
        let stop = RunStop::new();
        let second = id("b");
        let waiting = claims.take(&folder, &second, &stop);
        stop.raise(StopReason::Cancel);
        let ended = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(matches!(ended, Ok(Err(StopReason::Cancel))), "{ended:?}");
        // The folder is still the first job's.
        assert_eq!(claims.try_take(&folder, &id("c")).err(), Some(id("a")));
    }

    #[test]
    fn a_cancel_while_waiting_completes_cancelled() {
        let folder = SharedFolder {
            label: "app".into(),
            path: PathBuf::from("/w/app"),
        };
        let params = cancelled_waiting(&folder);
        assert_eq!(params.outcome, Outcome::Cancelled);
        assert_eq!(params.summary, "cancelled while waiting for the folder app");
    }
}
