//! Where a push may go: an endpoint URL on a public address, checked when a browser
//! subscribes and again before every send, and a resolver that refuses a host name whose
//! addresses are not all public (so a name re-pointed at an inside address after the check
//! — DNS rebinding — still cannot make the server post to it).
//!
//! **Invariant:** the server never sends a push to a loopback, private, link-local,
//! unique-local, shared (CGNAT), multicast, reserved or unspecified address. Only
//! `TETHER_PUSH_ALLOW_LOOPBACK` admits loopback, and only as an address literal.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tether_protocol::push::MAX_ENDPOINT_BYTES;
use url::{Host, Url};

/// A checked endpoint URL. Its `Debug` never shows the URL: it is a capability.
#[derive(Clone)]
pub struct Endpoint {
    url: Url,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Endpoint({})", self.origin())
    }
}

impl Endpoint {
    /// Checks `raw` as a push endpoint: at most [`MAX_ENDPOINT_BYTES`], no spaces or control
    /// characters, no user name, password or fragment, and `https://` to a public host; or,
    /// with `allow_loopback`, `http(s)://` to a loopback address literal.
    ///
    /// # Errors
    /// Why it is refused, as a sentence for the `endpoint` field.
    pub fn parse(raw: &str, allow_loopback: bool) -> Result<Endpoint, &'static str> {
        if raw.is_empty() || raw.len() > MAX_ENDPOINT_BYTES {
            return Err("must be a URL of 1 to 2048 bytes.");
        }
        // The URL standard silently drops tabs and newlines; refuse them instead.
        if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err("must not hold spaces or control characters.");
        }
        let url = Url::parse(raw).map_err(|_| "must be an absolute https:// URL.")?;
        if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
            return Err("must not hold a user name, a password or a fragment.");
        }
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return Err("must be an https:// URL."),
        };
        match url.host() {
            Some(Host::Ipv4(ip)) => check_address(IpAddr::V4(ip), https, allow_loopback)?,
            Some(Host::Ipv6(ip)) => check_address(IpAddr::V6(ip), https, allow_loopback)?,
            Some(Host::Domain(name)) => check_name(name, https)?,
            None => return Err("must name a host."),
        }
        Ok(Endpoint { url })
    }

    /// `scheme://host[:port]`, the port only when it is not the scheme's default: the VAPID
    /// audience, and all the API shows of an endpoint.
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }

    pub fn url(&self) -> &Url {
        &self.url
    }
}

fn check_address(ip: IpAddr, https: bool, allow_loopback: bool) -> Result<(), &'static str> {
    if allow_loopback && ip.is_loopback() {
        return Ok(());
    }
    if !is_public(ip) {
        return Err("must be a public address (not loopback, private, link-local or reserved).");
    }
    if !https {
        return Err("must be an https:// URL.");
    }
    Ok(())
}

/// Top-level names that never lead to the public internet (RFC 6761, RFC 6762, RFC 8375,
/// and common private zones).
const LOCAL_SUFFIXES: [&str; 10] = [
    "localhost",
    "local",
    "localdomain",
    "internal",
    "home.arpa",
    "lan",
    "test",
    "invalid",
    "onion",
    "arpa",
];

fn check_name(name: &str, https: bool) -> Result<(), &'static str> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let local = LOCAL_SUFFIXES
        .iter()
        .any(|suffix| name == *suffix || name.ends_with(&format!(".{suffix}")));
    // A push service has a public name; a single label resolves through search domains.
    if local || !name.contains('.') {
        return Err("must be a public host name (not localhost or a local name).");
    }
    if !https {
        return Err("must be an https:// URL.");
    }
    Ok(())
}

/// Whether `ip` is reachable on the public internet: not loopback, private, link-local,
/// unique-local, shared (CGNAT), multicast, documentation, benchmarking, reserved or
/// unspecified; IPv4 inside IPv6 (mapped, 6to4) is judged as the IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_public_v4(ip),
        IpAddr::V6(ip) => is_public_v6(ip),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0 // "this network", unspecified
        || a == 10
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || a == 127
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // documentation
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 192 && b == 168)
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // documentation
        || (a == 203 && b == 0 && c == 113) // documentation
        || a >= 224; // multicast, reserved, broadcast
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // Global unicast is 2000::/3; everything else (::, ::1, fc00::/7, fe80::/10, ff00::/8,
    // 64:ff9b::/96, 100::/64, …) is not for us.
    if s[0] & 0xe000 != 0x2000 {
        return false;
    }
    if s[0] == 0x2002 {
        // 6to4: the IPv4 address is in the next 32 bits.
        let [a, b] = s[1].to_be_bytes();
        let [c, d] = s[2].to_be_bytes();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    // 2001::/23 is IETF protocol assignments (Teredo, …), 2001:db8::/32 and 3fff::/20
    // documentation.
    let refused =
        (s[0] == 0x2001 && (s[1] < 0x0200 || s[1] == 0x0db8)) || (s[0] == 0x3fff && s[1] < 0x1000);
    !refused
}

