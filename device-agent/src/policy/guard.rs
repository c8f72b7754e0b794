//! The guard: which paths a job may be given, checked before any spawn and whatever the
//! mode or the sandbox.
//!
//! - Paths are compared canonical (absolute, links resolved), and also as written, so a link
//!   to a protected place is the protected place.
//! - **Protected paths** (keys, sign-ins, cloud credentials — the protocol's one list,
//!   [`HOME_CREDENTIALS`] — browser data, shell start-up files, the agent's own data dir and
//!   key files) are named whether or not they exist yet, so a file created later is covered
//!   too. No job folder, extra path or grant may be, hold, or sit inside one; every sandbox
//!   also masks them.
//! - **Blocked roots** (`/`, system folders, the home folder itself and its parents, shared
//!   temporary folders) are too broad to hand over as a folder.
//! - Only shared folders can be a job's folder: the run looks the label up, and the guard
//!   checks the folder again at run time, so a folder swapped for a link since it was shared
//!   is refused.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use tether_protocol::credential_files::HOME_CREDENTIALS;

use crate::local::private_files::{mode_of, set_mode};

/// Paths under the home folder that are always protected besides the keys and sign-ins of
/// [`HOME_CREDENTIALS`] (the owner's keys, git, registry and cloud credentials, coding
/// agents' sign-ins): browser data, and files that run later, outside any sandbox.
pub const HOME_PROTECTED: &[&str] = &[
    // Browser data.
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".config/vivaldi",
    "snap/firefox",
    "snap/chromium",
    "Library/Cookies",
    "Library/Safari",
    "Library/Application Support/Google/Chrome",
    "Library/Application Support/Firefox",
    "Library/Application Support/BraveSoftware",
    // Shell start-up files and other files that run later, outside any sandbox.
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".config/fish",
    ".inputrc",
    ".gitconfig",
    ".config/git",
    ".config/autostart",
    ".config/systemd",
    "Library/LaunchAgents",
];

/// System files that are always protected (readable by root, so a root agent must hide them).
pub const SYSTEM_PROTECTED: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
    "/root/.ssh",
];

/// The agent's own files, named even before they exist.
pub const AGENT_FILES: &[&str] = &["device-token", "seal-key.json", "local.key", "config.json"];

/// Folders too broad to be a job's folder.
const BLOCKED_ROOTS: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/var/tmp",
    "/Users",
    "/System",
    "/Library",
    "/Applications",
    "/Volumes",
    "/private",
    "/private/tmp",
    "/private/var",
];

/// Why the guard refused a path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{path} does not exist or cannot be resolved")]
    Missing { path: PathBuf },
    #[error("{path} is a blocked root ({why}); share a project folder inside it instead")]
    BlockedRoot { path: PathBuf, why: &'static str },
    #[error("{path} is protected ({protected}): keys, sign-ins, browser data, start-up files and the agent's own data are never given to a job")]
    Protected { path: PathBuf, protected: PathBuf },
    #[error(
        "{path} holds a protected path ({protected}); share a folder that does not contain it"
    )]
    HoldsProtected { path: PathBuf, protected: PathBuf },
    #[error(
        "the folder shared as {label:?} now resolves to {now} instead of {shared}; share it again"
    )]
    Moved {
        label: String,
        shared: PathBuf,
        now: PathBuf,
    },
}

/// What the guard knows about this computer: the home folder, the agent's data dir and the
/// protected paths derived from them.
#[derive(Debug, Clone)]
pub struct Guard {
    home: Option<PathBuf>,
    data_dir: PathBuf,
    /// Every protected path, as written and (when it exists) canonical.
    protected: Vec<PathBuf>,
}

