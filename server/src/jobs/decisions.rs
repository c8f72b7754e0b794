//! Decisions: the questions a run asks its owner before an action, and their answers.
//!
//! A device asks under the run's lease ([`ask`]); the job is `waiting` while any of its
//! decisions is pending. The owner answers on the web ([`answer`]) unless the computer keeps
//! answers to itself (`acceptWebApprovals` off in its last report). The device reads its
//! decision ([`for_device`]) and closes it when the owner answered on the computer, when it
//! stopped waiting, or when the run no longer needs it ([`close`]). A run's end settles what
//! is still pending (`job_rows::settle_open`, in the transaction that ends it); the sweeper
//! expires overdue ones ([`expire_overdue`]).
//!
//! Pages call [`list`], [`for_job`] and [`pending_summary`].
//!
//! **Invariant:** the first valid answer wins. Every settlement is a conditional `UPDATE` of
//! a `pending` row; whoever changes no row gets 409 `already_answered`.
//!
//! **Invariant:** a pending decision past `expires_at` is expired, whether or not the sweeper
//! has written that yet: it reads as expired and nothing can answer it. A timeout never
//! allows.
//!
//! **Invariant:** transactions lock the job row before they change a decision of it, so
//! answers, asks and a run's end never wait on each other in opposite orders.
//!
//! **Invariant:** the ledger and the job's timeline name a decision's kind and answer, never
//! its question or action.
//!
//! **Invariant:** a write's `preview` (file text, redacted on the computer) lives only while
//! its decision is pending: migration 0012's trigger clears it in the statement that settles
//! the decision, whichever code runs it, and it is never shown for a settled one.

use std::time::Duration;

use serde_json::json;
use tether_protocol::decisions::{
    Answer, AnswerRequest, AnsweredBy, AskRequest, CloseReason, CloseRequest, Decision,
    DecisionChange, DecisionState, DeviceDecision, Scope, KINDS, MAX_ACTION_BYTES,
    MAX_EXPIRES_IN_SECS, MAX_PREVIEW_BYTES, MAX_PREVIEW_LINES, MAX_QUESTION_CHARS,
};
use tether_protocol::push::NotificationAnswer;
use tether_protocol::text::{self, TextKind};
use tether_protocol::{AccountId, Code, DecisionId, DeviceId, JobId, LeaseToken};

use crate::accounts::parse_name;
use crate::clock::{secs, to_time, Millis};
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::store::job_rows::{self, append_events, JobRow};
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_reads, on_tx, stored_id, ReadSource, Store, Tx};

/// Most decisions one list answer holds (newest first).
pub const LIST_LIMIT: i64 = 200;
/// Most decisions one run may have pending at once.
pub const MAX_PENDING_PER_JOB: i64 = 20;
/// Most overdue decisions one sweep expires; the next sweep takes the rest.
pub const EXPIRE_BATCH: i64 = 500;

/// A decision that left `pending`, for the wait-time metric and the account's followers.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub account_id: AccountId,
    pub decision_id: DecisionId,
    /// The decision's job.
    pub job_id: JobId,
    pub how: Settlement,
    /// From the ask to the settlement.
    pub waited: Duration,
}

/// How a decision left `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    AnsweredOnWeb,
    AnsweredOnComputer,
    Expired,
    Withdrawn,
}

impl Settlement {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Settlement::AnsweredOnWeb => "answered_web",
            Settlement::AnsweredOnComputer => "answered_computer",
            Settlement::Expired => "expired",
            Settlement::Withdrawn => "withdrawn",
        }
    }

    /// What the account's followers are told.
    pub fn change(self) -> DecisionChange {
        match self {
            Settlement::AnsweredOnWeb | Settlement::AnsweredOnComputer => DecisionChange::Answered,
            Settlement::Expired => DecisionChange::Expired,
            Settlement::Withdrawn => DecisionChange::Withdrawn,
        }
    }
}

/// A question the device asked, accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub decision_id: DecisionId,
}

/// A web answer that won: tell the device.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub decision: Decision,
    pub settled: Settled,
}

/// A device's close that changed the decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Closed {
    pub decision: DeviceDecision,
    pub settled: Settled,
}

