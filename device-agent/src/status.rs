//! `tether-agent status`: what this computer is paired with and what it offers.

use std::fmt::Write as _;

use anyhow::Result;
use serde::Serialize;
use tether_protocol::capabilities::SandboxReport;

use crate::recipes::command_line;
use crate::sandbox;
use crate::seal_key::SealKeyPair;
use crate::state::{DataDir, Recipe, SharedFolder};

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
    pub folders: Vec<SharedFolder>,
    pub recipes: Vec<Recipe>,
    pub sandbox: SandboxReport,
}

/// Gathers the status from the data dir.
///
/// # Errors
/// When local files are unreadable.
pub fn gather(data_dir: &DataDir) -> Result<StatusReport> {
    let config = data_dir.load_or_init_config()?;
    let has_token = data_dir.load_token()?.is_some();
    let pairing = config.pairing.as_ref();
    let seal_key_fingerprint = match SealKeyPair::load(data_dir) {
        Ok(pair) => pair.map(|pair| pair.public().fingerprint.clone()),
        Err(err) => Some(format!("unreadable: {err:#}")),
    };
    Ok(StatusReport {
        paired: pairing.is_some() && has_token,
        server: pairing.map(|p| p.server.clone()),
        device_id: pairing.map(|p| p.device_id.to_string()),
        name: pairing.map(|p| p.name.clone()),
        account_id: pairing.map(|p| p.account_id.to_string()),
        install_id: config.install_id.clone(),
        data_dir: data_dir.root().display().to_string(),
        seal_key_fingerprint,
        folders: config.folders,
        recipes: config.recipes,
        sandbox: sandbox::report(),
    })
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
    let _ = writeln!(out, "Data directory: {}", report.data_dir);
    let _ = writeln!(out, "{}", render_folders(&report.folders).trim_end());
    let _ = writeln!(out, "{}", render_recipes(&report.recipes).trim_end());
    let _ = write!(out, "{}", render_sandbox(&report.sandbox));
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
