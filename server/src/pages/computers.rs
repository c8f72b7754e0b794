//! Computers: the account's paired devices as one dense table, searched, filtered and
//! sorted in the browser (`assets/lists.js`, the state in the address), kept current
//! without a reload; each row unfolds into the computer's card, and how to pair another.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use tether_protocol::capabilities::{Capabilities, EngineCheck, EngineKind, SandboxStrength};
use tether_protocol::devices::Device;
use tether_protocol::jobs::{Job, JobState};
use tether_protocol::secrets::SavedName;

use super::layout::{ago, error_page, list_etag, live_page, not_modified, when};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::JobFilter;
use crate::state::AppState;

/// The list's state in the address, so a reload or a shared link keeps it: the search
/// text, which computers to show, the sort column (`-` first for descending).
#[derive(Deserialize, Default)]
pub struct ListView {
    q: Option<String>,
    show: Option<String>,
    sort: Option<String>,
}

/// What a list can be narrowed to.
pub const SHOW: [(&str, &str); 4] = [
    ("all", "All"),
    ("online", "Online"),
    ("offline", "Offline"),
    ("busy", "Busy"),
];

pub async fn show(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    request: HttpRequest,
    view: web::Query<ListView>,
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
    let active: Vec<&Device> = devices.iter().filter(|d| d.revoked_at.is_none()).collect();
    let latest = state.config.latest_agent_version.as_deref();
    let etag = list_etag(&caller, &shown(&active, &current, latest));
    if let Some(unchanged) = not_modified(&request, &etag) {
        return unchanged;
    }
    let server_url = crate::routes::links::public_base(&request, &state.config);
    let now = state.store.clock().now();
    let mut rows = Vec::with_capacity(active.len());
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
        let machine = Machine {
            device,
            running: &running,
            latest,
            now,
        };
        // One computer: its card is open at once.
        let open = active.len() == 1;
        rows.push(machine_rows(
            &machine,
            open,
            device_card(device, &running, &names, now),
        ));
    }
    live_page(
        &etag,
        "Computers",
        &caller,
        html! {
            h1 { "Computers" }
            div data-live=(etag) {
            @if active.is_empty() {
                p.muted { "No computer is paired yet." }
                (how_to_pair(&server_url))
            } @else {
                div.machines data-machines {
                    (list_tools(&view, active.len(), &SHOW, "Search name, platform, version, job"))
                    table.machines {
                        caption.visually-hidden { "Paired computers" }
                        thead { tr {
                            (sort_header("name", "Name"))
                            (sort_header("state", "State"))
                            (sort_header("platform", "Platform"))
                            (sort_header("agent", "Agent"))
                            (sort_header("sandbox", "Sandbox"))
                            (sort_header("job", "Current job"))
                            th scope="col" { span.visually-hidden { "Actions" } }
                        } }
                        @for row in rows { (row) }
                    }
                    p.muted.no-match data-no-match hidden { "No computer matches." }
                }
                (revoke_dialog())
                details.pair-help {
                    summary { "Pair another computer" }
                    (how_to_pair(&server_url))
                }
            }
            }
            script type="module" src="/assets/secrets.js" {}
            script src="/assets/lists.js" defer {}
        },
    )
}

/// What the table shows, in a form that changes exactly when a row would: the ETag's
/// input. Last contact counts by the minute (the page says it in minutes).
fn shown(active: &[&Device], current: &[Job], latest: Option<&str>) -> String {
    let mut text = format!("latest={latest:?}\n");
    for device in active {
        let capabilities = device.capabilities.as_ref().map_or_else(String::new, |c| {
            serde_json::to_string(c).unwrap_or_default()
        });
        let seen = device.last_seen_at.map(|at| at.timestamp() / 60);
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{:?}\t{}\t{:?}\t{capabilities}\n",
            device.id,
            device.name,
            device.platform,
            device.online,
            seen,
            device.seal_key_mismatch,
            device.seal_key.as_ref().map(|key| &key.kid),
        ));
    }
    for job in current {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            job.id,
            job.device_id,
            job.state.as_str(),
            job.title
        ));
    }
    text
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

/// One computer as a table row reads it.
pub struct Machine<'a> {
    pub device: &'a Device,
    pub running: &'a [&'a Job],
    pub latest: Option<&'a str>,
    pub now: DateTime<Utc>,
}