/// How many of an account's decisions are pending, and the newest one's ask time: two
/// reads that differ mean the pending set changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PendingSummary {
    pub count: u64,
    pub newest_at: Millis,
}

/// A validated [`AskRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDecision {
    kind: String,
    question: String,
    /// Compact JSON of an object, at most [`MAX_ACTION_BYTES`].
    action_json: String,
    action_hash: String,
    expires_in: Millis,
    /// A write's proposed change, checked by [`check_preview`].
    preview: Option<String>,
}

impl TryFrom<AskRequest> for NewDecision {
    type Error = ApiError;

    fn try_from(request: AskRequest) -> Result<NewDecision, ApiError> {
        if !KINDS.contains(&request.kind.as_str()) {
            return Err(ApiError::invalid_field(
                "kind",
                &format!("must be one of {}.", KINDS.join(", ")),
            ));
        }
        // The computer words the question from the action (a command line may hold a tab, a
        // newline or a terminal code): made visible rather than refused, so the run can ask.
        let question = text::sanitize(&request.question, TextKind::Name);
        let question = parse_name("question", &question, MAX_QUESTION_CHARS)?;
        if !request.action.is_object() {
            return Err(ApiError::invalid_field("action", "must be a JSON object."));
        }
        let action_json = serde_json::to_string(&request.action)?;
        if action_json.len() > MAX_ACTION_BYTES {
            return Err(ApiError::invalid_field(
                "action",
                &format!("must be at most {MAX_ACTION_BYTES} bytes as JSON."),
            ));
        }
        let hash = &request.action_hash;
        let hex = hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !hex {
            return Err(ApiError::invalid_field(
                "actionHash",
                "must be a SHA-256 digest: 64 lowercase hex digits.",
            ));
        }
        if !(1..=MAX_EXPIRES_IN_SECS).contains(&request.expires_in_secs) {
            return Err(ApiError::invalid_field(
                "expiresInSecs",
                &format!("must be 1 to {MAX_EXPIRES_IN_SECS}."),
            ));
        }
        let preview = request.preview.as_deref().map(check_preview).transpose()?;
        Ok(NewDecision {
            kind: request.kind,
            question,
            action_json,
            action_hash: request.action_hash,
            expires_in: secs(u64::from(request.expires_in_secs)),
            preview,
        })
    }
}

/// A preview within its bounds, control characters other than layout made visible (file
/// text may hold a terminal code; the owner should see something odd, not lose the diff).
///
/// # Errors
/// 422 `preview` past [`MAX_PREVIEW_BYTES`] or [`MAX_PREVIEW_LINES`].
fn check_preview(preview: &str) -> Result<String, ApiError> {
    if preview.len() > MAX_PREVIEW_BYTES || preview.lines().count() > MAX_PREVIEW_LINES {
        return Err(ApiError::invalid_field(
            "preview",
            &format!(
                "must be at most {} KiB and {MAX_PREVIEW_LINES} lines.",
                MAX_PREVIEW_BYTES / 1024
            ),
        ));
    }
    Ok(text::sanitize(preview, TextKind::MultiLine).into_owned())
}

/// A checked [`AnswerRequest`]: deny only ever answers once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebAnswer {
    answer: Answer,
    scope: Scope,
}

impl TryFrom<AnswerRequest> for WebAnswer {
    type Error = ApiError;

    fn try_from(request: AnswerRequest) -> Result<WebAnswer, ApiError> {
        check_scope(request.answer, request.scope)?;
        Ok(WebAnswer {
            answer: request.answer,
            scope: request.scope,
        })
    }
}

/// A checked [`CloseRequest`]: what the device's close would write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceClose(Target);

impl TryFrom<CloseRequest> for DeviceClose {
    type Error = ApiError;

    fn try_from(request: CloseRequest) -> Result<DeviceClose, ApiError> {
        close_target(&request).map(DeviceClose)
    }
}

