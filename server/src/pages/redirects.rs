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

/// Where sign-in may send the browser afterwards: `next` if it is one path of this site,
/// else `/`.
///
/// Browsers drop tabs and line breaks from a URL and read `\` as `/` before they parse it,
/// so `/\t/evil.example` is `//evil.example`, another site. Accepted: a path that starts
/// with one `/`, holds no `//`, no backslash, no whitespace or control character and
/// nothing but printable ASCII (what [`escape_query_value`] makes), and that the URL
/// standard's parser resolves to this same origin.
pub(super) fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(path) if is_local_path(path) => path,
        _ => "/",
    }
}

/// Longest `next` kept; the paths the pages make are far shorter.
const MAX_NEXT_BYTES: usize = 2048;

fn is_local_path(path: &str) -> bool {
    let shape_ok = path.len() <= MAX_NEXT_BYTES
        && path.starts_with('/')
        && !path.contains("//")
        && path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    if !shape_ok {
        return false;
    }
    // The same check a browser makes: resolved against an origin, it stays on it.
    let Ok(origin) = url::Url::parse("https://tether.invalid/") else {
        return false;
    };
    origin.join(path).is_ok_and(|target| {
        target.origin() == origin.origin()
            && target.username().is_empty()
            && target.password().is_none()
    })
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn next_stays_on_this_site() {
        for local in [
            "/",
            "/jobs/x",
            "/link?code=BCDF-GHJK",
            "/computers#top",
            "/jobs?deviceId=a&state=queued",
        ] {
            assert_eq!(safe_next(Some(local)), local);
        }
        for hostile in [
            "//evil.example",
            "https://evil.example",
            "/\\evil.example",
            "\\/evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r/evil.example",
            "/\r\n/evil.example",
            "\t//evil.example",
            " /evil",
            "/ /evil.example",
            "/\u{0}/evil.example",
            "/\u{0b}/evil.example",
            "/\u{0c}/evil.example",
            "/\u{a0}/evil.example",
            "/\u{3000}/evil.example",
            "/\u{2028}/evil.example",
            "/jobs//evil.example",
            "/\t\t/evil.example",
            "javascript:alert(1)",
            "/javascript:alert(1)\n",
            "evil.example",
            "",
        ] {
            assert_eq!(safe_next(Some(hostile)), "/", "{hostile:?}");
        }
        assert_eq!(safe_next(Some(&format!("/{}", "a".repeat(3000)))), "/");
        assert_eq!(safe_next(None), "/");
    }
}
