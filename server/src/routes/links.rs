//! Links the server hands out (pairing's verification URI, the Computers page's command).

use actix_web::HttpRequest;

/// The base of links we hand out: the configured public URL, else this request's origin.
pub(crate) fn public_base(req: &HttpRequest, public_url: Option<&str>) -> String {
    match public_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let info = req.connection_info();
            format!("{}://{}", info.scheme(), info.host())
        }
    }
}
