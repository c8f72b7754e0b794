//! Pairing: the device grant, its errors, re-pairing and the seal key pin.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_server::devices::pairing;
use tether_server::store::ledger;

use crate::both_backends;
use crate::helpers::{assert_error, seal_key, spawn_app, spawn_app_with};

both_backends! {
    async fn pairing_happy_path(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let key = seal_key();
        let res = app.pair("install-1", &key).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let paired: Value = res.json().await.unwrap();
        let user_code = paired["userCode"].as_str().unwrap().to_owned();
        assert_eq!(user_code.len(), 9);
        assert_eq!(&user_code[4..5], "-");
        assert!(user_code.chars().filter(|c| *c != '-').all(|c| "BCDFGHJKLMNPQRSTVWXZ".contains(c)));
        assert_eq!(paired["verificationUri"], format!("{}/link", app.base));
        assert_eq!(paired["verificationUriComplete"], format!("{}/link?code={user_code}", app.base));
        assert_eq!(paired["expiresIn"], 600);
        let device_code = paired["deviceCode"].as_str().unwrap();
        assert!(device_code.len() >= 43);

        assert_error(app.register(device_code).await, 400, "authorization_pending").await;
        let pending = pairing::pending_by_user_code(&app.store, &user_code.to_lowercase()).await;
        assert_eq!(pending, Some(("laptop".to_owned(), "linux".to_owned(), key.fingerprint.clone())));

        let typed = format!(" {} ", user_code.to_lowercase().replace('-', " "));
        let res = ann.post("/api/devices/link", &json!({ "userCode": typed })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let linked: Value = res.json().await.unwrap();
        assert_eq!(linked["name"], "laptop");
        assert_eq!(linked["platform"], "linux");
        assert_eq!(linked["fingerprint"], key.fingerprint);
        assert_eq!(pairing::pending_by_user_code(&app.store, &user_code).await, None);

        let res = app.register(device_code).await;
        assert_eq!(res.status(), StatusCode::OK);
        let registered: Value = res.json().await.unwrap();
        assert_eq!(registered["deviceId"], linked["deviceId"]);
        assert_eq!(registered["accountId"], json!(ann.me().await.account.id));
        let token = registered["token"].as_str().unwrap();
        assert!(token.starts_with("tdt_"));
        // The device code gives exactly one token.
        assert_error(app.register(device_code).await, 400, "access_denied").await;
        assert_error(app.register("never-issued").await, 400, "access_denied").await;
        // A linked code cannot be linked again.
        assert_error(ann.post("/api/devices/link", &json!({ "userCode": user_code })).await, 404, "unknown_code").await;

        let res = reqwest::Client::new().get(format!("{}/api/devices/self", app.base))
            .bearer_auth(token).header("x-tether-protocol", "1").send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let me: Value = res.json().await.unwrap();
        assert_eq!(me["deviceId"], linked["deviceId"]);
        assert_eq!(me["name"], "laptop");

        let devices = ann.devices().await;
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].seal_key.as_ref(), Some(&key));
        assert!(!devices[0].seal_key_mismatch);
        let entries = ledger::list(&app.store, &ann.me().await.account.id).await.unwrap();
        assert!(entries.iter().any(|e| e.kind == "device.paired"));
        assert!(entries.iter().all(|e| !e.detail_json.contains(token)));
    }

    async fn polling_too_fast_slows_down_by_five_seconds(backend) {
        let app = spawn_app_with(backend, |config| config.pairing_interval_secs = 1).await;
        let paired: Value = app.pair("install-1", &seal_key()).await.json().await.unwrap();
        assert_eq!(paired["interval"], 1);
        let device_code = paired["deviceCode"].as_str().unwrap();
        assert_error(app.register(device_code).await, 400, "authorization_pending").await;
        let message = assert_error(app.register(device_code).await, 400, "slow_down").await;
        assert!(message.contains('6'), "{message}");
        // One second was the old interval; the new one is six.
        app.advance(Duration::from_millis(1200));
        let message = assert_error(app.register(device_code).await, 400, "slow_down").await;
        assert!(message.contains("11"), "{message}");
    }

    async fn expired_codes_are_refused_everywhere(backend) {
        let app = spawn_app_with(backend, |config| config.pairing_expires_secs = 1).await;
        let ann = app.user("ann@example.com").await;
        let paired: Value = app.pair("install-1", &seal_key()).await.json().await.unwrap();
        assert_eq!(paired["expiresIn"], 1);
        app.advance(Duration::from_millis(1200));
        let user_code = paired["userCode"].as_str().unwrap();
        assert_eq!(pairing::pending_by_user_code(&app.store, user_code).await, None);
        assert_error(ann.post("/api/devices/link", &json!({ "userCode": user_code })).await, 404, "unknown_code").await;
        assert_error(app.register(paired["deviceCode"].as_str().unwrap()).await, 400, "expired_token").await;
    }

    async fn five_wrong_codes_then_too_many_attempts(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let paired: Value = app.pair("install-1", &seal_key()).await.json().await.unwrap();
        let good = paired["userCode"].as_str().unwrap();
        for wrong in ["BBBB-BBBB", "nonsense", "", "CCCC-CCCC", "DDDD-DDDD"] {
            assert_error(ann.post("/api/devices/link", &json!({ "userCode": wrong })).await, 404, "unknown_code").await;
        }
        let res = ann.post("/api/devices/link", &json!({ "userCode": good })).await;
        // Every 429 says when to come back: when the oldest wrong code leaves the 15 minutes.
        let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((890..=900).contains(&retry), "{retry}");
        assert_error(res, 429, "too_many_attempts").await;
        // Another account is not limited by Ann's mistakes.
        assert_eq!(bob.post("/api/devices/link", &json!({ "userCode": good })).await.status(), StatusCode::OK);
        // Once the window has passed, Ann may try again.
        app.advance(Duration::from_secs(retry + 1));
        let again: Value = app.pair("install-2", &seal_key()).await.json().await.unwrap();
        let res = ann.post("/api/devices/link", &json!({ "userCode": again["userCode"] })).await;
        assert_eq!(res.status(), StatusCode::OK);
    }

    async fn same_install_id_pairs_again_as_the_same_device(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let first = app.device(&ann, "install-1").await;
        let job = ann.create_job(&first.device_id).await;
        assert_eq!(ann.delete(&format!("/api/devices/{}", first.device_id)).await.status(), StatusCode::NO_CONTENT);

        let second = app.device(&ann, "install-1").await;
        assert_eq!(second.device_id, first.device_id);
        assert_error(first.get_self().await, 401, "unauthorized").await;
        assert_eq!(second.get_self().await.status(), StatusCode::OK);
        let devices = ann.devices().await;
        assert_eq!(devices.len(), 1);
        assert!(devices[0].revoked_at.is_none());
        let jobs: Vec<Value> = ann.get(&format!("/api/jobs?deviceId={}", second.device_id)).await.json().await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0]["id"], json!(job.id));
        // Run again targets the same computer, which takes it with its new token.
        assert_ne!(jobs[0]["state"], "queued");
        let res = ann.post_empty(&format!("/api/jobs/{}/rerun", job.id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let again: Value = res.json().await.unwrap();
        assert_eq!(again["deviceId"], json!(second.device_id));
        assert_eq!(second.claim_job().await.id.as_str(), again["id"].as_str().unwrap());

        // Another installation is another device.
        let other = app.device(&ann, "install-2").await;
        assert_ne!(other.device_id, first.device_id);
    }

    async fn pairing_again_ends_the_old_token_at_once(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let first = app.device(&ann, "install-1").await;
        // Checked once, so the server remembers it.
        assert_eq!(first.heartbeat(&[]).await.status(), StatusCode::OK);
        assert_eq!(first.get_self().await.status(), StatusCode::OK);
        let second = app.device(&ann, "install-1").await;
        assert_eq!(second.device_id, first.device_id);
        assert_error(first.heartbeat(&[]).await, 401, "unauthorized").await;
        assert_eq!(second.heartbeat(&[]).await.status(), StatusCode::OK);
    }

    async fn first_seal_key_is_pinned_and_a_new_one_raises_a_mismatch(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let pinned = device.seal_key.clone();
        let mut capabilities = device.capabilities();
        capabilities.seal_key = seal_key();
        assert_eq!(device.heartbeat_with(capabilities, &[]).await.status(), StatusCode::OK);
        let listed = ann.devices().await.remove(0);
        assert!(listed.seal_key_mismatch);
        assert_eq!(listed.seal_key, Some(pinned.clone()));
        // Reporting the pinned key again does not clear it; only pairing again does.
        assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
        assert!(ann.devices().await[0].seal_key_mismatch);

        let new_key = seal_key();
        let repaired = app.device_with_key(&ann, "install-1", new_key.clone()).await;
        assert_eq!(repaired.heartbeat(&[]).await.status(), StatusCode::OK);
        let listed = ann.devices().await.remove(0);
        assert!(!listed.seal_key_mismatch);
        assert_eq!(listed.seal_key, Some(new_key));
    }

    async fn pair_validates_its_fields(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::new();
        let url = format!("{}/api/devices/pair", app.base);
        let key = seal_key();
        let body = |name: &str, install: &str, key: &tether_protocol::capabilities::SealKey| json!({
            "name": name, "platform": "linux", "installId": install, "agentVersion": "0.1.0", "sealKey": key,
        });
        let res = http.post(&url).json(&body("", "i-1", &key)).send().await.unwrap();
        assert!(assert_error(res, 422, "invalid_field").await.contains("name"));
        let res = http.post(&url).json(&body("laptop", "has space", &key)).send().await.unwrap();
        assert!(assert_error(res, 422, "invalid_field").await.contains("installId"));
        let mut forged = key.clone();
        forged.fingerprint = "SHA256:forged".to_owned();
        let res = http.post(&url).json(&body("laptop", "i-1", &forged)).send().await.unwrap();
        assert!(assert_error(res, 422, "invalid_field").await.contains("sealKey.fingerprint"));
        let mut bad_spki = key.clone();
        bad_spki.spki = "!!!".to_owned();
        let res = http.post(&url).json(&body("laptop", "i-1", &bad_spki)).send().await.unwrap();
        assert!(assert_error(res, 422, "invalid_field").await.contains("sealKey.spki"));
        let res = http.post(&url).json(&json!({ "name": "laptop" })).send().await.unwrap();
        assert!(assert_error(res, 400, "invalid_request").await.contains("missing field"));
        let res = http.post(&url).header("x-tether-protocol", "2").json(&body("laptop", "i-1", &key)).send().await.unwrap();
        assert_error(res, 400, "unsupported_protocol").await;
    }
}
