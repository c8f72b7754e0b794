//! Assign: give one of your computers a job, with choices from what it publishes.

use actix_web::{web, HttpResponse};
use maud::{html, Markup};
use serde::Deserialize;
use tether_protocol::devices::Device;
use tether_protocol::jobs::Mode;
use tether_protocol::secrets::SavedName;

use super::layout::{error_page, page};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::AppState;

#[derive(Deserialize)]
pub struct AssignQuery {
    device: Option<String>,
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
    let chosen = query
        .device
        .as_deref()
        .and_then(|id| devices.iter().find(|d| d.id.as_str() == id))
        .or_else(|| devices.first());
    let held = match chosen {
        Some(device) => {
            match crate::secrets::list(&state.store, &caller.account.id, &device.id).await {
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
                Some(device) => (assign_form(&devices, device, &held)),
            }
        },
    )
}

fn assign_form(devices: &[Device], device: &Device, held: &[SavedName]) -> Markup {
    let (folders, engines) = match &device.capabilities {
        Some(capabilities) => (capabilities.folders.clone(), capabilities.engines.clone()),
        None => (Vec::new(), Vec::new()),
    };
    html! {
        label { "Computer"
            select name="device" data-navigate="/assign?device=" {
                @for each in devices {
                    option value=(each.id) selected[each.id == device.id] {
                        (each.name) @if !each.online { " (offline)" }
                    }
                }
            }
        }
        @if folders.is_empty() || engines.is_empty() {
            p.error {
                (device.name) " has not published a shared folder and an engine yet. On it, run "
                code { "tether-agent folders share LABEL PATH" } ", "
                code { "tether-agent recipe add NAME -- PROGRAM" } " and "
                code { "tether-agent run" } "."
            }
        } @else {
            form.stack data-api="/api/jobs" data-redirect="/jobs/{id}" {
                input type="hidden" name="deviceId" value=(device.id);
                label { "Folder"
                    select name="folder" { @for folder in &folders { option value=(folder) { (folder) } } } }
                label { "Engine"
                    select name="engine" { @for engine in &engines { option value=(engine.name) { (engine.name) } } } }
                label { "Title" input type="text" name="title" maxlength="200" required; }
                label { "Prompt" textarea name="prompt" maxlength="20000" {} }
                label { "Mode"
                    select name="mode" {
                        @for mode in Mode::ALL { option value=(mode.as_str()) selected[mode == Mode::Review] { (mode.as_str()) } }
                    }
                }
                label.inline { input type="checkbox" name="network"; "Allow network access" }
                (secret_choices(held))
                label { "Time limit (minutes)"
                    input type="number" name="timeoutMinutes" value="30" min="1" max="1440" required; }
                p.error role="alert" {}
                button type="submit" { "Assign to " (device.name) }
            }
        }
    }
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