impl Machine<'_> {
    /// `online`, `busy` (online or not, while it runs a job) or `offline`.
    fn state(&self) -> &'static str {
        match (self.device.online, self.running.is_empty()) {
            (_, false) => "busy",
            (true, true) => "online",
            (false, true) => "offline",
        }
    }

    fn strength(&self) -> Option<SandboxStrength> {
        self.device
            .capabilities
            .as_ref()
            .map(|capabilities| capabilities.sandbox.strength)
    }

    fn agent_version(&self) -> Option<&str> {
        self.device
            .capabilities
            .as_ref()
            .map(|capabilities| capabilities.agent_version.as_str())
    }

    /// The computer's `<tbody>` holding `rows`, with what `assets/lists.js` searches,
    /// filters and sorts by as its data attributes (`account`: the admin table's column).
    pub fn tbody(&self, account: &str, rows: Markup) -> Markup {
        let device = self.device;
        let strength = self.strength().map_or(0, strength_rank);
        let job = self
            .running
            .first()
            .map_or(String::new(), |job| job.title.clone());
        let text = format!(
            "{} {} {} {} {} {job} {account}",
            device.name,
            device.platform,
            self.agent_version().unwrap_or_default(),
            self.strength().map_or("", strength_name),
            self.state(),
        )
        .to_lowercase();
        html! {
            tbody.machine id={ "device-" (device.id) } data-row=(device.id)
                data-name=(device.name.to_lowercase()) data-state=(self.state())
                data-online=(u8::from(device.online)) data-busy=(u8::from(!self.running.is_empty()))
                data-platform=(device.platform.to_lowercase()) data-agent=(self.agent_version().unwrap_or_default())
                data-sandbox=(strength) data-seen=(device.last_seen_at.map_or(0, |at| at.timestamp_millis()))
                data-job=(job.to_lowercase()) data-account=(account.to_lowercase()) data-text=(text) {
                (rows)
            }
        }
    }

    /// The state in a word, and the last contact.
    pub fn state_cell(&self) -> Markup {
        let device = self.device;
        let state = self.state();
        html! {
            td.m-state data-label="State" {
                span class={ "state state-" (state) } {
                    span.dot.online[device.online] aria-hidden="true" {}
                    " " (state)
                }
                div.muted.small {
                    @match (device.online, device.last_seen_at) {
                        (true, Some(at)) => { "last contact " (when(at, self.now)) },
                        (false, Some(at)) => { "last seen " (when(at, self.now)) },
                        (_, None) => "not seen yet",
                    }
                }
            }
        }
    }

    /// The agent's version, and whether a newer one is out.
    pub fn agent_cell(&self) -> Markup {
        html! {
            td.m-agent data-label="Agent" {
                @match self.agent_version() {
                    Some(version) => {
                        code { (version) }
                        @if update_available(version, self.latest) {
                            " " span.update title={ "tether-agent " (self.latest.unwrap_or_default()) " is out" } {
                                "update available"
                            }
                        }
                    },
                    None => span.muted { "not reported" },
                }
            }
        }
    }

    pub fn sandbox_cell(&self) -> Markup {
        html! {
            td.m-sandbox data-label="Sandbox" {
                @match self.strength() {
                    Some(strength) => span class={ "strength-" (strength_name(strength)) } { (strength_name(strength)) },
                    None => span.muted { "—" },
                }
            }
        }
    }

    pub fn job_cell(&self) -> Markup {
        html! {
            td.m-job data-label="Current job" {
                @match self.running {
                    [] => span.muted { "none" },
                    [job, rest @ ..] => {
                        span class={ "badge state-" (job.state.as_str()) } { (job.state.as_str()) }
                        " " a href={ "/jobs/" (job.id) } { (job.title) }
                        @if !rest.is_empty() { span.muted { " and " (rest.len()) " more" } }
                    },
                }
            }
        }
    }
}

