//! What of the host a confined program sees besides its own folders: the system folders,
//! the user's toolchains and a few device files. Every backend starts from these.

use std::path::{Path, PathBuf};

/// System folders a confined program may read (and run programs from).
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
];

/// System folders a confined program may read on macOS (the seatbelt profile's).
pub const MAC_SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/System",
    "/Library",
    "/Applications/Xcode.app",
    "/opt/homebrew",
    "/usr/local",
    "/private/etc",
    "/etc",
    "/dev",
    "/private/var/db/timezone",
    "/var/db/timezone",
];

/// Folders under the home folder that hold toolchains, given read-only.
pub const HOME_TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".pyenv",
    ".nvm",
    ".local/bin",
    ".local/lib",
    ".local/share/pnpm",
    "go",
    ".deno",
    ".bun",
    ".volta",
    ".asdf",
    ".sdkman",
    ".juliaup",
    ".ghcup",
    ".elan",
];

/// Device files a confined program may read and write.
pub const DEVICES_RW: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];
/// Device files a confined program may read.
pub const DEVICES_READ: &[&str] = &["/dev/random", "/dev/urandom"];

/// Toolchain folders of this user that exist: the usual ones under home, plus every `PATH`
/// entry under home.
pub fn toolchains(home: Option<&Path>, path_var: Option<&str>) -> Vec<PathBuf> {
    let Some(home) = home else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = HOME_TOOLCHAINS.iter().map(|dir| home.join(dir)).collect();
    if let Some(path_var) = path_var {
        for entry in path_var.split(':').filter(|entry| entry.starts_with('/')) {
            let entry = PathBuf::from(entry);
            if entry.starts_with(home) && entry != home {
                found.push(entry);
            }
        }
    }
    found.retain(|dir| dir.is_dir());
    found.sort();
    found.dedup();
    // Keep only the outermost of nested entries.
    let all = found.clone();
    found.retain(|dir| {
        !all.iter()
            .any(|other| other != dir && dir.starts_with(other))
    });
    found
}

/// Whether a confined program can see `path` (read it, run it), whatever the backend: it
/// lies in a system folder, in one of this user's toolchain folders ([`toolchains`]) or in
/// one of `folders` (the folders the owner shares, one of which a job runs in); on macOS the
/// system folders are the ones the seatbelt profile allows. The guard's protected paths are
/// hidden on top of this; checking them is the caller's.
pub fn sees(path: &Path, home: Option<&Path>, path_var: Option<&str>, folders: &[PathBuf]) -> bool {
    let system = if cfg!(target_os = "macos") {
        MAC_SYSTEM_READ
    } else {
        SYSTEM_READ
    };
    system
        .iter()
        .map(PathBuf::from)
        .chain(toolchains(home, path_var))
        .chain(folders.iter().cloned())
        .any(|root| path.starts_with(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_seen_in_system_toolchain_and_shared_folders_only() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().join("home");
        for dir in [".cargo/bin", "tools/bin", "work", "elsewhere"] {
            std::fs::create_dir_all(home.join(dir))?;
        }
        let path_var = format!("/usr/bin:{}", home.join("tools/bin").display());
        let shared = [home.join("work")];
        let seen = |path: &Path| sees(path, Some(&home), Some(&path_var), &shared);
        assert!(seen(Path::new("/usr/bin/make")));
        assert!(seen(Path::new("/bin/sh")));
        assert!(seen(&home.join(".cargo/bin/cargo")));
        assert!(seen(&home.join("tools/bin/mytool")));
        assert!(seen(&home.join("work/scripts/run.sh")));
        assert!(!seen(&home.join("elsewhere/run.sh")));
        assert!(!seen(Path::new("/srv/tools/run")));
        assert!(!seen(&home.join("workshop/run.sh")));
        Ok(())
    }
}
