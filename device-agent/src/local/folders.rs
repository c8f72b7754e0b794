//! Folders the owner shares with jobs, by label.
//!
//! A job names only a label; the path comes from here. Paths are stored canonical (absolute,
//! symlinks resolved), so what runs later is the folder the owner looked at when sharing.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::local::state::{Config, SharedFolder};

/// The longest label or engine name.
pub const MAX_NAME_LEN: usize = 40;

/// Checks a label or recipe name: 1 to 40 of `a-z`, `0-9`, `_`, `-`.
///
/// # Errors
/// A sentence saying what a valid name looks like.
pub fn check_name(kind: &str, name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !valid {
        bail!("{kind} {name:?} must be 1 to {MAX_NAME_LEN} characters of a-z, 0-9, '_' and '-'");
    }
    Ok(())
}

/// Shares `path` under `label`, replacing an earlier folder with the same label.
///
/// # Errors
/// When the label is invalid or the path is not an existing directory.
pub fn share(config: &mut Config, label: &str, path: &Path) -> Result<SharedFolder> {
    check_name("label", label)?;
    let canonical = path
        .canonicalize()
        .with_context(|| format!("{} does not exist", path.display()))?;
    if !canonical.is_dir() {
        bail!("{} is not a directory", canonical.display());
    }
    let folder = SharedFolder {
        label: label.to_owned(),
        path: canonical,
    };
    config.folders.retain(|existing| existing.label != label);
    config.folders.push(folder.clone());
    config.folders.sort_by(|a, b| a.label.cmp(&b.label));
    Ok(folder)
}

/// Stops sharing the folder labelled `label`.
///
/// # Errors
/// When no folder has that label.
pub fn remove(config: &mut Config, label: &str) -> Result<SharedFolder> {
    let Some(index) = config
        .folders
        .iter()
        .position(|folder| folder.label == label)
    else {
        bail!("no folder is shared as {label:?}");
    };
    Ok(config.folders.remove(index))
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

    #[test]
    fn names_follow_the_documented_alphabet() {
        for good in ["work", "a", "my_repo-2", &"x".repeat(40)] {
            assert!(check_name("label", good).is_ok(), "{good}");
        }
        for bad in ["", "Work", "a b", "../x", "é", &"x".repeat(41)] {
            assert!(check_name("label", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sharing_canonicalizes_and_replaces() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let sub = tmp.path().join("sub");
        std::fs::create_dir(&sub)?;
        let file = tmp.path().join("file");
        std::fs::write(&file, "x")?;
        let mut config = config();

        let shared = share(&mut config, "work", &sub.join("..").join("sub"))?;
        assert_eq!(shared.path, sub.canonicalize()?);
        share(&mut config, "work", tmp.path())?;
        assert_eq!(config.folders.len(), 1);
        assert_eq!(config.folders[0].path, tmp.path().canonicalize()?);

        assert!(share(&mut config, "f", &file).is_err());
        assert!(share(&mut config, "missing", &tmp.path().join("nope")).is_err());
        assert!(share(&mut config, "Bad", tmp.path()).is_err());

        assert!(remove(&mut config, "nope").is_err());
        remove(&mut config, "work")?;
        assert!(config.folders.is_empty());
        Ok(())
    }
}
