//! Computers: the account's paired devices and how to pair another.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use tether_protocol::capabilities::{Capabilities, EngineCheck, EngineKind, SandboxStrength};
use tether_protocol::devices::Device;
use tether_protocol::jobs::{Job, JobState};
use tether_protocol::secrets::SavedName;

use super::layout::{ago, error_page, page};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::JobFilter;
use crate::state::AppState;

pub async fn show(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    request: HttpRequest,
) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/computers");
    };
    let devices = match crate::devices::list(&state.store, &caller.account.id, &state.config).await
    {
        Ok(devices) => devices,
        Err(error) => return error_page(&caller, &error),
    };
    let current = match current_jobs(&state, &caller).await {
        Ok(jobs) => jobs,
        Err(error) => return error_page(&caller, &error),
    };
    let server_url = crate::routes::links::public_base(&request, &state.config);
    let now = state.store.clock().now();
    let active: Vec<&Device> = devices.iter().filter(|d| d.revoked_at.is_none()).collect();
    let mut cards = Vec::with_capacity(active.len());
    for device in &active {
        let names =
            match crate::devices::secrets::list(&state.store, &caller.account.id, &device.id).await
            {
                Ok(listing) => listing.names,
                Err(error) => return error_page(&caller, &error),
            };
        let running: Vec<&Job> = current
            .iter()
            .filter(|job| job.device_id == device.id)
            .collect();
        cards.push(device_card(device, &running, &names, now));
    }
    page(
        "Computers",
        Some(&caller),
        html! {
            h1 { "Computers" }
            @if active.is_empty() {
                p.muted { "No computer is paired yet." }
            }
            @for card in cards { (card) }
            (how_to_pair(&server_url))
            script type="module" src="/assets/secrets.js" {}
        },
    )
}

/// The account's running and waiting jobs (only its own: `jobs::list` is scoped to it),
/// newest first.
async fn current_jobs(state: &AppState, caller: &Caller) -> Result<Vec<Job>, ApiError> {
    let mut current = Vec::new();
    for job_state in [JobState::Waiting, JobState::Running] {
        let filter = JobFilter {
            device_id: None,
            state: Some(job_state),
        };
        current.extend(crate::jobs::list(&state.store, &caller.account.id, filter).await?);
    }
    current.sort_by_key(|job| std::cmp::Reverse(job.created_at));
    Ok(current)
}

/// One computer at a glance: whether it is there, what it runs with, what it runs now.
fn device_card(
    device: &Device,
    running: &[&Job],
    secrets: &[SavedName],
    now: DateTime<Utc>,
) -> Markup {
    let presence = if device.online { "online" } else { "offline" };
    html! {
        section.card.computer id={ "device-" (device.id) } data-device=(device.id) {
            div.row {
                span.dot.online[device.online] aria-hidden="true" {}
                strong { (device.name) }
                span.muted { (device.platform) }
            }
            div class={ "presence presence-" (presence) } data-field="presence" {
                (presence_text(device, now))
            }
            @match &device.capabilities {
                Some(capabilities) => (reported(capabilities, now)),
                None => p.muted { "It has not reported what it can do yet: start " code { "tether-agent run" } " on it." },
            }
            div data-field="current" {
                @if running.is_empty() {
                    span.muted { "No job running." }
                } @else {
                    @for job in running {
                        div.row {
                            span class={ "badge state-" (job.state.as_str()) } { (job.state.as_str()) }
                            a href={ "/jobs/" (job.id) } { (job.title) }
                        }
                    }
                }
            }
            @if device.seal_key_mismatch {
                p.error { "This computer reported a different seal key. Pair it again before sending it secrets." }
            }
            (secrets_section(device, secrets, now))
            div.row {
                a href={ "/assign?device=" (device.id) } { "Assign a job" }
                a href={ "/jobs?deviceId=" (device.id) } { "Jobs" }
            }
            form.row data-api={ "/api/devices/" (device.id) } data-method="PATCH" {
                input type="text" name="name" value=(device.name) aria-label="Name" maxlength="80" required;
                button.secondary type="submit" { "Rename" }
                span.error {}
            }
            form data-api={ "/api/devices/" (device.id) } data-method="DELETE"
                data-confirm={ "Revoke " (device.name) "? Its running jobs stop and it must pair again." } {
                button.danger type="submit" { "Revoke" }
                span.error {}
            }
        }
    }
}

/// "online · last contact just now", "offline · last seen 3 min ago", "offline · not seen
/// yet".
pub fn presence_text(device: &Device, now: DateTime<Utc>) -> String {
    match (device.online, device.last_seen_at) {
        (true, Some(at)) => format!("online · last contact {}", ago(at, now)),
        (true, None) => "online".to_owned(),
        (false, Some(at)) => format!("offline · last seen {}", ago(at, now)),
        (false, None) => "offline · not seen yet".to_owned(),
    }
}

