//! Sites a saved secret may be sent to (its `allow` list).
//!
//! A site is written one of two ways:
//! - a **host** (`api.example.com`): HTTPS on port 443 to that host and its subdomains;
//! - an exact **origin** (`https://api.example.com:8443`): that scheme, host and port only.
//!   Plain `http` is accepted only for this computer's own loopback addresses, so a value is
//!   never sent in the clear over a network.
//!
//! The list travels inside the sealed box's aad, so neither the server nor anyone between can
//! widen or drop it; the web, the server and the device all read it through [`Site::parse`],
//! which accepts only the canonical spelling (lowercase, punycode, no default port, no path).

use std::fmt;
use std::net::IpAddr;

use url::{Host, Url};

/// The most sites one secret may name.
pub const MAX_SITES: usize = 10;
/// The longest site text.
pub const MAX_SITE_LEN: usize = 253;

/// One allowed site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Site {
    /// HTTPS on 443 to this host; a domain also covers its subdomains.
    Host(Host<String>),
    /// Exactly this origin (`scheme://host[:port]`, as browsers serialise it).
    Origin(String),
}

/// Why a site or a list of sites is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteError(pub String);

impl fmt::Display for SiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SiteError {}

fn refuse(site: &str, why: &str) -> SiteError {
    SiteError(format!("{site:?} {why}"))
}

impl Site {
    /// Parses a site in its canonical spelling.
    ///
    /// # Errors
    /// A [`SiteError`] saying what is wrong, with the canonical spelling when only the
    /// spelling is.
    pub fn parse(text: &str) -> Result<Site, SiteError> {
        if text.is_empty() || text.len() > MAX_SITE_LEN {
            return Err(refuse(
                text,
                &format!("is not a site (1 to {MAX_SITE_LEN} characters)"),
            ));
        }
        let site = if text.contains("://") {
            parse_origin(text)?
        } else {
            parse_host(text)?
        };
        let canonical = site.to_string();
        if canonical != text {
            return Err(refuse(text, &format!("is written {canonical:?}")));
        }
        Ok(site)
    }

    /// Whether a request to `url` may carry this site's secret.
    pub fn admits(&self, url: &Url) -> bool {
        match self {
            Site::Origin(origin) => url.origin().ascii_serialization() == *origin,
            Site::Host(allowed) => {
                if url.scheme() != "https" || url.port_or_known_default() != Some(443) {
                    return false;
                }
                match (allowed, url.host()) {
                    (Host::Domain(allowed), Some(Host::Domain(host))) => {
                        host == allowed
                            || host
                                .strip_suffix(allowed.as_str())
                                .is_some_and(|prefix| prefix.ends_with('.'))
                    }
                    (Host::Ipv4(allowed), Some(Host::Ipv4(host))) => *allowed == host,
                    (Host::Ipv6(allowed), Some(Host::Ipv6(host))) => *allowed == host,
                    _ => false,
                }
            }
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Site::Host(host) => write!(f, "{host}"),
            Site::Origin(origin) => f.write_str(origin),
        }
    }
}

fn parse_host(text: &str) -> Result<Site, SiteError> {
    let host = Host::parse(text).map_err(|_| refuse(text, "is not a host name"))?;
    if let Host::Domain(domain) = &host {
        // A bare label ("com", "localhost") would cover far more than the owner meant.
        if !domain.contains('.') {
            return Err(refuse(
                text,
                "is not a full host name (write one like api.example.com)",
            ));
        }
        if !domain.split('.').all(is_dns_label) {
            return Err(refuse(text, "is not a host name"));
        }
    }
    Ok(Site::Host(host))
}

/// A DNS label as a URL parser leaves it: lowercase letters, digits, `-` and `_`, no `-` at
/// either end, 1 to 63 characters.
fn is_dns_label(label: &str) -> bool {
    (1..=63).contains(&label.len())
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn parse_origin(text: &str) -> Result<Site, SiteError> {
    let url = Url::parse(text).map_err(|_| refuse(text, "is not an origin"))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(refuse(text, "is not an http or https origin"));
    }
    if !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
        || url.path() != "/"
        || text.ends_with('/')
    {
        return Err(refuse(
            text,
            "is not an origin (scheme, host and port only, no path)",
        ));
    }
    if url.scheme() == "http" && !url.host().is_some_and(|host| is_loopback(&host)) {
        return Err(refuse(
            text,
            "would send the secret unencrypted; use https (http is for this computer's own \
             addresses only)",
        ));
    }
    Ok(Site::Origin(url.origin().ascii_serialization()))
}

fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(domain) => *domain == "localhost",
        Host::Ipv4(ip) => IpAddr::V4(*ip).is_loopback(),
        Host::Ipv6(ip) => IpAddr::V6(*ip).is_loopback(),
    }
}

/// Parses a whole `allow` list: 1 to [`MAX_SITES`] canonical sites, none twice.
///
/// # Errors
/// The first site refused, or the list's size.
pub fn parse_list(sites: &[String]) -> Result<Vec<Site>, SiteError> {
    if sites.is_empty() || sites.len() > MAX_SITES {
        return Err(SiteError(format!(
            "a secret names 1 to {MAX_SITES} allowed sites"
        )));
    }
    let mut parsed: Vec<Site> = Vec::with_capacity(sites.len());
    for text in sites {
        let site = Site::parse(text)?;
        if parsed.contains(&site) {
            return Err(refuse(text, "is named twice"));
        }
        parsed.push(site);
    }
    Ok(parsed)
}

/// Whether any of `sites` admits `url`.
pub fn any_admits(sites: &[Site], url: &Url) -> bool {
    sites.iter().any(|site| site.admits(url))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("test URL")
    }

    #[test]
    fn canonical_sites_parse_and_print_back() {
        for good in [
            "api.example.com",
            "example.co.uk",
            "xn--bcher-kva.example",
            "203.0.113.7",
            "[2001:db8::1]",
            "https://api.example.com",
            "https://api.example.com:8443",
            "http://127.0.0.1:8080",
            "http://localhost:3000",
            "http://[::1]:9000",
        ] {
            assert_eq!(Site::parse(good).map(|s| s.to_string()), Ok(good.into()));
        }
    }

    #[test]
    fn other_spellings_and_unsafe_sites_are_refused() {
        for bad in [
            "",
            "API.example.com",
            "bücher.example",
            "com",
            "localhost",
            "example.com.",
            ".example.com",
            "*.example.com",
            "api.example.com/path",
            "https://api.example.com/",
            "https://api.example.com/v1",
            "https://api.example.com:443",
            "https://user@api.example.com",
            "https://api.example.com?q=1",
            "http://api.example.com",
            "http://10.0.0.1:8080",
            "ftp://files.example.com",
            "file:///etc/passwd",
        ] {
            assert!(Site::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let error = Site::parse("API.example.com").expect_err("uppercase");
        assert!(error.0.contains("\"api.example.com\""), "{error}");
    }

    #[test]
    fn a_host_covers_https_to_itself_and_its_subdomains_only() {
        let site = Site::parse("example.com").expect("site");
        assert!(site.admits(&url("https://example.com/a?b")));
        assert!(site.admits(&url("https://api.example.com/")));
        assert!(site.admits(&url("https://a.b.example.com:443/")));
        assert!(!site.admits(&url("http://example.com/")));
        assert!(!site.admits(&url("https://example.com:8443/")));
        assert!(!site.admits(&url("https://badexample.com/")));
        assert!(!site.admits(&url("https://example.com.evil.net/")));
        assert!(!site.admits(&url("https://93.184.215.14/")));
    }

    #[test]
    fn an_origin_covers_exactly_itself() {
        let site = Site::parse("http://127.0.0.1:8080").expect("site");
        assert!(site.admits(&url("http://127.0.0.1:8080/echo")));
        assert!(!site.admits(&url("http://127.0.0.1:8081/echo")));
        assert!(!site.admits(&url("https://127.0.0.1:8080/echo")));
        assert!(!site.admits(&url("http://localhost:8080/echo")));
        let https = Site::parse("https://api.example.com").expect("site");
        assert!(https.admits(&url("https://api.example.com:443/x")));
        assert!(!https.admits(&url("https://v2.api.example.com/x")));
    }

    #[test]
    fn lists_are_bounded_and_without_repeats() {
        assert!(parse_list(&[]).is_err());
        assert!(parse_list(&["a.example".into(), "a.example".into()]).is_err());
        let many: Vec<String> = (0..=MAX_SITES).map(|n| format!("s{n}.example")).collect();
        assert!(parse_list(&many).is_err());
        assert_eq!(
            parse_list(&many[..MAX_SITES]).map(|l| l.len()),
            Ok(MAX_SITES)
        );
    }
}
