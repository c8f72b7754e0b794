//! Passkeys and the console unlock, against a software authenticator: a P-256 key, attestation
//! format "none", authenticator data and client data built here byte by byte, assertions
//! signed over authData ‖ SHA-256(clientDataJSON). The browser is reached as
//! `http://localhost:PORT` (WebAuthn takes no IP address as the relying party id).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use rand::RngCore;
use reqwest::StatusCode;
use serde_cbor_2::Value as Cbor;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::SessionId;
use tether_server::accounts::console_unlocks;
use tether_server::store::ledger;

use crate::both_backends;
use crate::helpers::{assert_error, query_i64, spawn_app, TestApp, WebClient};

const UP: u8 = 0x01;
const UV: u8 = 0x04;
const AT: u8 = 0x40;

/// A software authenticator holding one credential.
pub(crate) struct Authenticator {
    key: SigningKey,
    credential_id: Vec<u8>,
    counter: u32,
    /// The origin it reports in client data (the browser's).
    origin: String,
    /// The flags of its next answer (UP|UV unless a test takes one away).
    flags: u8,
}

impl Authenticator {
    pub(crate) fn new(origin: &str) -> Authenticator {
        let mut credential_id = vec![0u8; 32];
        rand::thread_rng().fill_bytes(&mut credential_id);
        Authenticator {
            key: SigningKey::random(&mut rand::rngs::OsRng),
            credential_id,
            counter: 0,
            origin: origin.to_owned(),
            flags: UP | UV,
        }
    }

    fn client_data(&self, kind: &str, challenge: &str) -> Vec<u8> {
        json!({
            "type": kind, "challenge": challenge, "origin": self.origin, "crossOrigin": false,
        })
        .to_string()
        .into_bytes()
    }

    fn cose_key(&self) -> Vec<u8> {
        let point = self.key.verifying_key().to_encoded_point(false);
        let mut map = BTreeMap::new();
        map.insert(Cbor::Integer(1), Cbor::Integer(2));
        map.insert(Cbor::Integer(3), Cbor::Integer(-7));
        map.insert(Cbor::Integer(-1), Cbor::Integer(1));
        map.insert(Cbor::Integer(-2), Cbor::Bytes(point.x().unwrap().to_vec()));
        map.insert(Cbor::Integer(-3), Cbor::Bytes(point.y().unwrap().to_vec()));
        serde_cbor_2::to_vec(&Cbor::Map(map)).unwrap()
    }

    fn auth_data(&self, rp_id: &str, flags: u8, attested: bool) -> Vec<u8> {
        let mut data = Sha256::digest(rp_id.as_bytes()).to_vec();
        data.push(flags);
        data.extend_from_slice(&self.counter.to_be_bytes());
        if attested {
            data.extend_from_slice(&[0u8; 16]);
            let length = u16::try_from(self.credential_id.len()).unwrap();
            data.extend_from_slice(&length.to_be_bytes());
            data.extend_from_slice(&self.credential_id);
            data.extend_from_slice(&self.cose_key());
        }
        data
    }

