//! Assign: give one of your computers a job, with choices from what it publishes, starting
//! from the computer, folder and engine of the latest job; personal, or in a space where the
//! caller's role assigns.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use tether_protocol::devices::Device;
use tether_protocol::jobs::{Job, JobSpec, Mode};
use tether_protocol::secrets::SavedName;
use tether_protocol::spaces::Space;

use super::attachments::attach_fields;
use super::delivery::{git_fieldset, FIELD_WORDS};
use super::layout::{ago, error_page, page};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::jobs::JobFilter;
use crate::state::AppState;

#[derive(Deserialize)]
pub struct AssignQuery {
    device: Option<String>,
    /// The space to start from (a space page's "Assign a job in this space").
    space: Option<String>,
}

pub async fn show(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    query: web::Query<AssignQuery>,
) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/assign");
    };
    let devices = match crate::devices::list(&state.store, &caller.account.id, &state.config).await
    {
        Ok(devices) => devices,
        Err(error) => return error_page(&caller, &error),
    };
    let devices: Vec<Device> = devices
        .into_iter()
        .filter(|d| d.revoked_at.is_none())
        .collect();
    let recent =
        match crate::jobs::list(&state.store, &caller.account.id, JobFilter::default()).await {
            Ok(jobs) => jobs,
            Err(error) => return error_page(&caller, &error),
        };
    // The computer asked for, else that of the latest job, else the first.
    let chosen = query
        .device
        .as_deref()
        .and_then(|id| devices.iter().find(|d| d.id.as_str() == id))
        .or_else(|| {
            let last = recent.first()?;
            devices.iter().find(|d| d.id == last.device_id)
        })
        .or_else(|| devices.first());
    // Only where the caller may assign: a viewer's spaces are not offered.
    let spaces: Vec<Space> = match crate::spaces::list(&state.store, &caller.account.id).await {
        Ok(spaces) => spaces
            .into_iter()
            .filter(|space| space.role.assigns())
            .collect(),
        Err(error) => return error_page(&caller, &error),
    };
    let in_space = query
        .space
        .as_deref()
        .and_then(|id| spaces.iter().find(|space| space.id.as_str() == id));
    let held = match chosen {
        Some(device) => {
            match crate::devices::secrets::list(&state.store, &caller.account.id, &device.id).await
            {
                Ok(listing) => listing.names,
                Err(error) => return error_page(&caller, &error),
            }
        }
        None => Vec::new(),
    };
    page(
        "Assign",
        Some(&caller),
        html! {
            h1 { "Assign a job" }
            @match chosen {
                None => p { "Pair a computer first: " a href="/computers" { "Computers" } "." },
                Some(device) => (assign_form(&devices, device, &held, last_used(&recent, device), (&spaces, in_space), state.store.clock().now())),
            }
        },
    )
}

/// The folder and engine of the latest job on `device` (newest first, as `jobs::list`
/// answers), to start from.
fn last_used<'a>(recent: &'a [Job], device: &Device) -> Option<&'a JobSpec> {
    recent
        .iter()
        .find(|job| job.device_id == device.id)
        .map(|job| &job.spec)
}

fn assign_form(
    devices: &[Device],
    device: &Device,
    held: &[SavedName],
    last: Option<&JobSpec>,
    (spaces, in_space): (&[Space], Option<&Space>),
    now: DateTime<Utc>,
) -> Markup {
    // Changing the computer keeps the space asked for.
    let navigate = match in_space {
        Some(space) => format!("/assign?space={}&device=", space.id),
        None => "/assign?device=".to_owned(),
    };
    let (folders, engines) = match &device.capabilities {
        Some(capabilities) => (capabilities.folders.clone(), capabilities.engines.clone()),
        None => (Vec::new(), Vec::new()),
    };
    // Only what the computer still publishes is selected; otherwise the first choice stands.
    let last_folder = last.map(|spec| spec.folder.as_str());
    let last_engine = last.map(|spec| spec.engine.as_str());
    html! {
        label { "Computer"
            select name="device" data-navigate=(navigate) {
                @for each in devices {
                    option value=(each.id) selected[each.id == device.id]
                        data-offline=[offline_warning(each, now)] {
                        (each.name) @if !each.online { " (offline)" }
                    }
                }
            }
        }
        // assign.js writes the chosen option's warning here as soon as the choice changes.
        p.warning #device-offline role="status" hidden[device.online] {
            @if let Some(warning) = offline_warning(device, now) { (warning) }
        }
        @if folders.is_empty() || engines.is_empty() {
            p.error {
                (device.name) " has not published a shared folder and an engine yet. On it, run "
                code { "tether-agent folders share LABEL PATH" } ", "
                code { "tether-agent recipe add NAME -- PROGRAM" } " and "
                code { "tether-agent run" } "."
            }
        } @else {
            form.stack data-api="/api/jobs" data-redirect="/jobs/{id}" data-fields=(FIELD_WORDS) {
                input type="hidden" name="deviceId" value=(device.id);
                label { "Folder"
                    select name="folder" {
                        @for folder in &folders {
                            option value=(folder) selected[last_folder == Some(folder.as_str())] { (folder) }
                        }
                    }
                }
                label { "Engine"
                    select name="engine" {
                        @for engine in &engines {
                            option value=(engine.name) selected[last_engine == Some(engine.name.as_str())] { (engine.name) }
                        }
                    }
                }
                (space_field(spaces, in_space))
                label { "Title" input type="text" name="title" maxlength="200" required; }
                label { "Prompt" textarea name="prompt" maxlength="20000" {} }
                (attach_fields("assign", &[], None, &[]))
                (mode_field("assign", Mode::Review))
                label.inline { input type="checkbox" name="network"; "Allow network access" }
                (secret_choices(held))
                (git_fieldset(device, last.and_then(|spec| spec.git.as_ref())))
                label { "Time limit (minutes)"
                    input type="number" name="timeoutMinutes" value="30" min="1" max="1440" required; }
                p.error role="alert" {}
                button type="submit" { "Assign to " (device.name) }
            }
        }
        script src="/assets/assign.js" defer {}
    }
}

