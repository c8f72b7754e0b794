//! Requests racing for one unique row get the right answers, never a 500: concurrent
//! signups of one email, concurrent links of pairings of one installation. Caps that count
//! rows hold under a burst of 20 at once: an account's push subscriptions and wrong pairing
//! codes (one code approved twice at once is linked once and is no wrong code), a job's
//! evidence files.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::elliptic_curve::rand_core::OsRng;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::SecretKey;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::jobs::MAX_EVIDENCE_FILES;
use tether_protocol::pairing::USER_CODE_ALPHABET;
use tether_protocol::push::MAX_SUBSCRIPTIONS_PER_ACCOUNT;
use tether_server::devices::pairing::{LINK_WINDOW_SECS, MAX_LINK_FAILURES};
use tether_server::rate_limits::RateLimitConfig;

use crate::both_backends;
use crate::helpers::{
    assert_error, seal_key, spawn_app, spawn_app_with, Backend, DeviceClient, TestApp, WebClient,
};

/// Requests fired at once in each burst.
const BURST: usize = 20;

/// An app where a burst's transactions overlap as they would in production: no rate limits
/// (linking is limited to 10 a minute per account) and a pool wider than the tests' usual 4.
async fn unlimited(backend: Backend) -> TestApp {
    spawn_app_with(backend, |config| {
        config.rate_limits = RateLimitConfig::off();
        config.db_max_connections = 16;
    })
    .await
}

/// A browser's `PushSubscription.toJSON()` for `endpoint`, with fresh keys.
fn subscription(endpoint: &str) -> Value {
    let point = SecretKey::random(&mut OsRng)
        .public_key()
        .to_encoded_point(false);
    json!({
        "endpoint": endpoint,
        "keys": { "p256dh": URL_SAFE_NO_PAD.encode(point.as_bytes()), "auth": URL_SAFE_NO_PAD.encode([7u8; 16]) },
    })
}

/// Sends every body to `path` at once; answers their statuses and error codes, in order.
async fn burst(web: &WebClient, path: &str, bodies: &[Value]) -> Vec<(u16, String)> {
    let answers =
        futures_util::future::join_all(bodies.iter().map(|body| web.post(path, body))).await;
    let mut seen = Vec::new();
    for res in answers {
        seen.push(status_and_code(res).await);
    }
    seen
}

