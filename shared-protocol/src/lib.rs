//! Tether's wire protocol, version 1.
//!
//! The single source of truth for what crosses the network between the web, the server and
//! the agent on each paired computer. Types only: no I/O and no cryptography. A secret's
//! sealed box travels here as opaque JSON; sealing, opening and the numbered channels are
//! `tether-seal`'s.

pub mod attachments;
pub mod auth;
pub mod capabilities;
pub mod changes;
pub mod console;
pub mod credential_files;
pub mod decisions;
pub mod devices;
pub mod engine_sessions;
pub mod error;
pub mod evidence;
pub mod files;
pub mod frames;
pub mod git;
pub mod ids;
pub mod jobs;
pub mod lease;
pub mod pairing;
pub mod push;
pub mod report;
pub mod routes;
pub mod secrets;
pub mod sites;
pub mod spaces;
pub mod task_context;
pub mod text;

pub use error::{Code, ErrorBody, ErrorDetail};
pub use ids::{
    AccountId, AttachmentId, DecisionId, DeliveryId, DeviceId, IdError, InvitationId, JobId,
    SessionId, SpaceId, SubscriptionId, TokenId, UserId,
};
pub use lease::LeaseToken;

/// The protocol version this crate describes, sent by agents in [`routes::PROTOCOL_HEADER`].
pub const PROTOCOL_VERSION: u32 = 1;
