//! Sealed boxes and numbered channels (DESIGN §5): the cryptography between the browser and
//! one computer's seal key, kept out of `tether-protocol`, which carries a box only as opaque
//! JSON. The crate root is the sealed box; [`channel`] is the two-way stream built on the
//! same HPKE suite.
//!
//! A box is a secret encrypted in the browser for one computer's seal key: exactly RFC 9180
//! HPKE in base mode with DHKEM(P-256, HKDF-SHA256), HKDF-SHA256 and AES-256-GCM (KEM 0x0010,
//! KDF 0x0001, AEAD 0x0002), single-shot, so the published HPKE test vectors test it
//! (`tests/seal_vectors.rs`). The browser seals with WebCrypto
//! (`server/src/pages/assets/seal.js`); only the device, holding the private key, opens.
//!
//! # Format
//! The [`Envelope`] is `{"v":1,"kid","epk","ct","aad"}`, binary fields base64url without
//! padding. There is no `iv`: HPKE derives the nonce. The HPKE `info` is never sent; both
//! sides compute it as the UTF-8 bytes `tether/seal/v1`, 0x00, the device id, 0x00, the kid
//! text ([`info`]). The HPKE `aad` is the exact UTF-8 JSON the sealer wrote ([`Aad`]).
//!
//! # Opening, in order
//! 1. The envelope parses strictly: `v` is 1, no unknown field, sizes checked ([`Envelope`]).
//! 2. Its `kid` is the pinned key's; no other key is ever tried ([`open`]).
//! 3. HPKE Open with the device's own `info`, so a box for another device fails here.
//! 4. The aad parses strictly ([`Aad::parse`]) and matches what the device expects, with an
//!    expiry in the future and at most [`MAX_TTL_SECS`] out ([`check_aad`]).
//! 5. The caller records the `jti` as used, refusing one it has seen, in the same
//!    transaction that stores the value ([`CheckedBox`]); that needs storage, so it lives in
//!    the agent's vault, not here.
//!
//! Base mode does not say who sealed a box: anyone holding the public key can. Authority
//! comes from the channel that delivers it and from the aad matching the device's own state.

pub mod channel;

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hpke::{Deserializable as _, OpModeR, OpModeS, Serializable as _};
use p256::elliptic_curve::rand_core::{CryptoRng, RngCore};
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use p256::pkcs8::{DecodePublicKey as _, EncodePublicKey as _};
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest as _, Sha256};
use tether_protocol::capabilities::SealKey;
use tether_protocol::sites;
use tether_protocol::{DecisionId, DeviceId};
use zeroize::Zeroizing;

/// The envelope and aad version this crate reads and writes; no other is accepted.
pub const SEAL_VERSION: u32 = 1;
/// The only aad `purpose` of protocol v1: a named secret for the device's vault.
pub const PURPOSE_SECRET: &str = "secret";
/// The first part of the HPKE `info`.
pub const INFO_LABEL: &str = "tether/seal/v1";
/// The latest expiry a box may carry, counted from the moment it is opened.
pub const MAX_TTL_SECS: i64 = 15 * 60;
/// The largest aad accepted, in bytes.
pub const MAX_AAD_BYTES: usize = 4096;
/// The largest secret value accepted, in bytes.
pub const MAX_PLAINTEXT_BYTES: usize = 64 * 1024;
/// The length of `epk`: an uncompressed P-256 point, `0x04 ‖ X ‖ Y`.
pub const EPK_BYTES: usize = 65;
/// The AES-GCM tag at the end of `ct`.
const TAG_BYTES: usize = 16;
/// A `kid` is this many bytes of SHA-256(SPKI DER).
const KID_BYTES: usize = 16;
/// A `jti` is this many random bytes.
const JTI_BYTES: usize = 16;

/// The HPKE suite of protocol v1.
type Kem = hpke::kem::DhP256HkdfSha256;
type Kdf = hpke::kdf::HkdfSha256;
type Aead = hpke::aead::AesGcm256;

