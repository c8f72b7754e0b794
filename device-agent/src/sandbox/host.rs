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