/// Personal, or one of the spaces the caller assigns in; absent without such a space. The
/// values are JSON (`data-json`): `null` for personal, else the space's id.
fn space_field(spaces: &[Space], chosen: Option<&Space>) -> Markup {
    let json = |space: &Space| serde_json::Value::from(space.id.as_str()).to_string();
    html! {
        @if !spaces.is_empty() {
            label { "Space"
                select name="spaceId" data-json aria-describedby="assign-space-hint" {
                    option value="null" selected[chosen.is_none()] { "Personal (only you)" }
                    @for space in spaces {
                        option value=(json(space)) selected[chosen.is_some_and(|c| c.id == space.id)] { (space.name) }
                    }
                }
            }
            p.muted.small #assign-space-hint {
                "In a space, its members see the job's title, prompt, state, timeline, report and \
                 which files changed; never its command output, file contents or secrets. It \
                 runs on your computer as any job does."
            }
        }
    }
}

/// The mode, with one line per mode saying what it means (its ids start with `prefix`).
pub(super) fn mode_field(prefix: &str, selected: Mode) -> Markup {
    html! {
        label { "Mode"
            select name="mode" aria-describedby={ (prefix) "-mode-hints" } {
                @for mode in Mode::ALL { option value=(mode.as_str()) selected[mode == selected] { (mode.as_str()) } }
            }
        }
        ul.mode-hints.muted id={ (prefix) "-mode-hints" } {
            @for mode in Mode::ALL {
                li { strong { (mode.as_str()) } ": " (mode_meaning(mode)) }
            }
        }
    }
}

/// What a mode means, in one sentence for someone new to Tether.
fn mode_meaning(mode: Mode) -> &'static str {
    match mode {
        Mode::Ask => "asks you before it runs a command or changes a file, unless you trusted the folder on that computer.",
        Mode::Review => "works freely in the job's folder, and asks you before it changes another folder or reaches another computer.",
        Mode::Unattended => "never waits for you: it answers its own questions as Tether recommends and lists each answer in the result.",
    }
}

/// For a computer that is offline, what assigning to it means: "laptop is offline (last seen
/// 3 min ago); the job will wait until it is back."
fn offline_warning(device: &Device, now: DateTime<Utc>) -> Option<String> {
    if device.online {
        return None;
    }
    let seen = match device.last_seen_at {
        Some(at) => format!("last seen {}", ago(at, now)),
        None => "not seen yet".to_owned(),
    };
    Some(format!(
        "{} is offline ({seen}); the job will wait until it is back.",
        device.name
    ))
}

/// One checkbox per secret the computer holds: the job gets exactly the ones ticked.
fn secret_choices(held: &[SavedName]) -> Markup {
    html! {
        @if !held.is_empty() {
            fieldset.secrets {
                legend { "Secrets this job may use" }
                @for saved in held {
                    label.inline {
                        input type="checkbox" name="secrets" value=(saved.name) data-list;
                        code { (saved.name) }
                        @if let Some(sites) = &saved.allow {
                            " " span.muted { "only to " (sites.join(", ")) ", by reference" }
                        }
                    }
                }
                p.muted {
                    "A secret without sites arrives as an environment variable of that name; one \
                     limited to sites never does, and is used with "
                    code { "tether-agent secret-http" } " (which needs network access)."
                }
            }
        }
    }
}
