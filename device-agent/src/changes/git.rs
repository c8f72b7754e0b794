//! Tether's own git: every git command the agent runs goes through [`Git`], which never lets
//! a repository's configuration or attributes start a program.
//!
//! The agent runs git in folders a job has worked in, so everything a repository can say
//! about which programs git starts is hostile until proven otherwise. Each command gets:
//!
//! - a clean environment: only `PATH` (its absolute entries), `LANG=C`, `LC_ALL=C`,
//!   `HOME=/nonexistent`, `GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`,
//!   `GIT_TERMINAL_PROMPT=0`, `GIT_OPTIONAL_LOCKS=0`, `GIT_NO_REPLACE_OBJECTS=1`,
//!   `GIT_LITERAL_PATHSPECS=1`, an empty `GIT_PROXY_COMMAND`, plus what the caller sets on
//!   purpose (an index file, the agent's own object store); never the caller's `GIT_DIR` or
//!   other `GIT_*`;
//! - `--no-pager`, and `-c` values that turn off each program git could take from
//!   configuration: hooks, fsmonitor, the pager, external diffs, credential helpers, askpass,
//!   ssh commands, the `ext::` transport;
//! - `--attr-source` set to the empty tree and `core.attributesFile=/dev/null`, so no
//!   `.gitattributes` can select a filter or a diff driver;
//! - because `$GIT_DIR/info/attributes` is still read, every `filter.<name>.*`,
//!   `diff.<name>.*` and `merge.<name>.*` driver the repository's configuration (with its
//!   includes) defines is overridden with an empty program (filters also `required=false`),
//!   read again right before each command;
//! - the git found in an absolute `PATH` entry, never one in the folder, with no stdin (but
//!   the list of objects the agent gives `pack-objects`), a timeout and a bound on what it
//!   may print.
//!
//! Diff commands also take `--no-textconv --no-ext-diff` ([`DIFF_SAFETY`]).

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The empty tree of a SHA-1 repository: the attribute source, so no tree's
/// `.gitattributes` is read.
pub const EMPTY_TREE_SHA1: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
/// The empty tree of a SHA-256 repository.
pub const EMPTY_TREE_SHA256: &str =
    "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321";
/// What every diff command adds: no textconv programs, no external diff.
pub const DIFF_SAFETY: [&str; 2] = ["--no-textconv", "--no-ext-diff"];
/// Most bytes of stderr kept for an error message.
const MAX_STDERR_BYTES: usize = 16 * 1024;

/// Configuration set on every command, each a program (or a way to one) turned off.
const FIXED_CONFIG: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.splitIndex", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.pager", "cat"),
    ("core.askPass", ""),
    ("core.sshCommand", ""),
    ("core.alternateRefsCommand", ""),
    ("diff.external", ""),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("submodule.recurse", "false"),
    ("advice.addEmbeddedRepo", "false"),
];

/// How long a command may take and how much it may print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout: Duration,
    pub max_output: usize,
}

impl Limits {
    /// For commands that read a little: a config listing, a commit id.
    pub const QUICK: Limits = Limits {
        timeout: Duration::from_secs(20),
        max_output: 1024 * 1024,
    };
}

/// Why a git command gave nothing usable.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git is not installed here (no `git` in an absolute PATH entry)")]
    Missing,
    #[error("git could not be started: {0}")]
    Spawn(#[source] io::Error),
    #[error("git {command} took longer than {}s", timeout.as_secs_f32())]
    TimedOut { command: String, timeout: Duration },
    #[error("git {command} printed more than {limit} bytes")]
    TooMuchOutput { command: String, limit: usize },
    #[error("git {command} failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    /// The output was longer than the limit and is cut there (only from [`Git::output_cut`]).
    pub cut: bool,
}

/// A repository given explicitly, so neither the caller's environment nor `core.worktree`
/// decides which one a command works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
}

/// How git commands are run in one place.
#[derive(Debug, Clone)]
pub struct Git {
    program: PathBuf,
    /// The working directory of every command.
    dir: PathBuf,
    repo: Option<Repo>,
    /// Set on purpose by the caller (`GIT_INDEX_FILE`), on top of the clean environment.
    env: Vec<(OsString, OsString)>,
    /// Extra `-c` values of the caller.
    config: Vec<(String, String)>,
    /// The repository's object format: which empty tree is the attribute source.
    empty_tree: &'static str,
    /// No command runs past this, whatever its own timeout.
    until: Option<Instant>,
}

