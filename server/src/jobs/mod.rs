//! The jobs wing: jobs as the web sees them (here), the device's side of a run under its
//! lease (`leases`, with `claim_gates`), decisions, git delivery, evidence, live files and
//! the timeline a run reads as.
//!
//! Jobs as the web sees them: create, list, read, cancel. How a job's row changes is
//! [`crate::store::job_rows`]'s; the device's side of a run is [`crate::jobs::leases`]'s.
//!
//! Pages call [`create`], [`list`], [`get`] and [`cancel`].
//!
//! **Invariant:** a job never moves to another device, and a job of another account is
//! `not_found`.

pub mod attachments;
pub mod claim_gates;
pub mod context_answers;
pub mod decisions;
pub mod delivery;
pub mod engine_sessions;
pub mod evidence;
pub mod files;
pub mod held_evidence;
pub mod leases;
pub mod live;
pub mod shared_view;
pub mod task_context;
pub mod timeline;

use serde_json::json;
use tether_protocol::capabilities::Capabilities;
use tether_protocol::git::{BranchChoice, GitOptions};
use tether_protocol::jobs::{Job, JobSpec, JobState, NewJobParams, Outcome, RerunParams};
use tether_protocol::spaces::{SpaceJobSummary, SpaceRole};
use tether_protocol::text::TextKind;
use tether_protocol::{AccountId, AttachmentId, Code, DeviceId, JobId, SpaceId};

