//! The platform admin's page: every account's computers (revoke any, after a confirmation)
//! and the audit ledger, filtered by account, device, action and time. Only the platform
//! admin sees it; anyone else is answered 403, as the admin API answers.

use std::collections::HashMap;

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, NaiveDate, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use tether_protocol::devices::AdminDevice;
use tether_protocol::{AccountId, DeviceId};

use super::computers::{list_tools, revoke_dialog, sort_header, ListView, Machine, SHOW};
use super::layout::{error_page, list_etag, live_page, not_modified, when};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::ledger::{self, AdminEntry, LedgerSearch};

/// The newest entries the page shows at once.
const LEDGER_ROWS: i64 = 200;

/// The ledger's filters, as the form sends them (empty fields narrow nothing).
#[derive(Deserialize, Default)]
pub struct LedgerFilters {
    account: Option<String>,
    device: Option<String>,
    action: Option<String>,
    /// `YYYY-MM-DD`, from the start of that day (UTC).
    since: Option<String>,
    /// `YYYY-MM-DD`, to the end of that day (UTC).
    until: Option<String>,
}

pub async fn show(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    request: HttpRequest,
    view: web::Query<ListView>,
    filters: web::Query<LedgerFilters>,
) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/admin");
    };
    if let Err(error) = caller.require_admin() {
        return error_page(&caller, &error);
    }
    let search = match ledger_search(&filters) {
        Ok(search) => search,
        Err(error) => return error_page(&caller, &error),
    };
    let (devices, entries, accounts, kinds) = match read(&state, &search).await {
        Ok(read) => read,
        Err(error) => return error_page(&caller, &error),
    };
    let latest = state.config.latest_agent_version.as_deref();
    let etag = list_etag(&caller, &shown(&devices, &entries, latest));
    if let Some(unchanged) = not_modified(&request, &etag) {
        return unchanged;
    }
    let names: HashMap<&str, &str> = accounts
        .iter()
        .map(|(id, name)| (id.as_str(), name.as_str()))
        .collect();
    let now = state.store.clock().now();
    live_page(
        &etag,
        "Admin",
        &caller,
        html! {
            h1 { "Admin" }
            div data-live=(etag) {
                section aria-labelledby="admin-computers" {
                    h2 #admin-computers { "Every computer" }
                    @if devices.is_empty() {
                        p.muted { "No account has a computer paired." }
                    } @else {
                        div.machines data-machines {
                            (list_tools(&view, devices.len(), &SHOW[..3], "Search name, account, platform, version"))
                            table.machines.admin {
                                caption.visually-hidden { "Every account's computers" }
                                thead { tr {
                                    (sort_header("name", "Name"))
                                    (sort_header("account", "Account"))
                                    (sort_header("state", "State"))
                                    (sort_header("platform", "Platform"))
                                    (sort_header("agent", "Agent"))
                                    (sort_header("sandbox", "Sandbox"))
                                    th scope="col" { span.visually-hidden { "Actions" } }
                                } }
                                @for admin in &devices {
                                    (admin_row(admin, names.get(admin.account_id.as_str()).copied(), latest, now))
                                }
                            }
                            p.muted.no-match data-no-match hidden { "No computer matches." }
                        }
                    }
                }
                (ledger_section(&filters, &accounts, &kinds, &entries, now))
            }
            (revoke_dialog())
            script src="/assets/lists.js" defer {}
        },
    )
}

type Read = (
    Vec<AdminDevice>,
    Vec<AdminEntry>,
    Vec<(String, String)>,
    Vec<String>,
);

async fn read(state: &AppState, search: &LedgerSearch) -> Result<Read, ApiError> {
    let devices = crate::devices::admin_list(&state.store, &state.config)
        .await?
        .into_iter()
        .filter(|admin| admin.device.revoked_at.is_none())
        .collect();
    let entries = ledger::search(&state.store, search).await?;
    let accounts = ledger::account_names(&state.store).await?;
    let kinds = ledger::kinds(&state.store).await?;
    Ok((devices, entries, accounts, kinds))
}

/// The form's fields as a search; a field that is not an id or a date is a 400 naming it.
fn ledger_search(filters: &LedgerFilters) -> Result<LedgerSearch, ApiError> {
    let given = |field: &Option<String>| {
        field
            .as_deref()
            .map(str::trim)
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    let account_id = given(&filters.account)
        .map(|raw| {
            AccountId::parse(&raw)
                .map_err(|_| ApiError::invalid_field("account", "must be an account's id"))
        })
        .transpose()?;
    let device_id = given(&filters.device)
        .map(|raw| {
            DeviceId::parse(&raw)
                .map(|id| id.to_string())
                .map_err(|_| ApiError::invalid_field("device", "must be a computer's id"))
        })
        .transpose()?;
    let day = |field: &str, raw: Option<String>| {
        raw.map(|raw| {
            NaiveDate::parse_from_str(&raw, "%Y-%m-%d")
                .ok()
                .and_then(|date| date.and_hms_opt(0, 0, 0))
                .map(|start| start.and_utc().timestamp_millis())
                .ok_or_else(|| ApiError::invalid_field(field, "must be a date, YYYY-MM-DD"))
        })
        .transpose()
    };
    const DAY_MS: i64 = 86_400_000;
    Ok(LedgerSearch {
        account_id,
        device_id,
        kind: given(&filters.action),
        since: day("since", given(&filters.since))?,
        until: day("until", given(&filters.until))?.map(|start| start + DAY_MS),
        limit: LEDGER_ROWS,
    })
}

/// What the page shows, changing exactly when it would: the ETag's input.
fn shown(devices: &[AdminDevice], entries: &[AdminEntry], latest: Option<&str>) -> String {
    let mut text = format!("latest={latest:?}\n");
    for admin in devices {
        let device = &admin.device;
        let capabilities = device.capabilities.as_ref().map_or_else(String::new, |c| {
            serde_json::to_string(c).unwrap_or_default()
        });
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{:?}\t{capabilities}\n",
            device.id,
            admin.account_id,
            device.name,
            device.platform,
            device.online,
            device.last_seen_at.map(|at| at.timestamp() / 60),
        ));
    }
    for entry in entries {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            entry.at, entry.account_id, entry.kind, entry.subject
        ));
    }
    text
}