/// The address a name resolved to that was not public.
#[derive(Debug)]
pub struct NotPublic;

impl fmt::Display for NotPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the push service's name resolves to a non-public address")
    }
}

impl std::error::Error for NotPublic {}

/// The push client's resolver: the system's answer, refused whole when any address in it is
/// not public. The connection is made to exactly the addresses checked here.
pub struct PublicResolver;

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() || addrs.iter().any(|addr| !is_public(addr.ip())) {
                return Err(Box::new(NotPublic) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn check(raw: &str, allow_loopback: bool) -> Result<String, &'static str> {
        Endpoint::parse(raw, allow_loopback).map(|endpoint| endpoint.origin())
    }

    #[test]
    fn public_https_endpoints_pass_with_their_origin() {
        for (raw, origin) in [
            (
                "https://fcm.googleapis.com/fcm/send/abc:def",
                "https://fcm.googleapis.com",
            ),
            (
                "https://updates.push.services.mozilla.com/wpush/v2/gAAA",
                "https://updates.push.services.mozilla.com",
            ),
            (
                "https://push.example.com:8443/x",
                "https://push.example.com:8443",
            ),
            ("https://8.8.8.8/x", "https://8.8.8.8"),
            ("https://[2606:4700::1111]/x", "https://[2606:4700::1111]"),
        ] {
            assert_eq!(check(raw, false), Ok(origin.to_owned()), "{raw}");
        }
    }

    #[test]
    fn inside_addresses_and_local_names_are_refused() {
        for raw in [
            "https://127.0.0.1/",
            "https://127.1.2.3/",
            "https://10.0.0.1/",
            "https://172.16.0.1/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/",
            "https://0.0.0.0/",
            "https://224.0.0.1/",
            "https://255.255.255.255/",
            "https://2130706433/",
            "https://0x7f.1/",
            "https://[::1]/",
            "https://[::]/",
            "https://[fe80::1]/",
            "https://[fc00::1]/",
            "https://[fd12:3456::1]/",
            "https://[ff02::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:10.0.0.1]/",
            "https://[64:ff9b::a00:1]/",
            "https://[2002:7f00:1::]/",
            "https://[2001:db8::1]/",
            "https://[2001::1]/",
            "https://[3fff::1]/",
            "https://localhost/",
            "https://LOCALHOST./",
            "https://push.localhost/",
            "https://printer.local/",
            "https://db.internal/",
            "https://intranet/",
            "http://example.com/",
            "ftp://example.com/",
            "https://user:pass@example.com/",
            "https://example.com/#frag",
            "https://exa mple.com/",
            "https://example.com/\n",
            "not a url",
            "",
        ] {
            assert!(check(raw, false).is_err(), "{raw} passed");
        }
        let huge = format!("https://example.com/{}", "a".repeat(MAX_ENDPOINT_BYTES));
        assert!(check(&huge, false).is_err());
    }

    #[test]
    fn the_loopback_flag_admits_loopback_literals_only() {
        assert_eq!(
            check("http://127.0.0.1:9000/push", true),
            Ok("http://127.0.0.1:9000".to_owned())
        );
        assert_eq!(
            check("http://[::1]:9000/push", true),
            Ok("http://[::1]:9000".to_owned())
        );
        for raw in [
            "http://10.0.0.1/",
            "http://localhost:9000/",
            "http://example.com/",
        ] {
            assert!(check(raw, true).is_err(), "{raw} passed");
        }
        assert!(check("http://127.0.0.1:9000/push", false).is_err());
    }

    #[test]
    fn debug_shows_the_origin_never_the_path() {
        let endpoint = Endpoint::parse("https://push.example.com/secret-token", false).unwrap();
        let shown = format!("{endpoint:?}");
        assert!(!shown.contains("secret-token"), "{shown}");
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_with_an_inside_address() {
        let resolved = PublicResolver
            .resolve(Name::from_str("localhost").unwrap())
            .await;
        let error = resolved.err().unwrap();
        assert!(error.downcast_ref::<NotPublic>().is_some(), "{error}");
    }
}
