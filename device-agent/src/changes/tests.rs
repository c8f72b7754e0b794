//! The wing end to end on real folders and real git repositories in temporary folders:
//! record a start, change the folder as a run would, report the changes, read one file's
//! start for a diff.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};
use tether_protocol::changes::{
    ChangeBaseKind, ChangeStatus, ChangedFile, Changes, FLAG_CREDENTIAL, FLAG_RUNS_LATER,
    MAX_CHANGED_FILES,
};
use tether_protocol::jobs::{ClaimedJob, Mode};
use tether_protocol::JobId;

use super::diff::{plan, unified, Plan, Side};
use super::*;

// Each test module that needs it includes it: the library has no test support of its own.
#[allow(clippy::duplicate_mod)]
#[path = "../../../server/tests/support/external.rs"]
mod external;

/// A data dir, a folder to work in and a job.
struct Rig {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    work: PathBuf,
    job: ClaimedJob,
}

fn rig() -> Result<Rig> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("agent");
    let work = tmp.path().join("work");
    fs::create_dir_all(&work)?;
    let job = crate::test_job::claimed_job("tests", Mode::Unattended);
    Ok(Rig {
        _tmp: tmp,
        data,
        work,
        job,
    })
}

impl Rig {
    fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> Result<()> {
        write(&self.work, rel, bytes)
    }

    fn start(&self) -> Result<()> {
        record_start(&self.data, &self.job, &self.work)
    }

    fn report(&self) -> Result<Changes> {
        match report(&self.data, &self.job.id, &self.work, &[])? {
            Some(changes) => Ok(changes),
            None => bail!("no start recorded"),
        }
    }

    fn before(&self, path: &str) -> Result<Side> {
        let Some(recorded) = Recorded::load(&self.data, &self.job.id)? else {
            bail!("no start recorded");
        };
        Ok(recorded.before(path, None)?)
    }

    /// The diff text of `path`, as the file view's diff would make it (unredacted).
    fn diff(&self, path: &str) -> Result<String> {
        let before = self.before(path)?;
        let abs = manifest::join(&self.work, path);
        let now = match fs::read(&abs) {
            Ok(bytes) => Side::Bytes(bytes),
            Err(_) => Side::Absent,
        };
        Ok(match plan(path, before, now, || None) {
            Plan::Same => String::new(),
            Plan::Note(note) => note,
            Plan::Text { old, new } => unified(path, old.as_deref(), new.as_deref(), None).text,
        })
    }
}

fn write(root: &Path, rel: &str, bytes: impl AsRef<[u8]>) -> Result<()> {
    let path = manifest::join(root, rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, bytes)?;
    Ok(())
}

/// `git ARGS` in `dir` as a person runs it, away from this machine's own configuration.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("git")
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()?;
    if !output.status.success() {
        bail!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Lines of a numbered text file.
fn lines(count: usize, word: &str) -> String {
    (1..=count).map(|n| format!("{word} line {n}\n")).collect()
}

fn by_path<'a>(changes: &'a Changes, path: &str) -> Option<&'a ChangedFile> {
    changes.files.iter().find(|file| file.path == path)
}

fn summary(changes: &Changes) -> Vec<(String, ChangeStatus, Option<String>, u64, u64, bool)> {
    changes
        .files
        .iter()
        .map(|f| {
            (
                f.path.clone(),
                f.status,
                f.from.clone(),
                f.additions,
                f.deletions,
                f.binary,
            )
        })
        .collect()
}

fn entry(
    path: &str,
    status: ChangeStatus,
    from: Option<&str>,
    additions: u64,
    deletions: u64,
    binary: bool,
) -> (String, ChangeStatus, Option<String>, u64, u64, bool) {
    (
        path.to_owned(),
        status,
        from.map(str::to_owned),
        additions,
        deletions,
        binary,
    )
}

