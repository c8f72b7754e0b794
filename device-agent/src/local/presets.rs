//! The coding agents Tether knows how to set up by name (`engine add NAME --preset …`):
//! how each starts in ACP mode, which variables carry its endpoint and key, where it keeps
//! its state and its owner's sign-in, which hosts its model lives on, and its quirks.
//!
//! Everything here is data. What a run does with it is `engines::acp::outfit`; what the
//! owner reads about it is docs/ENGINES.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A preset's name, as `--preset` takes it and `config.json` keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PresetName {
    ClaudeCode,
    Codex,
    Gemini,
    Qwen,
}

impl PresetName {
    pub const ALL: [PresetName; 4] = [
        PresetName::ClaudeCode,
        PresetName::Codex,
        PresetName::Gemini,
        PresetName::Qwen,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PresetName::ClaudeCode => "claude-code",
            PresetName::Codex => "codex",
            PresetName::Gemini => "gemini",
            PresetName::Qwen => "qwen",
        }
    }

    /// The preset named `name`; the error lists the known ones.
    ///
    /// # Errors
    /// When no preset has that name.
    pub fn parse(name: &str) -> Result<PresetName, String> {
        PresetName::ALL
            .into_iter()
            .find(|preset| preset.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = PresetName::ALL.iter().map(|p| p.as_str()).collect();
                format!(
                    "there is no preset {name:?}; the presets are {}",
                    known.join(", ")
                )
            })
    }

    pub fn preset(self) -> &'static Preset {
        match self {
            PresetName::ClaudeCode => &CLAUDE_CODE,
            PresetName::Codex => &CODEX,
            PresetName::Gemini => &GEMINI,
            PresetName::Qwen => &QWEN,
        }
    }
}

/// What Tether knows of one coding agent.
#[derive(Debug)]
pub struct Preset {
    /// What people call it.
    pub title: &'static str,
    /// The npm package that installs it, for the advice when it is missing.
    pub package: &'static str,
    /// Its program, looked up on `PATH` unless `--program` names one.
    pub program: &'static str,
    /// The arguments that make it speak ACP on its stdio.
    pub args: &'static [&'static str],
    /// Variables that carry its API key: given with `--secret`, never `--env`.
    pub key_vars: &'static [&'static str],
    /// Variables that carry its model's base URL; when one is set, `network: model` allows
    /// exactly that origin instead of [`Preset::hosts`].
    pub base_url_vars: &'static [&'static str],
    /// Where its model lives when no base URL is set (the origins `network: model` allows).
    pub hosts: &'static [&'static str],
    /// Variables pointing at its state folders, each a folder under the engine's own home
    /// (or, with `--use-my-sign-in`, the same folder under the owner's home); an empty
    /// folder is the home itself.
    pub state_vars: &'static [(&'static str, &'static str)],
    /// Its owner's sign-in, relative to the home folder: what `--use-my-sign-in` grants.
    pub sign_in: &'static [&'static str],
    /// Whether it finds its sign-in folder only under `$HOME` (no variable moves it), so
    /// with `--use-my-sign-in` its `HOME` is the owner's.
    pub sign_in_needs_home: bool,
    /// The command that signs it in on this computer.
    pub sign_in_command: &'static str,
    /// Variables set unless the owner sets them: no telemetry, no update checks, no
    /// traffic beyond the model.
    pub defaults: &'static [(&'static str, &'static str)],
    /// Files written into the engine's own home when missing (settings that turn off usage
    /// statistics and update checks), relative to it.
    pub home_files: &'static [(&'static str, &'static str)],
    /// A file under the engine's own home where the agent writes the API key it was
    /// authenticated with, in plain text (Codex's `auth.json`): removed after each run when
    /// it holds a key (`auth_mode` `apikey`), since the key comes from the vault every time.
    pub written_key_file: Option<&'static str>,
    /// Whether the agent reads files through this computer (`fs/read_text_file`). Gemini CLI
    /// and Qwen Code cannot create a new file when that read is refused (a missing file is
    /// an error they do not recognise), so they read from the folder they are confined to.
    pub client_reads_files: bool,
}

impl Preset {
    /// Arguments the preset adds from the engine's variables, for agents that ignore a
    /// variable and want a setting instead (Codex's base URL).
    pub fn args_from_env(&self, env: &BTreeMap<String, String>) -> Vec<String> {
        if !std::ptr::eq(self, &CODEX) {
            return Vec::new();
        }
        match env.get("OPENAI_BASE_URL") {
            Some(url) => codex_base_url_args(url),
            None => Vec::new(),
        }
    }
}

/// Codex reads its base URL from its own configuration, not from `OPENAI_BASE_URL`: a
/// provider like the built-in one, at that URL, with the same key variable.
fn codex_base_url_args(url: &str) -> Vec<String> {
    let quoted = toml_string(url);
    vec![
        "-c".to_owned(),
        format!(
            "model_providers.tether={{ name = \"OpenAI\", base_url = {quoted}, env_key = \"OPENAI_API_KEY\", wire_api = \"responses\", supports_websockets = false }}"
        ),
        "-c".to_owned(),
        "model_provider=\"tether\"".to_owned(),
    ]
}

/// `value` as a TOML basic string.
fn toml_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Claude Code through Zed's ACP adapter.
pub static CLAUDE_CODE: Preset = Preset {
    title: "Claude Code",
    package: "@zed-industries/claude-code-acp",
    program: "claude-code-acp",
    args: &[],
    key_vars: &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"],
    base_url_vars: &["ANTHROPIC_BASE_URL"],
    hosts: &["https://api.anthropic.com"],
    state_vars: &[("CLAUDE_CONFIG_DIR", ".claude")],
    sign_in: &[".claude", ".claude.json"],
    sign_in_needs_home: false,
    sign_in_command: "claude /login",
    defaults: &[
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        // It is confined (by Tether): without this, an agent running as root refuses to
        // start a session at all.
        ("IS_SANDBOX", "1"),
    ],
    home_files: &[],
    written_key_file: None,
    client_reads_files: true,
};

