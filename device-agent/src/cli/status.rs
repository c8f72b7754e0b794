//! `tether-agent status`: what this computer is paired with, what it offers, and how it
//! treats the runs it takes (trust, approvals, evidence, questions waiting here).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tether_protocol::capabilities::{EngineKind, SandboxReport};
use tether_protocol::evidence::EvidenceHold;

use crate::local::decisions::{LocalDecisions, PendingDecision};
use crate::local::recipes::command_line;
use crate::local::seal_key::SealKeyPair;
use crate::local::state::{Config, DataDir, Recipe, SharedFolder, TOKEN_FILE};
use crate::local::token_store::{TokenPlace, TokenStore, SERVICE};
use crate::sandbox;

/// The status as `--json` prints it; a stable shape for scripts.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub paired: bool,
    pub server: Option<String>,
    pub device_id: Option<String>,
    pub name: Option<String>,
    pub account_id: Option<String>,
    pub install_id: String,
    pub data_dir: String,
    pub seal_key_fingerprint: Option<String>,
    /// Where the device token rests (`keyring` or `file`); absent without one.
    pub token_store: Option<TokenPlace>,
    pub folders: Vec<SharedFolder>,
    pub recipes: Vec<Recipe>,
    /// Every engine: the recipes, then the ACP engines.
    pub engines: Vec<EngineStatus>,
    /// Folders where ask mode works without asking.
    pub trusted: Vec<PathBuf>,
    /// `approvals on|off`.
    pub accept_web_approvals: bool,
    /// `evidence on|off`.
    pub evidence_upload: bool,
    /// `evidence hold screenshots|all|none` (with upload off, every file is held).
    pub evidence_hold: EvidenceHold,
    /// `console on|off`.
    pub console: bool,
    /// Questions runs on this computer wait on now (`decisions list`).
    pub decisions_waiting: usize,
    pub sandbox: SandboxReport,
}

/// One engine as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineStatus {
    pub name: String,
    pub kind: EngineKind,
    /// The command, as a person would type it.
    pub command: String,
    /// `false` for an ACP engine a recipe of the same name hides (the recipe runs).
    pub published: bool,
    /// An ACP engine's preset, network, variables (names), secrets and sign-in, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
}

/// Gathers the status from the data dir.
///
/// # Errors
/// When local files are unreadable.
pub fn gather(data_dir: &DataDir) -> Result<StatusReport> {
    let config = data_dir.load_or_init_config()?;
    let token_store = TokenStore::open(data_dir).load()?.map(|(_, place)| place);
    let pairing = config.pairing.as_ref();
    let seal_key_fingerprint = match SealKeyPair::load(data_dir) {
        Ok(pair) => pair.map(|pair| pair.public().fingerprint.clone()),
        Err(err) => Some(format!("unreadable: {err:#}")),
    };
    let pending = LocalDecisions::new(data_dir.clone()).list()?;
    Ok(StatusReport {
        paired: pairing.is_some() && token_store.is_some(),
        server: pairing.map(|p| p.server.clone()),
        device_id: pairing.map(|p| p.device_id.to_string()),
        name: pairing.map(|p| p.name.clone()),
        account_id: pairing.map(|p| p.account_id.to_string()),
        install_id: config.install_id.clone(),
        data_dir: data_dir.root().display().to_string(),
        seal_key_fingerprint,
        token_store,
        engines: engines_of(&config),
        trusted: config.trusted.clone(),
        accept_web_approvals: config.accept_web_approvals,
        evidence_upload: config.evidence_upload,
        evidence_hold: config.evidence_hold,
        console: config.console,
        decisions_waiting: waiting(&pending, Utc::now()),
        folders: config.folders,
        recipes: config.recipes,
        sandbox: sandbox::report(),
    })
}

/// The recipes, then the ACP engines, each with its command.
pub fn engines_of(config: &Config) -> Vec<EngineStatus> {
    let recipes = config.recipes.iter().map(|recipe| EngineStatus {
        name: recipe.name.clone(),
        kind: EngineKind::Recipe,
        command: command_line(recipe),
        published: true,
        settings: None,
    });
    let agents = config.engines.iter().map(|engine| EngineStatus {
        name: engine.name.clone(),
        kind: EngineKind::Acp,
        command: crate::local::acp_engines::command_line(engine),
        published: crate::local::acp_engines::selected(config, &engine.name).is_some(),
        settings: Some(crate::local::acp_engines::settings_line(engine)),
    });
    recipes.chain(agents).collect()
}

/// The decisions still open at `now` (an expired one's run has already given it up).
pub fn waiting(pending: &[PendingDecision], now: DateTime<Utc>) -> usize {
    pending
        .iter()
        .filter(|decision| decision.expires_at > now)
        .count()
}