impl Git {
    /// Commands run in `dir`, where git finds the repository itself.
    ///
    /// # Errors
    /// [`GitError::Missing`] when no git is installed.
    pub fn in_dir(dir: &Path) -> Result<Git, GitError> {
        let program = program().ok_or(GitError::Missing)?;
        Ok(Git {
            program,
            dir: dir.to_path_buf(),
            repo: None,
            env: Vec::new(),
            config: Vec::new(),
            empty_tree: EMPTY_TREE_SHA1,
            until: None,
        })
    }

    /// Commands on `repo`, run in its work tree, with the empty tree of `object_format`
    /// (`sha1` or `sha256`) as the attribute source.
    ///
    /// # Errors
    /// [`GitError::Missing`] when no git is installed.
    pub fn for_repo(repo: &Repo, object_format: &str) -> Result<Git, GitError> {
        let mut git = Git::in_dir(&repo.work_tree)?;
        git.repo = Some(repo.clone());
        git.empty_tree = empty_tree(object_format);
        Ok(git)
    }

    /// The same commands with `GIT_INDEX_FILE` set: never the repository's own index.
    pub fn with_index(&self, index: &Path) -> Git {
        let mut git = self.clone();
        git.env
            .push(("GIT_INDEX_FILE".into(), index.as_os_str().to_owned()));
        git
    }

    /// The same commands with the environment variable `name` set to `value` (over the
    /// clean environment's).
    pub fn with_env(&self, name: &str, value: &str) -> Git {
        let mut git = self.clone();
        git.env.push((name.into(), value.into()));
        git
    }

    /// [`Git::with_env`] for a value that is a path (or a list of paths).
    pub fn with_env_path(&self, name: &str, value: &OsStr) -> Git {
        let mut git = self.clone();
        git.env.push((name.into(), value.to_owned()));
        git
    }

    /// The same commands with `key=value` set (`-c`), after the fixed values.
    pub fn with_config(&self, key: &str, value: &str) -> Git {
        let mut git = self.clone();
        git.config.push((key.to_owned(), value.to_owned()));
        git
    }

    /// The same commands, none running past `until` (a request's deadline).
    pub fn until(&self, until: Option<Instant>) -> Git {
        let mut git = self.clone();
        git.until = until;
        git
    }

