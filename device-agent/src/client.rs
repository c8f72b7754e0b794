//! The HTTP client for every call the agent makes to the server.
//!
//! Device calls carry `Authorization: Bearer tdt_…` and `x-tether-protocol: 1`; lease-bound
//! calls also carry `x-tether-lease`. Error answers are decoded from the documented body
//! `{"error": {"code", "message"}}` into [`ApiError`], so callers match on meaning
//! (revoked, stale lease) rather than on status numbers.

use std::time::Duration;

use reqwest::{RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use tether_protocol::devices::{HeartbeatParams, HeartbeatResponse};
use tether_protocol::jobs::{
    ClaimResponse, ClaimedJob, CompleteParams, ProgressParams, ProgressResponse,
};
use tether_protocol::pairing::{PairParams, PairResponse, RegisterParams, RegisterResponse};
use tether_protocol::{routes, Code, ErrorBody, JobId, PROTOCOL_VERSION};

/// Longest a single call may take; a hung connection must not hold a run's report forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call to the server did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 401 `revoked`: the device token is dead for good. Forget it.
    #[error("this computer was revoked from the server")]
    Revoked,
    /// 409 `stale_lease`: this run's lease is wrong, old or expired. Stop its side effects.
    #[error("the server no longer holds this run's lease")]
    StaleLease,
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

impl ApiError {
    /// Whether trying again later may succeed: no answer, a server fault or a rate limit.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Network(_) => true,
            ApiError::Http { status, .. } => *status >= 500 || *status == 429,
            ApiError::Revoked | ApiError::StaleLease => false,
        }
    }

    /// The error code the server sent, if it sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ApiError::Revoked => Some(Code::Revoked.name()),
            ApiError::StaleLease => Some(Code::StaleLease.name()),
            ApiError::Http { code, .. } => Some(code),
            ApiError::Network(_) => None,
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
    /// [`ApiError`] for any failure.
    pub async fn pair(&self, params: &PairParams) -> Result<PairResponse, ApiError> {
        let request = self.post(routes::PAIR).json(params);
        decode(send(request).await?).await
    }

    /// `POST /api/devices/register`; `authorization_pending` and friends come back as
    /// [`ApiError::Http`] with that code.
    ///
    /// # Errors
    /// [`ApiError`] for any failure.
    pub async fn register(&self, params: &RegisterParams) -> Result<RegisterResponse, ApiError> {
        let request = self.post(routes::REGISTER).json(params);
        decode(send(request).await?).await
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
        DeviceClient { server, token }
    }

    pub fn base(&self) -> &str {
        self.server.base()
    }

    /// `POST /api/devices/self/heartbeat`.
    ///
    /// # Errors
    /// [`ApiError`] for any failure.
    pub async fn heartbeat(&self, params: &HeartbeatParams) -> Result<HeartbeatResponse, ApiError> {
        let request = self
            .request(reqwest::Method::POST, routes::HEARTBEAT)
            .json(params);
        decode(send(request).await?).await
    }

    /// `POST /api/devices/self/claim`: a job, or `None` when nothing is queued for us.
    ///
    /// # Errors
    /// [`ApiError`] for any failure.
    pub async fn claim(&self) -> Result<Option<ClaimedJob>, ApiError> {
        let request = self
            .request(reqwest::Method::POST, routes::CLAIM)
            .json(&serde_json::json!({}));
        let response = send(request).await?;
        if response.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let claimed: ClaimResponse = decode(response).await?;
        Ok(Some(claimed.job))
    }

    /// `POST /api/devices/self/jobs/{id}/progress` under the run's lease.
    ///
    /// # Errors
    /// [`ApiError`] for any failure.
    pub async fn progress(
        &self,
        job_id: &JobId,
        lease_token: &str,
        params: &ProgressParams,
    ) -> Result<ProgressResponse, ApiError> {
        let request = self.leased(job_id, "progress", lease_token).json(params);
        decode(send(request).await?).await
    }

    /// `POST /api/devices/self/jobs/{id}/complete` under the run's lease. The answer's job is
    /// not needed by the agent, so only success is reported.
    ///
    /// # Errors
    /// [`ApiError`] for any failure.
    pub async fn complete(
        &self,
        job_id: &JobId,
        lease_token: &str,
        params: &CompleteParams,
    ) -> Result<(), ApiError> {
        let request = self.leased(job_id, "complete", lease_token).json(params);
        send(request).await.map(drop)
    }

    /// `DELETE /api/devices/self`: the device removes itself.
    ///
    /// # Errors
    /// [`ApiError`] for any failure.
    pub async fn delete_self(&self) -> Result<(), ApiError> {
        send(self.request(reqwest::Method::DELETE, routes::DEVICE_SELF))
            .await
            .map(drop)
    }

    fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        self.server
            .http
            .request(method, format!("{}{path}", self.server.base))
            .bearer_auth(&self.token)
            .header(routes::PROTOCOL_HEADER, PROTOCOL_VERSION.to_string())
    }

    fn leased(&self, job_id: &JobId, action: &str, lease_token: &str) -> RequestBuilder {
        self.request(
            reqwest::Method::POST,
            &routes::device_job(job_id.as_str(), action),
        )
        .header(routes::LEASE_HEADER, lease_token)
    }
}

