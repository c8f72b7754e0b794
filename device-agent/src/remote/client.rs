//! The HTTP client for every call the agent makes to the Tether server.
//!
//! Device calls carry `Authorization: Bearer tdt_…` and `x-tether-protocol: 1`; lease-bound
//! calls also carry `x-tether-lease`. Error answers are decoded from the documented body
//! `{"error": {"code", "message"}}` into [`RemoteError`], so callers match on meaning
//! (revoked, stale lease) rather than on status numbers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use reqwest::{RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use tether_protocol::decisions::{AskRequest, AskResponse, CloseRequest, DeviceDecision};
use tether_protocol::devices::{HeartbeatParams, HeartbeatResponse};
use tether_protocol::files::FileAnswer;
use tether_protocol::jobs::{
    ClaimResponse, ClaimedJob, CompleteParams, LeaseGrant, ProgressParams, ProgressResponse,
    ReattachParams, ResumeParams,
};
use tether_protocol::pairing::{PairParams, PairResponse, RegisterParams, RegisterResponse};
use tether_protocol::{
    routes, AttachmentId, Code, DecisionId, DeliveryId, ErrorBody, JobId, LeaseToken,
    PROTOCOL_VERSION,
};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request as WsRequest;

/// Longest a single call may take; a hung connection must not hold a run's report forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest an evidence upload (up to 100 MB) may take.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(15 * 60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A 429 asking to wait at most this long is waited out inside the call and retried; a
/// longer wait is handed to the caller as [`RemoteError::RateLimited`].
const MAX_INLINE_RETRY_AFTER: Duration = Duration::from_secs(30);
/// How many times one call is retried after 429s before giving the error to its caller.
const MAX_RATE_LIMIT_RETRIES: u32 = 3;
/// A `Retry-After` is never taken as longer than this (a bad header must not park us for days).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
/// Without a `Retry-After`, a 429 waits this long.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// How this computer answers an `evidence.request`.
#[derive(Debug)]
pub enum EvidenceAnswer<'a> {
    /// The held file's bytes (a preview or a release), with its description.
    File {
        meta: &'a tether_protocol::jobs::EvidenceMeta,
        body: Vec<u8>,
    },
    /// Discarded: an empty body.
    Done,
    /// Refused, for this reason (sent percent-encoded in `x-tether-evidence-refused`).
    Refused(&'a str),
}

/// Why a call to the server did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// 401 `revoked`: the device token is dead for good. Forget it.
    #[error("this computer was revoked from the server")]
    Revoked,
    /// 409 `stale_lease`: this run's lease is wrong, old or expired. Stop its side effects.
    #[error("the server no longer holds this run's lease")]
    StaleLease,
    /// 429: over a rate limit; nothing may be sent on this route before `retry_after`.
    #[error("the server asks to slow down for {retry_after:?}")]
    RateLimited { retry_after: Duration },
    /// Any other error answer.
    #[error("the server answered {status} {code}: {message}")]
    Http {
        status: u16,
        code: String,
        message: String,
    },
    /// No answer at all (connection refused, timeout, reset). Never a sign of revocation.
    #[error("cannot reach the server: {0}")]
    Network(String),
}

impl RemoteError {
    /// Whether trying again later may succeed: no answer, a server fault or a rate limit.
    pub fn is_transient(&self) -> bool {
        match self {
            RemoteError::Network(_) | RemoteError::RateLimited { .. } => true,
            RemoteError::Http { status, .. } => *status >= 500 || *status == 429,
            RemoteError::Revoked | RemoteError::StaleLease => false,
        }
    }

    /// Whether this is a sign that the server could not be reached or could not serve: no
    /// answer, or a 5xx (a proxy in front of a server that is down). A run whose lease ran
    /// out during such an outage may be reattached; one that was merely silent may not.
    pub fn is_outage(&self) -> bool {
        match self {
            RemoteError::Network(_) => true,
            RemoteError::Http { status, .. } => *status >= 500,
            RemoteError::Revoked | RemoteError::StaleLease | RemoteError::RateLimited { .. } => {
                false
            }
        }
    }

    /// The least time to wait before calling again: the server's `Retry-After` on a 429.
    pub fn retry_after(&self) -> Duration {
        match self {
            RemoteError::RateLimited { retry_after } => *retry_after,
            _ => Duration::ZERO,
        }
    }

