//! How a run stops: the reasons, the stop signal the daemon, the reporter and the engine
//! share, and how a run task ended.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Why a run must stop before its program ends, weakest first; when several arrive the
/// strongest wins (`max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopReason {
    /// The owner asked to stop: end the run and complete it `cancelled`.
    Cancel,
    /// The agent is shutting down: end the run, leave the job to the server (interrupted).
    Shutdown,
    /// The lease is gone (`stale_lease` or `lost`): stop at once, report nothing more.
    LeaseLost,
    /// The device was revoked: stop at once, report nothing more.
    Revoked,
}

impl StopReason {
    /// The reason in words, as a refusal says why the run is stopping.
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::Cancel => "cancelled",
            StopReason::Shutdown => "the agent is shutting down",
            StopReason::LeaseLost => "its lease is lost",
            StopReason::Revoked => "this computer was revoked",
        }
    }
}

/// The stop signal of one run, shared by the daemon, the reporter and the supervisor.
#[derive(Debug, Clone)]
pub struct RunStop {
    sender: Arc<watch::Sender<Option<StopReason>>>,
}

/// How a run task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The server has the outcome (or refused it for good).
    Completed,
    /// The run stopped without completing, for this reason.
    Abandoned(StopReason),
}

impl RunStop {
    pub fn new() -> RunStop {
        RunStop {
            sender: Arc::new(watch::channel(None).0),
        }
    }

    /// Asks the run to stop; a weaker reason never replaces a stronger one.
    pub fn raise(&self, reason: StopReason) {
        self.sender.send_if_modified(|current| {
            let stronger = current.is_none_or(|current| reason > current);
            if stronger {
                *current = Some(reason);
            }
            stronger
        });
    }

    /// The strongest reason raised so far.
    pub fn current(&self) -> Option<StopReason> {
        *self.sender.borrow()
    }

    /// Whether the run may still report: not once its lease or the device's token is gone.
    ///
    /// # Errors
    /// The reason nothing more may be reported.
    pub fn reportable(&self) -> Result<(), StopReason> {
        match self.current() {
            Some(reason) if reason >= StopReason::LeaseLost => Err(reason),
            _ => Ok(()),
        }
    }

    /// Resolves once any reason is raised.
    pub async fn raised(&self) -> StopReason {
        let mut receiver = self.sender.subscribe();
        let raised = receiver
            .wait_for(Option::is_some)
            .await
            .map(|reason| *reason);
        match raised {
            Ok(Some(reason)) => reason,
            // The sender lives in `self`, so it cannot be dropped while we wait.
            Ok(None) | Err(_) => std::future::pending().await,
        }
    }

    /// Sleeps `delay`; returns `true` early if a reason at least `min` is raised.
    pub async fn wait_at_least(&self, min: StopReason, delay: Duration) -> bool {
        let mut receiver = self.sender.subscribe();
        let strong_enough = receiver.wait_for(|reason| reason.is_some_and(|reason| reason >= min));
        tokio::select! {
            result = strong_enough => result.is_ok(),
            () = tokio::time::sleep(delay) => false,
        }
    }
}

impl Default for RunStop {
    fn default() -> Self {
        RunStop::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strongest_stop_reason_wins() {
        let stop = RunStop::new();
        assert_eq!(stop.current(), None);
        stop.raise(StopReason::LeaseLost);
        stop.raise(StopReason::Cancel);
        assert_eq!(stop.current(), Some(StopReason::LeaseLost));
        stop.raise(StopReason::Revoked);
        assert_eq!(stop.current(), Some(StopReason::Revoked));
    }
}
