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
mod admin;
mod app_shell;
mod assign;
mod attachments;
mod changes;
mod computers;
mod console;
mod delivery;
mod engine_session;
mod follow_up;
mod job_list;
mod jobs;
mod layout;
mod link;
mod needs_me;
mod notifications;
mod redirects;
mod results;
mod space_job;
mod spaces;
mod timeline;

use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, HttpResponse};

use crate::auth::Caller;
use crate::routes::Table;
use redirects::redirect;

/// The pages and the files they load, declared in the route table after the API's.
pub fn routes(table: &mut Table) {
    table.page("/", home, "Home: the Computers page, or sign in");
    table.asset("/assets/app.js", script, "text/javascript");
    table.asset("/assets/seal.js", seal_script, "text/javascript");
    table.asset("/assets/secrets.js", secrets_script, "text/javascript");
    table.asset("/assets/passkeys.js", passkeys_script, "text/javascript");
    table.asset("/assets/needs_me.js", needs_me_script, "text/javascript");
    table.asset("/assets/job.js", job_script, "text/javascript");
    table.asset("/assets/results.js", results_script, "text/javascript");
    table.asset("/assets/log.js", log_script, "text/javascript");
    table.asset("/assets/assign.js", assign_script, "text/javascript");
    table.asset("/assets/lists.js", lists_script, "text/javascript");
    table.asset("/assets/console.js", console_script, "text/javascript");
    table.asset("/assets/spaces.js", spaces_script, "text/javascript");
    table.asset("/assets/app.css", stylesheet, "text/css");
    table.asset("/assets/notifications.js", push_script, "text/javascript");
    app_shell::routes(table);
    table.page("/signin", account::signin, "Sign in");
    table.page("/signup", account::signup, "Sign up");
    table.page("/account", account::show, "Account and API tokens");
    table.page(
        "/account/notifications",
        notifications::show,
        "Notifications on this and other devices",
    );
    table.page("/computers", computers::show, "Computers");
    table.page(
        "/computers/{id}/console",
        console::show,
        "The owner's console on one computer",
    );
    table.page("/link", link::show, "Approve a pairing code");
    table.page("/assign", assign::show, "Assign a job");
    table.page("/needs-me", needs_me::show, "Pending decisions");
    table.page("/jobs", job_list::list_page, "Jobs");
    table.page("/jobs/{id}", jobs::job_page, "One job");
    table.page("/spaces", spaces::list, "Spaces, and a new one");
    table.page(
        "/spaces/{id}",
        spaces::show,
        "One space: its jobs, members, invitations and ledger",
    );
    table.page(
        "/invitations",
        spaces::invitation,
        "An invitation link (its secret in the fragment)",
    );
    table.page(
        "/admin",
        admin::show,
        "The platform admin's computers and ledger",
    );
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

/// The console's terminal and Code tab (`console.rs`).
async fn console_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    )
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
/// Passkeys and the console unlock (`window.tetherPasskeys`), and the Account page's
/// sections of them.
async fn passkeys_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/passkeys.js"),
    )
}

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

/// The job page's held files: Preview, Release, Discard.
async fn results_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/results.js"),
    )
}

/// The job page's log viewer.
async fn log_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/log.js"),
    )
}

/// Jobs, Computers and Admin kept current, and the Computers table's search, filter, sort.
async fn lists_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/lists.js"),
    )
}

/// The Assign page's Git choices, composed into the `git` field the form posts.
async fn assign_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/assign.js"),
    )
}

/// Spaces: a space's live jobs, a new invitation shown once, and an invitation opened.
async fn spaces_script() -> HttpResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("assets/spaces.js"),
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