/// A repository with a commit, then changes nobody committed: the run's start.
fn dirty_repository(rig: &Rig) -> Result<String> {
    git(&rig.work, &["init", "-q"])?;
    rig.write("edited.txt", lines(5, "edited"))?;
    rig.write("deleted.txt", lines(2, "deleted"))?;
    rig.write("old-name.txt", lines(20, "moved"))?;
    rig.write("dirty.txt", lines(3, "dirty"))?;
    rig.write("package.json", "{\"name\": \"x\"}\n")?;
    rig.write(".gitignore", "*.log\n")?;
    git(&rig.work, &["add", "-A"])?;
    git(&rig.work, &["commit", "-q", "-m", "first"])?;
    let head = git(&rig.work, &["rev-parse", "HEAD"])?;
    // Uncommitted work of the owner's, before the run.
    rig.write("dirty.txt", lines(4, "dirty"))?;
    rig.write("untracked.txt", "mine\n")?;
    rig.write("staged.txt", "staged\n")?;
    git(&rig.work, &["add", "staged.txt"])?;
    Ok(head)
}

#[test]
fn a_dirty_repository_reports_only_what_the_run_changed() -> Result<()> {
    if !external::git() {
        return Ok(());
    }
    let rig = rig()?;
    let head = dirty_repository(&rig)?;
    let index_before = fs::read(rig.work.join(".git/index"))?;
    let refs_before = git(&rig.work, &["show-ref"])?;
    rig.start()?;
    assert_eq!(fs::read(rig.work.join(".git/index"))?, index_before);

    // The run: edit, add, delete, rename, a binary file, an ignored file, flagged files.
    let mut edited = lines(5, "edited");
    edited = edited.replace("edited line 3\n", "edited line three\n");
    edited.push_str("one more\n");
    rig.write("edited.txt", &edited)?;
    rig.write("src/new.rs", "fn new() {}\n")?;
    fs::remove_file(rig.work.join("deleted.txt"))?;
    fs::rename(rig.work.join("old-name.txt"), rig.work.join("new-name.txt"))?;
    rig.write("image.bin", b"\0\x01\x02\x03")?;
    rig.write("build.log", "ignored\n")?;
    rig.write(
        "package.json",
        "{\"name\": \"x\", \"scripts\": {\"postinstall\": \"x\"}}\n",
    )?;
    rig.write(".envrc", "export A=1\n")?;

    let changes = rig.report()?;
    assert_eq!(changes.check(), Ok(()));
    assert_eq!(changes.base.kind, ChangeBaseKind::Git);
    assert_eq!(changes.base.head.as_deref(), Some(head.as_str()));
    assert_eq!(
        summary(&changes),
        [
            entry(".envrc", ChangeStatus::Added, None, 1, 0, false),
            entry("deleted.txt", ChangeStatus::Deleted, None, 0, 2, false),
            entry("edited.txt", ChangeStatus::Modified, None, 2, 1, false),
            entry("image.bin", ChangeStatus::Added, None, 0, 0, true),
            entry(
                "new-name.txt",
                ChangeStatus::Renamed,
                Some("old-name.txt"),
                0,
                0,
                false
            ),
            entry("package.json", ChangeStatus::Modified, None, 1, 1, false),
            entry("src/new.rs", ChangeStatus::Added, None, 1, 0, false),
        ]
    );
    let flags = |path: &str| by_path(&changes, path).map(|file| file.flags.clone());
    assert_eq!(
        flags(".envrc"),
        Some(vec![FLAG_RUNS_LATER.to_owned(), FLAG_CREDENTIAL.to_owned()])
    );
    assert_eq!(
        flags("package.json"),
        Some(vec![FLAG_RUNS_LATER.to_owned()])
    );
    assert_eq!(flags("edited.txt"), Some(Vec::new()));
    assert_eq!(changes.totals.files, 7);
    assert_eq!(changes.totals.additions, 5);
    assert_eq!(changes.totals.deletions, 4);
    assert!(!changes.truncated);

    // The owner's index, refs and dirty work are as they were.
    assert_eq!(fs::read(rig.work.join(".git/index"))?, index_before);
    assert_eq!(git(&rig.work, &["show-ref"])?, refs_before);
    let status = git(&rig.work, &["status", "--porcelain"])?;
    assert!(status.contains("A  staged.txt"), "{status}");

    // Diffs against the start.
    assert_eq!(
        rig.diff("edited.txt")?,
        concat!(
            "--- a/edited.txt\n+++ b/edited.txt\n@@ -1,5 +1,6 @@\n",
            " edited line 1\n edited line 2\n-edited line 3\n+edited line three\n",
            " edited line 4\n edited line 5\n+one more\n"
        )
    );
    assert_eq!(
        rig.diff("dirty.txt")?,
        "",
        "the owner's own change is no part of it"
    );
    assert!(rig
        .diff("deleted.txt")?
        .starts_with("--- a/deleted.txt\n+++ /dev/null\n"));
    assert!(rig
        .diff("src/new.rs")?
        .starts_with("--- /dev/null\n+++ b/src/new.rs\n"));
    assert_eq!(rig.diff("image.bin")?, "Binary file image.bin differs\n");
    assert!(matches!(
        rig.before("build.log"),
        Err(err) if err.to_string().contains("git ignores")
    ));
    assert!(matches!(rig.before("src/new.rs")?, Side::Absent));

    // Put back as it was: changed by the run, unchanged now.
    rig.write("edited.txt", lines(5, "edited"))?;
    assert_eq!(rig.diff("edited.txt")?, "");
    Ok(())
}