    /// `navigator.credentials.create()` for these options, as `toJSON()` gives it.
    fn create(&mut self, options: &Value) -> Value {
        let public_key = &options["publicKey"];
        let rp_id = public_key["rp"]["id"].as_str().unwrap();
        let challenge = public_key["challenge"].as_str().unwrap();
        self.counter += 1;
        let auth_data = self.auth_data(rp_id, self.flags | AT, true);
        let mut object = BTreeMap::new();
        object.insert(Cbor::Text("fmt".into()), Cbor::Text("none".into()));
        object.insert(Cbor::Text("attStmt".into()), Cbor::Map(BTreeMap::new()));
        object.insert(Cbor::Text("authData".into()), Cbor::Bytes(auth_data));
        let attestation = serde_cbor_2::to_vec(&Cbor::Map(object)).unwrap();
        let id = URL_SAFE_NO_PAD.encode(&self.credential_id);
        json!({
            "id": id, "rawId": id, "type": "public-key",
            "response": {
                "clientDataJSON": URL_SAFE_NO_PAD.encode(self.client_data("webauthn.create", challenge)),
                "attestationObject": URL_SAFE_NO_PAD.encode(attestation),
                "transports": ["internal"],
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        })
    }

    /// `navigator.credentials.get()` for these options, as `toJSON()` gives it.
    fn get(&mut self, options: &Value) -> Value {
        let public_key = &options["publicKey"];
        let rp_id = public_key["rpId"].as_str().unwrap();
        let challenge = public_key["challenge"].as_str().unwrap();
        self.counter += 1;
        let auth_data = self.auth_data(rp_id, self.flags, false);
        let client_data = self.client_data("webauthn.get", challenge);
        let mut signed = auth_data.clone();
        signed.extend_from_slice(&Sha256::digest(&client_data));
        let signature: Signature = self.key.sign(&signed);
        let id = URL_SAFE_NO_PAD.encode(&self.credential_id);
        json!({
            "id": id, "rawId": id, "type": "public-key",
            "response": {
                "clientDataJSON": URL_SAFE_NO_PAD.encode(client_data),
                "authenticatorData": URL_SAFE_NO_PAD.encode(auth_data),
                "signature": URL_SAFE_NO_PAD.encode(signature.to_der().as_bytes()),
                "userHandle": null,
            },
            "clientExtensionResults": {},
        })
    }
}

/// The app's address as a host name: the relying party needs one.
pub(crate) fn by_name(app: &TestApp) -> String {
    app.base.replacen("127.0.0.1", "localhost", 1)
}

/// A signed-up person at a browser that reaches the server as `localhost`.
async fn person(app: &TestApp, email: &str) -> WebClient {
    let mut web = app.web();
    web.base = by_name(app);
    let res = web.signup(email, "correct horse battery", "Tester").await;
    assert_eq!(res.status(), StatusCode::CREATED);
    web
}

async fn ceremony(web: &WebClient, path: &str) -> Value {
    let res = web.post_empty(path).await;
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    assert_eq!(res.headers()["cache-control"], "no-store");
    res.json().await.unwrap()
}

/// Registers `authenticator`'s credential as `name`; the passkey's id.
pub(crate) async fn register(
    web: &WebClient,
    authenticator: &mut Authenticator,
    name: &str,
) -> String {
    let started = ceremony(web, "/api/account/passkeys/registrations").await;
    let credential = authenticator.create(&started["options"]);
    let res = web
        .post(
            "/api/account/passkeys",
            &json!({ "ceremonyId": started["ceremonyId"], "name": name, "credential": credential }),
        )
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let passkey: Value = res.json().await.unwrap();
    assert_eq!(passkey["name"], name);
    passkey["id"].as_str().unwrap().to_owned()
}

/// Starts an unlock and answers it with `authenticator`; the answer.
async fn try_unlock(web: &WebClient, authenticator: &mut Authenticator) -> reqwest::Response {
    let started = ceremony(web, "/api/console/unlock/challenges").await;
    let credential = authenticator.get(&started["options"]);
    web.post(
        "/api/console/unlock",
        &json!({ "ceremonyId": started["ceremonyId"], "credential": credential }),
    )
    .await
}

pub(crate) async fn unlock(web: &WebClient, authenticator: &mut Authenticator) {
    let res = try_unlock(web, authenticator).await;
    assert_eq!(res.status(), StatusCode::OK);
    let status: Value = res.json().await.unwrap();
    assert_eq!(status["unlocked"], true, "{status}");
}

async fn console(web: &WebClient) -> Value {
    let res = web.get("/api/console").await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

async fn passkeys(web: &WebClient) -> Vec<Value> {
    let res = web.get("/api/account/passkeys").await;
    assert_eq!(res.status(), StatusCode::OK);
    let list: Value = res.json().await.unwrap();
    list["passkeys"].as_array().unwrap().clone()
}

/// The browser session's id, as the sessions list marks it.
async fn session_id(web: &WebClient) -> SessionId {
    let sessions: Value = web.get("/api/auth/sessions").await.json().await.unwrap();
    let current = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|session| session["current"] == true)
        .unwrap();
    SessionId::parse(current["id"].as_str().unwrap()).unwrap()
}

async fn ledger_kinds(app: &TestApp, web: &WebClient) -> Vec<String> {
    ledger::list(&app.store, &web.me().await.account.id)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.kind)
        .collect()
}

