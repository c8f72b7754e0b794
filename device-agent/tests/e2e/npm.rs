//! The npm packages the tests use, each from a `package.json` and `package-lock.json`
//! committed under `tests/<name>` and installed with `npm ci` into `target/npm/<name>`: what
//! runs is what the lock names, never whatever the registry answers that day.
//!
//! Each is installed at most once per test process, and the outcome is kept: when the
//! install fails, every test that needs it stops at once with the install's error (a skip,
//! or a failure under `TETHER_REQUIRE_EXTERNAL=1`) instead of trying again and waiting as
//! long.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::OnceCell;

use crate::external;

/// axe-core, for the accessibility test.
pub static AXE_CORE: Packages = Packages::new("axe-core");
/// The official TypeScript ACP SDK, for the agent built on it.
pub static ACP_SDK_AGENT: Packages = Packages::new("acp-sdk-agent");
/// The real coding agents (Claude Code, Codex, Gemini CLI).
pub static ACP_AGENTS: Packages = Packages::new("acp-agents");
/// Lighthouse, for the pages' accessibility and best-practices scores.
pub static LIGHTHOUSE: Packages = Packages::new("lighthouse");

/// The coding agents are the largest install; none takes longer than this.
const INSTALL_LIMIT: Duration = Duration::from_secs(600);

/// One committed lock, installed once.
pub struct Packages {
    name: &'static str,
    installed: OnceCell<Result<PathBuf, String>>,
}

impl Packages {
    const fn new(name: &'static str) -> Packages {
        Packages {
            name,
            installed: OnceCell::const_new(),
        }
    }

    /// The folder whose `node_modules` holds the packages; `None` after saying why they are
    /// not there.
    ///
    /// # Panics
    /// Under `TETHER_REQUIRE_EXTERNAL=1`, when they are not.
    pub async fn installed(&self) -> Option<PathBuf> {
        let installed = self.installed.get_or_init(|| install(self.name)).await;
        match installed {
            Ok(dir) => Some(dir.clone()),
            Err(why) => {
                external::unavailable(why);
                None
            }
        }
    }
}

/// `npm ci` of `tests/<name>` into `target/npm/<name>`, skipped when that folder was
/// installed from the same lock (the copy written after a successful install says so).
async fn install(name: &str) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests")
        .join(name);
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = scratch.parent().unwrap_or(scratch).join("npm").join(name);
    let lock = std::fs::read(source.join("package-lock.json"))
        .map_err(|err| format!("cannot read tests/{name}/package-lock.json: {err}"))?;
    let stamp = dir.join("installed-package-lock.json");
    if std::fs::read(&stamp).ok().as_ref() == Some(&lock) && dir.join("node_modules").is_dir() {
        return Ok(dir);
    }
    // A failed install leaves no stamp: the next process starts over.
    let _ = std::fs::remove_file(&stamp);
    std::fs::create_dir_all(&dir).map_err(|err| format!("cannot create {dir:?}: {err}"))?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), dir.join(file))
            .map_err(|err| format!("cannot copy tests/{name}/{file}: {err}"))?;
    }
    let installed = tokio::time::timeout(
        INSTALL_LIMIT,
        Command::new("npm")
            .args([
                "ci",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
            ])
            .arg(&dir)
            .kill_on_drop(true)
            .output(),
    )
    .await;
    match installed {
        Ok(Ok(output)) if output.status.success() => {
            std::fs::write(&stamp, &lock)
                .map_err(|err| format!("cannot write {stamp:?}: {err}"))?;
            Ok(dir)
        }
        Ok(Ok(output)) => Err(format!(
            "npm ci of tests/{name} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Ok(Err(err)) => Err(format!("npm cannot run here: {err}")),
        Err(_) => Err(format!(
            "npm ci of tests/{name} took more than {} s",
            INSTALL_LIMIT.as_secs()
        )),
    }
}
