//! The audit ledger: what happened to an account, written in the same transaction as the
//! change it records.
//!
//! **Invariant:** entries name things (ids, outcomes, secret names), never values, tokens or
//! file text.

use serde_json::Value;
use tether_protocol::AccountId;

use crate::clock::Millis;
use crate::error::ApiError;
use crate::store::{on_tx, Tx};

/// What a ledger entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerKind {
    DevicePaired,
    DeviceRevoked,
    DeviceRemoved,
    JobCreated,
    JobEnded,
    JobReattached,
    JobResumed,
    SecretRelayed,
    DecisionAsked,
    DecisionAnswered,
    EvidenceUploaded,
    GitPushed,
    GitPullRequest,
    GitMerged,
}

impl LedgerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerKind::DevicePaired => "device.paired",
            LedgerKind::DeviceRevoked => "device.revoked",
            LedgerKind::DeviceRemoved => "device.removed",
            LedgerKind::JobCreated => "job.created",
            LedgerKind::JobEnded => "job.ended",
            LedgerKind::JobReattached => "job.reattached",
            LedgerKind::JobResumed => "job.resumed",
            LedgerKind::SecretRelayed => "secret.relayed",
            LedgerKind::DecisionAsked => "decision.asked",
            LedgerKind::DecisionAnswered => "decision.answered",
            LedgerKind::EvidenceUploaded => "evidence.uploaded",
            LedgerKind::GitPushed => "git.pushed",
            LedgerKind::GitPullRequest => "git.pull_request",
            LedgerKind::GitMerged => "git.merged",
        }
    }
}

/// An entry about to be written: by [`record_entry`], or by a statement that stores it
/// with the change it records (its columns in [`Entry::COLUMNS`] order).
#[derive(Debug, Clone)]
pub struct Entry {
    pub(crate) id: String,
    pub(crate) kind: LedgerKind,
    pub(crate) subject: String,
    pub(crate) detail_json: String,
}

impl Entry {
    /// The columns an entry is inserted with.
    pub(crate) const COLUMNS: &'static str = "id, account_id, at, kind, subject, detail_json";

    pub fn new(kind: LedgerKind, subject: &str, detail: Value) -> Entry {
        Entry {
            id: uuid_like(),
            kind,
            subject: subject.to_owned(),
            detail_json: detail.to_string(),
        }
    }
}

/// Appends one entry inside `tx`.
///
/// # Errors
/// A database error.
pub async fn record(
    tx: &mut Tx,
    account_id: &AccountId,
    at: Millis,
    kind: LedgerKind,
    subject: &str,
    detail: Value,
) -> Result<(), ApiError> {
    record_entry(tx, account_id, at, Entry::new(kind, subject, detail)).await
}

/// Appends `entry` inside `tx`.
///
/// # Errors
/// A database error.
pub async fn record_entry(
    tx: &mut Tx,
    account_id: &AccountId,
    at: Millis,
    entry: Entry,
) -> Result<(), ApiError> {
    let sql = format!(
        "INSERT INTO ledger ({}) VALUES ($1, $2, $3, $4, $5, $6)",
        Entry::COLUMNS
    );
    on_tx!(tx, |conn| sqlx::query(&sql)
        .bind(&entry.id)
        .bind(account_id.as_str())
        .bind(at)
        .bind(entry.kind.as_str())
        .bind(&entry.subject)
        .bind(&entry.detail_json)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    Ok(())
}

/// A ledger entry as tests and (later) the admin pages read it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LedgerEntry {
    pub at: Millis,
    pub kind: String,
    pub subject: String,
    pub detail_json: String,
}

/// The account's entries, oldest first.
///
/// # Errors
/// A database error.
pub async fn list(
    store: &crate::store::Store,
    account_id: &AccountId,
) -> Result<Vec<LedgerEntry>, ApiError> {
    let sql = "SELECT at, kind, subject, detail_json FROM ledger WHERE account_id = $1 \
               ORDER BY at, id";
    let entries = crate::store::on_read!(store, |pool| sqlx::query_as(sql)
        .bind(account_id.as_str())
        .fetch_all(pool)
        .await)?;
    Ok(entries)
}

fn uuid_like() -> String {
    // Ledger ids share the time-ordered shape of every other id.
    tether_protocol::JobId::generate().to_string()
}