/// OpenAI's Codex through Zed's ACP adapter. Its own sandbox is off (it cannot nest inside
/// Tether's, which confines it instead) and its approvals are on, so ask mode asks.
pub static CODEX: Preset = Preset {
    title: "Codex",
    package: "@zed-industries/codex-acp",
    program: "codex-acp",
    args: &[
        "-c",
        "sandbox_mode=\"danger-full-access\"",
        "-c",
        "approval_policy=\"untrusted\"",
    ],
    key_vars: &["OPENAI_API_KEY", "CODEX_API_KEY"],
    base_url_vars: &["OPENAI_BASE_URL"],
    hosts: &[
        "https://api.openai.com",
        "https://chatgpt.com",
        "https://auth.openai.com",
    ],
    state_vars: &[("CODEX_HOME", ".codex")],
    sign_in: &[".codex"],
    sign_in_needs_home: false,
    sign_in_command: "codex login",
    defaults: &[],
    home_files: &[],
    written_key_file: Some(".codex/auth.json"),
    client_reads_files: true,
};

/// Google's Gemini CLI in its ACP mode.
pub static GEMINI: Preset = Preset {
    title: "Gemini CLI",
    package: "@google/gemini-cli",
    program: "gemini",
    args: &["--experimental-acp"],
    key_vars: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    base_url_vars: &["GOOGLE_GEMINI_BASE_URL"],
    hosts: &[
        "https://generativelanguage.googleapis.com",
        "https://cloudcode-pa.googleapis.com",
        "https://oauth2.googleapis.com",
    ],
    // Gemini keeps `.gemini` under this folder instead of the home folder.
    state_vars: &[("GEMINI_CLI_HOME", "")],
    sign_in: &[".gemini"],
    sign_in_needs_home: false,
    sign_in_command: "gemini (then choose \"Login with Google\")",
    defaults: &[("GEMINI_TELEMETRY_ENABLED", "false")],
    home_files: &[(".gemini/settings.json", GEMINI_SETTINGS)],
    written_key_file: None,
    client_reads_files: false,
};

/// Qwen Code's settings in an engine's own home: no usage statistics, no update checks.
const QWEN_SETTINGS: &str = r#"{
  "privacy": { "usageStatisticsEnabled": false },
  "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false }
}
"#;

/// Gemini CLI's settings in an engine's own home: signed in with the key in
/// `GEMINI_API_KEY`, no usage statistics (they go to Google whatever the model endpoint),
/// no telemetry, no update checks.
const GEMINI_SETTINGS: &str = r#"{
  "security": { "auth": { "selectedType": "gemini-api-key" } },
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false },
  "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false }
}
"#;

/// Qwen Code in its ACP mode (OpenAI-compatible endpoints, or its own sign-in).
pub static QWEN: Preset = Preset {
    title: "Qwen Code",
    package: "@qwen-code/qwen-code",
    program: "qwen",
    args: &["--experimental-acp"],
    key_vars: &["OPENAI_API_KEY", "DASHSCOPE_API_KEY"],
    base_url_vars: &["OPENAI_BASE_URL"],
    hosts: &[
        "https://dashscope.aliyuncs.com",
        "https://dashscope-intl.aliyuncs.com",
        "https://chat.qwen.ai",
        "https://portal.qwen.ai",
    ],
    state_vars: &[],
    sign_in: &[".qwen"],
    sign_in_needs_home: true,
    sign_in_command: "qwen (then choose \"Qwen OAuth\")",
    defaults: &[],
    home_files: &[(".qwen/settings.json", QWEN_SETTINGS)],
    written_key_file: None,
    client_reads_files: false,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::origins::Origin;

    #[test]
    fn presets_are_named_one_way() {
        for preset in PresetName::ALL {
            assert_eq!(PresetName::parse(preset.as_str()), Ok(preset));
            let json = serde_json::to_value(preset).unwrap_or_default();
            assert_eq!(json, serde_json::json!(preset.as_str()));
        }
        let unknown = PresetName::parse("claude");
        assert!(
            unknown
                .as_ref()
                .is_err_and(|why| why.contains("claude-code, codex")),
            "{unknown:?}"
        );
    }

    #[test]
    fn every_preset_host_is_an_https_origin() {
        for preset in PresetName::ALL {
            for host in preset.preset().hosts {
                let origin = Origin::parse(host).unwrap_or_else(|why| panic!("{why}"));
                assert_eq!((origin.scheme.as_str(), origin.port), ("https", 443));
            }
        }
    }

    #[test]
    fn codex_gets_its_base_url_as_a_setting_quoted_as_toml() {
        let mut env = BTreeMap::new();
        assert!(CODEX.args_from_env(&env).is_empty());
        env.insert(
            "OPENAI_BASE_URL".to_owned(),
            "http://127.0.0.1:9/v1\" , x = \"y".to_owned(),
        );
        let args = CODEX.args_from_env(&env);
        assert_eq!(args.len(), 4);
        assert!(
            args[1].contains(r#"base_url = "http://127.0.0.1:9/v1\" , x = \"y""#),
            "{args:?}"
        );
        assert!(CLAUDE_CODE.args_from_env(&env).is_empty());
    }
}