use crate::accounts::{check_text, parse_name};
use crate::clock::to_time;
use crate::config::Config;
use crate::devices;
use crate::error::ApiError;
use crate::spaces::{self, SpaceEvent};
use crate::store::job_rows::{self, EndCause, JobRow, OpenDecisions};
use crate::store::ledger::{self, LedgerKind};
use crate::store::{stored_id, InTx, ReadSource, Store, Tx};

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
    continues: Option<JobId>,
    /// The earlier job a re-run runs again.
    rerun_of: Option<JobId>,
    /// A follow-up sent without `git` keeps the git choices of the job it continues.
    git_from_earlier: bool,
    /// The uploads (or, for a re-run, the earlier job's attachments) it carries, in order.
    attachments: Vec<AttachmentId>,
    /// The space asked for; a re-run or follow-up without one stays in the earlier job's.
    space_id: Option<SpaceId>,
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
        attachments::check_ids(&params.attachments)?;
        let git_from_earlier = params.git.is_none() && params.continues.is_some();
        let spec = JobSpec {
            title,
            prompt: params.prompt,
            folder,
            engine,
            mode: params.mode,
            network: params.network,
            timeout_minutes: params.timeout_minutes,
            secrets: params.secrets,
            git: params.git.flatten(),
            attachments: Vec::new(),
            links: task_context::check_links(params.links)?,
        };
        if let Some(git) = &spec.git {
            delivery::check_options(git, &spec)?;
        }
        Ok(NewJob {
            device_id: params.device_id,
            spec,
            continues: params.continues,
            rerun_of: None,
            git_from_earlier,
            attachments: params.attachments,
            space_id: params.space_id,
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
    let NewJob {
        device_id,
        mut spec,
        continues,
        rerun_of,
        git_from_earlier,
        attachments: attachment_ids,
        space_id: asked_space,
    } = new;
    let now = store.now();
    let job_id = JobId::generate();
    let mut space_id = None;
    let alone = continues.is_none()
        && rerun_of.is_none()
        && attachment_ids.is_empty()
        && asked_space.is_none();
    let run_number = match (alone, store.postgres_pool()) {
        // On PostgreSQL a job that neither continues nor runs again another is one
        // statement: its device is checked again in it, so a device revoked since the read
        // below gets nothing.
        (true, Some(pool)) => {
            // Without git the statement checks the engine and folder itself; only a job it
            // refused reads the device, to say why.
            let mut stored = false;
            if spec.git.is_none() {
                let entry = created_entry(&job_id, &device_id, &spec, None, None);
                let queued = job_rows::queue_alone(
                    pool, &job_id, account_id, &device_id, &spec, now, entry, false,
                );
                stored = queued.await?;
            }
            if !stored {
                let capabilities =
                    devices::usable_capabilities(store, account_id, &device_id).await?;
                check_runnable(&mut spec, capabilities.as_ref(), &job_id)?;
                let entry = created_entry(&job_id, &device_id, &spec, None, None);
                let queued = job_rows::queue_alone(
                    pool, &job_id, account_id, &device_id, &spec, now, entry, true,
                );
                if !queued.await? {
                    return Err(ApiError::not_found("device"));
                }
            }
            None
        }
        _ => {
            let mut tx = store.begin().await?;
            let mut earlier_row = None;
            let mut numbered = None;
            if let Some(earlier) = &continues {
                let row = check_follow_up(&mut tx, account_id, earlier, &device_id, &spec).await?;
                if git_from_earlier {
                    spec.git = row.spec()?.git.map(go_on_with_branch);
                    if let Some(git) = &spec.git {
                        delivery::check_options(git, &spec)?;
                    }
                }
                earlier_row = Some(row);
            }
            if let Some(earlier) = &rerun_of {
                let row = job_rows::lock_for_account(&mut tx, account_id, earlier).await?;
                earlier_row = Some(row.ok_or_else(|| ApiError::not_found("job"))?);
            }
            space_id = choose_space(&mut tx, account_id, asked_space, earlier_row.as_ref()).await?;
            let reads = InTx { tx: &mut tx, now };
            let capabilities = devices::usable_capabilities(reads, account_id, &device_id).await?;
            check_runnable(&mut spec, capabilities.as_ref(), &job_id)?;
            // Listed in the spec, so the claim carries them with no statement of its own.
            let chosen = if attachment_ids.is_empty() {
                Vec::new()
            } else {
                // A re-run or follow-up may name the earlier job's files: it gets copies.
                let earlier = rerun_of.as_ref().or(continues.as_ref());
                attachments::choose(&mut tx, account_id, &attachment_ids, earlier, now).await?
            };
            spec.attachments = chosen.iter().map(|item| item.attachment.clone()).collect();
            let earlier = continues.as_ref();
            job_rows::insert_queued(
                &mut tx, &job_id, account_id, &device_id, &spec, earlier, now,
            )
            .await?;
            attachments::attach(&mut tx, account_id, &job_id, &chosen, now).await?;
            if let Some(space) = &space_id {
                job_rows::set_space(&mut tx, &job_id, space.as_str()).await?;
                let (event, title) = (SpaceEvent::JobCreated, Some(spec.title.as_str()));
                let subject = Some(job_id.as_str());
                spaces::record(&mut tx, space, account_id, now, event, subject, title).await?;
            }
            if let Some(row) = &earlier_row {
                let (root, run) = next_in_chain(&mut tx, account_id, row).await?;
                job_rows::set_chain(&mut tx, &job_id, rerun_of.as_ref(), &root, run).await?;
                numbered = u32::try_from(run).ok();
            }
            let entry = created_entry(&job_id, &device_id, &spec, earlier, rerun_of.as_ref());
            ledger::record_entry(&mut tx, account_id, now, entry).await?;
            tx.commit().await?;
            numbered
        }
    };
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
        continues,
        continued_by: None,
        rerun_of,
        reruns: Vec::new(),
        run_number,
        queued_because: None,
        delivery: None,
        observed: Vec::new(),
        space_id,
        shared_view: false,
    })
}

