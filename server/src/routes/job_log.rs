//! A job's log for its owner: `GET /api/jobs/{id}/log`, the whole output as a text file to
//! download, and `GET /api/jobs/{id}/lines`, its lines a page at a time for the job page's
//! log viewer (`assets/log.js`). Both read the store a page at a time, so a run of 100,000
//! lines is never held in memory at once.

use actix_web::http::header;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use tether_protocol::jobs::JobEvent;
use tether_protocol::{AccountId, JobId};
use utoipa::ToSchema;

use super::table::{Access, Table};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::job_rows;
use crate::store::Store;

/// Lines read from the store at once for a download.
const DOWNLOAD_PAGE: i64 = 2000;
/// Most lines one `lines` call answers, and how many when not asked.
const MAX_LINES_PAGE: i64 = 5000;

pub(super) fn routes(table: &mut Table) {
    table
        .get(
            "/api/jobs/{id}/log",
            download,
            Access::User,
            "Download a job's log",
        )
        .stream(
            "text/plain",
            "Every line of the run, as printed, one per line; the server's and status lines \
             start with their kind in brackets (`[system] `). Sent as an attachment.",
        )
        .errors(&[404]);
    table
        .get(
            "/api/jobs/{id}/lines",
            lines,
            Access::User,
            "A page of a job's lines",
        )
        .query(
            "after",
            "Lines after this `seq` (default 0: from the first).",
        )
        .query("limit", "At most this many lines (default and most: 5000).")
        .answer::<LogPage>(200, "The lines, in order, and whether more follow.")
        .errors(&[400, 404]);
}

#[derive(Deserialize)]
struct PageQuery {
    after: Option<i64>,
    limit: Option<i64>,
}

/// A page of a job's lines.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogPage {
    pub events: Vec<JobEvent>,
    /// Whether lines follow the last of these (ask again after its `seq`).
    pub more: bool,
}

async fn lines(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
    query: web::Query<PageQuery>,
) -> Result<HttpResponse, ApiError> {
    let account_id = &caller.account.id;
    job_rows::device_of(&state.store, account_id, &job_id).await?;
    let after = query.after.unwrap_or(0).max(0);
    let limit = query
        .limit
        .unwrap_or(MAX_LINES_PAGE)
        .clamp(1, MAX_LINES_PAGE);
    // One more than asked says whether more follow.
    let mut events =
        job_rows::events_page(&state.store, account_id, &job_id, after, limit + 1).await?;
    let more = events.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    events.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(LogPage { events, more }))
}

/// The log as a text file, streamed a page of lines at a time.
async fn download(
    state: web::Data<AppState>,
    caller: Caller,
    job_id: web::Path<JobId>,
) -> Result<HttpResponse, ApiError> {
    let job_id = job_id.into_inner();
    let account_id = caller.account.id.clone();
    job_rows::device_of(&state.store, &account_id, &job_id).await?;
    let name = format!("attachment; filename=\"tether-job-{job_id}.log\"");
    let pages = read_pages(state.store.clone(), account_id, job_id);
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/plain; charset=utf-8"))
        .insert_header((header::CONTENT_DISPOSITION, name))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .streaming(pages))
}

/// The job's lines as text, a page at a time; a read error ends the answer early (the
/// client sees it cut short).
fn read_pages(
    store: Store,
    account_id: AccountId,
    job_id: JobId,
) -> impl futures_util::Stream<Item = Result<web::Bytes, std::io::Error>> {
    futures_util::stream::unfold(Some(0_i64), move |after| {
        let store = store.clone();
        let account_id = account_id.clone();
        let job_id = job_id.clone();
        async move {
            let after = after?;
            match job_rows::events_page(&store, &account_id, &job_id, after, DOWNLOAD_PAGE).await {
                Ok(events) if events.is_empty() => None,
                Ok(events) => {
                    let full = events.len() == usize::try_from(DOWNLOAD_PAGE).unwrap_or(0);
                    let next = events.last().map(|event| event.seq).filter(|_| full);
                    Some((Ok(web::Bytes::from(as_text(&events))), next))
                }
                Err(err) => Some((Err(std::io::Error::other(err.to_string())), None)),
            }
        }
    })
}

/// Each line as printed; the server's and status lines marked with their kind.
fn as_text(events: &[JobEvent]) -> String {
    let mut text = String::new();
    for event in events {
        if event.kind != "output" {
            text.push('[');
            text.push_str(&event.kind);
            text.push_str("] ");
        }
        text.push_str(&event.text);
        text.push('\n');
    }
    text
}
