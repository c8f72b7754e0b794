//! `spawn_app` and typed clients for the web user and the device.
//!
//! Every test server reads the time from a [`ManualClock`] that starts at the real time and
//! stands still: a test of an expiry (a lease, a decision, a pairing code) moves it with
//! [`TestApp::advance`] instead of sleeping. Waits for real asynchronous work (WebSocket
//! frames, relays, the background sweeper and flusher) poll or sleep on tokio's time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tether_protocol::auth::Me;
use tether_protocol::capabilities::{
    Capabilities, Engine as EngineCap, EngineKind, SandboxReport, SandboxStrength, SealKey,
};

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use tether_protocol::frames::ServerFrame;
use tether_protocol::jobs::{ClaimedJob, Job};
use tether_server::clock::ManualClock;
use tether_server::store::Tx;
use tether_server::{Application, Config, Store};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::postgres;

/// Which database a test runs against.
#[derive(Clone)]
pub enum Backend {
    Sqlite,
    Postgres(String),
}

impl Backend {
    /// A fresh PostgreSQL database, or `None` when PostgreSQL is unavailable (skipped).
    pub fn postgres() -> Option<Backend> {
        postgres::fresh_database_url().map(Backend::Postgres)
    }
}

/// Runs each test body once on SQLite and once on PostgreSQL, as `NAME::sqlite` and
/// `NAME::postgres`.
#[macro_export]
macro_rules! both_backends {
    ($(async fn $name:ident($backend:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                async fn run($backend: $crate::helpers::Backend) $body

                #[tokio::test]
                async fn sqlite() {
                    run($crate::helpers::Backend::Sqlite).await;
                }

                #[tokio::test]
                async fn postgres() {
                    if let Some(backend) = $crate::helpers::Backend::postgres() {
                        run(backend).await;
                    }
                }
            }
        )*
    };
}

pub struct TestApp {
    pub base: String,
    /// `http://ADDR` of the `/metrics` listener, when the test configured one
    /// (`config.metrics_listen = Some("127.0.0.1:0")`).
    pub metrics: Option<String>,
    pub store: Store,
    pub config: Config,
    /// The server's time; shared with [`TestApp::another`].
    pub clock: ManualClock,
    /// Stops the server (see [`TestApp::stop`]).
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    running: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    data_dir: std::sync::Arc<tempfile::TempDir>,
}

/// Builds and starts the server on port 0 with test-friendly settings.
pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |_| {}).await
}

/// Like [`spawn_app`], letting the test change the configuration first.
/// Two replicas on one PostgreSQL and one Redis, `tweak` applied to both; `None` (the test
/// then passes as skipped) when either service is missing and not required.
pub async fn two_replicas(tweak: impl FnOnce(&mut Config)) -> Option<(TestApp, TestApp)> {
    let redis_url = crate::redis::url()?;
    let backend = Backend::postgres()?;
    let a = spawn_app_with(backend, |config| {
        config.redis_url = Some(redis_url);
        tweak(config);
    })
    .await;
    let b = a.another().await;
    Some((a, b))
}

pub async fn spawn_app_with(backend: Backend, tweak: impl FnOnce(&mut Config)) -> TestApp {
    let data_dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(data_dir.path().to_path_buf());
    config.listen = "127.0.0.1:0".to_owned();
    config.http_workers = 1;
    config.db_max_connections = 4;
    // Polling `register` right after linking must not be a slow_down in tests.
    config.pairing_interval_secs = 0;
    if let Backend::Postgres(url) = backend {
        config.database_url = Some(url);
    }
    tweak(&mut config);
    let clock = ManualClock::starting_at(Utc::now());
    start(config, std::sync::Arc::new(data_dir), clock).await
}

async fn start(
    config: Config,
    data_dir: std::sync::Arc<tempfile::TempDir>,
    clock: ManualClock,
) -> TestApp {
    let app = Application::build_with_clock(config.clone(), clock.clone().into())
        .await
        .unwrap();
    let base = app.base_url();
    let metrics = app.metrics_url();
    let store = app.store();
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(app.run_until(async move {
        let _ = stopped.await;
    }));
    TestApp {
        base,
        metrics,
        store,
        config,
        clock,
        shutdown: Some(shutdown),
        running: Some(running),
        data_dir,
    }
}