/// A computer's row in the table, then its card, folded unless `open`.
fn machine_rows(machine: &Machine<'_>, open: bool, card: Markup) -> Markup {
    let device = machine.device;
    machine.tbody("", html! {
        tr.machine-row {
            th.m-name scope="row" {
                button.expand type="button" aria-expanded=(open) aria-controls={ "detail-" (device.id) } {
                    (device.name)
                }
            }
            (machine.state_cell())
            td.m-platform data-label="Platform" { (device.platform) }
            (machine.agent_cell())
            (machine.sandbox_cell())
            (machine.job_cell())
            td.m-actions {
                details.menu {
                    summary { span aria-hidden="true" { "⋯" } span.visually-hidden { "Actions for " (device.name) } }
                    div.menu-items {
                        a href={ "/assign?device=" (device.id) } { "Assign a job" }
                        a href={ "/jobs?deviceId=" (device.id) } { "Jobs" }
                        a href={ "/computers/" (device.id) "/console" } { "Console" }
                        button.danger type="button" data-revoke={ "/api/devices/" (device.id) } data-name=(device.name) {
                            "Revoke…"
                        }
                    }
                }
            }
        }
        tr.machine-detail id={ "detail-" (device.id) } hidden[!open] {
            td colspan="7" { (card) }
        }
    })
}

/// The search box, the filter and the count above a table of computers.
pub fn list_tools(
    view: &ListView,
    count: usize,
    options: &[(&str, &str)],
    placeholder: &str,
) -> Markup {
    let show = view.show.as_deref().unwrap_or("all");
    html! {
        div.list-tools role="search" {
            input type="search" name="q" data-search aria-label="Search computers" placeholder=(placeholder)
                value=(view.q.as_deref().unwrap_or_default());
            label.inline {
                "Show"
                select name="show" data-show {
                    @for (value, label) in options {
                        option value=(value) selected[show == *value] { (label) }
                    }
                }
            }
            span.muted data-count aria-live="polite" data-sort-now=(view.sort.as_deref().unwrap_or("name")) {
                (count) @if count == 1 { " computer" } @else { " computers" }
            }
        }
    }
}

/// A column header that sorts the table (`assets/lists.js` sets `aria-sort`).
pub fn sort_header(key: &str, label: &str) -> Markup {
    html! {
        th scope="col" data-sort=(key) {
            button.sort type="button" { (label) span.sort-mark aria-hidden="true" {} }
        }
    }
}

/// The one confirmation for Revoke: `assets/lists.js` names the computer and points the
/// form at it before opening it.
pub fn revoke_dialog() -> Markup {
    html! {
        dialog #revoke-dialog aria-labelledby="revoke-title" {
            form data-api="" data-method="DELETE" {
                h2 #revoke-title { "Revoke " span data-field="revoke-name" {} "?" }
                p { "Its running jobs stop, and it must pair again before it can take another job." }
                div.row {
                    button.secondary type="button" data-close { "Cancel" }
                    button.danger type="submit" { "Revoke" }
                }
                span.error {}
            }
        }
    }
}

/// Whether `installed` is older than `latest` (numbers compared part by part; a version
/// that is not numbers is never called old).
pub fn update_available(installed: &str, latest: Option<&str>) -> bool {
    fn parts(version: &str) -> Option<Vec<u64>> {
        let core = version.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next()?;
        core.split('.').map(|part| part.parse().ok()).collect()
    }
    match latest.and_then(parts).zip(parts(installed)) {
        Some((latest, installed)) => installed < latest,
        None => false,
    }
}

/// Sorting order of sandbox strengths: stronger is higher.
fn strength_rank(strength: SandboxStrength) -> u8 {
    match strength {
        SandboxStrength::Strong => 3,
        SandboxStrength::Reduced => 2,
        SandboxStrength::Advisory => 1,
    }
}

/// One computer's card: whether it is there, what it runs with, what it runs now, its
/// secrets and name.
fn device_card(
    device: &Device,
    running: &[&Job],
    secrets: &[SavedName],
    now: DateTime<Utc>,
) -> Markup {
    let presence = if device.online { "online" } else { "offline" };
    html! {
        section.card.computer data-device=(device.id) aria-label=(device.name) {
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
                a href={ "/computers/" (device.id) "/console" } { "Console" }
            }
            form.row data-api={ "/api/devices/" (device.id) } data-method="PATCH" {
                input type="text" name="name" value=(device.name) aria-label="Name" maxlength="80" required;
                button.secondary type="submit" { "Rename" }
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
                            span.muted { "saved " (when(saved.saved_at, now)) }
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
