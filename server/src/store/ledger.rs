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
    PasskeyAdded,
    PasskeyRemoved,
    ConsoleUnlocked,
    ConsoleLocked,
    JobCreated,
    JobEnded,
    JobReattached,
    JobResumed,
    SecretRelayed,
    DecisionAsked,
    DecisionAnswered,
    EvidenceUploaded,
    EvidenceRelease,
    EvidenceDiscard,
    SessionDeleted,
    GitPushed,
    GitPullRequest,
    GitMerged,
    NotificationSettingsChanged,
    ConsoleOpened,
    ConsoleCommand,
}

impl LedgerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerKind::DevicePaired => "device.paired",
            LedgerKind::DeviceRevoked => "device.revoked",
            LedgerKind::DeviceRemoved => "device.removed",
            LedgerKind::PasskeyAdded => "passkey.added",
            LedgerKind::PasskeyRemoved => "passkey.removed",
            LedgerKind::ConsoleUnlocked => "console.unlocked",
            LedgerKind::ConsoleLocked => "console.locked",
            LedgerKind::JobCreated => "job.created",
            LedgerKind::JobEnded => "job.ended",
            LedgerKind::JobReattached => "job.reattached",
            LedgerKind::JobResumed => "job.resumed",
            LedgerKind::SecretRelayed => "secret.relayed",
            LedgerKind::DecisionAsked => "decision.asked",
            LedgerKind::DecisionAnswered => "decision.answered",
            LedgerKind::EvidenceUploaded => "evidence.uploaded",
            LedgerKind::EvidenceRelease => "evidence.release",
            LedgerKind::EvidenceDiscard => "evidence.discard",
            LedgerKind::SessionDeleted => "session.deleted",
            LedgerKind::GitPushed => "git.pushed",
            LedgerKind::GitPullRequest => "git.pull_request",
            LedgerKind::GitMerged => "git.merged",
            LedgerKind::NotificationSettingsChanged => "account.notification_settings",
            LedgerKind::ConsoleOpened => "console.opened",
            LedgerKind::ConsoleCommand => "console.command",
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

/// What the platform admin's ledger is narrowed to; each `None` narrows nothing.
#[derive(Debug, Clone, Default)]
pub struct LedgerSearch {
    pub account_id: Option<AccountId>,
    /// Entries about this device: its own, and those whose detail names it (its jobs).
    pub device_id: Option<String>,
    /// A kind, as [`LedgerKind::as_str`] writes it.
    pub kind: Option<String>,
    /// From this moment on (inclusive).
    pub since: Option<Millis>,
    /// Before this moment.
    pub until: Option<Millis>,
    pub limit: i64,
}

/// An entry of any account, with the account's name, as the admin page shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AdminEntry {
    pub at: Millis,
    pub kind: String,
    pub subject: String,
    pub detail_json: String,
    pub account_id: String,
    pub account_name: String,
}

/// Every account's entries that `search` admits, newest first, at most `search.limit`.
///
/// # Errors
/// A database error.
pub async fn search(
    store: &crate::store::Store,
    search: &LedgerSearch,
) -> Result<Vec<AdminEntry>, ApiError> {
    let sql = "SELECT l.at, l.kind, l.subject, l.detail_json, l.account_id, \
               a.name AS account_name FROM ledger l JOIN accounts a ON a.id = l.account_id \
               WHERE ($1 IS NULL OR l.account_id = $1) \
               AND ($2 IS NULL OR l.subject = $2 OR l.detail_json LIKE $3) \
               AND ($4 IS NULL OR l.kind = $4) \
               AND ($5 IS NULL OR l.at >= $5) AND ($6 IS NULL OR l.at < $6) \
               ORDER BY l.at DESC, l.id DESC LIMIT $7";
    let account = search.account_id.as_ref().map(|id| id.as_str().to_owned());
    // Ids hold no LIKE wildcards (they are parsed before they get here).
    let mentions = search.device_id.as_ref().map(|id| format!("%\"{id}\"%"));
    let entries = crate::store::on_read!(store, |pool| sqlx::query_as(sql)
        .bind(&account)
        .bind(&search.device_id)
        .bind(&mentions)
        .bind(&search.kind)
        .bind(search.since)
        .bind(search.until)
        .bind(search.limit)
        .fetch_all(pool)
        .await)?;
    Ok(entries)
}

/// The kinds the ledger holds, for the admin page's filter.
///
/// # Errors
/// A database error.
pub async fn kinds(store: &crate::store::Store) -> Result<Vec<String>, ApiError> {
    let sql = "SELECT DISTINCT kind FROM ledger ORDER BY kind";
    let kinds =
        crate::store::on_read!(store, |pool| sqlx::query_scalar(sql).fetch_all(pool).await)?;
    Ok(kinds)
}

/// Every account's id and name, by name: whose the admin page's rows are.
///
/// # Errors
/// A database error.
pub async fn account_names(store: &crate::store::Store) -> Result<Vec<(String, String)>, ApiError> {
    let sql = "SELECT id, name FROM accounts ORDER BY name, id";
    let names = crate::store::on_read!(store, |pool| sqlx::query_as(sql).fetch_all(pool).await)?;
    Ok(names)
}

fn uuid_like() -> String {
    // Ledger ids share the time-ordered shape of every other id.
    tether_protocol::JobId::generate().to_string()
}
