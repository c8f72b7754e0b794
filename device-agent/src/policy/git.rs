//! Git in a run: what git would obey later, outside the sandbox, and the commits a job with
//! `local` delivery may not make.
//!
//! A run's git commands run inside the sandbox, but what they write into a repository's
//! configuration does not stay there: Tether's own git (delivery, the changes record) and
//! the owner's git read it after the run, unconfined. Hooks, filters, helpers, aliases,
//! `core.sshCommand`, `core.fsmonitor`, `diff.*.textconv` and `include.path` all name
//! programs or files git starts or reads then. So a run may set only keys of
//! [`SAFE_KEYS`] (and `branch.<name>.merge|rebase|description`, `advice.*`), whichever way
//! it says so: `git config`, `git -c`, `git clone -c`, or `GIT_CONFIG_*` variables. Options
//! that point git at another repository, configuration or program (`--git-dir`,
//! `--exec-path`, `--upload-pack`, …) are refused too. Reading configuration is fine.
//!
//! Every simple command of a command line is judged, as the hard floor finds them
//! ([`hard_floor::simple_commands`]: `sh -c`, `env`, `eval`, `find -exec`, …).

use std::path::{Path, PathBuf};

use tether_protocol::git::Delivery;

use super::hard_floor::{self, SimpleCommand};
use super::zones;

/// Configuration keys a run may set (section and name lowercase, as git compares them):
/// none names a program, a file git reads later, or where work is sent.
pub const SAFE_KEYS: &[&str] = &[
    "user.name",
    "user.email",
    "pull.rebase",
    "pull.ff",
    "push.autosetupremote",
    "init.defaultbranch",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "color.ui",
    "merge.conflictstyle",
];
/// What a run may set of `branch.<name>.*`.
const SAFE_BRANCH_KEYS: &[&str] = &["merge", "rebase", "description"];
/// `GIT_*` variables a command may be started with; every other one can set configuration,
/// the repository or the programs git runs (`GIT_CONFIG_PARAMETERS`, `GIT_DIR`,
/// `GIT_EXEC_PATH`, `GIT_SSH_COMMAND`, …).
const SAFE_VARIABLES: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_MERGE_AUTOEDIT",
    "GIT_PAGER",
    "GIT_TERMINAL_PROMPT",
    "GIT_OPTIONAL_LOCKS",
    "GIT_FLUSH",
    "GIT_LITERAL_PATHSPECS",
];
/// Options of any git command that name a program to run (long forms, which git also takes
/// abbreviated).
const PROGRAM_OPTIONS: &[&str] = &["--upload-pack", "--receive-pack", "--exec"];

/// Where a command line is judged.
#[derive(Debug, Clone, Copy)]
pub struct GitContext<'a> {
    /// The run's folder (canonical).
    pub folder: &'a Path,
    /// Where the command starts (resolved).
    pub cwd: &'a Path,
    pub home: Option<&'a Path>,
    /// The job's delivery; `None` when it asks for no git handling.
    pub delivery: Option<Delivery>,
}

/// Why a git command is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitRefusal {
    /// It would make git run or obey something outside the sandbox.
    Programs(String),
    /// It makes commits, and the job's delivery is `local`.
    LocalDelivery(String),
}

/// The first refusal of any simple command of `argv`, if one is refused.
pub fn check(argv: &[String], context: &GitContext<'_>) -> Option<GitRefusal> {
    hard_floor::simple_commands(argv)
        .iter()
        .find_map(|command| check_command(command, context))
}

/// Whether a command may be started with the variable `name` set.
pub fn safe_variable(name: &str) -> bool {
    !name.starts_with("GIT_") || SAFE_VARIABLES.contains(&name)
}

/// Whether a run may set the configuration key `key` (any case, as git reads it).
pub fn safe_key(key: &str) -> bool {
    let Some((section, rest)) = key.split_once('.') else {
        return false;
    };
    let section = section.to_ascii_lowercase();
    let Some((subsection, name)) = rest.rsplit_once('.') else {
        let name = rest.to_ascii_lowercase();
        return (section == "advice" && !name.is_empty())
            || SAFE_KEYS.contains(&format!("{section}.{name}").as_str());
    };
    section == "branch"
        && !subsection.is_empty()
        && SAFE_BRANCH_KEYS.contains(&name.to_ascii_lowercase().as_str())
}