impl TestApp {
    /// Stops serving, sweeping and listening, as a crashed or stopped server would.
    pub async fn stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(running) = self.running.take() {
            running.await.unwrap().unwrap();
        }
    }

    /// Another server on the same database and data dir with the same settings and clock
    /// (a restart, or a second replica), on a new port.
    pub async fn another(&self) -> TestApp {
        start(
            self.config.clone(),
            self.data_dir.clone(),
            self.clock.clone(),
        )
        .await
    }

    /// The Prometheus text of this replica, from its metrics listener.
    pub async fn metrics_text(&self) -> String {
        let metrics = self
            .metrics
            .as_deref()
            .expect("a metrics listener (metrics_listen)");
        let res = reqwest::get(format!("{metrics}/metrics")).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.text().await.unwrap()
    }

    /// The server's "now".
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Moves the server's time forward, as if `by` had passed.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}

/// A browser-like client: its own cookie jar, and the CSRF token from sign-in.
pub struct WebClient {
    pub base: String,
    pub http: reqwest::Client,
    pub csrf: Option<String>,
}

/// A paired device: its token, and the key and capabilities it reports.
pub struct DeviceClient {
    pub base: String,
    pub http: reqwest::Client,
    pub token: String,
    pub device_id: String,
    pub install_id: String,
    pub seal_key: SealKey,
}

impl TestApp {
    pub fn web(&self) -> WebClient {
        WebClient {
            base: self.base.clone(),
            http: reqwest::Client::builder()
                .cookie_store(true)
                .build()
                .unwrap(),
            csrf: None,
        }
    }

    /// A signed-up user with a cookie session.
    pub async fn user(&self, email: &str) -> WebClient {
        let mut web = self.web();
        let res = web.signup(email, "correct horse battery", "Tester").await;
        assert_eq!(res.status(), StatusCode::CREATED);
        web
    }

    /// `POST /api/devices/pair` with fresh install id and seal key.
    pub async fn pair(&self, install_id: &str, seal_key: &SealKey) -> Response {
        reqwest::Client::new()
            .post(format!("{}/api/devices/pair", self.base))
            .header("x-tether-protocol", "1")
            .json(&json!({
                "name": "laptop", "platform": "linux", "installId": install_id,
                "agentVersion": "0.1.0", "sealKey": seal_key,
            }))
            .send()
            .await
            .unwrap()
    }

    pub async fn register(&self, device_code: &str) -> Response {
        reqwest::Client::new()
            .post(format!("{}/api/devices/register", self.base))
            .header("x-tether-protocol", "1")
            .json(&json!({ "deviceCode": device_code }))
            .send()
            .await
            .unwrap()
    }

    /// Pairs a device into `owner`'s account and sends one heartbeat with default
    /// capabilities (engine `echo`, folder `work`).
    pub async fn device(&self, owner: &WebClient, install_id: &str) -> DeviceClient {
        let device = self.device_with_key(owner, install_id, seal_key()).await;
        let res = device.heartbeat(&[]).await;
        assert_eq!(res.status(), StatusCode::OK);
        device
    }

    /// Pairs without a heartbeat.
    pub async fn device_with_key(
        &self,
        owner: &WebClient,
        install_id: &str,
        key: SealKey,
    ) -> DeviceClient {
        let paired: Value = self.pair(install_id, &key).await.json().await.unwrap();
        let user_code = paired["userCode"].as_str().unwrap();
        let res = owner
            .post("/api/devices/link", &json!({ "userCode": user_code }))
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        let res = self.register(paired["deviceCode"].as_str().unwrap()).await;
        assert_eq!(res.status(), StatusCode::OK);
        let registered: Value = res.json().await.unwrap();
        DeviceClient {
            base: self.base.clone(),
            http: reqwest::Client::new(),
            token: registered["token"].as_str().unwrap().to_owned(),
            device_id: registered["deviceId"].as_str().unwrap().to_owned(),
            install_id: install_id.to_owned(),
            seal_key: key,
        }
    }
}