both_backends! {
async fn passkeys_are_registered_listed_and_removed(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    assert!(passkeys(&ann).await.is_empty());
    let status = console(&ann).await;
    assert_eq!(status, json!({ "unlocked": false, "hasPasskey": false }));
    let mut phone = Authenticator::new(&ann.base);
    let id = register(&ann, &mut phone, "My phone").await;
    let list = passkeys(&ann).await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["name"], "My phone");
    assert!(list[0]["lastUsedAt"].is_null());
    assert_eq!(console(&ann).await["hasPasskey"], true);
    // The same credential again is refused (the options exclude it; a browser would too).
    let started = ceremony(&ann, "/api/account/passkeys/registrations").await;
    let excluded = started["options"]["publicKey"]["excludeCredentials"].as_array().unwrap().len();
    assert_eq!(excluded, 1);
    let again = phone.create(&started["options"]);
    let res = ann
        .post("/api/account/passkeys", &json!({ "ceremonyId": started["ceremonyId"], "name": "Again", "credential": again }))
        .await;
    assert_error(res, 400, "passkey_refused").await;
    // The Account page lists it, with the Console line.
    let page = ann.get("/account").await.text().await.unwrap();
    assert!(page.contains("My phone") && page.contains("data-console-status"));
    assert!(page.contains("/assets/passkeys.js"));
    let res = ann.delete(&format!("/api/account/passkeys/{id}")).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert!(passkeys(&ann).await.is_empty());
    let res = ann.delete(&format!("/api/account/passkeys/{id}")).await;
    assert_error(res, 404, "not_found").await;
    let kinds = ledger_kinds(&app, &ann).await;
    assert!(kinds.contains(&"passkey.added".to_owned()) && kinds.contains(&"passkey.removed".to_owned()), "{kinds:?}");
}

async fn a_passkey_unlocks_this_browser_sessions_console_and_lock_ends_it(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    let mut phone = Authenticator::new(&ann.base);
    // Without a passkey there is nothing to unlock with.
    let res = ann.post_empty("/api/console/unlock/challenges").await;
    assert_error(res, 409, "invalid_state").await;
    register(&ann, &mut phone, "My phone").await;
    let started = ceremony(&ann, "/api/console/unlock/challenges").await;
    let public_key = &started["options"]["publicKey"];
    assert_eq!(public_key["userVerification"], "required");
    assert_eq!(public_key["rpId"], "localhost");
    assert_eq!(public_key["allowCredentials"].as_array().unwrap().len(), 1);
    let credential = phone.get(&started["options"]);
    let res = ann
        .post("/api/console/unlock", &json!({ "ceremonyId": started["ceremonyId"], "credential": credential }))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let status: Value = res.json().await.unwrap();
    assert_eq!(status["unlocked"], true);
    assert_eq!(status["hasPasskey"], true);
    let until = chrono::DateTime::parse_from_rfc3339(status["until"].as_str().unwrap()).unwrap();
    let idle = chrono::DateTime::parse_from_rfc3339(status["idleUntil"].as_str().unwrap()).unwrap();
    assert_eq!((until.timestamp() - app.now().timestamp()) / 60, 8 * 60);
    assert_eq!((idle.timestamp() - app.now().timestamp()) / 60, 30);
    assert_eq!(console(&ann).await["unlocked"], true);
    assert!(passkeys(&ann).await[0]["lastUsedAt"].is_string());
    let session = session_id(&ann).await;
    let account = ann.me().await.account.id;
    console_unlocks::check(&app.store, &session, &account).await.unwrap();
    console_unlocks::touch(&app.store, &session, &account).await.unwrap();
    // Another browser of the same person is not unlocked by it.
    let mut other = app.web();
    other.base = by_name(&app);
    other.login("ann@example.com", "correct horse battery").await;
    assert_eq!(console(&other).await["unlocked"], false);
    let other_session = session_id(&other).await;
    let error = console_unlocks::check(&app.store, &other_session, &account).await.unwrap_err();
    assert_eq!(error.code().name(), "console_locked");
    // Another account's id finds nothing.
    let bob = person(&app, "bob@example.com").await;
    let bob_account = bob.me().await.account.id;
    assert!(console_unlocks::check(&app.store, &session, &bob_account).await.is_err());
    // Lock now; locking again is fine.
    let res = ann.post_empty("/api/console/lock").await;
    assert_eq!(res.status(), StatusCode::OK);
    let status: Value = res.json().await.unwrap();
    assert_eq!(status, json!({ "unlocked": false, "hasPasskey": true }));
    let res = ann.post_empty("/api/console/lock").await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(console(&ann).await["unlocked"], false);
    let error = console_unlocks::touch(&app.store, &session, &account).await.unwrap_err();
    assert_eq!(error.code().name(), "console_locked");
    let kinds = ledger_kinds(&app, &ann).await;
    assert_eq!(kinds.iter().filter(|kind| *kind == "console.unlocked").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|kind| *kind == "console.locked").count(), 1, "{kinds:?}");
    // And it unlocks again.
    unlock(&ann, &mut phone).await;
}

