//! `engine-checks.json`: the last `engine check` of each ACP engine, by name, published
//! with the engine in `capabilities.engines[].check` so the Computers page can say whether
//! it starts.
//!
//! Written atomically (0600) under the `engine-checks.lock` file lock, so two checks at once
//! keep both; an unreadable file is no checks at all (a check is advice, never a gate).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use tether_protocol::capabilities::{Engine, EngineCheck, EngineKind};

use super::state::DataDir;

pub const FILE: &str = "engine-checks.json";
const LOCK_FILE: &str = "engine-checks.lock";

/// The last check of each engine, by engine name.
pub type Checks = BTreeMap<String, EngineCheck>;

/// Every stored check; none when the file is absent or unreadable.
pub fn load(data_dir: &DataDir) -> Checks {
    match read(data_dir) {
        Ok(checks) => checks,
        Err(err) => {
            tracing::warn!("the engine checks are unreadable, so none are published: {err:#}");
            Checks::new()
        }
    }
}

/// Keeps `check` as the last check of `engine`.
///
/// # Errors
/// The data dir cannot be locked or written.
pub fn save(data_dir: &DataDir, engine: &str, check: &EngineCheck) -> Result<()> {
    let _lock = data_dir.lock_file(LOCK_FILE)?;
    let mut checks = read(data_dir).unwrap_or_default();
    checks.insert(engine.to_owned(), check.clone().bounded());
    let mut bytes = serde_json::to_vec_pretty(&checks)?;
    bytes.push(b'\n');
    data_dir.write_file(FILE, &bytes)
}

/// The published ACP engines with their last check (a recipe has none).
pub fn attach(engines: &mut [Engine], checks: &Checks) {
    for engine in engines.iter_mut().filter(|e| e.kind == EngineKind::Acp) {
        engine.check = checks.get(&engine.name).cloned().map(EngineCheck::bounded);
    }
}

fn read(data_dir: &DataDir) -> Result<Checks> {
    let Some(bytes) = data_dir.read_file(FILE)? else {
        return Ok(Checks::new());
    };
    serde_json::from_slice(&bytes).with_context(|| format!("{FILE} is not valid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::capabilities::CheckedAgent;

    fn checked(ok: bool) -> EngineCheck {
        EngineCheck {
            checked_at: 1_700_000_000_000,
            ok,
            agent: Some(CheckedAgent {
                name: "Claude Code".to_owned(),
                version: "0.16.2".to_owned(),
            }),
            protocol_version: Some(1),
            load_session: true,
            auth_methods: Vec::new(),
            problem: None,
            took_ms: 1200,
        }
    }

    #[test]
    fn checks_are_kept_by_engine_and_published_with_acp_engines_only() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let data_dir =
            DataDir::resolve(Some(tmp.path().join("data"))).unwrap_or_else(|err| panic!("{err}"));
        assert!(load(&data_dir).is_empty());
        save(&data_dir, "claude", &checked(false)).unwrap_or_else(|err| panic!("{err}"));
        save(&data_dir, "claude", &checked(true)).unwrap_or_else(|err| panic!("{err}"));
        save(&data_dir, "codex", &checked(false)).unwrap_or_else(|err| panic!("{err}"));
        let checks = load(&data_dir);
        assert_eq!(checks.len(), 2);
        assert_eq!(checks.get("claude").map(|c| c.ok), Some(true));
        let mut engines = vec![
            Engine {
                name: "claude".to_owned(),
                kind: EngineKind::Acp,
                check: None,
            },
            Engine {
                name: "codex".to_owned(),
                kind: EngineKind::Recipe,
                check: None,
            },
            Engine {
                name: "gemini".to_owned(),
                kind: EngineKind::Acp,
                check: None,
            },
        ];
        attach(&mut engines, &checks);
        let attached: Vec<Option<bool>> = engines
            .iter()
            .map(|e| e.check.as_ref().map(|c| c.ok))
            .collect();
        assert_eq!(attached, [Some(true), None, None]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(data_dir.path(FILE))
                .map(|meta| meta.permissions().mode() & 0o777)
                .unwrap_or_default();
            assert_eq!(mode, 0o600);
        }
    }

    #[test]
    fn an_unreadable_file_is_no_checks() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let data_dir =
            DataDir::resolve(Some(tmp.path().join("data"))).unwrap_or_else(|err| panic!("{err}"));
        data_dir
            .write_file(FILE, b"{not json")
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(load(&data_dir).is_empty());
        save(&data_dir, "claude", &checked(true)).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(load(&data_dir).len(), 1);
    }
}