async fn status_and_code(res: Response) -> (u16, String) {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap();
    assert!(status < 500, "{status}: {body}");
    (
        status,
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

fn count(seen: &[(u16, String)], status: u16, code: &str) -> usize {
    seen.iter()
        .filter(|(s, c)| *s == status && c == code)
        .count()
}

/// A burst of wrong codes: exactly the wrong codes the account has left are answered 404,
/// the rest 429.
async fn wrong_code_burst(web: &WebClient, left: usize) {
    let letter = |n: usize| char::from(USER_CODE_ALPHABET[n % USER_CODE_ALPHABET.len()]);
    let bodies: Vec<Value> = (0..BURST)
        .map(|n| json!({ "userCode": format!("BBBB-BB{}{}", letter(n / 7), letter(n)) }))
        .collect();
    let seen = burst(web, "/api/devices/link", &bodies).await;
    assert_eq!(count(&seen, 404, "unknown_code"), left, "{seen:?}");
    assert_eq!(
        count(&seen, 429, "too_many_attempts"),
        BURST - left,
        "{seen:?}"
    );
}

/// Uploads a one-line log as evidence `id` of the job, under `lease`.
async fn upload_log(device: &DeviceClient, job_id: &str, lease: &str, id: &str) -> Response {
    let bytes = format!("{id}\n");
    let sha256: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let meta = json!({ "id": id, "kind": "log", "name": format!("{id}.log"),
                       "size": bytes.len(), "sha256": sha256 });
    device
        .http
        .post(format!(
            "{}/api/devices/self/jobs/{job_id}/evidence",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease)
        .header(
            "x-tether-evidence",
            URL_SAFE_NO_PAD.encode(meta.to_string()),
        )
        .header("content-type", "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .unwrap()
}

both_backends! {
    async fn concurrent_signups_of_one_email_make_one_account(backend) {
        let app = spawn_app(backend).await;
        let signups = (0..8).map(|n| {
            let mut web = app.web();
            async move { web.signup("Race@Example.com", "correct horse battery", &format!("Racer {n}")).await }
        });
        let answers = futures_util::future::join_all(signups).await;
        let mut created = 0;
        for res in answers {
            match res.status().as_u16() {
                201 => {
                    created += 1;
                    let body: Value = res.json().await.unwrap();
                    assert_eq!(body["user"]["isAdmin"], true, "the one account is the first");
                }
                409 => {
                    let body: Value = res.json().await.unwrap();
                    assert_eq!(body["error"]["code"], "email_taken", "{body}");
                }
                other => panic!("a signup answered {other}: {}", res.text().await.unwrap()),
            }
        }
        assert_eq!(created, 1);
        // Two different first signups at once: still exactly one admin.
        let signups = (0..4).map(|n| {
            let mut web = app.web();
            async move { web.signup(&format!("later{n}@example.com"), "correct horse battery", "Later").await }
        });
        for res in futures_util::future::join_all(signups).await {
            assert_eq!(res.status(), StatusCode::CREATED);
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["user"]["isAdmin"], false);
        }
    }

    async fn concurrent_links_of_one_installation_make_one_device(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let mut codes = Vec::new();
        for _ in 0..4 {
            let paired: Value = app.pair("install-same", &seal_key()).await.json().await.unwrap();
            codes.push((paired["userCode"].as_str().unwrap().to_owned(), paired["deviceCode"].as_str().unwrap().to_owned()));
        }
        let bodies: Vec<Value> = codes.iter().map(|(user_code, _)| json!({ "userCode": user_code })).collect();
        let links = bodies.iter().map(|body| ann.post("/api/devices/link", body));
        let mut device_ids = Vec::new();
        for res in futures_util::future::join_all(links).await {
            let status = res.status();
            let body: Value = res.json().await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            device_ids.push(body["deviceId"].as_str().unwrap().to_owned());
        }
        device_ids.dedup();
        assert_eq!(device_ids.len(), 1, "one computer: {device_ids:?}");
        assert_eq!(ann.devices().await.len(), 1);
        // Each pairing redeems to that device; the last token redeemed is the one that works.
        let mut last = None;
        for (_, device_code) in &codes {
            let res = app.register(device_code).await;
            assert_eq!(res.status(), StatusCode::OK);
            let registered: Value = res.json().await.unwrap();
            assert_eq!(registered["deviceId"], device_ids[0].as_str());
            last = Some(registered["token"].as_str().unwrap().to_owned());
        }
        let res = reqwest::Client::new().get(format!("{}/api/devices/self", app.base))
            .bearer_auth(last.unwrap()).header("x-tether-protocol", "1").send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }

    async fn a_burst_of_subscriptions_past_the_cap_leaves_exactly_the_cap(backend) {
        let app = unlimited(backend).await;
        let ann = app.user("ann@example.com").await;
        let path = "/api/push/subscriptions";
        let free = 8;
        for n in 0..MAX_SUBSCRIPTIONS_PER_ACCOUNT - free {
            let res = ann.post(path, &subscription(&format!("https://push.example.com/held-{n}"))).await;
            assert_eq!(res.status(), StatusCode::CREATED);
        }
        for round in 0..4 {
            let bodies: Vec<Value> = (0..BURST)
                .map(|n| subscription(&format!("https://push.example.com/round-{round}-{n}")))
                .collect();
            let seen = burst(&ann, path, &bodies).await;
            assert_eq!(count(&seen, 201, ""), free, "round {round}: {seen:?}");
            assert_eq!(count(&seen, 409, "invalid_state"), BURST - free, "round {round}: {seen:?}");
            let listed: Vec<Value> = ann.get(path).await.json().await.unwrap();
            assert_eq!(listed.len(), MAX_SUBSCRIPTIONS_PER_ACCOUNT, "round {round}");
            // Free the same number of places for the next round.
            for made in &listed[..free] {
                let res = ann.delete(&format!("{path}/{}", made["id"].as_str().unwrap())).await;
                assert_eq!(res.status(), StatusCode::NO_CONTENT);
            }
        }
        // One endpoint sent many times at once is one subscription, updated by the rest.
        let bodies: Vec<Value> = (0..BURST).map(|_| subscription("https://push.example.com/same")).collect();
        let seen = burst(&ann, path, &bodies).await;
        assert_eq!(count(&seen, 201, ""), 1, "{seen:?}");
        assert_eq!(count(&seen, 200, ""), BURST - 1, "{seen:?}");
    }

    async fn a_burst_of_wrong_pairing_codes_lets_exactly_five_through(backend) {
        let app = unlimited(backend).await;
        let ann = app.user("ann@example.com").await;
        let max = usize::try_from(MAX_LINK_FAILURES).unwrap();
        for _ in 0..3 {
            wrong_code_burst(&ann, max).await;
            app.advance(Duration::from_secs(LINK_WINDOW_SECS + 1));
        }
        // Once the window has passed, a right code links.
        let paired: Value = app.pair("install-1", &seal_key()).await.json().await.unwrap();
        let res = ann.post("/api/devices/link", &json!({ "userCode": paired["userCode"] })).await;
        assert_eq!(res.status(), StatusCode::OK);
    }

    async fn one_code_approved_twice_at_once_links_once_and_is_no_wrong_code(backend) {
        let app = unlimited(backend).await;
        let ann = app.user("ann@example.com").await;
        for round in 0..3 {
            let paired: Value = app.pair(&format!("install-{round}"), &seal_key()).await.json().await.unwrap();
            let body = json!({ "userCode": paired["userCode"] });
            let (first, second) = tokio::join!(ann.post("/api/devices/link", &body), ann.post("/api/devices/link", &body));
            let seen = vec![status_and_code(first).await, status_and_code(second).await];
            assert_eq!(count(&seen, 200, ""), 1, "round {round}: {seen:?}");
            // The other is answered as a used code is, one at a time.
            assert_eq!(count(&seen, 404, "unknown_code"), 1, "round {round}: {seen:?}");
            assert_error(ann.post("/api/devices/link", &body).await, 404, "unknown_code").await;
            assert_eq!(ann.devices().await.len(), round + 1);
            let res = app.register(paired["deviceCode"].as_str().unwrap()).await;
            assert_eq!(res.status(), StatusCode::OK);
        }
        // None of the second approvals counted: the account still has all its wrong codes.
        wrong_code_burst(&ann, usize::try_from(MAX_LINK_FAILURES).unwrap()).await;
    }

    async fn a_burst_of_evidence_past_the_cap_leaves_exactly_the_cap(backend) {
        let app = unlimited(backend).await;
        let owner = app.user("ann@example.com").await;
        let device = app.device(&owner, "install-1").await;
        let job_id = owner.create_job(&device.device_id).await.id.to_string();
        let lease = device.claim_job().await.lease_token.expose().to_owned();
        let cap = usize::try_from(MAX_EVIDENCE_FILES).unwrap();
        let free = 8;
        for n in 0..cap - free {
            let res = upload_log(&device, &job_id, &lease, &format!("held-{n}")).await;
            assert_eq!(res.status(), StatusCode::CREATED);
        }
        let uploads = (0..BURST).map(|n| {
            let (device, job_id, lease) = (&device, &job_id, &lease);
            async move { upload_log(device, job_id, lease, &format!("burst-{n}")).await }
        });
        let mut seen = Vec::new();
        for res in futures_util::future::join_all(uploads).await {
            seen.push(status_and_code(res).await);
        }
        assert_eq!(count(&seen, 201, ""), free, "{seen:?}");
        assert_eq!(count(&seen, 409, "invalid_state"), BURST - free, "{seen:?}");
        assert_eq!(owner.job(&job_id).await.evidence.len(), cap);
    }
}