    /// Runs `git ARGS`; its stdout when it exits 0.
    ///
    /// # Errors
    /// Any [`GitError`]; a non-zero exit is [`GitError::Failed`] with its stderr.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S], limits: Limits) -> Result<Vec<u8>, GitError> {
        Ok(self.output(args, limits, &[0])?.stdout)
    }

    /// Runs `git ARGS`, accepting the exit codes in `accept` (`check-ignore` answers with 1,
    /// `add --ignore-errors` exits 1 when it skipped something).
    ///
    /// # Errors
    /// Any [`GitError`]; printing past the limit is [`GitError::TooMuchOutput`].
    pub fn output<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        limits: Limits,
        accept: &[i32],
    ) -> Result<Output, GitError> {
        let output = self.spawn_and_collect(args, limits, false, None)?;
        self.accepted(args, output, accept)
    }

    /// Runs `git ARGS` with `input` on its stdin (`pack-objects` reads the objects to pack
    /// there); its stdout when it exits 0.
    ///
    /// # Errors
    /// As [`Git::run`].
    pub fn run_with_input<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        input: Vec<u8>,
        limits: Limits,
    ) -> Result<Vec<u8>, GitError> {
        let output = self.spawn_and_collect(args, limits, false, Some(input))?;
        Ok(self.accepted(args, output, &[0])?.stdout)
    }

    /// Like [`Git::output`], but output past the limit is cut there (`cut`) instead of
    /// refused; the command is stopped at the cut.
    ///
    /// # Errors
    /// Any [`GitError`] but [`GitError::TooMuchOutput`].
    pub fn output_cut<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        limits: Limits,
        accept: &[i32],
    ) -> Result<Output, GitError> {
        let output = self.spawn_and_collect(args, limits, true, None)?;
        if output.overflowed {
            // Stopped at the cut: its exit status says nothing.
            return Ok(Output {
                code: None,
                stdout: output.stdout,
                cut: true,
            });
        }
        self.accepted(args, output, accept)
    }

    /// Every filter, diff and merge driver the repository's configuration defines, each
    /// turned into a no-op; nothing is started to find them (`git config --list` runs none).
    ///
    /// # Errors
    /// When the configuration cannot be read (then no other command could run either).
    pub fn driver_overrides(&self) -> Result<Vec<(String, String)>, GitError> {
        let mut bare = self.clone();
        bare.config.clear();
        let args = ["config", "--list", "--includes", "-z"];
        let listing = bare.collect_checked(&args, Limits::QUICK, &[], None)?;
        if listing.overflowed {
            return Err(GitError::TooMuchOutput {
                command: command_name(&args),
                limit: Limits::QUICK.max_output,
            });
        }
        // 1: there is no configuration at all.
        let listing = bare.accepted(&args, listing, &[0, 1])?;
        Ok(overrides_for(&listing.stdout))
    }

    fn accepted<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        output: Collected,
        accept: &[i32],
    ) -> Result<Output, GitError> {
        if output
            .status
            .code()
            .is_some_and(|code| accept.contains(&code))
        {
            return Ok(Output {
                code: output.status.code(),
                stdout: output.stdout,
                cut: false,
            });
        }
        Err(GitError::Failed {
            command: command_name(args),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }

    fn spawn_and_collect<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        limits: Limits,
        cut: bool,
        input: Option<Vec<u8>>,
    ) -> Result<Collected, GitError> {
        // Also where git finds the repository itself: whichever it finds is read fresh.
        let overrides = self.driver_overrides()?;
        let output = self.collect_checked(args, limits, &overrides, input)?;
        if output.overflowed && !cut {
            return Err(GitError::TooMuchOutput {
                command: command_name(args),
                limit: limits.max_output,
            });
        }
        Ok(output)
    }

    fn collect_checked<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        limits: Limits,
        overrides: &[(String, String)],
        input: Option<Vec<u8>>,
    ) -> Result<Collected, GitError> {
        let mut limits = limits;
        if let Some(until) = self.until {
            limits.timeout = limits
                .timeout
                .min(until.saturating_duration_since(Instant::now()));
        }
        if limits.timeout.is_zero() {
            return Err(GitError::TimedOut {
                command: command_name(args),
                timeout: limits.timeout,
            });
        }
        let mut command = self.command(overrides);
        command.args(args);
        if input.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = command.spawn().map_err(GitError::Spawn)?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            // Written beside the reading: git may print before it has read everything. A
            // write that fails (git stopped early) shows in its exit status.
            thread::spawn(move || {
                let _ = stdin.write_all(&input);
            });
        }
        collect(child, limits).map_err(|failure| match failure {
            Failure::TimedOut => GitError::TimedOut {
                command: command_name(args),
                timeout: limits.timeout,
            },
            Failure::Io(err) => GitError::Spawn(err),
        })
    }

    /// `git` with the clean environment and the hardening arguments; the caller's come next.
    fn command(&self, overrides: &[(String, String)]) -> Command {
        let mut command = Command::new(&self.program);
        command
            .current_dir(&self.dir)
            .env_clear()
            .envs(clean_env())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Drivers the configuration defines go through the environment: names of any
        // spelling, never split at an `=` the way `-c` splits.
        command.env("GIT_CONFIG_COUNT", overrides.len().to_string());
        for (index, (key, value)) in overrides.iter().enumerate() {
            command.env(format!("GIT_CONFIG_KEY_{index}"), key);
            command.env(format!("GIT_CONFIG_VALUE_{index}"), value);
        }
        command.arg("--no-pager");
        command.arg(format!("--attr-source={}", self.empty_tree));
        for (key, value) in FIXED_CONFIG
            .iter()
            .map(|(k, v)| (*k, *v))
            .chain(self.config.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            command.arg("-c").arg(format!("{key}={value}"));
        }
        if let Some(repo) = &self.repo {
            let mut git_dir = OsString::from("--git-dir=");
            git_dir.push(&repo.git_dir);
            let mut work_tree = OsString::from("--work-tree=");
            work_tree.push(&repo.work_tree);
            command.arg(git_dir).arg(work_tree);
        }
        command
    }
}