    /// Whether the server refused for good with this code (`resume_refused`, `not_found`, …).
    pub fn has_code(&self, code: Code) -> bool {
        self.code() == Some(code.name())
    }

    /// The error code the server sent, if it sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            RemoteError::Revoked => Some(Code::Revoked.name()),
            RemoteError::StaleLease => Some(Code::StaleLease.name()),
            RemoteError::RateLimited { .. } => Some(Code::RateLimited.name()),
            RemoteError::Http { code, .. } => Some(code),
            RemoteError::Network(_) => None,
        }
    }
}

/// Calls that need no device token: pairing.
#[derive(Debug, Clone)]
pub struct ServerClient {
    http: reqwest::Client,
    /// Base URL without a trailing slash.
    base: String,
}

/// Calls made as a paired device.
#[derive(Debug, Clone)]
pub struct DeviceClient {
    server: ServerClient,
    token: String,
    /// Shared by every clone: when a call last found the server unreachable.
    connectivity: Arc<Connectivity>,
}

/// When the agent found the server unreachable (no answer, or a 5xx), so that a run whose
/// lease ran out during an outage can be told apart from one whose agent was merely silent
/// (suspended, or too busy to heartbeat): only the first may be reattached.
///
/// Outages are kept as episodes: from the first failed call after a success to the next
/// success. An episode starts when its first failed call was **sent**, not when it failed:
/// a partition that holds connections open fails a call only at its timeout, which can be
/// later than the lease it ran out. It never starts before the last answer, which proves
/// the server was reachable then. A few recent episodes are enough, since a lease is
/// minutes long.
#[derive(Debug, Default)]
pub struct Connectivity {
    /// A std mutex: held only to read or change a few `Instant`s.
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    episodes: VecDeque<Outage>,
    /// When a call last got an answer.
    last_answer: Option<Instant>,
}

/// Most outage episodes remembered.
const MAX_OUTAGES: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Outage {
    started: Instant,
    /// `None` while it lasts.
    ended: Option<Instant>,
}

impl Connectivity {
    /// Records that a call sent at `sent` found the server unreachable (no answer, or a 5xx).
    pub fn note_outage(&self, sent: Instant) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let started = seen.last_answer.map_or(sent, |answered| answered.max(sent));
        if let Some(open) = seen.episodes.back_mut().filter(|last| last.ended.is_none()) {
            // A call sent earlier than the one that opened the episode failed later.
            open.started = open.started.min(started);
            return;
        }
        seen.episodes.push_back(Outage {
            started,
            ended: None,
        });
        while seen.episodes.len() > MAX_OUTAGES {
            seen.episodes.pop_front();
        }
    }

    /// Records that a call got an answer now (any answer: the server is reachable).
    pub fn note_answer(&self) {
        self.note_answer_at(Instant::now());
    }

    fn note_answer_at(&self, at: Instant) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.last_answer = Some(seen.last_answer.map_or(at, |last| last.max(at)));
        if let Some(last) = seen.episodes.back_mut().filter(|last| last.ended.is_none()) {
            last.ended = Some(at);
        }
    }

    /// Whether the server was unreachable at some moment between `from` and `to`.
    pub fn unreachable_between(&self, from: Instant, to: Instant) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .episodes
            .iter()
            .any(|outage| outage.started <= to && outage.ended.is_none_or(|ended| ended >= from))
    }
}

/// Checks and normalizes a server URL typed by a person: `http(s)://host[:port][/prefix]`.
///
/// # Errors
/// A sentence naming what is wrong with it.
pub fn normalize_server_url(raw: &str) -> Result<String, String> {
    let url =
        reqwest::Url::parse(raw.trim()).map_err(|err| format!("{raw:?} is not a URL: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{raw:?} must start with http:// or https://"));
    }
    if url.host_str().is_none() || url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{raw:?} must be a plain server address"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

