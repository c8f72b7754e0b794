//! One rule for the files that hold keys, sign-ins and other credentials.
//!
//! The server refuses evidence by these names, and the agent never shows them through the
//! live file view, never sends them as evidence, and keeps the home folder's ones out of
//! every run (the guard, the hard floor). One list, so the four places cannot disagree.

/// Why a name is a credential file, for each caller's own message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    /// `.env`, `.env.production`, `.envrc`, `.env~`, `prod.env`, `env.sh`: environment
    /// files (every name that starts with `.env` or ends with `.env`).
    Environment,
    /// `.ssh`, `.aws`, …: a folder that holds credentials.
    CredentialFolder,
    /// `.netrc`, `known_hosts`, `credentials.json`, …: a credential file by its name.
    CredentialFile,
    /// `id_ed25519`, `server.pem`, `vault.kdbx`, …: a key or a secret store.
    Key,
}

/// Folder names that hold credentials wherever they are.
pub const CREDENTIAL_FOLDERS: &[&str] = &[".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker"];

/// File names that are credentials wherever they are (compared in lower case).
pub const CREDENTIAL_FILES: &[&str] = &[
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".git-credentials",
    // Git's settings often carry a token (`url.….insteadOf = https://TOKEN@…`, helpers).
    ".gitconfig",
    ".htpasswd",
    "credentials",
    "credentials.json",
    "credentials.yml",
    "credentials.yaml",
    "secrets.json",
    "secrets.yml",
    "secrets.yaml",
    "secrets.toml",
    "service-account.json",
    "known_hosts",
    "authorized_keys",
    // The agent's own: its seal key, its device token, the key of its local files.
    "seal-key.json",
    "device-token",
    "local.key",
];

/// Name beginnings of SSH private (and public) keys.
pub const KEY_PREFIXES: &[&str] = &["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"];

/// Name endings of keys, certificates with keys, and secret stores.
pub const KEY_SUFFIXES: &[&str] = &[
    ".pem",
    ".key",
    ".p12",
    ".pfx",
    ".jks",
    ".keystore",
    ".kdbx",
    ".ppk",
    ".asc",
    ".gpg",
    ".tfstate",
];

/// Paths under the home folder that hold keys and sign-ins: the owner's SSH and GPG keys,
/// git and package-registry credentials, cloud sign-ins, and coding agents' own sign-ins.
pub const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".password-store",
    ".local/share/keyrings",
    ".pki",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".oci",
    ".terraform.d",
    ".vault-token",
    ".npmrc",
    ".yarnrc",
    ".pypirc",
    ".gem/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    // Coding agents' sign-ins and keys: an engine gets its own only with `--use-my-sign-in`.
    ".codex",
    ".claude",
    ".claude.json",
    ".gemini",
    ".qwen",
    ".config/openai",
    "Library/Keychains",
];

/// Whether a file or folder name (one path component) is a credential, and which kind.
pub fn credential_kind(name: &str) -> Option<CredentialKind> {
    let lower = name.to_ascii_lowercase();
    // `.env*` is every name that starts with `.env` (`.envrc`, `.env~`, `.env-prod`,
    // `.env.local.bak`), not only `.env` and `.env.…`; `env.sh` is the shell spelling.
    if lower.starts_with(".env") || lower.ends_with(".env") || lower == "env.sh" {
        return Some(CredentialKind::Environment);
    }
    if CREDENTIAL_FOLDERS.contains(&lower.as_str()) {
        return Some(CredentialKind::CredentialFolder);
    }
    if CREDENTIAL_FILES.contains(&lower.as_str()) {
        return Some(CredentialKind::CredentialFile);
    }
    let key = KEY_PREFIXES.iter().any(|prefix| lower.starts_with(prefix))
        || KEY_SUFFIXES.iter().any(|suffix| lower.ends_with(suffix));
    key.then_some(CredentialKind::Key)
}

/// Whether a path relative to the home folder (`.aws/config`, `.ssh`) is or lies inside
/// one of [`HOME_CREDENTIALS`].
pub fn is_home_credential(relative: &str) -> bool {
    let relative = relative.trim_start_matches("./").trim_end_matches('/');
    HOME_CREDENTIALS.iter().any(|path| {
        relative == *path
            || relative
                .strip_prefix(path)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, expected: Option<CredentialKind>) {
        assert_eq!(credential_kind(name), expected, "{name:?}");
    }

    #[test]
    fn names_credentials_of_every_kind() {
        use CredentialKind::*;
        check(".env", Some(Environment));
        check(".ENV.production", Some(Environment));
        check("prod.env", Some(Environment));
        // Every `.env*` name, however it goes on (issue 13, finding 8).
        for name in [
            ".envrc",
            ".env~",
            ".env-prod",
            ".env_prod",
            ".ENV.bak",
            ".environment",
        ] {
            check(name, Some(Environment));
        }
        check("env.sh", Some(Environment));
        check(".gitconfig", Some(CredentialFile));
        check(".GitConfig", Some(CredentialFile));
        check(".ssh", Some(CredentialFolder));
        check("known_hosts", Some(CredentialFile));
        check("authorized_keys", Some(CredentialFile));
        check("credentials.yml", Some(CredentialFile));
        check("Credentials.YAML", Some(CredentialFile));
        check("device-token", Some(CredentialFile));
        check("id_rsa", Some(Key));
        check("id_ed25519.pub", Some(Key));
        check("server.PEM", Some(Key));
        check("release.asc", Some(Key));
        check("terraform.tfstate", Some(Key));
    }

    #[test]
    fn leaves_ordinary_files_alone() {
        for name in [
            "README.md",
            "environment.rs",
            "keys.rs",
            "credentials.md",
            "env",
            "ssh",
            "env.rs",
            "setenv.sh",
            "my.envelope",
            ".gitignore",
            ".gitattributes",
        ] {
            check(name, None);
        }
    }

    #[test]
    fn home_credentials_cover_what_lies_inside() {
        assert!(is_home_credential(".ssh"));
        assert!(is_home_credential(".ssh/id_ed25519"));
        assert!(is_home_credential(".config/gh/hosts.yml"));
        assert!(is_home_credential(".aws/"));
        assert!(!is_home_credential(".sshd"));
        assert!(!is_home_credential(".config"));
        assert!(!is_home_credential("projects/.ssh-notes"));
    }
}