/// Records a question of a run the device holds the lease of. The job goes `running` →
/// `waiting`, and the lease is extended like by progress.
///
/// # Errors
/// 422 naming a bad field, 404 for a job not of this device, 409 `stale_lease`, 409
/// `invalid_state` when the owner asked to stop the run or it has too many open questions.
pub async fn ask(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    lease: &LeaseToken,
    new: NewDecision,
    lease_secs: u64,
) -> Result<Asked, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let job = job_rows::fenced(&mut tx, &device.device_id, job_id, lease, now).await?;
    if job.cancel_requested != 0 {
        return Err(ApiError::new(
            Code::InvalidState,
            "The owner asked to stop this run; it takes no new questions.",
        ));
    }
    if count_pending(&mut tx, &job, now).await? >= MAX_PENDING_PER_JOB {
        return Err(ApiError::new(
            Code::InvalidState,
            format!("This run has {MAX_PENDING_PER_JOB} questions open already."),
        ));
    }
    let decision_id = DecisionId::generate();
    let sql = "INSERT INTO decisions (id, account_id, job_id, device_id, attempt, kind, \
               question, action_json, action_hash, state, created_at, expires_at, preview) \
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $12)";
    on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(decision_id.as_str())
        .bind(&job.account_id)
        .bind(&job.id)
        .bind(&job.device_id)
        .bind(job.attempt)
        .bind(&new.kind)
        .bind(&new.question)
        .bind(&new.action_json)
        .bind(&new.action_hash)
        .bind(now)
        .bind(now + new.expires_in)
        .bind(&new.preview)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    job_rows::start_waiting(&mut tx, &job, now + secs(lease_secs)).await?;
    let text = format!("Waiting for an answer ({} question).", new.kind);
    append_events(&mut tx, &job, now, "system", &[text]).await?;
    let detail = json!({ "decisionId": decision_id, "jobId": job.id, "deviceId": job.device_id,
                         "kind": new.kind });
    ledger::record(
        &mut tx,
        &job.account_id()?,
        now,
        LedgerKind::DecisionAsked,
        decision_id.as_str(),
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, decision_id = %decision_id, kind = new.kind, "decision asked");
    Ok(Asked { decision_id })
}

/// A decision of this device, as the device reads it.
///
/// # Errors
/// 404 for a decision of another device (or none).
pub async fn for_device(
    store: &Store,
    device: &DeviceIdentity,
    decision_id: &DecisionId,
) -> Result<DeviceDecision, ApiError> {
    let sql = format!("{DECISION_SELECT} WHERE d.id = $1 AND d.device_id = $2");
    let row = on_read!(store, |pool| sqlx::query_as::<_, DecisionRow>(&sql)
        .bind(decision_id.as_str())
        .bind(device.device_id.as_str())
        .fetch_optional(pool)
        .await)?;
    row.ok_or_else(|| ApiError::not_found("decision"))?
        .into_device_decision(store.now())
}

/// The device closes its decision: the owner answered on the computer, the device stopped
/// waiting (expired), or the run no longer needs it (withdrawn). A decision past its expiry
/// closes as expired.
///
/// # Errors
/// 404 for a decision of another device (or none), 409 `already_answered` when it is not
/// pending.
pub async fn close(
    store: &Store,
    device: &DeviceIdentity,
    decision_id: &DecisionId,
    close: DeviceClose,
) -> Result<Closed, ApiError> {
    let DeviceClose(target) = close;
    let now = store.now();
    let mut tx = store.begin().await?;
    let sql = format!("{DECISION_SELECT} WHERE d.id = $1 AND d.device_id = $2");
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, DecisionRow>(&sql)
        .bind(decision_id.as_str())
        .bind(device.device_id.as_str())
        .fetch_optional(conn)
        .await)?;
    let row = row.ok_or_else(|| ApiError::not_found("decision"))?;
    let job = lock_job(&mut tx, &row).await?;
    if row.state != DecisionState::Pending.as_str() {
        return Err(already_answered(&row.state));
    }
    let target = match target {
        // A timeout never allows: an answer after the expiry comes too late.
        Target::Answered { .. } if row.expires_at <= now => {
            return Err(already_answered("expired"))
        }
        _ if row.expires_at <= now => Target::Expired,
        target => target,
    };
    let settled = settle(&mut tx, &row, &job, target, now).await?;
    tx.commit().await?;
    let decision = for_device(store, device, decision_id).await?;
    Ok(Closed { decision, settled })
}

