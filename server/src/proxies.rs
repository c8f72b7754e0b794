//! Which peers are trusted proxies (`TETHER_TRUSTED_PROXIES`), and the client address a
//! request came from once their `X-Forwarded-For` / `Forwarded` headers are taken into
//! account. No HTTP types here: `auth::client_ip_of` reads the headers and calls
//! [`client_ip`].
//!
//! **Invariant:** a forwarded header counts only when the peer itself is trusted, and then
//! only up to the right-most address that is not trusted: everything left of it was written
//! by the client and proves nothing.

use std::fmt;
use std::net::IpAddr;

/// Most forwarded hops looked at; a longer chain is cut at the peer's end.
const MAX_HOPS: usize = 32;

/// One address or network (`10.0.0.0/8`, `fd00::/8`, `127.0.0.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDR` or `ADDR/PREFIX`.
    ///
    /// # Errors
    /// A sentence naming what does not parse.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address or CIDR"))?;
        let network = network.to_canonical();
        let width = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            Some(prefix) => prefix
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|prefix| *prefix <= width)
                .ok_or_else(|| format!("{text:?} has a prefix length that is not 0 to {width}"))?,
        };
        Ok(Cidr { network, prefix })
    }

    /// Whether `address` lies in this network (IPv4-mapped IPv6 counts as IPv4).
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                prefix_matches(&network.octets(), &address.octets(), self.prefix)
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                prefix_matches(&network.octets(), &address.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn prefix_matches(network: &[u8], address: &[u8], prefix: u8) -> bool {
    let full = usize::from(prefix / 8);
    if network.get(..full) != address.get(..full) {
        return false;
    }
    let rest = prefix % 8;
    if rest == 0 {
        return true;
    }
    let mask = 0xFF_u8 << (8 - rest);
    match (network.get(full), address.get(full)) {
        (Some(network), Some(address)) => network & mask == address & mask,
        _ => false,
    }
}

/// The proxies whose forwarded headers are believed; empty (the default) believes none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// Parses a comma-separated list of addresses and CIDRs; an empty text is none.
    ///
    /// # Errors
    /// A sentence naming the first entry that does not parse.
    pub fn parse(text: &str) -> Result<TrustedProxies, String> {
        text.split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(Cidr::parse)
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `address` is one of the trusted proxies.
    pub fn contains(&self, address: IpAddr) -> bool {
        self.0.iter().any(|cidr| cidr.contains(address))
    }
}

/// Which forwarded header a trusted proxy sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded<'a> {
    /// The values of every `X-Forwarded-For` header, in order.
    XForwardedFor(&'a [&'a str]),
    /// The values of every `Forwarded` header (RFC 7239), in order.
    Rfc7239(&'a [&'a str]),
}

/// The address a request came from. The peer, unless it is a trusted proxy: then the
/// right-most forwarded address that is not itself trusted (or, when every hop is trusted,
/// the left-most one). An entry that is not an address (`unknown`, an obfuscated RFC 7239
/// name, garbage) ends the walk at the last trusted hop.
pub fn client_ip(peer: IpAddr, forwarded: Forwarded<'_>, trusted: &TrustedProxies) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted.contains(peer) {
        return peer;
    }
    let hops: Vec<Option<IpAddr>> = match forwarded {
        Forwarded::XForwardedFor(values) => values
            .iter()
            .flat_map(|value| value.split(','))
            .map(parse_hop)
            .collect(),
        Forwarded::Rfc7239(values) => values
            .iter()
            .flat_map(|value| value.split(','))
            .map(rfc7239_for)
            .collect(),
    };
    let mut client = peer;
    for hop in hops.iter().rev().take(MAX_HOPS) {
        let Some(address) = hop else {
            return client;
        };
        client = address.to_canonical();
        if !trusted.contains(client) {
            return client;
        }
    }
    client
}

