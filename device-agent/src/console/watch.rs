//! Watch: a running job's output, forwarded read-only from its tap
//! ([`crate::run::watch`]) — the lines the job reports (its program's output, a coding
//! agent's messages and its terminals' output under their `$` lines), saved secret values
//! already hidden. Nothing goes the other way: a job cannot be typed into.
//!
//! Chunks are coalesced up to [`MAX_CHUNK_BYTES`]; a watcher too slow for the job is told how
//! many lines it missed. [`ConsoleReply::WatchEnded`] says when the job is not running here,
//! or when it stops.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use tether_protocol::console::ConsoleReply;
use tether_protocol::JobId;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc};

use crate::run::watch::Taps;

/// The most bytes one [`ConsoleReply::WatchOutput`] carries.
pub const MAX_CHUNK_BYTES: usize = 32 * 1024;

/// The receiver of `job_id`'s output, or the reply saying it is not running here.
///
/// # Errors
/// The [`ConsoleReply::WatchEnded`] to send.
pub fn subscribe(
    taps: &Taps,
    job_id: &JobId,
) -> Result<broadcast::Receiver<Arc<[u8]>>, ConsoleReply> {
    taps.subscribe(job_id)
        .ok_or_else(|| ConsoleReply::WatchEnded {
            job_id: job_id.clone(),
            reason: "that job is not running on this computer".to_owned(),
        })
}

/// Forwards `job_id`'s output to `replies` until the job stops (or the session does).
pub async fn forward(
    job_id: JobId,
    mut output: broadcast::Receiver<Arc<[u8]>>,
    replies: mpsc::Sender<ConsoleReply>,
) {
    loop {
        let mut chunk = match output.recv().await {
            Ok(first) => first.to_vec(),
            Err(RecvError::Lagged(missed)) => {
                format!("\r\n[tether: {missed} lines skipped]\r\n").into_bytes()
            }
            Err(RecvError::Closed) => break,
        };
        let mut closed = false;
        while chunk.len() < MAX_CHUNK_BYTES {
            match output.try_recv() {
                Ok(more) => chunk.extend_from_slice(&more),
                Err(TryRecvError::Lagged(missed)) => chunk.extend_from_slice(
                    format!("\r\n[tether: {missed} lines skipped]\r\n").as_bytes(),
                ),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => {
                    closed = true;
                    break;
                }
            }
        }
        for part in chunk.chunks(MAX_CHUNK_BYTES) {
            let reply = ConsoleReply::WatchOutput {
                job_id: job_id.clone(),
                data: STANDARD.encode(part),
            };
            if replies.send(reply).await.is_err() {
                return;
            }
        }
        if closed {
            break;
        }
    }
    let _ = replies
        .send(ConsoleReply::WatchEnded {
            job_id,
            reason: "the job stopped running on this computer".to_owned(),
        })
        .await;
}
