//! Numbered channels: a two-way stream between the browser and one computer, such as a
//! takeover, encrypted end to end over the relays in between (DESIGN §5).
//!
//! A channel starts from one RFC 9180 HPKE exchange in base mode with the suite of
//! [the sealed boxes](crate) (DHKEM(P-256, HKDF-SHA256), HKDF-SHA256, AES-256-GCM), so the
//! browser does it with the same WebCrypto steps as a sealed box. The exchange yields one
//! AES-256-GCM key per direction; every message carries its number, which gives the nonce,
//! and a receiver refuses a number at or below the last one it opened.
//!
//! # Format
//! 1. The browser (the end that opens the channel) runs HPKE `SetupBaseS` for the computer's
//!    seal key with `info` = the UTF-8 bytes `tether/channel/v1`, 0x00, the device id, 0x00,
//!    the kid text ([`channel_info`]), and sends `enc` (65 bytes, `0x04 ‖ X ‖ Y`) to the
//!    computer, which runs `SetupBaseR` with its private key ([`start`], [`accept`]).
//! 2. Both sides take two keys with the HPKE exporter, `Export(context, 32)`: the context
//!    `tether/channel/v1 b2d` gives the browser-to-device key, `tether/channel/v1 d2b` the
//!    device-to-browser key ([`ChannelKeys`]). The HPKE context's own `Seal` is never used.
//! 3. Both sides know the channel's id, the bytes the application names the stream by (1 to
//!    [`MAX_CHANNEL_ID_BYTES`]); it is never sent with a message ([`ChannelId`]).
//! 4. Message number `seq` runs from 1 and is never reused. A message is
//!    `{"seq":n,"ct":base64url}` ([`Message`], no padding), where `ct` is the AES-256-GCM
//!    ciphertext followed by its 16-byte tag under the direction's key, with
//!    - nonce = four zero bytes ‖ `seq` as 8 bytes big-endian (12 bytes);
//!    - aad = the channel id ‖ the direction byte (0x01 browser to device, 0x02 device to
//!      browser, [`Direction`]) ‖ `seq` as 8 bytes big-endian. The last 9 bytes have a fixed
//!      length, so the aad splits one way only.
//! 5. A direction carries at most [`MAX_SEQ`] (2³²) messages; after that the sender refuses
//!    and the channel has to be replaced by a new exchange. 2³² is exact as a JSON number in
//!    JavaScript.
//!
//! # Opening, in order
//! 1. `seq` must be above the last number opened in this direction (so 0 never opens), and at
//!    most [`MAX_SEQ`].
//! 2. AES-256-GCM decryption with this direction's key, nonce and aad. A message reflected
//!    back in the other direction fails here (other key, other direction byte), as does one
//!    from another channel or one that was changed.
//! 3. Only then does the last number move to `seq`: a refused message changes nothing, so
//!    the genuine one still opens after a forgery. A gap is allowed (a lost message is not
//!    waited for); going back is not.
//!
//! A reconnect starts a new channel with a new exchange; numbers never restart under a key.
//! As with a sealed box, base mode does not say who opened the channel: authority comes from
//! the authenticated connection that carries `enc`.
//!
//! The known-answer vectors in `tests/channel.rs` (fixed keys; a fixed device key and
//! ephemeral key) check another implementation of these steps, such as the browser's.

use std::fmt;

use aes_gcm::aead::{Aead as _, KeyInit as _, Nonce, Payload};
use aes_gcm::{Aes256Gcm, Key};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hpke::{Deserializable as _, HpkeError, OpModeR, OpModeS, Serializable as _};
use p256::elliptic_curve::rand_core::{CryptoRng, RngCore};
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use serde::{Deserialize, Serialize};
use tether_protocol::DeviceId;
use zeroize::Zeroizing;

use crate::{Kid, Recipient, EPK_BYTES};

/// The first part of the HPKE `info` and of both exporter contexts.
pub const INFO_LABEL: &str = "tether/channel/v1";
/// The exporter context of the browser-to-device key.
pub const BROWSER_TO_DEVICE_CONTEXT: &str = "tether/channel/v1 b2d";
/// The exporter context of the device-to-browser key.
pub const DEVICE_TO_BROWSER_CONTEXT: &str = "tether/channel/v1 d2b";
/// The highest message number, and so the most messages one direction carries.
pub const MAX_SEQ: u64 = 1 << 32;
/// The longest channel id, in bytes.
pub const MAX_CHANNEL_ID_BYTES: usize = 64;
/// The length of HPKE's `enc`: an uncompressed P-256 point, as a sealed box's `epk`.
pub const ENC_BYTES: usize = EPK_BYTES;
/// The length of each direction's AES-256-GCM key.
pub const KEY_BYTES: usize = 32;
/// The AES-GCM tag at the end of `ct`.
const TAG_BYTES: usize = 16;

