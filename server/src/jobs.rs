//! Jobs as the web sees them: create, list, read, cancel. How a job's row changes is
//! [`crate::job_rows`]'s; the device's side of a run is [`crate::leases`]'s.
//!
//! Pages call [`create`], [`list`], [`get`] and [`cancel`].
//!
//! **Invariant:** a job never moves to another device, and a job of another account is
//! `not_found`.

use serde_json::json;
use tether_protocol::jobs::{Job, JobSpec, JobState, NewJobParams, Outcome};
use tether_protocol::text::TextKind;
use tether_protocol::{AccountId, Code, DeviceId, JobId};

use crate::accounts::{check_text, parse_name};
use crate::clock::to_time;
use crate::error::ApiError;
use crate::job_rows::{self, EndCause, OpenDecisions};
use crate::ledger::{self, LedgerKind};
use crate::store::Store;
use crate::{decisions, devices, evidence};

/// Longest prompt, in characters.
pub const MAX_PROMPT_CHARS: usize = 20_000;
/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Most jobs one list answer holds (newest first).
pub const LIST_LIMIT: i64 = 200;

/// Which jobs `GET /api/jobs` returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    pub device_id: Option<DeviceId>,
    pub state: Option<JobState>,
}

/// A checked [`NewJobParams`]: the device it is for and the spec as it will be stored.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    device_id: DeviceId,
    spec: JobSpec,
}

impl TryFrom<NewJobParams> for NewJob {
    type Error = ApiError;

    fn try_from(params: NewJobParams) -> Result<NewJob, ApiError> {
        let title = parse_name("title", &params.title, MAX_TITLE_CHARS)?;
        // An empty prompt is fine: a recipe such as `cargo test` needs none.
        if params.prompt.chars().count() > MAX_PROMPT_CHARS {
            return Err(ApiError::invalid_field(
                "prompt",
                "must be at most 20000 characters.",
            ));
        }
        check_text("prompt", &params.prompt, TextKind::MultiLine)?;
        let folder = parse_name("folder", &params.folder, 100)?;
        let engine = parse_name("engine", &params.engine, 100)?;
        if !(1..=1440).contains(&params.timeout_minutes) {
            return Err(ApiError::invalid_field(
                "timeoutMinutes",
                "must be 1 to 1440.",
            ));
        }
        check_secret_names(&params.secrets)?;
        let spec = JobSpec {
            title,
            prompt: params.prompt,
            folder,
            engine,
            mode: params.mode,
            network: params.network,
            timeout_minutes: params.timeout_minutes,
            secrets: params.secrets,
        };
        Ok(NewJob {
            device_id: params.device_id,
            spec,
        })
    }
}

/// Queues a job for a device of `account_id`, checking the engine and folder against the
/// device's last capability report. Answers the job as written.
///
/// # Errors
/// 404 for a device not of this account or revoked, 422 `unknown_engine` /
/// `unknown_folder` (also before the device reported anything).
pub async fn create(store: &Store, account_id: &AccountId, new: NewJob) -> Result<Job, ApiError> {
    let NewJob { device_id, spec } = new;
    let now = store.now();
    let mut tx = store.begin().await?;
    let capabilities = devices::usable_capabilities(&mut tx, account_id, &device_id).await?;
    let engine_known = capabilities
        .as_ref()
        .is_some_and(|caps| caps.engines.iter().any(|engine| engine.name == spec.engine));
    if !engine_known {
        return Err(ApiError::new(
            Code::UnknownEngine,
            format!(
                "engine: the device does not publish an engine named {:?}.",
                spec.engine
            ),
        ));
    }
    let folder_known = capabilities
        .as_ref()
        .is_some_and(|caps| caps.folders.contains(&spec.folder));
    if !folder_known {
        return Err(ApiError::new(
            Code::UnknownFolder,
            format!(
                "folder: the device does not share a folder labelled {:?}.",
                spec.folder
            ),
        ));
    }
    let job_id = JobId::generate();
    job_rows::insert_queued(&mut tx, &job_id, account_id, &device_id, &spec, now).await?;
    let detail = json!({ "jobId": job_id, "deviceId": device_id, "engine": spec.engine,
                         "folder": spec.folder, "mode": spec.mode });
    ledger::record(
        &mut tx,
        account_id,
        now,
        LedgerKind::JobCreated,
        job_id.as_str(),
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, device_id = %device_id, "job queued");
    // A new job has no events, decisions or evidence yet: the answer is what was written.
    Ok(Job {
        id: job_id,
        device_id,
        title: spec.title.clone(),
        spec,
        state: JobState::Queued,
        attempt: 0,
        cancel_requested: false,
        outcome: None,
        created_at: to_time(now),
        started_at: None,
        ended_at: None,
        events: Vec::new(),
        decisions: Vec::new(),
        evidence: Vec::new(),
        changes: None,
        continues: None,
        continued_by: None,
        queued_because: None,
    })
}

/// The account's jobs, newest first, without events.
///
/// # Errors
/// A database error.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    filter: JobFilter,
) -> Result<Vec<Job>, ApiError> {
    let rows = job_rows::list_for_account(
        store,
        account_id,
        filter.device_id.as_ref(),
        filter.state,
        LIST_LIMIT,
    )
    .await?;
    rows.into_iter()
        .map(|row| row.into_job(Vec::new()))
        .collect()
}

/// One job of `account_id` with its timeline, decisions and evidence.
///
/// # Errors
/// 404 `not_found` for an unknown job or another account's.
pub async fn get(store: &Store, account_id: &AccountId, job_id: &JobId) -> Result<Job, ApiError> {
    let row = job_rows::read_for_account(store, account_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    let events = job_rows::events(store, job_id).await?;
    let mut job = row.into_job(events)?;
    job.evidence = evidence::list(store, account_id, job_id).await?;
    job.decisions = decisions::for_job(store, account_id, job_id).await?;
    Ok(job)
}

/// Cancels a job: a queued one ends `cancelled` at once; a running or waiting one gets
/// `cancelRequested`, and its device completes it `cancelled`.
///
/// # Errors
/// 404 for a job not of this account, 409 `invalid_state` for a job that already ended.
pub async fn cancel(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Job, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let job = job_rows::lock_for_account(&mut tx, account_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    match job.state()? {
        JobState::Queued => {
            let outcome = job_rows::outcome(Outcome::Cancelled, "Cancelled before it started.");
            job_rows::finish(&mut tx, &job, &outcome, EndCause::Owner, now).await?;
        }
        JobState::Running | JobState::Waiting => {
            // The run is stopping: nothing it asked needs an answer any more.
            job_rows::settle_open(&mut tx, &job, OpenDecisions::Withdraw, now).await?;
            if job.cancel_requested == 0 {
                job_rows::request_cancel(&mut tx, &job).await?;
                let text = ["Cancel requested.".to_owned()];
                job_rows::append_events(&mut tx, &job, now, "system", &text).await?;
            }
        }
        ended => {
            return Err(ApiError::new(
                Code::InvalidState,
                format!("The job already ended ({}).", ended.as_str()),
            ))
        }
    }
    tx.commit().await?;
    get(store, account_id, job_id).await
}

fn check_secret_names(names: &[String]) -> Result<(), ApiError> {
    if names.len() > 32 {
        return Err(ApiError::invalid_field("secrets", "at most 32 names."));
    }
    let shape_ok = |name: &String| {
        !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if !names.iter().all(shape_ok) {
        return Err(ApiError::invalid_field(
            "secrets",
            "each name is 1 to 64 letters, digits, '_', '-' or '.'.",
        ));
    }
    Ok(())
}