/// Why a box cannot be sealed or is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealError {
    /// The envelope is not `{v, kid, epk, ct, aad}` with the right sizes and encodings.
    MalformedEnvelope(&'static str),
    /// The envelope or aad names a version other than [`SEAL_VERSION`].
    UnsupportedVersion,
    /// The seal key's `spki`, `kid` and `fingerprint` do not describe the same P-256 key; the
    /// computer has to pair again.
    SealKeyMismatch,
    /// The box was sealed for another key than the pinned one.
    WrongKid,
    /// HPKE Open failed: the box was changed, or sealed for another device or key.
    Unopenable,
    /// The aad is not the strict JSON object of protocol v1.
    MalformedAad,
    /// An aad field differs from what the device expects.
    AadMismatch(AadField),
    /// The box's `exp` has passed.
    Expired,
    /// The box's `exp` is more than [`MAX_TTL_SECS`] away.
    ExpiryTooFar,
    /// The aad or the value is larger than allowed.
    TooLarge,
    /// The `jti` was seen before. Returned by the vault, which keeps the used ones.
    Replayed,
    /// The aad's `allow` is not a list of canonical sites.
    BadSites(String),
}

/// The aad field that did not match, in [`SealError::AadMismatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AadField {
    Purpose,
    Device,
    Kid,
    Decision,
    Name,
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SealError::MalformedEnvelope(why) => write!(f, "the sealed box is malformed: {why}"),
            SealError::UnsupportedVersion => f.write_str("the sealed box has an unknown version"),
            SealError::SealKeyMismatch => f.write_str(
                "the seal key's kid and fingerprint do not match its public key; pair again",
            ),
            SealError::WrongKid => f.write_str("the box was sealed for another key"),
            SealError::Unopenable => f.write_str("the box cannot be opened with this device's key"),
            SealError::MalformedAad => f.write_str("the box's aad is not valid"),
            SealError::AadMismatch(field) => {
                write!(f, "the box's aad names another {}", field.name())
            }
            SealError::Expired => f.write_str("the box has expired"),
            SealError::ExpiryTooFar => f.write_str("the box expires too far in the future"),
            SealError::TooLarge => f.write_str("the box is too large"),
            SealError::Replayed => f.write_str("the box was already opened"),
            SealError::BadSites(why) => write!(f, "the box's allowed sites are not valid: {why}"),
        }
    }
}

impl std::error::Error for SealError {}

impl AadField {
    /// The JSON field's name.
    pub fn name(self) -> &'static str {
        match self {
            AadField::Purpose => "purpose",
            AadField::Device => "device",
            AadField::Kid => "kid",
            AadField::Decision => "decision",
            AadField::Name => "name",
        }
    }
}

/// A key id: base64url of the first 16 bytes of SHA-256 over the key's SPKI DER.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Kid(String);

impl Kid {
    /// Parses a kid received from outside: base64url, no padding, exactly 16 bytes.
    ///
    /// # Errors
    /// [`SealError::MalformedEnvelope`] for any other text.
    pub fn parse(raw: &str) -> Result<Kid, SealError> {
        match decode_b64(raw) {
            Some(bytes) if bytes.len() == KID_BYTES => Ok(Kid(raw.to_owned())),
            _ => Err(SealError::MalformedEnvelope(
                "kid is not 16 bytes of base64url",
            )),
        }
    }

    /// The kid of a public key given as SPKI DER.
    pub fn of_spki(spki_der: &[u8]) -> Kid {
        let digest = Sha256::digest(spki_der);
        Kid(URL_SAFE_NO_PAD.encode(&digest[..KID_BYTES]))
    }