impl ServerClient {
    /// A client for the server at `base` (already normalized).
    ///
    /// # Errors
    /// When the TLS backend cannot be set up.
    pub fn new(base: &str) -> anyhow::Result<ServerClient> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("tether-agent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(ServerClient {
            http,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /api/devices/pair`.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn pair(&self, params: &PairParams) -> Result<PairResponse, RemoteError> {
        let request = self.post(routes::PAIR).json(params);
        decode(send(request, None).await?).await
    }

    /// `POST /api/devices/register`; `authorization_pending` and friends come back as
    /// [`RemoteError::Http`] with that code.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn register(&self, params: &RegisterParams) -> Result<RegisterResponse, RemoteError> {
        let request = self.post(routes::REGISTER).json(params);
        decode(send(request, None).await?).await
    }

    fn post(&self, path: &str) -> RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .header(routes::PROTOCOL_HEADER, PROTOCOL_VERSION.to_string())
    }
}

impl DeviceClient {
    /// A client acting as the device whose token is `token`.
    pub fn new(server: ServerClient, token: String) -> DeviceClient {
        DeviceClient {
            server,
            token,
            connectivity: Arc::new(Connectivity::default()),
        }
    }

    pub fn base(&self) -> &str {
        self.server.base()
    }

    /// When calls last found the server unreachable; shared by every clone.
    pub fn connectivity(&self) -> &Arc<Connectivity> {
        &self.connectivity
    }

    /// The WebSocket handshake request of the event stream (`GET /api/devices/self/events`):
    /// `ws(s)://` from the server's `http(s)://`, with the device token and protocol header.
    ///
    /// # Errors
    /// When the server URL cannot be turned into a WebSocket URL.
    pub fn events_request(&self) -> anyhow::Result<WsRequest> {
        self.ws_request(routes::EVENTS)
    }

    /// The WebSocket handshake request of this device's end of console session
    /// `session_id` (`GET /api/devices/self/console/{sessionId}`), with the same headers as
    /// the event stream's.
    ///
    /// # Errors
    /// A server address that is not http(s), or a session id that cannot be a path segment.
    pub fn console_request(&self, session_id: &str) -> anyhow::Result<WsRequest> {
        let plain = !session_id.is_empty()
            && session_id.len() <= 64
            && session_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !plain {
            anyhow::bail!("the console session id is not a plain id");
        }
        self.ws_request(&routes::device_console(session_id))
    }

    fn ws_request(&self, path: &str) -> anyhow::Result<WsRequest> {
        let base = self.server.base();
        let ws_base = if let Some(rest) = base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            anyhow::bail!("{base:?} is not an http(s) address");
        };
        let mut request = format!("{ws_base}{path}").into_client_request()?;
        let headers = request.headers_mut();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {}", self.token).parse()?,
        );
        headers.insert(
            routes::PROTOCOL_HEADER,
            PROTOCOL_VERSION.to_string().parse()?,
        );
        headers.insert(
            reqwest::header::USER_AGENT,
            concat!("tether-agent/", env!("CARGO_PKG_VERSION")).parse()?,
        );
        Ok(request)
    }

    /// `POST /api/devices/self/heartbeat`.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn heartbeat(
        &self,
        params: &HeartbeatParams,
    ) -> Result<HeartbeatResponse, RemoteError> {
        let request = self
            .request(reqwest::Method::POST, routes::HEARTBEAT)
            .json(params);
        decode(self.send(request).await?).await
    }

    /// `POST /api/devices/self/claim`: a job, or `None` when nothing is queued for us.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn claim(&self) -> Result<Option<ClaimedJob>, RemoteError> {
        let request = self
            .request(reqwest::Method::POST, routes::CLAIM)
            .json(&serde_json::json!({}));
        let response = self.send(request).await?;
        if response.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let claimed: ClaimResponse = decode(response).await?;
        Ok(Some(claimed.job))
    }

    /// `POST /api/devices/self/jobs/{id}/progress` under the run's lease.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn progress(
        &self,
        job_id: &JobId,
        lease_token: &LeaseToken,
        params: &ProgressParams,
    ) -> Result<ProgressResponse, RemoteError> {
        let request = self.leased(job_id, "progress", lease_token).json(params);
        decode(self.send(request).await?).await
    }

    /// `POST /api/devices/self/jobs/{id}/complete` under the run's lease. The answer's job is
    /// not needed by the agent, so only success is reported.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn complete(
        &self,
        job_id: &JobId,
        lease_token: &LeaseToken,
        params: &CompleteParams,
    ) -> Result<(), RemoteError> {
        let request = self.leased(job_id, "complete", lease_token).json(params);
        self.send(request).await.map(drop)
    }

    /// `POST /api/devices/self/jobs/{id}/evidence` under the run's lease: `body` is the
    /// file's bytes (empty for a `local` description), `meta` goes base64url in
    /// `x-tether-evidence`. The server answers the stored item, also for a repeat.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn upload_evidence(
        &self,
        job_id: &JobId,
        lease_token: &LeaseToken,
        meta: &tether_protocol::jobs::EvidenceMeta,
        body: Vec<u8>,
    ) -> Result<tether_protocol::jobs::Evidence, RemoteError> {
        use base64::Engine as _;
        // Plain strings and numbers always serialize; an empty header would be refused.
        let json = serde_json::to_vec(meta).unwrap_or_default();
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
        let request = self
            .leased(job_id, "evidence", lease_token)
            .header(routes::EVIDENCE_HEADER, header)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .timeout(UPLOAD_TIMEOUT)
            .body(body);
        decode(self.send(request).await?).await
    }

    /// `GET /api/devices/self/jobs/{id}/attachments/{aid}` under the run's lease: the
    /// answer, its body not yet read, for the caller to stream and check.
    ///
    /// # Errors
    /// [`RemoteError::StaleLease`] on a wrong or old lease; 410 `job_ended` once the job
    /// ended; any other [`RemoteError`].
    pub async fn download_attachment(
        &self,
        job_id: &JobId,
        attachment_id: &AttachmentId,
        lease_token: &LeaseToken,
    ) -> Result<Response, RemoteError> {
        let path = routes::device_job_attachment(job_id.as_str(), attachment_id.as_str());
        let request = self
            .request(reqwest::Method::GET, &path)
            .header(routes::LEASE_HEADER, lease_token.expose())
            .timeout(UPLOAD_TIMEOUT);
        self.send(request).await
    }

    /// `POST /api/devices/self/jobs/{id}/reattach`: after an outage, a new lease for the same
    /// attempt of a run that kept going (or finished while cut off). `lease_token` is the
    /// lease the run last held; it goes in the body, not as the lease header, since it may
    /// well be stale.
    ///
    /// # Errors
    /// [`RemoteError::StaleLease`] when the server will not give the run back; any other
    /// [`RemoteError`].
    pub async fn reattach(
        &self,
        job_id: &JobId,
        attempt: u32,
        lease_token: &LeaseToken,
    ) -> Result<LeaseGrant, RemoteError> {
        let params = ReattachParams {
            attempt,
            lease_token: lease_token.clone(),
        };
        let request = self
            .request(
                reqwest::Method::POST,
                &routes::device_job(job_id.as_str(), "reattach"),
            )
            .json(&params);
        decode(self.send(request).await?).await
    }

    /// `POST /api/devices/self/jobs/{id}/resume`: a new attempt, in the same folder, of a run
    /// lost to a restart of this agent.
    ///
    /// # Errors
    /// 409 `resume_refused` (as [`RemoteError::Http`]) when the server will not carry it on;
    /// any other [`RemoteError`].
    pub async fn resume(&self, job_id: &JobId, attempt: u32) -> Result<ClaimedJob, RemoteError> {
        let request = self
            .request(
                reqwest::Method::POST,
                &routes::device_job(job_id.as_str(), "resume"),
            )
            .json(&ResumeParams { attempt });
        let claimed: ClaimResponse = decode(self.send(request).await?).await?;
        Ok(claimed.job)
    }

    /// `POST /api/devices/self/file-requests/{id}`: the answer to a `file.request` frame.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure (a 404 once the request timed out on the server).
    pub async fn answer_file_request(
        &self,
        request_id: &str,
        answer: &FileAnswer,
    ) -> Result<(), RemoteError> {
        let path = format!("/api/devices/self/file-requests/{request_id}");
        let request = self.request(reqwest::Method::POST, &path).json(answer);
        self.send(request).await.map(drop)
    }

    /// `POST /api/devices/self/evidence-uploads/{uploadId}`: the answer to an
    /// `evidence.request` frame, without a lease (the upload id is bound to this device and
    /// the request). The bytes go as [`DeviceClient::upload_evidence`] sends them, the
    /// description base64url in `x-tether-evidence`.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure (410 `upload_gone` once nobody waits).
    pub async fn answer_evidence_request(
        &self,
        upload_id: &str,
        answer: EvidenceAnswer<'_>,
    ) -> Result<(), RemoteError> {
        use base64::Engine as _;
        let request = self
            .request(reqwest::Method::POST, &routes::evidence_upload(upload_id))
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream");
        let request = match answer {
            EvidenceAnswer::File { meta, body } => {
                let json = serde_json::to_vec(meta).unwrap_or_default();
                let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
                request
                    .header(routes::EVIDENCE_HEADER, header)
                    .timeout(UPLOAD_TIMEOUT)
                    .body(body)
            }
            EvidenceAnswer::Done => request.body(Vec::new()),
            EvidenceAnswer::Refused(reason) => {
                let encoded = percent_encoding::utf8_percent_encode(
                    reason,
                    percent_encoding::NON_ALPHANUMERIC,
                );
                request
                    .header(routes::EVIDENCE_REFUSED_HEADER, encoded.to_string())
                    .body(Vec::new())
            }
        };
        self.send(request).await.map(drop)
    }

    /// `POST /api/devices/self/session-deletions/{id}`: the answer to a `session.delete`
    /// frame, without a lease (the request id is bound to this device and the job).
    ///
    /// # Errors
    /// [`RemoteError`] for any failure (410 `upload_gone` once nobody waits).
    pub async fn answer_session_deletion(
        &self,
        request_id: &str,
        answer: &tether_protocol::engine_sessions::SessionDeletion,
    ) -> Result<(), RemoteError> {
        let path = routes::session_deletion(request_id);
        let request = self.request(reqwest::Method::POST, &path).json(answer);
        self.send(request).await.map(drop)
    }

    /// `POST /api/devices/self/secret-deliveries/{id}`: whether a `secret.save` box was saved.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn answer_secret_delivery(
        &self,
        delivery_id: &DeliveryId,
        answer: &tether_protocol::secrets::DeliveryAnswer,
    ) -> Result<(), RemoteError> {
        let path = format!("/api/devices/self/secret-deliveries/{delivery_id}");
        let request = self.request(reqwest::Method::POST, &path).json(answer);
        self.send(request).await.map(drop)
    }

    /// `POST /api/devices/self/jobs/{id}/ask` under the run's lease: a decision for the
    /// owner; the job is `waiting` until it is answered, expires or is closed.
    ///
    /// # Errors
    /// [`RemoteError::StaleLease`] when the run's lease is gone; any other [`RemoteError`].
    pub async fn ask(
        &self,
        job_id: &JobId,
        lease_token: &LeaseToken,
        params: &AskRequest,
    ) -> Result<AskResponse, RemoteError> {
        let request = self.leased(job_id, "ask", lease_token).json(params);
        decode(self.send(request).await?).await
    }

    /// `POST /api/devices/self/jobs/{id}/context` under the run's lease: more context for
    /// the run (its chain, another job of the account, a search), as bounded text.
    ///
    /// # Errors
    /// [`RemoteError::StaleLease`] when the run's lease is gone; any other [`RemoteError`]
    /// (422 for an unknown name or bad arguments, 429 past the device's rate).
    pub async fn task_context(
        &self,
        job_id: &JobId,
        lease_token: &LeaseToken,
        params: &tether_protocol::task_context::ContextRequest,
    ) -> Result<tether_protocol::task_context::ContextAnswer, RemoteError> {
        let request = self.leased(job_id, "context", lease_token).json(params);
        decode(self.send(request).await?).await
    }

    /// `GET /api/devices/self/decisions/{id}`: where one of this device's decisions is.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn get_decision(
        &self,
        decision_id: &DecisionId,
    ) -> Result<DeviceDecision, RemoteError> {
        let path = format!("/api/devices/self/decisions/{decision_id}");
        decode(self.send(self.request(reqwest::Method::GET, &path)).await?).await
    }

    /// `POST /api/devices/self/decisions/{id}/close`: answered here, expired or withdrawn.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure (409 when it was no longer pending).
    pub async fn close_decision(
        &self,
        decision_id: &DecisionId,
        params: &CloseRequest,
    ) -> Result<(), RemoteError> {
        let path = format!("/api/devices/self/decisions/{decision_id}/close");
        let request = self.request(reqwest::Method::POST, &path).json(params);
        self.send(request).await.map(drop)
    }

    /// `DELETE /api/devices/self`: the device removes itself.
    ///
    /// # Errors
    /// [`RemoteError`] for any failure.
    pub async fn delete_self(&self) -> Result<(), RemoteError> {
        self.send(self.request(reqwest::Method::DELETE, routes::DEVICE_SELF))
            .await
            .map(drop)
    }

    /// Sends a device call, noting an outage when the server cannot be reached.
    async fn send(&self, request: RequestBuilder) -> Result<Response, RemoteError> {
        send(request, Some(&self.connectivity)).await
    }

    fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.server
            .http
            .request(method, format!("{}{path}", self.server.base))
            .bearer_auth(&self.token)
            .header(routes::PROTOCOL_HEADER, PROTOCOL_VERSION.to_string())
    }

    fn leased(&self, job_id: &JobId, action: &str, lease_token: &LeaseToken) -> RequestBuilder {
        self.request(
            reqwest::Method::POST,
            &routes::device_job(job_id.as_str(), action),
        )
        .header(routes::LEASE_HEADER, lease_token.expose())
    }
}

