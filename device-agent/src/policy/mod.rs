//! What a run may do: the checks before anything runs, the judgement of what an engine asks
//! for at run time, and the owner's trusted folders.
//!
//! - [`hard_floor`]: dangerous commands, refused before anything runs, whatever the mode;
//! - [`guard`]: the paths a job may be given (protected paths, blocked roots, shared folders);
//! - [`RunPolicy`] (here), with [`zones`] and [`commands`]: the judgement of one action;
//! - [`gate`]: acting on a judgement, asking the owner through [`asking::Ask`] for "ask";
//! - [`trust`]: trusted folders; [`explain`]: a dry run of the judgement.
//!
//! **Architecture Invariant:** policy depends on the local configuration only, never on how
//! a run is carried out or how the server is reached: asking goes through the [`asking::Ask`]
//! trait, which the run wing implements.
//!
//! ## The judgement
//!
//! [`RunPolicy::judge`] is pure apart from reading the file system to resolve paths: it
//! takes an [`Action`] and returns a [`Judgement`] naming the rule that decided. The
//! [`gate::Gate`] acts on it (asking when the verdict is [`Verdict::Ask`]), and
//! `tether-agent explain` prints it, so a dry run and the real check are one computation.
//!
//! The order is fixed:
//!
//! 1. the **hard floor** (commands) and the **guard** (protected paths: keys, sign-ins, the
//!    agent's own data) refuse, in every mode, before anyone is asked;
//! 2. changing system folders or the home folder itself is refused, and so is reaching the
//!    network when the job runs with it off (the sandbox would block it anyway);
//! 3. the **mode** and the **zone** of each path decide between going ahead and asking
//!    (see `docs/POLICY.md` for the table);
//! 4. before asking, the run's own rules ("allow for this run" answers) are checked;
//! 5. in `unattended` mode nobody is asked: the recommended answer is taken and recorded.
//!
//! **Architecture Invariant:** nothing here creates trust. Trusted folders come only from
//! the owner's local configuration (`tether-agent trust add`); an answer from the web can at
//! most add a rule that lives as long as the run.

pub mod asking;
pub mod commands;
pub mod explain;
pub mod gate;
pub mod git;
pub mod guard;
pub mod hard_floor;
pub mod trust;
pub mod zones;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::capabilities::SandboxStrength;
use tether_protocol::decisions::Answer;
use tether_protocol::git::Delivery;
use tether_protocol::jobs::Mode;

use crate::local::private_files::hex;
use crate::policy::guard::{Guard, Refusal};
use zones::Zone;

/// What a run wants to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a program (an engine's terminal or command).
    Command { argv: Vec<String>, cwd: PathBuf },
    /// Read a file or list a folder.
    ReadFile { path: PathBuf },
    /// Create, edit, delete or move a file.
    WriteFile { path: PathBuf },
    /// Reach another computer (an engine's fetch).
    Network { target: String },
    /// An engine's tool call nothing above describes.
    Tool { kind: String, title: String },
}

impl Action {
    /// What the action is, as a decision's `kind`: `command`, `read`, `write`, `network` or
    /// `tool`.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Command { .. } => "command",
            Action::ReadFile { .. } => "read",
            Action::WriteFile { .. } => "write",
            Action::Network { .. } => "network",
            Action::Tool { .. } => "tool",
        }
    }

    /// The action as JSON with fixed field names; its compact text (keys sorted) is what
    /// [`Action::hash`] digests and what a decision shows.
    pub fn canonical(&self) -> Value {
        let text = |path: &Path| path.to_string_lossy().into_owned();
        match self {
            Action::Command { argv, cwd } => {
                json!({"kind": "command", "argv": argv, "cwd": text(cwd)})
            }
            Action::ReadFile { path } => json!({"kind": "read", "path": text(path)}),
            Action::WriteFile { path } => json!({"kind": "write", "path": text(path)}),
            Action::Network { target } => json!({"kind": "network", "target": target}),
            Action::Tool { kind, title } => json!({"kind": "tool", "tool": kind, "title": title}),
        }
    }

    /// SHA-256 (lowercase hex) of the canonical JSON text (compact, keys sorted at every
    /// level): an answer counts only for this hash.
    pub fn hash(&self) -> String {
        let digest = Sha256::digest(canonical_text(&self.canonical()).as_bytes());
        hex(&digest)
    }

    /// The question the owner is asked about this action in a run working in `folder`.
    pub fn question(&self, folder: &Path) -> String {
        match self {
            Action::Command { argv, cwd } if cwd == folder => {
                format!("Run `{}` in {}?", shell_line(argv), folder.display())
            }
            Action::Command { argv, cwd } => format!(
                "Run `{}` in {} (outside the run's folder {})?",
                shell_line(argv),
                cwd.display(),
                folder.display()
            ),
            Action::ReadFile { path } => format!("Read {}?", path.display()),
            Action::WriteFile { path } => format!("Change {}?", path.display()),
            Action::Network { target } => format!("Reach {target} over the network?"),
            Action::Tool { kind, title } => {
                format!("Let the engine use its tool {title:?} ({kind})?")
            }
        }
    }
}

