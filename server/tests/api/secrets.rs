//! The secrets relay: a box sealed for a device's pinned key goes to a fake device over its
//! real event stream, the device answers, and the server keeps no box and no value.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::pkcs8::EncodePublicKey;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::capabilities::SealKey;
use tether_protocol::frames::ServerFrame;
use tether_protocol::seal::{self, Aad, AadExpectation, Jti, Kid, Recipient};
use tether_protocol::DeviceId;

use crate::both_backends;
use crate::helpers::{
    assert_error, exec_sql, next_frame, spawn_app, DeviceClient, TestApp, WebClient,
};

const VALUE: &str = "hunter2-very-secret-plaintext-4711";

/// A real P-256 key pair and the seal key a device reports for it.
fn key_pair() -> (p256::SecretKey, SealKey) {
    let secret = p256::SecretKey::random(&mut rand::thread_rng());
    let spki = secret.public_key().to_public_key_der().unwrap();
    let digest = Sha256::digest(spki.as_bytes());
    let key = SealKey {
        kid: URL_SAFE_NO_PAD.encode(&digest[..16]),
        alg: "ECDH-P256".to_owned(),
        spki: URL_SAFE_NO_PAD.encode(spki.as_bytes()),
        fingerprint: format!("SHA256:{}", URL_SAFE_NO_PAD.encode(digest)),
    };
    (secret, key)
}

async fn sealed_device(
    app: &TestApp,
    owner: &WebClient,
    install: &str,
) -> (p256::SecretKey, DeviceClient) {
    let (secret, key) = key_pair();
    let device = app.device_with_key(owner, install, key).await;
    assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
    (secret, device)
}

/// Seals `value` as the browser does for `device`.
fn seal_for(device: &DeviceClient, name: &str, value: &str) -> Value {
    let recipient = Recipient::from_seal_key(&device.seal_key).unwrap();
    let device_id = DeviceId::parse(&device.device_id).unwrap();
    let aad = Aad::secret(
        device_id.clone(),
        recipient.kid().clone(),
        None,
        name.to_owned(),
        chrono::Utc::now().timestamp() + 300,
        Jti::random(&mut rand::thread_rng()),
    );
    let envelope = seal::seal(
        &recipient,
        &device_id,
        &aad.to_bytes(),
        value.as_bytes(),
        &mut rand::thread_rng(),
    )
    .unwrap();
    serde_json::to_value(envelope).unwrap()
}