/// Sends a request; a non-2xx answer becomes an [`ApiError`].
async fn send(request: RequestBuilder) -> Result<Response, ApiError> {
    let response = request
        .send()
        .await
        .map_err(|err| ApiError::Network(describe(&err)))?;
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap_or_default();
    Err(classify(status, &body))
}

/// Turns an error answer into an [`ApiError`].
pub fn classify(status: u16, body: &[u8]) -> ApiError {
    let (code, message) = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(parsed) => (parsed.error.code, parsed.error.message),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let message: String = text.chars().take(200).collect();
            (format!("http_{status}"), message)
        }
    };
    match (status, code.as_str()) {
        (401, "revoked") => ApiError::Revoked,
        (409, "stale_lease") => ApiError::StaleLease,
        _ => ApiError::Http {
            status,
            code,
            message,
        },
    }
}

async fn decode<T: DeserializeOwned>(response: Response) -> Result<T, ApiError> {
    let status = response.status().as_u16();
    let body = response
        .bytes()
        .await
        .map_err(|err| ApiError::Network(describe(&err)))?;
    serde_json::from_slice(&body).map_err(|err| ApiError::Http {
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

    fn check(status: u16, body: &str, expected: ApiError) {
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
            ApiError::Revoked,
        );
        check(
            409,
            r#"{"error":{"code":"stale_lease","message":"old"}}"#,
            ApiError::StaleLease,
        );
        check(
            409,
            r#"{"error":{"code":"invalid_state","message":"done"}}"#,
            ApiError::Http {
                status: 409,
                code: "invalid_state".into(),
                message: "done".into(),
            },
        );
        check(
            401,
            r#"{"error":{"code":"unauthorized","message":"who?"}}"#,
            ApiError::Http {
                status: 401,
                code: "unauthorized".into(),
                message: "who?".into(),
            },
        );
        check(
            502,
            "Bad Gateway",
            ApiError::Http {
                status: 502,
                code: "http_502".into(),
                message: "Bad Gateway".into(),
            },
        );
    }

    #[test]
    fn only_outages_are_transient() {
        assert!(ApiError::Network("refused".into()).is_transient());
        assert!(classify(503, b"").is_transient());
        assert!(classify(429, b"").is_transient());
        assert!(!classify(422, b"").is_transient());
        assert!(!ApiError::Revoked.is_transient());
        assert!(!ApiError::StaleLease.is_transient());
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
        assert!(matches!(&err, Some(ApiError::Network(_))), "{err:?}");
        assert!(err.is_some_and(|err| err.is_transient()));
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