/// What the policy says about an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead.
    Allow,
    /// Ask the owner; `recommended` is what `unattended` mode takes.
    Ask { recommended: Answer },
    /// Never, whatever anyone answers.
    Refuse { reason: String },
}

/// What an "allow for this run" answer adds to the run's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Changing anything inside this folder.
    Folder(PathBuf),
    /// Reaching this host.
    Host(String),
    /// Exactly this action again (its hash).
    Exact(String),
}

impl Grant {
    /// The grant in words, as `explain` and the result show it.
    pub fn describe(&self) -> String {
        match self {
            Grant::Folder(folder) => format!("changes inside {}", folder.display()),
            Grant::Host(host) => format!("reaching {host}"),
            Grant::Exact(_) => "this exact action".to_owned(),
        }
    }
}

/// The policy's judgement of one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub verdict: Verdict,
    /// The name of the rule that decided (`hard-floor:privilege`, `read-only-command`, …).
    pub rule: String,
    /// Why, in one sentence.
    pub reason: String,
    /// What the question is about, as a decision's `kind` (`command`, `write`, `folder`, …).
    pub kind: &'static str,
    /// The question the owner is (or would be) asked.
    pub question: String,
    /// What "allow for this run" adds as a run rule; `None` when the answer counts once.
    pub grant: Option<Grant>,
    /// `unattended` mode took the recommended answer instead of asking.
    pub unattended: bool,
}

/// The rules of the policy, each with a stable name `explain` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Named `hard-floor:<the floor's rule>` in a judgement.
    HardFloor,
    EmptyCommand,
    GitPrograms,
    GitLocalDelivery,
    Guard,
    SystemFolder,
    NetworkOff,
    RunRule,
    TrustedFolder,
    ReadOnlyCommand,
    ReadInsideFolder,
    ReadTemporary,
    ReadOutsideFolder,
    AskModeCommand,
    AskModeEdit,
    AskModeNetwork,
    AskModeTool,
    InsideFolder,
    TemporaryFolder,
    OtherFolder,
    RemoteCommand,
    Unsandboxed,
    NetworkOn,
    QuietTool,
    EngineTool,
}

impl Rule {
    /// Every rule (`docs/POLICY.md` lists them all; a test keeps it so).
    pub const ALL: [Rule; 25] = [
        Rule::HardFloor,
        Rule::EmptyCommand,
        Rule::GitPrograms,
        Rule::GitLocalDelivery,
        Rule::Guard,
        Rule::SystemFolder,
        Rule::NetworkOff,
        Rule::RunRule,
        Rule::TrustedFolder,
        Rule::ReadOnlyCommand,
        Rule::ReadInsideFolder,
        Rule::ReadTemporary,
        Rule::ReadOutsideFolder,
        Rule::AskModeCommand,
        Rule::AskModeEdit,
        Rule::AskModeNetwork,
        Rule::AskModeTool,
        Rule::InsideFolder,
        Rule::TemporaryFolder,
        Rule::OtherFolder,
        Rule::RemoteCommand,
        Rule::Unsandboxed,
        Rule::NetworkOn,
        Rule::QuietTool,
        Rule::EngineTool,
    ];

