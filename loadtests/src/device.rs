//! A simulated device: event stream, heartbeats, claims, one progress batch, complete. Like
//! a real agent, a device that learns it was revoked (a `device.revoked` frame or a 401
//! `revoked` on any call) forgets its token and stops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tether_protocol::capabilities::{
    Capabilities, Engine, EngineKind, SandboxReport, SandboxStrength,
};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::report::Recorder;
use crate::setup::Device;

/// The running fleet; [`Fleet::stop`] ends every device.
pub struct Fleet {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Fleet {
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

type EventStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Starts every device and returns once each has connected its stream and heartbeated once.
/// Each job runs for `work` between its progress batch and its completion.
pub async fn start_fleet(
    servers: &[String],
    devices: Vec<Device>,
    work: Duration,
    recorder: Arc<Recorder>,
) -> anyhow::Result<Fleet> {
    let servers = Arc::new(servers.to_vec());
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .timeout(Duration::from_secs(30))
        .build()?;
    let (stop, stopped) = watch::channel(false);
    let (ready_sender, mut ready) = tokio::sync::mpsc::channel(devices.len().max(1));
    let tasks = devices
        .into_iter()
        .map(|device| {
            let simulated = Simulated {
                http: http.clone(),
                current: AtomicUsize::new(device.home(servers.len())),
                servers: servers.clone(),
                device,
                recorder: recorder.clone(),
                wake: Arc::new(Notify::new()),
                forgotten: watch::Sender::new(false),
                work,
            };
            tokio::spawn(simulated.run(stopped.clone(), ready_sender.clone()))
        })
        .collect::<Vec<_>>();
    drop(ready_sender);
    let mut connected = 0;
    while connected < tasks.len() {
        match tokio::time::timeout(Duration::from_secs(120), ready.recv()).await {
            Ok(Some(())) => connected += 1,
            _ => anyhow::bail!("only {connected} of {} devices connected", tasks.len()),
        }
    }
    Ok(Fleet { stop, tasks })
}

struct Simulated {
    http: reqwest::Client,
    servers: Arc<Vec<String>>,
    /// The replica this device talks to now; it moves on when that one stops answering.
    current: AtomicUsize,
    device: Device,
    recorder: Arc<Recorder>,
    /// Woken by `wake` frames and by heartbeats that report queued work.
    wake: Arc<Notify>,
    /// Set once the device learned it was revoked and forgot its token.
    forgotten: watch::Sender<bool>,
    /// How long a job runs between its progress batch and its completion.
    work: Duration,
}

/// What a device call came back with.
enum Reply {
    /// Any answer but a 401 `revoked`.
    Answer(reqwest::Response),
    /// The device was revoked; it has forgotten its token.
    Revoked,
    /// Any other 401 (recorded as an error).
    Unauthorized,
}

impl Simulated {
    async fn run(self, mut stopped: watch::Receiver<bool>, ready: tokio::sync::mpsc::Sender<()>) {
        let this = Arc::new(self);
        let Some(stream) = this.connect().await else {
            return;
        };
        let interval = this.heartbeat().await.unwrap_or(30);
        let _ = ready.send(()).await;
        let reader = tokio::spawn(this.clone().read_frames(stream));
        let heartbeats = tokio::spawn(this.clone().heartbeat_loop(interval));
        let worker = tokio::spawn(this.clone().work_loop());
        let mut forgotten = this.forgotten.subscribe();
        tokio::select! {
            _ = stopped.changed() => {}
            _ = forgotten.wait_for(|forgotten| *forgotten) => {}
        }
        reader.abort();
        heartbeats.abort();
        worker.abort();
    }

    /// The device saw its revocation: it records when, forgets its token and stops.
    fn forget_token(&self) {
        self.recorder.noticed_revocation(&self.device.id);
        self.forgotten.send_replace(true);
    }

    fn server(&self) -> &str {
        &self.servers[self.current.load(Ordering::Relaxed) % self.servers.len()]
    }

    /// The replica stopped answering: move to the next one.
    fn fail_over(&self) {
        self.current.fetch_add(1, Ordering::Relaxed);
    }