/// The owner answers a pending decision on the web. The first valid answer wins.
///
/// # Errors
/// 404 for a decision not of this account (or none), 409 `already_answered` when it is not
/// pending (also once expired), 409 `invalid_state` when the computer keeps answers to
/// itself.
pub async fn answer(
    store: &Store,
    account_id: &AccountId,
    decision_id: &DecisionId,
    request: WebAnswer,
) -> Result<Answered, ApiError> {
    let by = AnsweredBy::Web;
    answer_as(store, account_id, decision_id, request, by, None).await
}

/// The owner answers from the question's notification, with the key it carried: the first
/// valid answer still wins, and it counts only for the action the notification showed.
///
/// # Errors
/// 404 for an unknown decision or a key that is not its key, 403 `forbidden` for an allow
/// the owner has not let notifications give, 409 `invalid_state` when the action is another,
/// and [`answer`]'s errors.
pub async fn answer_from_notification(
    store: &Store,
    decision_id: &DecisionId,
    request: NotificationAnswer,
) -> Result<Answered, ApiError> {
    let web_answer = WebAnswer::try_from(AnswerRequest {
        answer: request.answer,
        scope: Scope::Once,
    })?;
    let found = on_read!(store, |pool| sqlx::query_as::<
        _,
        (String, Option<String>, i64),
    >(
        "SELECT d.account_id, d.notification_key_hash, a.allow_from_notifications \
         FROM decisions d JOIN accounts a ON a.id = d.account_id WHERE d.id = $1"
    )
    .bind(decision_id.as_str())
    .fetch_optional(pool)
    .await)?;
    let presented = crate::credentials::hash_token(&request.answer_key);
    let Some((account_id, Some(stored), allowed)) = found else {
        return Err(ApiError::not_found("decision"));
    };
    if !crate::credentials::hashes_match(&stored, &presented) {
        return Err(ApiError::not_found("decision"));
    }
    if request.answer == Answer::Allow && allowed == 0 {
        return Err(ApiError::new(
            Code::Forbidden,
            "Allow answers only on the question's card, unless \"Allow from notifications\" is on in your notification settings.",
        ));
    }
    let account_id: AccountId = stored_id(account_id)?;
    let by = AnsweredBy::Notification;
    let hash = Some(request.action_hash.as_str());
    answer_as(store, &account_id, decision_id, web_answer, by, hash).await
}

/// Answers for the owner, `by` the web or a notification; `action_hash`, when given, must be
/// the decision's.
async fn answer_as(
    store: &Store,
    account_id: &AccountId,
    decision_id: &DecisionId,
    request: WebAnswer,
    by: AnsweredBy,
    action_hash: Option<&str>,
) -> Result<Answered, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let sql = format!("{DECISION_SELECT} WHERE d.id = $1 AND d.account_id = $2");
    let row = on_tx!(&mut tx, |conn| sqlx::query_as::<_, DecisionRow>(&sql)
        .bind(decision_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(conn)
        .await)?;
    let row = row.ok_or_else(|| ApiError::not_found("decision"))?;
    let job = lock_job(&mut tx, &row).await?;
    let state = row.effective_state(now)?;
    if state != DecisionState::Pending {
        return Err(already_answered(state.as_str()));
    }
    if action_hash.is_some_and(|hash| !crate::credentials::hashes_match(&row.action_hash, hash)) {
        return Err(ApiError::new(
            Code::InvalidState,
            "The question is about another action than the notification showed; answer it on its card.",
        ));
    }
    if !accepts_web_answers(row.capabilities_json.as_deref()) {
        return Err(ApiError::new(
            Code::InvalidState,
            format!(
                "This question waits on the computer: it takes no answers from the web. \
                 Answer it there with `tether-agent decisions allow {decision_id}` (or deny)."
            ),
        ));
    }
    let target = Target::Answered {
        answer: request.answer,
        scope: request.scope,
        by,
    };
    let settled = settle(&mut tx, &row, &job, target, now).await?;
    tx.commit().await?;
    tracing::info!(decision_id = %decision_id, answer = request.answer.as_str(), by = by.as_str(), "decision answered");
    let decision = get(store, account_id, decision_id).await?;
    Ok(Answered { decision, settled })
}

