//! Sign-in and sign-up pages, and the Account page: the password, the browser sessions, the
//! passkeys and this browser's console unlock, and the API tokens.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use tether_protocol::auth::{ApiToken, Session};
use tether_protocol::console::{Passkey, MAX_PASSKEYS, MAX_PASSKEY_NAME_CHARS};

use super::layout::{error_page, page, when};
use super::redirects::{escape_query_value, safe_next, signin_redirect};
use crate::accounts::{api_tokens, passkeys, sessions};
use crate::auth::Caller;
use crate::state::AppState;

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

pub async fn signin(query: web::Query<NextQuery>) -> HttpResponse {
    let next = safe_next(query.next.as_deref());
    page(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            form.stack data-api="/api/auth/login" data-redirect=(next) {
                label { "Email" input type="email" name="email" autocomplete="username" required; }
                label { "Password" input type="password" name="password" autocomplete="current-password" required; }
                p.error role="alert" {}
                button type="submit" { "Sign in" }
            }
            p.muted { "New here? " a href={ "/signup?next=" (escape_query_value(next)) } { "Create an account" } "." }
        },
    )
}

pub async fn signup(query: web::Query<NextQuery>) -> HttpResponse {
    let next = safe_next(query.next.as_deref());
    page(
        "Sign up",
        None,
        html! {
            h1 { "Create your account" }
            form.stack data-api="/api/auth/signup" data-redirect=(next) {
                label { "Name" input type="text" name="name" autocomplete="name" required; }
                label { "Email" input type="email" name="email" autocomplete="username" required; }
                label { "Password (at least 8 characters, not a common one: a few uncommon words work well)"
                    input type="password" name="password" autocomplete="new-password" minlength="8" required; }
                p.error role="alert" {}
                button type="submit" { "Sign up" }
            }
            p.muted { "Have an account? " a href={ "/signin?next=" (escape_query_value(next)) } { "Sign in" } "." }
        },
    )
}

/// The signed-in person: their password, their browser sessions (listed with where and when
/// each was last used, ended one by one or all but this one) and their API tokens: listed
/// (never the secret), made (shown once), revoked.
pub async fn show(state: web::Data<AppState>, caller: Option<Caller>) -> HttpResponse {
    let Some(caller) = caller else {
        return signin_redirect("/account");
    };
    let tokens = match api_tokens::list(&state.store, &caller.account.id, &caller.user.id).await {
        Ok(tokens) => tokens,
        Err(error) => return error_page(&caller, &error),
    };
    let sessions = match sessions::list(
        &state.store,
        &caller.account.id,
        &caller.user.id,
        caller.session_id.as_ref(),
    )
    .await
    {
        Ok(sessions) => sessions,
        Err(error) => return error_page(&caller, &error),
    };
    let passkeys = match passkeys::list(&state.store, &caller.account.id, &caller.user.id).await {
        Ok(passkeys) => passkeys,
        Err(error) => return error_page(&caller, &error),
    };
    let now = state.store.clock().now();
    page(
        "Account",
        Some(&caller),
        html! {
            h1 { "Account" }
            div.row {
                p { strong { (caller.user.name) } " · " (caller.user.email) }
                form data-api="/api/auth/logout" data-redirect="/signin" {
                    button.secondary type="submit" { "Sign out" }
                }
            }
            section.card #notifications {
                h2 { "Notifications" }
                p { "Get told on your phone when a run asks you something, a job ends or a computer goes offline." }
                p { a href="/account/notifications" { "Notifications on your devices" } }
            }
            section.card #password {
                h2 { "Password" }
                p.muted { "Changing it signs you out everywhere else. Your API tokens are revoked too unless you keep them." }
                p #password-done role="status" hidden {}
                form.stack data-api="/api/auth/password" data-done-target="#password-done"
                    data-done="Password changed. Every other session has ended."
                    data-fields=r#"{"currentPassword":"Current password","newPassword":"New password"}"# {
                    label { "Current password"
                        input type="password" name="currentPassword" autocomplete="current-password" required; }
                    label { "New password (at least 8 characters, not a common one: a few uncommon words work well)"
                        input type="password" name="newPassword" autocomplete="new-password" minlength="8" required; }
                    label.inline { input type="checkbox" name="keepApiTokens"; "Keep my API tokens working" }
                    p.error role="alert" {}
                    button type="submit" { "Change password" }
                }
            }
            section.card #sessions {
                h2 { "Where you are signed in" }
                p.muted { "Each browser you signed in with, and the network it was last used from. End one you do not recognise, then change your password." }
                table {
                    thead { tr { th { "Browser" } th { "Network" } th { "Last used" } th { "Signed in" } th {} } }
                    tbody { @for session in &sessions { (session_row(session, now)) } }
                }
                form data-api="/api/auth/sessions/end-others"
                    data-confirm="Sign out every other browser? Each has to sign in again." {
                    button.secondary type="submit" { "Sign out everywhere else" }
                    span.error role="alert" {}
                }
            }
            (passkeys_section(&passkeys, caller.session_id.is_some(), now))
            section.card #tokens {
                h2 { "API tokens" }
                p.muted {
                    "A script sends a token as " code { "Authorization: Bearer tut_…" } ". It can do \
                     what you can do here except make tokens. Signing out does not end a token: \
                     revoke it here."
                }
                @if tokens.is_empty() {
                    p.muted { "No token yet." }
                } @else {
                    table {
                        thead { tr { th { "Name" } th { "Made" } th { "Last used" } th { "Expires" } th {} } }
                        tbody { @for token in &tokens { (token_row(token, now)) } }
                    }
                }
                pre.output #new-token hidden {}
                form.stack data-api="/api/tokens" data-done-target="#new-token"
                    data-done="Your new token, shown only this once; copy it now:\n{token}\nReload the page to see it listed." {
                    label { "Name" input type="text" name="name" maxlength="100" placeholder="CI" required; }
                    label { "Expires"
                        select name="expiresInDays" data-number {
                            option value="7" { "in 7 days" }
                            option value="30" selected { "in 30 days" }
                            option value="90" { "in 90 days" }
                            option value="365" { "in a year" }
                            option value="" { "never" }
                        }
                    }
                    p.error role="alert" {}
                    button type="submit" { "Make a token" }
                }
            }
        },
    )
}

