//! What the server-sent event streams (`GET /api/decisions/events`,
//! `GET /api/spaces/{id}/events`) share: the answer's headers, the ticks they keep, and the
//! check that the browser session that opened one still holds.

use std::convert::Infallible;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::HttpResponse;
use tether_protocol::SessionId;
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};

use crate::accounts::sessions;
use crate::store::Store;

/// A comment this often keeps proxies from closing a quiet stream.
pub(super) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// An open stream: its next chunk, or `None` when it ends.
pub(super) trait Feed: 'static {
    async fn next_chunk(&mut self) -> Option<Bytes>;
}

/// The `text/event-stream` answer that sends `feed`'s chunks until it ends.
pub(super) fn respond(feed: impl Feed) -> HttpResponse {
    let body = futures_util::stream::unfold(feed, |mut feed| async move {
        let chunk = feed.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), feed))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-store"))
        // nginx and similar proxies would otherwise hold events back.
        .insert_header(("x-accel-buffering", "no"))
        .streaming(body)
}

/// Ticks every `period`, the first one `period` from now; late ticks are not made up.
pub(super) fn every(period: Duration) -> Interval {
    let mut ticks = interval_at(Instant::now() + period, period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks
}

/// Whether the session that opened a stream has ended (an API token's stream has none); on
/// a database error, not yet: the next check tries again.
pub(super) async fn session_ended(store: &Store, session_id: Option<&SessionId>) -> bool {
    let Some(session_id) = session_id else {
        return false;
    };
    match sessions::is_open(store, session_id).await {
        Ok(open) => !open,
        Err(error) => {
            tracing::warn!(%error, "session not checked for an event stream");
            false
        }
    }
}