/// The empty tree of an object format (`sha256`, else SHA-1's).
pub fn empty_tree(object_format: &str) -> &'static str {
    if object_format == "sha256" {
        EMPTY_TREE_SHA256
    } else {
        EMPTY_TREE_SHA1
    }
}

/// The no-op value of every driver named in a `git config --list -z` listing.
fn overrides_for(listing: &[u8]) -> Vec<(String, String)> {
    let mut drivers: Vec<(&str, String)> = Vec::new();
    for entry in listing.split(|byte| *byte == 0) {
        let key = entry
            .split(|byte| *byte == b'\n')
            .next()
            .unwrap_or_default();
        let Ok(key) = std::str::from_utf8(key) else {
            continue;
        };
        // `section.subsection.variable`: the subsection may hold dots of its own.
        let Some((section, rest)) = key.split_once('.') else {
            continue;
        };
        let Some((name, _variable)) = rest.rsplit_once('.') else {
            continue;
        };
        let section = section.to_ascii_lowercase();
        let kind = match section.as_str() {
            "filter" => "filter",
            "diff" => "diff",
            "merge" => "merge",
            _ => continue,
        };
        if !drivers.iter().any(|(k, n)| *k == kind && n == name) {
            drivers.push((kind, name.to_owned()));
        }
    }
    let mut overrides = Vec::new();
    for (kind, name) in drivers {
        let set: &[(&str, &str)] = match kind {
            "filter" => &[
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            ],
            "diff" => &[("textconv", ""), ("command", "")],
            _ => &[("driver", "")],
        };
        for (variable, value) in set {
            overrides.push((format!("{kind}.{name}.{variable}"), (*value).to_owned()));
        }
    }
    overrides
}

/// The environment every command starts with.
fn clean_env() -> Vec<(&'static str, OsString)> {
    vec![
        ("PATH", absolute_path_entries()),
        ("LANG", "C".into()),
        ("LC_ALL", "C".into()),
        ("HOME", "/nonexistent".into()),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
        ("GIT_TERMINAL_PROMPT", "0".into()),
        ("GIT_OPTIONAL_LOCKS", "0".into()),
        ("GIT_NO_REPLACE_OBJECTS", "1".into()),
        ("GIT_LITERAL_PATHSPECS", "1".into()),
        ("GIT_ADVICE", "0".into()),
        // Wins over `core.gitProxy`, whose first value (the repository's) would win otherwise.
        ("GIT_PROXY_COMMAND", "".into()),
    ]
}

/// The caller's `PATH` without relative entries: a relative entry would be looked up in the
/// folder git runs in.
pub fn absolute_path_entries() -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let absolute: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|entry| entry.is_absolute())
        .collect();
    std::env::join_paths(absolute).unwrap_or_default()
}

/// The git program: the first executable `git` in an absolute `PATH` entry, found once.
pub fn program() -> Option<PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let path = absolute_path_entries();
            std::env::split_paths(&path)
                .map(|dir| dir.join("git"))
                .find(|candidate| is_executable(candidate))
        })
        .clone()
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = path.metadata() else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// The first argument that is not an option, to name the command in errors.
fn command_name<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|arg| arg.as_ref().to_string_lossy())
        .find(|arg| !arg.starts_with('-'))
        .map_or_else(|| "(no command)".to_owned(), |arg| arg.into_owned())
}

struct Collected {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// More than the limit was printed: `stdout` holds the limit, and the command was
    /// stopped.
    overflowed: bool,
}

enum Failure {
    TimedOut,
    Io(io::Error),
}

