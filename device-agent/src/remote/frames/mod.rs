//! The frames of the event stream that are answered outside any run: each handler does its
//! work off the stream's task and answers the server itself.
//!
//! - [`file_request`]: a listing, a file or one file's diff since the run's start, of a
//!   job's folder, read live for the web;
//! - [`secret_save`]: a sealed secret, opened into the vault and answered (saved or refused,
//!   never the value);
//! - [`evidence_request`]: a held evidence file previewed, released or discarded for its
//!   owner (the bytes read again and sent, or the file deleted, or a refusal);
//! - [`redaction`]: what the live file view hides in a file's text, in linear time.

pub mod evidence_request;
pub mod file_request;
pub mod redaction;
pub mod secret_save;

use std::sync::Arc;

use crate::local::journal::Journal;
use crate::local::state::{Config, DataDir};
use crate::policy::guard::Guard;
use crate::remote::client::DeviceClient;

/// What a frame handler works with: the server to answer, the data dir and the guard built
/// for it, the run journal, and the owner's configuration as it is on disk when the handler
/// gets to it.
pub struct FrameContext {
    pub client: DeviceClient,
    pub data_dir: DataDir,
    pub guard: Guard,
    pub journal: Arc<Journal>,
    /// Reads the configuration now (the last good one when it cannot be read).
    pub config: Box<dyn FnOnce() -> Config + Send>,
}
