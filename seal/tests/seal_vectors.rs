//! The published HPKE test vectors for DHKEM(P-256, HKDF-SHA256) with HKDF-SHA256 in base
//! mode, from `tests/vectors/hpke-p256-sha256.json` (its `source` says where they come from):
//! RFC 9180 A.3.1 (AES-128-GCM) and the CFRG entry for AES-256-GCM, the suite of
//! `tether_seal`. A deliberately wrong copy must fail, which shows the checks bite.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use hpke::aead::{Aead, AesGcm128, AesGcm256};
use hpke::kdf::HkdfSha256;
use hpke::kem::DhP256HkdfSha256;
use hpke::{Deserializable, Kem, OpModeR, OpModeS, Serializable};
use p256::elliptic_curve::rand_core::{CryptoRng, RngCore};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use serde::Deserialize;
use tether_seal::{open_base, seal_base};

const VECTORS: &str = include_str!("vectors/hpke-p256-sha256.json");

#[derive(Deserialize)]
struct File {
    vectors: Vec<Vector>,
    wrong: Vec<Vector>,
}

/// One entry in the CFRG format (hex strings), encryptions given with their sequence number.
#[derive(Deserialize)]
#[allow(non_snake_case)]
struct Vector {
    name: String,
    mode: u8,
    kem_id: u16,
    kdf_id: u16,
    aead_id: u16,
    info: String,
    ikmR: String,
    ikmE: String,
    skRm: String,
    pkRm: String,
    enc: String,
    encryptions: Vec<Encryption>,
    exports: Vec<Export>,
}

#[derive(Deserialize)]
struct Encryption {
    seq: u64,
    aad: String,
    ct: String,
    pt: String,
}

#[derive(Deserialize)]
struct Export {
    exporter_context: String,
    #[serde(rename = "L")]
    length: usize,
    exported_value: String,
}

#[test]
fn published_vectors_pass() {
    let file: File = serde_json::from_str(VECTORS).unwrap();
    assert_eq!(
        file.vectors.iter().map(|v| v.aead_id).collect::<Vec<_>>(),
        [1, 2],
        "RFC 9180 A.3.1 and the AES-256-GCM entry"
    );
    for vector in &file.vectors {
        if let Err(problem) = check(vector) {
            panic!("{}: {problem}", vector.name);
        }
    }
}

#[test]
fn a_wrong_vector_fails() {
    let file: File = serde_json::from_str(VECTORS).unwrap();
    assert!(!file.wrong.is_empty());
    for vector in &file.wrong {
        // Its one changed byte is in the seq-0 ct, the first thing the production path seals.
        match check(vector) {
            Ok(()) => panic!("{} passed", vector.name),
            Err(problem) => assert!(problem.starts_with("ct (seal_base) differs"), "{problem}"),
        }
    }
}

/// Every check of one vector; `Err` names the first value that differs.
fn check(vector: &Vector) -> Result<(), String> {
    assert_eq!(
        (vector.mode, vector.kem_id, vector.kdf_id),
        (0, 0x0010, 0x0001)
    );
    // The recipient's key pair: DeriveKeyPair(ikmR) and the published encodings.
    let sk_r = p256::SecretKey::from_slice(&hex(&vector.skRm)).map_err(|e| e.to_string())?;
    same(
        "pkRm",
        sk_r.public_key().to_encoded_point(false).as_bytes(),
        &hex(&vector.pkRm),
    )?;
    let (derived, _) = DhP256HkdfSha256::derive_keypair(&hex(&vector.ikmR));
    same(
        "DeriveKeyPair(ikmR)",
        &derived.to_bytes(),
        &hex(&vector.skRm),
    )?;

    match vector.aead_id {
        1 => check_contexts::<AesGcm128>(vector),
        2 => {
            check_single_shot(vector, &sk_r)?;
            check_contexts::<AesGcm256>(vector)
        }
        other => Err(format!("aead {other} is not in this file's scope")),
    }
}

/// The production path, `seal_base`/`open_base` (AES-256-GCM), at sequence number 0: the
/// ephemeral key comes from `ikmE`, so `enc` and `ct` must be the published bytes.
fn check_single_shot(vector: &Vector, sk_r: &p256::SecretKey) -> Result<(), String> {
    let first = vector
        .encryptions
        .iter()
        .find(|e| e.seq == 0)
        .ok_or("no encryption at seq 0")?;
    let info = hex(&vector.info);
    let mut ikm_e = Replay::new(hex(&vector.ikmE));
    let (enc, ct) = seal_base(
        &sk_r.public_key(),
        &info,
        &hex(&first.aad),
        &hex(&first.pt),
        &mut ikm_e,
    )
    .map_err(|e| e.to_string())?;
    ikm_e.finish()?;
    same("enc", &enc, &hex(&vector.enc))?;
    same("ct (seal_base)", &ct, &hex(&first.ct))?;
    let pt = open_base(
        sk_r,
        &hex(&vector.enc),
        &info,
        &hex(&first.aad),
        &hex(&first.ct),
    )
    .map_err(|e| format!("open_base: {e}"))?;
    same("pt (open_base)", &pt, &hex(&first.pt))
}

