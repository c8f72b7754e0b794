//! The frame every page shares: head, navigation, security headers.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpRequest, HttpResponse};
use chrono::{DateTime, SecondsFormat, Utc};
use maud::{html, Markup, DOCTYPE};
use sha2::{Digest, Sha256};

use crate::auth::Caller;
use crate::error::ApiError;

/// Renders a full page. Pages are never cached and may run only our own script.
pub fn page(title: &str, caller: Option<&Caller>, body: Markup) -> HttpResponse {
    render(StatusCode::OK, title, caller, None, None, body)
}

/// The ETag of a list page that keeps itself current (`assets/lists.js` asks for it again
/// with `If-None-Match`): a hash of `shown`, what the list shows, and of who is looking.
/// Built from the data rather than the markup, which holds times that move on their own.
pub fn list_etag(caller: &Caller, shown: &str) -> String {
    let mut hash = Sha256::new();
    for part in [
        env!("CARGO_PKG_VERSION"),
        caller.user.id.as_str(),
        caller.csrf_token.as_deref().unwrap_or_default(),
        if caller.user.is_admin { "admin" } else { "" },
        shown,
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest[..12]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("W/\"{hex}\"")
}

/// 304 when the browser already has the list as `etag` says.
pub fn not_modified(request: &HttpRequest, etag: &str) -> Option<HttpResponse> {
    let asked = request
        .headers()
        .get(header::IF_NONE_MATCH)?
        .to_str()
        .ok()?;
    asked.split(',').any(|tag| tag.trim() == etag).then(|| {
        HttpResponse::NotModified()
            .insert_header((header::ETAG, etag.to_owned()))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .finish()
    })
}

/// Like [`page`], for a list that keeps itself current: the page carries its ETag.
pub fn live_page(etag: &str, title: &str, caller: &Caller, body: Markup) -> HttpResponse {
    render(StatusCode::OK, title, Some(caller), None, Some(etag), body)
}

/// Like [`page`], with the count of pending decisions already in the navigation's badge
/// (elsewhere the page's script fills it in from the decisions stream).
pub fn page_with_badge(
    title: &str,
    caller: Option<&Caller>,
    pending: Option<usize>,
    body: Markup,
) -> HttpResponse {
    render(StatusCode::OK, title, caller, pending, None, body)
}

/// An error as a page, with the status the API would answer.
pub fn error_page(caller: &Caller, error: &ApiError) -> HttpResponse {
    let status =
        StatusCode::from_u16(error.code().status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let title = if status == StatusCode::NOT_FOUND {
        "Not found"
    } else {
        "Something went wrong"
    };
    let body = html! {
        h1 { (title) }
        p { (error.message()) }
        p { a href="/computers" { "Back to Computers" } }
    };
    render(status, title, Some(caller), None, None, body)
}

/// The page for an address that names nothing, with a way back.
pub fn not_found_page(caller: Option<&Caller>, path: &str) -> HttpResponse {
    let body = html! {
        h1 { "Not found" }
        p { "There is no page at " code { (path) } "." }
        p { a href="/" { @if caller.is_some() { "Back to Computers" } @else { "Sign in" } } }
    };
    render(StatusCode::NOT_FOUND, "Not found", caller, None, None, body)
}

fn render(
    status: StatusCode,
    title: &str,
    caller: Option<&Caller>,
    pending: Option<usize>,
    etag: Option<&str>,
    body: Markup,
) -> HttpResponse {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(token) = caller.and_then(|caller| caller.csrf_token.as_deref()) {
                    meta name="csrf-token" content=(token);
                }
                meta name="theme-color" content="#2558b8" media="(prefers-color-scheme: light)";
                meta name="theme-color" content="#16181d" media="(prefers-color-scheme: dark)";
                title { (title) " · Tether" }
                link rel="manifest" href="/manifest.webmanifest";
                link rel="icon" href="/favicon.ico" sizes="32x32";
                link rel="icon" href="/assets/icon.svg" type="image/svg+xml";
                link rel="apple-touch-icon" href="/assets/apple-touch-icon.png";
                meta name="apple-mobile-web-app-title" content="Tether";
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
                @if caller.is_some() { script src="/assets/needs_me.js" defer {} }
            }
            body {
                (navigation(caller, pending))
                main { (body) }
            }
        }
    };
    let mut response = HttpResponse::build(status);
    if let Some(etag) = etag {
        response.insert_header((header::ETAG, etag.to_owned()));
    }
    response
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "same-origin"))
        .body(markup.into_string())
}

fn navigation(caller: Option<&Caller>, pending: Option<usize>) -> Markup {
    html! {
        header {
            a.brand href="/" {
                img.brand-mark src="/assets/icon.svg" alt="" width="22" height="22";
                span.brand-name { "Tether" }
            }
            @if let Some(caller) = caller {
                a.needs-me href="/needs-me" {
                    "Needs me"
                    span #needs-me-badge .count hidden[pending.unwrap_or(0) == 0] {
                        @if let Some(count) = pending { (count) }
                    }
                }
                a href="/computers" { "Computers" }
                a href="/assign" { "Assign" }
                a href="/jobs" { "Jobs" }
                a href="/spaces" { "Spaces" }
                a href="/account" { "Account" }
                @if caller.user.is_admin { a href="/admin" { "Admin" } }
                form.sign-out data-api="/api/auth/logout" data-redirect="/signin" {
                    button.secondary type="submit" title=(caller.user.email) { "Sign out" }
                }
            } @else {
                a href="/signin" { "Sign in" }
                a href="/signup" { "Sign up" }
            }
        }
    }
}

/// "3 min ago"-style text for a past moment, seen at `now` (the store's clock).
pub fn ago(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - at).num_seconds().max(0);
    match secs {
        0..=59 => "just now".to_owned(),
        60..=3599 => format!("{} min ago", secs / 60),
        3600..=86_399 => format!("{} h ago", secs / 3600),
        _ => at.format("%Y-%m-%d %H:%M UTC").to_string(),
    }
}

/// A past moment as [`ago`] says it, in a `<time>` that app.js keeps current ("just now"
/// becomes "5 min ago") and, past a day, shows as a date in the browser's own zone: the one
/// way lists show a time. The exact moment in UTC is its title.
pub fn when(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339_opts(SecondsFormat::Secs, true))
            title=(at.format("%Y-%m-%d %H:%M UTC").to_string()) data-ago { (ago(at, now)) }
    }
}

/// A moment as `<time>` in UTC (app.js rewrites it in the browser's own zone), followed by
/// "(3 min ago)" while that is shorter than a date.
pub fn moment(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    let utc = at.format("%Y-%m-%d %H:%M UTC").to_string();
    html! {
        time datetime=(at.to_rfc3339_opts(SecondsFormat::Secs, true)) title=(utc) data-local { (utc) }
        @if (now - at).num_seconds() < 86_400 { " (" (ago(at, now)) ")" }
    }
}

/// How long something took: `42 s`, `3 min 5 s`, `2 h 4 min`. app.js's `durationText`
/// writes the same for a run still going.
pub fn duration_text(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min {} s", secs / 60, secs % 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

/// `532 B`, `12.4 KB`, `3.1 MB` (powers of 1000, as the 100 MB limit is).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut size = bytes as f64 / 1000.0;
    let mut unit = 0;
    while size >= 1000.0 && unit + 1 < UNITS.len() {
        size /= 1000.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}
