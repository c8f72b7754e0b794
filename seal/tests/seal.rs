//! Sealed boxes end to end in Rust: a box opens only for the pinned key, this device, an
//! untouched envelope and a strict, matching, unexpired aad. Every refusal is one row.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::pkcs8::EncodePublicKey as _;
use rand::rngs::OsRng;
use serde_json::{json, Value};
use tether_protocol::capabilities::{SealKey, SEAL_KEY_ALG};
use tether_protocol::{DecisionId, DeviceId};
use tether_seal::{
    check_aad, open, seal, Aad, AadExpectation, AadField, Envelope, Jti, Kid, Recipient, SealError,
    MAX_AAD_BYTES, MAX_TTL_SECS,
};

const NOW: i64 = 1_700_000_000;
const NAME: &str = "GITHUB_TOKEN";
const VALUE: &[u8] = b"ghp_not-a-real-token";

/// A paired computer: its id and seal key pair.
struct Device {
    id: DeviceId,
    secret: p256::SecretKey,
    recipient: Recipient,
}

impl Device {
    fn new() -> Device {
        let secret = p256::SecretKey::random(&mut OsRng);
        let recipient = Recipient::from_public_key(secret.public_key()).unwrap();
        Device {
            id: DeviceId::generate(),
            secret,
            recipient,
        }
    }

    fn kid(&self) -> &Kid {
        self.recipient.kid()
    }

    /// The aad a correct sealer writes for this device, as JSON to change before sealing.
    fn aad(&self) -> Value {
        let aad = Aad::secret(
            self.id.clone(),
            self.kid().clone(),
            None,
            NAME.to_owned(),
            NOW + 600,
            Jti::random(&mut OsRng),
        );
        serde_json::from_slice(&aad.to_bytes()).unwrap()
    }

    fn seal(&self, aad: &[u8]) -> Envelope {
        seal(&self.recipient, &self.id, aad, VALUE, &mut OsRng).unwrap()
    }

    fn seal_json(&self, aad: &Value) -> Envelope {
        self.seal(&serde_json::to_vec(aad).unwrap())
    }

    /// The whole opening, as the device does it for a secret sent from the web.
    fn open(&self, envelope: &Envelope) -> Result<Vec<u8>, SealError> {
        self.open_at(envelope, NOW)
    }

    fn open_at(&self, envelope: &Envelope, now: i64) -> Result<Vec<u8>, SealError> {
        let expected = AadExpectation {
            device: &self.id,
            kid: self.kid(),
            decision: None,
            name: NAME,
        };
        let opened = open(&self.secret, self.kid(), &self.id, envelope)?;
        let checked = opened.check(&expected, now)?;
        Ok(checked.into_plaintext().to_vec())
    }
}

/// The envelope as JSON, for changing one field.
fn wire(envelope: &Envelope) -> Value {
    serde_json::to_value(envelope).unwrap()
}

fn parse(wire: &Value) -> Result<Envelope, SealError> {
    Envelope::from_json(wire)
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &Value) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(text.as_str().unwrap()).unwrap()
}

#[test]
fn a_box_opens_for_its_device_and_says_what_was_sealed() {
    let device = Device::new();
    let aad = device.aad();
    let envelope = device.seal_json(&aad);

    // On the wire: exactly {v, kid, epk, ct, aad}, base64url without padding.
    let json = wire(&envelope);
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 5, "{json}");
    for key in ["v", "kid", "epk", "ct", "aad"] {
        assert!(keys.contains(&key), "{key} missing from {json}");
    }
    assert_eq!(json["v"], 1);
    assert_eq!(json["kid"], device.kid().as_str());
    assert_eq!(unb64(&json["epk"]).len(), 65);
    assert_eq!(unb64(&json["ct"]).len(), VALUE.len() + 16);
    assert_eq!(unb64(&json["aad"]), serde_json::to_vec(&aad).unwrap());
    assert!(!json.to_string().contains('='), "{json}");
    let text = serde_json::to_string(&envelope).unwrap();
    assert_eq!(serde_json::from_str::<Envelope>(&text).unwrap(), envelope);
    assert_eq!(parse(&json).unwrap(), envelope);

    let opened = open(&device.secret, device.kid(), &device.id, &envelope).unwrap();
    let parsed_aad = opened.aad().clone();
    assert_eq!(serde_json::to_value(&parsed_aad).unwrap(), aad);
    let expected = AadExpectation {
        device: &device.id,
        kid: device.kid(),
        decision: None,
        name: NAME,
    };
    let checked = opened.check(&expected, NOW).unwrap();
    assert_eq!(checked.jti().as_str(), aad["jti"].as_str().unwrap());
    assert_eq!(checked.into_plaintext().as_slice(), VALUE);
}