/// A fresh key for the notification of a pending decision (its SHA-256 replaces the one
/// before), with whether the owner lets notifications allow; `None` once it is not pending.
///
/// # Errors
/// A database error.
pub async fn notification_key(
    store: &Store,
    decision_id: &DecisionId,
) -> Result<Option<(String, bool)>, ApiError> {
    let key = crate::credentials::random_token("");
    let hash = crate::credentials::hash_token(&key);
    let mut tx = store.begin().await?;
    let account_id = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, String>(
        "UPDATE decisions SET notification_key_hash = $1 \
         WHERE id = $2 AND state = 'pending' RETURNING account_id"
    )
    .bind(&hash)
    .bind(decision_id.as_str())
    .fetch_optional(conn)
    .await)?;
    let Some(account_id) = account_id else {
        return Ok(None);
    };
    let allowed = on_tx!(&mut tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT allow_from_notifications FROM accounts WHERE id = $1"
    )
    .bind(&account_id)
    .fetch_one(conn)
    .await)?;
    tx.commit().await?;
    Ok(Some((key, allowed != 0)))
}

/// The account's decisions, newest first, at most [`LIST_LIMIT`]; `state` filters (a
/// pending decision past its expiry counts as expired).
///
/// # Errors
/// A database error.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    state: Option<DecisionState>,
) -> Result<Vec<Decision>, ApiError> {
    let now = store.now();
    let sql = format!(
        "{DECISION_SELECT} WHERE d.account_id = $1 AND ($2 = '' OR \
         (CASE WHEN d.state = 'pending' AND d.expires_at <= $3 THEN 'expired' ELSE d.state END) \
         = $2) ORDER BY d.created_at DESC, d.id DESC LIMIT $4"
    );
    let rows = on_read!(store, |pool| sqlx::query_as::<_, DecisionRow>(&sql)
        .bind(account_id.as_str())
        .bind(state.map_or("", DecisionState::as_str))
        .bind(now)
        .bind(LIST_LIMIT)
        .fetch_all(pool)
        .await)?;
    rows.into_iter().map(|row| row.into_decision(now)).collect()
}

/// One decision of the account.
///
/// # Errors
/// 404 for a decision not of this account (or none).
pub async fn get(
    store: &Store,
    account_id: &AccountId,
    decision_id: &DecisionId,
) -> Result<Decision, ApiError> {
    let sql = format!("{DECISION_SELECT} WHERE d.id = $1 AND d.account_id = $2");
    let row = on_read!(store, |pool| sqlx::query_as::<_, DecisionRow>(&sql)
        .bind(decision_id.as_str())
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    row.ok_or_else(|| ApiError::not_found("decision"))?
        .into_decision(store.now())
}

/// The decisions of one job of the account, oldest first (the job page's order).
///
/// # Errors
/// A database error.
pub(crate) async fn for_job(
    mut source: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Vec<Decision>, ApiError> {
    let sql = format!(
        "{DECISION_SELECT} WHERE d.account_id = $1 AND d.job_id = $2 \
         ORDER BY d.created_at, d.id"
    );
    let rows = on_reads!(source, |pool| sqlx::query_as::<_, DecisionRow>(&sql)
        .bind(account_id.as_str())
        .bind(job_id.as_str())
        .fetch_all(pool)
        .await)?;
    let now = source.now();
    rows.into_iter().map(|row| row.into_decision(now)).collect()
}

/// How many of the account's decisions are pending (and not past their expiry).
///
/// # Errors
/// A database error.
pub async fn pending_summary(
    store: &Store,
    account_id: &AccountId,
) -> Result<PendingSummary, ApiError> {
    let (count, newest_at) = on_read!(store, |pool| sqlx::query_as::<_, (i64, i64)>(
        "SELECT COUNT(*), COALESCE(MAX(created_at), 0) FROM decisions \
         WHERE account_id = $1 AND state = 'pending' AND expires_at > $2"
    )
    .bind(account_id.as_str())
    .bind(store.now())
    .fetch_one(pool)
    .await)?;
    Ok(PendingSummary {
        count: u64::try_from(count).unwrap_or(0),
        newest_at,
    })
}

/// Expires every pending decision past its expiry (at most [`EXPIRE_BATCH`]), putting jobs
/// with nothing else pending back to running.
///
/// # Errors
/// A database error (nothing is changed then).
pub async fn expire_overdue(store: &Store, now: Millis) -> Result<Vec<Settled>, ApiError> {
    let mut tx = store.begin().await?;
    // Ordered by job, so two sweepers lock jobs in the same order.
    let sql = format!(
        "{DECISION_SELECT} WHERE d.state = 'pending' AND d.expires_at <= $1 \
         ORDER BY d.job_id, d.id LIMIT $2"
    );
    let overdue = on_tx!(&mut tx, |conn| sqlx::query_as::<_, DecisionRow>(&sql)
        .bind(now)
        .bind(EXPIRE_BATCH)
        .fetch_all(conn)
        .await)?;
    let mut settled = Vec::with_capacity(overdue.len());
    let mut locked: Option<JobRow> = None;
    for row in &overdue {
        let job = match locked.take() {
            Some(job) if job.id == row.job_id => job,
            _ => lock_job(&mut tx, row).await?,
        };
        match settle(&mut tx, row, &job, Target::Expired, now).await {
            Ok(done) => settled.push(done),
            // Settled meanwhile by an answer or a close: theirs stands.
            Err(error) if error.code() == Code::AlreadyAnswered => {}
            Err(error) => return Err(error),
        }
        locked = Some(job);
    }
    tx.commit().await?;
    if !settled.is_empty() {
        tracing::info!(n_expired = settled.len(), "overdue decisions expired");
    }
    Ok(settled)
}

/// What a settlement writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Answered {
        answer: Answer,
        scope: Scope,
        by: AnsweredBy,
    },
    Expired,
    Withdrawn,
}