impl WebClient {
    pub async fn signup(&mut self, email: &str, password: &str, name: &str) -> Response {
        let res = self
            .http
            .post(format!("{}/api/auth/signup", self.base))
            .json(&json!({ "email": email, "password": password, "name": name }))
            .send()
            .await
            .unwrap();
        self.remember_csrf(&res);
        res
    }

    pub async fn login(&mut self, email: &str, password: &str) -> Response {
        let res = self
            .http
            .post(format!("{}/api/auth/login", self.base))
            .json(&json!({ "email": email, "password": password }))
            .send()
            .await
            .unwrap();
        self.remember_csrf(&res);
        res
    }

    fn remember_csrf(&mut self, res: &Response) {
        if let Some(csrf) = res.headers().get("x-tether-csrf") {
            self.csrf = Some(csrf.to_str().unwrap().to_owned());
        }
    }

    pub async fn me(&self) -> Me {
        let res = self.get("/api/me").await;
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }

    fn with_csrf(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.csrf {
            Some(csrf) => request.header("x-tether-csrf", csrf),
            None => request,
        }
    }

    pub async fn get(&self, path: &str) -> Response {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
    }

    pub async fn post(&self, path: &str, body: &Value) -> Response {
        let request = self.http.post(format!("{}{path}", self.base)).json(body);
        self.with_csrf(request).send().await.unwrap()
    }

    pub async fn post_empty(&self, path: &str) -> Response {
        let request = self.http.post(format!("{}{path}", self.base));
        self.with_csrf(request).send().await.unwrap()
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Response {
        let request = self.http.patch(format!("{}{path}", self.base)).json(body);
        self.with_csrf(request).send().await.unwrap()
    }

    pub async fn delete(&self, path: &str) -> Response {
        let request = self.http.delete(format!("{}{path}", self.base));
        self.with_csrf(request).send().await.unwrap()
    }

    /// Queues a job with the default engine and folder.
    pub async fn create_job(&self, device_id: &str) -> Job {
        let res = self.post("/api/jobs", &job_body(device_id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        res.json().await.unwrap()
    }

    pub async fn job(&self, job_id: &str) -> Job {
        let res = self.get(&format!("/api/jobs/{job_id}")).await;
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }

    pub async fn devices(&self) -> Vec<tether_protocol::devices::Device> {
        let res = self.get("/api/devices").await;
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }
}

impl DeviceClient {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("x-tether-protocol", "1")
    }

    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            protocol: 1,
            agent_version: "0.1.0".to_owned(),
            install_id: self.install_id.clone(),
            engines: vec![EngineCap {
                name: "echo".to_owned(),
                kind: EngineKind::Recipe,
                check: None,
            }],
            folders: vec!["work".to_owned()],
            sandbox: SandboxReport {
                backend: "none".to_owned(),
                strength: SandboxStrength::Advisory,
                guarantees: Default::default(),
                reasons: vec!["tests".to_owned()],
            },
            seal_key: self.seal_key.clone(),
            accept_web_approvals: true,
            git: None,
            evidence: None,
            console: Some(true),
        }
    }

    /// A heartbeat reporting these `(jobId, leaseToken)` runs.
    pub async fn heartbeat(&self, running: &[(&str, &str)]) -> Response {
        self.heartbeat_with(self.capabilities(), running).await
    }

    pub async fn heartbeat_with(
        &self,
        capabilities: Capabilities,
        running: &[(&str, &str)],
    ) -> Response {
        let running: Vec<Value> = running
            .iter()
            .map(|(job_id, lease)| json!({ "jobId": job_id, "leaseToken": lease }))
            .collect();
        self.request(reqwest::Method::POST, "/api/devices/self/heartbeat")
            .json(&json!({ "capabilities": capabilities, "running": running }))
            .send()
            .await
            .unwrap()
    }