/// The HPKE suite of protocol v1, the same as the sealed boxes'.
type Kem = hpke::kem::DhP256HkdfSha256;
type Kdf = hpke::kdf::HkdfSha256;
type Aead = hpke::aead::AesGcm256;

/// Why a channel cannot be set up, or a message is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelError {
    /// The private key is not the one whose kid was pinned; the computer has to pair again.
    SealKeyMismatch,
    /// The `enc` sent to start the channel is not an uncompressed P-256 point.
    MalformedEnc,
    /// The HPKE exchange failed (does not happen for valid keys).
    KeyExchange,
    /// The channel id is empty or longer than [`MAX_CHANNEL_ID_BYTES`].
    BadChannelId,
    /// The message is not `{seq, ct}` with `ct` in base64url.
    MalformedMessage(&'static str),
    /// The message's number is at or below the last one opened: a replay, or out of order.
    Stale { seq: u64, last: u64 },
    /// The direction has used all [`MAX_SEQ`] numbers; a new channel is needed.
    Exhausted,
    /// Decryption failed: the message was changed, or belongs to another channel or to the
    /// other direction.
    Unopenable,
    /// The message is too large to encrypt.
    TooLarge,
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelError::SealKeyMismatch => {
                f.write_str("the seal key does not match its pinned kid; pair again")
            }
            ChannelError::MalformedEnc => {
                f.write_str("the channel's enc is not an uncompressed P-256 point")
            }
            ChannelError::KeyExchange => f.write_str("the channel's key exchange failed"),
            ChannelError::BadChannelId => write!(
                f,
                "the channel id must be 1 to {MAX_CHANNEL_ID_BYTES} bytes"
            ),
            ChannelError::MalformedMessage(why) => {
                write!(f, "the channel message is malformed: {why}")
            }
            ChannelError::Stale { seq, last } => write!(
                f,
                "channel message {seq} is at or below the last one opened ({last})"
            ),
            ChannelError::Exhausted => {
                f.write_str("the channel has used all its message numbers; open a new one")
            }
            ChannelError::Unopenable => {
                f.write_str("the message cannot be opened on this channel in this direction")
            }
            ChannelError::TooLarge => f.write_str("the channel message is too large"),
        }
    }
}

impl std::error::Error for ChannelError {}

/// Which way a message goes. Each direction has its own key and its own numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    BrowserToDevice,
    DeviceToBrowser,
}

impl Direction {
    /// The byte the aad carries for this direction.
    pub fn byte(self) -> u8 {
        match self {
            Direction::BrowserToDevice => 0x01,
            Direction::DeviceToBrowser => 0x02,
        }
    }
}

/// The id both ends know the channel by, bound into every message's aad and never sent with
/// it: 1 to [`MAX_CHANNEL_ID_BYTES`] bytes, such as the UTF-8 text of the stream's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelId(Vec<u8>);

impl ChannelId {
    /// # Errors
    /// [`ChannelError::BadChannelId`] when `bytes` is empty or too long.
    pub fn new(bytes: impl AsRef<[u8]>) -> Result<ChannelId, ChannelError> {
        let bytes = bytes.as_ref();
        if bytes.is_empty() || bytes.len() > MAX_CHANNEL_ID_BYTES {
            return Err(ChannelError::BadChannelId);
        }
        Ok(ChannelId(bytes.to_vec()))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// One message as it travels: `{"seq":n,"ct":base64url}`.
///
/// Deserializing refuses unknown fields, padding and a `ct` shorter than its tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireMessage", into = "WireMessage")]
pub struct Message {
    /// The message's number in its direction, from 1.
    pub seq: u64,
    /// The AES-256-GCM ciphertext followed by its tag.
    pub ct: Vec<u8>,
}

/// The message's JSON shape before `ct` is decoded.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireMessage {
    seq: u64,
    ct: String,
}

impl TryFrom<WireMessage> for Message {
    type Error = ChannelError;