    /// The rule's stable name.
    pub fn name(self) -> &'static str {
        match self {
            Rule::HardFloor => "hard-floor",
            Rule::EmptyCommand => "empty-command",
            Rule::GitPrograms => "git-programs",
            Rule::GitLocalDelivery => "git-local-delivery",
            Rule::Guard => "guard",
            Rule::SystemFolder => "system-folder",
            Rule::NetworkOff => "network-off",
            Rule::RunRule => "run-rule",
            Rule::TrustedFolder => "trusted-folder",
            Rule::ReadOnlyCommand => "read-only-command",
            Rule::ReadInsideFolder => "read-inside-folder",
            Rule::ReadTemporary => "read-temporary",
            Rule::ReadOutsideFolder => "read-outside-folder",
            Rule::AskModeCommand => "ask-mode-command",
            Rule::AskModeEdit => "ask-mode-edit",
            Rule::AskModeNetwork => "ask-mode-network",
            Rule::AskModeTool => "ask-mode-tool",
            Rule::InsideFolder => "inside-folder",
            Rule::TemporaryFolder => "temporary-folder",
            Rule::OtherFolder => "other-folder",
            Rule::RemoteCommand => "remote-command",
            Rule::Unsandboxed => "unsandboxed",
            Rule::NetworkOn => "network-on",
            Rule::QuietTool => "quiet-tool",
            Rule::EngineTool => "engine-tool",
        }
    }

    /// What the rule says, in a few words.
    pub fn summary(self) -> &'static str {
        match self {
            Rule::HardFloor => "a dangerous command, refused in every mode before anyone is asked",
            Rule::EmptyCommand => "a command with no program is refused",
            Rule::GitPrograms => {
                "git told to run or obey a program outside the sandbox (unsafe configuration, options naming programs) is refused in every mode"
            }
            Rule::GitLocalDelivery => {
                "the job's delivery is local: git commands that make commits are refused"
            }
            Rule::Guard => {
                "keys, sign-ins, browser data and the agent's own data are refused in every mode"
            }
            Rule::SystemFolder => "changing system folders or the home folder itself is refused",
            Rule::NetworkOff => {
                "the job runs with the network off: reaching another computer is refused"
            }
            Rule::RunRule => "an \"allow for this run\" answer covers it",
            Rule::TrustedFolder => "the owner trusts this folder on this computer",
            Rule::ReadOnlyCommand => "a command that only reads goes ahead",
            Rule::ReadInsideFolder => "reading inside the run's folder goes ahead",
            Rule::ReadTemporary => "reading a temporary folder goes ahead",
            Rule::ReadOutsideFolder => "reading outside the run's folder goes ahead",
            Rule::AskModeCommand => "ask mode: commands ask",
            Rule::AskModeEdit => "ask mode: edits ask",
            Rule::AskModeNetwork => "ask mode: reaching the network asks",
            Rule::AskModeTool => "ask mode: other tool calls ask",
            Rule::InsideFolder => "work inside the run's folder goes ahead",
            Rule::TemporaryFolder => "changing a temporary folder goes ahead",
            Rule::OtherFolder => "changing another folder asks once for that folder",
            Rule::RemoteCommand => "a command that reaches another computer asks",
            Rule::Unsandboxed => "what would run outside the sandbox asks",
            Rule::NetworkOn => "the job runs with the network on",
            Rule::QuietTool => "thinking, searching and planning go ahead",
            Rule::EngineTool => "the engine's own tool call, inside its sandbox, goes ahead",
        }
    }
}

/// Everything a run's policy is built from.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub mode: Mode,
    /// The run's folder (canonical).
    pub folder: PathBuf,
    /// Folders the owner trusts on this computer (`tether-agent trust`).
    pub trusted: Vec<PathBuf>,
    /// The job's network choice.
    pub network: bool,
    /// The strength of the sandbox commands run in.
    pub sandbox: SandboxStrength,
    pub guard: Guard,
    /// This computer's temporary folders ([`zones::temporary_folders`]).
    pub temporary: Vec<PathBuf>,
    /// The job's git delivery; `None` when it asks for no git handling.
    pub delivery: Option<Delivery>,
}

/// The policy of one run.
#[derive(Debug)]
pub struct RunPolicy {
    mode: Mode,
    folder: PathBuf,
    trusted: Vec<PathBuf>,
    network: bool,
    sandbox: SandboxStrength,
    guard: Guard,
    temporary: Vec<PathBuf>,
    delivery: Option<Delivery>,
    /// What "allow for this run" answers granted. A std mutex: held only to read or push.
    run_rules: Mutex<Vec<Grant>>,
    /// The folders among them the owner answered for (or the run this one continues had):
    /// the run's commands may write there too. Never what unattended mode took by itself.
    granted_folders: Mutex<Vec<PathBuf>>,
}