    pub async fn claim(&self) -> Response {
        self.request(reqwest::Method::POST, "/api/devices/self/claim")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
    }

    /// Claims and expects a job.
    pub async fn claim_job(&self) -> ClaimedJob {
        let res = self.claim().await;
        assert_eq!(res.status(), StatusCode::OK);
        let body: Value = res.json().await.unwrap();
        serde_json::from_value(body["job"].clone()).unwrap()
    }

    pub async fn progress(&self, job_id: &str, lease: &str, body: &Value) -> Response {
        self.request(
            reqwest::Method::POST,
            &format!("/api/devices/self/jobs/{job_id}/progress"),
        )
        .header("x-tether-lease", lease)
        .json(body)
        .send()
        .await
        .unwrap()
    }

    pub async fn complete(&self, job_id: &str, lease: &str, body: &Value) -> Response {
        self.request(
            reqwest::Method::POST,
            &format!("/api/devices/self/jobs/{job_id}/complete"),
        )
        .header("x-tether-lease", lease)
        .json(body)
        .send()
        .await
        .unwrap()
    }

    pub async fn get_self(&self) -> Response {
        self.request(reqwest::Method::GET, "/api/devices/self")
            .send()
            .await
            .unwrap()
    }

    /// Opens the event stream.
    pub async fn events(&self) -> Events {
        self.try_events().await.unwrap()
    }

    pub async fn try_events(&self) -> Result<Events, tokio_tungstenite::tungstenite::Error> {
        let url = format!(
            "{}/api/devices/self/events",
            self.base.replacen("http://", "ws://", 1)
        );
        let mut request = url.into_client_request().unwrap();
        let headers = request.headers_mut();
        headers.insert(
            "authorization",
            format!("Bearer {}", self.token).parse().unwrap(),
        );
        headers.insert("x-tether-protocol", "1".parse().unwrap());
        tokio_tungstenite::connect_async(request)
            .await
            .map(|(events, _)| events)
    }

    pub async fn answer_file(&self, request_id: &str, body: &Value) -> Response {
        self.request(
            reqwest::Method::POST,
            &format!("/api/devices/self/file-requests/{request_id}"),
        )
        .json(body)
        .send()
        .await
        .unwrap()
    }

    pub async fn reattach(&self, job_id: &str, attempt: u32, lease: &str) -> Response {
        self.request(
            reqwest::Method::POST,
            &format!("/api/devices/self/jobs/{job_id}/reattach"),
        )
        .json(&json!({ "attempt": attempt, "leaseToken": lease }))
        .send()
        .await
        .unwrap()
    }

    pub async fn resume(&self, job_id: &str, attempt: u32) -> Response {
        self.request(
            reqwest::Method::POST,
            &format!("/api/devices/self/jobs/{job_id}/resume"),
        )
        .json(&json!({ "attempt": attempt }))
        .send()
        .await
        .unwrap()
    }

    pub async fn delete_self(&self) -> Response {
        self.request(reqwest::Method::DELETE, "/api/devices/self")
            .send()
            .await
            .unwrap()
    }
}

/// A device's event stream, as a test client.
pub type Events =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next frame other than `ping` within `within`; `None` when the stream closed or
/// nothing came.
pub async fn next_frame(events: &mut Events, within: Duration) -> Option<ServerFrame> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let message = tokio::time::timeout_at(deadline, events.next())
            .await
            .ok()??;
        match message.ok()? {
            Message::Text(text) => {
                let frame: ServerFrame = serde_json::from_str(text.as_str()).unwrap();
                if frame != ServerFrame::Ping {
                    return Some(frame);
                }
            }
            Message::Close(_) => return None,
            _ => {}
        }
    }
}

/// Waits until the server closes the stream (a close frame or the end), at most `within`.
/// Returns the close code, when one came.
pub async fn closed_within(events: &mut Events, within: Duration) -> Option<u16> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Err(_) => panic!("the stream stayed open for {within:?}"),
            Ok(None) | Ok(Some(Err(_))) => return None,
            Ok(Some(Ok(Message::Close(frame)))) => return frame.map(|f| u16::from(f.code)),
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// An open server-sent event stream, read as EventSource reads one.
pub struct SseStream {
    res: Response,
    buffer: String,
}

