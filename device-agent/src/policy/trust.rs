//! Trusted folders: the owner's local decision that runs in a folder may work there without
//! asking in ask mode (`tether-agent trust add|list|remove`).
//!
//! Trust is per computer and path, made only on the computer: nothing the server sends
//! adds to it. A folder too broad or too sensitive to trust is refused: the root, system
//! folders and anything inside them, the home folder itself and its parents, any folder
//! that is, holds or sits inside a protected path (keys, sign-ins, the agent's own data).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::local::state::Config;
use crate::policy::guard::{Guard, Refusal};
use crate::policy::zones;

/// Why a folder cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustRefusal {
    #[error("{0}")]
    Guard(Refusal),
    #[error("{path} is inside a system folder; trust a project folder of your own instead")]
    SystemFolder { path: PathBuf },
}

/// Checks that `path` may be trusted; its canonical path.
///
/// # Errors
/// The [`TrustRefusal`] naming the rule.
pub fn check(guard: &Guard, path: &Path) -> Result<PathBuf, TrustRefusal> {
    let canonical = guard.check_folder(path).map_err(TrustRefusal::Guard)?;
    if zones::in_system_folder(&canonical) {
        return Err(TrustRefusal::SystemFolder { path: canonical });
    }
    Ok(canonical)
}

/// Trusts `path` (canonical); trusting it again changes nothing. Returns the canonical path.
///
/// # Errors
/// When the folder may not be trusted.
pub fn add(config: &mut Config, guard: &Guard, path: &Path) -> Result<PathBuf> {
    let canonical = check(guard, path)?;
    if !config.trusted.contains(&canonical) {
        config.trusted.push(canonical.clone());
        config.trusted.sort();
    }
    Ok(canonical)
}

/// Stops trusting `path` (as listed, or any path that resolves to it).
///
/// # Errors
/// When the folder is not trusted.
pub fn remove(config: &mut Config, path: &Path) -> Result<PathBuf> {
    let canonical = path.canonicalize().ok();
    let absolute = crate::policy::guard::absolute(path);
    let Some(index) = config
        .trusted
        .iter()
        .position(|trusted| *trusted == absolute || Some(trusted) == canonical.as_ref())
    else {
        bail!(
            "{} is not trusted (see `tether-agent trust list`)",
            path.display()
        );
    };
    Ok(config.trusted.remove(index))
}

/// `trust list` as text.
pub fn render(trusted: &[PathBuf]) -> String {
    if trusted.is_empty() {
        return "No trusted folders. In ask mode every command and edit asks.\n".to_owned();
    }
    let mut text = String::from("Trusted folders (ask mode works here without asking):\n");
    for folder in trusted {
        text.push_str(&format!("  {}\n", folder.display()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            install_id: "i".into(),
            pairing: None,
            folders: Vec::new(),
            recipes: Vec::new(),
            engines: Vec::new(),
            trusted: Vec::new(),
            accept_web_approvals: true,
            evidence_upload: true,
            evidence_hold: Default::default(),
            console: true,
        }
    }

    fn refusal(guard: &Guard, path: &Path) -> String {
        match check(guard, path) {
            Ok(path) => format!("ok {}", path.display()),
            Err(TrustRefusal::SystemFolder { .. }) => "system".into(),
            Err(TrustRefusal::Guard(Refusal::BlockedRoot { why, .. })) => why.into(),
            Err(TrustRefusal::Guard(Refusal::Protected { .. })) => "protected".into(),
            Err(TrustRefusal::Guard(Refusal::HoldsProtected { .. })) => "holds-protected".into(),
            Err(TrustRefusal::Guard(Refusal::Missing { .. })) => "missing".into(),
            Err(TrustRefusal::Guard(Refusal::Moved { .. })) => "moved".into(),
        }
    }

    #[test]
    fn broad_and_sensitive_folders_are_never_trusted() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().canonicalize()?.join("home");
        let data = home.join(".local/share/tether-agent");
        for dir in [
            "code/app",
            ".ssh",
            ".config",
            ".local/share/tether-agent/runs",
        ] {
            std::fs::create_dir_all(home.join(dir))?;
        }
        let guard = Guard::new(Some(home.clone()), &data);
        assert_eq!(
            refusal(&guard, &home.join("code/app")),
            format!("ok {}", home.join("code/app").display())
        );
        assert_eq!(refusal(&guard, Path::new("/")), "a system or shared folder");
        assert_eq!(
            refusal(&guard, Path::new("/usr")),
            "a system or shared folder"
        );
        assert_eq!(
            refusal(&guard, Path::new("/etc")),
            "a system or shared folder"
        );
        assert_eq!(
            refusal(&guard, Path::new("/var")),
            "a system or shared folder"
        );
        if Path::new("/usr/share").is_dir() {
            assert_eq!(refusal(&guard, Path::new("/usr/share")), "system");
        }
        assert_eq!(refusal(&guard, &home), "the home folder itself");
        assert_eq!(refusal(&guard, &home.join(".ssh")), "protected");
        assert_eq!(refusal(&guard, &home.join(".config")), "holds-protected");
        assert_eq!(refusal(&guard, &data.join("runs")), "the agent's own data");
        assert_eq!(
            refusal(&guard, &home.join(".local")),
            "the agent's own data"
        );
        assert_eq!(refusal(&guard, &home.join("nope")), "missing");
        Ok(())
    }

    #[test]
    fn trust_is_added_once_listed_and_removed() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().canonicalize()?.join("home");
        let app = home.join("code/app");
        std::fs::create_dir_all(&app)?;
        let guard = Guard::new(Some(home.clone()), &home.join(".local/share/tether-agent"));
        let mut config = config();
        assert_eq!(add(&mut config, &guard, &app.join("../app"))?, app);
        add(&mut config, &guard, &app)?;
        assert_eq!(config.trusted, std::slice::from_ref(&app));
        assert!(render(&config.trusted).contains(&app.display().to_string()));
        assert!(add(&mut config, &guard, &home).is_err());
        assert_eq!(config.trusted.len(), 1);
        assert_eq!(remove(&mut config, &app)?, app);
        assert!(remove(&mut config, &app).is_err());
        assert!(render(&config.trusted).starts_with("No trusted folders"));
        Ok(())
    }
}
