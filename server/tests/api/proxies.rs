//! Per-address limits behind a proxy (`TETHER_TRUSTED_PROXIES`): a forwarded address counts
//! only when the peer is a trusted proxy, and then only the right-most one it did not write
//! itself. The tests' peer is 127.0.0.1; the pairing bucket allows two a minute. A forwarded
//! host and scheme (the pairing link, the Computers page's command, sign-in's `Origin`
//! check) count only from a trusted proxy too.

use reqwest::{Response, StatusCode};
use serde_json::json;
use tether_server::proxies::TrustedProxies;
use tether_server::rate_limits::RateLimitConfig;

use crate::both_backends;
use crate::helpers::{assert_error, seal_key, spawn_app_with, Backend, TestApp, WebClient};

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

/// The forwarded host and scheme a proxy in front of `tether.example` would send, each way.
const FORWARDED_HOSTS: [&[(&str, &str)]; 2] = [
    &[
        ("x-forwarded-host", "tether.example"),
        ("x-forwarded-proto", "https"),
    ],
    &[(
        "forwarded",
        "for=198.51.100.1;host=tether.example;proto=https",
    )],
];

/// The pairing link `POST /api/devices/pair` answers with these headers.
async fn link_from(app: &TestApp, headers: &[(&str, &str)]) -> String {
    let res = pair_from(app, headers).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let body: serde_json::Value = res.json().await.unwrap();
    body["verificationUriComplete"].as_str().unwrap().to_owned()
}

/// The Computers page asked for with these headers.
async fn computers_page(web: &WebClient, headers: &[(&str, &str)]) -> String {
    let mut request = web.http.get(format!("{}/computers", web.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let res = request.send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    res.text().await.unwrap()
}

/// `POST /api/auth/signup` from a page at `origin`, with these headers.
async fn signup_from(app: &TestApp, origin: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = reqwest::Client::new()
        .post(format!("{}/api/auth/signup", app.base))
        .header("origin", origin)
        .json(&json!({
            "email": format!("{}@example.com", uuid()),
            "password": "correct horse battery", "name": "Tester",
        }));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

both_backends! {
    async fn forwarded_hosts_from_an_untrusted_peer_are_ignored(backend) {
        let app = spawn_app_with(backend, |config| {
            config.trusted_proxies = TrustedProxies::parse("10.0.0.0/8").unwrap();
        })
        .await;
        let ann = app.user("ann@example.com").await;
        let own_link = format!("{}/link?code=", app.base);
        let own_command = format!("tether-agent pair {}", app.base);
        for headers in FORWARDED_HOSTS {
            let link = link_from(&app, headers).await;
            assert!(link.starts_with(&own_link), "{link} ({headers:?})");
            let page = computers_page(&ann, headers).await;
            assert!(page.contains(&own_command), "{headers:?}");
            assert!(!page.contains("tether.example"), "{headers:?}");
            // A page elsewhere naming the host it claims is still cross-site.
            let res = signup_from(&app, "https://tether.example", headers).await;
            assert_error(res, 403, "csrf_rejected").await;
        }
        let res = signup_from(&app, &app.base, FORWARDED_HOSTS[0]).await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    async fn a_trusted_proxy_names_the_host(backend) {
        let app = spawn_app_with(backend, |config| {
            config.trusted_proxies = TrustedProxies::parse("127.0.0.1").unwrap();
        })
        .await;
        let ann = app.user("ann@example.com").await;
        for headers in FORWARDED_HOSTS {
            let link = link_from(&app, headers).await;
            assert!(link.starts_with("https://tether.example/link?code="), "{link} ({headers:?})");
            let page = computers_page(&ann, headers).await;
            assert!(page.contains("tether-agent pair https://tether.example"), "{headers:?}");
            let res = signup_from(&app, "https://tether.example", headers).await;
            assert_eq!(res.status(), StatusCode::CREATED, "{headers:?}");
        }
        // Without forwarded headers, the proxy's own request names the host it reached.
        assert!(link_from(&app, &[]).await.starts_with(&format!("{}/link?code=", app.base)));
    }

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