/// The key schedule through HPKE contexts: every published sequence number (so key and
/// base_nonce), every export (so exporter_secret), on the sender's and the receiver's side.
fn check_contexts<A: Aead>(vector: &Vector) -> Result<(), String> {
    let info = hex(&vector.info);
    let pk_r = <DhP256HkdfSha256 as Kem>::PublicKey::from_bytes(&hex(&vector.pkRm))
        .map_err(|e| e.to_string())?;
    let sk_r = <DhP256HkdfSha256 as Kem>::PrivateKey::from_bytes(&hex(&vector.skRm))
        .map_err(|e| e.to_string())?;
    let mut ikm_e = Replay::new(hex(&vector.ikmE));
    let (enc, mut sender) = hpke::setup_sender::<A, HkdfSha256, DhP256HkdfSha256, _>(
        &OpModeS::Base,
        &pk_r,
        &info,
        &mut ikm_e,
    )
    .map_err(|e| e.to_string())?;
    ikm_e.finish()?;
    same("enc", &enc.to_bytes(), &hex(&vector.enc))?;
    let encapped = <DhP256HkdfSha256 as Kem>::EncappedKey::from_bytes(&hex(&vector.enc))
        .map_err(|e| e.to_string())?;
    let mut receiver = hpke::setup_receiver::<A, HkdfSha256, DhP256HkdfSha256>(
        &OpModeR::Base,
        &sk_r,
        &encapped,
        &info,
    )
    .map_err(|e| e.to_string())?;

    let mut seq = 0;
    for encryption in &vector.encryptions {
        // Contexts count their own messages: seal filler until the published number.
        while seq < encryption.seq {
            let filler = sender.seal(b"", b"").map_err(|e| e.to_string())?;
            receiver
                .open(&filler, b"")
                .map_err(|e| format!("filler at seq {seq}: {e}"))?;
            seq += 1;
        }
        let what = format!("ct at seq {seq}");
        let ct = sender
            .seal(&hex(&encryption.pt), &hex(&encryption.aad))
            .map_err(|e| e.to_string())?;
        same(&what, &ct, &hex(&encryption.ct))?;
        let pt = receiver
            .open(&hex(&encryption.ct), &hex(&encryption.aad))
            .map_err(|e| format!("open at seq {seq}: {e}"))?;
        same(&format!("pt at seq {seq}"), &pt, &hex(&encryption.pt))?;
        seq += 1;
    }
    for export in &vector.exports {
        let context = hex(&export.exporter_context);
        let mut from_sender = vec![0u8; export.length];
        let mut from_receiver = vec![0u8; export.length];
        sender
            .export(&context, &mut from_sender)
            .map_err(|e| e.to_string())?;
        receiver
            .export(&context, &mut from_receiver)
            .map_err(|e| e.to_string())?;
        let what = format!("export {}", export.exporter_context);
        same(&what, &from_sender, &hex(&export.exported_value))?;
        same(&what, &from_receiver, &hex(&export.exported_value))?;
    }
    Ok(())
}

fn same(what: &str, actual: &[u8], expected: &[u8]) -> Result<(), String> {
    if actual == expected {
        Ok(())
    } else {
        Err(format!(
            "{what} differs:\n  got      {}\n  expected {}",
            to_hex(actual),
            to_hex(expected)
        ))
    }
}

/// Hands out the vector's `ikmE` as "randomness": HPKE's key generation draws exactly
/// `Nsk` = 32 bytes and runs DeriveKeyPair on them, so the ephemeral key is the published one.
struct Replay {
    bytes: Vec<u8>,
    taken: usize,
    overdrawn: bool,
}

impl Replay {
    fn new(bytes: Vec<u8>) -> Replay {
        Replay {
            bytes,
            taken: 0,
            overdrawn: false,
        }
    }

    /// Fails unless exactly the given bytes were drawn.
    fn finish(&self) -> Result<(), String> {
        if self.overdrawn || self.taken != self.bytes.len() {
            return Err(format!(
                "HPKE drew {} bytes of ikmE, the vector has {}",
                self.taken,
                self.bytes.len()
            ));
        }
        Ok(())
    }
}

impl RngCore for Replay {
    fn next_u32(&mut self) -> u32 {
        let mut four = [0u8; 4];
        self.fill_bytes(&mut four);
        u32::from_le_bytes(four)
    }

    fn next_u64(&mut self) -> u64 {
        let mut eight = [0u8; 8];
        self.fill_bytes(&mut eight);
        u64::from_le_bytes(eight)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for byte in dest {
            match self.bytes.get(self.taken) {
                Some(next) => *byte = *next,
                None => self.overdrawn = true,
            }
            self.taken += 1;
        }
    }

    fn try_fill_bytes(
        &mut self,
        dest: &mut [u8],
    ) -> Result<(), p256::elliptic_curve::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoRng for Replay {}

fn hex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd hex: {text}");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
