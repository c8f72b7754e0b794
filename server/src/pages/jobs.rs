//! The job page, which follows a running job until it ends and then shows
//! what it changed, its folder, and how to run it again or carry on from it.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use tether_protocol::decisions::DecisionState;
use tether_protocol::devices::Device;
use tether_protocol::jobs::{Job, JobState};
use tether_protocol::{Code, JobId};

use super::changes::changes_section;
use super::delivery::{asked_text, delivery_section};
use super::follow_up::{chain, load_chain, next_steps, Chain};
use super::layout::{duration_text, error_page, moment, page};
use super::redirects::signin_redirect;
use super::timeline::timeline;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

pub async fn job_page(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    path: web::Path<String>,
) -> HttpResponse {
    let raw_id = path.into_inner();
    let Some(caller) = caller else {
        return signin_redirect(&format!(
            "/jobs/{}",
            JobId::parse(&raw_id)
                .map(|id| id.to_string())
                .unwrap_or_default()
        ));
    };
    let Ok(job_id) = JobId::parse(&raw_id) else {
        return error_page(&caller, &ApiError::not_found("job"));
    };
    match load(&state, &caller, &job_id).await {
        Ok(context) => {
            let now = state.store.clock().now();
            page(&context.job.title, Some(&caller), job_view(&context, now))
        }
        Err(error) => error_page(&caller, &error),
    }
}

/// A job with what its page names besides it: its computer and its neighbours in a chain.
struct JobContext {
    job: Job,
    /// `None` when the computer's record is gone.
    device: Option<Device>,
    chain: Chain,
}

async fn load(state: &AppState, caller: &Caller, job_id: &JobId) -> Result<JobContext, ApiError> {
    let account_id = &caller.account.id;
    let mut job = crate::jobs::get(&state.store, account_id, job_id).await?;
    job.queued_because =
        crate::jobs::queue_reason(&state.store, &state.config, account_id, &job).await?;
    let device = crate::devices::get(&state.store, account_id, &job.device_id, &state.config).await;
    let device = unless_not_found(device)?;
    let chain = load_chain(state, caller, &job).await?;
    Ok(JobContext { job, device, chain })
}

fn unless_not_found<T>(result: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match result {
        Ok(found) => Ok(Some(found)),
        Err(error) if error.code() == Code::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

fn job_view(context: &JobContext, now: DateTime<Utc>) -> Markup {
    let job = &context.job;
    let last_seq = job.events.last().map_or(0, |event| event.seq);
    html! {
        section.job data-job-live={ "/api/jobs/" (job.id) } data-state=(job.state.as_str()) data-last-seq=(last_seq) {
            h1 { (job.title) }
            div.row {
                span data-field="state" class={ "badge state-" (job.state.as_str()) } { (job.state.as_str()) }
                // Only a run carried on or tried again has an attempt worth naming.
                span.muted data-field="attempt" hidden[job.attempt < 2] { "attempt " (job.attempt) }
            }
            (where_it_runs(job, context.device.as_ref()))
            (when_it_ran(job, now))
            (chain(&context.chain))
            @if !job.spec.prompt.is_empty() { p.prompt { (job.spec.prompt) } }
            p.muted {
                @if job.spec.network { "Network on" } @else { "Network off" }
                @if !job.spec.secrets.is_empty() {
                    " · secrets: "
                    @for (n, name) in job.spec.secrets.iter().enumerate() {
                        @if n > 0 { ", " } code { (name) }
                    }
                }
            }
            p data-field="outcome" { @if let Some(summary) = outcome_text(job) { (summary) } }
            (pending_questions(job))
            // The regions marked data-refresh are rendered again when the job's state
            // changes (app.js), so what an ended run brings appears without a reload.
            div #job-changes data-refresh {
                @if let Some(changes) = &job.changes { (changes_section(&job.id, changes)) }
            }
            div #job-delivery data-refresh {
                @if let Some(report) = &job.delivery { (delivery_section(report, job.spec.git.as_ref())) }
            }
            section.run aria-labelledby="run-heading" {
                h2 #run-heading { "The run" }
                div #job-run data-refresh data-last-seq=(last_seq) { (timeline(job, now)) }
            }
            @if !job.state.is_final() {
                form data-while-active data-api={ "/api/jobs/" (job.id) "/cancel" } data-confirm="Stop this job?" {
                    button.danger type="submit" { "Cancel" }
                    span.error {}
                }
            }
            div #job-end data-refresh {
                (evidence_list(job))
                (next_steps(job, context.device.as_ref(), &context.chain))
            }
            (files_section(job))
        }
        script src="/assets/job.js" defer {}
    }
}