/// One server-sent event: its name, its `id:` when it has one, and its JSON data.
#[derive(Debug)]
pub struct SseEvent {
    pub name: String,
    pub id: Option<String>,
    pub data: Value,
}

impl SseStream {
    /// The stream `res` answered, checked to be a 200 `text/event-stream`.
    pub fn new(res: Response) -> SseStream {
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        SseStream {
            res,
            buffer: String::new(),
        }
    }

    /// The next event, comments and `retry:` skipped; `Err(())` when the stream ended;
    /// `Ok(None)` when none came within `within`.
    pub async fn next(&mut self, within: Duration) -> Result<Option<SseEvent>, ()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|line| line.strip_prefix(name))
                        .map(str::to_owned)
                };
                if let Some(data) = field("data: ") {
                    return Ok(Some(SseEvent {
                        name: field("event: ").unwrap_or_else(|| "message".to_owned()),
                        id: field("id: "),
                        data: serde_json::from_str(&data).unwrap(),
                    }));
                }
                continue;
            }
            match tokio::time::timeout_at(deadline, self.res.chunk()).await {
                Err(_) => return Ok(None),
                Ok(Ok(Some(chunk))) => self.buffer.push_str(std::str::from_utf8(&chunk).unwrap()),
                Ok(_) => return Err(()),
            }
        }
    }
}

/// Runs SQL on the test's database directly (to age a row, say).
pub async fn exec_sql(store: &Store, sql: &str) {
    match store.begin().await.unwrap() {
        Tx::Sqlite(mut tx) => {
            sqlx::query(sql).execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }
        Tx::Postgres(mut tx) => {
            sqlx::query(sql).execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }
    }
}

/// The first column of the first row `sql` returns on the test's database, read as a
/// number (`None` for no row or NULL), to wait for what a background task writes.
pub async fn query_i64(store: &Store, sql: &str) -> Option<i64> {
    match store.begin().await.unwrap() {
        Tx::Sqlite(mut tx) => sqlx::query_scalar::<_, Option<i64>>(sql)
            .fetch_optional(&mut *tx)
            .await
            .unwrap()
            .flatten(),
        Tx::Postgres(mut tx) => sqlx::query_scalar::<_, Option<i64>>(sql)
            .fetch_optional(&mut *tx)
            .await
            .unwrap()
            .flatten(),
    }
}

/// Polls `sql` (see [`query_i64`]) until `ready` holds for its answer, at most 10 s.
pub async fn wait_for_row(store: &Store, sql: &str, ready: impl Fn(Option<i64>) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !ready(query_i64(store, sql).await) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited 10 s for: {sql}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The body of a job with the default engine and folder.
pub fn job_body(device_id: &str) -> Value {
    json!({
        "deviceId": device_id, "title": "Run the tests", "prompt": "cargo test",
        "folder": "work", "engine": "echo", "mode": "review", "network": false,
        "timeoutMinutes": 30,
    })
}

/// A seal key whose kid and fingerprint derive from random SPKI bytes, as DESIGN §5 says.
pub fn seal_key() -> SealKey {
    let mut spki = vec![0u8; 91];
    rand::thread_rng().fill_bytes(&mut spki);
    let digest = Sha256::digest(&spki);
    SealKey {
        kid: URL_SAFE_NO_PAD.encode(&digest[..16]),
        alg: "ECDH-P256".to_owned(),
        spki: URL_SAFE_NO_PAD.encode(&spki),
        fingerprint: format!("SHA256:{}", URL_SAFE_NO_PAD.encode(digest)),
    }
}

/// Asserts an error answer: status, `error.code`, and a non-empty message.
pub async fn assert_error(res: Response, status: u16, code: &str) -> String {
    assert_eq!(res.status().as_u16(), status, "status for expected {code}");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    assert!(!message.is_empty());
    message
}