async fn every_passkey_route_is_for_a_person_at_a_browser(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    let mut phone = Authenticator::new(&ann.base);
    let id = register(&ann, &mut phone, "My phone").await;
    let res = ann.post("/api/tokens", &json!({ "name": "script" })).await;
    let token: Value = res.json().await.unwrap();
    let token = token["token"].as_str().unwrap().to_owned();
    let http = reqwest::Client::new();
    let base = by_name(&app);
    let body = json!({ "ceremonyId": "x", "name": "n", "credential": {} });
    let assertion = json!({ "ceremonyId": "x", "credential": {} });
    let calls = [
        http.post(format!("{base}/api/account/passkeys/registrations")),
        http.post(format!("{base}/api/account/passkeys")).json(&body),
        http.get(format!("{base}/api/account/passkeys")),
        http.delete(format!("{base}/api/account/passkeys/{id}")),
        http.get(format!("{base}/api/console")),
        http.post(format!("{base}/api/console/unlock/challenges")),
        http.post(format!("{base}/api/console/unlock")).json(&assertion),
        http.post(format!("{base}/api/console/lock")),
    ];
    for call in calls {
        let res = call.bearer_auth(&token).send().await.unwrap();
        let url = res.url().to_string();
        let message = assert_error(res, 403, "forbidden").await;
        assert!(message.contains("API token"), "{url}: {message}");
    }
    assert_eq!(passkeys(&ann).await.len(), 1);
    // Without the CSRF header, a change is refused.
    let bare = ann.http.post(format!("{base}/api/console/lock")).send().await.unwrap();
    assert_error(bare, 403, "csrf_rejected").await;
    let bare = ann.http.delete(format!("{base}/api/account/passkeys/{id}")).send().await.unwrap();
    assert_error(bare, 403, "csrf_rejected").await;
    assert_eq!(passkeys(&ann).await.len(), 1);
    // Signed out: 401.
    let res = http.get(format!("{base}/api/console")).send().await.unwrap();
    assert_error(res, 401, "unauthorized").await;
}

async fn another_accounts_passkey_is_not_found(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    let bob = person(&app, "bob@example.com").await;
    let mut phone = Authenticator::new(&ann.base);
    let id = register(&ann, &mut phone, "Ann's phone").await;
    assert!(passkeys(&bob).await.is_empty());
    assert_eq!(console(&bob).await["hasPasskey"], false);
    let res = bob.delete(&format!("/api/account/passkeys/{id}")).await;
    assert_error(res, 404, "not_found").await;
    assert_eq!(passkeys(&ann).await.len(), 1);
    // Ann's passkey does not unlock Bob's console: it is not among his (he has none)...
    let res = bob.post_empty("/api/console/unlock/challenges").await;
    assert_error(res, 409, "invalid_state").await;
    // ...and once he has one, Ann's answer to his challenge is refused.
    let mut bobs = Authenticator::new(&bob.base);
    register(&bob, &mut bobs, "Bob's key").await;
    let res = try_unlock(&bob, &mut phone).await;
    assert_error(res, 400, "passkey_refused").await;
    assert_eq!(console(&bob).await["unlocked"], false);
    // Bob's ceremony id in Ann's session is unknown there.
    let started = ceremony(&bob, "/api/console/unlock/challenges").await;
    let credential = phone.get(&started["options"]);
    let res = ann
        .post("/api/console/unlock", &json!({ "ceremonyId": started["ceremonyId"], "credential": credential }))
        .await;
    assert_error(res, 400, "passkey_refused").await;
    assert_eq!(console(&ann).await["unlocked"], false);
}