/// Reads the child's output within `limits`: stdout up to the limit (then the child is
/// stopped), stderr up to [`MAX_STDERR_BYTES`], and kills it at the timeout.
fn collect(mut child: Child, limits: Limits) -> Result<Collected, Failure> {
    let deadline = Instant::now() + limits.timeout;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Failure::Io(io::Error::other("git's output is not a pipe")));
    };
    let errors = thread::spawn(move || read_bounded(stderr, MAX_STDERR_BYTES));
    let (sender, receiver) = mpsc::channel();
    let max = limits.max_output;
    thread::spawn(move || {
        let _ = sender.send(read_bounded(stdout, max));
    });
    let wait = deadline.saturating_duration_since(Instant::now());
    let read = receiver.recv_timeout(wait);
    let Ok(Ok((stdout, overflowed))) = read else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(match read {
            Ok(Err(err)) => Failure::Io(err),
            _ => Failure::TimedOut,
        });
    };
    if overflowed {
        // The reader stopped at the limit; the rest is not wanted.
        let _ = child.kill();
    }
    let status = wait_until(&mut child, deadline)?;
    let stderr = errors
        .join()
        .ok()
        .and_then(Result::ok)
        .map(|(bytes, _)| bytes)
        .unwrap_or_default();
    Ok(Collected {
        status,
        stdout,
        stderr,
        overflowed,
    })
}

/// Waits for the child (whose stdout is closed) until `deadline`, then kills it.
fn wait_until(child: &mut Child, deadline: Instant) -> Result<ExitStatus, Failure> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::TimedOut);
            }
            Ok(None) => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(err) => return Err(Failure::Io(err)),
        }
    }
}

/// Up to `max` bytes of `pipe`, and whether there was more (reading stops there).
fn read_bounded(mut pipe: impl Read, max: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => return Ok((bytes, false)),
            Ok(read) => {
                let room = max.saturating_sub(bytes.len());
                if read > room {
                    bytes.extend_from_slice(&chunk[..room]);
                    return Ok((bytes, true));
                }
                bytes.extend_from_slice(&chunk[..read]);
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_driver_of_the_configuration_is_turned_off() {
        let listing = b"core.bare\nfalse\0filter.lfs.clean\ngit-lfs clean\0filter.My.Odd.Name.smudge\nx\0diff.pdf.textconv\npdftotext\0merge.ours.driver\ntrue\0user.name\nme\0core.fsmonitor\0";
        let overrides = overrides_for(listing);
        let has = |key: &str, value: &str| {
            overrides
                .iter()
                .any(|(k, v)| k.as_str() == key && v.as_str() == value)
        };
        assert!(has("filter.lfs.clean", ""));
        assert!(has("filter.lfs.smudge", ""));
        assert!(has("filter.lfs.process", ""));
        assert!(has("filter.lfs.required", "false"));
        assert!(has("filter.My.Odd.Name.process", ""));
        assert!(has("diff.pdf.textconv", ""));
        assert!(has("diff.pdf.command", ""));
        assert!(has("merge.ours.driver", ""));
        assert_eq!(overrides.len(), 4 + 4 + 2 + 1, "{overrides:?}");
    }

    #[test]
    fn the_environment_is_clean_and_relative_path_entries_are_dropped() {
        let env = clean_env();
        let names: Vec<&str> = env.iter().map(|(name, _)| *name).collect();
        assert!(!names.contains(&"GIT_DIR"));
        assert!(names.contains(&"GIT_CONFIG_NOSYSTEM"));
        let path = absolute_path_entries();
        assert!(std::env::split_paths(&path).all(|entry| entry.is_absolute()));
    }

    #[test]
    fn output_is_bounded_and_cut_when_asked() -> Result<(), GitError> {
        let tmp = tempfile::tempdir().map_err(GitError::Spawn)?;
        let git = match Git::in_dir(tmp.path()) {
            Err(GitError::Missing) => return Ok(()),
            other => other?,
        };
        let small = Limits {
            timeout: Duration::from_secs(20),
            max_output: 10,
        };
        let version = git.run(&["--version"], Limits::QUICK)?;
        assert!(version.starts_with(b"git version"));
        assert!(matches!(
            git.run(&["--version"], small),
            Err(GitError::TooMuchOutput { .. })
        ));
        let cut = git.output_cut(&["--version"], small, &[0])?;
        assert!(cut.cut && cut.stdout == b"git versio");
        let failed = git.run(&["no-such-command"], Limits::QUICK);
        assert!(matches!(failed, Err(GitError::Failed { .. })), "{failed:?}");
        Ok(())
    }
}
