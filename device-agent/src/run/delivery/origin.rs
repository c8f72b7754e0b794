//! Which GitHub repository `origin` is: the host and `OWNER/REPO` of its URL.
//!
//! Taken forms: `https://HOST[:port]/o/r(.git)` (and `http://`), `ssh://[user@]HOST[:port]/o/r(.git)`,
//! the scp-like `user@HOST:o/r(.git)` and `git://HOST[:port]/o/r(.git)`. Anything else
//! (a path on disk, another transport, more or fewer path parts) is no GitHub repository.

/// A repository on a GitHub host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubRepo {
    /// The host, lowercase, with the port when the URL names one.
    pub host: String,
    pub owner: String,
    pub name: String,
}

impl GithubRepo {
    /// The host without its port (an ssh port is not the API's).
    pub fn host_name(&self) -> &str {
        self.host
            .rsplit_once(':')
            .map_or(self.host.as_str(), |(name, _)| name)
    }
}

/// The GitHub repository of a remote URL, if it is one of the forms taken.
pub fn parse(url: &str) -> Option<GithubRepo> {
    let url = url.trim();
    let (authority, path) = match url.split_once("://") {
        Some((scheme, rest)) => {
            if !["https", "http", "ssh", "git"].contains(&scheme.to_ascii_lowercase().as_str()) {
                return None;
            }
            rest.split_once('/')?
        }
        None => scp_like(url)?,
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = checked_host(host)?;
    let (owner, name) = owner_and_name(path)?;
    Some(GithubRepo { host, owner, name })
}

/// `user@HOST:o/r` (no scheme, a colon before any slash).
fn scp_like(url: &str) -> Option<(&str, &str)> {
    let (authority, path) = url.split_once(':')?;
    if authority.contains('/') || path.starts_with('/') {
        return None;
    }
    Some((authority, path))
}

fn checked_host(host: &str) -> Option<String> {
    let host = host.to_ascii_lowercase();
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host.as_str(), None),
    };
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    let port_ok = port.is_none_or(|port| port.parse::<u16>().is_ok_and(|port| port > 0));
    (name_ok && port_ok).then_some(host)
}

fn owner_and_name(path: &str) -> Option<(String, String)> {
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let mut parts = path.split('/');
    let (owner, name) = (parts.next()?, parts.next()?);
    let valid = |part: &str| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    if parts.next().is_some() || !valid(owner) || !valid(name) {
        return None;
    }
    Some((owner.to_owned(), name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str, expected: Option<(&str, &str, &str)>) {
        let parsed = parse(url);
        let got = parsed
            .as_ref()
            .map(|repo| (repo.host.as_str(), repo.owner.as_str(), repo.name.as_str()));
        assert_eq!(got, expected, "{url}");
    }

    #[test]
    fn every_form_of_a_github_url_is_read() {
        let tether = Some(("github.com", "acme", "tether"));
        check("https://github.com/acme/tether.git", tether);
        check("https://github.com/acme/tether", tether);
        check("https://github.com/acme/tether/", tether);
        check("https://me@GitHub.com/acme/tether.git", tether);
        check("ssh://git@github.com/acme/tether.git", tether);
        check("git@github.com:acme/tether.git", tether);
        check("github.com:acme/tether", tether);
        check(
            "ssh://git@ghe.example.com:2222/acme/tether.git",
            Some(("ghe.example.com:2222", "acme", "tether")),
        );
        check(
            "git://127.0.0.1:9418/owner/repo.git",
            Some(("127.0.0.1:9418", "owner", "repo")),
        );
        check(
            "https://ghe.example.com:8443/a.b/c_d",
            Some(("ghe.example.com:8443", "a.b", "c_d")),
        );
    }

    #[test]
    fn anything_else_is_no_github_repository() {
        for url in [
            "",
            "/srv/git/repo.git",
            "./repo",
            "file:///srv/git/owner/repo.git",
            "ext::sh -c evil",
            "https://github.com/acme",
            "https://github.com/acme/tether/tree/main",
            "https://github.com/../tether",
            "https://github.com:99999/acme/tether",
            "https://git hub.com/acme/tether",
            "git@github.com:/acme/tether",
            "C:/repos/x",
        ] {
            check(url, None);
        }
        assert_eq!(
            parse("ssh://git@github.com:22/a/b").map(|repo| repo.host_name().to_owned()),
            Some("github.com".to_owned())
        );
    }
}
