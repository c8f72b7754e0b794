//! The file primitives every wing shares: folders only this user reads, file modes, and
//! files opened without following a link planted in their place.
//!
//! Errors are plain `io::Error`s; each caller words them as it reports them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Mode of every file the agent writes: readable by the user only.
pub const FILE_MODE: u32 = 0o600;
/// Mode of the data dir and of every folder the agent makes for itself.
pub const DIR_MODE: u32 = 0o700;

/// Creates `path` and its missing parents, each [`DIR_MODE`]. A folder that already exists
/// keeps its mode: some are the owner's own (an engine's sign-in folder).
///
/// # Errors
/// When a folder cannot be made.
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(path)
}

/// Sets the permission bits of `path` (nothing to do where there are none).
///
/// # Errors
/// When they cannot be set.
#[cfg(unix)]
pub fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Sets the permission bits of `path` (nothing to do where there are none).
///
/// # Errors
/// None here.
#[cfg(not(unix))]
pub fn set_mode(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// The permission bits of a file (0644 where there are none).
#[cfg(unix)]
pub fn mode_of(meta: &fs::Metadata) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777
}

/// The permission bits of a file (0644 where there are none).
#[cfg(not(unix))]
pub fn mode_of(_meta: &fs::Metadata) -> u32 {
    0o644
}

/// Opens `path` for reading without following a final link, and without blocking on a FIFO
/// swapped in. What was opened is still the caller's to check (a regular file, one name).
///
/// # Errors
/// When it cannot be opened: gone, a link, or not readable.
pub fn open_no_follow(path: &Path) -> io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path)
}

/// How many names a file has (1 where that cannot be told): a file with other names may
/// belong elsewhere.
#[cfg(unix)]
pub fn link_count(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::nlink(meta)
}

/// How many names a file has (1 where that cannot be told): a file with other names may
/// belong elsewhere.
#[cfg(not(unix))]
pub fn link_count(_meta: &fs::Metadata) -> u64 {
    1
}

/// Where an open file really is (Linux: through `/proc/self/fd`); `None` elsewhere.
pub fn opened_path(file: &fs::File) -> Option<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// `bytes` in lowercase hex: digests and random names.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(hex(&[]), "");
    }

    #[cfg(unix)]
    #[test]
    fn private_folders_are_made_for_the_user_only() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("a/b");
        create_private_dir(&path)?;
        create_private_dir(&path)?;
        assert_eq!(mode_of(&fs::metadata(&path)?), DIR_MODE);
        assert_eq!(mode_of(&fs::metadata(tmp.path().join("a"))?), DIR_MODE);
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn a_link_is_not_followed() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let target = tmp.path().join("target");
        fs::write(&target, "text")?;
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link)?;
        assert!(open_no_follow(&link).is_err());
        let file = open_no_follow(&target)?;
        assert_eq!(link_count(&file.metadata()?), 1);
        set_mode(&target, FILE_MODE)?;
        assert_eq!(mode_of(&fs::metadata(&target)?), FILE_MODE);
        Ok(())
    }
}
