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
use tether_protocol::DeviceId;
use tether_seal::{self as seal, Aad, AadExpectation, Jti, Kid, Recipient};

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

pub(crate) async fn sealed_device(
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
pub(crate) fn seal_for(device: &DeviceClient, name: &str, value: &str) -> Value {
    seal_bytes(device, &aad_for(device, name).to_bytes(), value)
}

/// Seals `value` as the browser does for `device`, limited to `sites`.
fn seal_limited(device: &DeviceClient, name: &str, value: &str, sites: &[&str]) -> Value {
    let aad = aad_for(device, name).with_allow(sites.iter().map(|s| (*s).to_owned()).collect());
    seal_bytes(device, &aad.to_bytes(), value)
}

/// The aad the browser writes for a secret `name` sent to `device`.
fn aad_for(device: &DeviceClient, name: &str) -> Aad {
    Aad::secret(
        DeviceId::parse(&device.device_id).unwrap(),
        Kid::parse(&device.seal_key.kid).unwrap(),
        None,
        name.to_owned(),
        chrono::Utc::now().timestamp() + 300,
        Jti::random(&mut rand::thread_rng()),
    )
}

/// A box for `device` over exactly these aad bytes.
fn seal_bytes(device: &DeviceClient, aad: &[u8], value: &str) -> Value {
    let recipient = Recipient::from_seal_key(&device.seal_key).unwrap();
    let device_id = DeviceId::parse(&device.device_id).unwrap();
    let envelope = seal::seal(
        &recipient,
        &device_id,
        aad,
        value.as_bytes(),
        &mut rand::thread_rng(),
    )
    .unwrap();
    serde_json::to_value(envelope).unwrap()
}

/// The aad text `aad_for` writes with its last `}` replaced by `tail` (`,"allow":…}`).
fn aad_with_tail(device: &DeviceClient, name: &str, tail: &str) -> Vec<u8> {
    let text = String::from_utf8(aad_for(device, name).to_bytes()).unwrap();
    format!("{}{tail}", text.strip_suffix('}').unwrap()).into_bytes()
}

async fn listing(owner: &WebClient, device: &DeviceClient) -> Value {
    let res = owner
        .get(&format!("/api/devices/{}/secrets", device.device_id))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

/// Posts a box and, when accepted, has the device answer it saved.
pub(crate) async fn send_and_save(owner: &WebClient, device: &DeviceClient, body: &Value) {
    let res = owner
        .post(&format!("/api/devices/{}/secrets", device.device_id), body)
        .await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let id = res.json::<Value>().await.unwrap()["deliveryId"]
        .as_str()
        .unwrap()
        .to_owned();
    let saved = json!({ "saved": true, "name": body["name"] });
    assert_eq!(answer(device, &id, &saved).await.status(), StatusCode::OK);
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
        assert!(matches!(again, ServerFrame::SecretSave { ref id, .. } if id.as_str() == delivery_id));

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
        // A site list the box does not carry is refused: the computer would not enforce it.
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

    async fn a_secret_limited_to_sites_is_relayed_and_listed_with_them(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (secret_key, device) = sealed_device(&app, &ann, "install-1").await;
        let mut events = device.events().await;
        let sites = ["api.example.com", "http://127.0.0.1:8080"];

        let sealed = seal_limited(&device, "API_KEY", VALUE, &sites);
        let res = ann
            .post(&format!("/api/devices/{}/secrets", device.device_id),
                  &json!({ "name": "API_KEY", "sealed": sealed, "allow": sites }))
            .await;
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let delivery_id = res.json::<Value>().await.unwrap()["deliveryId"].as_str().unwrap().to_owned();

        // The device gets the box untouched; its aad carries the list and passes the checks.
        let frame = next_frame(&mut events, Duration::from_secs(5)).await.unwrap();
        let ServerFrame::SecretSave { id, sealed: got, .. } = frame else { panic!("{frame:?}") };
        assert_eq!((id.as_str(), &got), (delivery_id.as_str(), &sealed));
        let envelope = seal::Envelope::from_json(&got).unwrap();
        let kid = Kid::parse(&device.seal_key.kid).unwrap();
        let device_id = DeviceId::parse(&device.device_id).unwrap();
        let opened = seal::open(&secret_key, &kid, &device_id, &envelope).unwrap();
        assert_eq!(opened.aad().allow, Some(sites.map(str::to_owned).to_vec()));
        opened
            .check(&AadExpectation { device: &device_id, kid: &kid, decision: None, name: "API_KEY" },
                   chrono::Utc::now().timestamp())
            .unwrap();

        // Pending: the delivery shows its sites; no name is held yet.
        let listed = listing(&ann, &device).await;
        assert_eq!(listed["names"], json!([]));
        assert_eq!(listed["deliveries"][0]["allow"], json!(sites));
        let res = answer(&device, &delivery_id, &json!({ "saved": true, "name": "API_KEY" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let listed = listing(&ann, &device).await;
        assert_eq!(listed["names"][0]["name"], "API_KEY");
        assert_eq!(listed["names"][0]["allow"], json!(sites));
        assert_eq!(listed["deliveries"][0]["state"], "saved");
        assert_eq!(listed["deliveries"][0]["allow"], json!(sites));

        // The Computers page shows where the name may go, and the field to limit another.
        let page = ann.get("/computers").await.text().await.unwrap();
        assert!(page.contains("only to api.example.com, http://127.0.0.1:8080"), "{page}");
        assert!(page.contains(r#"name="allow""#), "{page}");
        assert!(page.contains("tether-agent secret-http"), "{page}");

        // An unlimited secret lists no sites; `[]` and `null` both mean no limit.
        send_and_save(&ann, &device, &json!({ "name": "PLAIN", "sealed": seal_for(&device, "PLAIN", VALUE) })).await;
        send_and_save(&ann, &device, &json!({ "name": "EMPTY", "sealed": seal_for(&device, "EMPTY", VALUE), "allow": [] })).await;
        send_and_save(&ann, &device, &json!({ "name": "NULL", "sealed": seal_for(&device, "NULL", VALUE), "allow": null })).await;
        let listed = listing(&ann, &device).await;
        let names = listed["names"].as_array().unwrap();
        assert_eq!(names.len(), 4, "{listed}");
        for held in names.iter().filter(|held| held["name"] != "API_KEY") {
            assert!(held.get("allow").is_none(), "{held}");
        }

        // A name's sites are those of the delivery saved last under it: sent again without a
        // limit it has none; a later limited box the device refused changes nothing.
        send_and_save(&ann, &device, &json!({ "name": "API_KEY", "sealed": seal_for(&device, "API_KEY", VALUE) })).await;
        let refused = seal_limited(&device, "API_KEY", VALUE, &["other.example"]);
        let res = ann
            .post(&format!("/api/devices/{}/secrets", device.device_id),
                  &json!({ "name": "API_KEY", "sealed": refused, "allow": ["other.example"] }))
            .await;
        let id = res.json::<Value>().await.unwrap()["deliveryId"].as_str().unwrap().to_owned();
        let res = answer(&device, &id, &json!({ "saved": false, "name": "API_KEY", "error": "replayed" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let listed = listing(&ann, &device).await;
        let held = listed["names"].as_array().unwrap().iter().find(|held| held["name"] == "API_KEY").unwrap();
        assert!(held.get("allow").is_none(), "{listed}");
        assert_eq!(listed["deliveries"][0]["state"], "refused");
        assert_eq!(listed["deliveries"][0]["allow"], json!(["other.example"]));
        let page = ann.get("/computers").await.text().await.unwrap();
        assert!(!page.contains(r#"class="sites""#), "{page}");
    }

    async fn site_lists_that_are_not_canonical_or_not_the_sealed_one_are_refused(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_key, device) = sealed_device(&app, &ann, "install-1").await;
        let path = format!("/api/devices/{}/secrets", device.device_id);
        let post = |sealed: Value, allow: Value| {
            let ann = &ann;
            let path = &path;
            async move { ann.post(path, &json!({ "name": "API_KEY", "sealed": sealed, "allow": allow })).await }
        };

        // The body's list itself: canonical sites, 1 to 10, no repeats, http only to loopback.
        let eleven: Vec<String> = (0..11).map(|n| format!("s{n}.example.com")).collect();
        let bad_lists = [
            (json!(["API.example.com"]), "\"api.example.com\""),
            (json!(["https://api.example.com/"]), "not an origin"),
            (json!(["api.example.com/v1"]), "not a host name"),
            (json!(["https://api.example.com:443"]), "is written"),
            (json!(["localhost"]), "full host name"),
            (json!(["http://api.example.com"]), "unencrypted"),
            (json!(["http://10.0.0.1:8080"]), "unencrypted"),
            (json!(["ftp://files.example.com"]), "not an http or https origin"),
            (json!(["a.example.com", "a.example.com"]), "named twice"),
            (json!(eleven), "1 to 10"),
        ];
        for (allow, why) in bad_lists {
            // Sealed with the same list, so only the list's own fault can be the reason.
            let texts: Vec<&str> = allow.as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
            let res = post(seal_limited(&device, "API_KEY", VALUE, &texts), allow.clone()).await;
            let message = assert_error(res, 422, "invalid_field").await;
            assert!(message.starts_with("allow:") && message.contains(why), "{allow}: {message}");
        }

        // The body's list must be the sealed one, in the same order.
        let one = seal_limited(&device, "API_KEY", VALUE, &["a.example.com"]);
        let two = seal_limited(&device, "API_KEY", VALUE, &["a.example.com", "https://b.example.com:8443"]);
        let none = seal_for(&device, "API_KEY", VALUE);
        let mismatches = [
            (&one, json!(["a.example.com", "b.example.com"]), "widened"),
            (&two, json!(["a.example.com"]), "narrowed"),
            (&two, json!(["https://b.example.com:8443", "a.example.com"]), "reordered"),
            (&one, json!(["b.example.com"]), "another site"),
            (&one, Value::Null, "dropped"),
            (&one, json!([]), "dropped as an empty list"),
            (&none, json!(["a.example.com"]), "given while the box has none"),
        ];
        for (sealed, allow, case) in mismatches {
            let message = assert_error(post(sealed.clone(), allow).await, 422, "invalid_field").await;
            assert!(message.starts_with("allow:") && message.contains("does not match"), "{case}: {message}");
        }
        let message = assert_error(post(none.clone(), json!(["a.example.com"])).await, 422, "invalid_field").await;
        assert!(message.contains("names no sites"), "{message}");
        let message = assert_error(post(one.clone(), Value::Null).await, 422, "invalid_field").await;
        assert!(message.contains("allows only a.example.com"), "{message}");

        // A box whose aad the device would refuse: `null`, an empty list or a non-canonical
        // site in it, or an aad that is not one at all.
        for (tail, allow) in [
            (r#","allow":null}"#, json!(null)),
            (r#","allow":[]}"#, json!([])),
            (r#","allow":["API.example.com"]}"#, json!(["api.example.com"])),
            (r#","allow":"api.example.com"}"#, json!(["api.example.com"])),
            (r#","allow":["a.example.com"],"extra":1}"#, json!(["a.example.com"])),
        ] {
            let sealed = seal_bytes(&device, &aad_with_tail(&device, "API_KEY", tail), VALUE);
            let message = assert_error(post(sealed, allow).await, 422, "invalid_field").await;
            assert!(message.starts_with("sealed:"), "{tail}: {message}");
        }
        let garbage = seal_bytes(&device, b"not json", VALUE);
        assert_error(post(garbage, json!(null)).await, 422, "invalid_field").await;

        // Nothing was stored.
        assert_eq!(listing(&ann, &device).await["deliveries"], json!([]));
    }

    async fn the_assign_page_offers_the_secrets_a_computer_holds(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_, device) = sealed_device(&app, &ann, "install-1").await;
        let (_, before) = html_of(&ann, &format!("/assign?device={}", device.device_id)).await;
        assert!(!before.contains(r#"name="secrets""#), "{before}");
        let plain = seal_for(&device, "PLAIN_KEY", VALUE);
        send_and_save(&ann, &device, &json!({ "name": "PLAIN_KEY", "sealed": plain })).await;
        let sites = ["api.example.com"];
        let limited = seal_limited(&device, "API_KEY", VALUE, &sites);
        send_and_save(&ann, &device, &json!({ "name": "API_KEY", "sealed": limited, "allow": sites })).await;
        let (status, page) = html_of(&ann, &format!("/assign?device={}", device.device_id)).await;
        assert_eq!(status, 200);
        for name in ["API_KEY", "PLAIN_KEY"] {
            let checkbox = format!(r#"<input type="checkbox" name="secrets" value="{name}" data-list>"#);
            assert!(page.contains(&checkbox), "{page}");
        }
        assert!(page.contains("only to api.example.com, by reference"), "{page}");
        assert!(!page.contains(VALUE));
        // Another account's computer offers nothing, not even its names.
        let eve = app.user("eve@example.com").await;
        let (_, theirs) = html_of(&eve, &format!("/assign?device={}", device.device_id)).await;
        assert!(!theirs.contains("API_KEY"), "{theirs}");
    }

    async fn nothing_about_a_limited_secret_is_a_server_error(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let (_key, device) = sealed_device(&app, &ann, "install-1").await;
        let path = format!("/api/devices/{}/secrets", device.device_id);
        let long_host = format!("{}.example.com", ["a".repeat(63), "b".repeat(63), "c".repeat(50)].join("."));
        let ten_long: Vec<String> = (0..10).map(|n| format!("{n}{}", &long_host[1..])).collect();
        let ten_refs: Vec<&str> = ten_long.iter().map(String::as_str).collect();
        let sealed = seal_limited(&device, "API_KEY", VALUE, &["a.example.com"]);
        let odd_allows = [
            json!("a.example.com"),
            json!([1, 2]),
            json!([null]),
            json!({ "a": 1 }),
            json!([""]),
            json!(["a".repeat(300)]),
            json!(["bücher.example"]),
            json!(["xn--bcher-kva.example"]),
            json!(["[::1]"]),
            json!(["http://[::1]:9000"]),
            json!(["https://\u{0}.example"]),
            json!(["a.example.com", "https://a.example.com"]),
            json!((0..1000).map(|n| format!("s{n}.example")).collect::<Vec<_>>()),
        ];
        for allow in odd_allows {
            let res = ann.post(&path, &json!({ "name": "API_KEY", "sealed": sealed, "allow": allow })).await;
            let status = res.status();
            assert!(status.is_client_error(), "{allow}: {status}");
        }
        // Ten long sites fit in an aad (at most 4096 bytes) and are accepted; an aad past
        // that (which no sealer writes) is the box's fault.
        let full = seal_limited(&device, "API_KEY", VALUE, &ten_refs);
        let res = ann.post(&path, &json!({ "name": "API_KEY", "sealed": full, "allow": ten_long })).await;
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let huge_aad = aad_with_tail(&device, "API_KEY", &format!(r#","allow":["{}.example"]}}"#, "a".repeat(5000)));
        let mut huge = sealed.clone();
        huge["aad"] = json!(URL_SAFE_NO_PAD.encode(huge_aad));
        let res = ann.post(&path, &json!({ "name": "API_KEY", "sealed": huge, "allow": null })).await;
        let message = assert_error(res, 422, "invalid_field").await;
        assert!(message.starts_with("sealed:"), "{message}");
        // Another account's device is still not found, limited or not.
        let bob = app.user("bob@example.com").await;
        let res = bob.post(&path, &json!({ "name": "API_KEY", "sealed": sealed, "allow": ["a.example.com"] })).await;
        assert_error(res, 404, "not_found").await;
        let listed = listing(&ann, &device).await;
        assert_eq!(listed["deliveries"][0]["allow"], json!(ten_long));
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

async fn html_of(client: &WebClient, path: &str) -> (u16, String) {
    let res = client.get(path).await;
    (res.status().as_u16(), res.text().await.unwrap())
}
