//! Where a path lies, as the policy sees it: the run's folder, a folder the owner trusts, a
//! temporary folder, or elsewhere; and which folder an "allow for this run" answer names.
//!
//! Paths are resolved the way the kernel would open them: relative to the run's folder,
//! `..` taken after the links before it are followed, and the part that exists canonical, so
//! a link inside the folder that leads out of it is outside.

use std::path::{Component, Path, PathBuf};

use crate::policy::guard::Guard;

/// Folders where changing is refused in every mode: the system's own files.
const SYSTEM_FOLDERS: &[&str] = &[
    "/bin",
    "/boot",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/sbin",
    "/usr",
    "/opt",
    "/proc",
    "/sys",
    "/var",
    "/System",
    "/Library",
    "/Applications",
    "/private/etc",
    "/private/var",
];

/// Inside [`SYSTEM_FOLDERS`] but ordinary places to write: temporary folders.
const SYSTEM_EXCEPTIONS: &[&str] = &["/var/tmp", "/var/folders", "/private/var/folders"];

/// Device files a command may write without changing anything.
const HARMLESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/stdin",
    "/dev/tty",
    "/dev/fd",
];

/// Where a path lies for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// Inside the run's own folder.
    Folder,
    /// Inside another folder the owner trusts on this computer.
    Trusted,
    /// Inside a temporary folder (or a harmless device file such as `/dev/null`).
    Temporary,
    /// Anywhere else.
    Elsewhere,
}

/// The temporary folders of this computer, as written and canonical.
pub fn temporary_folders() -> Vec<PathBuf> {
    let mut folders = vec![std::env::temp_dir()];
    folders.extend(
        [
            "/tmp",
            "/var/tmp",
            "/dev/shm",
            "/private/tmp",
            "/private/var/tmp",
        ]
        .iter()
        .map(PathBuf::from),
    );
    with_canonical(folders)
}

/// `paths` plus the canonical form of each that exists, without duplicates.
pub fn with_canonical(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for path in paths {
        if let Ok(canonical) = path.canonicalize() {
            all.push(canonical);
        }
        all.push(path);
    }
    all.sort();
    all.dedup();
    all
}

/// `path` (absolute, or relative to `base`) resolved: `~` is the home folder, `.` and `..`
/// are taken after the links before them are followed, and the longest part that exists is
/// canonical. A path that does not exist yet keeps its missing tail as written.
pub fn resolve(base: &Path, path: &Path, home: Option<&Path>) -> PathBuf {
    let path = expand_home(path, home);
    let mut current = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        base.to_path_buf()
    };
    for component in path.components() {
        match component {
            Component::Prefix(prefix) => current = PathBuf::from(prefix.as_os_str()),
            Component::RootDir => current.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                current = canonical_prefix(&current);
                current.pop();
            }
            Component::Normal(name) => current.push(name),
        }
    }
    canonical_prefix(&current)
}

/// The longest existing ancestor of `path` made canonical, with the rest appended.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut resolved = canonical;
            for name in rest.iter().rev() {
                resolved.push(name);
            }
            return resolved;
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

fn expand_home(path: &Path, home: Option<&Path>) -> PathBuf {
    let Some(home) = home else {
        return path.to_path_buf();
    };
    let text = path.to_string_lossy();
    for prefix in ["~", "$HOME", "${HOME}"] {
        if text == prefix {
            return home.to_path_buf();
        }
        if let Some(rest) = text.strip_prefix(&format!("{prefix}/")) {
            return home.join(rest);
        }
    }
    path.to_path_buf()
}

/// Whether `path` is inside any of `folders` (or one of them).
pub fn inside_any(path: &Path, folders: &[PathBuf]) -> bool {
    folders.iter().any(|folder| path.starts_with(folder))
}

/// Whether changing `path` touches the system's own files (or the home folder itself), which
/// no mode allows.
pub fn changes_system(path: &Path, home: Option<&Path>) -> Option<&'static str> {
    if path == Path::new("/") {
        return Some("the root of the disk");
    }
    if home.is_some_and(|home| path == home) {
        return Some("the home folder itself");
    }
    if path.starts_with("/dev") && !inside_any(path, &to_paths(HARMLESS_DEVICES)) {
        return Some("a device");
    }
    let system = SYSTEM_FOLDERS.iter().any(|folder| path.starts_with(folder));
    let exception = SYSTEM_EXCEPTIONS
        .iter()
        .any(|folder| path.starts_with(folder));
    (system && !exception).then_some("a system folder")
}

/// Whether `path` is a device file that is harmless to write (`/dev/null`, a terminal).
pub fn harmless_device(path: &Path) -> bool {
    inside_any(path, &to_paths(HARMLESS_DEVICES))
}

/// Whether `path` lies inside a system folder (changing there is refused, and no such folder
/// may be trusted).
pub fn in_system_folder(path: &Path) -> bool {
    changes_system(path, None).is_some()
}

/// Whether `path` is in one of the person's own folders: a folder in the home folder (not a
/// file right in it, not the home folder itself), not inside a dot-folder or an
/// application's data.
pub fn is_own_folder(path: &Path, home: Option<&Path>) -> bool {
    let Some(relative) = home.and_then(|home| path.strip_prefix(home).ok()) else {
        return false;
    };
    let depth = relative.components().count();
    if depth == 0 || (depth == 1 && !path.is_dir()) {
        return false;
    }
    let mut components = relative.components();
    let first_is_app_data = relative.components().next().is_some_and(|first| {
        matches!(
            first.as_os_str().to_str(),
            Some("Library" | "snap" | "AppData")
        )
    });
    !first_is_app_data
        && components.all(|component| !component.as_os_str().to_string_lossy().starts_with('.'))
}