impl Guard {
    /// The guard for a user whose home is `home` and whose agent keeps its data in `data_dir`.
    pub fn new(home: Option<PathBuf>, data_dir: &Path) -> Guard {
        let data_dir = absolute(data_dir);
        let mut named: Vec<PathBuf> = Vec::new();
        if let Some(home) = &home {
            named.extend(
                HOME_CREDENTIALS
                    .iter()
                    .chain(HOME_PROTECTED)
                    .map(|relative| home.join(relative)),
            );
        }
        named.extend(SYSTEM_PROTECTED.iter().map(PathBuf::from));
        named.push(data_dir.clone());
        named.push(crate::local::acp_engines::engines_root(&data_dir));
        // Held evidence waits there for its owner's word; no later run may read or change it.
        named.push(
            crate::local::held_evidence::HeldStore::for_data_dir(&data_dir)
                .folder()
                .to_owned(),
        );
        named.extend(AGENT_FILES.iter().map(|name| data_dir.join(name)));
        let mut protected = Vec::new();
        for path in named {
            if let Ok(canonical) = path.canonicalize() {
                if canonical != path {
                    protected.push(canonical);
                }
            }
            protected.push(path);
        }
        protected.sort();
        protected.dedup();
        Guard {
            home,
            data_dir,
            protected,
        }
    }

    /// The guard of this user: `$HOME` and `data_dir`.
    pub fn for_user(data_dir: &Path) -> Guard {
        Guard::new(dirs::home_dir(), data_dir)
    }

    /// This guard for one engine's own process, granted `own` past the protections: its
    /// state folder and, with `--use-my-sign-in`, its owner's sign-in. Protected paths equal
    /// to, inside or above an `own` path are dropped (the backends confine by allow list, so
    /// nothing beside an `own` path becomes visible); the commands the engine runs keep the
    /// whole guard.
    pub fn granting(&self, own: &[PathBuf]) -> Guard {
        let mut guard = self.clone();
        let touches = |protected: &PathBuf| {
            own.iter()
                .any(|own| protected.starts_with(own) || own.starts_with(protected))
        };
        guard.protected.retain(|protected| !touches(protected));
        guard
    }

    /// Every protected path (as written and canonical), sorted.
    pub fn protected(&self) -> &[PathBuf] {
        &self.protected
    }

    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Checks a folder to share or to run in: it must exist, and be neither a blocked root, nor
    /// protected, nor inside or holding a protected path. Returns its canonical path.
    ///
    /// # Errors
    /// The [`Refusal`] naming the rule.
    pub fn check_folder(&self, path: &Path) -> Result<PathBuf, Refusal> {
        let canonical = path.canonicalize().map_err(|_| Refusal::Missing {
            path: path.to_path_buf(),
        })?;
        for candidate in [path, canonical.as_path()] {
            if let Some(why) = self.blocked_root(candidate) {
                return Err(Refusal::BlockedRoot {
                    path: candidate.to_path_buf(),
                    why,
                });
            }
        }
        self.check_access(&canonical)?;
        if path != canonical {
            self.check_access(&absolute(path))?;
        }
        Ok(canonical)
    }