#[test]
fn a_repository_whose_configuration_names_programs_runs_none_of_them() -> Result<()> {
    if !external::git() {
        return Ok(());
    }
    let rig = rig()?;
    git(&rig.work, &["init", "-q"])?;
    rig.write("notes.txt", lines(3, "note"))?;
    rig.write("kept.txt", "kept\n")?;
    git(&rig.work, &["add", "-A"])?;
    git(&rig.work, &["commit", "-q", "-m", "first"])?;

    let marker = rig
        .work
        .parent()
        .map_or_else(PathBuf::new, |p| p.join("MARKER"));
    let touch = format!("touch {}", marker.display());
    let program = |name: &str| -> Result<String> {
        let path = rig
            .work
            .parent()
            .map_or_else(PathBuf::new, |p| p.join(name));
        fs::write(&path, format!("#!/bin/sh\n{touch}\ncat\n"))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        }
        Ok(path.display().to_string())
    };
    let evil = program("evil.sh")?;
    let mut config = fs::read_to_string(rig.work.join(".git/config"))?;
    config.push_str(&format!(
        concat!(
            "[core]\n\tfsmonitor = {evil}\n\tpager = {evil}\n\thooksPath = .git/hooks\n",
            "\tsshCommand = {evil}\n",
            "[filter \"evil\"]\n\tclean = {evil}\n\tsmudge = {evil}\n\trequired = true\n",
            "[filter \"proc\"]\n\tprocess = {evil}\n",
            "[diff \"evil\"]\n\ttextconv = {evil}\n\tcommand = {evil}\n",
            "[diff]\n\texternal = {evil}\n",
            "[include]\n\tpath = {included}\n",
        ),
        evil = evil,
        included = rig.work.join(".git/more-config").display(),
    ));
    fs::write(rig.work.join(".git/config"), config)?;
    fs::write(
        rig.work.join(".git/more-config"),
        format!("[filter \"inc\"]\n\tclean = {evil}\n"),
    )?;
    fs::create_dir_all(rig.work.join(".git/info"))?;
    fs::write(
        rig.work.join(".git/info/attributes"),
        "* filter=evil diff=evil\n*.txt filter=proc\nkept.txt filter=inc\n",
    )?;
    rig.write(".gitattributes", "* filter=evil diff=evil\n")?;
    let hooks = [
        "post-index-change",
        "pre-commit",
        "post-checkout",
        "reference-transaction",
        "fsmonitor-watchman",
    ];
    for hook in hooks {
        let path = rig.work.join(".git/hooks").join(hook);
        fs::create_dir_all(rig.work.join(".git/hooks"))?;
        fs::write(&path, format!("#!/bin/sh\n{touch}\n"))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        }
    }
    // The programs do run, as the repository asks, for git as a person runs it.
    let probe_index = rig
        .work
        .parent()
        .map_or_else(PathBuf::new, |p| p.join("probe-index"));
    Command::new("git")
        .current_dir(&rig.work)
        .env("GIT_INDEX_FILE", &probe_index)
        .args(["add", "-A"])
        .output()?;
    assert!(
        marker.exists(),
        "the hostile repository must be able to run its programs"
    );
    fs::remove_file(&marker)?;

    rig.start()?;
    rig.write("notes.txt", lines(4, "note"))?;
    rig.write("added.txt", "new\n")?;
    let changes = rig.report()?;
    let paths: Vec<&str> = changes
        .files
        .iter()
        .map(|file| file.path.as_str())
        .collect();
    assert_eq!(paths, ["added.txt", "notes.txt"]);
    assert_eq!(
        by_path(&changes, "notes.txt").map(|file| (file.additions, file.deletions)),
        Some((1, 0))
    );
    assert!(rig.diff("notes.txt")?.contains("+note line 4\n"));
    assert!(matches!(rig.before("kept.txt")?, Side::Bytes(bytes) if bytes == b"kept\n"));
    assert!(!marker.exists(), "a program of the repository ran");
    Ok(())
}