/// `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`, `[2001:db8::1]:80`, optionally quoted.
fn parse_hop(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"').trim();
    if let Ok(address) = text.parse::<IpAddr>() {
        return Some(address);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (address, _) = rest.split_once(']')?;
        return address.parse().ok();
    }
    let (address, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    address.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The `for=` parameter of one RFC 7239 element (`for=192.0.2.60;proto=http`).
fn rfc7239_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| parse_hop(value))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    fn trusted(text: &str) -> TrustedProxies {
        TrustedProxies::parse(text).unwrap_or_default()
    }

    #[test]
    fn cidrs_parse_and_match() {
        let nets = trusted("10.0.0.0/8, 192.168.1.7 ,fd00::/8, 172.16.0.0/12");
        assert!(nets.contains(ip("10.200.3.4")));
        assert!(nets.contains(ip("192.168.1.7")));
        assert!(!nets.contains(ip("192.168.1.8")));
        assert!(nets.contains(ip("fd12::1")));
        assert!(nets.contains(ip("172.31.255.255")));
        assert!(!nets.contains(ip("172.32.0.0")));
        assert!(
            nets.contains(ip("::ffff:10.1.2.3")),
            "IPv4-mapped counts as IPv4"
        );
        assert!(trusted("0.0.0.0/0").contains(ip("8.8.8.8")));
        assert!(TrustedProxies::parse("").is_ok_and(|nets| nets.is_empty()));
        for bad in ["10.0.0.0/33", "nginx", "10.0.0.0/x", "::/129"] {
            assert!(TrustedProxies::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let nets = trusted("10.0.0.1");
        let forwarded = ["1.1.1.1"];
        assert_eq!(
            client_ip(
                ip("203.0.113.9"),
                Forwarded::XForwardedFor(&forwarded),
                &nets
            ),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn a_trusted_peer_gives_the_right_most_untrusted_hop() {
        let nets = trusted("10.0.0.0/8");
        // The client wrote 6.6.6.6 itself; nginx appended the real peer it saw.
        let forwarded = ["6.6.6.6, 198.51.100.4", "10.0.0.5"];
        assert_eq!(
            client_ip(ip("10.0.0.1"), Forwarded::XForwardedFor(&forwarded), &nets),
            ip("198.51.100.4")
        );
        let with_ports = ["[2001:db8::7]:443, 198.51.100.4:5555"];
        assert_eq!(
            client_ip(ip("10.0.0.1"), Forwarded::XForwardedFor(&with_ports), &nets),
            ip("198.51.100.4")
        );
        let all_trusted = ["10.0.0.9, 10.0.0.8"];
        assert_eq!(
            client_ip(
                ip("10.0.0.1"),
                Forwarded::XForwardedFor(&all_trusted),
                &nets
            ),
            ip("10.0.0.9")
        );
        assert_eq!(
            client_ip(ip("10.0.0.1"), Forwarded::XForwardedFor(&[]), &nets),
            ip("10.0.0.1")
        );
        let garbage = ["198.51.100.4, nonsense"];
        assert_eq!(
            client_ip(ip("10.0.0.1"), Forwarded::XForwardedFor(&garbage), &nets),
            ip("10.0.0.1"),
            "a hop that is not an address stops at the last trusted one"
        );
    }

    #[test]
    fn rfc7239_for_parameters() {
        let nets = trusted("10.0.0.0/8");
        let forwarded = [
            r#"for=6.6.6.6;proto=https, for="[2001:db8:cafe::17]:4711";by=10.0.0.1"#,
            "For=10.0.0.3",
        ];
        assert_eq!(
            client_ip(ip("10.0.0.1"), Forwarded::Rfc7239(&forwarded), &nets),
            ip("2001:db8:cafe::17")
        );
        let hidden = ["for=_hidden"];
        assert_eq!(
            client_ip(ip("10.0.0.1"), Forwarded::Rfc7239(&hidden), &nets),
            ip("10.0.0.1")
        );
    }
}
