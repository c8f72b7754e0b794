//! `/link`: approve a pairing code, after seeing which computer asks.

use actix_web::{web, HttpResponse};
use maud::html;
use serde::Deserialize;
use tether_protocol::pairing::{format_user_code, normalize_user_code};

use super::layout::page;
use super::redirects::signin_redirect;
use crate::auth::Caller;
use crate::state::AppState;

#[derive(Deserialize)]
pub struct LinkQuery {
    code: Option<String>,
}

pub async fn show(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    query: web::Query<LinkQuery>,
) -> HttpResponse {
    let code = query.code.as_deref().and_then(normalize_user_code);
    let Some(caller) = caller else {
        let back = match &code {
            Some(code) => format!("/link?code={}", format_user_code(code)),
            None => "/link".to_owned(),
        };
        return signin_redirect(&back);
    };
    let pending = match &code {
        Some(code) => crate::devices::pairing::pending_by_user_code(&state.store, code).await,
        None => None,
    };
    let typed = query.code.clone().unwrap_or_default();
    page(
        "Pair a computer",
        Some(&caller),
        html! {
            h1 { "Pair a computer" }
            @if let (Some(code), Some((name, platform, fingerprint))) = (&code, &pending) {
                section.card {
                    p { "A computer asks to join your account:" }
                    dl {
                        dt { "Code" } dd data-field="code" { code { (format_user_code(code)) } }
                        dt { "Name" } dd data-field="name" { (name) }
                        dt { "Platform" } dd data-field="platform" { (platform) }
                        dt { "Seal-key fingerprint" } dd.fingerprint data-field="fingerprint" { code { (fingerprint) } }
                    }
                    p.muted { "Check that the code and the fingerprint match what the computer printed. Pair only a computer you own." }
                    form.stack data-api="/api/devices/link"
                        data-done="Paired {name}. It can take work from your account now." {
                        input type="hidden" name="userCode" value=(format_user_code(code));
                        p.error role="alert" {}
                        button type="submit" { "Pair " (name) }
                    }
                    p id="done" role="status" hidden {}
                    p { a href="/computers" { "Back to Computers" } }
                }
            } @else {
                @if !typed.is_empty() {
                    p.error { "That code is unknown or has expired. Run the pair command again for a new one." }
                }
                form.stack method="get" action="/link" {
                    label { "Code shown on the computer"
                        input type="text" name="code" value=(typed) placeholder="XXXX-XXXX"
                            autocomplete="off" autocapitalize="characters" required; }
                    button type="submit" { "Continue" }
                }
            }
        },
    )
}