/// Sends a request; a non-2xx answer becomes an [`RemoteError`]. A 429 is waited out (its
/// `Retry-After`, when short) and retried a few times before it is handed to the caller;
/// unreachable servers and 5xx answers are noted on `connectivity`, dated from when the
/// request went out.
async fn send(
    request: RequestBuilder,
    connectivity: Option<&Connectivity>,
) -> Result<Response, RemoteError> {
    let mut request = request;
    let mut retries = 0;
    loop {
        // Bodies here are JSON, so a request can be cloned for a retry; if not, no retry.
        let again = request.try_clone();
        let sent = Instant::now();
        let result = send_once(request).await;
        match &result {
            Err(RemoteError::RateLimited { retry_after })
                if retries < MAX_RATE_LIMIT_RETRIES && *retry_after <= MAX_INLINE_RETRY_AFTER =>
            {
                let Some(again) = again else {
                    return result;
                };
                tracing::warn!("rate limited; trying again in {retry_after:?}");
                tokio::time::sleep(*retry_after).await;
                retries += 1;
                request = again;
            }
            Err(err) => {
                if let Some(connectivity) = connectivity {
                    if err.is_outage() {
                        connectivity.note_outage(sent);
                    } else {
                        connectivity.note_answer();
                    }
                }
                return result;
            }
            Ok(_) => {
                if let Some(connectivity) = connectivity {
                    connectivity.note_answer();
                }
                return result;
            }
        }
    }
}