    /// Checks a path a job would be given access to (a folder, an extra writable or readable
    /// path, a file): not protected, not inside a protected path, not holding one.
    ///
    /// # Errors
    /// The [`Refusal`] naming the protected path.
    pub fn check_access(&self, path: &Path) -> Result<(), Refusal> {
        let mut candidates = vec![absolute(path)];
        if let Ok(canonical) = path.canonicalize() {
            candidates.push(canonical);
        }
        for candidate in &candidates {
            for protected in &self.protected {
                if candidate.starts_with(protected) {
                    return Err(Refusal::Protected {
                        path: candidate.clone(),
                        protected: protected.clone(),
                    });
                }
                if protected.starts_with(candidate) {
                    return Err(Refusal::HoldsProtected {
                        path: candidate.clone(),
                        protected: protected.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks the folder of a job at run time against what the owner shared: the shared path
    /// must still resolve to itself and pass [`Guard::check_folder`].
    ///
    /// # Errors
    /// The [`Refusal`] naming the rule.
    pub fn check_shared_folder(&self, label: &str, shared: &Path) -> Result<PathBuf, Refusal> {
        let canonical = self.check_folder(shared)?;
        if canonical != shared {
            return Err(Refusal::Moved {
                label: label.to_owned(),
                shared: shared.to_path_buf(),
                now: canonical,
            });
        }
        Ok(canonical)
    }

    fn blocked_root(&self, path: &Path) -> Option<&'static str> {
        let path = absolute(path);
        if BLOCKED_ROOTS.iter().any(|root| path == Path::new(root)) {
            return Some("a system or shared folder");
        }
        if let Some(home) = &self.home {
            if &path == home || home.canonicalize().is_ok_and(|home| home == path) {
                return Some("the home folder itself");
            }
            if home.starts_with(&path) {
                return Some("a parent of the home folder");
            }
        }
        if path.starts_with(&self.data_dir) || self.data_dir.starts_with(&path) {
            return Some("the agent's own data");
        }
        None
    }
}

/// `path` made absolute against the current directory and cleaned of `.` and `..` (without
/// resolving links).
pub fn absolute(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut clean = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other.as_os_str()),
        }
    }
    clean
}

/// Files in a work folder that git runs or obeys later, outside any sandbox: every
/// repository's `.git/hooks` and `.git/config`, found to a bounded depth; the work folder's
/// `.git` file when it is a worktree (it names the git folder); and in each `granted`
/// folder that is a worktree's own git folder (it holds `commondir`), the files naming its
/// repository and checkout and its own configuration.
pub fn git_protected(work_folder: &Path, granted: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    find_git_dirs(work_folder, 0, &mut found);
    let mut protected: Vec<PathBuf> = found
        .into_iter()
        .flat_map(|git| [git.join("hooks"), git.join("config")])
        .collect();
    let link = work_folder.join(".git");
    if link.is_file() {
        protected.push(link);
    }
    // Only folders the agent granted: a `.git` file's own word is never followed.
    for dir in granted.iter().filter(|dir| dir.join("commondir").is_file()) {
        protected.extend(["commondir", "gitdir", "config.worktree"].map(|name| dir.join(name)));
    }
    protected
}

/// How deep, and how many directories, the nested-repository scan looks.
const GIT_SCAN_DEPTH: usize = 4;
const GIT_SCAN_SKIP: &[&str] = &["node_modules", "target", ".venv", "venv", "dist", "build"];

fn find_git_dirs(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    let git = dir.join(".git");
    if git.is_dir() {
        found.push(git);
    }
    if depth >= GIT_SCAN_DEPTH || found.len() > 64 {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == ".git" || GIT_SCAN_SKIP.contains(&name.as_ref()) {
            continue;
        }
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            find_git_dirs(&entry.path(), depth + 1, found);
        }
    }
}

/// The contents of a work folder's git hooks and configs before a run, to restore them after
/// a run whose sandbox cannot make them read-only (Landlock, or none).
#[derive(Debug, Default)]
pub struct GitSnapshot {
    /// Every file under the protected paths, with its bytes and mode; `None` for a protected
    /// path that did not exist.
    files: BTreeMap<PathBuf, Option<(Vec<u8>, u32)>>,
    roots: Vec<PathBuf>,
}

impl GitSnapshot {
    /// Records what [`git_protected`] names for `work_folder` and the `granted` folders.
    pub fn take(work_folder: &Path, granted: &[PathBuf]) -> GitSnapshot {
        let roots = git_protected(work_folder, granted);
        let mut snapshot = GitSnapshot {
            files: BTreeMap::new(),
            roots: roots.clone(),
        };
        for root in &roots {
            if root.exists() {
                snapshot.record(root);
            } else {
                snapshot.files.insert(root.clone(), None);
            }
        }
        snapshot
    }

    fn record(&mut self, path: &Path) {
        let Ok(meta) = fs::symlink_metadata(path) else {
            return;
        };
        if meta.is_dir() {
            if let Ok(entries) = fs::read_dir(path) {
                for entry in entries.flatten() {
                    self.record(&entry.path());
                }
            }
        } else if meta.is_file() {
            if let Ok(bytes) = fs::read(path) {
                self.files
                    .insert(path.to_path_buf(), Some((bytes, mode_of(&meta))));
            }
        }
    }

