//! Each running job prints lines at a steady pace and sends them in progress batches, as
//! the real agent's reporter does (`device-agent/src/run/progress.rs`: a batch every
//! `FLUSH_EVERY`, each line's age in `lineAgesMs`, the next batch only once the last one was
//! answered, a batch without an answer sent again with the same `seq`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tether_protocol::jobs::{ProgressParams, MAX_LINES_PER_PROGRESS};

use crate::fleet::RunningJob;
use crate::output::{line_text, RunClock};

/// How fast each job prints and sends.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub lines_per_sec: f64,
    pub batches_per_sec: f64,
    /// Length of each line's text.
    pub line_bytes: usize,
}

impl Pace {
    fn period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.batches_per_sec.max(0.001))
    }

    /// When line `number` (from 1) of a job that started printing at `from` was printed.
    fn printed_at(&self, from: Instant, number: u64) -> Instant {
        from + Duration::from_secs_f64(number as f64 / self.lines_per_sec.max(0.001))
    }

    /// How many lines a job that started printing at `from` has printed by `now`.
    fn printed_by(&self, from: Instant, now: Instant) -> u64 {
        (now.saturating_duration_since(from).as_secs_f64() * self.lines_per_sec) as u64
    }
}

/// What every sender did, added up as they go.
#[derive(Debug, Default)]
pub struct SendTally {
    pub lines_sent: AtomicU64,
    pub lines_accepted: AtomicU64,
    /// Lines of batches answered with anything but 200.
    pub lines_rejected: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    /// Each progress call's time to its answer.
    call_micros: Mutex<Vec<u32>>,
    /// How late a sender woke for its batch: the generator's own scheduling delay.
    lag_micros: Mutex<Vec<u32>>,
}

fn micros(duration: Duration) -> u32 {
    u32::try_from(duration.as_micros()).unwrap_or(u32::MAX)
}

impl SendTally {
    fn error(&self, what: String) {
        *self
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(what)
            .or_default() += 1;
    }

    pub fn errors(&self) -> BTreeMap<String, u64> {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn call_micros(&self) -> Vec<u32> {
        self.call_micros
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn lag_micros(&self) -> Vec<u32> {
        self.lag_micros
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The lines of one job the server accepted, as inclusive ranges of line numbers.
#[derive(Debug, Default, Clone)]
pub struct JobSent {
    pub accepted: Vec<(u64, u64)>,
}

impl JobSent {
    pub fn count(&self) -> u64 {
        self.accepted.iter().map(|(from, to)| to - from + 1).sum()
    }
}

/// Everything one sender needs.
#[derive(Clone)]
pub struct Sending {
    pub http: reqwest::Client,
    pub server: String,
    pub pace: Pace,
    pub clock: RunClock,
    pub deadline: Instant,
    pub tally: Arc<SendTally>,
}

/// Every job sends until the deadline; returns what each had accepted, in `jobs`' order.
pub async fn send_all(sending: &Sending, jobs: &[RunningJob]) -> Vec<JobSent> {
    let tasks: Vec<_> = jobs
        .iter()
        .map(|job| tokio::spawn(sending.clone().send_job(job.clone())))
        .collect();
    let mut sent = Vec::with_capacity(tasks.len());
    for task in tasks {
        sent.push(task.await.unwrap_or_default());
    }
    sent
}

impl Sending {
    async fn send_job(self, job: RunningJob) -> JobSent {
        let period = self.pace.period();
        // Jobs start spread over one period, so batches arrive at a steady rate; the first
        // batch carries a period's lines like every other.
        let first = Instant::now() + period.mul_f64(rand::random::<f64>());
        let printing_from = first.checked_sub(period).unwrap_or(first);
        let mut sent = JobSent::default();
        let (mut printed, mut seq, mut next) = (0u64, 0u64, first);
        while next <= self.deadline {
            if next > Instant::now() {
                tokio::time::sleep_until(next.into()).await;
                self.record(&self.tally.lag_micros, next.elapsed());
            }
            let now = Instant::now();
            let due = self
                .pace
                .printed_by(printing_from, now)
                .min(printed + MAX_LINES_PER_PROGRESS as u64);
            if due > printed {
                seq += 1;
                let numbers = (printed + 1, due);
                if self.deliver(&job, seq, numbers, printing_from).await {
                    sent.accepted.push(numbers);
                }
                printed = due;
            }
            next += period;
            // A late answer makes the next batch go at once, and bigger (the agent's tick
            // does the same).
            next = next.max(Instant::now());
        }
        sent
    }

    /// Sends lines `numbers` as batch `seq`, again with the same `seq` when no answer came;
    /// whether the server accepted them.
    async fn deliver(
        &self,
        job: &RunningJob,
        seq: u64,
        numbers: (u64, u64),
        printing_from: Instant,
    ) -> bool {
        let count = numbers.1 - numbers.0 + 1;
        let sent_at = Instant::now();
        let stamp = self.clock.stamp(sent_at);
        let params = ProgressParams {
            seq,
            lines: (numbers.0..=numbers.1)
                .map(|number| line_text(number, stamp, self.pace.line_bytes))
                .collect(),
            status: None,
            line_ages_ms: Some(
                (numbers.0..=numbers.1)
                    .map(|number| {
                        let printed = self.pace.printed_at(printing_from, number);
                        sent_at.saturating_duration_since(printed).as_millis() as u64
                    })
                    .collect(),
            ),
            observed: None,
        };
        self.tally.lines_sent.fetch_add(count, Ordering::Relaxed);
        for attempt in 0..3 {
            let started = Instant::now();
            match self.post(job, &params).await {
                Ok(status) if status == reqwest::StatusCode::OK => {
                    self.record(&self.tally.call_micros, started.elapsed());
                    self.tally
                        .lines_accepted
                        .fetch_add(count, Ordering::Relaxed);
                    return true;
                }
                Ok(status) => {
                    self.tally.error(format!("progress {status}"));
                    break;
                }
                Err(error) if attempt < 2 => {
                    self.tally
                        .error(format!("progress retried: {}", kind_of(&error)));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => self.tally.error(format!("progress: {}", kind_of(&error))),
            }
        }
        self.tally
            .lines_rejected
            .fetch_add(count, Ordering::Relaxed);
        false
    }

    async fn post(
        &self,
        job: &RunningJob,
        params: &ProgressParams,
    ) -> reqwest::Result<reqwest::StatusCode> {
        let answer = self
            .http
            .post(format!(
                "{}/api/devices/self/jobs/{}/progress",
                self.server, job.id
            ))
            .bearer_auth(&job.device.token)
            .header("x-tether-protocol", "1")
            .header("x-tether-lease", &job.lease)
            .json(params)
            .send()
            .await?;
        let status = answer.status();
        // Read the body, so the connection goes back to the pool.
        answer.bytes().await?;
        Ok(status)
    }

    fn record(&self, samples: &Mutex<Vec<u32>>, duration: Duration) {
        samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(micros(duration));
    }
}

/// A transport error in a word, so the report's error counts group.
fn kind_of(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else {
        "transport"
    }
}
