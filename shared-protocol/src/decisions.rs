//! Decisions: questions a run asks its owner.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{DecisionId, DeviceId, JobId};

/// Where a decision is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionState {
    Pending,
    Answered,
    Expired,
    Withdrawn,
}

/// The answer to a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Allow,
    Deny,
}

/// How far an allow reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Once,
    Session,
}

/// A decision as the web sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub id: DecisionId,
    pub job_id: JobId,
    pub device_id: DeviceId,
    pub kind: String,
    pub question: String,
    pub action: serde_json::Value,
    pub state: DecisionState,
    pub answer: Option<Answer>,
    pub scope: Option<Scope>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}
