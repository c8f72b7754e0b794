//! Devices as the web sees them, and the device's own view of itself.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::capabilities::{Capabilities, SealKey};
use crate::ids::{AccountId, DeviceId, JobId};
use crate::lease::LeaseToken;

/// A paired computer in `GET /api/devices`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub id: DeviceId,
    pub name: String,
    pub platform: String,
    /// Heard from within the online window.
    pub online: bool,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub capabilities: Option<Capabilities>,
    /// The pinned seal key (the first the device reported).
    pub seal_key: Option<SealKey>,
    /// The device later reported another key; secrets are refused until it pairs again.
    pub seal_key_mismatch: bool,
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A device in the platform admin's list: any account's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdminDevice {
    pub account_id: AccountId,
    #[serde(flatten)]
    pub device: Device,
}

/// `PATCH /api/devices/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenameParams {
    pub name: String,
}

/// `GET /api/devices/self`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceSelf {
    pub device_id: DeviceId,
    pub name: String,
    pub account_id: AccountId,
}

/// A run the device holds, reported with each heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldLease {
    pub job_id: JobId,
    pub lease_token: LeaseToken,
}

/// `POST /api/devices/self/heartbeat`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatParams {
    pub capabilities: Capabilities,
    #[serde(default)]
    pub running: Vec<HeldLease>,
}

/// A lease the heartbeat extended.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseStatus {
    pub job_id: JobId,
    pub lease_expires_at: DateTime<Utc>,
    pub cancel_requested: bool,
}

/// The pace the server wants from its agents, so a fleet is tuned from one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Intervals {
    pub heartbeat_secs: u64,
    pub lease_secs: u64,
}

/// Answer of a heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatResponse {
    pub server_time: DateTime<Utc>,
    /// Leases still held, with their new expiry.
    pub leases: Vec<LeaseStatus>,
    /// Runs the device reported that it no longer holds: stop them now.
    pub lost: Vec<JobId>,
    /// Jobs queued for this device.
    pub queued: u64,
    pub intervals: Intervals,
}