    /// Puts back what changed: rewrites changed files, removes added ones. Returns the paths
    /// that had changed.
    pub fn restore(&self) -> Vec<PathBuf> {
        let mut changed = Vec::new();
        let mut now = GitSnapshot::default();
        for root in &self.roots {
            if root.exists() {
                now.record(root);
            }
        }
        for (path, before) in &self.files {
            match before {
                Some((bytes, mode)) => {
                    let same = fs::read(path).is_ok_and(|current| &current == bytes)
                        && fs::symlink_metadata(path)
                            .is_ok_and(|meta| meta.is_file() && mode_of(&meta) == *mode);
                    if !same {
                        changed.push(path.clone());
                        let _ = fs::remove_file(path);
                        let _ = fs::remove_dir_all(path);
                        if let Some(parent) = path.parent() {
                            let _ = fs::create_dir_all(parent);
                        }
                        let _ = fs::write(path, bytes);
                        let _ = set_mode(path, *mode);
                    }
                }
                None => {
                    if fs::symlink_metadata(path).is_ok() {
                        changed.push(path.clone());
                        let _ = fs::remove_file(path);
                        let _ = fs::remove_dir_all(path);
                    }
                }
            }
        }
        for path in now.files.keys() {
            if !self.files.contains_key(path) {
                changed.push(path.clone());
                let _ = fs::remove_file(path);
            }
        }
        changed.sort();
        changed.dedup();
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _tmp: tempfile::TempDir,
        home: PathBuf,
        guard: Guard,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let home = tmp.path().canonicalize().unwrap_or_default().join("home");
        for dir in ["projects/app", ".ssh", ".config", "data"] {
            fs::create_dir_all(home.join(dir)).unwrap_or_else(|err| panic!("{err}"));
        }
        let guard = Guard::new(Some(home.clone()), &home.join("data/tether-agent"));
        Fixture {
            _tmp: tmp,
            home,
            guard,
        }
    }

    fn refusal_kind(result: Result<PathBuf, Refusal>) -> &'static str {
        match result {
            Ok(_) => "ok",
            Err(Refusal::Missing { .. }) => "missing",
            Err(Refusal::BlockedRoot { .. }) => "blocked-root",
            Err(Refusal::Protected { .. }) => "protected",
            Err(Refusal::HoldsProtected { .. }) => "holds-protected",
            Err(Refusal::Moved { .. }) => "moved",
        }
    }

