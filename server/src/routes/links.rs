//! Links the server hands out (pairing's verification URI, the Computers page's command), and
//! the origin a request was addressed to, which sign-in's `Origin` check compares against.
//!
//! **Invariant:** `Forwarded` (`host=`, `proto=`), `X-Forwarded-Host` and `X-Forwarded-Proto`
//! count only from a trusted proxy (`client::from_trusted_proxy`), like `X-Forwarded-For`.
//! From any other peer they are ignored: the scheme is the connection's and the host is
//! `Host`.

use actix_web::http::header::HOST;
use actix_web::HttpRequest;

use super::client::from_trusted_proxy;
use crate::config::Config;

/// The scheme and host a request was addressed to (`http`, `tether.example:8080`).
pub(crate) struct RequestOrigin {
    pub scheme: String,
    pub host: String,
}

/// The base of links we hand out: the configured public URL, else this request's origin.
pub(crate) fn public_base(req: &HttpRequest, config: &Config) -> String {
    match config.public_url.as_deref() {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let origin = request_origin(req, config);
            format!("{}://{}", origin.scheme, origin.host)
        }
    }
}

/// What a trusted proxy says the client asked for; otherwise this connection's own scheme
/// and the `Host` it named (the request target's authority, else the configured host, when
/// it named none).
pub(crate) fn request_origin(req: &HttpRequest, config: &Config) -> RequestOrigin {
    if from_trusted_proxy(req, config) {
        let info = req.connection_info();
        return RequestOrigin {
            scheme: info.scheme().to_owned(),
            host: info.host().to_owned(),
        };
    }
    let scheme = if req.app_config().secure() {
        "https"
    } else {
        "http"
    };
    let host = req
        .headers()
        .get(HOST)
        .and_then(|value| value.to_str().ok())
        .or_else(|| req.uri().authority().map(|authority| authority.as_str()))
        .unwrap_or_else(|| req.app_config().host());
    RequestOrigin {
        scheme: scheme.to_owned(),
        host: host.to_owned(),
    }
}