#[test]
fn a_folder_inside_a_repository_is_its_own_subtree() -> Result<()> {
    if !external::git() {
        return Ok(());
    }
    let rig = rig()?;
    git(&rig.work, &["init", "-q"])?;
    rig.write("outside.txt", "x\n")?;
    rig.write("app/inside.txt", "a\n")?;
    git(&rig.work, &["add", "-A"])?;
    git(&rig.work, &["commit", "-q", "-m", "first"])?;
    let mut inner = rig;
    inner.work = inner.work.join("app");
    inner.start()?;
    inner.write("inside.txt", "a\nb\n")?;
    inner.write("more/new.txt", "n\n")?;
    write(&inner.work.join(".."), "outside.txt", "changed\n")?;
    let changes = inner.report()?;
    let paths: Vec<&str> = changes
        .files
        .iter()
        .map(|file| file.path.as_str())
        .collect();
    assert_eq!(paths, ["inside.txt", "more/new.txt"]);
    assert!(inner.diff("inside.txt")?.contains("+b\n"));

    // A folder that held nothing at the start.
    inner.work = inner.work.join("..").join("empty");
    fs::create_dir_all(&inner.work)?;
    inner.job.id = JobId::parse("job2")?;
    inner.start()?;
    inner.write("first.txt", "1\n")?;
    let changes = inner.report()?;
    assert_eq!(changes.files.len(), 1);
    assert_eq!(changes.files[0].status, ChangeStatus::Added);
    Ok(())
}

#[test]
fn repositories_the_run_made_show_their_files_that_run_later() -> Result<()> {
    if !external::git() {
        return Ok(());
    }
    let rig = rig()?;
    git(&rig.work, &["init", "-q"])?;
    rig.write("README.md", "hi\n")?;
    git(&rig.work, &["add", "-A"])?;
    git(&rig.work, &["commit", "-q", "-m", "first"])?;
    rig.start()?;

    // A clone with a commit (a gitlink), and a fresh repository without one.
    let cloned = rig.work.join("cloned");
    fs::create_dir_all(&cloned)?;
    git(&cloned, &["init", "-q"])?;
    write(&cloned, "package.json", "{}\n")?;
    write(&cloned, "src/lib.rs", "\n")?;
    git(&cloned, &["add", "-A"])?;
    git(&cloned, &["commit", "-q", "-m", "c"])?;
    write(&cloned, ".git/hooks/post-checkout", "#!/bin/sh\n")?;
    let fresh = rig.work.join("fresh");
    fs::create_dir_all(&fresh)?;
    git(&fresh, &["init", "-q"])?;
    write(&fresh, "Makefile", "all:\n")?;
    write(&fresh, "notes.txt", "n\n")?;

    let changes = rig.report()?;
    assert_eq!(changes.check(), Ok(()));
    let flagged: Vec<(&str, ChangeStatus)> = changes
        .files
        .iter()
        .filter(|file| file.flags.iter().any(|flag| flag == FLAG_RUNS_LATER))
        .map(|file| (file.path.as_str(), file.status))
        .collect();
    assert_eq!(
        flagged,
        [
            ("cloned/.git/config", ChangeStatus::Added),
            ("cloned/.git/hooks/post-checkout", ChangeStatus::Added),
            ("cloned/package.json", ChangeStatus::Added),
            ("fresh/.git/config", ChangeStatus::Added),
            ("fresh/Makefile", ChangeStatus::Added),
        ]
    );
    assert!(by_path(&changes, "cloned").is_some(), "the gitlink itself");
    assert!(rig.diff("cloned/package.json")?.contains("+{}\n"));

    // A hook added to a repository that was there at the start shows too.
    let rig2 = self::rig()?;
    git(&rig2.work, &["init", "-q"])?;
    let lib = rig2.work.join("lib");
    fs::create_dir_all(&lib)?;
    git(&lib, &["init", "-q"])?;
    write(&lib, "x.txt", "x\n")?;
    git(&lib, &["add", "-A"])?;
    git(&lib, &["commit", "-q", "-m", "c"])?;
    rig2.start()?;
    write(&lib, ".git/hooks/pre-push", "#!/bin/sh\n")?;
    write(
        &lib,
        "x.txt",
        "changed, not listed: inside a nested repository\n",
    )?;
    let changes = rig2.report()?;
    let paths: Vec<&str> = changes
        .files
        .iter()
        .map(|file| file.path.as_str())
        .collect();
    assert_eq!(paths, ["lib/.git/hooks/pre-push"]);
    assert!(matches!(
        rig2.before("lib/x.txt"),
        Err(err) if err.to_string().contains("nested repository")
    ));
    Ok(())
}