/// The space a new job goes into: the one asked for, where the caller may assign (else
/// 404 / 403), or a re-run's or follow-up's earlier job's while the caller still may assign
/// there (else none: the new job is personal).
///
/// # Errors
/// 404 / 403 for a space asked for, or a database error.
async fn choose_space(
    tx: &mut Tx,
    account_id: &AccountId,
    asked: Option<SpaceId>,
    earlier: Option<&JobRow>,
) -> Result<Option<SpaceId>, ApiError> {
    if let Some(space) = asked {
        spaces::require_in(tx, account_id, &space, SpaceRole::Member).await?;
        return Ok(Some(space));
    }
    let Some(inherited) = earlier.and_then(|row| row.space_id.clone()) else {
        return Ok(None);
    };
    let space: SpaceId = stored_id(inherited)?;
    match spaces::require_in(tx, account_id, &space, SpaceRole::Member).await {
        Ok(_) => Ok(Some(space)),
        Err(error) if matches!(error.code(), Code::NotFound | Code::Forbidden) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The device can run `spec`: it publishes the engine and shares the folder (and can deliver
/// with git when asked). Fills in the job's default branch.
///
/// # Errors
/// 422 `unknown_engine` / `unknown_folder` (also before the device reported anything), or
/// the git delivery's refusal.
fn check_runnable(
    spec: &mut JobSpec,
    capabilities: Option<&Capabilities>,
    job_id: &JobId,
) -> Result<(), ApiError> {
    let engine_known = capabilities
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
    let folder_known = capabilities.is_some_and(|caps| caps.folders.contains(&spec.folder));
    if !folder_known {
        return Err(ApiError::new(
            Code::UnknownFolder,
            format!(
                "folder: the device does not share a folder labelled {:?}.",
                spec.folder
            ),
        ));
    }
    if spec.git.is_some() {
        delivery::check_capable(capabilities)?;
    }
    spec.git = spec
        .git
        .take()
        .map(|git| delivery::with_default_branch(git, job_id, &spec.title));
    Ok(())
}

/// The ledger's `job.created` entry of a job.
fn created_entry(
    job_id: &JobId,
    device_id: &DeviceId,
    spec: &JobSpec,
    continues: Option<&JobId>,
    rerun_of: Option<&JobId>,
) -> ledger::Entry {
    let mut detail = json!({ "jobId": job_id, "deviceId": device_id, "engine": spec.engine,
                             "folder": spec.folder, "mode": spec.mode, "continues": continues });
    if let Some(earlier) = rerun_of {
        detail["rerunOf"] = json!(earlier);
    }
    if !spec.attachments.is_empty() {
        detail["attachments"] = attachments::ledger_detail(&spec.attachments);
    }
    ledger::Entry::new(LedgerKind::JobCreated, job_id.as_str(), detail)
}

/// A follow-up names an earlier job of the account, on the same computer and folder, that
/// no other job follows up yet. Answers that job, locked.
///
/// # Errors
/// 404 for an earlier job not of this account, 422 `invalid_field` naming `deviceId` or
/// `folder`, 409 `invalid_state` when it is already continued.
async fn check_follow_up(
    tx: &mut Tx,
    account_id: &AccountId,
    earlier: &JobId,
    device_id: &DeviceId,
    spec: &JobSpec,
) -> Result<JobRow, ApiError> {
    let job = job_rows::lock_for_account(tx, account_id, earlier)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    if job.device_id != device_id.as_str() {
        return Err(ApiError::invalid_field(
            "deviceId",
            "must be the computer of the job it continues.",
        ));
    }
    if job.spec()?.folder != spec.folder {
        return Err(ApiError::invalid_field(
            "folder",
            "must be the folder of the job it continues.",
        ));
    }
    if let Some(later) = job_rows::follow_up_in_tx(tx, earlier).await? {
        return Err(ApiError::new(
            Code::InvalidState,
            format!("That job is already continued by {later}."),
        ));
    }
    Ok(job)
}

/// Where a job made from `earlier` (locked) goes in its chain: the chain's first job and
/// the next run number. The first job is locked too, so two new runs never share a number.
///
/// # Errors
/// A database error.
async fn next_in_chain(
    tx: &mut Tx,
    account_id: &AccountId,
    earlier: &JobRow,
) -> Result<(String, i64), ApiError> {
    let root = match &earlier.chain_root {
        Some(root) => {
            let root_id: JobId = stored_id(root.clone())?;
            job_rows::lock_for_account(tx, account_id, &root_id).await?;
            root.clone()
        }
        None => earlier.id.clone(),
    };
    // The first job is run 1 without a number stored.
    let last = job_rows::last_run_in_chain(tx, &root).await?.unwrap_or(1);
    Ok((root, last.max(1) + 1))
}

/// A follow-up's git choices from the earlier job's: the same, except that a new branch the
/// earlier run made is the existing branch the follow-up goes on with.
fn go_on_with_branch(mut git: GitOptions) -> GitOptions {
    if let Some(BranchChoice::New(name)) = &git.branch {
        git.branch = Some(BranchChoice::Existing(name.clone()));
    }
    git
}

/// A new job with the spec of a finished job of `account_id`, on the same computer; each
/// setting `params` gives replaces the earlier job's.
///
/// # Errors
/// 404 for a job not of this account, 409 `invalid_state` for one that has not ended, and
/// those of `POST /api/jobs` (the computer may no longer publish the engine or share the
/// folder; a setting given may be refused).
pub async fn rerun(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
    params: RerunParams,
) -> Result<Job, ApiError> {
    let row = job_rows::read_for_account(store, account_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    let state = row.state()?;
    if !state.is_final() {
        return Err(ApiError::new(
            Code::InvalidState,
            format!(
                "The job has not ended ({}); cancel it first.",
                state.as_str()
            ),
        ));
    }
    let spec = row.spec()?;
    let git = match params.git {
        Some(given) => given,
        None => spec.git.map(fresh_branch),
    };
    let new = NewJobParams {
        device_id: stored_id(row.device_id)?,
        title: params.title.unwrap_or(spec.title),
        prompt: params.prompt.unwrap_or(spec.prompt),
        folder: params.folder.unwrap_or(spec.folder),
        engine: params.engine.unwrap_or(spec.engine),
        mode: params.mode.unwrap_or(spec.mode),
        network: params.network.unwrap_or(spec.network),
        timeout_minutes: params.timeout_minutes.unwrap_or(spec.timeout_minutes),
        secrets: params.secrets.unwrap_or(spec.secrets),
        continues: None,
        git: Some(git),
        // Absent: the earlier job's again (copied for the new job when it is created).
        attachments: params
            .attachments
            .unwrap_or_else(|| spec.attachments.into_iter().map(|item| item.id).collect()),
        links: params.links.unwrap_or(spec.links),
        space_id: None,
    };
    let mut new = NewJob::try_from(new)?;
    new.rerun_of = Some(job_id.clone());
    create(store, account_id, new).await
}

/// A re-run's own new branch: the earlier run's branch exists now, so a new one gets a new
/// default name.
fn fresh_branch(mut git: GitOptions) -> GitOptions {
    if matches!(git.branch, Some(BranchChoice::New(_))) {
        git.branch = Some(BranchChoice::New(String::new()));
    }
    git
}

/// Why a queued job of `account_id` has not started, in words; `None` for any other job.
///
/// # Errors
/// A database error.
pub async fn queue_reason(
    store: &Store,
    config: &Config,
    account_id: &AccountId,
    job: &Job,
) -> Result<Option<String>, ApiError> {
    if job.state != JobState::Queued {
        return Ok(None);
    }
    if let Some(earlier) = &job.continues {
        let earlier = job_rows::read_for_account(store, account_id, earlier).await?;
        if let Some(earlier) = earlier.filter(|row| !matches!(row.state(), Ok(s) if s.is_final())) {
            return Ok(Some(format!(
                "It follows up \u{201c}{}\u{201d}, which has not ended yet.",
                earlier.title
            )));
        }
    }
    let device = devices::get(store, account_id, &job.device_id, config).await?;
    if !device.online {
        return Ok(Some(match device.last_seen_at {
            Some(seen) => format!(
                "{} is offline (last seen {}); the job starts when it is back.",
                device.name,
                seen.format("%Y-%m-%d %H:%M UTC")
            ),
            None => format!("{} has not connected yet.", device.name),
        }));
    }
    let (in_account, on_device) =
        job_rows::running_counts(store, account_id, &job.device_id).await?;
    if in_account >= i64::from(config.max_running_per_account) {
        return Ok(Some(format!(
            "The account's limit of {} runs at once is reached; it starts when one ends.",
            config.max_running_per_account
        )));
    }
    if on_device > 0 {
        return Ok(Some(format!(
            "{} is busy with another run; it starts when that one ends.",
            device.name
        )));
    }
    Ok(Some(format!("Waiting for {} to take it.", device.name)))
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
    // Five reads on one connection: under load each pooled use is a wait and a round trip.
    read(store.hold_reader().await?, account_id, job_id).await
}

/// A job as `account_id` may see it, with its owner's account: the whole job for its
/// owner, the space view ([`shared_view::limit`]) for a member of its space.
///
/// # Errors
/// 404 `not_found` for an unknown job, or one neither the caller's nor in its spaces.
pub async fn get_visible(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<(Job, AccountId), ApiError> {
    let mut reads = store.hold_reader().await?;
    match read(&mut reads, account_id, job_id).await {
        Err(error) if error.code() == Code::NotFound => {
            let owner = space_owner_of(&mut reads, account_id, job_id).await?;
            let job = shared_view::limit(read(&mut reads, &owner, job_id).await?);
            Ok((job, owner))
        }
        owned => owned.map(|job| (job, account_id.clone())),
    }
}

/// The owner of a space job `account_id` sees as a member of its space (not its own).
///
/// # Errors
/// 404 `not_found` for any other job.
pub(crate) async fn space_owner_of(
    reads: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<AccountId, ApiError> {
    job_rows::read_in_member_spaces(reads, account_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?
        .account_id()
}

/// The space's newest jobs as its members list them ([`LIST_LIMIT`]).
///
/// # Errors
/// 404 for a space the caller is not in, or a database error.
pub async fn in_space(
    store: &Store,
    account_id: &AccountId,
    space_id: &SpaceId,
) -> Result<Vec<SpaceJobSummary>, ApiError> {
    let mut reads = store.hold_reader().await?;
    spaces::require(&mut reads, account_id, space_id, SpaceRole::Viewer).await?;
    let rows = job_rows::list_in_space(&mut reads, space_id.as_str(), LIST_LIMIT).await?;
    rows.into_iter()
        .map(|row| {
            Ok(SpaceJobSummary {
                id: stored_id(row.id)?,
                title: row.title,
                state: JobState::parse(&row.state).ok_or_else(|| {
                    ApiError::internal(&format_args!("stored job state {:?}", row.state))
                })?,
                owner_name: row.owner_name,
                computer_name: row.computer_name,
                created_at: to_time(row.created_at),
                ended_at: row.ended_at.map(to_time),
            })
        })
        .collect()
}

/// Cancels the queued jobs `account_id` assigned in a space it just left or was removed
/// from: its computers take none of the space's work from then on.
///
/// # Errors
/// A database error.
pub async fn cancel_queued_in_space(
    store: &Store,
    account_id: &AccountId,
    space_id: &SpaceId,
) -> Result<Vec<JobId>, ApiError> {
    let mut cancelled = Vec::new();
    for id in job_rows::queued_in_space(store, account_id, space_id.as_str()).await? {
        let job_id: JobId = stored_id(id)?;
        match cancel(store, account_id, &job_id).await {
            Ok(_) => cancelled.push(job_id),
            // Claimed or ended meanwhile: it is no longer the space's queued work.
            Err(error) if error.code() == Code::InvalidState => {}
            Err(error) => return Err(error),
        }
    }
    Ok(cancelled)
}

/// [`get`] from `reads` (a held connection, or a transaction that just changed the job).
///
/// # Errors
/// 404 `not_found` for a job not of this account.
pub(crate) async fn read(
    mut reads: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Job, ApiError> {
    let row = job_rows::read_for_account(&mut reads, account_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    let mut events = job_rows::events(&mut reads, job_id).await?;
    crate::jobs::timeline::read_all(&mut events);
    let mut job = row.into_job(events)?;
    job.evidence = evidence::list(&mut reads, account_id, job_id).await?;
    job.decisions = decisions::for_job(&mut reads, account_id, job_id).await?;
    job.continued_by = job_rows::follow_up_of(&mut reads, account_id, job_id).await?;
    job.reruns = job_rows::reruns_of(&mut reads, account_id, job_id).await?;
    // The first job of a chain has no number stored: it is run 1 once another follows it.
    if job.run_number.is_none() && (job.continued_by.is_some() || !job.reruns.is_empty()) {
        job.run_number = Some(1);
    }
    Ok(job)
}

/// The title and run number of a job of `account_id` that another names in its chain
/// (the first job of a chain is run 1); `None` when there is no such job.
///
/// # Errors
/// A database error.
pub async fn chain_link(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Option<(String, u32)>, ApiError> {
    let row = job_rows::read_for_account(store, account_id, job_id).await?;
    Ok(row.map(|row| {
        let run = row.chain_run.and_then(|run| u32::try_from(run).ok());
        (row.title, run.unwrap_or(1))
    }))
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