fn check_command(command: &SimpleCommand, context: &GitContext<'_>) -> Option<GitRefusal> {
    // Any program may start git, so the variables count whatever the program.
    let variable = command.assignments.iter().find_map(|assignment| {
        let (name, _) = assignment.split_once('=')?;
        (!safe_variable(name)).then_some(name)
    });
    if let Some(name) = variable {
        return Some(GitRefusal::Programs(format!(
            "{name} would set git's configuration, repository or programs"
        )));
    }
    let (program, args) = command.words.split_first()?;
    if basename(program) != "git" {
        return None;
    }
    let (subcommand, rest) = match global_options(args, context) {
        Ok(split) => split,
        Err(why) => return Some(GitRefusal::Programs(why)),
    };
    let subcommand = subcommand?;
    if let Some(why) = program_option(subcommand, rest).or_else(|| writes_config(subcommand, rest))
    {
        return Some(GitRefusal::Programs(why));
    }
    if context.delivery == Some(Delivery::Local) && makes_commits(subcommand, rest) {
        return Some(GitRefusal::LocalDelivery(format!(
            "git {subcommand} makes commits, and this job's delivery is local (no commits)"
        )));
    }
    None
}

/// The subcommand and its arguments, after the options before it: only `-C` inside the
/// folder, `-c` of a safe key, `--no-pager` (`-P`) and `--version`.
///
/// # Errors
/// Why an option is refused.
fn global_options<'a>(
    args: &'a [String],
    context: &GitContext<'_>,
) -> Result<(Option<&'a str>, &'a [String]), String> {
    let mut dir: PathBuf = context.cwd.to_path_buf();
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        match arg.as_str() {
            "--no-pager" | "-P" | "--version" => index += 1,
            "-C" => {
                let value = args.get(index + 1).map_or("", String::as_str);
                // Each `-C` is taken relative to the one before, as git does.
                dir = zones::resolve(&dir, Path::new(value), context.home);
                if value.is_empty() || !dir.starts_with(context.folder) {
                    return Err(format!(
                        "git -C {value} works outside the run's folder {}",
                        context.folder.display()
                    ));
                }
                index += 2;
            }
            "-c" => {
                config_pair(args.get(index + 1).map_or("", String::as_str))?;
                index += 2;
            }
            _ if arg.starts_with("-c") => {
                config_pair(&arg[2..])?;
                index += 1;
            }
            _ if arg.starts_with('-') => {
                return Err(format!(
                    "git {arg} could point git at another repository, configuration or program; before the subcommand only -C (inside the folder), -c of a safe key and --no-pager are allowed"
                ))
            }
            subcommand => return Ok((Some(subcommand), &args[index + 1..])),
        }
    }
    Ok((None, &[]))
}

/// `KEY=VALUE` (or `KEY` alone, which sets true) given with `-c`.
fn config_pair(pair: &str) -> Result<(), String> {
    let key = pair.split_once('=').map_or(pair, |(key, _)| key);
    if safe_key(key) {
        Ok(())
    } else {
        Err(unsafe_key(key))
    }
}

fn unsafe_key(key: &str) -> String {
    format!(
        "the git configuration key {key:?} is not on the safe list (docs/POLICY.md): it could make git run a program or read a file later, outside the sandbox"
    )
}

/// Options that name a program: `--upload-pack`, `--receive-pack`, `--exec` (also
/// abbreviated), `-u` of `clone` and `ls-remote`, `-x` of `rebase`, and `--template` of
/// `clone` and `init` (a folder of hooks to copy).
fn program_option(subcommand: &str, rest: &[String]) -> Option<String> {
    let short = |flag: char| {
        rest.iter().any(|arg| {
            arg.strip_prefix('-')
                .is_some_and(|flags| !flags.starts_with('-') && flags.contains(flag))
        })
    };
    for arg in rest.iter().take_while(|arg| *arg != "--") {
        let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
        let names_program = name.len() >= 3
            && name.starts_with("--")
            && PROGRAM_OPTIONS
                .iter()
                .any(|option| option.starts_with(name));
        if names_program {
            return Some(format!("git {subcommand} {name} names a program to run"));
        }
        if matches!(subcommand, "clone" | "init") && name.starts_with("--templ") {
            return Some(format!(
                "git {subcommand} {name} copies hooks that would run later, outside the sandbox"
            ));
        }
    }
    let flag = match subcommand {
        "clone" | "ls-remote" => 'u',
        "rebase" => 'x',
        _ => return None,
    };
    short(flag).then(|| format!("git {subcommand} -{flag} names a program to run"))
}