#[test]
fn a_folder_outside_git_is_compared_with_its_manifest() -> Result<()> {
    let rig = rig()?;
    rig.write("edited.txt", lines(5, "edited"))?;
    rig.write("deleted.txt", lines(2, "deleted"))?;
    rig.write("old-name.txt", lines(20, "moved"))?;
    rig.write("same.txt", "same\n")?;
    rig.write("node_modules/dep/package.json", "{}\n")?;
    rig.write("big.txt", lines(30_000, "big"))?;
    rig.write("image.bin", b"\0\x01")?;
    rig.write("clone/.git/config", "[core]\n")?;
    rig.write("clone/.git/objects/aa", "blob")?;
    rig.start()?;

    rig.write("edited.txt", lines(6, "edited"))?;
    fs::remove_file(rig.work.join("deleted.txt"))?;
    fs::rename(rig.work.join("old-name.txt"), rig.work.join("new-name.txt"))?;
    rig.write("added.txt", "a\nb\n")?;
    rig.write("node_modules/dep/package.json", "{\"scripts\": {}}\n")?;
    rig.write("big.txt", lines(30_001, "big"))?;
    rig.write("image.bin", b"\0\x02")?;
    rig.write("clone/.git/hooks/pre-commit", "#!/bin/sh\n")?;
    rig.write("clone/.git/objects/bb", "blob")?;
    rig.write(".husky/pre-push", "npm test\n")?;

    let changes = rig.report()?;
    assert_eq!(changes.check(), Ok(()));
    assert_eq!(changes.base.kind, ChangeBaseKind::Snapshot);
    assert_eq!(changes.base.head, None);
    assert_eq!(
        summary(&changes),
        [
            entry(".husky/pre-push", ChangeStatus::Added, None, 1, 0, false),
            entry("added.txt", ChangeStatus::Added, None, 2, 0, false),
            entry("big.txt", ChangeStatus::Modified, None, 0, 0, true),
            entry(
                "clone/.git/hooks/pre-commit",
                ChangeStatus::Added,
                None,
                1,
                0,
                false
            ),
            entry("deleted.txt", ChangeStatus::Deleted, None, 0, 2, false),
            entry("edited.txt", ChangeStatus::Modified, None, 1, 0, false),
            entry("image.bin", ChangeStatus::Modified, None, 0, 0, true),
            entry(
                "new-name.txt",
                ChangeStatus::Renamed,
                Some("old-name.txt"),
                0,
                0,
                false
            ),
        ]
    );
    assert!(rig.diff("edited.txt")?.ends_with("+edited line 6\n"));
    assert!(rig
        .diff("deleted.txt")?
        .starts_with("--- a/deleted.txt\n+++ /dev/null\n"));
    assert_eq!(rig.diff("same.txt")?, "");
    assert!(rig.diff("big.txt")?.contains("was not kept"));
    assert!(matches!(
        rig.before("node_modules/dep/package.json"),
        Err(err) if err.to_string().contains("node_modules")
    ));
    Ok(())
}

