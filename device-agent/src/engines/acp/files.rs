//! `fs/read_text_file` and `fs/write_text_file`: this process reads and writes for the
//! confined agent, so the path is resolved here (links followed, every component real) and
//! the result is what the guard and the policy judge; the file touched must be that one.
//!
//! Text goes to the agent unredacted (it runs on this computer, in the job's folder), but
//! never from a protected path: the caller asks the guard first.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use crate::local::private_files::{link_count, mode_of, open_no_follow, opened_path, set_mode};

/// The largest file `fs/read_text_file` reads.
pub const MAX_READ_BYTES: u64 = 16 << 20;
/// Mode of a file the agent creates (an existing file keeps its own).
const NEW_FILE_MODE: u32 = 0o644;

/// The real path of an existing file, for reading.
///
/// # Errors
/// A relative path, a `..` component, or a path that does not resolve.
pub fn resolve_existing(path: &Path) -> Result<PathBuf, String> {
    check_form(path)?;
    path.canonicalize()
        .map_err(|_| format!("{} does not exist", path.display()))
}

/// The real path a write to `path` lands on: links in the existing part followed (the
/// file itself too, when it is a link), the missing folders and file name appended.
///
/// # Errors
/// A relative path, a `..` component, a dangling link or a folder in the way.
pub fn resolve_for_write(path: &Path) -> Result<PathBuf, String> {
    check_form(path)?;
    if fs::symlink_metadata(path).is_ok() {
        let real = path
            .canonicalize()
            .map_err(|_| format!("{} is a link to nowhere", path.display()))?;
        if real.is_dir() {
            return Err(format!("{} is a folder", path.display()));
        }
        return Ok(real);
    }
    let mut missing = Vec::new();
    let mut existing = path.to_path_buf();
    while fs::symlink_metadata(&existing).is_err() {
        let Some(name) = existing.file_name() else {
            return Err(format!("{} cannot be resolved", path.display()));
        };
        missing.push(name.to_os_string());
        existing.pop();
    }
    let mut real = existing
        .canonicalize()
        .map_err(|_| format!("{} cannot be resolved", existing.display()))?;
    if !real.is_dir() {
        return Err(format!("{} is not a folder", existing.display()));
    }
    for name in missing.iter().rev() {
        real.push(name);
    }
    Ok(real)
}

/// ACP paths are absolute; `..` is refused outright rather than interpreted.
fn check_form(path: &Path) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!("{} is not an absolute path", path.display()));
    }
    if path
        .components()
        .any(|component| matches!(component, Component::ParentDir))
    {
        return Err(format!("{} contains '..'", path.display()));
    }
    Ok(())
}

