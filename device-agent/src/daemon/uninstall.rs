//! Gone when uninstalled: a packaged agent whose program was removed unpairs itself.
//!
//! Packaged launchers set `TETHER_INSTALL_PATH` to the installed executable. With it set,
//! every heartbeat looks whether that file is there. Missing on every look for
//! [`DEFAULT_GRACE`] in a row (an upgrade swaps the binary for a moment; any look that finds
//! it starts the wait again), the agent was uninstalled: the daemon stops claiming, ends its
//! runs as a revocation does, removes the computer from its server when it can and forgets
//! its pairing even when it cannot, then `run` exits with
//! [`exit_code::UNINSTALLED`](crate::exit_code::UNINSTALLED). Unset, nothing is looked at.
//!
//! `TETHER_UNINSTALL_GRACE_SECS` shortens the wait, for tests.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The installed executable's path, set by packaged launchers.
pub const INSTALL_PATH_ENV: &str = "TETHER_INSTALL_PATH";
/// How long the executable may stay missing, in seconds, before the agent unpairs.
pub const GRACE_ENV: &str = "TETHER_UNINSTALL_GRACE_SECS";
/// Ten minutes: longer than any package upgrade leaves the binary missing.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10 * 60);

/// What one look found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The executable is there (again).
    Present,
    /// Missing, for this long so far: not yet the whole grace.
    Missing(Duration),
    /// Missing on every look for the whole grace: uninstalled.
    Uninstalled,
}

/// Watches the installed executable across heartbeats.
#[derive(Debug, Clone)]
pub struct InstallWatch {
    path: PathBuf,
    grace: Duration,
    /// When the current run of missing looks began.
    missing_since: Option<Instant>,
}

impl InstallWatch {
    /// From `TETHER_INSTALL_PATH` and `TETHER_UNINSTALL_GRACE_SECS`; `None` when the path is
    /// not set (an agent run by hand or from a build is never unpaired this way).
    pub fn from_env() -> Option<InstallWatch> {
        InstallWatch::from_values(
            std::env::var_os(INSTALL_PATH_ENV),
            std::env::var(GRACE_ENV).ok(),
        )
    }

    fn from_values(path: Option<OsString>, grace: Option<String>) -> Option<InstallWatch> {
        let path = PathBuf::from(path.filter(|path| !path.is_empty())?);
        let grace = match grace.as_deref().map(str::trim) {
            None | Some("") => DEFAULT_GRACE,
            Some(text) => text.parse().map(Duration::from_secs).unwrap_or_else(|_| {
                tracing::warn!(
                    "{GRACE_ENV}={text:?} is not a number of seconds; waiting {} s",
                    DEFAULT_GRACE.as_secs()
                );
                DEFAULT_GRACE
            }),
        };
        Some(InstallWatch::new(path, grace))
    }