#[test]
fn a_resumed_attempt_keeps_the_first_start() -> Result<()> {
    let mut rig = rig()?;
    rig.write("a.txt", "first\n")?;
    rig.start()?;
    rig.write("a.txt", "second\n")?;
    rig.job.resumed = Some(1);
    rig.job.attempt = 2;
    rig.start()?;
    let changes = rig.report()?;
    assert_eq!(
        changes.files.len(),
        1,
        "measured from the job's first start"
    );
    // A fresh (not resumed) claim starts over.
    rig.job.resumed = None;
    rig.start()?;
    assert!(rig.report()?.files.is_empty());
    Ok(())
}

#[test]
fn a_long_list_is_cut_and_its_totals_complete() -> Result<()> {
    let rig = rig()?;
    rig.start()?;
    for index in 0..MAX_CHANGED_FILES + 5 {
        rig.write(&format!("many/{index:05}.txt"), "x\n")?;
    }
    let changes = rig.report()?;
    assert_eq!(changes.check(), Ok(()));
    assert_eq!(changes.files.len(), MAX_CHANGED_FILES);
    assert_eq!(changes.totals.files, MAX_CHANGED_FILES as u64 + 5);
    assert_eq!(changes.totals.additions, MAX_CHANGED_FILES as u64 + 5);
    assert!(changes.truncated);
    assert_eq!(changes.files[0].path, "many/00000.txt");
    Ok(())
}

#[test]
fn saved_values_are_hidden_in_paths() -> Result<()> {
    let rig = rig()?;
    rig.start()?;
    rig.write("out-s3cr3t-value.txt", "x\n")?;
    let hidden = vec!["s3cr3t-value".to_owned()];
    let changes = report(&rig.data, &rig.job.id, &rig.work, &hidden)?;
    let paths: Vec<String> = changes
        .map(|changes| changes.files.into_iter().map(|file| file.path).collect())
        .unwrap_or_default();
    assert_eq!(paths, ["out-[hidden].txt"]);
    Ok(())
}

#[test]
fn no_start_means_no_changes_and_another_folder_is_refused() -> Result<()> {
    let rig = rig()?;
    assert_eq!(report(&rig.data, &rig.job.id, &rig.work, &[])?, None);
    rig.start()?;
    let elsewhere = rig.work.with_file_name("elsewhere");
    fs::create_dir_all(&elsewhere)?;
    assert!(report(&rig.data, &rig.job.id, &elsewhere, &[]).is_err());
    Ok(())
}

/// The diff a finished job's page shows for `path`, as the agent answers it: the run's start
/// against its recorded end, or (no end recorded) against the folder now.
fn job_diff(data: &Path, job_id: &JobId, work: &Path, path: &str) -> Result<String> {
    let Some(recorded) = Recorded::load(data, job_id)? else {
        bail!("no start recorded");
    };
    let (before, after) = match recorded.ended(path, None)? {
        Some(Ended::Same) => return Ok(String::new()),
        Some(Ended::Sides { before, after }) => (before, after),
        None => (recorded.before(path, None)?, now_side(work, path)),
    };
    Ok(plan_text(path, before, after))
}

/// The same file's start against the folder now ("compare with the folder now").
fn now_diff(data: &Path, job_id: &JobId, work: &Path, path: &str) -> Result<String> {
    let Some(recorded) = Recorded::load(data, job_id)? else {
        bail!("no start recorded");
    };
    Ok(plan_text(
        path,
        recorded.before(path, None)?,
        now_side(work, path),
    ))
}

fn now_side(work: &Path, path: &str) -> Side {
    match fs::read(manifest::join(work, path)) {
        Ok(bytes) => Side::Bytes(bytes),
        Err(_) => Side::Absent,
    }
}