impl RunPolicy {
    pub fn new(settings: RunSettings) -> RunPolicy {
        let folder = settings.folder.canonicalize().unwrap_or(settings.folder);
        RunPolicy {
            mode: settings.mode,
            folder,
            trusted: zones::with_canonical(settings.trusted),
            network: settings.network,
            sandbox: settings.sandbox,
            guard: settings.guard,
            temporary: zones::with_canonical(settings.temporary),
            delivery: settings.delivery,
            run_rules: Mutex::new(Vec::new()),
            granted_folders: Mutex::new(Vec::new()),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The action with its paths resolved against the run's folder (absolute, links
    /// followed): what is judged, asked about and hashed.
    pub fn normalize(&self, action: &Action) -> Action {
        let resolve = |path: &Path| zones::resolve(&self.folder, path, self.guard.home());
        match action {
            Action::Command { argv, cwd } => Action::Command {
                argv: argv.clone(),
                cwd: resolve(cwd),
            },
            Action::ReadFile { path } => Action::ReadFile {
                path: resolve(path),
            },
            Action::WriteFile { path } => Action::WriteFile {
                path: resolve(path),
            },
            Action::Network { .. } | Action::Tool { .. } => action.clone(),
        }
    }

    /// Judges `action` (normalized first). The same computation for the gate and `explain`.
    pub fn judge(&self, action: &Action) -> Judgement {
        let action = self.normalize(action);
        let judgement = match &action {
            Action::Command { argv, cwd } => self.judge_command(&action, argv, cwd),
            Action::ReadFile { path } => self.judge_read(&action, path),
            Action::WriteFile { path } => self.judge_write(&action, path),
            Action::Network { target } => self.judge_network(&action, target),
            Action::Tool { kind, .. } => self.judge_tool(&action, kind),
        };
        let judgement = self.apply_run_rules(&action, judgement);
        self.take_recommended(judgement)
    }

    /// Records what an "allow for this run" answer to `judgement` grants.
    pub fn add_run_rule(&self, judgement: &Judgement) {
        if let Some(grant) = &judgement.grant {
            self.push_rule(grant.clone());
        }
    }

    fn push_rule(&self, grant: Grant) {
        let mut rules = self
            .run_rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !rules.contains(&grant) {
            rules.push(grant);
        }
    }

    /// Records what the owner's "allow for this run" answer to `judgement` grants: a folder
    /// also becomes writable by the run's commands.
    pub fn add_answered_rule(&self, judgement: &Judgement) {
        self.add_run_rule(judgement);
        if let Some(Grant::Folder(folder)) = &judgement.grant {
            self.keep_granted_folder(folder.clone());
        }
    }

    /// Starts the run with the folders the owner allowed for the run it continues (as this
    /// computer stored them). A folder that is gone, or that the guard now refuses to hand
    /// over, is left out; the folders taken.
    pub fn inherit_folders(&self, folders: &[PathBuf]) -> Vec<PathBuf> {
        let mut taken = Vec::new();
        for folder in folders {
            let Ok(canonical) = self.guard.check_folder(folder) else {
                continue;
            };
            if &canonical != folder || canonical.starts_with(&self.folder) {
                continue;
            }
            self.push_rule(Grant::Folder(canonical.clone()));
            self.keep_granted_folder(canonical.clone());
            taken.push(canonical);
        }
        taken
    }

    /// The folders the owner allowed this run to change, in the order granted.
    pub fn granted_folders(&self) -> Vec<PathBuf> {
        self.granted_folders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn keep_granted_folder(&self, folder: PathBuf) {
        let mut folders = self
            .granted_folders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !folders.contains(&folder) {
            folders.push(folder);
        }
    }

    /// The run rules so far, in words.
    pub fn run_rules(&self) -> Vec<String> {
        self.rules().iter().map(Grant::describe).collect()
    }

    fn rules(&self) -> Vec<Grant> {
        self.run_rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn judge_command(&self, action: &Action, argv: &[String], cwd: &Path) -> Judgement {
        if argv.is_empty() {
            return self.refuse(
                action,
                Rule::EmptyCommand,
                "the command names no program".into(),
            );
        }
        let floor = hard_floor::check(argv);
        if let (Some(rule), Some(refusal)) = (floor.rule, floor.refusal()) {
            let mut judgement = self.refuse(action, Rule::HardFloor, refusal);
            judgement.rule = format!("{}:{}", Rule::HardFloor.name(), rule.name());
            return judgement;
        }
        let git = git::GitContext {
            folder: &self.folder,
            cwd,
            home: self.guard.home(),
            delivery: self.delivery,
        };
        match git::check(argv, &git) {
            Some(git::GitRefusal::Programs(why)) => {
                return self.refuse(action, Rule::GitPrograms, why)
            }
            Some(git::GitRefusal::LocalDelivery(why)) => {
                return self.refuse(action, Rule::GitLocalDelivery, why)
            }
            None => {}
        }
        let facts = commands::analyse(argv, cwd, self.guard.home());
        for path in &facts.paths {
            if let Some(refusal) = self.guarded(path, !facts.read_only) {
                return self.refuse(action, Rule::Guard, refusal);
            }
        }
        if facts.remote && !self.network {
            let program = facts.remote_program.as_deref().unwrap_or("it");
            return self.refuse(
                action,
                Rule::NetworkOff,
                format!(
                    "{program} reaches another computer, and this job runs with the network off"
                ),
            );
        }
        let outside: Vec<&PathBuf> = facts
            .paths
            .iter()
            .filter(|path| self.zone(path) == Zone::Elsewhere)
            .collect();
        if facts.read_only && (self.quiet() || outside.is_empty()) {
            return self.allow(action, Rule::ReadOnlyCommand, "it only reads".into());
        }
        if facts.remote {
            let program = facts.remote_program.as_deref().unwrap_or("it");
            return self.ask(
                action,
                Rule::RemoteCommand,
                format!("{program} reaches another computer"),
                Answer::Allow,
                Some(Grant::Exact(action.hash())),
            );
        }
        if !self.quiet() {
            return self.ask(
                action,
                Rule::AskModeCommand,
                "in ask mode every command that changes something asks (trust the folder to quiet it)".into(),
                Answer::Allow,
                Some(Grant::Exact(action.hash())),
            );
        }
        if self.sandbox == SandboxStrength::Advisory {
            let recommended = if outside.is_empty() {
                Answer::Allow
            } else {
                Answer::Deny
            };
            return self.ask(
                action,
                Rule::Unsandboxed,
                "no sandbox confines commands on this computer".into(),
                recommended,
                Some(Grant::Exact(action.hash())),
            );
        }
        // Under a sandbox, system folders cannot be changed anyway: naming them is reading.
        let uncovered = outside.iter().find(|path| {
            !self.covered(path) && zones::changes_system(path, self.guard.home()).is_none()
        });
        if let Some(path) = uncovered {
            return self.ask_other_folder(action, path, &format!("`{}`", shell_line(argv)));
        }
        if self.mode == Mode::Ask {
            return self.allow(
                action,
                Rule::TrustedFolder,
                "the run's folder is trusted on this computer".into(),
            );
        }
        self.allow(
            action,
            Rule::InsideFolder,
            "it works inside the run's folder".into(),
        )
    }

    fn judge_read(&self, action: &Action, path: &Path) -> Judgement {
        if let Some(refusal) = self.guarded(path, false) {
            return self.refuse(action, Rule::Guard, refusal);
        }
        match self.zone(path) {
            Zone::Folder => self.allow(
                action,
                Rule::ReadInsideFolder,
                "it is inside the run's folder".into(),
            ),
            Zone::Temporary => self.allow(
                action,
                Rule::ReadTemporary,
                "it is in a temporary folder".into(),
            ),
            Zone::Trusted | Zone::Elsewhere => self.allow(
                action,
                Rule::ReadOutsideFolder,
                "reading outside the folder goes ahead".into(),
            ),
        }
    }

    fn judge_write(&self, action: &Action, path: &Path) -> Judgement {
        if let Some(refusal) = self.guarded(path, true) {
            return self.refuse(action, Rule::Guard, refusal);
        }
        if let Some(what) = zones::changes_system(path, self.guard.home()) {
            return self.refuse(
                action,
                Rule::SystemFolder,
                format!("{} is {what}", path.display()),
            );
        }
        match self.zone(path) {
            Zone::Folder if self.quiet() => {
                if self.mode == Mode::Ask {
                    self.allow(
                        action,
                        Rule::TrustedFolder,
                        "the run's folder is trusted on this computer".into(),
                    )
                } else {
                    self.allow(
                        action,
                        Rule::InsideFolder,
                        "it is inside the run's folder".into(),
                    )
                }
            }
            Zone::Folder => self.ask(
                action,
                Rule::AskModeEdit,
                "in ask mode every edit asks (trust the folder to quiet it)".into(),
                Answer::Allow,
                Some(Grant::Folder(self.folder.clone())),
            ),
            Zone::Trusted => self.allow(
                action,
                Rule::TrustedFolder,
                "the folder is trusted on this computer".into(),
            ),
            Zone::Temporary if self.mode == Mode::Ask => {
                let root = self
                    .temporary
                    .iter()
                    .find(|folder| path.starts_with(folder))
                    .cloned();
                self.ask(
                    action,
                    Rule::AskModeEdit,
                    "in ask mode changing a temporary folder asks".into(),
                    Answer::Allow,
                    root.map(Grant::Folder),
                )
            }
            Zone::Temporary => self.allow(
                action,
                Rule::TemporaryFolder,
                "it is in a temporary folder".into(),
            ),
            Zone::Elsewhere if self.covered(path) => self.allow(
                action,
                Rule::RunRule,
                "an \"allow for this run\" answer covers its folder".into(),
            ),
            Zone::Elsewhere => self.ask_other_folder(action, path, "a change"),
        }
    }

    fn judge_network(&self, action: &Action, target: &str) -> Judgement {
        if !self.network {
            return self.refuse(
                action,
                Rule::NetworkOff,
                "this job runs with the network off".into(),
            );
        }
        if self.mode == Mode::Ask {
            return self.ask(
                action,
                Rule::AskModeNetwork,
                "in ask mode reaching the network asks".into(),
                Answer::Allow,
                Some(Grant::Host(host_of(target))),
            );
        }
        self.allow(
            action,
            Rule::NetworkOn,
            "the job runs with the network on".into(),
        )
    }

    fn judge_tool(&self, action: &Action, kind: &str) -> Judgement {
        if matches!(kind, "think" | "search" | "switch_mode" | "plan") {
            return self.allow(
                action,
                Rule::QuietTool,
                format!("a {kind} tool changes nothing"),
            );
        }
        if self.mode == Mode::Ask {
            return self.ask(
                action,
                Rule::AskModeTool,
                "in ask mode a tool call nothing else describes asks".into(),
                Answer::Allow,
                Some(Grant::Exact(action.hash())),
            );
        }
        if self.sandbox == SandboxStrength::Advisory {
            return self.ask(
                action,
                Rule::Unsandboxed,
                "no sandbox confines the engine's tools on this computer".into(),
                Answer::Deny,
                Some(Grant::Exact(action.hash())),
            );
        }
        self.allow(
            action,
            Rule::EngineTool,
            "the engine runs inside the sandbox".into(),
        )
    }

    /// Changing `path` in a folder other than the run's: asks once for that folder.
    fn ask_other_folder(&self, action: &Action, path: &Path, what: &str) -> Judgement {
        let folder = zones::grant_folder(path, &self.guard);
        let recommended = if zones::is_own_folder(path, self.guard.home()) {
            Answer::Allow
        } else {
            Answer::Deny
        };
        let (question, grant) = match folder {
            Some(folder) => (
                format!(
                    "Let this run change files in {}? It wants {what} at {}.",
                    folder.display(),
                    path.display()
                ),
                Grant::Folder(folder),
            ),
            None => (
                format!(
                    "Let this run change {} once? It wants {what} there, and that folder is too broad to hand over for the run.",
                    path.display()
                ),
                Grant::Exact(action.hash()),
            ),
        };
        let mut judgement = self.ask(
            action,
            Rule::OtherFolder,
            format!("{} is outside the run's folder", path.display()),
            recommended,
            Some(grant),
        );
        judgement.kind = "folder";
        judgement.question = question;
        judgement
    }

    /// A pending question the run's rules already answer goes ahead.
    fn apply_run_rules(&self, action: &Action, judgement: Judgement) -> Judgement {
        if !matches!(judgement.verdict, Verdict::Ask { .. }) {
            return judgement;
        }
        let rules = self.rules();
        let exact = Grant::Exact(action.hash());
        let covered = rules.contains(&exact)
            || judgement.grant.as_ref().is_some_and(|grant| {
                rules.iter().any(|rule| match (rule, grant) {
                    (Grant::Folder(rule), Grant::Folder(asked)) => asked.starts_with(rule),
                    (rule, asked) => rule == asked,
                })
            });
        if !covered {
            return judgement;
        }
        Judgement {
            verdict: Verdict::Allow,
            rule: Rule::RunRule.name().to_owned(),
            reason: format!(
                "an \"allow for this run\" answer covers it ({})",
                judgement.reason
            ),
            ..judgement
        }
    }

    /// `unattended` mode never waits: it takes the recommended answer.
    fn take_recommended(&self, judgement: Judgement) -> Judgement {
        let Verdict::Ask { recommended } = &judgement.verdict else {
            return judgement;
        };
        if self.mode != Mode::Unattended {
            return judgement;
        }
        let verdict = match recommended {
            Answer::Allow => Verdict::Allow,
            Answer::Deny => Verdict::Refuse {
                reason: format!(
                    "unattended mode asks nobody, and the recommended answer is deny: {}",
                    judgement.reason
                ),
            },
        };
        Judgement {
            verdict,
            unattended: true,
            ..judgement
        }
    }

    /// The guard's refusal of `path`, if any. Reading a folder that merely holds a protected
    /// path is fine (the sandbox hides it); changing it is not.
    fn guarded(&self, path: &Path, changes: bool) -> Option<String> {
        match self.guard.check_access(path) {
            Ok(()) => None,
            Err(refusal @ Refusal::Protected { .. }) => Some(refusal.to_string()),
            Err(refusal @ Refusal::HoldsProtected { .. }) if changes => Some(refusal.to_string()),
            Err(_) => None,
        }
    }

    fn zone(&self, path: &Path) -> Zone {
        if path.starts_with(&self.folder) {
            Zone::Folder
        } else if zones::inside_any(path, &self.trusted) {
            Zone::Trusted
        } else if zones::inside_any(path, &self.temporary) || zones::harmless_device(path) {
            Zone::Temporary
        } else {
            Zone::Elsewhere
        }
    }

    /// Whether a run rule lets the run change `path`.
    fn covered(&self, path: &Path) -> bool {
        self.rules()
            .iter()
            .any(|rule| matches!(rule, Grant::Folder(folder) if path.starts_with(folder)))
    }

    /// Commands and edits inside the folder go ahead: every mode but `ask`, and `ask` in a
    /// folder the owner trusts.
    fn quiet(&self) -> bool {
        self.mode != Mode::Ask || zones::inside_any(&self.folder, &self.trusted)
    }

    fn allow(&self, action: &Action, rule: Rule, reason: String) -> Judgement {
        self.judgement(action, Verdict::Allow, rule, reason, None)
    }

    fn refuse(&self, action: &Action, rule: Rule, reason: String) -> Judgement {
        let verdict = Verdict::Refuse {
            reason: reason.clone(),
        };
        self.judgement(action, verdict, rule, reason, None)
    }

    fn ask(
        &self,
        action: &Action,
        rule: Rule,
        reason: String,
        recommended: Answer,
        grant: Option<Grant>,
    ) -> Judgement {
        self.judgement(action, Verdict::Ask { recommended }, rule, reason, grant)
    }

    fn judgement(
        &self,
        action: &Action,
        verdict: Verdict,
        rule: Rule,
        reason: String,
        grant: Option<Grant>,
    ) -> Judgement {
        Judgement {
            verdict,
            rule: rule.name().to_owned(),
            reason,
            kind: action.kind(),
            question: action.question(&self.folder),
            grant,
            unattended: false,
        }
    }
}

/// `value` as compact JSON with object keys sorted at every level, whatever order the map
/// keeps them in (serde_json may be built to preserve insertion order).
pub fn canonical_text(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|key| {
                    let field = map.get(key).map(canonical_text).unwrap_or_default();
                    format!("{}:{field}", Value::String(key.clone()))
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_text).collect();
            format!("[{}]", items.join(","))
        }
        scalar => scalar.to_string(),
    }
}

/// `https://user@host:443/path` → `host:443`; a bare host stays as it is.
fn host_of(target: &str) -> String {
    let rest = target.split_once("://").map_or(target, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    host.to_ascii_lowercase()
}

/// `argv` as one shell-quoted line, for questions.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|word| {
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
            if plain {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;