    fn try_from(wire: WireMessage) -> Result<Message, ChannelError> {
        let ct = URL_SAFE_NO_PAD
            .decode(&wire.ct)
            .map_err(|_| ChannelError::MalformedMessage("ct is not base64url"))?;
        if ct.len() < TAG_BYTES {
            return Err(ChannelError::MalformedMessage("ct is shorter than its tag"));
        }
        Ok(Message { seq: wire.seq, ct })
    }
}

impl From<Message> for WireMessage {
    fn from(message: Message) -> WireMessage {
        WireMessage {
            seq: message.seq,
            ct: URL_SAFE_NO_PAD.encode(message.ct),
        }
    }
}

/// A channel's two keys, one per direction, wiped from memory when dropped. Split them into
/// the ends of one side with [`ChannelKeys::browser_ends`] or [`ChannelKeys::device_ends`].
pub struct ChannelKeys {
    browser_to_device: Zeroizing<[u8; KEY_BYTES]>,
    device_to_browser: Zeroizing<[u8; KEY_BYTES]>,
}

impl ChannelKeys {
    /// The keys as the two HPKE exports gave them. [`start`] and [`accept`] call this; it is
    /// public for known-answer tests.
    pub fn from_exported(
        browser_to_device: [u8; KEY_BYTES],
        device_to_browser: [u8; KEY_BYTES],
    ) -> ChannelKeys {
        ChannelKeys {
            browser_to_device: Zeroizing::new(browser_to_device),
            device_to_browser: Zeroizing::new(device_to_browser),
        }
    }

    /// The browser's ends: it sends browser to device and receives device to browser.
    pub fn browser_ends(self, channel_id: &ChannelId) -> (Sender, Receiver) {
        let sender = Sender::new(
            self.browser_to_device,
            channel_id,
            Direction::BrowserToDevice,
        );
        let receiver = Receiver::new(
            self.device_to_browser,
            channel_id,
            Direction::DeviceToBrowser,
        );
        (sender, receiver)
    }

    /// The computer's ends: it sends device to browser and receives browser to device.
    pub fn device_ends(self, channel_id: &ChannelId) -> (Sender, Receiver) {
        let sender = Sender::new(
            self.device_to_browser,
            channel_id,
            Direction::DeviceToBrowser,
        );
        let receiver = Receiver::new(
            self.browser_to_device,
            channel_id,
            Direction::BrowserToDevice,
        );
        (sender, receiver)
    }
}

impl fmt::Debug for ChannelKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelKeys").finish_non_exhaustive()
    }
}

/// The HPKE `info` for a channel to `device_id` under the key `kid`: `tether/channel/v1`,
/// 0x00, the device id, 0x00, the kid text. The same layout as [`crate::info`] under
/// its own label, so a box and a channel never share an HPKE context.
pub fn channel_info(device_id: &DeviceId, kid: &Kid) -> Vec<u8> {
    crate::labelled_info(INFO_LABEL, device_id, kid)
}

/// Starts a channel to `recipient` on `device_id`, on the browser's side: returns the `enc`
/// to send to the computer and the channel's keys.
///
/// # Errors
/// [`ChannelError::KeyExchange`] if HPKE fails (does not happen for a valid public key).
pub fn start(
    recipient: &Recipient,
    device_id: &DeviceId,
    rng: &mut (impl CryptoRng + RngCore),
) -> Result<([u8; ENC_BYTES], ChannelKeys), ChannelError> {
    let point = recipient.public_key().to_encoded_point(false);
    let pk_r = <Kem as hpke::Kem>::PublicKey::from_bytes(point.as_bytes())
        .map_err(|_| ChannelError::KeyExchange)?;
    let info = channel_info(device_id, recipient.kid());
    let (enc, context) = hpke::setup_sender::<Aead, Kdf, Kem, _>(&OpModeS::Base, &pk_r, &info, rng)
        .map_err(|_| ChannelError::KeyExchange)?;
    let enc: [u8; ENC_BYTES] = enc.to_bytes()[..]
        .try_into()
        .map_err(|_| ChannelError::KeyExchange)?;
    let keys = export_keys(|exporter_context, out| context.export(exporter_context, out))?;
    Ok((enc, keys))
}

