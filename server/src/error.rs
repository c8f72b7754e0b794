//! The one error type of the server and its HTTP answer.
//!
//! Every failure becomes an [`ApiError`]: a protocol [`Code`] (which fixes the status) and a
//! human sentence. Database faults are logged here and answered as `internal` without detail.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use tether_protocol::{Code, ErrorBody};

/// `Retry-After` of a 429 that was given no time of its own.
const DEFAULT_RETRY_AFTER_SECS: u64 = 60;

/// An error answered as `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    code: Code,
    message: String,
    /// Seconds for the `Retry-After` header (rate limits).
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Adds `Retry-After: secs` to the answer.
    #[must_use]
    pub fn with_retry_after(mut self, secs: u64) -> ApiError {
        self.retry_after = Some(secs);
        self
    }

    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// A missing object, or one that belongs to another account (never a 403).
    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(Code::NotFound, format!("No such {what}."))
    }

    /// A field that parsed but whose value is not acceptable.
    pub fn invalid_field(field: &str, why: &str) -> ApiError {
        ApiError::new(Code::InvalidField, format!("{field}: {why}"))
    }

    /// A fault on our side; the cause is logged, never sent.
    pub fn internal(cause: &dyn fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "internal error");
        ApiError::new(Code::Internal, "Something went wrong on the server.")
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut answer = HttpResponse::build(self.status_code());
        answer.insert_header(("cache-control", "no-store"));
        // Every 429 and 503 says when to come back, even one whose maker gave no time.
        let retry_after = self.retry_after.or(match self.code.status() {
            429 => Some(DEFAULT_RETRY_AFTER_SECS),
            503 => Some(1),
            _ => None,
        });
        if let Some(secs) = retry_after {
            answer.insert_header(("retry-after", secs.to_string()));
        }
        answer.json(ErrorBody::new(self.code, self.message.clone()))
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> ApiError {
        match error {
            sqlx::Error::PoolTimedOut => {
                tracing::warn!("database pool timed out");
                ApiError::new(Code::Unavailable, "The database is busy; try again.")
            }
            // A race the code did not settle itself (those it expects are answered where
            // they happen, such as `email_taken`): a conflict, never a 500.
            sqlx::Error::Database(database) if database.is_unique_violation() => {
                tracing::warn!(constraint = ?database.constraint(), "unique violation");
                ApiError::new(
                    Code::InvalidState,
                    "Another request changed this at the same moment; try again.",
                )
            }
            other => ApiError::internal(&other),
        }
    }
}

impl From<serde_json::Error> for ApiError {
    fn from(error: serde_json::Error) -> ApiError {
        ApiError::internal(&format_args!("stored JSON does not decode: {error}"))
    }
}
