//! What confinement this agent gives the programs it runs: in this version, none.
//!
//! The report is truthful: recipes run as the user, with the user's permissions. The same
//! report goes to the server in every heartbeat, so the web never shows more than is true.

use serde_json::Map;
use tether_protocol::capabilities::{SandboxReport, SandboxStrength};

/// The sandbox report of this version.
pub fn report() -> SandboxReport {
    SandboxReport {
        backend: "none".to_owned(),
        strength: SandboxStrength::Advisory,
        guarantees: Map::new(),
        reasons: vec![
            "no OS sandbox is implemented in this version; recipes run with your user's permissions"
                .to_owned(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_claims_nothing() {
        let json = serde_json::to_value(report()).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "backend": "none",
                "strength": "advisory",
                "guarantees": {},
                "reasons": ["no OS sandbox is implemented in this version; recipes run with your user's permissions"],
            })
        );
    }
}
