//! Sign-in and sign-up pages.

use actix_web::{web, HttpResponse};
use maud::html;
use serde::Deserialize;

use super::layout::page;
use super::redirects::{escape_query_value, safe_next};

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
                label { "Password (at least 8 characters)"
                    input type="password" name="password" autocomplete="new-password" minlength="8" required; }
                p.error role="alert" {}
                button type="submit" { "Sign up" }
            }
            p.muted { "Have an account? " a href={ "/signin?next=" (escape_query_value(next)) } { "Sign in" } "." }
        },
    )
}
