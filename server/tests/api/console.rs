//! The console's two WebSockets through the real server: who may open one (the owner at a
//! browser, unlocked, from this server's own origin, to a computer whose console is on),
//! that messages go both ways sealed end to end, and that the server never holds what was
//! typed: not in its logs, its database or its Redis traffic, with the two ends on two
//! replicas.

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use p256::elliptic_curve::rand_core::OsRng;
use p256::pkcs8::EncodePublicKey;
use p256::SecretKey;
use reqwest::cookie::{CookieStore, Jar};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::capabilities::SealKey;
use tether_protocol::console::{ConsoleReply, ConsoleRequest, ServerToBrowser};
use tether_protocol::frames::ServerFrame;
use tether_protocol::DeviceId;
use tether_seal::channel::{self, ChannelId, Message as Sealed, Receiver, Sender};
use tether_seal::{Kid, Recipient};
use tether_server::store::Tx;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::both_backends;
use crate::helpers::{next_frame, spawn_app_with, Backend, DeviceClient, TestApp, WebClient};
use crate::passkeys::{by_name, register, unlock, Authenticator};
use crate::redis;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A person at a browser with a passkey and an unlocked console, whose cookie a WebSocket
/// request can carry.
struct Owner {
    web: WebClient,
    jar: Arc<Jar>,
    authenticator: Authenticator,
}

impl Owner {
    async fn new(app: &TestApp, email: &str) -> Owner {
        let jar = Arc::new(Jar::default());
        let http = reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .build()
            .unwrap();
        let mut web = WebClient {
            base: by_name(app),
            http,
            csrf: None,
        };
        let res = web.signup(email, "correct horse battery", "Tester").await;
        assert_eq!(res.status(), 201);
        let mut authenticator = Authenticator::new(&web.base);
        register(&web, &mut authenticator, "laptop").await;
        Owner {
            web,
            jar,
            authenticator,
        }
    }

    async fn unlock(&mut self) {
        unlock(&self.web, &mut self.authenticator).await;
    }

    fn cookie(&self) -> String {
        let url = url::Url::parse(&self.web.base).unwrap();
        self.jar
            .cookies(&url)
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }

    /// Opens the browser's console socket to `device_id`, as a page of this server would.
    async fn open(&self, device_id: &str) -> Result<Socket, WsError> {
        let origin = self.web.base.clone();
        connect(
            &self.web.base,
            device_id,
            Some(&self.cookie()),
            Some(&origin),
            None,
        )
        .await
    }
}

/// A console WebSocket request to `base` for `device_id` with the given credentials.
async fn connect(
    base: &str,
    device_id: &str,
    cookie: Option<&str>,
    origin: Option<&str>,
    bearer: Option<&str>,
) -> Result<Socket, WsError> {
    let url = format!(
        "{}/api/devices/{device_id}/console",
        base.replacen("http://", "ws://", 1)
    );
    let mut request = url.into_client_request().unwrap();
    let headers = request.headers_mut();
    if let Some(cookie) = cookie {
        headers.insert("cookie", cookie.parse().unwrap());
    }
    if let Some(origin) = origin {
        headers.insert("origin", origin.parse().unwrap());
    }
    if let Some(bearer) = bearer {
        headers.insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    }
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(socket, _)| socket)
}