async fn a_ceremony_answered_wrongly_is_refused(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    let mut phone = Authenticator::new(&ann.base);
    register(&ann, &mut phone, "My phone").await;

    // Another origin.
    phone.origin = "http://evil.example".to_owned();
    let message = assert_error(try_unlock(&ann, &mut phone).await, 400, "passkey_refused").await;
    assert!(message.contains("origin"), "{message}");
    phone.origin = ann.base.clone();

    // Another challenge: the answer to one ceremony posted for a newer one.
    let first = ceremony(&ann, "/api/console/unlock/challenges").await;
    let for_first = phone.get(&first["options"]);
    let second = ceremony(&ann, "/api/console/unlock/challenges").await;
    let res = ann
        .post("/api/console/unlock", &json!({ "ceremonyId": second["ceremonyId"], "credential": for_first }))
        .await;
    let message = assert_error(res, 400, "passkey_refused").await;
    assert!(message.contains("challenge"), "{message}");

    // A replay: the same good answer twice, then against a fresh ceremony.
    let started = ceremony(&ann, "/api/console/unlock/challenges").await;
    let credential = phone.get(&started["options"]);
    let body = json!({ "ceremonyId": started["ceremonyId"], "credential": credential });
    let res = ann.post("/api/console/unlock", &body).await;
    assert_eq!(res.status(), StatusCode::OK);
    ann.post_empty("/api/console/lock").await;
    let message = assert_error(ann.post("/api/console/unlock", &body).await, 400, "passkey_refused").await;
    assert!(message.contains("unknown, used or expired"), "{message}");
    let fresh = ceremony(&ann, "/api/console/unlock/challenges").await;
    let replayed = json!({ "ceremonyId": fresh["ceremonyId"], "credential": credential });
    assert_error(ann.post("/api/console/unlock", &replayed).await, 400, "passkey_refused").await;
    assert_eq!(console(&ann).await["unlocked"], false);

    // No user verification.
    phone.flags = UP;
    let message = assert_error(try_unlock(&ann, &mut phone).await, 400, "passkey_refused").await;
    assert!(message.contains("verif"), "{message}");
    phone.flags = UP | UV;

    // A bad signature.
    let started = ceremony(&ann, "/api/console/unlock/challenges").await;
    let mut credential = phone.get(&started["options"]);
    let mut forged = Authenticator::new(&ann.base);
    forged.credential_id = phone.credential_id.clone();
    forged.counter = phone.counter + 5;
    credential["response"]["signature"] = forged.get(&started["options"])["response"]["signature"].clone();
    let res = ann
        .post("/api/console/unlock", &json!({ "ceremonyId": started["ceremonyId"], "credential": credential }))
        .await;
    assert_error(res, 400, "passkey_refused").await;

    // A credential this server never registered.
    let mut stranger = Authenticator::new(&ann.base);
    assert_error(try_unlock(&ann, &mut stranger).await, 400, "passkey_refused").await;

    // A registration without user verification.
    let mut lax = Authenticator::new(&ann.base);
    lax.flags = UP;
    let started = ceremony(&ann, "/api/account/passkeys/registrations").await;
    let credential = lax.create(&started["options"]);
    let res = ann
        .post("/api/account/passkeys", &json!({ "ceremonyId": started["ceremonyId"], "name": "Lax", "credential": credential }))
        .await;
    assert_error(res, 400, "passkey_refused").await;

    // An unlock answer posted as a registration, and a ceremony of another kind.
    let started = ceremony(&ann, "/api/console/unlock/challenges").await;
    let credential = phone.get(&started["options"]);
    let res = ann
        .post("/api/account/passkeys", &json!({ "ceremonyId": started["ceremonyId"], "name": "X", "credential": credential }))
        .await;
    assert_error(res, 400, "passkey_refused").await;

    // An expired ceremony.
    let started = ceremony(&ann, "/api/console/unlock/challenges").await;
    let credential = phone.get(&started["options"]);
    app.advance(Duration::from_secs(5 * 60 + 1));
    let res = ann
        .post("/api/console/unlock", &json!({ "ceremonyId": started["ceremonyId"], "credential": credential }))
        .await;
    assert_error(res, 400, "passkey_refused").await;

    assert_eq!(console(&ann).await["unlocked"], false);
    assert_eq!(passkeys(&ann).await.len(), 1);
    // After all that, the right answer still unlocks.
    unlock(&ann, &mut phone).await;
}