impl Target {
    fn settlement(self) -> Settlement {
        match self {
            Target::Answered {
                by: AnsweredBy::Web | AnsweredBy::Notification,
                ..
            } => Settlement::AnsweredOnWeb,
            Target::Answered {
                by: AnsweredBy::Computer,
                ..
            } => Settlement::AnsweredOnComputer,
            Target::Expired => Settlement::Expired,
            Target::Withdrawn => Settlement::Withdrawn,
        }
    }
}

fn close_target(request: &CloseRequest) -> Result<Target, ApiError> {
    match request.reason {
        CloseReason::AnsweredLocally => {
            let answer = request.answer.ok_or_else(|| {
                ApiError::invalid_field("answer", "is required with answered_locally.")
            })?;
            let scope = request.scope.unwrap_or(Scope::Once);
            check_scope(answer, scope)?;
            Ok(Target::Answered {
                answer,
                scope,
                by: AnsweredBy::Computer,
            })
        }
        CloseReason::Expired | CloseReason::Withdrawn if request.answer.is_some() => Err(
            ApiError::invalid_field("answer", "is only sent with answered_locally."),
        ),
        CloseReason::Expired => Ok(Target::Expired),
        CloseReason::Withdrawn => Ok(Target::Withdrawn),
    }
}

/// A deny answers once; asking again raises a new decision.
fn check_scope(answer: Answer, scope: Scope) -> Result<(), ApiError> {
    if answer == Answer::Deny && scope == Scope::Session {
        return Err(ApiError::invalid_field(
            "scope",
            "a deny answers once; use scope once.",
        ));
    }
    Ok(())
}

fn already_answered(state: &str) -> ApiError {
    ApiError::new(
        Code::AlreadyAnswered,
        format!("This decision is {state} already; the first answer stands."),
    )
}

