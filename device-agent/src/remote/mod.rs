//! Talking to the Tether server.
//!
//! - [`client`]: every HTTP call to the server, with its answers decoded into meanings
//!   ([`client::RemoteError`]: revoked, stale lease, rate limited, …) and the outage
//!   episodes ([`client::Connectivity`]); it also builds the event stream's request;
//! - [`events`]: the WebSocket event stream, a hint that wakes the daemon;
//! - [`console_socket`]: the device's end of an owner's console session, frames moved both
//!   ways and never read (they are sealed end to end);
//! - [`frames`]: the frames answered outside any run (`file.request`, `secret.save`);
//! - [`pairing`]: `pair` and `unpair`;
//! - [`backoff`]: exponential backoff with full jitter, for every retry.
//!
//! **Architecture Invariant:** [`client`] is the only code that talks to the Tether server.
//! Nothing here runs a job: runs use the client, the client knows nothing of runs.

pub mod backoff;
pub mod client;
pub mod console_socket;
pub mod events;
pub mod frames;
pub mod pairing;