async fn an_unlock_locks_after_30_idle_minutes_and_after_8_hours(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    let mut phone = Authenticator::new(&ann.base);
    register(&ann, &mut phone, "My phone").await;
    let session = session_id(&ann).await;
    let account = ann.me().await.account.id;

    unlock(&ann, &mut phone).await;
    app.advance(Duration::from_secs(29 * 60));
    assert_eq!(console(&ann).await["unlocked"], true);
    app.advance(Duration::from_secs(60));
    assert_eq!(console(&ann).await["unlocked"], false);
    let error = console_unlocks::check(&app.store, &session, &account).await.unwrap_err();
    assert_eq!(error.code().name(), "console_locked");
    assert!(error.message().contains("30 minutes"), "{}", error.message());

    // Activity keeps it open, but never past 8 hours.
    unlock(&ann, &mut phone).await;
    for _ in 0..(8 * 60 / 20) - 1 {
        app.advance(Duration::from_secs(20 * 60));
        console_unlocks::touch(&app.store, &session, &account).await.unwrap();
    }
    let status = console(&ann).await;
    assert_eq!(status["unlocked"], true);
    assert_eq!(status["idleUntil"], status["until"], "{status}");
    app.advance(Duration::from_secs(20 * 60));
    assert_eq!(console(&ann).await["unlocked"], false);
    let error = console_unlocks::touch(&app.store, &session, &account).await.unwrap_err();
    assert!(error.message().contains("8 hours"), "{}", error.message());
    // A touch within 30 s of the last one writes nothing and still answers.
    unlock(&ann, &mut phone).await;
    let sql = format!("SELECT last_active_at FROM console_unlocks WHERE session_id = '{}'", session.as_str());
    let before = query_i64(&app.store, &sql).await;
    app.advance(Duration::from_secs(10));
    console_unlocks::touch(&app.store, &session, &account).await.unwrap();
    assert_eq!(query_i64(&app.store, &sql).await, before);
    app.advance(Duration::from_secs(30));
    console_unlocks::touch(&app.store, &session, &account).await.unwrap();
    assert_eq!(query_i64(&app.store, &sql).await, before.map(|at| at + 40_000));
}

async fn signing_out_or_removing_the_passkey_ends_the_unlock(backend) {
    let app = spawn_app(backend).await;
    let mut ann = person(&app, "ann@example.com").await;
    let mut phone = Authenticator::new(&ann.base);
    let mut key = Authenticator::new(&ann.base);
    let phone_id = register(&ann, &mut phone, "My phone").await;
    register(&ann, &mut key, "My key").await;

    // Removing the passkey that unlocked ends it; the other passkey's unlock elsewhere stays.
    unlock(&ann, &mut phone).await;
    let mut other = app.web();
    other.base = by_name(&app);
    other.login("ann@example.com", "correct horse battery").await;
    unlock(&other, &mut key).await;
    let res = ann.delete(&format!("/api/account/passkeys/{phone_id}")).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(console(&ann).await["unlocked"], false);
    assert_eq!(console(&other).await["unlocked"], true);
    // The removed passkey unlocks nothing any more.
    let res = try_unlock(&ann, &mut phone).await;
    assert_error(res, 400, "passkey_refused").await;

    // Signing out ends this browser's unlock, and its row.
    unlock(&ann, &mut key).await;
    let session = session_id(&ann).await;
    let account = ann.me().await.account.id;
    let res = ann.post_empty("/api/auth/logout").await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let rows = format!("SELECT COUNT(*) FROM console_unlocks WHERE session_id = '{}'", session.as_str());
    assert_eq!(query_i64(&app.store, &rows).await, Some(0));
    assert!(console_unlocks::check(&app.store, &session, &account).await.is_err());
    ann.login("ann@example.com", "correct horse battery").await;
    assert_eq!(console(&ann).await["unlocked"], false);

    // Ending the other session from the sessions list ends its unlock too.
    let other_session = session_id(&other).await;
    let res = ann.post_empty("/api/auth/sessions/end-others").await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let rows = format!("SELECT COUNT(*) FROM console_unlocks WHERE session_id = '{}'", other_session.as_str());
    assert_eq!(query_i64(&app.store, &rows).await, Some(0));
}

