//! Per-address limits behind a proxy (`TETHER_TRUSTED_PROXIES`): a forwarded address counts
//! only when the peer is a trusted proxy, and then only the right-most one it did not write
//! itself. The tests' peer is 127.0.0.1; the pairing bucket allows two a minute.

use reqwest::{Response, StatusCode};
use serde_json::json;
use tether_server::proxies::TrustedProxies;
use tether_server::rate_limits::RateLimitConfig;

use crate::both_backends;
use crate::helpers::{assert_error, seal_key, spawn_app_with, Backend, TestApp};

async fn behind(backend: Backend, trusted: &str) -> TestApp {
    let trusted = TrustedProxies::parse(trusted).unwrap();
    spawn_app_with(backend, move |config| {
        config.rate_limits = RateLimitConfig::parse("pairing=2/min").unwrap();
        config.trusted_proxies = trusted;
    })
    .await
}

/// `POST /api/devices/pair` with these forwarding headers.
async fn pair_from(app: &TestApp, headers: &[(&str, &str)]) -> Response {
    let mut request = reqwest::Client::new()
        .post(format!("{}/api/devices/pair", app.base))
        .header("x-tether-protocol", "1")
        .json(&json!({
            "name": "laptop", "platform": "linux", "installId": uuid(),
            "agentVersion": "0.1.0", "sealKey": seal_key(),
        }));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

fn uuid() -> String {
    format!("install-{}", rand::random::<u64>())
}

async fn paired(res: Response) {
    assert_eq!(res.status(), StatusCode::CREATED);
}

async fn limited(res: Response) {
    assert!(res.headers().contains_key("retry-after"));
    assert_error(res, 429, "rate_limited").await;
}

both_backends! {
    async fn forwarded_addresses_from_an_untrusted_peer_are_ignored(backend) {
        // The peer (127.0.0.1) is not a trusted proxy: every request counts against it,
        // whatever address it claims to forward.
        let app = behind(backend, "10.0.0.0/8").await;
        paired(pair_from(&app, &[("x-forwarded-for", "198.51.100.1")]).await).await;
        paired(pair_from(&app, &[("x-forwarded-for", "198.51.100.2")]).await).await;
        limited(pair_from(&app, &[("x-forwarded-for", "198.51.100.3")]).await).await;
        limited(pair_from(&app, &[("forwarded", "for=198.51.100.4")]).await).await;
        limited(pair_from(&app, &[]).await).await;
    }

    async fn a_trusted_proxy_names_the_client(backend) {
        let app = behind(backend, "127.0.0.1, 10.0.0.0/8").await;
        let one = [("x-forwarded-for", "198.51.100.1")];
        paired(pair_from(&app, &one).await).await;
        paired(pair_from(&app, &one).await).await;
        limited(pair_from(&app, &one).await).await;
        // Another client behind the same proxy has its own bucket.
        paired(pair_from(&app, &[("x-forwarded-for", "198.51.100.2")]).await).await;
        // What the client wrote before the proxy's entry proves nothing: the right-most
        // address that is not a trusted proxy is the client.
        limited(pair_from(&app, &[("x-forwarded-for", "6.6.6.6, 198.51.100.1")]).await).await;
        limited(pair_from(&app, &[("x-forwarded-for", "7.7.7.7, 198.51.100.1, 10.1.2.3")]).await).await;
        // RFC 7239 `Forwarded`, when there is no X-Forwarded-For.
        paired(pair_from(&app, &[("forwarded", "for=\"[2001:db8::7]:4711\";proto=https")]).await).await;
        // The proxy itself, forwarding nothing, is limited as one client.
        paired(pair_from(&app, &[]).await).await;
        paired(pair_from(&app, &[("x-forwarded-for", "garbage")]).await).await;
        limited(pair_from(&app, &[]).await).await;
    }
}