/// The refused upgrade's status and error code.
async fn refused(attempt: Result<Socket, WsError>) -> (u16, String) {
    match attempt {
        Err(WsError::Http(response)) => {
            let body: Value = response
                .body()
                .as_ref()
                .and_then(|bytes| serde_json::from_slice(bytes).ok())
                .unwrap_or_default();
            (
                response.status().as_u16(),
                body["error"]["code"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        }
        Err(other) => panic!("not an HTTP refusal: {other}"),
        Ok(_) => panic!("the console opened"),
    }
}

/// A real P-256 seal key and its description, as an agent reports it.
fn real_seal_key() -> (SecretKey, SealKey) {
    let secret = SecretKey::random(&mut OsRng);
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

/// A paired computer with a real seal key whose console is on (or off).
async fn computer(app: &TestApp, owner: &Owner, console: bool) -> (DeviceClient, SecretKey) {
    let (secret, key) = real_seal_key();
    // One installation per computer: pairing the same one again would replace it.
    let install_id = format!("console-box-{}", &key.kid[..8]);
    let device = app.device_with_key(&owner.web, &install_id, key).await;
    let mut capabilities = device.capabilities();
    capabilities.console = Some(console);
    let res = device.heartbeat_with(capabilities, &[]).await;
    assert_eq!(res.status(), 200);
    (device, secret)
}

async fn send_json(socket: &mut Socket, value: &Value) {
    socket.send(Message::text(value.to_string())).await.unwrap();
}

/// The next text frame as JSON, within 10 seconds.
async fn next_json(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a frame within 10 s")
            .expect("the socket is open")
            .unwrap();
        if let Message::Text(text) = message {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

/// Both ends of one console session, joined through the server.
struct Session {
    browser: Socket,
    device: Socket,
    to_device: Sender,
    from_device: Receiver,
    to_browser: Sender,
    from_browser: Receiver,
}

impl Session {
    /// The browser opens a session to `device` (at `device_base`, which may be another
    /// replica), the computer joins it.
    async fn start(
        owner: &Owner,
        device: &DeviceClient,
        device_base: &str,
        secret: &SecretKey,
    ) -> Session {
        let mut events = device_events(device, device_base).await;
        let mut browser = owner.open(&device.device_id).await.unwrap();
        let ready: ServerToBrowser = serde_json::from_value(next_json(&mut browser).await).unwrap();
        let ServerToBrowser::Ready {
            session_id,
            seal_key,
        } = ready
        else {
            panic!("not ready: {ready:?}");
        };
        let device_id = DeviceId::parse(&device.device_id).unwrap();
        let recipient = Recipient::from_seal_key(&seal_key).unwrap();
        let (enc, keys) = channel::start(&recipient, &device_id, &mut OsRng).unwrap();
        let channel_id = ChannelId::new(session_id.as_bytes()).unwrap();
        let (to_device, from_device) = keys.browser_ends(&channel_id);
        send_json(
            &mut browser,
            &json!({"type": "open", "enc": URL_SAFE_NO_PAD.encode(enc)}),
        )
        .await;
        let frame = next_frame(&mut events, Duration::from_secs(10)).await;
        let Some(ServerFrame::ConsoleOpen {
            session_id: asked,
            enc: sent_enc,
        }) = frame
        else {
            panic!("no console.open: {frame:?}");
        };
        assert_eq!(asked, session_id);
        let kid = Kid::parse(&device.seal_key.kid).unwrap();
        let enc_bytes = URL_SAFE_NO_PAD.decode(&sent_enc).unwrap();
        let keys = channel::accept(secret, &kid, &device_id, &enc_bytes).unwrap();
        let (to_browser, from_browser) = keys.device_ends(&channel_id);
        let device_socket = device_socket(device, device_base, &session_id)
            .await
            .unwrap();
        assert_eq!(next_json(&mut browser).await["type"], "attached");
        Session {
            browser,
            device: device_socket,
            to_device,
            from_device,
            to_browser,
            from_browser,
        }
    }

    async fn browser_sends(&mut self, request: &ConsoleRequest) {
        let frame = sealed_frame(&mut self.to_device, request);
        send_json(&mut self.browser, &frame).await;
    }

    async fn device_receives(&mut self) -> ConsoleRequest {
        opened(&mut self.from_browser, next_json(&mut self.device).await)
    }

    async fn device_sends(&mut self, reply: &ConsoleReply) {
        let frame = sealed_frame(&mut self.to_browser, reply);
        send_json(&mut self.device, &frame).await;
    }

    async fn browser_receives(&mut self) -> ConsoleReply {
        opened(&mut self.from_device, next_json(&mut self.browser).await)
    }
}

/// `value` sealed as the next `message` frame of `sender`'s direction.
fn sealed_frame(sender: &mut Sender, value: &impl serde::Serialize) -> Value {
    let sealed = sender.seal(&serde_json::to_vec(value).unwrap()).unwrap();
    let mut frame = serde_json::to_value(&sealed).unwrap();
    frame["type"] = json!("message");
    frame
}

/// The value a `message` frame carries, opened by `receiver`.
fn opened<T: serde::de::DeserializeOwned>(receiver: &mut Receiver, frame: Value) -> T {
    assert_eq!(frame["type"], "message", "{frame}");
    let sealed: Sealed =
        serde_json::from_value(json!({"seq": frame["seq"], "ct": frame["ct"]})).unwrap();
    serde_json::from_slice(&receiver.open(&sealed).unwrap()).unwrap()
}

async fn device_events(device: &DeviceClient, base: &str) -> Socket {
    let at = DeviceClient {
        base: base.to_owned(),
        http: device.http.clone(),
        token: device.token.clone(),
        device_id: device.device_id.clone(),
        install_id: device.install_id.clone(),
        seal_key: device.seal_key.clone(),
    };
    at.events().await
}

async fn device_socket(
    device: &DeviceClient,
    base: &str,
    session_id: &str,
) -> Result<Socket, WsError> {
    let url = format!(
        "{}{}",
        base.replacen("http://", "ws://", 1),
        tether_protocol::routes::device_console(session_id)
    );
    let mut request = url.into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert(
        "authorization",
        format!("Bearer {}", device.token).parse().unwrap(),
    );
    headers.insert("x-tether-protocol", "1".parse().unwrap());
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(socket, _)| socket)
}

both_backends! {
async fn only_the_unlocked_owner_at_a_browser_opens_a_console(backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let mut owner = Owner::new(&app, "owner@example.com").await;
    let (device, _secret) = computer(&app, &owner, true).await;
    let id = device.device_id.clone();
    let origin = owner.web.base.clone();

    // Locked: 401 with the code the page knows.
    let (status, code) = refused(owner.open(&id).await).await;
    assert_eq!((status, code.as_str()), (401, "console_locked"));
    owner.unlock().await;

    // An API token of the same person, another site's page, no cookie: refused.
    let res = owner
        .web
        .post("/api/tokens", &json!({"name": "script"}))
        .await;
    let token: Value = res.json().await.unwrap();
    let token = token["token"].as_str().unwrap().to_owned();
    let (status, code) = refused(connect(&owner.web.base, &id, None, Some(&origin), Some(&token)).await).await;
    assert_eq!((status, code.as_str()), (403, "forbidden"));
    let (status, _) = refused(
        connect(&owner.web.base, &id, Some(&owner.cookie()), Some("https://evil.example"), None).await,
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) =
        refused(connect(&owner.web.base, &id, Some(&owner.cookie()), None, None).await).await;
    assert_eq!(status, 403);
    let (status, _) = refused(connect(&owner.web.base, &id, None, Some(&origin), None).await).await;
    assert_eq!(status, 401);

    // Another account's computer is not found, unlocked or not.
    let mut stranger = Owner::new(&app, "stranger@example.com").await;
    stranger.unlock().await;
    let (status, code) = refused(stranger.open(&id).await).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));

    // A computer whose console is off refuses at once.
    let (off, _) = computer(&app, &owner, false).await;
    let (status, code) = refused(owner.open(&off.device_id).await).await;
    assert_eq!((status, code.as_str()), (409, "console_off"));

    // Unlocked, the owner's own computer opens: `ready` names its pinned key.
    let mut socket = owner.open(&id).await.unwrap();
    let ready = next_json(&mut socket).await;
    assert_eq!(ready["type"], "ready");
    assert_eq!(ready["sealKey"]["kid"], device.seal_key.kid.as_str());
    // An `enc` that is not a P-256 point ends the session with a reason.
    send_json(&mut socket, &json!({"type": "open", "enc": "AAAA"})).await;
    let closed = next_json(&mut socket).await;
    assert_eq!(closed["type"], "closed");
    assert_eq!(closed["code"], "invalid_field");
}
}

both_backends! {
async fn a_session_carries_sealed_messages_and_ends_when_the_console_locks(backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let mut owner = Owner::new(&app, "owner@example.com").await;
    owner.unlock().await;
    let (device, secret) = computer(&app, &owner, true).await;
    let mut session = Session::start(&owner, &device, &app.base, &secret).await;

    let run = ConsoleRequest::Run {
        id: 1,
        folder: "work".into(),
        line: "ls -la".into(),
        confirmed: false,
        cols: 80,
        rows: 24,
    };
    session.browser_sends(&run).await;
    assert_eq!(session.device_receives().await, run);
    let output = ConsoleReply::Output {
        id: 1,
        data: "dG90YWw=".into(),
    };
    session.device_sends(&output).await;
    assert_eq!(session.browser_receives().await, output);

    // The computer reports the program for the ledger: the program and label, nothing else.
    send_json(
        &mut session.device,
        &json!({"type": "command", "program": "ls", "folder": "work"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let entries = tether_server::store::ledger::list(&app.store, &owner.web.me().await.account.id)
        .await
        .unwrap();
    let command = entries
        .iter()
        .find(|entry| entry.kind == "console.command")
        .expect("the command is in the ledger");
    assert!(command.detail_json.contains("\"program\":\"ls\""), "{command:?}");
    assert!(!command.detail_json.contains("-la"), "{command:?}");
    assert!(entries.iter().any(|entry| entry.kind == "console.opened"));

    // A replayed message is passed on, and the far end refuses it.
    let sealed = session
        .to_device
        .seal(&serde_json::to_vec(&ConsoleRequest::Folders {}).unwrap())
        .unwrap();
    let mut frame = serde_json::to_value(&sealed).unwrap();
    frame["type"] = json!("message");
    send_json(&mut session.browser, &frame).await;
    send_json(&mut session.browser, &frame).await;
    let first = next_json(&mut session.device).await;
    let again = next_json(&mut session.device).await;
    assert_eq!(first, again);
    let sealed: Sealed = serde_json::from_value(json!({"seq": first["seq"], "ct": first["ct"]})).unwrap();
    assert!(session.from_browser.open(&sealed).is_ok());
    assert!(session.from_browser.open(&sealed).is_err());

    // Thirty idle minutes later the console locks, and the session ends at both ends.
    app.advance(Duration::from_secs(31 * 60));
    let closed = next_json(&mut session.browser).await;
    assert_eq!(closed["type"], "closed", "{closed}");
    assert_eq!(closed["code"], "console_locked");
    let closed = next_json(&mut session.device).await;
    assert_eq!(closed, json!({"type": "closed", "code": "console_locked"}));
}
}

both_backends! {
async fn a_session_is_joined_once_by_its_own_computer(backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    let mut owner = Owner::new(&app, "owner@example.com").await;
    owner.unlock().await;
    let (device, secret) = computer(&app, &owner, true).await;
    let (other, _) = computer(&app, &owner, true).await;
    let mut events = device.events().await;
    let mut browser = owner.open(&device.device_id).await.unwrap();
    let ready = next_json(&mut browser).await;
    let session_id = ready["sessionId"].as_str().unwrap().to_owned();
    let recipient = Recipient::from_seal_key(&device.seal_key).unwrap();
    let device_id = DeviceId::parse(&device.device_id).unwrap();
    let (enc, _) = channel::start(&recipient, &device_id, &mut OsRng).unwrap();
    send_json(&mut browser, &json!({"type": "open", "enc": URL_SAFE_NO_PAD.encode(enc)})).await;
    assert!(matches!(
        next_frame(&mut events, Duration::from_secs(10)).await,
        Some(ServerFrame::ConsoleOpen { .. })
    ));
    // Another computer of the same account cannot take it; an unknown id is not found.
    let status = refused_device(device_socket(&other, &app.base, &session_id).await);
    assert_eq!(status, 404);
    let status = refused_device(device_socket(&device, &app.base, "con_nope").await);
    assert_eq!(status, 404);
    let _joined = device_socket(&device, &app.base, &session_id).await.unwrap();
    assert_eq!(next_json(&mut browser).await["type"], "attached");
    let status = refused_device(device_socket(&device, &app.base, &session_id).await);
    assert_eq!(status, 404);
    // The computer refusing (its console turned off meanwhile) ends the session with that.
    let mut joined = _joined;
    send_json(&mut joined, &json!({"type": "refuse", "code": "console_off", "message": "The console is off here."})).await;
    let closed = next_json(&mut browser).await;
    assert_eq!(closed["code"], "console_off", "{closed}");
    drop(secret);
}
}

/// The status a refused device socket got.
fn refused_device(attempt: Result<Socket, WsError>) -> u16 {
    match attempt {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("not an HTTP refusal: {other}"),
        Ok(_) => panic!("the session was joined"),
    }
}

/// A marker typed into the console crosses two replicas and Redis as ciphertext only: it is
/// in none of the server's logs, database rows or Redis commands.
#[tokio::test]
async fn the_server_never_sees_what_is_typed_into_the_console() {
    let Some(redis_url) = redis::url() else {
        return;
    };
    let Some(backend) = Backend::postgres() else {
        return;
    };
    crate::logs::written();
    let a = spawn_app_with(backend, |config| config.redis_url = Some(redis_url.clone())).await;
    let b = a.another().await;
    let monitor = RedisMonitor::start(&redis_url);
    let mut owner = Owner::new(&a, "owner@example.com").await;
    owner.unlock().await;
    let (device, secret) = computer(&a, &owner, true).await;
    // The browser on replica A, the computer on replica B.
    let mut session = Session::start(&owner, &device, &b.base, &secret).await;

    let marker = "MARKER-7f3e9c1a-console";
    let run = ConsoleRequest::Run {
        id: 7,
        folder: "work".into(),
        line: format!("echo {marker}"),
        confirmed: false,
        cols: 80,
        rows: 24,
    };
    session.browser_sends(&run).await;
    assert_eq!(session.device_receives().await, run);
    let output = ConsoleReply::Output {
        id: 7,
        data: URL_SAFE_NO_PAD.encode(format!("{marker}\r\n")),
    };
    session.device_sends(&output).await;
    assert_eq!(session.browser_receives().await, output);
    let file = ConsoleReply::File {
        folder: "work".into(),
        path: "notes.txt".into(),
        text: Some(format!("the file says {marker}")),
        hash: "00".into(),
        binary: false,
        truncated: false,
        redacted: false,
        editable: true,
    };
    session.device_sends(&file).await;
    assert_eq!(session.browser_receives().await, file);
    drop(session);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let traffic = monitor.stop();
    assert!(
        traffic.contains("tether:pipe:"),
        "the session went through Redis: {} bytes seen",
        traffic.len()
    );
    assert!(
        !traffic.contains(marker),
        "the marker crossed Redis in plaintext"
    );
    let logged = logs();
    assert!(
        logged.contains("console session started"),
        "the server's own lines are captured"
    );
    assert!(
        !logged.contains(marker),
        "the marker is in the server's logs"
    );
    let dump = database_text(&a).await;
    assert!(!dump.is_empty());
    assert!(!dump.contains(marker), "the marker is in the database");
}

/// Every row of every table of the test's PostgreSQL database, as text.
async fn database_text(app: &TestApp) -> String {
    let Tx::Postgres(mut tx) = app.store.begin().await.unwrap() else {
        panic!("a PostgreSQL store");
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let mut dump = String::new();
    for table in tables {
        let sql = format!("SELECT coalesce(string_agg(t::text, E'\\n'), '') FROM \"{table}\" t");
        let rows: String = sqlx::query_scalar(&sql).fetch_one(&mut *tx).await.unwrap();
        dump.push_str(&rows);
    }
    dump
}

/// `redis-cli MONITOR` on the test Redis: every command any replica sends.
struct RedisMonitor {
    seen: Arc<std::sync::Mutex<String>>,
    stream: std::net::TcpStream,
}

impl RedisMonitor {
    fn start(url: &str) -> RedisMonitor {
        let address = url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        assert!(first.starts_with("+OK"), "{first}");
        let seen = Arc::new(std::sync::Mutex::new(String::new()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        RedisMonitor { seen, stream }
    }

    fn stop(self) -> String {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.seen.lock().unwrap().clone()
    }
}

fn logs() -> String {
    crate::logs::written()
}
