//! The files attached to a job's task, downloaded under the run's lease and shown to the
//! run alone.

use std::path::PathBuf;

use tether_protocol::attachments::Attachment;

/// One attachment on this computer: what the server said it is, and where its checked
/// copy lies (in the run's attachments folder, readable by the run's sandbox only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedAttachment {
    pub attachment: Attachment,
    pub path: PathBuf,
}