/// What the computer's last report says: agent, sandbox, folders, engines, git.
fn reported(capabilities: &Capabilities, now: DateTime<Utc>) -> Markup {
    let strength = strength_name(capabilities.sandbox.strength);
    html! {
        dl.facts {
            dt { "Agent" }
            dd data-field="agent" { "tether-agent " (capabilities.agent_version) }
            dt { "Sandbox" }
            dd data-field="sandbox" {
                span class={ "strength-" (strength) } { (strength) }
                span.muted { " (" (capabilities.sandbox.backend) ")" }
                // The reasons are long; folded, so the card stays a glance.
                @if !capabilities.sandbox.reasons.is_empty() {
                    details.reasons {
                        summary.muted { "why " (strength) }
                        @for reason in &capabilities.sandbox.reasons { div.muted { (reason) } }
                    }
                }
            }
            dt { "Folders" }
            dd data-field="folders" {
                @if capabilities.folders.is_empty() {
                    span.muted { "none shared" }
                }
                @for (idx, folder) in capabilities.folders.iter().enumerate() {
                    @if idx > 0 { ", " }
                    code { (folder) }
                }
            }
            dt { "Engines" }
            dd data-field="engines" {
                @if capabilities.engines.is_empty() {
                    span.muted { "none added" }
                }
                @for (idx, engine) in capabilities.engines.iter().enumerate() {
                    @if idx > 0 { ", " }
                    code { (engine.name) } " " span.muted { "(" (engine_kind_name(engine.kind)) ")" }
                    @if engine.kind == EngineKind::Acp {
                        " " span.muted.engine-check { (engine_check_words(engine.check.as_ref(), now)) }
                    }
                }
            }
            @if let Some(git) = &capabilities.git {
                dt { "Git" }
                dd data-field="git" {
                    "git " (git.version)
                    @if !git.github_hosts.is_empty() {
                        span.muted { " · pull requests on " (git.github_hosts.join(", ")) }
                    }
                }
            }
        }
    }
}

/// An ACP engine's last `engine check` in words: "checked 5 min ago: ok, Claude Code
/// 0.16.2", the problem, or "never checked".
fn engine_check_words(check: Option<&EngineCheck>, now: DateTime<Utc>) -> String {
    let Some(check) = check else {
        return "· never checked".to_owned();
    };
    let when = DateTime::<Utc>::from_timestamp_millis(check.checked_at).map_or_else(
        || "checked".to_owned(),
        |at| format!("checked {}", ago(at, now)),
    );
    let what = match (&check.problem, &check.agent) {
        (Some(problem), _) if !check.ok => format!("not ok, {problem}"),
        (_, Some(agent)) => format!("ok, {} {}", agent.name, agent.version),
        _ if check.ok => "ok".to_owned(),
        _ => "not ok".to_owned(),
    };
    format!("· {when}: {what}")
}

/// An engine's kind in words.
fn engine_kind_name(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Recipe => "recipe",
        EngineKind::Acp => "ACP agent",
    }
}

/// The names the computer holds, and a form that seals a new one in the browser, folded
/// away: the summary alone says how many are saved.
fn secrets_section(device: &Device, secrets: &[SavedName], now: DateTime<Utc>) -> Markup {
    let seal_key = device
        .seal_key
        .as_ref()
        .filter(|_| !device.seal_key_mismatch)
        .and_then(|key| serde_json::to_string(key).ok());
    html! {
        details.secrets {
            summary {
                strong { "Secrets" }
                @match secrets.len() {
                    0 => span.muted { " · none saved" },
                    1 => span.muted { " · 1 saved: " },
                    count => span.muted { " · " (count) " saved: " },
                }
                @for (idx, saved) in secrets.iter().enumerate() {
                    @if idx > 0 { ", " }
                    code { (saved.name) }
                }
            }
            @if !secrets.is_empty() {
                ul.secret-names {
                    @for saved in secrets {
                        li {
                            code { (saved.name) } " "
                            @if let Some(sites) = &saved.allow {
                                span.sites { "only to " (sites.join(", ")) } " "
                            }
                            span.muted { "saved " (ago(saved.saved_at, now)) }
                        }
                    }
                }
            }
            @if let Some(seal_key) = seal_key {
                form.row data-seal-device=(device.id) data-seal-key=(seal_key) autocomplete="off" {
                    input type="text" name="name" aria-label="Secret name" placeholder="NAME"
                        pattern="[A-Za-z_][A-Za-z0-9_]{0,63}" maxlength="64" required;
                    input type="password" name="value" aria-label="Secret value" placeholder="value"
                        autocomplete="new-password" required;
                    input type="text" name="allow" aria-label="Allowed sites (optional)"
                        placeholder="Allowed sites (optional)";
                    button.secondary type="submit" { "Send sealed" }
                    div.muted {
                        "Allowed sites, e.g. " code { "api.example.com, https://api.example.com:8443" } ": \
                         a limited secret is never put in a job's environment; a job uses it by \
                         reference with " code { "tether-agent secret-http" } ", only to those sites. \
                         A host covers its subdomains over HTTPS, an origin is exact, and http only \
                         reaches this computer's own loopback addresses. A value shorter than 6                          characters is not hidden in a job's output (it would hide every line)."
                    }
                    span.error {}
                    span.status.muted {}
                }
            } @else if device.seal_key.is_none() {
                div.muted { "Start the agent on this computer to send it secrets." }
            }
        }
    }
}

fn how_to_pair(server_url: &str) -> Markup {
    html! {
        section.card {
            h2 { "Pair a computer" }
            ol {
                li { "On the computer, run " code { "tether-agent pair " (server_url) } "." }
                li { "It prints a code like " code { "BCDF-GHJK" } " and a link. Open the link, or "
                     a href="/link" { "enter the code here" } "." }
                li { "Check the computer's name and key fingerprint, then press Pair." }
                li { "Share a folder and a recipe on the computer, then start it:"
                     pre { "tether-agent folders share work ~/code/app\n"
                           "tether-agent recipe add tests -- cargo test\n"
                           "tether-agent run" } }
            }
        }
    }
}

pub fn strength_name(strength: SandboxStrength) -> &'static str {
    match strength {
        SandboxStrength::Strong => "strong",
        SandboxStrength::Reduced => "reduced",
        SandboxStrength::Advisory => "advisory",
    }
}