async fn send_once(request: RequestBuilder) -> Result<Response, RemoteError> {
    let response = request
        .send()
        .await
        .map_err(|err| RemoteError::Network(describe(&err)))?;
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status().as_u16();
    if status == 429 {
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, SystemTime::now()))
            .unwrap_or(DEFAULT_RETRY_AFTER);
        return Err(RemoteError::RateLimited { retry_after });
    }
    let body = response.bytes().await.unwrap_or_default();
    Err(classify(status, &body))
}

/// A `Retry-After` value: delay-seconds or an HTTP date (RFC 9110 §10.2.3), capped.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(seconds) = value.parse::<u64>() {
        Duration::from_secs(seconds)
    } else {
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        let at = SystemTime::from(at.with_timezone(&chrono::Utc));
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Turns an error answer into an [`RemoteError`].
pub fn classify(status: u16, body: &[u8]) -> RemoteError {
    let (code, message) = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(parsed) => (parsed.error.code, parsed.error.message),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let message: String = text.chars().take(200).collect();
            (format!("http_{status}"), message)
        }
    };
    match (status, code.as_str()) {
        (401, "revoked") => RemoteError::Revoked,
        (409, "stale_lease") => RemoteError::StaleLease,
        _ => RemoteError::Http {
            status,
            code,
            message,
        },
    }
}

