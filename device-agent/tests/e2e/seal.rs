//! The browser sealer (`/assets/seal.js`) in a real headless Chromium: it reproduces the
//! published HPKE vector for our suite, and a secret it seals opens in Rust with
//! `tether_protocol::seal::open`, with the aad the device expects.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::pkcs8::EncodePublicKey as _;
use rand::rngs::OsRng;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use tether_protocol::seal::{open, AadExpectation, Envelope, Kid, MAX_TTL_SECS};
use tether_protocol::DeviceId;

use crate::chromium::{chromium_or_skip, Browser};
use crate::spawn_server;

const VECTORS: &str = include_str!("../../../shared-protocol/tests/vectors/hpke-p256-sha256.json");

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
    let device = DeviceId::generate();
    let value = "s3cr3t ✓ \u{1f511} \"quoted\"";

    let sealed = seal_in_browser(&mut browser, &device, &seal_key, value).await;
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

    // A key whose kid is not its own is refused in the browser, before anything is sealed.
    let mut mismatched = seal_key.clone();
    mismatched["kid"] = json!(URL_SAFE_NO_PAD.encode([0u8; 16]));
    let refused = seal_in_browser(&mut browser, &device, &mismatched, value).await;
    assert_eq!(refused["code"], "sealKeyMismatch", "{refused}");
}

/// Runs `sealSecret` in the page; answers the envelope or `{error, code}`.
async fn seal_in_browser(
    browser: &mut Browser,
    device: &DeviceId,
    seal_key: &Value,
    value: &str,
) -> Value {
    let args = json!({
        "deviceId": device.as_str(),
        "sealKey": seal_key,
        "name": "API_TOKEN",
        "value": value,
        "decision": null,
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
