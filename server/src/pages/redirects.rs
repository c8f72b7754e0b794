//! Where pages send the browser: redirects, and the sign-in page with a way back.

use actix_web::http::header;
use actix_web::HttpResponse;

/// A 303 to `location`.
pub(super) fn redirect(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

/// The sign-in page, coming back to `next` afterwards.
pub(super) fn signin_redirect(next: &str) -> HttpResponse {
    redirect(&format!("/signin?next={}", escape_query_value(next)))
}

/// Percent-encodes a same-site path for use as a query value (`/` stays readable).
pub(super) fn escape_query_value(path: &str) -> String {
    path.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Only local paths may be a `next` target, so sign-in cannot redirect off-site.
pub(super) fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(path) if path.starts_with('/') && !path.starts_with("//") && !path.contains('\\') => {
            path
        }
        _ => "/computers",
    }
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next(Some("/jobs/x")), "/jobs/x");
        assert_eq!(safe_next(Some("//evil.example")), "/computers");
        assert_eq!(safe_next(Some("https://evil.example")), "/computers");
        assert_eq!(safe_next(Some("/\\evil.example")), "/computers");
        assert_eq!(safe_next(None), "/computers");
    }
}
