//! Computers: the account's paired devices and how to pair another.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use tether_protocol::capabilities::SandboxStrength;
use tether_protocol::devices::Device;
use tether_protocol::secrets::SavedName;

use super::layout::{ago, error_page, page};
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::AppState;

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
    let server_url =
        crate::routes::links::public_base(&request, state.config.public_url.as_deref());
    let now = state.store.clock().now();
    let active: Vec<&Device> = devices.iter().filter(|d| d.revoked_at.is_none()).collect();
    let mut cards = Vec::with_capacity(active.len());
    for device in &active {
        let names = match crate::secrets::list(&state.store, &caller.account.id, &device.id).await {
            Ok(listing) => listing.names,
            Err(error) => return error_page(&caller, &error),
        };
        cards.push(device_card(device, &names, now));
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

fn device_card(device: &Device, secrets: &[SavedName], now: DateTime<Utc>) -> Markup {
    let strength = device
        .capabilities
        .as_ref()
        .map(|capabilities| capabilities.sandbox.strength);
    html! {
        section.card id={ "device-" (device.id) } data-device=(device.id) {
            div.row {
                span.dot.online[device.online] title=(if device.online { "online" } else { "offline" }) {}
                strong { (device.name) }
                span.muted { (device.platform) }
            }
            div.muted {
                "Last contact: "
                @match device.last_seen_at { Some(at) => (ago(at, now)), None => "never" }
            }
            div {
                "Sandbox: "
                @match strength {
                    Some(strength) => span class={ "strength-" (strength_name(strength)) } { (strength_name(strength)) },
                    None => span.muted { "not reported yet" },
                }
                @if let Some(capabilities) = &device.capabilities {
                    @for reason in &capabilities.sandbox.reasons { div.muted { (reason) } }
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

/// The names the computer holds, and a form that seals a new one in the browser.
fn secrets_section(device: &Device, secrets: &[SavedName], now: DateTime<Utc>) -> Markup {
    let seal_key = device
        .seal_key
        .as_ref()
        .filter(|_| !device.seal_key_mismatch)
        .and_then(|key| serde_json::to_string(key).ok());
    html! {
        div.secrets {
            strong { "Secrets" }
            @if secrets.is_empty() {
                span.muted { " none saved" }
            } @else {
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
                         reaches this computer's own loopback addresses."
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
