//! A run's own git worktree: a second checkout of a shared repository, on its own branch,
//! beside the agent's data dir (`<data dir>-worktrees/<jobId>`), so runs in one repository
//! never change one checkout at the same time.
//!
//! Made and removed with the hardened runner ([`Git`]): `git worktree add` writes the
//! repository's refs (the new branch) and its `worktrees/` folder, nothing else of it. A
//! worktree is removed at the end only when nothing would be lost: no change left
//! uncommitted and its commits on a branch that still exists.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tether_protocol::git::{BranchChoice, GitOptions};
use tether_protocol::JobId;

use crate::changes::git::{Git, GitError, Limits};

/// Checking out and removing a large repository takes a while.
const CHECKOUT: Limits = Limits {
    timeout: Duration::from_secs(300),
    max_output: 1024 * 1024,
};

/// A worktree the agent made for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The worktree's folder: where the run works.
    pub path: PathBuf,
    /// The shared folder it is a worktree of.
    pub repository: PathBuf,
    /// The repository's git folder (objects, refs, configuration).
    pub common_dir: PathBuf,
    /// The worktree's own git folder (`<common>/worktrees/<name>`: HEAD, index).
    pub admin_dir: PathBuf,
    pub branch: String,
}

/// How a worktree ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Removed,
    /// Kept, and why.
    Kept(String),
}

/// Where the worktrees of the data dir `data_dir` go: beside it, as the guard keeps runs out
/// of the data dir itself.
pub fn root(data_dir: &Path) -> PathBuf {
    let mut name = data_dir.file_name().unwrap_or_default().to_os_string();
    name.push("-worktrees");
    data_dir.with_file_name(name)
}

/// The branch a job's worktree is on: the one its options name (new or existing), else
/// `tether/<the last 8 characters of its id>` (the random end of a UUID v7).
pub fn branch_for(job_id: &JobId, git: &GitOptions) -> String {
    match &git.branch {
        Some(BranchChoice::New(name) | BranchChoice::Existing(name)) => name.clone(),
        Some(BranchChoice::Current(_)) | None => {
            let id = job_id.as_str();
            let short = id.get(id.len().saturating_sub(8)..).unwrap_or(id);
            format!("tether/{short}")
        }
    }
}

/// Whether `folder` is the top of a git work tree whose HEAD is a commit: what a worktree
/// can be made of.
pub fn can_branch(folder: &Path) -> bool {
    let Ok(git) = Git::in_dir(folder) else {
        return false;
    };
    let top = git
        .run(&["rev-parse", "--show-toplevel"], Limits::QUICK)
        .ok()
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out).trim()));
    let has_commit = git
        .run(
            &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
            Limits::QUICK,
        )
        .is_ok();
    let canonical = folder.canonicalize().ok();
    has_commit && top.is_some_and(|top| top.canonicalize().ok() == canonical)
}

impl Worktree {
    /// The worktree of `repository` at `path` on `branch`: made (`git worktree add`, with
    /// `-b` unless `existing`), or taken as it is when an earlier attempt of the job made it.
    ///
    /// # Errors
    /// Any git failure (the branch is checked out elsewhere, it exists already, …).
    pub fn open(
        repository: &Path,
        path: &Path,
        branch: &str,
        existing: bool,
    ) -> Result<Worktree, GitError> {
        let git = Git::in_dir(repository)?;
        if !registered(&git, path)? {
            let target = path.to_string_lossy().into_owned();
            let args: Vec<&str> = if existing {
                vec!["worktree", "add", "--", &target, branch]
            } else {
                vec!["worktree", "add", "-b", branch, "--", &target, "HEAD"]
            };
            git.run(&args, CHECKOUT)?;
        }
        let common_dir = absolute_git_path(&git, "--git-common-dir")?;
        let admin_dir = absolute_git_path(&Git::in_dir(path)?, "--git-dir")?;
        Ok(Worktree {
            path: path.to_path_buf(),
            repository: repository.to_path_buf(),
            common_dir,
            admin_dir,
            branch: branch.to_owned(),
        })
    }

    /// What a run in the worktree may write outside it, for commits: the repository's
    /// objects, refs and their logs, and the worktree's own git folder.
    pub fn writable(&self) -> Vec<PathBuf> {
        vec![
            self.common_dir.join("objects"),
            self.common_dir.join("refs"),
            self.common_dir.join("logs"),
            self.admin_dir.clone(),
        ]
    }

    /// What it may read outside it: the repository's git folder (configuration, packed refs).
    pub fn readable(&self) -> Vec<PathBuf> {
        vec![self.common_dir.clone()]
    }

