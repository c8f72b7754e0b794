//! The Jobs list: every job of the account, newest first, with where and how long it ran,
//! kept current without a reload (`assets/lists.js` asks again with the page's ETag).

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use tether_protocol::devices::Device;
use tether_protocol::jobs::{Job, JobState};
use tether_protocol::DeviceId;

use super::jobs::run_duration;
use super::layout::{error_page, list_etag, live_page, not_modified, when};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::JobFilter;
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    device_id: Option<String>,
}

pub async fn list_page(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    query: web::Query<ListQuery>,
    request: HttpRequest,
) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/jobs");
    };
    let device_id = query
        .device_id
        .as_deref()
        .and_then(|raw| DeviceId::parse(raw).ok());
    let filter = JobFilter {
        device_id,
        state: None,
    };
    let (jobs, devices) = match list_with_devices(&state, &caller, filter).await {
        Ok(found) => found,
        Err(error) => return error_page(&caller, &error),
    };
    let names: HashMap<&DeviceId, &str> = devices
        .iter()
        .map(|device| (&device.id, device.name.as_str()))
        .collect();
    let etag = list_etag(&caller, &shown(&jobs, &names));
    if let Some(unchanged) = not_modified(&request, &etag) {
        return unchanged;
    }
    let now = state.store.clock().now();
    live_page(
        &etag,
        "Jobs",
        &caller,
        html! {
            h1 { "Jobs" }
            div #job-list data-live=(etag) data-live-region {
                @if jobs.is_empty() { p.muted { "No jobs yet. " a href="/assign" { "Assign one" } "." } }
                @for job in &jobs {
                    (job_card(job, names.get(&job.device_id).copied(), now))
                }
            }
            script src="/assets/lists.js" defer {}
        },
    )
}

/// What the list shows, changing exactly when a card would: the ETag's input. A running
/// job's duration counts in the browser, so only its start is here.
fn shown(jobs: &[Job], names: &HashMap<&DeviceId, &str>) -> String {
    let mut text = String::new();
    for job in jobs {
        text.push_str(&format!(
            "{}\t{}\t{}\t{:?}\t{}\t{}\t{}\t{:?}\t{:?}\n",
            job.id,
            job.state.as_str(),
            job.title,
            names.get(&job.device_id),
            job.spec.engine,
            job.spec.folder,
            job.created_at.timestamp_millis(),
            job.started_at.map(|at| at.timestamp_millis()),
            job.ended_at.map(|at| at.timestamp_millis()),
        ));
    }
    text
}

async fn list_with_devices(
    state: &AppState,
    caller: &Caller,
    filter: JobFilter,
) -> Result<(Vec<Job>, Vec<Device>), ApiError> {
    let jobs = crate::jobs::list(&state.store, &caller.account.id, filter).await?;
    let devices = crate::devices::list(&state.store, &caller.account.id, &state.config).await?;
    Ok((jobs, devices))
}

/// One line of the list: title and state, then where it ran, for how long, and when.
fn job_card(job: &Job, device_name: Option<&str>, now: DateTime<Utc>) -> Markup {
    html! {
        a.card.card-link href={ "/jobs/" (job.id) } {
            div.row { strong { (job.title) } (state_badge(job.state)) }
            div.muted {
                (device_name.unwrap_or("a removed computer")) " · " (job.spec.engine) " in " (job.spec.folder)
                @if let Some(duration) = run_duration(job, now) { " · " (duration) }
                " · " (when(job.created_at, now))
            }
        }
    }
}

fn state_badge(state: JobState) -> Markup {
    html! { span class={ "badge state-" (state.as_str()) } { (state.as_str()) } }
}