    /// Opens the event stream, trying each replica once; none once the device was revoked.
    async fn connect(&self) -> Option<EventStream> {
        for _ in 0..self.servers.len() {
            match self.connect_once().await {
                Ok(stream) => return Some(stream),
                Err(error) if upgrade_refused_as_revoked(&error) => {
                    self.forget_token();
                    return None;
                }
                Err(error) => {
                    self.recorder.error(&format!("connect: {error}"));
                    self.fail_over();
                }
            }
        }
        None
    }

    async fn connect_once(&self) -> anyhow::Result<EventStream> {
        let url = format!(
            "{}/api/devices/self/events",
            self.server().replacen("http", "ws", 1)
        );
        let mut request = url.into_client_request()?;
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.device.token).parse()?,
        );
        request
            .headers_mut()
            .insert("x-tether-protocol", "1".parse()?);
        let (stream, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(stream)
    }

    /// Follows the event stream, reconnecting (and claiming) when it drops.
    async fn read_frames(self: Arc<Self>, mut stream: EventStream) {
        loop {
            // Reading also answers the server's pings (tungstenite queues the pong).
            while let Some(frame) = stream.next().await {
                let Ok(Message::Text(text)) = frame else {
                    continue;
                };
                let frame: Value = serde_json::from_str(&text).unwrap_or_default();
                match frame["type"].as_str() {
                    Some("wake") => self.wake.notify_one(),
                    Some("device.revoked") => {
                        self.forget_token();
                        return;
                    }
                    _ => {}
                }
            }
            self.recorder.error("event stream dropped");
            loop {
                tokio::time::sleep(Duration::from_millis(200 + rand::random::<u64>() % 800)).await;
                if *self.forgotten.borrow() {
                    return;
                }
                if let Some(next) = self.connect().await {
                    stream = next;
                    break;
                }
            }
            self.wake.notify_one();
        }
    }

    async fn heartbeat_loop(self: Arc<Self>, interval: u64) {
        // Spread the fleet over the interval so heartbeats arrive at a steady rate.
        let offset = rand::random::<f64>() * interval as f64;
        tokio::time::sleep(Duration::from_secs_f64(offset)).await;
        let mut ticks = tokio::time::interval(Duration::from_secs(interval.max(1)));
        loop {
            ticks.tick().await;
            if self.heartbeat().await.is_none() {
                continue;
            }
        }
    }

    /// One heartbeat; returns the interval the server asks for.
    async fn heartbeat(&self) -> Option<u64> {
        let started = Instant::now();
        let body = json!({"capabilities": self.capabilities(), "running": []});
        let answer = self.send("heartbeat", None, &body).await;
        let body: Value = match answer {
            Ok(Reply::Answer(answer)) if answer.status().is_success() => {
                answer.json().await.ok()?
            }
            Ok(Reply::Revoked | Reply::Unauthorized) => return None,
            Ok(Reply::Answer(answer)) => {
                self.recorder
                    .error(&format!("heartbeat {}", answer.status()));
                return None;
            }
            Err(error) => {
                self.recorder.error(&format!("heartbeat: {error}"));
                return None;
            }
        };
        self.recorder.heartbeat(started.elapsed());
        if body["queued"].as_u64().unwrap_or(0) > 0 {
            self.wake.notify_one();
        }
        body["intervals"]["heartbeatSecs"].as_u64()
    }

    async fn work_loop(self: Arc<Self>) {
        loop {
            // Claim on start and whenever woken; drain what is queued.
            while self.claim_and_run().await {}
            self.wake.notified().await;
        }
    }

