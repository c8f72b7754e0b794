//! What a test does when something it needs from outside the workspace is missing here
//! (PostgreSQL, Redis, Chromium, a sandbox backend, git, npm, schemathesis): it says why and
//! skips, unless `TETHER_REQUIRE_EXTERNAL=1` (what CI sets, through `.ci/run`), where it
//! fails instead — a suite that skipped everything must not pass there.
//!
//! Self-contained (std only), like `postgres.rs`, so every crate's tests include this one
//! file with `#[path = "…/server/tests/support/external.rs"] mod external;`.
#![allow(dead_code)]

use std::process::Command;

/// Whether a missing external fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("TETHER_REQUIRE_EXTERNAL").as_deref() == Ok("1")
}

/// Says why the test does not run; the caller then returns without testing.
///
/// # Panics
/// Under `TETHER_REQUIRE_EXTERNAL=1`, with `why`.
pub fn unavailable(why: &str) {
    assert!(
        !required(),
        "TETHER_REQUIRE_EXTERNAL=1, so this fails instead of skipping: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

/// Whether `git` runs here; when it does not, [`unavailable`] says so.
pub fn git() -> bool {
    let why = match Command::new("git").arg("--version").output() {
        Ok(output) if output.status.success() => return true,
        Ok(output) => format!(
            "`git --version` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Err(err) => format!("git cannot run here: {err}"),
    };
    unavailable(&why);
    false
}