fn plan_text(path: &str, before: Side, after: Side) -> String {
    match plan(path, before, after, || None) {
        Plan::Same => String::new(),
        Plan::Note(note) => note,
        Plan::Text { old, new } => unified(path, old.as_deref(), new.as_deref(), None).text,
    }
}

/// Lines a diff adds and deletes (its `+++`/`---` headers left out).
fn added_and_deleted(diff: &str) -> (Vec<&str>, Vec<&str>) {
    let body = diff
        .lines()
        .filter(|line| !line.starts_with("+++ ") && !line.starts_with("--- "));
    let (added, deleted): (Vec<&str>, Vec<&str>) = body
        .filter(|line| line.starts_with('+') || line.starts_with('-'))
        .partition(|line| line.starts_with('+'));
    (added, deleted)
}

/// A second job on the rig's folder, started after the first ended.
fn later_job(rig: &Rig) -> ClaimedJob {
    let mut job = crate::test_job::claimed_job("tests", Mode::Unattended);
    if job.id == rig.job.id {
        job.id = JobId::generate();
    }
    job
}

/// Issue 26, defect 1: a job's diff is its run's start against its run's end. Later jobs'
/// edits, a commit of them and `git gc --prune=now --aggressive` in the repository change
/// nothing of it; the comparison with the folder now shows the folder now.
#[test]
fn an_older_jobs_diff_shows_its_own_work_after_later_jobs_a_commit_and_a_gc() -> Result<()> {
    if !external::git() {
        return Ok(());
    }
    let rig = rig()?;
    git(&rig.work, &["init", "-q"])?;
    rig.write("README.md", lines(3, "readme"))?;
    rig.write("src/lib.rs", "pub fn lib() {}\n")?;
    git(&rig.work, &["add", "-A"])?;
    git(&rig.work, &["commit", "-q", "-m", "first"])?;
    // The owner's staged line: its blob is only in the repository's index, and no commit
    // will hold it.
    let staged = lines(3, "readme") + "the owner's staged line\n";
    rig.write("README.md", &staged)?;
    git(&rig.work, &["add", "README.md"])?;
    let staged_blob = git(&rig.work, &["rev-parse", ":README.md"])?;
    let objects_before = git(&rig.work, &["count-objects", "-v"])?;

    // Job A adds two lines and a file nobody commits.
    rig.start()?;
    rig.write("README.md", staged.clone() + "run line 1\nrun line 2\n")?;
    rig.write("notes/a.txt", "from job a\n")?;
    let changes = rig.report()?;
    assert_eq!(
        summary(&changes),
        [
            entry("README.md", ChangeStatus::Modified, None, 2, 0, false),
            entry("notes/a.txt", ChangeStatus::Added, None, 1, 0, false),
        ]
    );
    let readme = job_diff(&rig.data, &rig.job.id, &rig.work, "README.md")?;
    assert_eq!(
        added_and_deleted(&readme),
        (vec!["+run line 1", "+run line 2"], vec![])
    );
    let notes = job_diff(&rig.data, &rig.job.id, &rig.work, "notes/a.txt")?;
    // Nothing of it landed in the owner's repository.
    assert_eq!(git(&rig.work, &["count-objects", "-v"])?, objects_before);

    // Job B, later: more lines, another file, A's file deleted; then a commit and a gc,
    // which prunes the owner's staged blob A's start holds.
    let job_b = later_job(&rig);
    record_start(&rig.data, &job_b, &rig.work)?;
    rig.write("README.md", lines(20, "readme"))?;
    rig.write("src/lib.rs", "pub fn lib() { todo!() }\n")?;
    fs::remove_file(rig.work.join("notes/a.txt"))?;
    let b_changes = report(&rig.data, &job_b.id, &rig.work, &[])?;
    assert_eq!(b_changes.map(|changes| changes.files.len()), Some(3));
    git(&rig.work, &["add", "-A"])?;
    git(&rig.work, &["commit", "-q", "-m", "later"])?;
    git(&rig.work, &["reflog", "expire", "--expire=now", "--all"])?;
    git(&rig.work, &["gc", "-q", "--prune=now", "--aggressive"])?;
    rig.write("README.md", lines(21, "readme"))?;

    // A's diffs are what they were: exactly its two lines, its file, nothing of B's.
    assert_eq!(
        job_diff(&rig.data, &rig.job.id, &rig.work, "README.md")?,
        readme
    );
    assert_eq!(
        job_diff(&rig.data, &rig.job.id, &rig.work, "notes/a.txt")?,
        notes
    );
    assert!(
        notes.starts_with("--- /dev/null\n+++ b/notes/a.txt\n"),
        "{notes}"
    );
    assert_eq!(
        job_diff(&rig.data, &rig.job.id, &rig.work, "src/lib.rs")?,
        "",
        "B's edit is no part of A's diff"
    );
    // B's own diff: its lines only.
    let b_readme = job_diff(&rig.data, &job_b.id, &rig.work, "README.md")?;
    assert_eq!(added_and_deleted(&b_readme).0.len(), 17, "{b_readme}");

    assert!(
        git(&rig.work, &["cat-file", "-e", &staged_blob]).is_err(),
        "the gc pruned the staged blob"
    );

    // Compared with the folder now: everything since A's start.
    let now = now_diff(&rig.data, &rig.job.id, &rig.work, "README.md")?;
    assert_eq!(added_and_deleted(&now).0.len(), 18, "{now}");
    assert!(now.contains("+readme line 21\n"), "{now}");
    assert!(now_diff(&rig.data, &rig.job.id, &rig.work, "src/lib.rs")?.contains("todo!()"));
    Ok(())
}