    /// Claims one job and runs it; false when nothing was queued (or on error).
    async fn claim_and_run(&self) -> bool {
        let answer = match self.send("claim", None, &json!({})).await {
            Ok(Reply::Answer(answer)) => answer,
            Ok(Reply::Revoked | Reply::Unauthorized) => return false,
            Err(error) => {
                self.recorder.error(&format!("claim: {error}"));
                return false;
            }
        };
        if answer.status().as_u16() == 204 {
            return false;
        }
        if !answer.status().is_success() {
            self.recorder.error(&format!("claim {}", answer.status()));
            return false;
        }
        let Ok(body) = answer.json::<Value>().await else {
            return false;
        };
        let (Some(job_id), Some(lease)) = (
            body["job"]["id"].as_str(),
            body["job"]["leaseToken"].as_str(),
        ) else {
            return false;
        };
        self.recorder.claimed(job_id);
        let progress_body = json!({"seq": 1, "lines": ["working"]});
        let progress = self
            .send(
                &format!("jobs/{job_id}/progress"),
                Some(lease),
                &progress_body,
            )
            .await;
        match progress {
            Ok(Reply::Answer(answer)) if answer.status().is_success() => {}
            Ok(Reply::Revoked | Reply::Unauthorized) => return false,
            _ => self.recorder.error("progress failed"),
        }
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        let complete_body = json!({"outcome": "succeeded", "summary": "done", "exitCode": 0});
        let complete = self
            .send(
                &format!("jobs/{job_id}/complete"),
                Some(lease),
                &complete_body,
            )
            .await;
        match complete {
            Ok(Reply::Answer(answer)) if answer.status().is_success() => {
                self.recorder.completed(job_id)
            }
            Ok(Reply::Revoked | Reply::Unauthorized) => return false,
            Ok(Reply::Answer(answer)) => self
                .recorder
                .error(&format!("complete {}", answer.status())),
            Err(error) => self.recorder.error(&format!("complete: {error}")),
        }
        true
    }

    /// A device call, sent again to the next replica when this one does not answer (the
    /// routes are idempotent: progress by `seq`, complete by lease). A 401 `revoked` makes
    /// the device forget its token; once forgotten, nothing is sent.
    async fn send(&self, path: &str, lease: Option<&str>, body: &Value) -> reqwest::Result<Reply> {
        if *self.forgotten.borrow() {
            return Ok(Reply::Revoked);
        }
        let answer = self.send_to_any_replica(path, lease, body).await?;
        if answer.status() != reqwest::StatusCode::UNAUTHORIZED {
            return Ok(Reply::Answer(answer));
        }
        let body = answer.bytes().await?;
        if is_revoked_error(&body) {
            self.forget_token();
            return Ok(Reply::Revoked);
        }
        self.recorder.error(&format!("{path} 401"));
        Ok(Reply::Unauthorized)
    }

    async fn send_to_any_replica(
        &self,
        path: &str,
        lease: Option<&str>,
        body: &Value,
    ) -> reqwest::Result<reqwest::Response> {
        let mut attempts = 0;
        loop {
            let mut request = self
                .http
                .post(format!("{}/api/devices/self/{path}", self.server()))
                .bearer_auth(&self.device.token)
                .header("x-tether-protocol", "1")
                .json(body);
            if let Some(lease) = lease {
                request = request.header("x-tether-lease", lease);
            }
            match request.send().await {
                Err(error)
                    if (error.is_connect() || error.is_request())
                        && attempts < 2 * self.servers.len() =>
                {
                    attempts += 1;
                    self.fail_over();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                answer => return answer,
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        capabilities(&self.device)
    }
}

/// What a simulated device reports in its heartbeats.
pub fn capabilities(device: &Device) -> Capabilities {
    Capabilities {
        protocol: 1,
        agent_version: "loadtest".to_owned(),
        install_id: device.install_id.clone(),
        engines: vec![Engine {
            name: "load".to_owned(),
            kind: EngineKind::Recipe,
            check: None,
        }],
        folders: vec!["work".to_owned()],
        sandbox: SandboxReport {
            backend: "none".to_owned(),
            strength: SandboxStrength::Advisory,
            guarantees: Default::default(),
            reasons: vec!["simulated device".to_owned()],
        },
        seal_key: device.seal_key.clone(),
        accept_web_approvals: true,
        git: None,
        evidence: None,
        console: None,
    }
}

/// Whether an error body is the server's 401 `revoked`.
pub fn is_revoked_error(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|error| error["error"]["code"].as_str() == Some("revoked"))
}

/// Whether the event stream's upgrade was refused because the device was revoked.
fn upgrade_refused_as_revoked(error: &anyhow::Error) -> bool {
    match error.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Http(response)) => {
            response.status() == 401 && response.body().as_deref().is_some_and(is_revoked_error)
        }
        _ => false,
    }
}