/// Moves `row` out of `pending` if it still is, with the job's timeline line, the ledger
/// entry for an answer, and the job back to running when nothing else is pending.
///
/// # Errors
/// 409 `already_answered` when another settlement came first.
async fn settle(
    tx: &mut Tx,
    row: &DecisionRow,
    job: &JobRow,
    target: Target,
    now: Millis,
) -> Result<Settled, ApiError> {
    let (state, answer, scope, by) = match target {
        Target::Answered { answer, scope, by } => (
            DecisionState::Answered,
            Some(answer.as_str()),
            Some(scope.as_str()),
            Some(by.as_str()),
        ),
        Target::Expired => (DecisionState::Expired, None, None, None),
        Target::Withdrawn => (DecisionState::Withdrawn, None, None, None),
    };
    // An answer must come before the expiry; closing as expired or withdrawn need not.
    let deadline = if state == DecisionState::Answered {
        now
    } else {
        Millis::MIN
    };
    let changed = on_tx!(tx, |conn| sqlx::query(
        "UPDATE decisions SET state = $1, answer = $2, scope = $3, answered_by = $4, \
         answered_at = $5 WHERE id = $6 AND state = 'pending' AND expires_at > $7"
    )
    .bind(state.as_str())
    .bind(answer)
    .bind(scope)
    .bind(by)
    .bind(now)
    .bind(&row.id)
    .bind(deadline)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if changed == 0 {
        return Err(already_answered("settled"));
    }
    let text = match target {
        Target::Answered { answer, scope, by } => format!(
            "Answered on the {}: {} {} ({} question).",
            by.as_str(),
            answer.as_str(),
            scope.as_str(),
            row.kind
        ),
        Target::Expired => format!("Nobody answered in time ({} question).", row.kind),
        Target::Withdrawn => format!("The run withdrew its {} question.", row.kind),
    };
    append_events(tx, job, now, "system", &[text]).await?;
    let account_id: AccountId = stored_id(row.account_id.clone())?;
    if let Target::Answered { answer, scope, by } = target {
        let detail = json!({ "decisionId": row.id, "jobId": row.job_id, "deviceId": row.device_id,
                             "kind": row.kind, "answer": answer.as_str(),
                             "scope": scope.as_str(), "by": by.as_str() });
        ledger::record(
            tx,
            &account_id,
            now,
            LedgerKind::DecisionAnswered,
            &row.id,
            detail,
        )
        .await?;
    }
    job_rows::resume_if_idle(tx, job, now).await?;
    let waited = u64::try_from(now - row.created_at).unwrap_or(0);
    Ok(Settled {
        account_id,
        decision_id: stored_id(row.id.clone())?,
        job_id: stored_id(row.job_id.clone())?,
        how: target.settlement(),
        waited: Duration::from_millis(waited),
    })
}

/// The decision's job, row-locked on PostgreSQL (before any decision row of it changes).
async fn lock_job(tx: &mut Tx, row: &DecisionRow) -> Result<JobRow, ApiError> {
    let account_id: AccountId = stored_id(row.account_id.clone())?;
    let job_id: JobId = stored_id(row.job_id.clone())?;
    let job = job_rows::lock_for_account(tx, &account_id, &job_id).await?;
    job.ok_or_else(|| ApiError::internal(&format_args!("decision {} has no job", row.id)))
}

async fn count_pending(tx: &mut Tx, job: &JobRow, now: Millis) -> Result<i64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM decisions WHERE account_id = $1 AND job_id = $2 \
         AND state = 'pending' AND expires_at > $3"
    )
    .bind(&job.account_id)
    .bind(&job.id)
    .bind(now)
    .fetch_one(conn)
    .await)?;
    Ok(count)
}

/// Whether a device's last capability report lets the web answer (on unless it says off).
fn accepts_web_answers(capabilities_json: Option<&str>) -> bool {
    capabilities_json
        .and_then(|json| serde_json::from_str::<serde_json::Value>(json).ok())
        .and_then(|caps| {
            caps.get("acceptWebApprovals")
                .and_then(serde_json::Value::as_bool)
        })
        .unwrap_or(true)
}

const DECISION_SELECT: &str = "SELECT d.id, d.account_id, d.job_id, d.device_id, d.kind, \
    d.question, d.action_json, d.action_hash, d.state, d.answer, d.scope, d.answered_by, \
    d.created_at, d.expires_at, d.answered_at, d.preview, j.title AS job_title, \
    v.name AS device_name, \
    v.capabilities_json FROM decisions d JOIN jobs j ON j.id = d.job_id \
    JOIN devices v ON v.id = d.device_id";

/// A `decisions` row with its job's title and its device's name and report. Not
/// `Serialize`: the `into_*` methods build the wire types.
#[derive(sqlx::FromRow)]
struct DecisionRow {
    id: String,
    account_id: String,
    job_id: String,
    device_id: String,
    kind: String,
    question: String,
    action_json: String,
    action_hash: String,
    state: String,
    answer: Option<String>,
    scope: Option<String>,
    answered_by: Option<String>,
    created_at: i64,
    expires_at: i64,
    answered_at: Option<i64>,
    preview: Option<String>,
    job_title: String,
    device_name: String,
    capabilities_json: Option<String>,
}

