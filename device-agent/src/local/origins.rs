//! Origins (scheme, host, port): what an engine limited to its model endpoints may reach.
//!
//! The parser is strict on purpose: an origin is compared byte for byte with what a client
//! asks a proxy for, so there is one spelling of each host (lower case, IPv6 in brackets,
//! no trailing dot, no user name, ASCII only) and every port is explicit after parsing.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// One allowed endpoint: `https://api.anthropic.com:443`, `http://127.0.0.1:41234`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    /// `http` or `https`.
    pub scheme: String,
    /// Lower case; an IPv6 address in brackets (`[::1]`).
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// The origin of `url`; a path, query or fragment after the host is ignored.
    ///
    /// # Errors
    /// A sentence saying why `url` is not an http or https address with a plain host.
    pub fn parse(url: &str) -> Result<Origin, String> {
        let bad = |why: &str| format!("{url:?} is not a model endpoint: {why}");
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("it has no scheme (http:// or https://)"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => 443,
            "http" => 80,
            _ => return Err(bad("only http and https are supported")),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (host, port) = parse_authority(&rest[..end]).map_err(|why| bad(&why))?;
        Ok(Origin {
            scheme,
            host,
            port: port.unwrap_or(default_port),
        })
    }

    /// Whether the host is this computer's loopback (`127.0.0.1`, `[::1]`, `localhost`).
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host)
    }

    /// `host:port`, the way a proxy is asked for it.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// Whether `host` (as [`parse_authority`] spells it) is this computer's loopback.
pub fn is_loopback_host(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "[::1]" | "localhost")
}

/// `host[:port]` into its canonical host and its port, if any.
///
/// # Errors
/// Why the text is not a plain host with an optional port (user names, empty or bad hosts,
/// bad ports, anything but ASCII letters, digits, dots and dashes).
pub fn parse_authority(text: &str) -> Result<(String, Option<u16>), String> {
    if text.contains('@') {
        return Err("a user name or password is not allowed".to_owned());
    }
    let (host, port) = if let Some(inside) = text.strip_prefix('[') {
        let (address, after) = inside
            .split_once(']')
            .ok_or("an IPv6 address is not closed with ]")?;
        address
            .parse::<Ipv6Addr>()
            .map_err(|_| format!("{address:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("text after the IPv6 address")?,
            ),
        };
        (format!("[{}]", address.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        };
        (check_name(host)?, port)
    };
    let port = port.map(parse_port).transpose()?;
    Ok((host, port))
}

/// A host name or IPv4 address, lower-cased.
fn check_name(host: &str) -> Result<String, String> {
    let host = host.to_ascii_lowercase();
    if host.is_empty() || host.len() > 253 {
        return Err("the host is empty or too long".to_owned());
    }
    let labels: Vec<&str> = host.split('.').collect();
    let plain = |label: &&str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if !labels.iter().all(plain) {
        return Err(format!("{host:?} is not a plain host name"));
    }
    // Numbers in any base (the C library reads `127.1` and `0x7f.0.0.1` as addresses):
    // only a complete dotted decimal IPv4 address.
    let number = |label: &&str| {
        label.bytes().all(|b| b.is_ascii_digit())
            || label
                .strip_prefix("0x")
                .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let numeric = labels.iter().all(number);
    if numeric && host.parse::<Ipv4Addr>().is_err() {
        return Err(format!("{host:?} is not an IPv4 address"));
    }
    Ok(host)
}

fn parse_port(port: &str) -> Result<u16, String> {
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{port:?} is not a port"));
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("{port:?} is not a port")),
        Ok(port) => Ok(port),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(url: &str) -> Origin {
        Origin::parse(url).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn good_addresses_have_one_spelling() {
        let cases = [
            ("https://api.anthropic.com", "https://api.anthropic.com:443"),
            (
                "HTTPS://API.Anthropic.COM/v1/messages?x=1",
                "https://api.anthropic.com:443",
            ),
            ("http://127.0.0.1:41234", "http://127.0.0.1:41234"),
            ("http://localhost", "http://localhost:80"),
            ("http://[::1]:8080/", "http://[::1]:8080"),
            ("https://[2001:DB8::1]", "https://[2001:db8::1]:443"),
            (
                "https://my-host.example:8443#frag",
                "https://my-host.example:8443",
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(origin(url).to_string(), expected, "{url}");
        }
        assert!(origin("http://127.0.0.1:1").is_loopback());
        assert!(origin("http://[::1]:1").is_loopback());
        assert!(origin("http://LOCALHOST:1").is_loopback());
        assert!(!origin("http://127.0.0.2:1").is_loopback());
        assert_eq!(origin("https://a.example:9").authority(), "a.example:9");
    }

    #[test]
    fn hostile_addresses_are_refused() {
        for url in [
            "",
            "api.anthropic.com",
            "ftp://example.com",
            "file:///etc/passwd",
            "https://",
            "https://user@api.anthropic.com",
            "https://api.anthropic.com@evil.example",
            "https://user:pw@host.example",
            "https://api.anthropic.com:0",
            "https://api.anthropic.com:65536",
            "https://api.anthropic.com:+443",
            "https://api.anthropic.com:",
            "https://api.anthropic.com:44 3",
            "https://api.anthropic.com.",
            "https://api..anthropic.com",
            "https://-bad.example",
            "https://bad_host.example",
            "https://évil.example",
            "https://a%2eexample",
            "https://host\\.example",
            "https://ho st.example",
            "https://host.example\r\n",
            "http://127.1",
            "http://0x7f.0.0.1",
            "http://0177.0.0.1",
            "http://2130706433",
            "http://999.0.0.1",
            "http://[::1",
            "http://[not-v6]",
            "http://[::1]x",
            "http://::1",
        ] {
            assert!(Origin::parse(url).is_err(), "{url:?} was accepted");
        }
    }

    #[test]
    fn authorities_parse_like_origins() {
        assert_eq!(
            parse_authority("API.example:443"),
            Ok(("api.example".to_owned(), Some(443)))
        );
        assert_eq!(
            parse_authority("[::1]:80"),
            Ok(("[::1]".to_owned(), Some(80)))
        );
        assert_eq!(
            parse_authority("host.example"),
            Ok(("host.example".to_owned(), None))
        );
        assert!(parse_authority("a@b:1").is_err());
    }
}