#[test]
fn the_aad_is_written_in_the_documented_order() {
    let device = Device::new();
    let jti = Jti::parse("AAAAAAAAAAAAAAAAAAAAAA").unwrap();
    let decision = DecisionId::parse("dec1").unwrap();
    let aad = Aad::secret(
        device.id.clone(),
        device.kid().clone(),
        Some(decision),
        "N".to_owned(),
        42,
        jti,
    );
    let expected = format!(
        r#"{{"v":1,"purpose":"secret","device":"{}","kid":"{}","decision":"dec1","name":"N","exp":42,"jti":"AAAAAAAAAAAAAAAAAAAAAA"}}"#,
        device.id,
        device.kid()
    );
    assert_eq!(String::from_utf8(aad.to_bytes()).unwrap(), expected);
}

#[test]
fn a_box_answering_a_decision_opens_only_for_that_decision() {
    let device = Device::new();
    let decision = DecisionId::generate();
    let mut aad = device.aad();
    aad["decision"] = json!(decision.as_str());
    let envelope = device.seal_json(&aad);
    let opened = || open(&device.secret, device.kid(), &device.id, &envelope).unwrap();
    let expecting = |decision: Option<&DecisionId>| {
        opened()
            .check(
                &AadExpectation {
                    device: &device.id,
                    kid: device.kid(),
                    decision,
                    name: NAME,
                },
                NOW,
            )
            .map(|checked| checked.into_plaintext().to_vec())
    };
    assert_eq!(expecting(Some(&decision)).unwrap(), VALUE);
    assert_eq!(
        expecting(Some(&DecisionId::generate())).unwrap_err(),
        SealError::AadMismatch(AadField::Decision)
    );
    assert_eq!(
        expecting(None).unwrap_err(),
        SealError::AadMismatch(AadField::Decision)
    );
}