/// Accepts a channel on the computer's side, from the `enc` the browser sent, with the
/// device's private key whose kid was pinned as `pinned_kid`.
///
/// # Errors
/// [`ChannelError::SealKeyMismatch`] when `pinned_kid` is not `secret_key`'s,
/// [`ChannelError::MalformedEnc`] when `enc` is not an uncompressed P-256 point.
pub fn accept(
    secret_key: &p256::SecretKey,
    pinned_kid: &Kid,
    device_id: &DeviceId,
    enc: &[u8],
) -> Result<ChannelKeys, ChannelError> {
    let own_kid =
        Kid::of_public_key(&secret_key.public_key()).map_err(|_| ChannelError::SealKeyMismatch)?;
    if &own_kid != pinned_kid {
        return Err(ChannelError::SealKeyMismatch);
    }
    // The same rule as a sealed box's `epk`: uncompressed only, so both ends agree on `enc`.
    if enc.len() != ENC_BYTES || enc[0] != 0x04 {
        return Err(ChannelError::MalformedEnc);
    }
    let scalar = Zeroizing::new(secret_key.to_bytes());
    let sk_r = <Kem as hpke::Kem>::PrivateKey::from_bytes(&scalar[..])
        .map_err(|_| ChannelError::SealKeyMismatch)?;
    let enc =
        <Kem as hpke::Kem>::EncappedKey::from_bytes(enc).map_err(|_| ChannelError::MalformedEnc)?;
    let info = channel_info(device_id, pinned_kid);
    let context = hpke::setup_receiver::<Aead, Kdf, Kem>(&OpModeR::Base, &sk_r, &enc, &info)
        .map_err(|_| ChannelError::MalformedEnc)?;
    export_keys(|exporter_context, out| context.export(exporter_context, out))
}

/// Both directions' keys from an HPKE context's exporter.
fn export_keys(
    export: impl Fn(&[u8], &mut [u8]) -> Result<(), HpkeError>,
) -> Result<ChannelKeys, ChannelError> {
    let mut browser_to_device = Zeroizing::new([0u8; KEY_BYTES]);
    let mut device_to_browser = Zeroizing::new([0u8; KEY_BYTES]);
    export(
        BROWSER_TO_DEVICE_CONTEXT.as_bytes(),
        &mut browser_to_device[..],
    )
    .map_err(|_| ChannelError::KeyExchange)?;
    export(
        DEVICE_TO_BROWSER_CONTEXT.as_bytes(),
        &mut device_to_browser[..],
    )
    .map_err(|_| ChannelError::KeyExchange)?;
    Ok(ChannelKeys {
        browser_to_device,
        device_to_browser,
    })
}

/// One direction's key, channel id and direction: what the nonce and aad are built from.
struct DirectionKey {
    key: Zeroizing<[u8; KEY_BYTES]>,
    channel_id: ChannelId,
    direction: Direction,
}

impl DirectionKey {
    /// The cipher is built per message, so no expanded key schedule outlives a call; only
    /// the key bytes stay, and they are wiped on drop.
    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(&Key::<Aes256Gcm>::from(*self.key))
    }

    /// Four zero bytes, then `seq` big-endian.
    fn nonce(seq: u64) -> Nonce<Aes256Gcm> {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&seq.to_be_bytes());
        Nonce::<Aes256Gcm>::from(nonce)
    }

    /// The channel id, the direction byte, then `seq` big-endian.
    fn aad(&self, seq: u64) -> Vec<u8> {
        let mut aad = Vec::with_capacity(self.channel_id.0.len() + 9);
        aad.extend_from_slice(&self.channel_id.0);
        aad.push(self.direction.byte());
        aad.extend_from_slice(&seq.to_be_bytes());
        aad
    }

    fn encrypt(&self, seq: u64, plaintext: &[u8]) -> Result<Vec<u8>, ChannelError> {
        let aad = self.aad(seq);
        let payload = Payload {
            msg: plaintext,
            aad: &aad,
        };
        self.cipher()
            .encrypt(&DirectionKey::nonce(seq), payload)
            .map_err(|_| ChannelError::TooLarge)
    }

    fn decrypt(&self, seq: u64, ct: &[u8]) -> Result<Zeroizing<Vec<u8>>, ChannelError> {
        let aad = self.aad(seq);
        let payload = Payload { msg: ct, aad: &aad };
        self.cipher()
            .decrypt(&DirectionKey::nonce(seq), payload)
            .map(Zeroizing::new)
            .map_err(|_| ChannelError::Unopenable)
    }
}

impl fmt::Debug for DirectionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectionKey")
            .field("channel_id", &self.channel_id)
            .field("direction", &self.direction)
            .finish_non_exhaustive()
    }
}

/// The sending end of one direction. Numbers its messages from 1, never twice.
#[derive(Debug)]
pub struct Sender {
    key: DirectionKey,
    last_seq: u64,
}

impl Sender {
    fn new(key: Zeroizing<[u8; KEY_BYTES]>, channel_id: &ChannelId, direction: Direction) -> Self {
        let key = DirectionKey {
            key,
            channel_id: channel_id.clone(),
            direction,
        };
        Sender { key, last_seq: 0 }
    }