async fn decode<T: DeserializeOwned>(response: Response) -> Result<T, RemoteError> {
    let status = response.status().as_u16();
    let body = response
        .bytes()
        .await
        .map_err(|err| RemoteError::Network(describe(&err)))?;
    serde_json::from_slice(&body).map_err(|err| RemoteError::Http {
        status,
        code: "invalid_response".to_owned(),
        message: format!("the answer is not what protocol v{PROTOCOL_VERSION} says: {err}"),
    })
}

/// reqwest's top-level message hides the cause ("error sending request"); keep the chain.
fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: u16, body: &str, expected: RemoteError) {
        assert_eq!(
            classify(status, body.as_bytes()),
            expected,
            "{status} {body}"
        );
    }

    #[test]
    fn error_bodies_become_typed_errors() {
        check(
            401,
            r#"{"error":{"code":"revoked","message":"gone"}}"#,
            RemoteError::Revoked,
        );
        check(
            409,
            r#"{"error":{"code":"stale_lease","message":"old"}}"#,
            RemoteError::StaleLease,
        );
        check(
            409,
            r#"{"error":{"code":"invalid_state","message":"done"}}"#,
            RemoteError::Http {
                status: 409,
                code: "invalid_state".into(),
                message: "done".into(),
            },
        );
        check(
            401,
            r#"{"error":{"code":"unauthorized","message":"who?"}}"#,
            RemoteError::Http {
                status: 401,
                code: "unauthorized".into(),
                message: "who?".into(),
            },
        );
        check(
            502,
            "Bad Gateway",
            RemoteError::Http {
                status: 502,
                code: "http_502".into(),
                message: "Bad Gateway".into(),
            },
        );
    }

    #[test]
    fn only_outages_are_transient() {
        assert!(RemoteError::Network("refused".into()).is_transient());
        assert!(classify(503, b"").is_transient());
        assert!(classify(429, b"").is_transient());
        assert!(!classify(422, b"").is_transient());
        assert!(!RemoteError::Revoked.is_transient());
        assert!(!RemoteError::StaleLease.is_transient());
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_network_error_never_a_revocation() -> anyhow::Result<()> {
        // A port that was free a moment ago: connecting is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let server = ServerClient::new(&format!("http://127.0.0.1:{port}"))?;
        let client = DeviceClient::new(server, "tdt_x".into());
        let err = client.claim().await.err();
        assert!(matches!(&err, Some(RemoteError::Network(_))), "{err:?}");
        assert!(err.is_some_and(|err| err.is_transient()));
        Ok(())
    }

    /// A server that answers 429 with `Retry-After: 1` first: the call waits a second and
    /// goes through; a long `Retry-After` is handed to the caller instead.
    #[tokio::test]
    async fn a_rate_limit_is_waited_out_as_the_server_asks() -> anyhow::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let answers = [
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 204 No Content\r\n\r\n",
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 120\r\ncontent-length: 0\r\n\r\n",
        ];
        let server = tokio::spawn(async move {
            for answer in answers {
                let (mut socket, _) = listener.accept().await?;
                let mut buffer = vec![0u8; 8192];
                let _ = socket.read(&mut buffer).await?;
                socket.write_all(answer.as_bytes()).await?;
                socket.shutdown().await?;
            }
            anyhow::Ok(())
        });
        let client = DeviceClient::new(ServerClient::new(&base)?, "tdt_x".into());
        let started = Instant::now();
        let claimed = client.claim().await;
        assert!(matches!(claimed, Ok(None)), "{claimed:?}");
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let err = client.claim().await.err();
        assert_eq!(
            err,
            Some(RemoteError::RateLimited {
                retry_after: Duration::from_secs(120)
            })
        );
        server.await??;
        Ok(())
    }

    #[test]
    fn retry_after_is_seconds_or_a_date_and_is_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        let check = |value: &str| parse_retry_after(value, now);
        assert_eq!(check("3"), Some(Duration::from_secs(3)));
        assert_eq!(check(" 0 "), Some(Duration::ZERO));
        assert_eq!(check("999999"), Some(MAX_RETRY_AFTER));
        // 2015-10-21 07:28:00 GMT is `now`; 07:28:30 is 30 s later.
        assert_eq!(
            check("Wed, 21 Oct 2015 07:28:30 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(check("Wed, 21 Oct 2015 07:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(check("soon"), None);
    }

    #[test]
    fn outages_are_told_apart_from_refusals() {
        assert!(RemoteError::Network("reset".into()).is_outage());
        assert!(classify(503, b"").is_outage());
        assert!(!classify(409, br#"{"error":{"code":"stale_lease","message":"x"}}"#).is_outage());
        let limited = RemoteError::RateLimited {
            retry_after: Duration::from_secs(2),
        };
        assert!(limited.is_transient() && !limited.is_outage());
        assert_eq!(limited.retry_after(), Duration::from_secs(2));
    }

    #[test]
    fn outages_are_remembered_as_episodes() {
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let connectivity = Connectivity::default();
        assert!(!connectivity.unreachable_between(at(0), at(100)));
        // Down from 10 to 20 (the failures of calls sent at 12 and 15 belong to the same
        // episode).
        connectivity.note_answer_at(at(5));
        connectivity.note_outage(at(10));
        connectivity.note_outage(at(12));
        connectivity.note_outage(at(15));
        connectivity.note_answer_at(at(20));
        assert!(connectivity.unreachable_between(at(0), at(10)));
        assert!(connectivity.unreachable_between(at(12), at(13)));
        assert!(connectivity.unreachable_between(at(20), at(30)));
        assert!(!connectivity.unreachable_between(at(0), at(9)));
        assert!(!connectivity.unreachable_between(at(21), at(30)));
        // Down again from 40, still down.
        connectivity.note_outage(at(40));
        assert!(connectivity.unreachable_between(at(100), at(200)));
        assert!(!connectivity.unreachable_between(at(25), at(39)));
    }

    /// A partition that holds connections open: the calls sent at 31 and 30 fail only at
    /// their timeout, long after a lease confirmed at 30 ran out (at 33). The outage is
    /// dated from the first send, so the lease is seen to have run out while cut off.
    #[test]
    fn an_outage_dates_from_when_the_failed_call_went_out() {
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let connectivity = Connectivity::default();
        connectivity.note_answer_at(at(30));
        assert!(!connectivity.unreachable_between(at(30), at(33)));
        // Noted at 61 and 62, when they timed out.
        connectivity.note_outage(at(31));
        connectivity.note_outage(at(30));
        assert!(connectivity.unreachable_between(at(30), at(33)));
        connectivity.note_answer_at(at(62));
        assert!(!connectivity.unreachable_between(at(0), at(29)));
        assert!(!connectivity.unreachable_between(at(63), at(80)));
        // A call sent at 65 failed after another got an answer at 70: the server was
        // reachable at 70, so this outage starts there, not at the send.
        connectivity.note_answer_at(at(70));
        connectivity.note_outage(at(65));
        assert!(!connectivity.unreachable_between(at(63), at(69)));
        assert!(connectivity.unreachable_between(at(70), at(71)));
    }

    #[test]
    fn the_event_stream_url_follows_the_server_scheme() -> anyhow::Result<()> {
        for (base, expected) in [
            (
                "http://127.0.0.1:8080",
                "ws://127.0.0.1:8080/api/devices/self/events",
            ),
            (
                "https://t.example/base",
                "wss://t.example/base/api/devices/self/events",
            ),
        ] {
            let client = DeviceClient::new(ServerClient::new(base)?, "tdt_x".into());
            let request = client.events_request()?;
            assert_eq!(request.uri().to_string(), expected);
            assert_eq!(
                request.headers().get("authorization").map(|v| v.as_bytes()),
                Some(&b"Bearer tdt_x"[..])
            );
            assert!(request.headers().contains_key(routes::PROTOCOL_HEADER));
        }
        Ok(())
    }

    #[test]
    fn server_urls_are_normalized() {
        assert_eq!(
            normalize_server_url("http://127.0.0.1:8080/"),
            Ok("http://127.0.0.1:8080".into())
        );
        assert_eq!(
            normalize_server_url(" https://t.example/base/ "),
            Ok("https://t.example/base".into())
        );
        assert!(normalize_server_url("ftp://t.example").is_err());
        assert!(normalize_server_url("t.example").is_err());
        assert!(normalize_server_url("https://t.example/?x=1").is_err());
    }
}