/// One refusal: what changed, what opening answered, what it must answer.
type Case = (&'static str, Result<Vec<u8>, SealError>, SealError);

/// Every way a box is refused, one row each: what changes, and the answer.
#[test]
fn boxes_are_refused() {
    let device = Device::new();
    let other_device = Device::new();
    let good = device.seal_json(&device.aad());

    let with_aad = |change: &dyn Fn(&mut Value)| {
        let mut aad = device.aad();
        change(&mut aad);
        device.open(&device.seal_json(&aad))
    };
    let with_wire = |change: &dyn Fn(&mut Value)| {
        let mut json = wire(&good);
        change(&mut json);
        parse(&json).and_then(|envelope| device.open(&envelope))
    };
    let flip = |field: &'static str, at: usize| {
        move |json: &mut Value| {
            let mut bytes = unb64(&json[field]);
            bytes[at] ^= 0x01;
            json[field] = json!(b64(&bytes));
        }
    };

    use SealError::*;
    let cases: Vec<Case> = vec![
        // The envelope was changed on the way.
        ("ct changed", with_wire(&flip("ct", 0)), Unopenable),
        (
            "tag changed",
            with_wire(&flip("ct", VALUE.len() + 15)),
            Unopenable,
        ),
        ("aad changed", with_wire(&flip("aad", 10)), Unopenable),
        (
            "aad replaced by another valid one",
            with_wire(&|json: &mut Value| {
                let mut aad = device.aad();
                aad["name"] = json!("OTHER");
                json["aad"] = json!(b64(&serde_json::to_vec(&aad).unwrap()));
            }),
            Unopenable,
        ),
        (
            "epk another valid point",
            with_wire(&|json: &mut Value| {
                json["epk"] = wire(&device.seal_json(&device.aad()))["epk"].clone();
            }),
            Unopenable,
        ),
        ("epk off the curve", with_wire(&flip("epk", 64)), Unopenable),
        (
            "epk compressed",
            with_wire(&|json: &mut Value| {
                let point = unb64(&json["epk"]);
                let mut compressed = vec![0x02 | (point[64] & 1)];
                compressed.extend_from_slice(&point[1..33]);
                json["epk"] = json!(b64(&compressed));
            }),
            MalformedEnvelope("epk is not an uncompressed P-256 point"),
        ),
        (
            "epk truncated",
            with_wire(&|json: &mut Value| {
                json["epk"] = json!(b64(&unb64(&json["epk"])[..64]));
            }),
            MalformedEnvelope("epk is not an uncompressed P-256 point"),
        ),
        // Another key or another device.
        (
            "kid of another key",
            with_wire(&|json: &mut Value| json["kid"] = json!(other_device.kid().as_str())),
            WrongKid,
        ),
        (
            "sealed for another key, labelled with ours",
            {
                let mut json = wire(&other_device.seal_json(&device.aad()));
                json["kid"] = json!(device.kid().as_str());
                device.open(&parse(&json).unwrap())
            },
            Unopenable,
        ),
        (
            "sealed for another device id (info)",
            {
                let envelope = seal(
                    &device.recipient,
                    &other_device.id,
                    &serde_json::to_vec(&device.aad()).unwrap(),
                    VALUE,
                    &mut OsRng,
                )
                .unwrap();
                device.open(&envelope)
            },
            Unopenable,
        ),
        // The envelope's own shape.
        (
            "v 2",
            with_wire(&|json: &mut Value| json["v"] = json!(2)),
            UnsupportedVersion,
        ),
        (
            "v 0",
            with_wire(&|json: &mut Value| json["v"] = json!(0)),
            UnsupportedVersion,
        ),
        (
            "v \"1\"",
            with_wire(&|json: &mut Value| json["v"] = json!("1")),
            MalformedEnvelope("not {v, kid, epk, ct, aad}"),
        ),
        (
            "an iv",
            with_wire(&|json: &mut Value| json["iv"] = json!("AAAAAAAAAAAAAAAA")),
            MalformedEnvelope("not {v, kid, epk, ct, aad}"),
        ),
        (
            "no aad",
            with_wire(&|json: &mut Value| {
                json.as_object_mut().unwrap().remove("aad");
            }),
            MalformedEnvelope("not {v, kid, epk, ct, aad}"),
        ),
        (
            "padded base64",
            with_wire(&|json: &mut Value| {
                // 35 bytes need one padding character.
                let padded = URL_SAFE_PAD.encode(&unb64(&json["ct"])[..35]);
                assert!(padded.ends_with('='));
                json["ct"] = json!(padded);
            }),
            MalformedEnvelope("ct is not base64url"),
        ),
        (
            "ct shorter than a tag",
            with_wire(&|json: &mut Value| json["ct"] = json!(b64(&[0; 15]))),
            MalformedEnvelope("ct is shorter than its tag"),
        ),
        (
            "aad over 4 KiB",
            with_wire(&|json: &mut Value| {
                json["aad"] = json!(b64(&[b' '; MAX_AAD_BYTES + 1]))
            }),
            TooLarge,
        ),
        // The aad, authentic but not what this device expects.
        (
            "aad v 2",
            with_aad(&|aad| aad["v"] = json!(2)),
            UnsupportedVersion,
        ),
        (
            "another purpose",
            with_aad(&|aad| aad["purpose"] = json!("secret.deliver")),
            AadMismatch(AadField::Purpose),
        ),
        (
            "another device in the aad",
            with_aad(&|aad| aad["device"] = json!(other_device.id.as_str())),
            AadMismatch(AadField::Device),
        ),
        (
            "another kid in the aad",
            with_aad(&|aad| aad["kid"] = json!(other_device.kid().as_str())),
            AadMismatch(AadField::Kid),
        ),
        (
            "a decision where none is awaited",
            with_aad(&|aad| aad["decision"] = json!(DecisionId::generate().as_str())),
            AadMismatch(AadField::Decision),
        ),
        (
            "another name",
            with_aad(&|aad| aad["name"] = json!("AWS_SECRET")),
            AadMismatch(AadField::Name),
        ),
        (
            "expired",
            with_aad(&|aad| aad["exp"] = json!(NOW - 1)),
            Expired,
        ),
        (
            "expiring now",
            with_aad(&|aad| aad["exp"] = json!(NOW)),
            Expired,
        ),
        (
            "far-future exp",
            with_aad(&|aad| aad["exp"] = json!(NOW + MAX_TTL_SECS + 1)),
            ExpiryTooFar,
        ),
        // The aad's strict shape.
        (
            "an unknown aad field",
            with_aad(&|aad| aad["site"] = json!("example.com")),
            MalformedAad,
        ),
        (
            "allow as null",
            with_aad(&|aad| aad["allow"] = Value::Null),
            MalformedAad,
        ),
        (
            "allow as text",
            with_aad(&|aad| aad["allow"] = json!("api.example.com")),
            MalformedAad,
        ),
        (
            "allow empty",
            with_aad(&|aad| aad["allow"] = json!([])),
            BadSites("a secret names 1 to 10 allowed sites".into()),
        ),
        (
            "allow with a site in another spelling",
            with_aad(&|aad| aad["allow"] = json!(["API.example.com"])),
            BadSites(r#""API.example.com" is written "api.example.com""#.into()),
        ),
        (
            "allow with plain http to another computer",
            with_aad(&|aad| aad["allow"] = json!(["http://api.example.com"])),
            BadSites(
                r#""http://api.example.com" would send the secret unencrypted; use https (http is for this computer's own addresses only)"#
                    .into(),
            ),
        ),
        (
            "decision absent rather than null",
            with_aad(&|aad| {
                aad.as_object_mut().unwrap().remove("decision");
            }),
            MalformedAad,
        ),
        (
            "exp as text",
            with_aad(&|aad| aad["exp"] = json!((NOW + 60).to_string())),
            MalformedAad,
        ),
        (
            "exp as a fraction",
            with_aad(&|aad| aad["exp"] = json!(NOW as f64 + 60.5)),
            MalformedAad,
        ),
        (
            "v as text",
            with_aad(&|aad| aad["v"] = json!("1")),
            MalformedAad,
        ),
        (
            "a short jti",
            with_aad(&|aad| aad["jti"] = json!(b64(&[7; 15]))),
            MalformedAad,
        ),
        (
            "a repeated aad field",
            {
                let text = serde_json::to_string(&device.aad()).unwrap();
                let repeated = text.replacen("{", r#"{"name":"OTHER","#, 1);
                device.open(&device.seal(repeated.as_bytes()))
            },
            MalformedAad,
        ),
        (
            "aad not an object",
            device.open(&device.seal(b"[1]")),
            MalformedAad,
        ),
    ];

    let mut wrong = Vec::new();
    for (name, got, expected) in cases {
        if got.as_ref().err() != Some(&expected) {
            wrong.push(format!("{name}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    // And the untouched box still opens.
    assert_eq!(device.open(&good).unwrap(), VALUE);
}

#[test]
fn a_box_limited_to_sites_carries_its_list_in_the_aad() {
    let device = Device::new();
    let sites = json!(["api.example.com", "http://127.0.0.1:8080"]);
    let mut aad = device.aad();
    aad["allow"] = sites.clone();
    let opened = open(
        &device.secret,
        device.recipient.kid(),
        &device.id,
        &device.seal_json(&aad),
    )
    .unwrap();
    assert_eq!(
        opened.aad().allow.as_ref().map(|list| json!(list)),
        Some(sites)
    );
    // Built through the type, the list is written last and round-trips.
    let typed = Aad::secret(
        device.id.clone(),
        device.recipient.kid().clone(),
        None,
        NAME.to_owned(),
        NOW + 60,
        Jti::random(&mut OsRng),
    )
    .with_allow(vec!["api.example.com".into()]);
    let bytes = typed.to_bytes();
    assert!(String::from_utf8_lossy(&bytes).ends_with(r#","allow":["api.example.com"]}"#));
    assert_eq!(Aad::parse(&bytes).unwrap(), typed);
    // Without a limit, the field is absent, not null.
    let unlimited = Aad {
        allow: None,
        ..typed
    };
    assert!(!String::from_utf8_lossy(&unlimited.to_bytes()).contains("allow"));
}

const URL_SAFE_PAD: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE;

#[test]
fn the_expiry_window_is_at_most_fifteen_minutes() {
    let device = Device::new();
    let mut aad = device.aad();
    aad["exp"] = json!(NOW + MAX_TTL_SECS);
    let envelope = device.seal_json(&aad);
    assert_eq!(device.open_at(&envelope, NOW).unwrap(), VALUE);
    assert_eq!(
        device.open_at(&envelope, NOW - 1),
        Err(SealError::ExpiryTooFar)
    );
    assert_eq!(
        device.open_at(&envelope, NOW + MAX_TTL_SECS),
        Err(SealError::Expired)
    );
}

#[test]
fn only_the_pinned_key_opens() {
    let device = Device::new();
    let envelope = device.seal_json(&device.aad());
    // A pinned kid that is not this private key's is a broken setup, not a box to try.
    let other = Device::new();
    assert_eq!(
        open(&device.secret, other.kid(), &device.id, &envelope).unwrap_err(),
        SealError::SealKeyMismatch
    );
    // The device paired again: the box for its old key is refused before HPKE.
    assert_eq!(
        open(&other.secret, other.kid(), &device.id, &envelope).unwrap_err(),
        SealError::WrongKid
    );
}

#[test]
fn check_aad_is_pure_and_names_the_field() {
    let device = Device::new();
    let aad: Aad = serde_json::from_value(device.aad()).unwrap();
    let expected = AadExpectation {
        device: &device.id,
        kid: device.kid(),
        decision: None,
        name: NAME,
    };
    assert_eq!(check_aad(&aad, &expected, NOW), Ok(()));
    let renamed = AadExpectation {
        name: "OTHER",
        ..expected
    };
    assert_eq!(
        check_aad(&aad, &renamed, NOW),
        Err(SealError::AadMismatch(AadField::Name))
    );
}

#[test]
fn a_seal_key_is_a_recipient_only_if_its_parts_agree() {
    let device = Device::new();
    let spki = device.secret.public_key().to_public_key_der().unwrap();
    let seal_key = SealKey {
        kid: device.kid().to_string(),
        alg: SEAL_KEY_ALG.to_owned(),
        spki: b64(spki.as_bytes()),
        fingerprint: format!(
            "SHA256:{}",
            b64(&<sha2::Sha256 as sha2::Digest>::digest(spki.as_bytes()))
        ),
    };
    let recipient = Recipient::from_seal_key(&seal_key).unwrap();
    assert_eq!(recipient.kid(), device.kid());
    assert_eq!(recipient.public_key(), &device.secret.public_key());

    let other = Device::new();
    let other_spki = other.secret.public_key().to_public_key_der().unwrap();
    let broken = [
        SealKey {
            kid: other.kid().to_string(),
            ..seal_key.clone()
        },
        SealKey {
            spki: b64(other_spki.as_bytes()),
            ..seal_key.clone()
        },
        SealKey {
            fingerprint: "SHA256:AAAA".to_owned(),
            ..seal_key.clone()
        },
        SealKey {
            spki: "not base64!".to_owned(),
            ..seal_key.clone()
        },
    ];
    for seal_key in broken {
        assert_eq!(
            Recipient::from_seal_key(&seal_key).unwrap_err(),
            SealError::SealKeyMismatch,
            "{seal_key:?}"
        );
    }
}

#[test]
fn oversized_values_are_not_sealed() {
    let device = Device::new();
    let aad = serde_json::to_vec(&device.aad()).unwrap();
    let big = vec![0u8; 64 * 1024 + 1];
    assert_eq!(
        seal(&device.recipient, &device.id, &aad, &big, &mut OsRng).unwrap_err(),
        SealError::TooLarge
    );
    assert_eq!(
        seal(
            &device.recipient,
            &device.id,
            &[b' '; MAX_AAD_BYTES + 1],
            VALUE,
            &mut OsRng
        )
        .unwrap_err(),
        SealError::TooLarge
    );
}