/// The status as a person reads it.
pub fn render(report: &StatusReport) -> String {
    let mut out = String::new();
    match (&report.server, report.paired) {
        (Some(server), true) => {
            let _ = writeln!(
                out,
                "Paired as {} with {server}",
                report.name.as_deref().unwrap_or("?")
            );
            let _ = writeln!(
                out,
                "Device id: {}",
                report.device_id.as_deref().unwrap_or("?")
            );
        }
        _ => {
            let _ = writeln!(out, "Not paired. Pair with `tether-agent pair URL`.");
        }
    }
    if let Some(fingerprint) = &report.seal_key_fingerprint {
        let _ = writeln!(out, "Seal key: {fingerprint}");
    }
    match report.token_store {
        Some(TokenPlace::Keyring) => {
            let _ = writeln!(out, "Device token: in the keyring (service {SERVICE})");
        }
        Some(TokenPlace::File) => {
            let _ = writeln!(
                out,
                "Device token: in {} (mode 0600)",
                Path::new(&report.data_dir).join(TOKEN_FILE).display()
            );
        }
        None => {}
    }
    let _ = writeln!(out, "Data directory: {}", report.data_dir);
    let _ = writeln!(out, "{}", render_folders(&report.folders).trim_end());
    let _ = writeln!(out, "{}", render_engines(&report.engines).trim_end());
    let _ = writeln!(
        out,
        "{}",
        crate::policy::trust::render(&report.trusted).trim_end()
    );
    let _ = writeln!(
        out,
        "Web approvals: {}",
        if report.accept_web_approvals {
            "on (answers given on the web count here)"
        } else {
            "off (only `tether-agent decisions allow|deny` on this computer answers)"
        }
    );
    let _ = writeln!(
        out,
        "Evidence upload: {}",
        if report.evidence_upload {
            "on (a run's evidence files go up with its result)"
        } else {
            "off (evidence files stay on this computer; only their descriptions are sent)"
        }
    );
    let _ = writeln!(
        out,
        "Evidence held on this computer: {}",
        match (report.evidence_upload, report.evidence_hold) {
            (false, _) => "every file (evidence upload is off)",
            (true, EvidenceHold::Screenshots) => "screenshots and their previews",
            (true, EvidenceHold::All) => "every file",
            (true, EvidenceHold::None) => "nothing",
        }
    );
    let _ = writeln!(
        out,
        "Console: {}",
        if report.console {
            "on (the owner's console may run commands here, edit shared files and watch jobs)"
        } else {
            "off (console sessions are refused)"
        }
    );
    let _ = match report.decisions_waiting {
        0 => writeln!(out, "Questions waiting on this computer: none"),
        count => writeln!(
            out,
            "Questions waiting on this computer: {count} (see `tether-agent decisions list`)"
        ),
    };
    let _ = write!(out, "{}", render_sandbox(&report.sandbox));
    out
}

pub fn render_engines(engines: &[EngineStatus]) -> String {
    if engines.is_empty() {
        return "Engines: none (add a recipe with `tether-agent recipe add NAME -- PROGRAM [ARGS...]`, a coding agent with `tether-agent engine add NAME --preset claude-code|codex|gemini|qwen`, or any other with `--acp -- PROGRAM [ARGS...]`)\n".to_owned();
    }
    let mut out = "Engines:\n".to_owned();
    for engine in engines {
        let kind = match engine.kind {
            EngineKind::Recipe => "recipe",
            EngineKind::Acp => "acp",
        };
        let hidden = if engine.published {
            ""
        } else {
            "  (hidden: a recipe has this name)"
        };
        let _ = writeln!(
            out,
            "  {:<20} {kind:<7} {}{hidden}",
            engine.name, engine.command
        );
        if let Some(settings) = &engine.settings {
            let _ = writeln!(out, "  {:<20} {:<7} {settings}", "", "");
        }
    }
    out
}

pub fn render_folders(folders: &[SharedFolder]) -> String {
    if folders.is_empty() {
        return "Shared folders: none (share one with `tether-agent folders share LABEL PATH`)\n"
            .to_owned();
    }
    let mut out = "Shared folders:\n".to_owned();
    for folder in folders {
        let _ = writeln!(out, "  {:<20} {}", folder.label, folder.path.display());
    }
    out
}

pub fn render_recipes(recipes: &[Recipe]) -> String {
    if recipes.is_empty() {
        return "Recipes: none (add one with `tether-agent recipe add NAME -- PROGRAM [ARGS...]`)\n".to_owned();
    }
    let mut out = "Recipes:\n".to_owned();
    for recipe in recipes {
        let _ = writeln!(out, "  {:<20} {}", recipe.name, command_line(recipe));
    }
    out
}

