//! Evidence the computer holds until its owner says: what is held, the owner's requests
//! about a held file (preview, release, discard), and how the computer answers them.
//!
//! A held file's description goes up with `held: true` and no bytes (`EvidenceMeta`). On
//! the job page its owner may ask to **preview** it (the bytes go to the server under a
//! one-time upload id and are kept at most [`PREVIEW_TTL_SECS`], never in the blob store),
//! **release** it (uploaded and kept like any evidence) or **discard** it (deleted on the
//! computer with its variants). The server asks with an `evidence.request` frame; the
//! computer answers at `POST /api/devices/self/evidence-uploads/{uploadId}`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Largest preview the server keeps, in bytes (32 MB).
pub const MAX_PREVIEW_BYTES: u64 = 32_000_000;
/// How long a preview is kept, in seconds.
pub const PREVIEW_TTL_SECS: u64 = 300;
/// Widest preview variant a capture tool makes, in pixels.
pub const PREVIEW_VARIANT_WIDTH: u32 = 320;

/// Which captures the computer holds rather than uploads (`tether-agent evidence hold …`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceHold {
    /// Screenshots (and their previews) are held; other files go up.
    #[default]
    Screenshots,
    /// Every file is held.
    All,
    /// Nothing is held.
    None,
}

impl EvidenceHold {
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceHold::Screenshots => "screenshots",
            EvidenceHold::All => "all",
            EvidenceHold::None => "none",
        }
    }
}

/// The computer's evidence settings, reported in `capabilities.evidence`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceSettings {
    /// `false` after `tether-agent evidence off`: everything is held and nothing can be
    /// released (409 `evidence_kept`).
    pub upload: bool,
    pub hold: EvidenceHold,
}

/// A smaller picture made from another evidence file and sent after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceVariant {
    /// A small image of a screenshot or picture, at most [`PREVIEW_VARIANT_WIDTH`] wide.
    Preview,
    /// A video's first frame.
    Poster,
}

impl EvidenceVariant {
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceVariant::Preview => "preview",
            EvidenceVariant::Poster => "poster",
        }
    }
}

/// What the capture tool measured of a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// What the owner asked of a held file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceAction {
    /// Send the bytes for a short look; the computer keeps holding the file.
    Preview,
    /// Send the bytes to be kept like any evidence; the computer marks the file released.
    Release,
    /// Delete the file and its variants on the computer; nothing is sent.
    Discard,
}

impl EvidenceAction {
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceAction::Preview => "preview",
            EvidenceAction::Release => "release",
            EvidenceAction::Discard => "discard",
        }
    }
}

/// Answer of `POST /api/jobs/{id}/evidence/{evidenceId}/preview`: the computer sent the
/// file; `GET /api/jobs/{id}/evidence/{evidenceId}/preview` serves it until `expiresAt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewReady {
    pub url: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
    pub size: u64,
    pub mime: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn settings_read_as_the_cli_spells_them() {
        let settings: EvidenceSettings =
            serde_json::from_value(json!({"upload": false, "hold": "all"})).unwrap();
        assert_eq!(settings.hold, EvidenceHold::All);
        assert_eq!(EvidenceHold::default(), EvidenceHold::Screenshots);
        assert_eq!(
            serde_json::to_value(EvidenceAction::Discard).unwrap(),
            json!("discard")
        );
        assert_eq!(
            serde_json::to_value(EvidenceDetails {
                width: Some(1280),
                height: Some(800),
                duration_ms: None,
            })
            .unwrap(),
            json!({"width": 1280, "height": 800})
        );
    }
}
