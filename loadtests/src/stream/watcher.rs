//! A browser watching a job page: one `GET /api/jobs/{id}/events` stream, its `lines`
//! events read as they come. Each of this run's lines gives its send→receive time; the
//! timeline's `seq`s must follow one another with no gap or repeat, and each line must come
//! exactly once. A stream that drops before the job ended is opened again after the last
//! `seq` seen, as the page does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tether_protocol::jobs::JobState;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::fleet::{error_kind, RunningJob};
use crate::output::{parse_line, RunClock};
use crate::sse::{SseEvent, SseReader};

/// What one watcher saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// The last timeline `seq` received.
    pub last_seq: i64,
    /// How many times each of this run's lines came, by number.
    pub lines: HashMap<u64, u32>,
    /// Send→receive of each line, in microseconds.
    pub latencies: Vec<u32>,
    /// `seq`s skipped over, and `seq`s that came again or out of order.
    pub seq_gaps: u64,
    pub seq_repeats: u64,
    /// The stream said the job reached a final state.
    pub ended: bool,
    /// The stream was opened again after it dropped.
    pub reconnects: u64,
    pub errors: Vec<String>,
    /// Whether the stream answered 200 once.
    pub connected: bool,
}

impl Seen {
    fn take(&mut self, event: &SseEvent, received: Instant, clock: &RunClock) {
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
            self.errors
                .push(format!("{} event of bad JSON", event.name));
            return;
        };
        match event.name.as_str() {
            "lines" => {
                for line in data["events"].as_array().into_iter().flatten() {
                    self.take_line(line, received, clock);
                }
            }
            "job" => {
                let state = serde_json::from_value::<JobState>(data["state"].clone());
                self.ended |= state.is_ok_and(JobState::is_final);
            }
            _ => {}
        }
    }

    fn take_line(&mut self, line: &Value, received: Instant, clock: &RunClock) {
        let seq = line["seq"].as_i64().unwrap_or(0);
        if seq <= self.last_seq {
            self.seq_repeats += 1;
            return;
        }
        self.seq_gaps += u64::try_from(seq - self.last_seq - 1).unwrap_or(0);
        self.last_seq = seq;
        if line["kind"].as_str() != Some("output") {
            return;
        }
        let Some((number, sent)) = line["text"].as_str().and_then(parse_line) else {
            return;
        };
        *self.lines.entry(number).or_default() += 1;
        let latency = received.saturating_duration_since(clock.at(sent));
        self.latencies
            .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
    }
}

/// A watcher under way; what it saw is readable while it runs.
pub struct Watcher {
    pub seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Watcher {
    pub fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to `limit` for the stream to end by itself, then closes it.
    pub async fn finish(self, limit: Duration) -> Seen {
        let mut task = self.task;
        if tokio::time::timeout(limit, &mut task).await.is_err() {
            task.abort();
        }
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Opens a stream on `job` (from its first line) and follows it until it ends after the
/// job's final state, or `stop`.
pub fn watch(
    http: reqwest::Client,
    server: String,
    job: RunningJob,
    clock: RunClock,
    stop: watch::Receiver<bool>,
) -> Watcher {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let task = tokio::spawn(follow(http, server, job, clock, seen.clone(), stop));
    Watcher { seen, task }
}

async fn follow(
    http: reqwest::Client,
    server: String,
    job: RunningJob,
    clock: RunClock,
    seen: Arc<Mutex<Seen>>,
    mut stop: watch::Receiver<bool>,
) {
    let lock = || seen.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let after = lock().last_seq;
        tokio::select! {
            outcome = read_stream(&http, &server, &job, after, &clock, &seen) => {
                if let Err(error) = outcome {
                    lock().errors.push(format!("stream: {}", error_kind(&error)));
                }
            }
            _ = stop.changed() => return,
        }
        if lock().ended || *stop.borrow() {
            return;
        }
        lock().reconnects += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One connection: reads events until the server ends the stream.
async fn read_stream(
    http: &reqwest::Client,
    server: &str,
    job: &RunningJob,
    after: i64,
    clock: &RunClock,
    seen: &Mutex<Seen>,
) -> anyhow::Result<()> {
    let mut answer = http
        .get(format!("{server}/api/jobs/{}/events?after={after}", job.id))
        .bearer_auth(&job.owner_token)
        .header("accept", "text/event-stream")
        .send()
        .await?;
    if answer.status() != reqwest::StatusCode::OK {
        anyhow::bail!("events answered {}", answer.status());
    }
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .connected = true;
    let mut reader = SseReader::default();
    while let Some(chunk) = answer.chunk().await? {
        let received = Instant::now();
        let events = reader.push(&chunk);
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        for event in &events {
            seen.take(event, received, clock);
        }
    }
    Ok(())
}
