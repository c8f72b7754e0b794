//! What an ACP run really used, as its agent said it: its name and version at
//! `initialize`, the session's current mode and its model and thought level from
//! `session/new` (or `session/load`) and later `current_mode_update` notifications.
//!
//! Each change is handed to the run's lease, so the next progress call carries it, and the
//! last word goes with `complete`. What the agent did not say stays absent.

use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol::v1::schema::{
    Implementation, SessionConfigKind, SessionConfigOption, SessionConfigOptionCategory,
    SessionModeState,
};
use tether_protocol::report::ObservedRun;

use crate::run::lease::RunLease;

/// The run's record of what it uses, shared by the session's opening and its updates.
pub struct Observed {
    lease: Arc<RunLease>,
    seen: Mutex<ObservedRun>,
}

impl std::fmt::Debug for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observed")
            .field("seen", &self.seen)
            .finish()
    }
}

impl Observed {
    pub fn new(lease: Arc<RunLease>) -> Observed {
        Observed {
            lease,
            seen: Mutex::default(),
        }
    }

    /// Changes what was seen; a real change goes with the next progress call.
    pub fn update(&self, change: impl FnOnce(&mut ObservedRun)) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let before = seen.clone();
        change(&mut seen);
        if *seen != before {
            self.lease.observe(seen.clone().bounded());
        }
    }

    /// What goes with `complete`; `None` when the agent said nothing.
    pub fn current(&self) -> Option<ObservedRun> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .bounded();
        (!seen.is_empty()).then_some(seen)
    }
}

/// The agent's name and version from its `agentInfo`.
pub fn agent(seen: &mut ObservedRun, info: Option<&Implementation>) {
    if let Some(info) = info {
        seen.engine = Some(info.name.clone());
        seen.engine_version = Some(info.version.clone()).filter(|v| !v.is_empty());
    }
}

/// The session's mode, model and thought level as `session/new` or `session/load` said.
pub fn session(
    seen: &mut ObservedRun,
    modes: Option<&SessionModeState>,
    options: Option<&[SessionConfigOption]>,
) {
    if let Some(modes) = modes {
        seen.mode = Some(modes.current_mode_id.to_string());
    }
    for option in options.unwrap_or_default() {
        let SessionConfigKind::Select(select) = &option.kind else {
            continue;
        };
        let value = Some(select.current_value.to_string());
        match option.category {
            Some(SessionConfigOptionCategory::Model) => seen.model = value,
            Some(SessionConfigOptionCategory::ThoughtLevel) => seen.effort = value,
            Some(SessionConfigOptionCategory::Mode) if seen.mode.is_none() => seen.mode = value,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    #[test]
    fn the_agent_and_its_session_say_what_the_run_uses() -> Result<()> {
        let mut seen = ObservedRun::default();
        let info: Implementation =
            serde_json::from_value(json!({"name": "claude-code-acp", "version": "0.9.1"}))?;
        agent(&mut seen, Some(&info));
        let modes: SessionModeState = serde_json::from_value(json!({
            "currentModeId": "acceptEdits",
            "availableModes": [{"id": "acceptEdits", "name": "Accept edits"}]
        }))?;
        let options: Vec<SessionConfigOption> = serde_json::from_value(json!([
            {"id": "model", "name": "Model", "category": "model", "type": "select",
             "currentValue": "opus", "options": [{"value": "opus", "name": "Opus"}]},
            {"id": "effort", "name": "Effort", "category": "thought_level", "type": "select",
             "currentValue": "high", "options": [{"value": "high", "name": "High"}]}
        ]))?;
        session(&mut seen, Some(&modes), Some(&options));
        assert_eq!(
            seen,
            ObservedRun {
                engine: Some("claude-code-acp".into()),
                engine_version: Some("0.9.1".into()),
                model: Some("opus".into()),
                effort: Some("high".into()),
                mode: Some("acceptEdits".into()),
            }
        );
        let mut silent = ObservedRun::default();
        agent(&mut silent, None);
        session(&mut silent, None, None);
        assert!(silent.is_empty(), "what was not said stays absent");
        Ok(())
    }
}