    #[test]
    fn folders_are_checked_canonical() {
        let fx = fixture();
        let check = |path: &Path| refusal_kind(fx.guard.check_folder(path));
        assert_eq!(check(&fx.home.join("projects/app")), "ok");
        assert_eq!(check(&fx.home.join("projects/app/../app")), "ok");
        assert_eq!(check(Path::new("/")), "blocked-root");
        assert_eq!(check(Path::new("/etc")), "blocked-root");
        assert_eq!(check(Path::new("/tmp")), "blocked-root");
        assert_eq!(check(&fx.home), "blocked-root");
        assert_eq!(
            check(fx.home.parent().unwrap_or(Path::new("/"))),
            "blocked-root"
        );
        assert_eq!(check(&fx.home.join(".ssh")), "protected");
        assert_eq!(check(&fx.home.join(".config")), "holds-protected");
        assert_eq!(check(&fx.home.join("nope")), "missing");
        // The agent's data dir, named before it exists.
        fs::create_dir_all(fx.home.join("data/tether-agent/sub")).unwrap_or_default();
        assert_eq!(
            check(&fx.home.join("data/tether-agent/sub")),
            "blocked-root"
        );
        assert_eq!(check(&fx.home.join("data")), "blocked-root");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_to_a_protected_place_is_that_place() {
        let fx = fixture();
        let link = fx.home.join("projects/keys");
        std::os::unix::fs::symlink(fx.home.join(".ssh"), &link).unwrap_or_default();
        assert_eq!(refusal_kind(fx.guard.check_folder(&link)), "protected");
        // A shared folder swapped for a link later is refused at run time.
        let app = fx.home.join("projects/app");
        let moved = fx.home.join("projects/app-moved");
        fs::rename(&app, &moved).unwrap_or_default();
        std::os::unix::fs::symlink(&moved, &app).unwrap_or_default();
        assert_eq!(
            refusal_kind(fx.guard.check_shared_folder("app", &app)),
            "moved"
        );
    }

    #[test]
    fn protected_paths_are_named_before_they_exist() {
        let fx = fixture();
        let protected = fx.guard.protected();
        for expected in [
            fx.home.join(".aws"),
            fx.home.join(".bashrc"),
            fx.home.join(".mozilla"),
            fx.home.join("data/tether-agent/seal-key.json"),
            fx.home.join("data/tether-agent-evidence/held"),
            PathBuf::from("/etc/shadow"),
        ] {
            assert!(protected.contains(&expected), "{expected:?}");
        }
        assert!(fx
            .guard
            .check_access(&fx.home.join(".aws/credentials"))
            .is_err());
        assert!(fx.guard.check_access(&fx.home.join("projects")).is_ok());
    }

    #[test]
    fn an_engine_is_granted_its_own_state_and_sign_in_and_nothing_beside() {
        let fx = fixture();
        let data_dir = fx.home.join("data/tether-agent");
        let engines = fx.home.join("data/tether-agent-engines");
        let own_state = engines.join("claude/home");
        assert!(
            fx.guard.check_access(&own_state).is_err(),
            "every run is kept out"
        );
        assert!(fx.guard.check_access(&fx.home.join(".gemini")).is_err());
        assert!(fx
            .guard
            .check_access(&fx.home.join(".qwen/oauth_creds.json"))
            .is_err());
        let granted = fx
            .guard
            .granting(&[own_state.clone(), fx.home.join(".claude")]);
        assert!(granted.check_access(&own_state).is_ok());
        assert!(granted
            .check_access(&fx.home.join(".claude/settings.json"))
            .is_ok());
        assert!(granted.check_access(&fx.home.join(".codex")).is_err());
        assert!(granted.check_access(&fx.home.join(".ssh")).is_err());
        assert!(granted
            .check_access(&data_dir.join("seal-key.json"))
            .is_err());
        assert!(
            fx.guard.check_access(&own_state).is_err(),
            "the run's guard is unchanged"
        );
    }

    #[test]
    fn git_hooks_and_config_are_restored() {
        let fx = fixture();
        let work = fx.home.join("projects/app");
        fs::create_dir_all(work.join(".git/hooks")).unwrap_or_default();
        fs::create_dir_all(work.join("nested/lib/.git")).unwrap_or_default();
        fs::write(work.join(".git/config"), "[core]\n").unwrap_or_default();
        fs::write(work.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap_or_default();
        let snapshot = GitSnapshot::take(&work, &[]);
        fs::write(work.join(".git/config"), "[core]\nfsmonitor = evil\n").unwrap_or_default();
        fs::write(work.join(".git/hooks/pre-commit"), "evil").unwrap_or_default();
        fs::create_dir_all(work.join("nested/lib/.git/hooks")).unwrap_or_default();
        fs::write(work.join("nested/lib/.git/hooks/post-checkout"), "evil").unwrap_or_default();
        let changed = snapshot.restore();
        assert_eq!(
            changed,
            [
                work.join(".git/config"),
                work.join(".git/hooks/pre-commit"),
                work.join("nested/lib/.git/hooks"),
                work.join("nested/lib/.git/hooks/post-checkout"),
            ]
        );
        assert_eq!(
            fs::read_to_string(work.join(".git/config")).unwrap_or_default(),
            "[core]\n"
        );
        assert!(!work.join(".git/hooks/pre-commit").exists());
        assert!(work.join(".git/hooks/pre-commit.sample").exists());
        assert!(!work.join("nested/lib/.git/hooks").exists());
        assert!(snapshot.restore().is_empty());
    }
}