pub fn render_sandbox(report: &SandboxReport) -> String {
    let strength = serde_json::to_value(report.strength)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut out = format!("Sandbox: {} ({strength})\n", report.backend);
    for reason in &report.reasons {
        let _ = writeln!(out, "  {reason}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::capabilities::{Guarantees, SandboxStrength};
    use tether_protocol::{DecisionId, JobId};

    fn config() -> Config {
        serde_json::from_value(serde_json::json!({
            "installId": "i",
            "recipes": [{"name": "tests", "program": "make", "args": ["test"]}],
            "engines": [
                {"name": "claude", "program": "npx", "args": ["claude-code-acp"]},
                {"name": "tests", "program": "other-acp"}
            ],
            "trusted": ["/home/me/code/app"],
            "acceptWebApprovals": false,
            "evidenceUpload": false,
        }))
        .unwrap_or_else(|err| panic!("{err}"))
    }

    fn pending(id: &str, expires_in_secs: i64) -> PendingDecision {
        let now = Utc::now();
        PendingDecision {
            id: DecisionId::parse(id).unwrap_or_else(|err| panic!("{err}")),
            job_id: JobId::parse("job1").unwrap_or_else(|err| panic!("{err}")),
            kind: "command".into(),
            question: "Run `make`?".into(),
            action: serde_json::json!({}),
            action_hash: "h".into(),
            created_at: now,
            expires_at: now + chrono::Duration::seconds(expires_in_secs),
            preview: None,
        }
    }

    fn report(config: &Config, decisions_waiting: usize) -> StatusReport {
        StatusReport {
            paired: false,
            server: None,
            device_id: None,
            name: None,
            account_id: None,
            install_id: config.install_id.clone(),
            data_dir: "/data".into(),
            seal_key_fingerprint: None,
            token_store: Some(TokenPlace::Keyring),
            folders: config.folders.clone(),
            recipes: config.recipes.clone(),
            engines: engines_of(config),
            trusted: config.trusted.clone(),
            accept_web_approvals: config.accept_web_approvals,
            evidence_upload: config.evidence_upload,
            evidence_hold: config.evidence_hold,
            console: config.console,
            decisions_waiting,
            sandbox: SandboxReport {
                backend: "landlock".into(),
                strength: SandboxStrength::Reduced,
                guarantees: Guarantees::default(),
                reasons: Vec::new(),
            },
        }
    }

    #[test]
    fn engines_are_the_recipes_then_the_acp_engines() {
        let engines: Vec<(String, EngineKind, String, bool)> = engines_of(&config())
            .into_iter()
            .map(|e| (e.name, e.kind, e.command, e.published))
            .collect();
        assert_eq!(
            engines,
            [
                ("tests".into(), EngineKind::Recipe, "make test".into(), true),
                (
                    "claude".into(),
                    EngineKind::Acp,
                    "npx claude-code-acp".into(),
                    true
                ),
                ("tests".into(), EngineKind::Acp, "other-acp".into(), false),
            ]
        );
    }

    #[test]
    fn only_open_questions_are_counted() {
        let now = Utc::now();
        let decisions = [pending("d1", 60), pending("d2", -1), pending("d3", 600)];
        assert_eq!(waiting(&decisions, now), 2);
        assert_eq!(waiting(&[], now), 0);
    }

    #[test]
    fn the_status_shows_trust_approvals_evidence_and_questions() {
        let text = render(&report(&config(), 2));
        for expected in [
            "Engines:",
            "  tests                recipe  make test",
            "  claude               acp     npx claude-code-acp",
            "  tests                acp     other-acp  (hidden: a recipe has this name)",
            "  /home/me/code/app",
            "Web approvals: off",
            "Evidence upload: off",
            "Evidence held on this computer: every file (evidence upload is off)",
            "Questions waiting on this computer: 2 (see `tether-agent decisions list`)",
            "Device token: in the keyring (service tether-agent)",
            "Sandbox: landlock (reduced)",
        ] {
            assert!(text.contains(expected), "{expected:?} not in\n{text}");
        }
        let json = serde_json::to_value(report(&config(), 0)).unwrap_or_default();
        assert_eq!(json["acceptWebApprovals"], false);
        assert_eq!(json["evidenceUpload"], false);
        assert_eq!(json["evidenceHold"], "screenshots");
        assert_eq!(json["decisionsWaiting"], 0);
        assert_eq!(json["tokenStore"], "keyring");
        assert_eq!(json["trusted"], serde_json::json!(["/home/me/code/app"]));
        assert_eq!(
            json["engines"][1],
            serde_json::json!({
                "name": "claude", "kind": "acp", "command": "npx claude-code-acp", "published": true,
                "settings": "network as the job says",
            })
        );

        let fresh: Config = serde_json::from_value(serde_json::json!({"installId": "i"}))
            .unwrap_or_else(|err| panic!("{err}"));
        let mut unpaired = report(&fresh, 0);
        unpaired.token_store = None;
        assert_eq!(
            serde_json::to_value(&unpaired).unwrap_or_default()["tokenStore"],
            serde_json::Value::Null
        );
        let text = render(&unpaired);
        assert!(!text.contains("Device token"), "{text}");
        let mut in_file = report(&fresh, 0);
        in_file.token_store = Some(TokenPlace::File);
        assert!(
            render(&in_file).contains("Device token: in /data/device-token (mode 0600)"),
            "{}",
            render(&in_file)
        );
        for expected in [
            "Engines: none",
            "No trusted folders.",
            "Web approvals: on",
            "Evidence upload: on",
            "Evidence held on this computer: screenshots and their previews",
            "Questions waiting on this computer: none",
        ] {
            assert!(text.contains(expected), "{expected:?} not in\n{text}");
        }
    }
}
