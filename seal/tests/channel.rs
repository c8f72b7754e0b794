//! Numbered channels end to end: a channel set up by one HPKE exchange carries messages both
//! ways, and a receiver refuses a replayed, reordered, reflected, changed or foreign message
//! without losing its place. Two known-answer vectors pin the format.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::elliptic_curve::sec1::ToEncodedPoint as _;
use rand::rngs::OsRng;
use serde_json::{json, Value};
use tether_protocol::DeviceId;
use tether_seal::channel::{
    accept, channel_info, start, ChannelError, ChannelId, ChannelKeys, Direction, Message,
    Receiver, Sender, ENC_BYTES, KEY_BYTES, MAX_CHANNEL_ID_BYTES,
};
use tether_seal::{Kid, Recipient};

/// A paired computer: its id and seal key pair.
struct Device {
    id: DeviceId,
    secret: p256::SecretKey,
    recipient: Recipient,
}

impl Device {
    fn new() -> Device {
        Device::with_secret(DeviceId::generate(), p256::SecretKey::random(&mut OsRng))
    }

    fn with_secret(id: DeviceId, secret: p256::SecretKey) -> Device {
        let recipient = Recipient::from_public_key(secret.public_key()).unwrap();
        Device {
            id,
            secret,
            recipient,
        }
    }

    fn kid(&self) -> &Kid {
        self.recipient.kid()
    }

    fn accept(&self, enc: &[u8]) -> Result<ChannelKeys, ChannelError> {
        accept(&self.secret, self.kid(), &self.id, enc)
    }
}

/// Both sides of one channel.
struct Channel {
    browser: (Sender, Receiver),
    device: (Sender, Receiver),
}

impl Channel {
    /// The browser starts a channel to `device` named `name`, and the device accepts it.
    fn open(device: &Device, name: &str) -> Channel {
        let channel_id = ChannelId::new(name).unwrap();
        let (enc, browser_keys) = start(&device.recipient, &device.id, &mut OsRng).unwrap();
        let device_keys = device.accept(&enc).unwrap();
        Channel {
            browser: browser_keys.browser_ends(&channel_id),
            device: device_keys.device_ends(&channel_id),
        }
    }

    fn browser_sends(&mut self, plaintext: &[u8]) -> Message {
        self.browser.0.seal(plaintext).unwrap()
    }

    fn device_sends(&mut self, plaintext: &[u8]) -> Message {
        self.device.0.seal(plaintext).unwrap()
    }

    fn device_opens(&mut self, message: &Message) -> Result<Vec<u8>, ChannelError> {
        self.device
            .1
            .open(message)
            .map(|plaintext| plaintext.to_vec())
    }

    fn browser_opens(&mut self, message: &Message) -> Result<Vec<u8>, ChannelError> {
        self.browser
            .1
            .open(message)
            .map(|plaintext| plaintext.to_vec())
    }
}

