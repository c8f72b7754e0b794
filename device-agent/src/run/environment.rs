//! The environment a job's programs get: an explicit allow list of the agent's own
//! variables, never a credential, plus what the job itself adds.
//!
//! Allow-listing (rather than removing known secrets) means a credential under a name nobody
//! thought of stays behind too. A variable on the allow list whose name still looks like a
//! credential is dropped as well.

use std::ffi::OsString;

/// Variables passed through by exact name: what shells, compilers and test runners need to
/// find their tools and speak the right language.
const ALLOWED_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "EDITOR",
    "PAGER",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "JAVA_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "NODE_PATH",
    "PKG_CONFIG_PATH",
    "LD_LIBRARY_PATH",
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "LDFLAGS",
    "RUSTFLAGS",
    "CI",
];

/// Prefixes passed through: locale settings.
const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// Name fragments of variables that usually hold credentials, matched upper-cased. They
/// override the allow list.
const CREDENTIAL_NAME_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "KEY",
    "CREDENTIAL",
    "PRIVATE",
    "AUTH",
    "COOKIE",
    "SESSION",
];
/// Prefixes of variables that are credentials or the agent's own settings.
const DENIED_PREFIXES: &[&str] = &["AWS_", "TETHER_", "GITHUB_", "GH_", "AZURE_", "GOOGLE_"];
/// Variables that are credentials without saying so: agent sockets that sign for the user,
/// and the programs git and ssh ask for a password or sign in with (only Tether's own push
/// signs in, outside the sandbox).
const CREDENTIAL_NAMES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_CONFIG_GLOBAL",
];

/// Whether a variable's name suggests it holds a credential (or the agent's own settings).
pub fn is_denied_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    names_a_credential(name)
        || DENIED_PREFIXES
            .iter()
            .any(|prefix| upper.starts_with(prefix))
}

/// Whether a variable's name says it holds a credential (`*KEY*`, `*TOKEN*`, agent sockets,
/// askpass programs): such a value is a saved secret, never a plain setting.
pub fn names_a_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_NAME_PARTS
        .iter()
        .any(|part| upper.contains(part))
        || CREDENTIAL_NAMES.contains(&upper.as_str())
}

/// Whether a variable passes from the agent to a job's programs.
pub fn is_allowed_name(name: &str) -> bool {
    let listed = ALLOWED_NAMES.contains(&name)
        || ALLOWED_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix));
    listed && !is_denied_name(name)
}

/// The allowed subset of `inherited`, in its order; names or values that are not UTF-8 are
/// dropped (the sandbox passes variables as text).
pub fn scrub(inherited: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<(String, String)> {
    inherited
        .into_iter()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| is_allowed_name(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_allow_list_passes_and_never_a_credential() {
        let inherited: Vec<(OsString, OsString)> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/me"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("GIT_AUTHOR_NAME", "Me"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("AWS_PROFILE", "prod"),
            ("OPENAI_API_KEY", "x"),
            ("MY_API_TOKEN", "x"),
            ("db_password", "x"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/x.json"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("TETHER_AGENT_HOME", "/secret/place"),
            ("RANDOM_UNKNOWN", "x"),
        ]
        .iter()
        .map(|(name, value)| ((*name).into(), (*value).into()))
        .collect();
        let names: Vec<String> = scrub(inherited).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["PATH", "HOME", "LANG", "LC_ALL"]);
    }

    #[test]
    fn no_git_sign_in_reaches_a_run() {
        let inherited: Vec<(OsString, OsString)> = [
            ("HOME", "/home/me"),
            ("SSH_AUTH_SOCK", "/run/user/1000/ssh-agent"),
            ("GIT_ASKPASS", "/usr/lib/git-core/git-gui--askpass"),
            ("SSH_ASKPASS", "/usr/bin/ksshaskpass"),
            ("GIT_SSH_COMMAND", "ssh -i ~/.ssh/deploy"),
            ("GIT_SSH", "/usr/bin/ssh"),
            ("GIT_CONFIG_GLOBAL", "/home/me/.gitconfig"),
            ("GH_TOKEN", "gho_x"),
        ]
        .iter()
        .map(|(name, value)| ((*name).into(), (*value).into()))
        .collect();
        let names: Vec<String> = scrub(inherited).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["HOME"]);
        for name in [
            "SSH_AUTH_SOCK",
            "GIT_ASKPASS",
            "SSH_ASKPASS",
            "GIT_SSH_COMMAND",
        ] {
            assert!(is_denied_name(name), "{name}");
        }
    }

    #[test]
    fn credentials_are_recognised_by_name() {
        for name in [
            "GITHUB_TOKEN",
            "AWS_REGION",
            "SSH_AUTH_SOCK",
            "X_SECRET_Y",
            "TETHER_BWRAP",
            "npm_config__auth",
        ] {
            assert!(is_denied_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "CARGO_HOME"] {
            assert!(!is_denied_name(name), "{name}");
        }
    }
}
