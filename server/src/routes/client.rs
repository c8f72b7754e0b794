//! Who sent a request: the one address every per-address limit keys on, and whether its
//! peer is a trusted proxy whose forwarded headers are believed.

use std::net::{IpAddr, Ipv4Addr};

use actix_web::http::header::{HeaderName, FORWARDED};
use actix_web::HttpRequest;

use crate::config::Config;
use crate::proxies::{client_ip, Forwarded};

/// `X-Forwarded-For`, which the shipped nginx appends to.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client's address as a rate-limit key: the peer, or — when the peer is one of
/// `TETHER_TRUSTED_PROXIES` — the right-most address in its `X-Forwarded-For` (or, without
/// one, `Forwarded`) that is not itself a trusted proxy. A header from any other peer is
/// ignored: the client could have written it.
pub(crate) fn client_address(req: &HttpRequest, config: &Config) -> String {
    client_ip_of(req, config).to_string()
}

/// Whether the peer is one of `TETHER_TRUSTED_PROXIES`. Only then is any forwarded header
/// (the client's address, the host and scheme it asked for) believed: from anyone else it is
/// whatever the client wrote.
pub(crate) fn from_trusted_proxy(req: &HttpRequest, config: &Config) -> bool {
    req.peer_addr()
        .is_some_and(|addr| config.trusted_proxies.contains(addr.ip()))
}

/// [`client_address`] as an address.
pub(crate) fn client_ip_of(req: &HttpRequest, config: &Config) -> IpAddr {
    // actix gives no peer only for requests built in tests; they share one key.
    let peer = req
        .peer_addr()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |addr| addr.ip());
    if config.trusted_proxies.is_empty() {
        return peer.to_canonical();
    }
    let values = |name: &HeaderName| -> Vec<&str> {
        req.headers()
            .get_all(name)
            .filter_map(|value| value.to_str().ok())
            .collect()
    };
    let x_forwarded_for = values(&X_FORWARDED_FOR);
    let forwarded = values(&FORWARDED);
    let chain = if x_forwarded_for.is_empty() && !forwarded.is_empty() {
        Forwarded::Rfc7239(&forwarded)
    } else {
        Forwarded::XForwardedFor(&x_forwarded_for)
    };
    client_ip(peer, chain, &config.trusted_proxies)
}