/// The message as it crosses the wire and back.
fn over_the_wire(message: &Message) -> Message {
    let text = serde_json::to_string(message).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn messages_go_both_ways_in_order_and_on_the_wire_as_seq_and_ct() {
    let device = Device::new();
    let mut channel = Channel::open(&device, "takeover-1");
    assert_eq!(channel.browser.0.direction(), Direction::BrowserToDevice);
    assert_eq!(channel.device.0.direction(), Direction::DeviceToBrowser);

    for (n, text) in [&b"ls"[..], b"", b"exit"].into_iter().enumerate() {
        let message = channel.browser_sends(text);
        assert_eq!(message.seq, n as u64 + 1);
        assert_eq!(message.ct.len(), text.len() + 16);
        assert_eq!(
            channel.device_opens(&over_the_wire(&message)).unwrap(),
            text
        );
    }
    assert_eq!(channel.browser.0.last_seq(), 3);
    assert_eq!(channel.device.1.last_seq(), 3);

    let answer = channel.device_sends(b"README.md\n");
    assert_eq!(answer.seq, 1, "each direction counts on its own");
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(
        json,
        json!({"seq": 1, "ct": URL_SAFE_NO_PAD.encode(&answer.ct)})
    );
    assert!(!json.to_string().contains('='), "{json}");
    assert_eq!(
        channel.browser_opens(&over_the_wire(&answer)).unwrap(),
        b"README.md\n"
    );
}

#[test]
fn the_same_plaintext_never_gives_the_same_ct() {
    let device = Device::new();
    let mut channel = Channel::open(&device, "takeover-1");
    let first = channel.browser_sends(b"again");
    let second = channel.browser_sends(b"again");
    assert_ne!(first.ct, second.ct);

    // A new exchange gives new keys, even for the same device and channel id.
    let mut other = Channel::open(&device, "takeover-1");
    assert_ne!(other.browser_sends(b"again").ct, first.ct);
}

#[test]
fn a_number_at_or_below_the_last_is_refused() {
    let device = Device::new();
    let mut channel = Channel::open(&device, "takeover-1");
    let first = channel.browser_sends(b"one");
    let second = channel.browser_sends(b"two");
    let third = channel.browser_sends(b"three");

    let zero = Message {
        seq: 0,
        ct: first.ct.clone(),
    };
    assert_eq!(
        channel.device_opens(&zero),
        Err(ChannelError::Stale { seq: 0, last: 0 })
    );

    assert_eq!(channel.device_opens(&first).unwrap(), b"one");
    assert_eq!(
        channel.device_opens(&first),
        Err(ChannelError::Stale { seq: 1, last: 1 }),
        "a replay"
    );

    // A gap is allowed; going back after it is not.
    assert_eq!(channel.device_opens(&third).unwrap(), b"three");
    assert_eq!(
        channel.device_opens(&second),
        Err(ChannelError::Stale { seq: 2, last: 3 }),
        "out of order"
    );
    assert_eq!(channel.device.1.last_seq(), 3);
}

#[test]
fn a_message_reflected_back_in_the_other_direction_is_refused() {
    let device = Device::new();
    let mut channel = Channel::open(&device, "takeover-1");

    let from_browser = channel.browser_sends(b"rm -rf build");
    assert_eq!(
        channel.browser_opens(&from_browser),
        Err(ChannelError::Unopenable)
    );
    let from_device = channel.device_sends(b"done");
    assert_eq!(
        channel.device_opens(&from_device),
        Err(ChannelError::Unopenable)
    );

    // The refusals changed nothing: both still open where they belong.
    assert_eq!(channel.browser.1.last_seq(), 0);
    assert_eq!(channel.device.1.last_seq(), 0);
    assert_eq!(
        channel.device_opens(&from_browser).unwrap(),
        b"rm -rf build"
    );
    assert_eq!(channel.browser_opens(&from_device).unwrap(), b"done");
}

#[test]
fn a_changed_message_is_refused_and_the_genuine_one_still_opens() {
    let device = Device::new();
    let mut channel = Channel::open(&device, "takeover-1");
    let genuine = channel.browser_sends(b"echo hi");

    let mut flipped = genuine.clone();
    flipped.ct[0] ^= 1;
    let mut flipped_tag = genuine.clone();
    *flipped_tag.ct.last_mut().unwrap() ^= 0x80;
    let mut truncated = genuine.clone();
    truncated.ct.pop();
    let renumbered = Message {
        seq: 2,
        ct: genuine.ct.clone(),
    };
    for forged in [flipped, flipped_tag, truncated, renumbered] {
        assert_eq!(
            channel.device_opens(&forged),
            Err(ChannelError::Unopenable),
            "{forged:?}"
        );
        assert_eq!(channel.device.1.last_seq(), 0, "a refusal moved last");
    }

    assert_eq!(channel.device_opens(&genuine).unwrap(), b"echo hi");
    assert_eq!(channel.device.1.last_seq(), 1);
}

#[test]
fn another_channels_message_is_refused() {
    let device = Device::new();
    let mut first = Channel::open(&device, "takeover-1");
    let mut second = Channel::open(&device, "takeover-2");
    let message = first.browser_sends(b"whoami");
    assert_eq!(second.device_opens(&message), Err(ChannelError::Unopenable));
    assert_eq!(first.device_opens(&message).unwrap(), b"whoami");

    // Even under the same keys, the channel id in the aad tells two channels apart.
    let keys = || ChannelKeys::from_exported([1; KEY_BYTES], [2; KEY_BYTES]);
    let (mut sender, _) = keys().browser_ends(&ChannelId::new("takeover-1").unwrap());
    let (_, mut elsewhere) = keys().device_ends(&ChannelId::new("takeover-2").unwrap());
    let (_, mut here) = keys().device_ends(&ChannelId::new("takeover-1").unwrap());
    let message = sender.seal(b"whoami").unwrap();
    assert_eq!(elsewhere.open(&message), Err(ChannelError::Unopenable));
    assert_eq!(&here.open(&message).unwrap()[..], b"whoami");
}

#[test]
fn only_the_device_and_key_it_was_started_for_can_accept() {
    let device = Device::new();
    let (enc, browser_keys) = start(&device.recipient, &device.id, &mut OsRng).unwrap();
    let channel_id = ChannelId::new("takeover-1").unwrap();
    let (mut sender, _) = browser_keys.browser_ends(&channel_id);
    let message = sender.seal(b"pwd").unwrap();

    // Another device id gives other keys: HPKE's info names the device.
    let impostor = Device::with_secret(DeviceId::generate(), device.secret.clone());
    let (_, mut receiver) = impostor.accept(&enc).unwrap().device_ends(&channel_id);
    assert_eq!(receiver.open(&message), Err(ChannelError::Unopenable));

    // Another key pair cannot take the exchange at all.
    let stranger = Device::with_secret(device.id.clone(), p256::SecretKey::random(&mut OsRng));
    let (_, mut receiver) = stranger.accept(&enc).unwrap().device_ends(&channel_id);
    assert_eq!(receiver.open(&message), Err(ChannelError::Unopenable));

    // A kid that is not the private key's is refused before anything else.
    assert_eq!(
        accept(&stranger.secret, device.kid(), &device.id, &enc).unwrap_err(),
        ChannelError::SealKeyMismatch
    );

    let (_, mut receiver) = device.accept(&enc).unwrap().device_ends(&channel_id);
    assert_eq!(&receiver.open(&message).unwrap()[..], b"pwd");
}

#[test]
fn an_enc_that_is_not_an_uncompressed_point_is_refused() {
    let device = Device::new();
    let (enc, _) = start(&device.recipient, &device.id, &mut OsRng).unwrap();
    let public = p256::SecretKey::random(&mut OsRng).public_key();
    let compressed = public.to_encoded_point(true).as_bytes().to_vec();
    let mut off_curve = enc;
    off_curve[64] ^= 1;
    let cases: [&[u8]; 5] = [
        &[],
        &enc[..ENC_BYTES - 1],
        &compressed,
        &off_curve,
        &[0; 65],
    ];
    for case in cases {
        assert_eq!(
            device.accept(case).unwrap_err(),
            ChannelError::MalformedEnc,
            "{case:?}"
        );
    }
}

#[test]
fn a_malformed_message_does_not_parse() {
    let good = json!({"seq": 1, "ct": URL_SAFE_NO_PAD.encode([0u8; 16])});
    assert!(serde_json::from_value::<Message>(good).is_ok());
    let cases = [
        json!({"seq": 1}),
        json!({"ct": URL_SAFE_NO_PAD.encode([0u8; 16])}),
        json!({"seq": -1, "ct": URL_SAFE_NO_PAD.encode([0u8; 16])}),
        json!({"seq": 1, "ct": URL_SAFE_NO_PAD.encode([0u8; 15])}),
        json!({"seq": 1, "ct": format!("{}=", URL_SAFE_NO_PAD.encode([0u8; 17]))}),
        json!({"seq": 1, "ct": "+/+/+/+/+/+/+/+/+/+/+w"}),
        json!({"seq": 1, "ct": URL_SAFE_NO_PAD.encode([0u8; 16]), "iv": "AAAA"}),
    ];
    for case in cases {
        assert!(
            serde_json::from_value::<Message>(case.clone()).is_err(),
            "{case}"
        );
    }
}

#[test]
fn a_channel_id_is_one_to_64_bytes() {
    assert_eq!(ChannelId::new(""), Err(ChannelError::BadChannelId));
    assert!(ChannelId::new([7u8; MAX_CHANNEL_ID_BYTES]).is_ok());
    assert_eq!(
        ChannelId::new([7u8; MAX_CHANNEL_ID_BYTES + 1]),
        Err(ChannelError::BadChannelId)
    );
}

#[test]
fn refusals_say_what_happened() {
    let cases = [
        (
            ChannelError::Stale { seq: 2, last: 3 },
            "channel message 2 is at or below the last one opened (3)",
        ),
        (
            ChannelError::Unopenable,
            "the message cannot be opened on this channel in this direction",
        ),
        (
            ChannelError::Exhausted,
            "the channel has used all its message numbers; open a new one",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
}

/// Fixed keys and channel id give exactly these messages: the AEAD framing (nonce, aad,
/// direction byte, serde) cannot change without this failing.
#[test]
fn known_answer_for_the_message_format() {
    let keys = || ChannelKeys::from_exported([0x11; KEY_BYTES], [0x22; KEY_BYTES]);
    let channel_id = ChannelId::new("kat-channel").unwrap();
    let (mut browser_sender, _) = keys().browser_ends(&channel_id);
    let (mut device_sender, _) = keys().device_ends(&channel_id);

    let sent = [
        browser_sender.seal(b"hello device").unwrap(),
        browser_sender.seal(b"second").unwrap(),
        device_sender.seal(b"hello browser").unwrap(),
    ];
    let sent: Vec<Value> = sent
        .iter()
        .map(|message| serde_json::to_value(message).unwrap())
        .collect();
    assert_eq!(sent, message_format_vector());
}

fn message_format_vector() -> Vec<Value> {
    vec![
        json!({"seq": 1, "ct": "oe5kpGcDW3UPUJggRJZWuVb3IrRkhUsdws_p_A"}),
        json!({"seq": 2, "ct": "NfPwHod12UU6cteE01Y-QuvI92qu2w"}),
        json!({"seq": 1, "ct": "G6_24JPHudIkYaxjAnY1hBwrUYtxKq14qhXTIgo"}),
    ]
}

/// A fixed device key and ephemeral key give exactly these channel keys, seen through the
/// messages they produce: the HPKE exchange, `info` and exporter contexts cannot change
/// without this failing. A browser implementation can check itself against the same values.
#[test]
fn known_answer_for_the_key_exchange() {
    let device_secret = p256::SecretKey::from_slice(&[0x5a; 32]).unwrap();
    let device = Device::with_secret(DeviceId::parse("kat-device").unwrap(), device_secret);
    let ephemeral = p256::SecretKey::from_slice(&[0x3c; 32]).unwrap();
    let enc = ephemeral.public_key().to_encoded_point(false);
    assert_eq!(
        URL_SAFE_NO_PAD.encode(enc.as_bytes()),
        "BEgAEf2GDq4wjMQpHul06qQN7W6Z4aUcyl0eaU_bhVr7v2ZBPJXTmcqI5YxiOBZtyzwH9sF1Ca-O0bi7Fc5KSf0"
    );
    assert_eq!(device.kid().as_str(), "fDPzES0wUyN54YZY2LKpNA");
    assert_eq!(
        channel_info(&device.id, device.kid()),
        [
            b"tether/channel/v1\0kat-device\0".as_slice(),
            b"fDPzES0wUyN54YZY2LKpNA"
        ]
        .concat()
    );

    let channel_id = ChannelId::new("kat-channel").unwrap();
    let (mut sender, mut receiver) = device
        .accept(enc.as_bytes())
        .unwrap()
        .device_ends(&channel_id);
    let from_browser: Message =
        serde_json::from_value(json!({"seq": 1, "ct": "QUInwcRCUICEYV2bnD4ZmAExztA"}))
            .expect("the vector's message parses");
    assert_eq!(&receiver.open(&from_browser).unwrap()[..], b"ping");
    let from_device = serde_json::to_value(sender.seal(b"pong").unwrap()).unwrap();
    assert_eq!(
        from_device,
        json!({"seq": 1, "ct": "CzDPFzRYS3P-DyhaVIoSQWqHQyM"})
    );
}
