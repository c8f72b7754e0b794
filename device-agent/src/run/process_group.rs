//! Signalling a run's whole process group.
//!
//! Each run is spawned as the leader of a new process group, so a timeout or a Stop reaches
//! everything it started (shells, compilers, test runners), not only the first process.

use std::io;
use std::time::Duration;

use tokio::process::Child;

/// How long a group gets between SIGTERM and SIGKILL to exit cleanly.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(3);
/// How long a stop without grace waits for the leader after SIGHUP, before SIGKILL.
pub const HANGUP_WAIT: Duration = Duration::from_millis(1000);

/// The signals the agent sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ask to stop (SIGTERM).
    Terminate,
    /// Stop now (SIGKILL).
    Kill,
    /// Stop now, letting a run's launcher kill its whole tree first (SIGHUP).
    Hangup,
    /// Send nothing; only check that the group exists.
    Probe,
}

/// Sends `signal` to every process in the group `pgid`.
///
/// # Errors
/// `ESRCH` when the group has no process left; `InvalidInput` for a pgid that would address
/// more than one group (0, 1 or one that does not fit in `pid_t`).
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn signal_group(pgid: u32, signal: Signal) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid).map_err(|_| io::ErrorKind::InvalidInput)?;
    // kill(-1) would signal every process we may signal, and kill(0) our own group.
    if pgid <= 1 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let signo = match signal {
        Signal::Terminate => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
        Signal::Hangup => libc::SIGHUP,
        Signal::Probe => 0,
    };
    // SAFETY: kill(2) takes two integers and reads or writes no memory of this process.
    let rc = unsafe { libc::kill(-pgid, signo) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(unix))]
pub fn signal_group(_pgid: u32, _signal: Signal) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Whether any process of group `pgid` is still alive (zombies count as alive until reaped).
pub fn group_alive(pgid: u32) -> bool {
    signal_group(pgid, Signal::Probe).is_ok()
}

/// Stops the group led by `child`: SIGTERM, up to `grace` to exit, then SIGKILL for whatever
/// is left. Waits for (reaps) the leader.
///
/// The group is signalled before the leader is reaped, so its id cannot have been reused by
/// an unrelated process.
pub async fn terminate(child: &mut Child, pgid: u32, grace: Duration) {
    if grace > Duration::ZERO {
        let _ = signal_group(pgid, Signal::Terminate);
        let _ = tokio::time::timeout(grace, child.wait()).await;
    } else {
        // A confined run's leader is its launcher: SIGHUP makes it kill the whole tree at
        // once (including processes that left the group), which SIGKILL would not let it do.
        let _ = signal_group(pgid, Signal::Hangup);
        let _ = tokio::time::timeout(HANGUP_WAIT, child.wait()).await;
    }
    // The leader may be gone while children that ignored SIGTERM live on; the group id stays
    // reserved as long as any member exists, so this reaches only them.
    let _ = signal_group(pgid, Signal::Kill);
    let _ = child.start_kill();
    let _ = child.wait().await;
}
