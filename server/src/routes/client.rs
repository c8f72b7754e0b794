//! Who sent a request: the one address every per-address limit keys on (read by
//! [`client_ip_of`], in `auth`, where a session notes where it was used), and whether its
//! peer is a trusted proxy whose forwarded headers are believed.

use actix_web::HttpRequest;

use crate::auth::client_ip_of;
use crate::config::Config;

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
