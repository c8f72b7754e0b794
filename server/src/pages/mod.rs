//! Web pages: server-rendered HTML with a little progressive JavaScript, no build step.
//!
//! Pages read through the same domain functions as the JSON API and change state only by
//! calling that API from the browser (with the session's CSRF token), so every rule the API
//! enforces holds for the pages too.
//!
//! **Architecture Invariant:** pages never write to the store themselves.
//!
//! Children never use this file's items: the frame they share is `layout`, the redirects
//! `redirects`. Outside, `routes` uses [`not_found`] for a browser's unknown address.

mod account;
mod app_shell;
mod assign;
mod changes;
mod computers;
mod delivery;
mod follow_up;
mod jobs;
mod layout;
mod link;
mod needs_me;
mod notifications;
mod redirects;
mod timeline;

use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};

use crate::auth::Caller;
use redirects::redirect;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(home))
        .route("/assets/app.js", web::get().to(script))
        .route("/assets/seal.js", web::get().to(seal_script))
        .route("/assets/secrets.js", web::get().to(secrets_script))
        .route("/assets/needs_me.js", web::get().to(needs_me_script))
        .route("/assets/job.js", web::get().to(job_script))
        .route("/assets/assign.js", web::get().to(assign_script))
        .route("/assets/app.css", web::get().to(stylesheet))
        .route("/assets/notifications.js", web::get().to(push_script))
        .configure(app_shell::configure)
        .route("/signin", web::get().to(account::signin))
        .route("/signup", web::get().to(account::signup))
        .route("/account", web::get().to(account::show))
        .route("/account/notifications", web::get().to(notifications::show))
        .route("/computers", web::get().to(computers::show))
        .route("/link", web::get().to(link::show))
        .route("/assign", web::get().to(assign::show))
        .route("/needs-me", web::get().to(needs_me::show))
        .route("/jobs", web::get().to(jobs::list_page))
        .route("/jobs/{id}", web::get().to(jobs::job_page));
}

/// The 404 page for a browser's unknown address, signed in or not (a session that does not
/// check out is shown the signed-out frame).
pub async fn not_found(req: &HttpRequest) -> HttpResponse {
    let caller = Option::<Caller>::extract(req).await.ok().flatten();
    layout::not_found_page(caller.as_ref(), req.path())
}

async fn home(caller: Option<Caller>) -> HttpResponse {
    match caller {
        Some(_) => redirect("/computers"),
        None => redirect("/signin"),
    }
}

async fn script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    )
}

/// The browser sealer (DESIGN §5), an ES module the device page imports.
async fn seal_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/seal.js"),
    )
}

/// The Computers page's secret forms (an ES module importing the sealer).
async fn secrets_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/secrets.js"),
    )
}

/// The "Needs me" badge, list and answers, live from the decisions stream.
async fn needs_me_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/needs_me.js"),
    )
}

/// The job page's Changes diffs and folder browser.
async fn job_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/job.js"),
    )
}

/// The Assign page's Git choices, composed into the `git` field the form posts.
async fn assign_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/assign.js"),
    )
}

/// The Notifications page: subscribing this browser, the kinds, Remove.
async fn push_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/notifications.js"),
    )
}

async fn stylesheet() -> HttpResponse {
    asset("text/css; charset=utf-8", include_str!("assets/app.css"))
}

fn asset(content_type: &str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}
