//! The browser sealer (`/assets/seal.js`) in a real headless Chromium: it reproduces the
//! published HPKE vector for our suite, and a secret it seals opens in Rust with
//! `tether_seal::open`, with the aad the device expects — limited to sites too,
//! with the sites the form's parser (`/assets/secrets.js`) writes as Rust reads them.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::pkcs8::EncodePublicKey as _;
use rand::rngs::OsRng;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use tether_protocol::sites::Site;
use tether_protocol::DeviceId;
use tether_seal::{open, AadExpectation, Envelope, Kid, MAX_TTL_SECS};

use crate::chromium::{chromium_or_skip, Browser};
use crate::spawn_server;

const VECTORS: &str = include_str!("../../../seal/tests/vectors/hpke-p256-sha256.json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_sealed_in_chromium_opens_on_the_device() {
    let Some(chromium) = chromium_or_skip("the browser sealing test") else {
        return;
    };
    let server = spawn_server(None).await;
    let mut browser = Browser::launch(&chromium).await;
    // Any page of the server: the module loads under the pages' own CSP.
    browser.goto(&format!("{}/signin", server.base)).await;

    // Known answer: the CFRG vector for DHKEM(P-256), HKDF-SHA256, AES-256-GCM, seq 0.
    let vectors: Value = serde_json::from_str(VECTORS).unwrap();
    let vector = vectors["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["aead_id"] == 2)
        .unwrap();
    let got = browser
        .eval(&format!("({KNOWN_ANSWER})({vector})", vector = vector))
        .await;
    assert_eq!(
        got,
        json!({"enc": vector["enc"], "ct": vector["encryptions"][0]["ct"]}),
        "seal.js differs from the published vector"
    );

    // A device's key pair, reported as the agent reports it.
    let (secret, kid, seal_key) = device_key();
    let device = DeviceId::generate();
    let value = "s3cr3t ✓ \u{1f511} \"quoted\"";

    let sealed = seal_in_browser(&mut browser, &device, &seal_key, value, &[]).await;
    assert!(sealed.get("error").is_none(), "{sealed}");
    let envelope = Envelope::from_json(&sealed).unwrap();
    let now = unix_now();
    let opened = open(&secret, &kid, &device, &envelope).unwrap();
    let aad = opened.aad().clone();
    assert_eq!(
        (
            aad.v,
            aad.purpose.as_str(),
            &aad.device,
            &aad.kid,
            aad.decision.as_ref()
        ),
        (1, "secret", &device, &kid, None)
    );
    assert_eq!(aad.name, "API_TOKEN");
    assert_eq!(
        aad.allow, None,
        "an unlimited secret's aad has no allow key"
    );
    assert!(aad.exp > now && aad.exp <= now + MAX_TTL_SECS, "{aad:?}");
    let checked = opened
        .check(
            &AadExpectation {
                device: &device,
                kid: &kid,
                decision: None,
                name: "API_TOKEN",
            },
            now,
        )
        .unwrap();
    assert_eq!(checked.into_plaintext().as_slice(), value.as_bytes());

    // The same box for another device does not open (the device id is in the info).
    let elsewhere = open(&secret, &kid, &DeviceId::generate(), &envelope);
    assert!(elsewhere.is_err());

    // Limited to sites: the list is the aad's last key, as the device reads it.
    let sites = ["api.example.com", "http://127.0.0.1:8080"];
    let limited = seal_in_browser(&mut browser, &device, &seal_key, value, &sites).await;
    assert!(limited.get("error").is_none(), "{limited}");
    let envelope = Envelope::from_json(&limited).unwrap();
    let aad_text = String::from_utf8(envelope.aad().to_vec()).unwrap();
    assert!(
        aad_text.ends_with(r#","allow":["api.example.com","http://127.0.0.1:8080"]}"#),
        "{aad_text}"
    );
    let opened = open(&secret, &kid, &device, &envelope).unwrap();
    assert_eq!(opened.aad().allow, Some(sites.map(str::to_owned).to_vec()));
    let checked = opened
        .check(
            &AadExpectation {
                device: &device,
                kid: &kid,
                decision: None,
                name: "API_TOKEN",
            },
            unix_now(),
        )
        .unwrap();
    assert_eq!(checked.into_plaintext().as_slice(), value.as_bytes());

    // A key whose kid is not its own is refused in the browser, before anything is sealed.
    let mut mismatched = seal_key.clone();
    mismatched["kid"] = json!(URL_SAFE_NO_PAD.encode([0u8; 16]));
    let refused = seal_in_browser(&mut browser, &device, &mismatched, value, &[]).await;
    assert_eq!(refused["code"], "sealKeyMismatch", "{refused}");

    // The form's "Allowed sites" field: what it writes is what `Site::parse` accepts.
    for (typed, expected) in [
        ("", json!([])),
        (
            "API.Example.com, https://API.example.com:443/  http://127.0.0.1:8080",
            json!([
                "api.example.com",
                "https://api.example.com",
                "http://127.0.0.1:8080"
            ]),
        ),
        (
            "bücher.example,xn--bcher-kva.example https://bücher.example:8443",
            json!([
                "xn--bcher-kva.example",
                "https://xn--bcher-kva.example:8443"
            ]),
        ),
        (
            "http://localhost:3000 http://[::1]:9000 [2001:db8::1] 203.0.113.7",
            json!([
                "http://localhost:3000",
                "http://[::1]:9000",
                "[2001:db8::1]",
                "203.0.113.7"
            ]),
        ),
    ] {
        let got = parse_sites_in_browser(&mut browser, typed).await;
        assert_eq!(got, expected, "{typed:?}");
        for site in got.as_array().unwrap() {
            let site = site.as_str().unwrap();
            assert_eq!(
                Site::parse(site).map(|s| s.to_string()),
                Ok(site.to_owned())
            );
        }
    }
    let eleven: Vec<String> = (0..11).map(|n| format!("s{n}.example.com")).collect();
    for typed in [
        "http://api.example.com",
        "http://10.0.0.1:8080",
        "https://api.example.com/v1",
        "https://api.example.com?q=1",
        "https://user@api.example.com",
        "ftp://files.example.com",
        "api.example.com/v1",
        "api.example.com:8443",
        "127.1",
        "localhost",
        "example.com.",
        "*.example.com",
        &eleven.join(" "),
    ] {
        let got = parse_sites_in_browser(&mut browser, typed).await;
        assert!(got["error"].is_string(), "{typed:?} gave {got}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_computers_page_sends_a_secret_limited_to_sites() {
    let Some(chromium) = chromium_or_skip("the browser allowed-sites test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let mut browser = Browser::launch(&chromium).await;
    browser
        .sign_up(&base, "Sites User", "sites@example.com")
        .await;
    let device = FakeDevice::pair(&base, &mut browser).await;
    let form = "form[data-seal-device]";
    let ready = browser
        .reload_until(
            &format!("{base}/computers"),
            &format!("document.querySelector('{form}')"),
        )
        .await;
    assert!(ready, "no secret form: {}", browser.text("main").await);

    // A site the computer would refuse is caught in the page; nothing is sealed or sent.
    browser
        .fill(&format!("{form} input[name=name]"), "API_TOKEN")
        .await;
    browser
        .fill(&format!("{form} input[name=value]"), "v4lue")
        .await;
    browser
        .fill(
            &format!("{form} input[name=allow]"),
            "http://api.example.com",
        )
        .await;
    browser.click(&format!("{form} button")).await;
    browser
        .wait_for(&format!(
            "document.querySelector('{form} .error').textContent.includes('unencrypted')"
        ))
        .await;
    assert_eq!(device.listing(&mut browser).await["deliveries"], json!([]));

    // Typed loosely, sealed and sent canonically; the status line says where it may go.
    browser
        .fill(
            &format!("{form} input[name=allow]"),
            "API.example.com,  http://127.0.0.1:8080",
        )
        .await;
    browser.click(&format!("{form} button")).await;
    browser
        .wait_for(&format!(
            "document.querySelector('{form} .status').textContent\
             .includes('Sent API_TOKEN (only to api.example.com, http://127.0.0.1:8080)')"
        ))
        .await;
    let sites = json!(["api.example.com", "http://127.0.0.1:8080"]);
    let listing = device.listing(&mut browser).await;
    let delivery = &listing["deliveries"][0];
    assert_eq!(
        (&delivery["state"], &delivery["allow"]),
        (&json!("pending"), &sites),
        "{listing}"
    );

    // Once the computer says it saved it, the card lists the name with its sites.
    device
        .answer_saved(delivery["id"].as_str().unwrap(), "API_TOKEN")
        .await;
    browser.goto(&format!("{base}/computers")).await;
    // The secrets are folded away on the card; open them as a person would.
    browser
        .eval("document.querySelectorAll('details.secrets').forEach((d) => { d.open = true; })")
        .await;
    let names = browser.text(".secret-names").await;
    assert!(
        names.contains("API_TOKEN only to api.example.com, http://127.0.0.1:8080"),
        "{names}"
    );
}

/// A computer paired through the API, with a real seal key, that answers deliveries itself.
struct FakeDevice {
    base: String,
    id: String,
    token: String,
}

impl FakeDevice {
    /// Pairs into the account signed in to `browser` and reports capabilities once.
    async fn pair(base: &str, browser: &mut Browser) -> FakeDevice {
        let (_secret, _kid, seal_key) = device_key();
        let http = reqwest::Client::new();
        let paired: Value = http
            .post(format!("{base}/api/devices/pair"))
            .header("x-tether-protocol", "1")
            .json(&json!({
                "name": "sites-box", "platform": "linux", "installId": "install-sites",
                "agentVersion": "0.1.0", "sealKey": seal_key,
            }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let linked = browser
            .eval(&format!(
                "fetch('/api/devices/link', {{ method: 'POST', credentials: 'same-origin', \
                 headers: {{ 'content-type': 'application/json', 'x-tether-csrf': \
                 document.querySelector('meta[name=\"csrf-token\"]').content }}, \
                 body: JSON.stringify({{ userCode: {code} }}) }}).then((r) => r.status)",
                code = paired["userCode"]
            ))
            .await;
        assert_eq!(linked, json!(200));
        let registered: Value = http
            .post(format!("{base}/api/devices/register"))
            .header("x-tether-protocol", "1")
            .json(&json!({ "deviceCode": paired["deviceCode"] }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let device = FakeDevice {
            base: base.to_owned(),
            id: registered["deviceId"].as_str().unwrap().to_owned(),
            token: registered["token"].as_str().unwrap().to_owned(),
        };
        let capabilities = json!({
            "protocol": 1, "agentVersion": "0.1.0", "installId": "install-sites",
            "engines": [], "folders": [],
            "sandbox": { "backend": "none", "strength": "advisory", "guarantees": {}, "reasons": [] },
            "sealKey": seal_key, "acceptWebApprovals": true,
        });
        let res = device
            .post(
                "/api/devices/self/heartbeat",
                &json!({ "capabilities": capabilities, "running": [] }),
            )
            .await;
        assert_eq!(res.status(), reqwest::StatusCode::OK);
        device
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("x-tether-protocol", "1")
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn answer_saved(&self, delivery_id: &str, name: &str) {
        let path = format!("/api/devices/self/secret-deliveries/{delivery_id}");
        let res = self
            .post(&path, &json!({ "saved": true, "name": name }))
            .await;
        assert_eq!(res.status(), reqwest::StatusCode::OK);
    }

    /// `GET /api/devices/{id}/secrets` as the signed-in owner.
    async fn listing(&self, browser: &mut Browser) -> Value {
        browser
            .eval(&format!(
                "fetch('/api/devices/{}/secrets', {{ credentials: 'same-origin' }}).then((r) => r.json())",
                self.id
            ))
            .await
    }
}

/// A device's key pair: the secret key, its kid, and the seal key as the agent reports it.
fn device_key() -> (p256::SecretKey, Kid, Value) {
    let secret = p256::SecretKey::random(&mut OsRng);
    let spki = secret.public_key().to_public_key_der().unwrap();
    let digest = Sha256::digest(spki.as_bytes());
    let kid = Kid::of_spki(spki.as_bytes());
    let seal_key = json!({
        "kid": kid.as_str(),
        "alg": "ECDH-P256",
        "spki": URL_SAFE_NO_PAD.encode(spki.as_bytes()),
        "fingerprint": format!("SHA256:{}", URL_SAFE_NO_PAD.encode(digest)),
    });
    (secret, kid, seal_key)
}

/// Runs the form's `parseSites` on `typed`; answers the list or `{error}`.
async fn parse_sites_in_browser(browser: &mut Browser, typed: &str) -> Value {
    let script = format!(
        "(async () => {{ try {{ const {{ parseSites }} = await import('/assets/secrets.js'); \
         return parseSites({typed}); }} catch (e) {{ return {{ error: String(e) }}; }} }})()",
        typed = json!(typed)
    );
    browser.eval(&script).await
}

/// Runs `sealSecret` in the page; answers the envelope or `{error, code}`.
async fn seal_in_browser(
    browser: &mut Browser,
    device: &DeviceId,
    seal_key: &Value,
    value: &str,
    allow: &[&str],
) -> Value {
    let args = json!({
        "deviceId": device.as_str(),
        "sealKey": seal_key,
        "name": "API_TOKEN",
        "value": value,
        "decision": null,
        "allow": allow,
    });
    let script = format!(
        "(async () => {{ try {{ const {{ sealSecret }} = await import('/assets/seal.js'); \
         return await sealSecret({args}); }} catch (e) {{ return {{ error: String(e), code: e.code ?? null }}; }} }})()"
    );
    browser.eval(&script).await
}

/// `sealBase` with the vector's ephemeral key, imported from its scalar and point.
const KNOWN_ANSWER: &str = r#"async (v) => {
  try {
    const { sealBase, base64url } = await import('/assets/seal.js');
    const hex = (h) => Uint8Array.from(h.match(/../g).map((b) => parseInt(b, 16)));
    const toHex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    const curve = { name: 'ECDH', namedCurve: 'P-256' };
    const pkEm = hex(v.pkEm);
    const jwk = { kty: 'EC', crv: 'P-256', d: base64url(hex(v.skEm)),
                  x: base64url(pkEm.slice(1, 33)), y: base64url(pkEm.slice(33)) };
    const privateKey = await crypto.subtle.importKey('jwk', jwk, curve, false, ['deriveBits']);
    const publicKey = await crypto.subtle.importKey('raw', pkEm, curve, true, []);
    const recipient = await crypto.subtle.importKey('raw', hex(v.pkRm), curve, true, []);
    const first = v.encryptions[0];
    const { enc, ct } = await sealBase(recipient, hex(v.info), hex(first.aad), hex(first.pt),
                                       { privateKey, publicKey });
    return { enc: toHex(enc), ct: toHex(ct) };
  } catch (e) {
    return { error: String(e) };
  }
}"#;

fn unix_now() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_secs()).unwrap()
}