impl DecisionRow {
    /// The stored state, with a pending decision past its expiry read as expired.
    fn effective_state(&self, now: Millis) -> Result<DecisionState, ApiError> {
        let state = DecisionState::parse(&self.state).ok_or_else(|| {
            ApiError::internal(&format_args!("stored decision state {:?}", self.state))
        })?;
        Ok(match state {
            DecisionState::Pending if self.expires_at <= now => DecisionState::Expired,
            state => state,
        })
    }

    fn answer(&self) -> Option<Answer> {
        self.answer.as_deref().and_then(Answer::parse)
    }

    fn scope(&self) -> Option<Scope> {
        self.scope.as_deref().and_then(Scope::parse)
    }

    fn into_device_decision(self, now: Millis) -> Result<DeviceDecision, ApiError> {
        Ok(DeviceDecision {
            state: self.effective_state(now)?,
            answer: self.answer(),
            scope: self.scope(),
            id: stored_id(self.id)?,
            action_hash: self.action_hash,
        })
    }

    fn into_decision(self, now: Millis) -> Result<Decision, ApiError> {
        let state = self.effective_state(now)?;
        let answered_at = match (self.answered_at, state) {
            (Some(at), _) => Some(to_time(at)),
            (None, DecisionState::Expired) => Some(to_time(self.expires_at)),
            (None, _) => None,
        };
        Ok(Decision {
            answer: self.answer(),
            scope: self.scope(),
            answered_by: self.answered_by.as_deref().and_then(AnsweredBy::parse),
            web_answers: accepts_web_answers(self.capabilities_json.as_deref()),
            action: serde_json::from_str(&self.action_json)?,
            id: stored_id(self.id)?,
            job_id: stored_id(self.job_id)?,
            device_id: stored_id::<DeviceId>(self.device_id)?,
            kind: self.kind,
            question: self.question,
            state,
            created_at: to_time(self.created_at),
            expires_at: to_time(self.expires_at),
            answered_at,
            job_title: self.job_title,
            device_name: self.device_name,
            // Past its expiry the row may still hold it until the sweeper runs: not shown.
            preview: self.preview.filter(|_| state == DecisionState::Pending),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: &str, action: serde_json::Value, hash: &str, expires: u32) -> AskRequest {
        AskRequest {
            kind: kind.to_owned(),
            question: "Run cargo test?".to_owned(),
            action,
            action_hash: hash.to_owned(),
            expires_in_secs: expires,
            preview: None,
        }
    }

    fn refused_field(request: AskRequest) -> Option<String> {
        NewDecision::try_from(request)
            .err()
            .map(|error| error.message().split(':').next().unwrap_or("").to_owned())
    }

    #[test]
    fn asks_are_checked_field_by_field() {
        let hash = "a".repeat(64);
        let action = json!({ "command": ["cargo", "test"], "folder": "work" });
        let check = |request: AskRequest, field: Option<&str>| {
            assert_eq!(refused_field(request).as_deref(), field);
        };
        check(request("command", action.clone(), &hash, 60), None);
        check(request("sudo", action.clone(), &hash, 60), Some("kind"));
        check(request("command", json!(["ls"]), &hash, 60), Some("action"));
        let huge = json!({ "command": "x".repeat(MAX_ACTION_BYTES) });
        check(request("command", huge, &hash, 60), Some("action"));
        check(
            request("command", action.clone(), &"A".repeat(64), 60),
            Some("actionHash"),
        );
        check(
            request("command", action.clone(), "abc", 60),
            Some("actionHash"),
        );
        check(
            request("command", action.clone(), &hash, 0),
            Some("expiresInSecs"),
        );
        check(
            request("command", action, &hash, 86_401),
            Some("expiresInSecs"),
        );
    }

    #[test]
    fn a_deny_answers_once() {
        assert!(check_scope(Answer::Deny, Scope::Session).is_err());
        assert!(check_scope(Answer::Deny, Scope::Once).is_ok());
        assert!(check_scope(Answer::Allow, Scope::Session).is_ok());
    }

    #[test]
    fn web_answers_are_on_unless_the_computer_says_off() {
        assert!(accepts_web_answers(None));
        assert!(accepts_web_answers(Some(r#"{"acceptWebApprovals":true}"#)));
        assert!(!accepts_web_answers(Some(
            r#"{"acceptWebApprovals":false}"#
        )));
        assert!(accepts_web_answers(Some("not json")));
    }
}