/// The person's passkeys (added with `navigator.credentials.create()`, removed after a
/// confirmation) and this browser's console: locked or unlocked, with Unlock and Lock now.
/// `assets/passkeys.js` does the work.
fn passkeys_section(passkeys: &[Passkey], at_browser: bool, now: DateTime<Utc>) -> Markup {
    html! {
        section.card #passkeys {
            h2 { "Passkeys" }
            p.muted {
                "A passkey (your phone, your computer's screen lock, a security key) unlocks the \
                 console of a computer in this browser. The console locks after 30 minutes \
                 without use, 8 hours after unlocking, when you sign out and when its passkey \
                 is removed."
            }
            @if passkeys.is_empty() {
                p.muted { "No passkey yet." }
            } @else {
                table {
                    thead { tr { th { "Name" } th { "Added" } th { "Last used" } th {} } }
                    tbody { @for passkey in passkeys { (passkey_row(passkey, now)) } }
                }
            }
            @if passkeys.len() < MAX_PASSKEYS {
                form.stack data-passkey-add {
                    label { "Name of the new passkey"
                        input type="text" name="name" maxlength=(MAX_PASSKEY_NAME_CHARS)
                            placeholder="My phone" required; }
                    p.error role="alert" {}
                    button type="submit" { "Add a passkey" }
                }
            } @else {
                p.muted { "You have " (MAX_PASSKEYS) " passkeys, the most one person keeps." }
            }
            @if at_browser {
                div.row data-console-status {
                    p { strong { "Console: " } span data-console-state role="status" { "…" } }
                    button type="button" data-console-unlock hidden { "Unlock" }
                    button.secondary type="button" data-console-lock hidden { "Lock now" }
                    span.error role="alert" {}
                }
            }
            script src="/assets/passkeys.js" defer {}
        }
    }
}

fn passkey_row(passkey: &Passkey, now: DateTime<Utc>) -> Markup {
    let time = |text: &str| {
        DateTime::parse_from_rfc3339(text)
            .map(|at| at.with_timezone(&Utc))
            .ok()
    };
    html! {
        tr data-passkey=(passkey.id) {
            td { (passkey.name) }
            td { @if let Some(at) = time(&passkey.created_at) { (when(at, now)) } }
            td {
                @match passkey.last_used_at.as_deref().and_then(time) {
                    Some(at) => (when(at, now)),
                    None => span.muted { "never" },
                }
            }
            td {
                form data-passkey-remove=(passkey.id)
                    data-confirm={ "Remove the passkey " (passkey.name) "? A console it unlocked locks now." } {
                    button.danger type="submit" aria-label={ "Remove the passkey " (passkey.name) } { "Remove" }
                    span.error {}
                }
            }
        }
    }
}

fn session_row(session: &Session, now: DateTime<Utc>) -> Markup {
    let what = format!("{} on {}", session.browser, session.platform);
    html! {
        tr data-session=(session.id) {
            td { (what) @if session.current { " " span.badge { "this browser" } } }
            td { code { (session.address) } }
            td { (when(session.last_used_at, now)) }
            td { (when(session.created_at, now)) }
            td {
                @if !session.current {
                    form data-api={ "/api/auth/sessions/" (session.id) } data-method="DELETE"
                        data-confirm={ "End the session of " (what) "? It has to sign in again." } {
                        button.danger type="submit" aria-label={ "End the session of " (what) } { "End" }
                        span.error {}
                    }
                }
            }
        }
    }
}

fn token_row(token: &ApiToken, now: DateTime<Utc>) -> Markup {
    let expired = api_tokens::expired(token, now);
    html! {
        tr data-token=(token.id) {
            td { (token.name) }
            td { (when(token.created_at, now)) }
            td { @match token.last_used_at { Some(at) => (when(at, now)), None => span.muted { "never" } } }
            td {
                @match token.expires_at {
                    None => span.muted { "never" },
                    Some(_) if expired => span.badge.state-failed { "expired" },
                    Some(at) => (at.format("%Y-%m-%d")),
                }
            }
            td {
                form data-api={ "/api/tokens/" (token.id) } data-method="DELETE"
                    data-confirm={ "Revoke " (token.name) "? Scripts using it get 401 from now on." } {
                    button.danger type="submit" { "Revoke" }
                    span.error {}
                }
            }
        }
    }
}