    /// Removes the worktree when nothing would be lost; keeps it otherwise.
    ///
    /// # Errors
    /// When git cannot tell (then the worktree stays).
    pub fn settle(&self) -> Result<Settled, GitError> {
        if !self.path.is_dir() {
            return Ok(Settled::Kept("it is gone".to_owned()));
        }
        let inside = Git::in_dir(&self.path)?;
        let status = inside.run(
            &[
                "status",
                "--porcelain",
                "--untracked-files=all",
                "--ignore-submodules=none",
            ],
            Limits::QUICK,
        )?;
        if !status.is_empty() {
            return Ok(Settled::Kept(
                "it has changes that are not committed".to_owned(),
            ));
        }
        let on_branch = inside
            .run(
                &[
                    "for-each-ref",
                    "--contains",
                    "HEAD",
                    "--format=%(refname)",
                    "refs/heads/",
                ],
                Limits::QUICK,
            )
            .is_ok_and(|refs| !refs.is_empty());
        if !on_branch {
            return Ok(Settled::Kept(
                "its commits are on no branch that still exists".to_owned(),
            ));
        }
        let target = self.path.to_string_lossy().into_owned();
        Git::in_dir(&self.repository)?.run(&["worktree", "remove", "--", &target], CHECKOUT)?;
        Ok(Settled::Removed)
    }
}

/// Whether `path` is a worktree of the repository already (an earlier attempt's).
fn registered(git: &Git, path: &Path) -> Result<bool, GitError> {
    let listing = git.run(&["worktree", "list", "--porcelain", "-z"], Limits::QUICK)?;
    let wanted = format!("worktree {}", path.display());
    Ok(listing
        .split(|byte| *byte == 0)
        .any(|line| line == wanted.as_bytes()))
}

fn absolute_git_path(git: &Git, which: &str) -> Result<PathBuf, GitError> {
    let out = git.run(
        &["rev-parse", "--path-format=absolute", which],
        Limits::QUICK,
    )?;
    let path = PathBuf::from(String::from_utf8_lossy(&out).trim());
    Ok(path.canonicalize().unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(status.success(), "git {args:?}");
    }

    fn repository(root: &Path) -> PathBuf {
        let repo = root.join("repo");
        std::fs::create_dir_all(&repo).unwrap_or_else(|err| panic!("{err}"));
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("a.txt"), "a\n").unwrap_or_else(|err| panic!("{err}"));
        git(&repo, &["add", "a.txt"]);
        git(&repo, &["commit", "-q", "-m", "first"]);
        repo
    }

    fn id(text: &str) -> JobId {
        JobId::parse(text).unwrap_or_else(|err| panic!("{err:?}"))
    }

    #[test]
    fn branches_and_roots_are_named_as_documented() {
        let options = |branch| GitOptions {
            delivery: tether_protocol::git::Delivery::Local,
            branch,
            base: None,
            merge: None,
            worktree: true,
        };
        let job = id("0190f0a1b2c37d4e8f9a0b1c2d3e4f5a");
        assert_eq!(branch_for(&job, &options(None)), "tether/2d3e4f5a");
        assert_eq!(
            branch_for(&job, &options(Some(BranchChoice::New("fix/x".into())))),
            "fix/x"
        );
        assert_eq!(
            root(Path::new("/home/me/.local/share/tether-agent")),
            PathBuf::from("/home/me/.local/share/tether-agent-worktrees")
        );
    }

    #[test]
    fn a_worktree_is_made_reused_and_removed_only_when_nothing_is_lost() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().canonicalize().unwrap_or_default();
        let repo = repository(&root);
        assert!(can_branch(&repo));
        assert!(!can_branch(&root));
        let path = root.join("worktrees/job1");
        let worktree = Worktree::open(&repo, &path, "tether/job1", false)
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(path.join("a.txt").is_file());
        assert_eq!(worktree.common_dir, repo.join(".git"));
        assert!(worktree.admin_dir.starts_with(repo.join(".git/worktrees")));
        // An earlier attempt's worktree is taken as it is.
        let again = Worktree::open(&repo, &path, "tether/job1", false)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(again, worktree);
        // Uncommitted work keeps it.
        std::fs::write(path.join("b.txt"), "b\n").unwrap_or_else(|err| panic!("{err}"));
        assert!(matches!(worktree.settle(), Ok(Settled::Kept(_))));
        git(&path, &["add", "b.txt"]);
        git(&path, &["commit", "-q", "-m", "second"]);
        assert_eq!(worktree.settle().ok(), Some(Settled::Removed));
        assert!(!path.exists());
        // The commit stays on its branch; the shared checkout never saw it.
        git(&repo, &["rev-parse", "--verify", "tether/job1"]);
        assert!(!repo.join("b.txt").exists());
    }

    #[test]
    fn commits_on_no_branch_keep_the_worktree() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().canonicalize().unwrap_or_default();
        let repo = repository(&root);
        let path = root.join("worktrees/job2");
        let worktree = Worktree::open(&repo, &path, "tether/job2", false)
            .unwrap_or_else(|err| panic!("{err}"));
        git(&path, &["checkout", "-q", "--detach"]);
        git(&path, &["commit", "-q", "--allow-empty", "-m", "loose"]);
        git(&repo, &["branch", "-D", "tether/job2"]);
        assert!(matches!(worktree.settle(), Ok(Settled::Kept(_))));
        assert!(path.is_dir());
    }
}