    /// The kid of a P-256 public key.
    ///
    /// # Errors
    /// [`SealError::SealKeyMismatch`] if the key cannot be encoded (does not happen for a
    /// valid key).
    pub fn of_public_key(public_key: &p256::PublicKey) -> Result<Kid, SealError> {
        let spki = public_key
            .to_public_key_der()
            .map_err(|_| SealError::SealKeyMismatch)?;
        Ok(Kid::of_spki(spki.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Kid {
    type Error = SealError;
    fn try_from(raw: String) -> Result<Kid, SealError> {
        Kid::parse(&raw)
    }
}

impl From<Kid> for String {
    fn from(kid: Kid) -> String {
        kid.0
    }
}

impl fmt::Display for Kid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A box's one-time id: base64url of 16 random bytes. The device refuses one it has seen.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Jti(String);

impl Jti {
    /// A fresh random jti.
    pub fn random(rng: &mut (impl CryptoRng + RngCore)) -> Jti {
        let mut bytes = [0u8; JTI_BYTES];
        rng.fill_bytes(&mut bytes);
        Jti(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Parses a jti: base64url, no padding, exactly 16 bytes.
    ///
    /// # Errors
    /// [`SealError::MalformedAad`] for any other text.
    pub fn parse(raw: &str) -> Result<Jti, SealError> {
        match decode_b64(raw) {
            Some(bytes) if bytes.len() == JTI_BYTES => Ok(Jti(raw.to_owned())),
            _ => Err(SealError::MalformedAad),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Jti {
    type Error = SealError;
    fn try_from(raw: String) -> Result<Jti, SealError> {
        Jti::parse(&raw)
    }
}

impl From<Jti> for String {
    fn from(jti: Jti) -> String {
        jti.0
    }
}

/// The public key a box is sealed for, with its kid, checked to belong together.
#[derive(Debug, Clone)]
pub struct Recipient {
    public_key: p256::PublicKey,
    kid: Kid,
}

impl Recipient {
    /// The recipient a device's reported seal key describes.
    ///
    /// # Errors
    /// [`SealError::SealKeyMismatch`] when `spki` is not a P-256 SPKI, or `kid` or
    /// `fingerprint` are not the ones it yields: the browser's `sealKeyMismatch`.
    pub fn from_seal_key(seal_key: &SealKey) -> Result<Recipient, SealError> {
        let spki = decode_b64(&seal_key.spki).ok_or(SealError::SealKeyMismatch)?;
        let public_key =
            p256::PublicKey::from_public_key_der(&spki).map_err(|_| SealError::SealKeyMismatch)?;
        let kid = Kid::of_spki(&spki);
        let fingerprint = format!("SHA256:{}", URL_SAFE_NO_PAD.encode(Sha256::digest(&spki)));
        if kid.as_str() != seal_key.kid || fingerprint != seal_key.fingerprint {
            return Err(SealError::SealKeyMismatch);
        }
        Ok(Recipient { public_key, kid })
    }

    /// The recipient holding `public_key`.
    ///
    /// # Errors
    /// As [`Kid::of_public_key`].
    pub fn from_public_key(public_key: p256::PublicKey) -> Result<Recipient, SealError> {
        let kid = Kid::of_public_key(&public_key)?;
        Ok(Recipient { public_key, kid })
    }

    pub fn kid(&self) -> &Kid {
        &self.kid
    }

    pub fn public_key(&self) -> &p256::PublicKey {
        &self.public_key
    }
}

/// A sealed box as it travels: `{"v":1,"kid","epk","ct","aad"}`.
///
/// Deserializing refuses any other version, unknown fields (an `iv` among them), padding,
/// a compressed or mis-sized `epk`, a `ct` shorter than the tag and oversized fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireEnvelope", into = "WireEnvelope")]
pub struct Envelope {
    kid: Kid,
    epk: [u8; EPK_BYTES],
    ct: Vec<u8>,
    aad: Vec<u8>,
}

impl Envelope {
    /// Parses a box received as JSON, such as the `sealed` field of a frame.
    ///
    /// # Errors
    /// [`SealError::UnsupportedVersion`] or [`SealError::MalformedEnvelope`].
    pub fn from_json(value: &serde_json::Value) -> Result<Envelope, SealError> {
        // Say "unknown version" rather than "malformed" when a later version changed fields.
        match value.get("v").and_then(serde_json::Value::as_u64) {
            Some(v) if v != u64::from(SEAL_VERSION) => return Err(SealError::UnsupportedVersion),
            _ => {}
        }
        let wire = WireEnvelope::deserialize(value)
            .map_err(|_| SealError::MalformedEnvelope("not {v, kid, epk, ct, aad}"))?;
        Envelope::try_from(wire)
    }

    /// The key the box was sealed for.
    pub fn kid(&self) -> &Kid {
        &self.kid
    }

    /// HPKE's `enc`: the sender's ephemeral public key, uncompressed.
    pub fn epk(&self) -> &[u8; EPK_BYTES] {
        &self.epk
    }

    /// The AES-256-GCM ciphertext followed by its tag.
    pub fn ct(&self) -> &[u8] {
        &self.ct
    }

    /// The aad bytes exactly as sealed. Not trustworthy until the box opened.
    pub fn aad(&self) -> &[u8] {
        &self.aad
    }
}

/// The envelope's JSON shape before its fields are checked.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEnvelope {
    v: u32,
    kid: String,
    epk: String,
    ct: String,
    aad: String,
}

impl TryFrom<WireEnvelope> for Envelope {
    type Error = SealError;

    fn try_from(wire: WireEnvelope) -> Result<Envelope, SealError> {
        if wire.v != SEAL_VERSION {
            return Err(SealError::UnsupportedVersion);
        }
        let kid = Kid::parse(&wire.kid)?;
        let epk: [u8; EPK_BYTES] = decode_b64(&wire.epk)
            .and_then(|bytes| bytes.try_into().ok())
            .filter(|epk: &[u8; EPK_BYTES]| epk[0] == 0x04)
            .ok_or(SealError::MalformedEnvelope(
                "epk is not an uncompressed P-256 point",
            ))?;
        let ct = decode_b64(&wire.ct).ok_or(SealError::MalformedEnvelope("ct is not base64url"))?;
        if ct.len() < TAG_BYTES {
            return Err(SealError::MalformedEnvelope("ct is shorter than its tag"));
        }
        if ct.len() > MAX_PLAINTEXT_BYTES + TAG_BYTES {
            return Err(SealError::TooLarge);
        }
        let aad =
            decode_b64(&wire.aad).ok_or(SealError::MalformedEnvelope("aad is not base64url"))?;
        if aad.len() > MAX_AAD_BYTES {
            return Err(SealError::TooLarge);
        }
        Ok(Envelope { kid, epk, ct, aad })
    }
}

impl From<Envelope> for WireEnvelope {
    fn from(envelope: Envelope) -> WireEnvelope {
        WireEnvelope {
            v: SEAL_VERSION,
            kid: envelope.kid.0,
            epk: URL_SAFE_NO_PAD.encode(envelope.epk),
            ct: URL_SAFE_NO_PAD.encode(envelope.ct),
            aad: URL_SAFE_NO_PAD.encode(envelope.aad),
        }
    }
}

/// What a box says about itself, authenticated by HPKE: the JSON the sealer wrote.
///
/// `{"v":1,"purpose":"secret","device","kid","decision","name","exp","jti"}`, every field
/// present (`decision` is `null` for a secret the owner sends from the device page), no other
/// field, each of its exact JSON type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aad {
    pub v: u32,
    pub purpose: String,
    pub device: DeviceId,
    pub kid: Kid,
    /// The decision this box answers; `null` (never absent) for a secret sent unasked.
    #[serde(deserialize_with = "null_or_value")]
    pub decision: Option<DecisionId>,
    /// The secret's name on the device.
    pub name: String,
    /// Unix seconds after which the box is refused.
    pub exp: i64,
    pub jti: Jti,
    /// The sites the value may be sent to ([`tether_protocol::sites`]); absent (never
    /// `null`) for a secret a job may have as an environment variable.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_list"
    )]
    pub allow: Option<Vec<String>>,
}

impl Aad {
    /// The aad of a secret sent to `device` for the key `kid`.
    pub fn secret(
        device: DeviceId,
        kid: Kid,
        decision: Option<DecisionId>,
        name: String,
        exp: i64,
        jti: Jti,
    ) -> Aad {
        Aad {
            v: SEAL_VERSION,
            purpose: PURPOSE_SECRET.to_owned(),
            device,
            kid,
            decision,
            name,
            exp,
            jti,
            allow: None,
        }
    }

    /// The same aad, limiting the secret to `sites` (canonical [`sites::Site`] text).
    #[must_use]
    pub fn with_allow(mut self, sites: Vec<String>) -> Aad {
        self.allow = Some(sites);
        self
    }

    /// Parses aad bytes strictly: one JSON object, no unknown or repeated field, exact types.
    ///
    /// # Errors
    /// [`SealError::TooLarge`] or [`SealError::MalformedAad`].
    pub fn parse(bytes: &[u8]) -> Result<Aad, SealError> {
        if bytes.len() > MAX_AAD_BYTES {
            return Err(SealError::TooLarge);
        }
        serde_json::from_slice(bytes).map_err(|_| SealError::MalformedAad)
    }

    /// The JSON bytes to seal with, fields in the documented order.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// What the device expects a box's aad to say.
#[derive(Debug, Clone, Copy)]
pub struct AadExpectation<'a> {
    /// This device.
    pub device: &'a DeviceId,
    /// This device's pinned seal key.
    pub kid: &'a Kid,
    /// The decision the device is waiting on, or `None` for a secret sent from the web.
    pub decision: Option<&'a DecisionId>,
    /// The name the delivery says the secret has.
    pub name: &'a str,
}

/// Checks an opened box's aad against what the device expects, at `now` (unix seconds).
///
/// Pure; the `jti` never-seen check needs storage and is the vault's (see [`CheckedBox`]).
///
/// # Errors
/// [`SealError::UnsupportedVersion`], [`SealError::AadMismatch`] naming the first field that
/// differs, [`SealError::Expired`] when `exp` ≤ `now`, [`SealError::ExpiryTooFar`] when `exp`
/// is more than [`MAX_TTL_SECS`] after `now`.
pub fn check_aad(aad: &Aad, expected: &AadExpectation<'_>, now: i64) -> Result<(), SealError> {
    if aad.v != SEAL_VERSION {
        return Err(SealError::UnsupportedVersion);
    }
    let fields = [
        (aad.purpose == PURPOSE_SECRET, AadField::Purpose),
        (&aad.device == expected.device, AadField::Device),
        (&aad.kid == expected.kid, AadField::Kid),
        (
            aad.decision.as_ref() == expected.decision,
            AadField::Decision,
        ),
        (aad.name == expected.name, AadField::Name),
    ];
    if let Some((_, field)) = fields.iter().find(|(matches, _)| !matches) {
        return Err(SealError::AadMismatch(*field));
    }
    if let Some(allow) = &aad.allow {
        sites::parse_list(allow).map_err(|error| SealError::BadSites(error.0))?;
    }
    if aad.exp <= now {
        return Err(SealError::Expired);
    }
    if aad.exp - now > MAX_TTL_SECS {
        return Err(SealError::ExpiryTooFar);
    }
    Ok(())
}

/// The HPKE `info` for a box sent to `device_id` for the key `kid`: `tether/seal/v1`, 0x00,
/// the device id, 0x00, the kid text.
pub fn info(device_id: &DeviceId, kid: &Kid) -> Vec<u8> {
    labelled_info(INFO_LABEL, device_id, kid)
}

/// `label`, 0x00, the device id, 0x00, the kid text: the HPKE `info` layout of boxes and
/// channels, each under its own label.
pub(crate) fn labelled_info(label: &str, device_id: &DeviceId, kid: &Kid) -> Vec<u8> {
    let mut info = Vec::with_capacity(label.len() + 2 + device_id.as_str().len() + 22);
    info.extend_from_slice(label.as_bytes());
    info.push(0);
    info.extend_from_slice(device_id.as_str().as_bytes());
    info.push(0);
    info.extend_from_slice(kid.as_str().as_bytes());
    info
}

/// Seals `plaintext` for `recipient` on `device_id`, binding `aad` (normally
/// [`Aad::to_bytes`]).
///
/// # Errors
/// [`SealError::TooLarge`] when the aad or the value is over its limit.
pub fn seal(
    recipient: &Recipient,
    device_id: &DeviceId,
    aad: &[u8],
    plaintext: &[u8],
    rng: &mut (impl CryptoRng + RngCore),
) -> Result<Envelope, SealError> {
    if aad.len() > MAX_AAD_BYTES || plaintext.len() > MAX_PLAINTEXT_BYTES {
        return Err(SealError::TooLarge);
    }
    let info = info(device_id, &recipient.kid);
    let (epk, ct) = seal_base(&recipient.public_key, &info, aad, plaintext, rng)?;
    Ok(Envelope {
        kid: recipient.kid.clone(),
        epk,
        ct,
        aad: aad.to_vec(),
    })
}

/// Opens a box with the device's private key, whose kid was pinned as `pinned_kid`.
///
/// Checks the kid before anything else and never tries another key; then HPKE Open with this
/// device's `info`; then parses the aad strictly. The value stays inside the answer until
/// [`OpenedBox::check`] accepts the aad.
///
/// # Errors
/// [`SealError::SealKeyMismatch`] when `pinned_kid` is not `secret_key`'s,
/// [`SealError::WrongKid`], [`SealError::Unopenable`], [`SealError::MalformedAad`].
pub fn open(
    secret_key: &p256::SecretKey,
    pinned_kid: &Kid,
    device_id: &DeviceId,
    envelope: &Envelope,
) -> Result<OpenedBox, SealError> {
    if &Kid::of_public_key(&secret_key.public_key())? != pinned_kid {
        return Err(SealError::SealKeyMismatch);
    }
    if &envelope.kid != pinned_kid {
        return Err(SealError::WrongKid);
    }
    let info = info(device_id, pinned_kid);
    let plaintext = open_base(
        secret_key,
        &envelope.epk,
        &info,
        &envelope.aad,
        &envelope.ct,
    )?;
    let aad = Aad::parse(&envelope.aad)?;
    Ok(OpenedBox { aad, plaintext })
}

/// A box that opened, its aad not yet checked.
pub struct OpenedBox {
    aad: Aad,
    plaintext: Zeroizing<Vec<u8>>,
}

impl OpenedBox {
    pub fn aad(&self) -> &Aad {
        &self.aad
    }

    /// Checks the aad with [`check_aad`]; only then is the value reachable.
    ///
    /// # Errors
    /// As [`check_aad`].
    pub fn check(self, expected: &AadExpectation<'_>, now: i64) -> Result<CheckedBox, SealError> {
        check_aad(&self.aad, expected, now)?;
        Ok(CheckedBox {
            aad: self.aad,
            plaintext: self.plaintext,
        })
    }
}

impl fmt::Debug for OpenedBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenedBox")
            .field("aad", &self.aad)
            .finish_non_exhaustive()
    }
}

/// A box whose aad matched. The last step is the caller's: record [`CheckedBox::jti`] as
/// used, refusing it with [`SealError::Replayed`] if it was seen before, in the same
/// transaction that stores the value; only then take [`CheckedBox::into_plaintext`].
pub struct CheckedBox {
    aad: Aad,
    plaintext: Zeroizing<Vec<u8>>,
}

impl CheckedBox {
    pub fn aad(&self) -> &Aad {
        &self.aad
    }

    /// The one-time id to record; keep it until [`Aad::exp`] has passed.
    pub fn jti(&self) -> &Jti {
        &self.aad.jti
    }

    /// The secret value, wiped from memory when dropped.
    pub fn into_plaintext(self) -> Zeroizing<Vec<u8>> {
        self.plaintext
    }
}

impl fmt::Debug for CheckedBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedBox")
            .field("aad", &self.aad)
            .finish_non_exhaustive()
    }
}

/// RFC 9180 `SealBase` for this crate's suite, single-shot: returns `enc` and the
/// ciphertext. Use [`seal`]; this is the bare primitive the test vectors check.
///
/// # Errors
/// [`SealError::Unopenable`] if HPKE fails (does not happen for a valid public key).
pub fn seal_base(
    recipient: &p256::PublicKey,
    info: &[u8],
    aad: &[u8],
    plaintext: &[u8],
    rng: &mut (impl CryptoRng + RngCore),
) -> Result<([u8; EPK_BYTES], Vec<u8>), SealError> {
    let point = recipient.to_encoded_point(false);
    let pk_r = <Kem as hpke::Kem>::PublicKey::from_bytes(point.as_bytes())
        .map_err(|_| SealError::SealKeyMismatch)?;
    let (enc, ct) = hpke::single_shot_seal::<Aead, Kdf, Kem, _>(
        &OpModeS::Base,
        &pk_r,
        info,
        plaintext,
        aad,
        rng,
    )
    .map_err(|_| SealError::Unopenable)?;
    let enc: [u8; EPK_BYTES] = enc.to_bytes()[..]
        .try_into()
        .map_err(|_| SealError::Unopenable)?;
    Ok((enc, ct))
}

/// RFC 9180 `OpenBase` for this crate's suite, single-shot. Use [`open`]; this is the bare
/// primitive the test vectors check.
///
/// # Errors
/// [`SealError::Unopenable`] when `enc` is not a valid point or the ciphertext, aad or info
/// differ from what was sealed.
pub fn open_base(
    secret_key: &p256::SecretKey,
    enc: &[u8],
    info: &[u8],
    aad: &[u8],
    ct: &[u8],
) -> Result<Zeroizing<Vec<u8>>, SealError> {
    let scalar = Zeroizing::new(secret_key.to_bytes());
    let sk_r = <Kem as hpke::Kem>::PrivateKey::from_bytes(&scalar[..])
        .map_err(|_| SealError::SealKeyMismatch)?;
    let enc =
        <Kem as hpke::Kem>::EncappedKey::from_bytes(enc).map_err(|_| SealError::Unopenable)?;
    hpke::single_shot_open::<Aead, Kdf, Kem>(&OpModeR::Base, &sk_r, &enc, info, ct, aad)
        .map(Zeroizing::new)
        .map_err(|_| SealError::Unopenable)
}

/// Strict base64url: the URL alphabet, no padding, no stray trailing bits.
fn decode_b64(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// Reads an `Option` that must be present in the JSON, as a value or `null`.
fn null_or_value<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer)
}

/// Reads a field that, when present, must be a list (an explicit `null` is refused).
fn present_list<'de, D>(deserializer: D) -> Result<Option<Vec<String>>, D::Error>
where
    D: Deserializer<'de>,
{
    Vec::<String>::deserialize(deserializer).map(Some)
}