    pub fn new(path: PathBuf, grace: Duration) -> InstallWatch {
        InstallWatch {
            path,
            grace,
            missing_since: None,
        }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Looks at the executable now, saying what changed in the log.
    pub fn check(&mut self) -> Seen {
        let was_missing = self.missing_since.is_some();
        let seen = self.observe(self.installed(), Instant::now());
        match seen {
            Seen::Present if was_missing => {
                tracing::info!("{} is back; this computer stays paired", self.path.display());
            }
            Seen::Missing(so_far) if so_far.is_zero() => tracing::warn!(
                "{} is missing; if it is still missing in {} s the agent was uninstalled, and it unpairs",
                self.path.display(),
                self.grace.as_secs()
            ),
            Seen::Present | Seen::Missing(_) | Seen::Uninstalled => {}
        }
        seen
    }

    /// One look's outcome: `installed` at `now`. Pure, for the tests.
    pub fn observe(&mut self, installed: bool, now: Instant) -> Seen {
        if installed {
            self.missing_since = None;
            return Seen::Present;
        }
        let since = *self.missing_since.get_or_insert(now);
        let so_far = now.saturating_duration_since(since);
        if so_far >= self.grace {
            Seen::Uninstalled
        } else {
            Seen::Missing(so_far)
        }
    }

    /// Whether the executable is there. Only "not found" counts as missing: a file that
    /// cannot be looked at (permissions, I/O) is not taken for an uninstall.
    fn installed(&self) -> bool {
        match std::fs::metadata(&self.path) {
            Ok(_) => true,
            Err(err) if err.kind() == io::ErrorKind::NotFound => false,
            Err(err) => {
                tracing::debug!("cannot look at {}: {err}", self.path.display());
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(600);

    fn watch() -> InstallWatch {
        InstallWatch::new(PathBuf::from("/opt/tether/bin/tether-agent"), GRACE)
    }

    #[test]
    fn unset_means_never_watched() {
        assert!(InstallWatch::from_values(None, Some("5".into())).is_none());
        assert!(InstallWatch::from_values(Some(OsString::new()), None).is_none());
        let set = InstallWatch::from_values(Some("/usr/bin/tether-agent".into()), None);
        assert_eq!(set.map(|watch| watch.grace()), Some(DEFAULT_GRACE));
        let short = InstallWatch::from_values(Some("/x".into()), Some(" 2 ".into()));
        assert_eq!(
            short.map(|watch| watch.grace()),
            Some(Duration::from_secs(2))
        );
        let bad = InstallWatch::from_values(Some("/x".into()), Some("soon".into()));
        assert_eq!(bad.map(|watch| watch.grace()), Some(DEFAULT_GRACE));
    }

    #[test]
    fn missing_for_the_whole_grace_is_uninstalled() {
        let mut watch = watch();
        let start = Instant::now();
        assert_eq!(watch.observe(true, start), Seen::Present);
        let gone = start + Duration::from_secs(30);
        assert_eq!(watch.observe(false, gone), Seen::Missing(Duration::ZERO));
        for minute in 1..10 {
            let at = gone + Duration::from_secs(60 * minute);
            assert_eq!(
                watch.observe(false, at),
                Seen::Missing(Duration::from_secs(60 * minute))
            );
        }
        assert_eq!(watch.observe(false, gone + GRACE), Seen::Uninstalled);
        assert_eq!(
            watch.observe(false, gone + GRACE + Duration::from_secs(30)),
            Seen::Uninstalled
        );
    }

    #[test]
    fn a_look_that_finds_it_starts_the_wait_again() {
        let mut watch = watch();
        let start = Instant::now();
        assert_eq!(watch.observe(false, start), Seen::Missing(Duration::ZERO));
        let upgraded = start + GRACE - Duration::from_secs(1);
        assert_eq!(watch.observe(true, upgraded), Seen::Present);
        // Missing again: a new wait from here, not from the first look.
        let again = start + GRACE;
        assert_eq!(watch.observe(false, again), Seen::Missing(Duration::ZERO));
        assert_eq!(
            watch.observe(false, again + GRACE - Duration::from_secs(1)),
            Seen::Missing(GRACE - Duration::from_secs(1))
        );
        assert_eq!(watch.observe(false, again + GRACE), Seen::Uninstalled);
    }

    #[test]
    fn a_zero_grace_acts_on_the_first_missing_look() {
        let mut watch = InstallWatch::new(PathBuf::from("/x"), Duration::ZERO);
        assert_eq!(watch.observe(false, Instant::now()), Seen::Uninstalled);
    }

    #[test]
    fn the_file_itself_is_looked_at() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("tether-agent");
        std::fs::write(&path, b"#!/bin/sh\n")?;
        let mut watch = InstallWatch::new(path.clone(), GRACE);
        assert_eq!(watch.check(), Seen::Present);
        std::fs::remove_file(&path)?;
        assert_eq!(watch.check(), Seen::Missing(Duration::ZERO));
        std::fs::write(&path, b"#!/bin/sh\n")?;
        assert_eq!(watch.check(), Seen::Present);
        std::fs::remove_file(&path)?;
        let mut now_gone = InstallWatch::new(path, Duration::ZERO);
        assert_eq!(now_gone.check(), Seen::Uninstalled);
        Ok(())
    }
}