/// The text of the file at `real` (from [`resolve_existing`]), from line `line` (1-based)
/// for at most `limit` lines.
///
/// # Errors
/// Not a regular file, a file with other names, a file swapped since it was resolved, too
/// large, not text, or unreadable.
pub fn read_text(real: &Path, line: Option<u32>, limit: Option<u32>) -> Result<String, String> {
    let mut file = open_file(real)?;
    let meta = file
        .metadata()
        .map_err(|err| format!("{} cannot be read: {err}", real.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", real.display()));
    }
    if link_count(&meta) > 1 {
        return Err(format!(
            "{} has other names (hard links) and may belong elsewhere",
            real.display()
        ));
    }
    if let Some(opened) = opened_path(&file) {
        if opened != real {
            return Err(format!("{} changed while it was opened", real.display()));
        }
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(format!(
            "{} is larger than {} MiB; read it in a terminal instead",
            real.display(),
            MAX_READ_BYTES >> 20
        ));
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|err| format!("{} cannot be read: {err}", real.display()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", real.display()))?;
    Ok(select_lines(&text, line, limit))
}

/// Lines `line..line+limit` (1-based), with their line endings.
fn select_lines(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_owned();
    }
    let skip = line.map_or(0, |line| line.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |limit| limit as usize);
    text.split_inclusive('\n').skip(skip).take(take).collect()
}

/// Writes `content` to `real` (from [`resolve_for_write`]) atomically: a temporary file in
/// the same folder, synced, renamed over the target. Missing folders are created. An
/// existing file keeps its permissions.
///
/// # Errors
/// When a folder cannot be created, the folder changed since it was resolved, or the file
/// cannot be written.
pub fn write_text(real: &Path, content: &str) -> Result<(), String> {
    let parent = real
        .parent()
        .ok_or_else(|| format!("{} has no folder", real.display()))?;
    fs::create_dir_all(parent)
        .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
    // Nothing along the way may have become a link since the path was resolved.
    let parent_now = parent
        .canonicalize()
        .map_err(|err| format!("{} cannot be resolved: {err}", parent.display()))?;
    if parent_now != parent {
        return Err(format!("{} changed while it was written", parent.display()));
    }
    let mode = fs::metadata(real).map_or(NEW_FILE_MODE, |meta| mode_of(&meta));
    let mut temporary = tempfile::Builder::new()
        .prefix(".tether-write-")
        .tempfile_in(parent)
        .map_err(|err| format!("cannot write in {}: {err}", parent.display()))?;
    let written = temporary
        .write_all(content.as_bytes())
        .and_then(|()| temporary.as_file().sync_all())
        .and_then(|()| set_mode(temporary.path(), mode));
    written.map_err(|err| format!("cannot write {}: {err}", real.display()))?;
    temporary
        .persist(real)
        .map_err(|err| format!("cannot write {}: {}", real.display(), err.error))?;
    Ok(())
}

/// Opens `path` without following a final link (and without blocking on a FIFO).
fn open_file(path: &Path) -> Result<fs::File, String> {
    open_no_follow(path).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => format!("{} does not exist", path.display()),
        _ => format!("{} cannot be opened: {err}", path.display()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let real = dir
            .path()
            .canonicalize()
            .unwrap_or_else(|err| panic!("{err}"));
        (dir, real)
    }

    #[test]
    fn lines_are_selected_one_based() {
        let text = "a\nb\nc\nd";
        assert_eq!(select_lines(text, None, None), text);
        assert_eq!(select_lines(text, Some(2), Some(2)), "b\nc\n");
        assert_eq!(select_lines(text, Some(3), None), "c\nd");
        assert_eq!(select_lines(text, None, Some(1)), "a\n");
        assert_eq!(select_lines(text, Some(9), Some(1)), "");
    }

    #[test]
    fn paths_resolve_through_links_to_what_is_really_touched() {
        let (_dir, root) = root();
        fs::create_dir(root.join("src")).unwrap_or_default();
        fs::write(root.join("src/a.txt"), "x").unwrap_or_default();
        let outside = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let outside = outside.path().canonicalize().unwrap_or_default();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&outside, root.join("out")).unwrap_or_default();
            std::os::unix::fs::symlink(root.join("src/a.txt"), root.join("link.txt"))
                .unwrap_or_default();
            assert_eq!(
                resolve_for_write(&root.join("out/new/b.txt")),
                Ok(outside.join("new/b.txt"))
            );
            assert_eq!(
                resolve_for_write(&root.join("link.txt")),
                Ok(root.join("src/a.txt"))
            );
            assert_eq!(
                resolve_existing(&root.join("link.txt")),
                Ok(root.join("src/a.txt"))
            );
        }
        assert_eq!(
            resolve_for_write(&root.join("src/new/deeper/c.txt")),
            Ok(root.join("src/new/deeper/c.txt"))
        );
        assert!(resolve_for_write(Path::new("relative.txt")).is_err());
        assert!(resolve_for_write(&root.join("src/../../etc/passwd")).is_err());
        assert!(resolve_for_write(&root.join("src")).is_err(), "a folder");
        assert!(resolve_for_write(&root.join("src/a.txt/x")).is_err());
        assert!(resolve_existing(&root.join("missing.txt")).is_err());
    }

    #[test]
    fn writes_are_atomic_keep_the_mode_and_create_folders() -> Result<(), String> {
        let (_dir, root) = root();
        let target = resolve_for_write(&root.join("deep/er/file.txt"))?;
        write_text(&target, "one\ntwo\n")?;
        assert_eq!(read_text(&target, None, None)?, "one\ntwo\n");
        assert_eq!(read_text(&target, Some(2), None)?, "two\n");
        #[cfg(unix)]
        {
            set_mode(&target, 0o600).map_err(|err| err.to_string())?;
            write_text(&target, "three\n")?;
            let meta = fs::metadata(&target).map_err(|err| err.to_string())?;
            assert_eq!(mode_of(&meta), 0o600);
        }
        let names: Vec<String> = fs::read_dir(root.join("deep/er"))
            .map_err(|err| err.to_string())?
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["file.txt"], "no temporary file is left");
        Ok(())
    }

    #[test]
    fn only_regular_text_files_are_read() {
        let (_dir, root) = root();
        fs::write(root.join("bin"), [0xff, 0xfe, 0x00]).unwrap_or_default();
        assert!(read_text(&root.join("bin"), None, None).is_err());
        assert!(read_text(&root, None, None).is_err(), "a folder");
        fs::write(root.join("a"), "x").unwrap_or_default();
        fs::hard_link(root.join("a"), root.join("b")).unwrap_or_default();
        let refused = read_text(&root.join("a"), None, None);
        assert!(
            refused
                .as_ref()
                .is_err_and(|why| why.contains("hard links")),
            "{refused:?}"
        );
    }
}