    /// Encrypts `plaintext` as the next message.
    ///
    /// # Errors
    /// [`ChannelError::Exhausted`] once [`MAX_SEQ`] messages were sent (open a new channel),
    /// [`ChannelError::TooLarge`] for a plaintext AES-GCM cannot take.
    pub fn seal(&mut self, plaintext: &[u8]) -> Result<Message, ChannelError> {
        if self.last_seq >= MAX_SEQ {
            return Err(ChannelError::Exhausted);
        }
        let seq = self.last_seq + 1;
        let ct = self.key.encrypt(seq, plaintext)?;
        self.last_seq = seq;
        Ok(Message { seq, ct })
    }

    /// The number of the last message sealed, 0 before the first.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn direction(&self) -> Direction {
        self.key.direction
    }
}

/// The receiving end of one direction. Opens a message only above the last number opened.
#[derive(Debug)]
pub struct Receiver {
    key: DirectionKey,
    last_seq: u64,
}

impl Receiver {
    fn new(key: Zeroizing<[u8; KEY_BYTES]>, channel_id: &ChannelId, direction: Direction) -> Self {
        let key = DirectionKey {
            key,
            channel_id: channel_id.clone(),
            direction,
        };
        Receiver { key, last_seq: 0 }
    }

    /// Opens `message`; the last number moves to its `seq` only when it opened.
    ///
    /// # Errors
    /// [`ChannelError::Stale`] for a number at or below the last one opened (0 included),
    /// [`ChannelError::Exhausted`] for a number above [`MAX_SEQ`],
    /// [`ChannelError::Unopenable`] when decryption fails.
    pub fn open(&mut self, message: &Message) -> Result<Zeroizing<Vec<u8>>, ChannelError> {
        if message.seq <= self.last_seq {
            return Err(ChannelError::Stale {
                seq: message.seq,
                last: self.last_seq,
            });
        }
        if message.seq > MAX_SEQ {
            return Err(ChannelError::Exhausted);
        }
        let plaintext = self.key.decrypt(message.seq, &message.ct)?;
        self.last_seq = message.seq;
        Ok(plaintext)
    }

    /// The number of the last message opened, 0 before the first.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn direction(&self) -> Direction {
        self.key.direction
    }
}

#[cfg(test)]
mod tests {
    //! The 2³² limit, reached by starting an end just below it: looping there would take
    //! hours.
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ends_after(last_seq: u64) -> (Sender, Receiver) {
        let channel_id = ChannelId::new("limit").unwrap();
        let keys = ChannelKeys::from_exported([7; KEY_BYTES], [9; KEY_BYTES]);
        let (mut sender, _) = keys.browser_ends(&channel_id);
        let keys = ChannelKeys::from_exported([7; KEY_BYTES], [9; KEY_BYTES]);
        let (_, mut receiver) = keys.device_ends(&channel_id);
        sender.last_seq = last_seq;
        receiver.last_seq = last_seq;
        (sender, receiver)
    }

    #[test]
    fn the_last_number_is_two_to_the_32_and_no_more_are_sent() {
        let (mut sender, mut receiver) = ends_after(MAX_SEQ - 1);
        let last = sender.seal(b"last").unwrap();
        assert_eq!(last.seq, MAX_SEQ);
        assert_eq!(&receiver.open(&last).unwrap()[..], b"last");
        assert_eq!(sender.seal(b"one more"), Err(ChannelError::Exhausted));
        assert_eq!(sender.seal(b"one more"), Err(ChannelError::Exhausted));
        assert_eq!(sender.last_seq(), MAX_SEQ);
    }

    #[test]
    fn a_number_above_two_to_the_32_is_refused_though_it_would_decrypt() {
        let (sender, mut receiver) = ends_after(MAX_SEQ - 5);
        // No sender goes past the limit, so encrypt the number directly under the right key.
        let beyond = Message {
            seq: MAX_SEQ + 1,
            ct: sender.key.encrypt(MAX_SEQ + 1, b"beyond").unwrap(),
        };
        assert_eq!(receiver.open(&beyond), Err(ChannelError::Exhausted));
        assert_eq!(receiver.last_seq(), MAX_SEQ - 5);
    }

    #[test]
    fn nonce_and_aad_have_the_documented_layout() {
        let (sender, _) = ends_after(0);
        let nonce = DirectionKey::nonce(0x0102_0304_0506_0708);
        assert_eq!(&nonce[..], [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8].as_slice());
        assert_eq!(
            sender.key.aad(MAX_SEQ),
            b"limit\x01\x00\x00\x00\x01\x00\x00\x00\x00".to_vec()
        );
    }
}