/// The computer (linked to its card on Computers), folder, engine and mode.
fn where_it_runs(job: &Job, device: Option<&Device>) -> Markup {
    html! {
        dl.facts {
            dt { "Computer" }
            dd data-field="computer" {
                @match device {
                    Some(device) => {
                        a href={ "/computers#device-" (device.id) } { (device.name) }
                        @if device.revoked_at.is_some() { span.muted { " (no longer paired)" } }
                        @else if !device.online { span.muted { " (offline)" } }
                    }
                    None => span.muted { "a removed computer" },
                }
            }
            dt { "Folder" } dd { code { (job.spec.folder) } }
            dt { "Engine" } dd { (job.spec.engine) }
            dt { "Mode" } dd { (job.spec.mode.as_str()) }
            @if let Some(git) = &job.spec.git { dt { "Git" } dd data-field="git" { (asked_text(git)) } }
        }
    }
}

/// Created, started, ended and how long it took, and why a queued job waits. Rendered again
/// on each change of state.
fn when_it_ran(job: &Job, now: DateTime<Utc>) -> Markup {
    let waiting = job
        .queued_because
        .as_deref()
        .filter(|_| job.state == JobState::Queued);
    html! {
        div #job-when data-refresh {
            dl.facts {
                dt { "Created" } dd { (moment(job.created_at, now)) }
                @if let Some(at) = job.started_at { dt { "Started" } dd { (moment(at, now)) } }
                @if let Some(at) = job.ended_at { dt { "Ended" } dd { (moment(at, now)) } }
                @if let Some(duration) = run_duration(job, now) {
                    dt { "Duration" } dd data-field="duration" { (duration) }
                }
            }
            p.queued-because data-field="queued-because" hidden[waiting.is_none()] {
                @if let Some(reason) = waiting { (reason) }
            }
        }
    }
}

/// How long a run took, or has taken so far: then app.js keeps counting from the server's
/// `now`, so a browser clock set wrong does not matter. Nothing before it started.
fn run_duration(job: &Job, now: DateTime<Utc>) -> Option<Markup> {
    let started = job.started_at?;
    if job.state.is_final() {
        let ended = job.ended_at?;
        return Some(html! { span { (duration_text((ended - started).num_seconds())) } });
    }
    Some(html! {
        span data-since=(started.timestamp_millis()) data-now=(now.timestamp_millis()) {
            (duration_text((now - started).num_seconds()))
        }
    })
}

/// The outcome's summary, unless it only repeats the state ("cancelled" beside the
/// cancelled badge). app.js's `outcomeText` applies the same rule.
fn outcome_text(job: &Job) -> Option<&str> {
    let summary = job.outcome.as_ref()?.summary.trim();
    let repeats = summary
        .trim_end_matches('.')
        .eq_ignore_ascii_case(job.state.as_str());
    (!summary.is_empty() && !repeats).then_some(summary)
}

/// Browsing the job's folder, live from its computer, loaded only when asked
/// (`assets/job.js`).
fn files_section(job: &Job) -> Markup {
    html! {
        section.files aria-labelledby="files-heading" {
            h2 #files-heading { "Files" }
            button.secondary type="button" data-files-toggle aria-expanded="false" aria-controls="files-browser" {
                "Browse files"
            }
            div #files-browser hidden data-files={ "/api/jobs/" (job.id) } data-folder=(job.spec.folder) {
                nav.breadcrumbs aria-label="Folder path" {}
                p.files-status role="status" {}
                ul.tree {}
                div.file-view {}
            }
        }
    }
}

/// The questions waiting for an answer, linked to their cards on the timeline, where they
/// stand among the lines; the decisions stream keeps both current (`data-job-decisions`,
/// `assets/needs_me.js`).
fn pending_questions(job: &Job) -> Markup {
    let pending: Vec<_> = job
        .decisions
        .iter()
        .filter(|decision| decision.state == DecisionState::Pending)
        .collect();
    html! {
        section.decisions data-job-decisions={ "/api/jobs/" (job.id) } hidden[pending.is_empty()] {
            h2 { "Waiting for your answer" }
            ul.decision-links {
                @for decision in pending {
                    li { a href={ "#decision-" (decision.id) } { (decision.question) } }
                }
            }
        }
    }
}

/// The files the run attached: a download link each, or a note for those its computer kept.
fn evidence_list(job: &Job) -> Markup {
    html! {
        @if !job.evidence.is_empty() {
            h2 { "Evidence" }
            ul.evidence {
                @for item in &job.evidence {
                    li data-evidence=(item.id) {
                        @if item.local {
                            strong { (item.name) }
                        } @else {
                            a href={ "/api/jobs/" (job.id) "/evidence/" (item.id) } { (item.name) }
                        }
                        span.muted { " · " (item.kind) " · " (human_size(item.size)) }
                        @if item.local { span.muted { " · on the computer, not uploaded" } }
                        @if let Some(caption) = &item.caption { div.muted { (caption) } }
                    }
                }
            }
        }
    }
}

/// `532 B`, `12.4 KB`, `3.1 MB` (powers of 1000, as the 100 MB limit is).
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut size = bytes as f64 / 1000.0;
    let mut unit = 0;
    while size >= 1000.0 && unit + 1 < UNITS.len() {
        size /= 1000.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}
