//! The flags of a changed file: one that can run code outside the sandbox later
//! ([`FLAG_RUNS_LATER`]: a hook, a build or task file, a CI workflow, a shell start-up file),
//! and a credential file ([`FLAG_CREDENTIAL`], by the one rule of
//! [`tether_protocol::credential_files`]).
//!
//! Names match at any depth, so a repository the run cloned or created inside the folder is
//! judged the same as the folder itself. Paths are relative and `/`-separated.

use tether_protocol::changes::{FLAG_CREDENTIAL, FLAG_RUNS_LATER};
use tether_protocol::credential_files::credential_kind;

/// File names that a tool runs or obeys when someone builds, tests, opens or enters the
/// folder.
const RUNS_LATER_NAMES: &[&str] = &[
    // direnv, git, package managers and their settings.
    ".envrc",
    ".gitattributes",
    ".gitmodules",
    "package.json",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pnpmfile.cjs",
    // Build and task files.
    "Makefile",
    "makefile",
    "GNUmakefile",
    "justfile",
    "Justfile",
    ".justfile",
    "build.rs",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "conftest.py",
    "noxfile.py",
    "tox.ini",
    "Rakefile",
    "CMakeLists.txt",
    "meson.build",
    "build.gradle",
    "build.gradle.kts",
    "settings.gradle",
    "settings.gradle.kts",
    "gradlew",
    "pom.xml",
    "Taskfile.yml",
    "Taskfile.yaml",
    "flake.nix",
    "shell.nix",
    "Dockerfile",
    "Containerfile",
    // CI and hook managers.
    ".gitlab-ci.yml",
    ".pre-commit-config.yaml",
    "lefthook.yml",
    ".lefthook.yml",
    ".huskyrc",
    // Shell start-up files.
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
    "config.fish",
];

/// Folders whose every file is run or obeyed later.
const RUNS_LATER_FOLDERS: &[&str] = &[".husky", ".direnv", ".devcontainer", ".circleci", ".run"];

/// Two-part paths (`folder/name`) matched at the end of a path.
const RUNS_LATER_PAIRS: &[(&str, &str)] = &[
    (".cargo", "config"),
    (".cargo", "config.toml"),
    (".vscode", "tasks.json"),
    (".vscode", "launch.json"),
    (".vscode", "settings.json"),
    (".idea", "workspace.xml"),
    // A nested repository's own configuration (filters, hooks path, aliases).
    (".git", "config"),
];

/// Folder sequences under which every file runs later, matched anywhere in a path.
const RUNS_LATER_UNDER: &[&[&str]] = &[
    &[".git", "hooks"],
    &[".github", "workflows"],
    &[".github", "actions"],
    &[".idea", "runConfigurations"],
];

/// The flags of the changed file at `path`, in a stable order.
pub fn flags(path: &str) -> Vec<String> {
    let mut flags = Vec::new();
    if runs_later(path) {
        flags.push(FLAG_RUNS_LATER.to_owned());
    }
    if is_credential(path) {
        flags.push(FLAG_CREDENTIAL.to_owned());
    }
    flags
}

/// Whether the file at `path` can run code outside the sandbox later.
pub fn runs_later(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    let Some((name, folders)) = parts.split_last() else {
        return false;
    };
    if RUNS_LATER_NAMES.contains(name)
        || name.starts_with("Dockerfile.")
        || name.ends_with(".dockerfile")
    {
        return true;
    }
    if folders
        .iter()
        .any(|folder| RUNS_LATER_FOLDERS.contains(folder))
    {
        return true;
    }
    if let Some(parent) = folders.last() {
        if RUNS_LATER_PAIRS
            .iter()
            .any(|(folder, file)| parent == folder && name == file)
        {
            return true;
        }
    }
    // Git runs no `*.sample` hook: `git init` puts them in every new repository.
    if folders.ends_with(&[".git", "hooks"]) && name.ends_with(".sample") {
        return false;
    }
    RUNS_LATER_UNDER
        .iter()
        .any(|under| folders.windows(under.len()).any(|window| window == *under))
}

/// Whether any part of `path` names a credential (an environment file, a key, a credential
/// folder or file).
pub fn is_credential(path: &str) -> bool {
    path.split('/')
        .any(|part| !part.is_empty() && credential_kind(part).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_run_later_are_flagged_at_any_depth() {
        for path in [
            ".envrc",
            "package.json",
            "web/app/package.json",
            "Makefile",
            "vendor/lib/GNUmakefile",
            "crates/x/build.rs",
            "pyproject.toml",
            ".git/hooks/pre-commit",
            "cloned/.git/hooks/post-checkout",
            "cloned/.git/config",
            ".husky/pre-push",
            ".husky/_/husky.sh",
            ".cargo/config.toml",
            ".vscode/tasks.json",
            ".idea/runConfigurations/Run.xml",
            ".idea/workspace.xml",
            ".github/workflows/ci.yml",
            ".gitlab-ci.yml",
            ".pre-commit-config.yaml",
            "Dockerfile",
            "docker/Dockerfile.dev",
            "home/.bashrc",
            ".config/fish/config.fish",
            ".direnv/python/bin/activate",
            ".gitattributes",
            ".gitmodules",
        ] {
            assert!(runs_later(path), "{path}");
        }
        for path in [
            "README.md",
            "src/main.rs",
            "package-lock.json",
            "docs/Makefile.md",
            ".git",
            "config",
            ".vscode/extensions.json",
            "hooks/pre-commit",
            ".git/hooks/pre-commit.sample",
            "",
        ] {
            assert!(!runs_later(path), "{path}");
        }
    }

    #[test]
    fn credentials_are_flagged_by_the_protocols_rule() {
        assert_eq!(flags(".envrc"), [FLAG_RUNS_LATER, FLAG_CREDENTIAL]);
        assert_eq!(flags("deploy/.env.production"), [FLAG_CREDENTIAL]);
        assert_eq!(flags(".ssh/config"), [FLAG_CREDENTIAL]);
        assert_eq!(flags("keys/id_ed25519"), [FLAG_CREDENTIAL]);
        assert!(flags("src/lib.rs").is_empty());
    }
}
