//! The installable app's files (manifest, service worker, icons, favicon, offline page) and
//! the Notifications page. Chromium's side is in the e2e `installable` test.

use crate::both_backends;
use crate::helpers::spawn_app;

both_backends! {
    async fn the_app_shell_is_served_with_its_types_and_caching(backend) {
        let app = spawn_app(backend).await;
        let web = app.web();
        for (path, media, cache) in [
            ("/manifest.webmanifest", "application/manifest+json", "no-cache"),
            ("/sw.js", "text/javascript; charset=utf-8", "no-cache"),
            ("/assets/offline.html", "text/html; charset=utf-8", "no-cache"),
            ("/favicon.ico", "image/x-icon", "public, max-age=604800"),
            ("/assets/icon.svg", "image/svg+xml", "public, max-age=31536000, immutable"),
            ("/assets/icon-192.png", "image/png", "public, max-age=31536000, immutable"),
            ("/assets/icon-512.png", "image/png", "public, max-age=31536000, immutable"),
            ("/assets/icon-maskable-512.png", "image/png", "public, max-age=31536000, immutable"),
            ("/assets/apple-touch-icon.png", "image/png", "public, max-age=31536000, immutable"),
        ] {
            let res = web.get(path).await;
            assert_eq!(res.status().as_u16(), 200, "{path}");
            assert_eq!((res.headers()["content-type"].to_str().unwrap(), res.headers()["cache-control"].to_str().unwrap()), (media, cache), "{path}");
        }
        let manifest: serde_json::Value = web.get("/manifest.webmanifest").await.json().await.unwrap();
        assert_eq!((manifest["start_url"].as_str(), manifest["scope"].as_str(), manifest["display"].as_str()), (Some("/"), Some("/"), Some("standalone")));
        let png = web.get("/assets/icon-192.png").await.bytes().await.unwrap();
        assert_eq!((&png[..8], &png[16..24]), (&b"\x89PNG\r\n\x1a\n"[..], &[0, 0, 0, 192, 0, 0, 0, 192][..]));
    }

    async fn the_notifications_page_is_for_a_signed_in_person(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let res = http.get(format!("{}/account/notifications", app.base)).send().await.unwrap();
        assert_eq!(res.status().as_u16(), 303);
        assert_eq!(res.headers()["location"], "/signin?next=/account/notifications");
        let ann = app.user("ann@example.com").await;
        let text = ann.get("/account/notifications").await.text().await.unwrap();
        assert!(text.contains("Turn on notifications on this device") && text.contains("None yet."), "{text}");
        assert!(text.contains(r#"<script src="/assets/notifications.js" defer>"#), "{text}");
        let account = ann.get("/account").await.text().await.unwrap();
        assert!(account.contains(r#"href="/account/notifications""#), "{account}");
        let needs_me = ann.get("/needs-me").await.text().await.unwrap();
        assert!(needs_me.contains("Get told when something needs you"), "{needs_me}");
        assert!(needs_me.contains(r#"<link rel="manifest" href="/manifest.webmanifest">"#), "{needs_me}");
    }
}