async fn hostile_passkey_input_is_refused_without_a_server_error(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    let mut phone = Authenticator::new(&ann.base);
    register(&ann, &mut phone, "My phone").await;
    let started = ceremony(&ann, "/api/account/passkeys/registrations").await;
    let ceremony_id = started["ceremonyId"].clone();
    let good = Authenticator::new(&ann.base).create(&started["options"]);
    let long = "x".repeat(61);
    let cases: Vec<(Value, u16)> = vec![
        (json!({ "ceremonyId": ceremony_id, "name": long, "credential": good }), 422),
        (json!({ "ceremonyId": ceremony_id, "name": "a\u{0007}b", "credential": good }), 422),
        (json!({ "ceremonyId": ceremony_id, "name": "a\u{202E}b", "credential": good }), 422),
        (json!({ "ceremonyId": ceremony_id, "name": "   ", "credential": good }), 422),
        (json!({ "ceremonyId": ceremony_id, "name": "n", "credential": 5 }), 400),
        (json!({ "ceremonyId": ceremony_id, "name": "n", "credential": { "id": "x" } }), 400),
        (json!({ "ceremonyId": ceremony_id, "name": "n" }), 400),
        (json!({ "ceremonyId": ceremony_id, "name": "n", "credential": good, "extra": 1 }), 400),
        (json!({ "ceremonyId": "../../etc", "name": "n", "credential": good }), 400),
        (json!({ "ceremonyId": "x".repeat(10_000), "name": "n", "credential": good }), 400),
        (json!([1, 2, 3]), 400),
    ];
    for (body, status) in cases {
        let res = ann.post("/api/account/passkeys", &body).await;
        assert_eq!(res.status().as_u16(), status, "{body}");
    }
    // Garbage inside a well-formed credential: bad base64, CBOR that is not an attestation.
    let mut broken = good.clone();
    broken["response"]["attestationObject"] = json!("!!!not base64!!!");
    let mut not_cbor = good.clone();
    not_cbor["response"]["attestationObject"] = json!(URL_SAFE_NO_PAD.encode(b"\xff\x00\x01garbage"));
    let mut bad_client_data = good.clone();
    bad_client_data["response"]["clientDataJSON"] = json!(URL_SAFE_NO_PAD.encode(b"{not json"));
    for credential in [broken, not_cbor, bad_client_data] {
        let started = ceremony(&ann, "/api/account/passkeys/registrations").await;
        let res = ann
            .post("/api/account/passkeys", &json!({ "ceremonyId": started["ceremonyId"], "name": "n", "credential": credential }))
            .await;
        assert_error(res, 400, "passkey_refused").await;
    }
    // The same for unlocks.
    let started = ceremony(&ann, "/api/console/unlock/challenges").await;
    let mut assertion = phone.get(&started["options"]);
    assertion["response"]["authenticatorData"] = json!(URL_SAFE_NO_PAD.encode([1u8, 2, 3]));
    for body in [
        json!({ "ceremonyId": started["ceremonyId"], "credential": "x" }),
        json!({ "ceremonyId": started["ceremonyId"], "credential": {} }),
        json!({ "ceremonyId": started["ceremonyId"], "credential": assertion }),
        json!({ "ceremonyId": "", "credential": assertion }),
    ] {
        let res = ann.post("/api/console/unlock", &body).await;
        assert_eq!(res.status().as_u16(), 400, "{body}");
    }
    for path in ["/api/account/passkeys/..%2F..", "/api/account/passkeys/%00", "/api/account/passkeys/x%20y"] {
        let res = ann.delete(path).await;
        assert!(res.status() == 404 || res.status() == 400, "{path}: {}", res.status());
    }
    let long_id = format!("/api/account/passkeys/{}", "a".repeat(5000));
    let res = ann.delete(&long_id).await;
    assert!(res.status().is_client_error(), "{}", res.status());
    assert_eq!(passkeys(&ann).await.len(), 1);
    assert_eq!(console(&ann).await["unlocked"], false);
}

async fn at_most_ten_passkeys_and_none_without_a_host_name(backend) {
    let app = spawn_app(backend).await;
    let ann = person(&app, "ann@example.com").await;
    for n in 0..10 {
        let mut key = Authenticator::new(&ann.base);
        register(&ann, &mut key, &format!("Key {n}")).await;
    }
    let res = ann.post_empty("/api/account/passkeys/registrations").await;
    assert_error(res, 409, "invalid_state").await;
    // The same server by its IP address has no relying party.
    let mut by_ip = app.web();
    by_ip.login("ann@example.com", "correct horse battery").await;
    let res = by_ip.post_empty("/api/console/unlock/challenges").await;
    let message = assert_error(res, 409, "invalid_state").await;
    assert!(message.contains("host name"), "{message}");
    assert_eq!(passkeys(&by_ip).await.len(), 10);
}
}
