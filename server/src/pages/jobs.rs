//! The job list and the job page, which follows a running job until it ends.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use tether_protocol::jobs::{Job, JobState};
use tether_protocol::{DeviceId, JobId};

use super::layout::{ago, error_page, page};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::jobs::JobFilter;
use crate::AppState;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    device_id: Option<String>,
}

pub async fn list_page(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    query: web::Query<ListQuery>,
) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/jobs");
    };
    let device_id = query
        .device_id
        .as_deref()
        .and_then(|raw| DeviceId::parse(raw).ok());
    let jobs = match crate::jobs::list(
        &state.store,
        &caller.account.id,
        JobFilter {
            device_id,
            state: None,
        },
    )
    .await
    {
        Ok(jobs) => jobs,
        Err(error) => return error_page(&caller, &error),
    };
    let now = state.store.clock().now();
    page(
        "Jobs",
        Some(&caller),
        html! {
            h1 { "Jobs" }
            @if jobs.is_empty() { p.muted { "No jobs yet. " a href="/assign" { "Assign one" } "." } }
            @for job in &jobs {
                a.card.card-link href={ "/jobs/" (job.id) } {
                    div.row { strong { (job.title) } (state_badge(job.state)) }
                    div.muted { (job.spec.engine) " in " (job.spec.folder) " · " (ago(job.created_at, now)) }
                }
            }
        },
    )
}

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
    let job = match JobId::parse(&raw_id) {
        Ok(job_id) => crate::jobs::get(&state.store, &caller.account.id, &job_id).await,
        Err(_) => Err(crate::error::ApiError::not_found("job")),
    };
    match job {
        Ok(job) => {
            let now = state.store.clock().now();
            page(&job.title.clone(), Some(&caller), job_view(&job, now))
        }
        Err(error) => error_page(&caller, &error),
    }
}

fn job_view(job: &Job, now: DateTime<Utc>) -> Markup {
    let last_seq = job.events.last().map_or(0, |event| event.seq);
    html! {
        section data-job-live={ "/api/jobs/" (job.id) } data-state=(job.state.as_str()) data-last-seq=(last_seq) {
            h1 { (job.title) }
            div.row {
                span data-field="state" class={ "badge state-" (job.state.as_str()) } { (job.state.as_str()) }
                span.muted { (job.spec.engine) " in " (job.spec.folder) " · " (job.spec.mode.as_str())
                    " · attempt " span data-field="attempt" { (job.attempt) } }
            }
            @if !job.spec.prompt.is_empty() { p { (job.spec.prompt) } }
            p.muted {
                @if job.spec.network { "Network on" } @else { "Network off" }
                @if !job.spec.secrets.is_empty() {
                    " · secrets: "
                    @for (n, name) in job.spec.secrets.iter().enumerate() {
                        @if n > 0 { ", " } code { (name) }
                    }
                }
            }
            p data-field="outcome" {
                @if let Some(outcome) = &job.outcome { (outcome.summary) }
            }
            (decision_list(job, now))
            h2 { "Output" }
            pre.output {
                @for event in &job.events {
                    @if event.kind != "output" { "[" (event.kind) "] " }
                    (event.text) "\n"
                }
            }
            (evidence_list(job))
            @if !job.state.is_final() {
                form data-while-active data-api={ "/api/jobs/" (job.id) "/cancel" } data-confirm="Stop this job?" {
                    button.danger type="submit" { "Cancel" }
                    span.error {}
                }
            }
        }
    }
}

/// The questions the run asked, answerable here too while pending; the decisions stream
/// keeps the list current (`data-job-decisions`).
fn decision_list(job: &Job, now: DateTime<Utc>) -> Markup {
    html! {
        section.decisions data-job-decisions={ "/api/jobs/" (job.id) } hidden[job.decisions.is_empty()] {
            h2 { "Decisions" }
            div.decision-list {
                @for decision in &job.decisions { (super::needs_me::decision_card(decision, false, now)) }
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

fn state_badge(state: JobState) -> Markup {
    html! { span class={ "badge state-" (state.as_str()) } { (state.as_str()) } }
}