/// The folder an "allow for this run" answer to changing `path` names: the repository the
/// path is in, else its own folder. `None` when that folder is too broad to hand over (a
/// blocked root, the home folder, one holding or inside a protected path): such a change is
/// allowed that once only.
pub fn grant_folder(path: &Path, guard: &Guard) -> Option<PathBuf> {
    // A file's folder; a folder that does not exist yet is named by its nearest existing
    // ancestor.
    let mut own = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()?.to_path_buf()
    };
    while !own.is_dir() {
        own = own.parent()?.to_path_buf();
    }
    let folder = repository_of(&own, guard.home()).unwrap_or(own);
    // Every refusal (a blocked root, a protected path, …) means "too broad to hand over".
    guard.check_folder(&folder).ok()
}

/// The nearest folder at or above `folder` holding a `.git`, stopping at the home folder.
fn repository_of(folder: &Path, home: Option<&Path>) -> Option<PathBuf> {
    let mut current = Some(folder);
    while let Some(candidate) = current {
        if home.is_some_and(|home| candidate == home) || candidate == Path::new("/") {
            return None;
        }
        if candidate.join(".git").exists() {
            return Some(candidate.to_path_buf());
        }
        current = candidate.parent();
    }
    None
}

fn to_paths(names: &[&str]) -> Vec<PathBuf> {
    names.iter().map(PathBuf::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_like_the_kernel_opens_them() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().canonicalize()?;
        let work = root.join("work");
        let outside = root.join("outside");
        std::fs::create_dir_all(&work)?;
        std::fs::create_dir_all(&outside)?;
        let home = Some(root.as_path());
        assert_eq!(
            resolve(&work, Path::new("a/b.txt"), home),
            work.join("a/b.txt")
        );
        assert_eq!(resolve(&work, Path::new("./a/../b"), home), work.join("b"));
        assert_eq!(
            resolve(&work, Path::new("../outside/x"), home),
            outside.join("x")
        );
        assert_eq!(resolve(&work, Path::new("~/outside"), home), outside);
        assert_eq!(resolve(&work, Path::new("/"), home), PathBuf::from("/"));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&outside, work.join("link"))?;
            assert_eq!(
                resolve(&work, Path::new("link/new.txt"), home),
                outside.join("new.txt")
            );
            // `..` after a link climbs from where the link leads.
            assert_eq!(resolve(&work, Path::new("link/../work"), home), work);
        }
        Ok(())
    }

    #[test]
    fn system_folders_and_the_home_folder_are_not_changed() {
        let home = Path::new("/home/me");
        let check = |path: &str| changes_system(Path::new(path), Some(home));
        assert_eq!(check("/etc/hosts"), Some("a system folder"));
        assert_eq!(check("/usr/local/bin/x"), Some("a system folder"));
        assert_eq!(check("/var/lib/x"), Some("a system folder"));
        assert_eq!(check("/"), Some("the root of the disk"));
        assert_eq!(check("/home/me"), Some("the home folder itself"));
        assert_eq!(check("/dev/sda"), Some("a device"));
        assert_eq!(check("/dev/null"), None);
        assert_eq!(check("/var/tmp/x"), None);
        assert_eq!(check("/home/me/projects"), None);
        assert_eq!(check("/srv/data"), None);
    }

    #[test]
    fn own_folders_are_plain_folders_in_the_home_folder() {
        let home = Some(Path::new("/home/me"));
        assert!(is_own_folder(Path::new("/home/me/projects/app"), home));
        assert!(!is_own_folder(Path::new("/home/me"), home));
        assert!(!is_own_folder(Path::new("/home/me/.cache/x"), home));
        assert!(!is_own_folder(
            Path::new("/home/me/projects/.git/hooks"),
            home
        ));
        assert!(!is_own_folder(Path::new("/home/me/Library/Prefs"), home));
        assert!(!is_own_folder(Path::new("/srv/data"), home));
        assert!(!is_own_folder(Path::new("/home/me/x"), None));
        // A file right in the home folder is not in one of the person's folders.
        assert!(!is_own_folder(Path::new("/home/me/file.txt"), home));
    }

    #[test]
    fn a_grant_names_the_repository_or_the_folder_never_a_broad_one() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().canonicalize()?.join("home");
        let repo = home.join("code/lib");
        std::fs::create_dir_all(repo.join(".git"))?;
        std::fs::create_dir_all(repo.join("src/deep"))?;
        std::fs::create_dir_all(home.join("notes"))?;
        std::fs::create_dir_all(home.join(".ssh"))?;
        let guard = Guard::new(Some(home.clone()), &home.join(".local/share/tether-agent"));
        assert_eq!(
            grant_folder(&repo.join("src/deep/x.rs"), &guard),
            Some(repo.clone())
        );
        assert_eq!(
            grant_folder(&home.join("notes/todo.md"), &guard),
            Some(home.join("notes"))
        );
        assert_eq!(
            grant_folder(&home.join("notes"), &guard),
            Some(home.join("notes"))
        );
        // The home folder itself, and a folder holding keys, are never handed over.
        assert_eq!(grant_folder(&home.join("file.txt"), &guard), None);
        assert_eq!(grant_folder(&home.join(".ssh/config"), &guard), None);
        Ok(())
    }
}
