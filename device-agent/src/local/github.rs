//! GitHub sign-ins for pull requests: one token per GitHub host, kept apart from the run
//! secrets in `github.vault` (AES-256-GCM under the local key, 0600, atomic), so no job can
//! name one and no run's environment ever holds one.
//!
//! A host is `github.com` (API `https://api.github.com`) or a GitHub Enterprise host, maybe
//! with a port (API `https://HOST/api/v3` unless given). An `http://` API address is taken
//! for loopback only. Tokens leave this module only as [`GithubToken`], whose `Debug` never
//! shows it, for the pull-request client's `Authorization` header.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::local::encrypted_file::EncryptedFile;
use crate::local::state::DataDir;

/// The host a bare `github add` means.
pub const DEFAULT_HOST: &str = "github.com";
/// github.com's API.
pub const DEFAULT_API_URL: &str = "https://api.github.com";
const VAULT_FILE: &str = "github.vault";
/// Longest token taken (GitHub's are well under this).
const MAX_TOKEN_BYTES: usize = 1024;

/// `github.vault`, changed by `github add` and `github remove`.
static VAULT: EncryptedFile = EncryptedFile::new(
    VAULT_FILE,
    "github.lock",
    b"tether/github-vault/v1",
    "the GitHub vault",
);

/// A GitHub token. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct GithubToken(String);

impl GithubToken {
    /// A token as typed or printed by `gh`: one line of visible ASCII.
    ///
    /// # Errors
    /// When it is empty, too long, or holds spaces or control characters.
    pub fn parse(raw: &str) -> Result<GithubToken> {
        let token = raw.trim();
        if token.is_empty() {
            bail!("the token is empty");
        }
        if token.len() > MAX_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
            bail!(
                "a token is one line of letters, digits and punctuation, at most 1024 characters"
            );
        }
        Ok(GithubToken(token.to_owned()))
    }

    /// The token itself, for an `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for GithubToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GithubToken([hidden])")
    }
}

/// A registered host, as `github list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubHost {
    /// `github.com`, `ghe.example.com` or `127.0.0.1:8080`.
    pub host: String,
    /// The REST API's base, without a trailing `/`.
    pub api_url: String,
}

/// One host's sign-in.
#[derive(Debug, Clone)]
pub struct GithubSignIn {
    pub host: GithubHost,
    pub token: GithubToken,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    api_url: String,
    token: String,
    saved_at: i64,
}

#[derive(Default, Serialize, Deserialize)]
struct Contents {
    hosts: BTreeMap<String, Entry>,
}

/// The GitHub sign-ins of one data dir.
pub struct GithubVault<'a> {
    data_dir: &'a DataDir,
}

impl<'a> GithubVault<'a> {
    pub fn new(data_dir: &'a DataDir) -> GithubVault<'a> {
        GithubVault { data_dir }
    }

    /// Saves (or replaces) the token of `host`, with its API address.
    ///
    /// # Errors
    /// When the vault cannot be read or written.
    pub fn add(&self, host: &GithubHost, token: &GithubToken, now: i64) -> Result<()> {
        self.update(|contents| {
            contents.hosts.insert(
                host.host.clone(),
                Entry {
                    api_url: host.api_url.clone(),
                    token: token.expose().to_owned(),
                    saved_at: now,
                },
            );
            Ok(())
        })
    }

    /// Forgets `host`'s token; whether it was there.
    ///
    /// # Errors
    /// When the vault cannot be read or written.
    pub fn remove(&self, host: &str) -> Result<bool> {
        self.update(|contents| Ok(contents.hosts.remove(host).is_some()))
    }

    /// The registered hosts, by name (never a token).
    ///
    /// # Errors
    /// When the vault cannot be read.
    pub fn list(&self) -> Result<Vec<GithubHost>> {
        Ok(self
            .load()?
            .hosts
            .into_iter()
            .map(|(host, entry)| GithubHost {
                host,
                api_url: entry.api_url,
            })
            .collect())
    }

    /// The sign-in of `host` (exactly as registered), if any.
    ///
    /// # Errors
    /// When the vault cannot be read.
    pub fn sign_in(&self, host: &str) -> Result<Option<GithubSignIn>> {
        let contents = self.load()?;
        let Some(entry) = contents.hosts.get(host) else {
            return Ok(None);
        };
        Ok(Some(GithubSignIn {
            host: GithubHost {
                host: host.to_owned(),
                api_url: entry.api_url.clone(),
            },
            token: GithubToken::parse(&entry.token)?,
        }))
    }

    /// Every saved token, to hide them in anything a run reports.
    pub fn all_tokens(&self) -> Vec<String> {
        match self.load() {
            Ok(contents) => contents.hosts.into_values().map(|e| e.token).collect(),
            Err(err) => {
                tracing::warn!("cannot read the GitHub vault: {err:#}");
                Vec::new()
            }
        }
    }

    fn update<T>(&self, change: impl FnOnce(&mut Contents) -> Result<T>) -> Result<T> {
        VAULT.update(self.data_dir, change)
    }

    fn load(&self) -> Result<Contents> {
        VAULT.load(self.data_dir)
    }
}

/// `raw` as a host key: lowercase, `NAME[:PORT]` (letters, digits, `-` and `.`; a port
/// from 1 to 65535).
///
/// # Errors
/// When it is not such a host.
pub fn parse_host(raw: &str) -> Result<String> {
    let host = raw.trim().to_ascii_lowercase();
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host.as_str(), None),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    let port_ok = port.is_none_or(|port| port.parse::<u16>().is_ok_and(|port| port > 0));
    if !name_ok || !port_ok {
        bail!("{raw:?} is not a host name (like github.com or ghe.example.com:8443)");
    }
    Ok(host)
}