/// One computer of any account: its row (no current job: the admin sees computers, not
/// what the accounts run on them).
fn admin_row(
    admin: &AdminDevice,
    account: Option<&str>,
    latest: Option<&str>,
    now: DateTime<Utc>,
) -> Markup {
    let device = &admin.device;
    let account = account.unwrap_or("a removed account");
    let machine = Machine {
        device,
        running: &[],
        latest,
        now,
    };
    machine.tbody(
        account,
        html! {
            tr.machine-row {
                th.m-name scope="row" { (device.name) }
                td.m-account data-label="Account" {
                    (account)
                    div.muted.small { code { (admin.account_id) } }
                }
                (machine.state_cell())
                td.m-platform data-label="Platform" { (device.platform) }
                (machine.agent_cell())
                (machine.sandbox_cell())
                td.m-actions {
                    details.menu {
                        summary { span aria-hidden="true" { "⋯" } span.visually-hidden { "Actions for " (device.name) } }
                        div.menu-items {
                            a href={ "/admin?device=" (device.id) "#ledger" } { "Its ledger" }
                            button.danger type="button" data-revoke={ "/api/admin/devices/" (device.id) }
                                data-name=(device.name) {
                                "Revoke…"
                            }
                        }
                    }
                }
            }
        },
    )
}

fn ledger_section(
    filters: &LedgerFilters,
    accounts: &[(String, String)],
    kinds: &[String],
    entries: &[AdminEntry],
    now: DateTime<Utc>,
) -> Markup {
    let chosen = |field: &Option<String>| field.as_deref().unwrap_or_default().trim().to_owned();
    let account = chosen(&filters.account);
    let action = chosen(&filters.action);
    html! {
        section #ledger aria-labelledby="ledger-heading" {
            h2 #ledger-heading { "Audit ledger" }
            form.ledger-filters method="get" action="/admin#ledger" {
                label {
                    "Account"
                    select name="account" {
                        option value="" { "Every account" }
                        @for (id, name) in accounts {
                            option value=(id) selected[account == *id] { (name) " · " (id) }
                        }
                    }
                }
                label {
                    "Computer id"
                    input type="text" name="device" value=(chosen(&filters.device)) placeholder="every computer"
                        spellcheck="false" autocomplete="off";
                }
                label {
                    "Action"
                    select name="action" {
                        option value="" { "Every action" }
                        @for kind in kinds {
                            option value=(kind) selected[action == *kind] { (kind) }
                        }
                    }
                }
                label { "From" input type="date" name="since" value=(chosen(&filters.since)); }
                label { "To" input type="date" name="until" value=(chosen(&filters.until)); }
                div.row {
                    button type="submit" { "Filter" }
                    a href="/admin#ledger" { "Clear" }
                }
            }
            div #ledger-entries data-live-region {
                @if entries.is_empty() {
                    p.muted { "No entry matches." }
                } @else {
                    p.muted {
                        @if entries.len() as i64 >= LEDGER_ROWS { "The newest " (LEDGER_ROWS) " entries that match." }
                        @else { (entries.len()) " entries, newest first." }
                    }
                    table.ledger {
                        caption.visually-hidden { "Ledger entries" }
                        thead { tr {
                            th scope="col" { "When" }
                            th scope="col" { "Account" }
                            th scope="col" { "Action" }
                            th scope="col" { "Subject" }
                            th scope="col" { "Detail" }
                        } }
                        tbody {
                            @for entry in entries { (ledger_row(entry, now)) }
                        }
                    }
                }
            }
        }
    }
}

fn ledger_row(entry: &AdminEntry, now: DateTime<Utc>) -> Markup {
    let at = DateTime::<Utc>::from_timestamp_millis(entry.at);
    html! {
        tr data-kind=(entry.kind) {
            td data-label="When" { @if let Some(at) = at { (when(at, now)) } }
            td data-label="Account" { (entry.account_name) }
            td data-label="Action" { code { (entry.kind) } }
            td data-label="Subject" { code { (entry.subject) } }
            td data-label="Detail" { code.detail { (entry.detail_json) } }
        }
    }
}
