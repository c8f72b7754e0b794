//! Job feeds: the hub's part of a job's live news (lines appended, the job changed) for the
//! pages that watch it (`jobs::live`, `GET /api/jobs/{id}/events`).
//!
//! - **In process**: a map from job id to a broadcast sender, made when the job's first
//!   watcher on this replica follows it and dropped with its last, so news of a job nobody
//!   watches costs one map lookup ([`Hub::job_followed`]).
//! - **Redis**: a replica subscribes `tether:job:{jobId}` only while it holds a watcher of
//!   that job. Every piece of news is delivered to this replica's watchers at once and
//!   published there, named with this replica, which skips its own echo.
//!
//! **Invariant:** news is a hint, like every frame here. A watcher that misses some (a lost
//! publication, a lagging receiver, a replica that heard nothing) reads the gap from the
//! database: the stream never relies on news for what it sends, only for when.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tether_protocol::JobId;
use tokio::sync::broadcast;

use super::{job_channel as channel, Bus, Hub, JobNews, JobWatchers};
use crate::error::ApiError;

/// News one watcher may fall behind by before it is told it lagged (and reads the gap).
pub const JOB_BUFFER: usize = 64;

/// An open watcher of one job's news on this replica. Dropping it closes the registration
/// (and, for the job's last one here, its Redis subscription).
pub struct JobFollower {
    hub: Hub,
    job_id: String,
    /// The job's news, in the order it was published here.
    pub news: broadcast::Receiver<Arc<JobNews>>,
}

impl Drop for JobFollower {
    fn drop(&mut self) {
        let mut local = self.hub.local();
        let Some(watchers) = local.jobs.get_mut(&self.job_id) else {
            return;
        };
        watchers.count = watchers.count.saturating_sub(1);
        if watchers.count == 0 {
            local.jobs.remove(&self.job_id);
            self.hub.unsubscribe(channel(&self.job_id));
        }
    }
}

/// News on Redis, with the replica that published it (and delivered it itself).
#[derive(Serialize)]
struct Outgoing<'a> {
    from: &'a str,
    news: &'a JobNews,
}

#[derive(Deserialize)]
struct Incoming {
    from: String,
    news: JobNews,
}

impl Hub {
    /// Follows the news of `job_id`. With Redis, the job's first watcher on this replica
    /// subscribes to its channel before this returns, so news published after the watch
    /// began reaches it (without Redis in time, it still follows; what it misses it reads).
    pub async fn follow_job(&self, job_id: &JobId) -> JobFollower {
        let (news, acked) = {
            let mut local = self.local();
            let watchers = local
                .jobs
                .entry(job_id.to_string())
                .or_insert_with(|| JobWatchers {
                    sender: broadcast::channel(JOB_BUFFER).0,
                    count: 0,
                });
            watchers.count += 1;
            let news = watchers.sender.subscribe();
            let first = watchers.count == 1;
            // Asked under the lock, so subscribes and unsubscribes keep their order.
            (
                news,
                first.then(|| self.subscribe(channel(job_id.as_str()))),
            )
        };
        if !Hub::subscribed(acked.flatten()).await {
            tracing::warn!(job_id = %job_id, "no Redis subscription for a job's watcher; it catches up by reading");
        }
        JobFollower {
            hub: self.clone(),
            job_id: job_id.to_string(),
            news,
        }
    }

    /// Whether news of `job_id` may have a watcher: one map lookup in process; with Redis,
    /// always (another replica may hold one).
    pub fn job_followed(&self, job_id: &JobId) -> bool {
        match &self.inner.bus {
            Bus::InProcess => self.local().jobs.contains_key(job_id.as_str()),
            Bus::Redis(_) => true,
        }
    }

    /// Hands `news` of `job_id` to its watchers on every replica: this one's at once, the
    /// others' through Redis. A hint: a failure is logged, and watchers read what they miss.
    pub async fn publish_job(&self, job_id: &JobId, news: JobNews) {
        let news = Arc::new(news);
        self.deliver_job(job_id.as_str(), news.clone());
        let Bus::Redis(bus) = &self.inner.bus else {
            return;
        };
        let outgoing = Outgoing {
            from: &self.inner.replica,
            news: &news,
        };
        let published = match serde_json::to_string(&outgoing) {
            Ok(payload) => bus
                .query::<i64>(
                    redis::cmd("PUBLISH")
                        .arg(channel(job_id.as_str()))
                        .arg(payload),
                )
                .await
                .map(drop),
            Err(error) => Err(ApiError::from(error)),
        };
        if let Err(error) = published {
            tracing::warn!(job_id = %job_id, %error, "job news not published");
        }
    }

    /// Hands news published on Redis by another replica to this replica's watchers.
    pub(super) fn deliver_job_message(&self, job_id: &str, payload: &[u8]) {
        match serde_json::from_slice::<Incoming>(payload) {
            Ok(incoming) if incoming.from == self.inner.replica => {}
            Ok(incoming) => self.deliver_job(job_id, Arc::new(incoming.news)),
            Err(error) => tracing::warn!(%error, "undecodable job news on Redis"),
        }
    }

    fn deliver_job(&self, job_id: &str, news: Arc<JobNews>) {
        if let Some(watchers) = self.local().jobs.get(job_id) {
            // No receiver left is fine: the last watcher is closing.
            let _ = watchers.sender.send(news);
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use chrono::Utc;
    use tether_protocol::jobs::JobEvent;

    fn line(seq: i64) -> JobEvent {
        JobEvent {
            seq,
            at: Utc::now(),
            kind: "output".to_owned(),
            text: format!("line {seq}"),
            entry: None,
        }
    }

    #[tokio::test]
    async fn news_reaches_the_watchers_of_its_job_only_while_they_watch() {
        let hub = Hub::in_process();
        let (job, other) = (JobId::generate(), JobId::generate());
        assert!(!hub.job_followed(&job));
        let mut first = hub.follow_job(&job).await;
        let mut second = hub.follow_job(&job).await;
        let mut elsewhere = hub.follow_job(&other).await;
        assert!(hub.job_followed(&job));
        let lines = JobNews::Lines {
            events: vec![line(1), line(2)],
        };
        hub.publish_job(&job, lines.clone()).await;
        hub.publish_job(&job, JobNews::Changed).await;
        for follower in [&mut first, &mut second] {
            assert_eq!(*follower.news.recv().await.expect("lines"), lines);
            assert_eq!(
                *follower.news.recv().await.expect("changed"),
                JobNews::Changed
            );
        }
        assert!(elsewhere.news.try_recv().is_err());
        drop(first);
        assert!(hub.job_followed(&job));
        drop(second);
        assert!(!hub.job_followed(&job));
        assert!(hub.job_followed(&other));
    }
}