/// The same for a folder that is not a repository: the end's copies, beside the start's,
/// within the same bounds (a text file past them says its end was not kept).
#[test]
fn an_older_jobs_diff_in_a_plain_folder_reads_its_end_copies() -> Result<()> {
    let rig = rig()?;
    rig.write("notes.txt", lines(3, "note"))?;
    rig.write("same.txt", "same\n")?;
    rig.start()?;
    rig.write("notes.txt", lines(5, "note"))?;
    rig.write("big.txt", "x".repeat(300 * 1024))?;
    let changes = rig.report()?;
    assert_eq!(
        by_path(&changes, "notes.txt").map(|file| (file.additions, file.deletions)),
        Some((2, 0))
    );
    let notes = job_diff(&rig.data, &rig.job.id, &rig.work, "notes.txt")?;
    assert_eq!(
        added_and_deleted(&notes),
        (vec!["+note line 4", "+note line 5"], vec![])
    );
    assert_eq!(
        job_diff(&rig.data, &rig.job.id, &rig.work, "big.txt")?,
        "big.txt changed; its text at the run's end was not kept (larger than 256 KiB)\n"
    );

    let job_b = later_job(&rig);
    record_start(&rig.data, &job_b, &rig.work)?;
    rig.write("notes.txt", lines(9, "note"))?;
    rig.write("same.txt", "changed later\n")?;
    report(&rig.data, &job_b.id, &rig.work, &[])?;
    rig.write("notes.txt", lines(10, "note"))?;

    assert_eq!(
        job_diff(&rig.data, &rig.job.id, &rig.work, "notes.txt")?,
        notes
    );
    assert_eq!(job_diff(&rig.data, &rig.job.id, &rig.work, "same.txt")?, "");
    let now = now_diff(&rig.data, &rig.job.id, &rig.work, "notes.txt")?;
    assert_eq!(added_and_deleted(&now).0.len(), 7, "{now}");
    assert!(now_diff(&rig.data, &rig.job.id, &rig.work, "same.txt")?.contains("+changed later\n"));
    Ok(())
}

/// A resumed attempt runs on: the end its earlier attempt recorded no longer answers.
#[test]
fn a_resumed_attempt_drops_the_earlier_end() -> Result<()> {
    let mut rig = rig()?;
    rig.write("a.txt", "first\n")?;
    rig.start()?;
    rig.write("a.txt", "second\n")?;
    rig.report()?;
    assert!(Recorded::load(&rig.data, &rig.job.id)?.is_some_and(|r| r.has_end()));
    rig.job.resumed = Some(1);
    rig.start()?;
    assert!(Recorded::load(&rig.data, &rig.job.id)?.is_some_and(|r| !r.has_end()));
    Ok(())
}