/// The host's API address: `api_url` checked (https, or http on loopback; no user, query or
/// fragment), else the default for the host.
///
/// # Errors
/// When `api_url` is not such an address.
pub fn api_url_for(host: &str, api_url: Option<&str>) -> Result<String> {
    let Some(raw) = api_url else {
        return Ok(if host == DEFAULT_HOST {
            DEFAULT_API_URL.to_owned()
        } else {
            format!("https://{host}/api/v3")
        });
    };
    let url =
        reqwest::Url::parse(raw.trim()).with_context(|| format!("{raw:?} is not an address"))?;
    let loopback = url.host_str().is_some_and(is_loopback);
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => bail!("an http:// API address is taken for this computer (loopback) only"),
        _ => bail!("the API address must start with https://"),
    }
    if !url.username().is_empty() || url.password().is_some() {
        bail!("the API address must not hold a user or password");
    }
    if url.query().is_some() || url.fragment().is_some() || url.host_str().is_none() {
        bail!("the API address must be a plain https://HOST/PATH");
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `localhost`, or an address of 127.0.0.0/8 or `[::1]`.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_api_addresses_are_checked() {
        assert_eq!(
            parse_host(" GitHub.com ").ok().as_deref(),
            Some("github.com")
        );
        assert_eq!(
            parse_host("127.0.0.1:9418").ok().as_deref(),
            Some("127.0.0.1:9418")
        );
        for bad in [
            "",
            "a b",
            "x:0",
            "x:99999",
            "-x.com",
            "a..b",
            "https://github.com",
            "x/y",
        ] {
            assert!(parse_host(bad).is_err(), "{bad:?}");
        }
        let api = |host: &str, url: Option<&str>| api_url_for(host, url).ok();
        assert_eq!(api("github.com", None).as_deref(), Some(DEFAULT_API_URL));
        assert_eq!(
            api("ghe.example.com", None).as_deref(),
            Some("https://ghe.example.com/api/v3")
        );
        assert_eq!(
            api("x", Some("http://127.0.0.1:8080/")).as_deref(),
            Some("http://127.0.0.1:8080")
        );
        for bad in [
            "http://example.com",
            "ftp://example.com",
            "https://u:p@example.com",
            "https://example.com/?a=1",
            "nonsense",
        ] {
            assert!(api("x", Some(bad)).is_none(), "{bad}");
        }
    }

    #[test]
    fn tokens_are_kept_encrypted_and_never_shown() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        let vault = GithubVault::new(&data_dir);
        assert!(GithubToken::parse("  \n").is_err());
        assert!(GithubToken::parse("a b").is_err());
        let token = GithubToken::parse("ghp_secretvalue123\n")?;
        assert_eq!(format!("{token:?}"), "GithubToken([hidden])");
        let host = GithubHost {
            host: "github.com".into(),
            api_url: DEFAULT_API_URL.into(),
        };
        vault.add(&host, &token, 1)?;
        assert_eq!(vault.list()?, vec![host.clone()]);
        let on_disk = std::fs::read(tmp.path().join(VAULT_FILE))?;
        assert!(!String::from_utf8_lossy(&on_disk).contains("ghp_secretvalue123"));
        let signed_in = vault.sign_in("github.com")?.map(|s| s.token);
        assert_eq!(signed_in, Some(token));
        assert!(vault.sign_in("ghe.example.com")?.is_none());
        assert!(vault.remove("github.com")?);
        assert!(!vault.remove("github.com")?);
        assert!(vault.list()?.is_empty());
        Ok(())
    }
}