async fn answer(device: &DeviceClient, id: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!(
            "{}/api/devices/self/secret-deliveries/{id}",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Every text cell of every table the server writes, as one string.
async fn dump_database(app: &TestApp) -> String {
    let tables = [
        "accounts",
        "devices",
        "jobs",
        "ledger",
        "secret_deliveries",
        "device_secrets",
    ];
    let mut all = String::new();
    for table in tables {
        let sql = format!("SELECT * FROM {table}");
        match app.store.begin().await.unwrap() {
            tether_server::store::Tx::Sqlite(mut tx) => {
                use sqlx::{Column, Row};
                for row in sqlx::query(&sql).fetch_all(&mut *tx).await.unwrap() {
                    for column in row.columns() {
                        if let Ok(Some(text)) = row.try_get::<Option<String>, _>(column.ordinal()) {
                            all.push_str(&text);
                            all.push('\n');
                        }
                    }
                }
            }
            tether_server::store::Tx::Postgres(mut tx) => {
                use sqlx::{Column, Row};
                for row in sqlx::query(&sql).fetch_all(&mut *tx).await.unwrap() {
                    for column in row.columns() {
                        if let Ok(Some(text)) = row.try_get::<Option<String>, _>(column.ordinal()) {
                            all.push_str(&text);
                            all.push('\n');
                        }
                    }
                }
            }
        }
    }
    all
}

both_backends! {
    async fn a_sealed_secret_reaches_the_device_and_leaves_nothing_behind(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (secret_key, device) = sealed_device(&app, &ann, "install-1").await;
        let mut events = device.events().await;

        let sealed = seal_for(&device, "API_KEY", VALUE);
        let res = ann
            .post(&format!("/api/devices/{}/secrets", device.device_id),
                  &json!({ "name": "API_KEY", "sealed": sealed }))
            .await;
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let delivery_id = res.json::<Value>().await.unwrap()["deliveryId"].as_str().unwrap().to_owned();

        let frame = next_frame(&mut events, Duration::from_secs(5)).await.unwrap();
        let ServerFrame::SecretSave { id, name, sealed: got } = frame else { panic!("{frame:?}") };
        assert_eq!((id.as_str(), name.as_str()), (delivery_id.as_str(), "API_KEY"));
        // The fake device opens it as the agent does.
        let envelope = seal::Envelope::from_json(&got).unwrap();
        let kid = Kid::parse(&device.seal_key.kid).unwrap();
        let device_id = DeviceId::parse(&device.device_id).unwrap();
        let opened = seal::open(&secret_key, &kid, &device_id, &envelope).unwrap();
        let checked = opened
            .check(&AadExpectation { device: &device_id, kid: &kid, decision: None, name: "API_KEY" },
                   chrono::Utc::now().timestamp())
            .unwrap();
        assert_eq!(checked.into_plaintext().as_slice(), VALUE.as_bytes());

        // Pending while unanswered; a reconnecting stream gets it again.
        let listing: Value = ann.get(&format!("/api/devices/{}/secrets", device.device_id)).await.json().await.unwrap();
        assert_eq!(listing["deliveries"][0]["state"], "pending");
        drop(events);
        let mut events = device.events().await;
        let again = next_frame(&mut events, Duration::from_secs(5)).await.unwrap();
        assert!(matches!(again, ServerFrame::SecretSave { ref id, .. } if *id == delivery_id));

        let res = answer(&device, &delivery_id, &json!({ "saved": true, "name": "API_KEY" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let listing: Value = ann.get(&format!("/api/devices/{}/secrets", device.device_id)).await.json().await.unwrap();
        assert_eq!(listing["names"][0]["name"], "API_KEY");
        assert!(listing["names"][0]["savedAt"].is_string());
        assert_eq!(listing["deliveries"][0]["state"], "saved");
        let text = listing.to_string();
        assert!(!text.contains(VALUE) && !text.contains("\"ct\""), "{text}");

        // Answered: not sent again.
        drop(events);
        let mut events = device.events().await;
        assert!(next_frame(&mut events, Duration::from_millis(500)).await.is_none());

        // Nothing in the database holds the value or the box.
        let ct = envelope_ct(&got);
        let dump = dump_database(&app).await;
        assert!(!dump.contains(VALUE));
        assert!(!dump.contains(&ct), "the box outlived its delivery");
        assert!(dump.contains("secret.relayed"));
        // Nor do the data dir's files hold the value. (The SQLite WAL may keep the deleted
        // box's ciphertext until a checkpoint; that is still only the opaque box.)
        for entry in walk(app.config.data_dir.as_path()) {
            let bytes = std::fs::read(&entry).unwrap_or_default();
            let hay = String::from_utf8_lossy(&bytes);
            assert!(!hay.contains(VALUE), "{}", entry.display());
        }
    }

    async fn a_refusal_keeps_its_reason_and_drops_the_box(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_key, device) = sealed_device(&app, &ann, "install-1").await;
        let sealed = seal_for(&device, "TOKEN", VALUE);
        let res = ann
            .post(&format!("/api/devices/{}/secrets", device.device_id), &json!({ "name": "TOKEN", "sealed": sealed }))
            .await;
        let id = res.json::<Value>().await.unwrap()["deliveryId"].as_str().unwrap().to_owned();
        let res = answer(&device, &id, &json!({ "saved": false, "name": "OTHER" })).await;
        assert_error(res, 422, "invalid_field").await;
        let res = answer(&device, &id, &json!({ "saved": false, "name": "TOKEN", "error": "replayed" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let listing: Value = ann.get(&format!("/api/devices/{}/secrets", device.device_id)).await.json().await.unwrap();
        assert_eq!(listing["names"], json!([]));
        assert_eq!(listing["deliveries"][0]["state"], "refused");
        assert_eq!(listing["deliveries"][0]["error"], "replayed");
        assert!(!dump_database(&app).await.contains(&envelope_ct(&sealed)));
    }

    async fn bad_secrets_are_refused(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_key, device) = sealed_device(&app, &ann, "install-1").await;
        let path = format!("/api/devices/{}/secrets", device.device_id);
        let sealed = seal_for(&device, "GOOD", VALUE);
        for name in ["", "1ABC", "A-B", "A B", &"x".repeat(65)] {
            let res = ann.post(&path, &json!({ "name": name, "sealed": sealed })).await;
            assert_error(res, 422, "invalid_field").await;
        }
        let res = ann.post(&path, &json!({ "name": "GOOD", "sealed": { "v": 1, "kid": "x" } })).await;
        assert_error(res, 422, "invalid_field").await;
        let res = ann.post(&path, &json!({ "name": "GOOD", "sealed": "a string" })).await;
        assert_error(res, 422, "invalid_field").await;
        // A site limit the computer cannot enforce is refused, never silently dropped.
        let res = ann.post(&path, &json!({ "name": "GOOD", "sealed": sealed, "allow": ["https://github.com"] })).await;
        let message = assert_error(res, 422, "invalid_field").await;
        assert!(message.contains("allow"), "{message}");
        // Sealed for another key.
        let (_other_key, other) = sealed_device(&app, &ann, "install-2").await;
        let res = ann.post(&path, &json!({ "name": "GOOD", "sealed": seal_for(&other, "GOOD", VALUE) })).await;
        assert_error(res, 422, "invalid_field").await;
        // Oversized.
        let mut huge = sealed.clone();
        huge["ct"] = Value::String("A".repeat(200 * 1024));
        let res = ann.post(&path, &json!({ "name": "GOOD", "sealed": huge })).await;
        assert!(res.status() == StatusCode::PAYLOAD_TOO_LARGE, "{}", res.status());

        // A device that reported another key: sealKeyMismatch.
        let (_k, changed) = key_pair();
        let mut capabilities = device.capabilities();
        capabilities.seal_key = changed;
        assert_eq!(device.heartbeat_with(capabilities, &[]).await.status(), StatusCode::OK);
        let res = ann.post(&path, &json!({ "name": "GOOD", "sealed": sealed })).await;
        let message = assert_error(res, 409, "invalid_state").await;
        assert!(message.contains("pair it again"), "{message}");

        // A revoked device.
        let other_path = format!("/api/devices/{}/secrets", other.device_id);
        assert_eq!(ann.delete(&format!("/api/devices/{}", other.device_id)).await.status(), StatusCode::NO_CONTENT);
        let res = ann.post(&other_path, &json!({ "name": "GOOD", "sealed": seal_for(&other, "GOOD", VALUE) })).await;
        assert_error(res, 409, "invalid_state").await;
    }

    async fn secrets_are_tenant_scoped(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let (_key, device) = sealed_device(&app, &ann, "install-1").await;
        let (_bob_key, bobs) = sealed_device(&app, &bob, "install-2").await;
        let path = format!("/api/devices/{}/secrets", device.device_id);
        let sealed = seal_for(&device, "GOOD", VALUE);
        assert_error(bob.post(&path, &json!({ "name": "GOOD", "sealed": sealed })).await, 404, "not_found").await;
        assert_error(bob.get(&path).await, 404, "not_found").await;
        let res = ann.post(&path, &json!({ "name": "GOOD", "sealed": sealed })).await;
        let id = res.json::<Value>().await.unwrap()["deliveryId"].as_str().unwrap().to_owned();
        // Another device cannot answer it.
        let res = answer(&bobs, &id, &json!({ "saved": true, "name": "GOOD" })).await;
        assert_error(res, 404, "not_found").await;
        let res = answer(&bobs, "nonsense", &json!({ "saved": true, "name": "GOOD" })).await;
        assert_error(res, 404, "not_found").await;
        // Signed out: no listing.
        let res = reqwest::get(format!("{}{path}", app.base)).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        exec_sql(&app.store, "SELECT 1").await;
    }
}

fn envelope_ct(sealed: &Value) -> String {
    sealed["ct"].as_str().unwrap().to_owned()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