/// A configuration change of `git config` (or `git clone -c`) of an unsafe key, or one
/// this reading cannot tell (`--edit`, whole sections).
fn writes_config(subcommand: &str, rest: &[String]) -> Option<String> {
    match subcommand {
        "config" => config_command(rest).err(),
        "clone" => clone_config(rest).err(),
        _ => None,
    }
}

/// `git config …`, old style (`--get`, `--unset`, `NAME VALUE`) and new (`get`, `set`).
fn config_command(rest: &[String]) -> Result<(), String> {
    const VALUED: &[&str] = &[
        "-f",
        "--file",
        "--blob",
        "--type",
        "--default",
        "--comment",
        "--value",
        "--url",
    ];
    let mut operands: Vec<&str> = Vec::new();
    let (mut reads, mut writes) = (false, false);
    let mut index = 0;
    while let Some(arg) = rest.get(index) {
        index += 1;
        match arg.as_str() {
            "-e" | "--edit" | "--rename-section" | "--remove-section" => {
                return Err(format!(
                    "git config {arg} can change any key; set safe keys one by one instead"
                ))
            }
            "--get" | "--get-all" | "--get-regexp" | "--get-urlmatch" | "--get-color"
            | "--get-colorbool" | "-l" | "--list" => reads = true,
            "--add" | "--replace-all" | "--unset" | "--unset-all" => writes = true,
            _ if VALUED.contains(&arg.as_str()) => index += 1,
            _ if arg.starts_with('-') => {}
            operand => operands.push(operand),
        }
    }
    let (keys, writes) = match operands.split_first() {
        Some((&("list" | "get"), _)) => return Ok(()),
        Some((&("edit" | "rename-section" | "remove-section"), _)) => {
            return Err(
                "git config edit and whole-section changes can change any key; set safe keys one by one instead"
                    .to_owned(),
            )
        }
        Some((&("set" | "unset"), keys)) => (keys, true),
        _ => (&operands[..], writes || operands.len() > 1),
    };
    if reads || !writes {
        return Ok(());
    }
    match keys.first() {
        Some(key) if safe_key(key) => Ok(()),
        Some(key) => Err(unsafe_key(key)),
        None => Ok(()),
    }
}

/// `git clone -c KEY=VALUE` / `--config KEY=VALUE`: set in the new repository.
fn clone_config(rest: &[String]) -> Result<(), String> {
    let mut index = 0;
    while let Some(arg) = rest.get(index) {
        index += 1;
        let pair = match arg.as_str() {
            "-c" | "--config" => {
                index += 1;
                rest.get(index - 1).map_or("", String::as_str)
            }
            _ => match arg.strip_prefix("--config=") {
                Some(pair) => pair,
                None => continue,
            },
        };
        config_pair(pair)?;
    }
    Ok(())
}

/// Whether `git SUBCOMMAND REST` makes commits or moves a branch to new ones. Stopping one
/// in progress (`--abort`, `--quit`) does not.
fn makes_commits(subcommand: &str, rest: &[String]) -> bool {
    let has = |flag: &str| rest.iter().any(|arg| arg == flag);
    let stops = has("--abort") || has("--quit");
    match subcommand {
        "commit" | "commit-tree" | "update-ref" | "filter-branch" | "fast-import" | "replace" => {
            true
        }
        "merge" | "rebase" | "cherry-pick" | "revert" | "am" => !stops,
        "pull" => !(has("--ff-only") && !has("--rebase") && !has("-r")),
        "tag" => !(rest.is_empty() || has("-l") || has("--list")),
        "notes" => !matches!(
            rest.iter()
                .find(|arg| !arg.starts_with('-'))
                .map(String::as_str),
            None | Some("list" | "show")
        ),
        _ => false,
    }
}

fn basename(program: &str) -> String {
    Path::new(program).file_name().map_or_else(
        || program.to_owned(),
        |name| name.to_string_lossy().into_owned(),
    )
}
