//! The installable app: the web app manifest, the icons, the service worker and the page it
//! shows offline.
//!
//! The icons are files drawn once by `scripts/make-icons.py` and committed, cached for a
//! year under `/assets/` (a new mark takes new file names); `/favicon.ico`, whose name cannot
//! change, for a week. The service worker is served from the root so its scope is the whole
//! site, and revalidated on every load so a new version takes over at once.

use actix_web::http::header;
use actix_web::HttpResponse;

use crate::routes::Table;

const YEAR: &str = "public, max-age=31536000, immutable";
const WEEK: &str = "public, max-age=604800";

pub(super) fn routes(table: &mut Table) {
    table.asset(
        "/manifest.webmanifest",
        manifest,
        "application/manifest+json",
    );
    table.asset("/sw.js", service_worker, "text/javascript");
    table.asset("/favicon.ico", favicon, "image/x-icon");
    table.asset("/assets/offline.html", offline_page, "text/html");
    table.asset("/assets/icon.svg", icon_svg, "image/svg+xml");
    table.asset("/assets/icon-192.png", icon_192, "image/png");
    table.asset("/assets/icon-512.png", icon_512, "image/png");
    table.asset("/assets/icon-maskable-512.png", icon_maskable, "image/png");
    table.asset(
        "/assets/apple-touch-icon.png",
        apple_touch_icon,
        "image/png",
    );
}

async fn manifest() -> HttpResponse {
    text(
        "application/manifest+json",
        include_str!("assets/manifest.webmanifest"),
    )
}

async fn service_worker() -> HttpResponse {
    text(
        "text/javascript; charset=utf-8",
        include_str!("assets/sw.js"),
    )
}

/// What the service worker shows for a page it cannot fetch.
async fn offline_page() -> HttpResponse {
    text(
        "text/html; charset=utf-8",
        include_str!("assets/offline.html"),
    )
}

async fn icon_svg() -> HttpResponse {
    image("image/svg+xml", include_bytes!("assets/icon.svg"))
}

async fn icon_192() -> HttpResponse {
    image("image/png", include_bytes!("assets/icon-192.png"))
}

async fn icon_512() -> HttpResponse {
    image("image/png", include_bytes!("assets/icon-512.png"))
}

/// The full-bleed icon with the mark inside the safe zone, for launchers that crop.
async fn icon_maskable() -> HttpResponse {
    image("image/png", include_bytes!("assets/icon-maskable-512.png"))
}

/// iOS takes its home-screen icon from here, not the manifest, and rounds it itself.
async fn apple_touch_icon() -> HttpResponse {
    image("image/png", include_bytes!("assets/apple-touch-icon.png"))
}

/// Browsers ask for it whatever the page links.
async fn favicon() -> HttpResponse {
    image_for("image/x-icon", include_bytes!("assets/favicon.ico"), WEEK)
}

fn text(content_type: &str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

fn image(content_type: &str, body: &'static [u8]) -> HttpResponse {
    image_for(content_type, body, YEAR)
}

fn image_for(content_type: &str, body: &'static [u8], cache: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, cache))
        .body(body)
}
