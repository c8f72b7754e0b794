//! Streaming a run's output to the server in numbered batches.
//!
//! A program's output pipe is read into lines by [`OutputLines`], bounded so a program that
//! never prints a newline cannot make the agent buffer without bound.
//!
//! Lines are batched (at most [`MAX_LINES_PER_PROGRESS`] lines and about 64 KiB per call) and
//! flushed every [`FLUSH_EVERY`] or when a batch is full. Each call carries a `seq` one higher
//! than the last; a call that got no answer is sent again with the same `seq`, which the
//! server treats as a repeat, so no line is recorded twice.
//!
//! Each line keeps the moment it was read, and each call says how long ago that was
//! (`lineAgesMs`), measured again on every retry, so the job page shows when a line was
//! printed rather than when its batch arrived.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tether_protocol::jobs::{ProgressParams, MAX_LINES_PER_PROGRESS, MAX_LINE_BYTES};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::local::vault::redact;
use crate::remote::backoff::Backoff;
use crate::remote::client::{DeviceClient, RemoteError};
use crate::run::lease::{Recovery, RunLease};
use crate::run::stop::{RunStop, StopReason};
use crate::run::watch::Tap;

/// Most bytes of line text one progress call carries.
pub const MAX_BATCH_BYTES: usize = 64 * 1024;
/// How long a line may wait before it is sent.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// One progress call's worth of lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub seq: u64,
    pub lines: Vec<String>,
    /// When each line was read, in the order of `lines`.
    pub printed: Vec<Instant>,
}

/// How long before `now` each line was printed, in milliseconds (0 for a time after it).
pub fn line_ages(printed: &[Instant], now: Instant) -> Vec<u64> {
    printed
        .iter()
        .map(|at| u64::try_from(now.saturating_duration_since(*at).as_millis()).unwrap_or(u64::MAX))
        .collect()
}

/// Collects lines into batches and numbers them. Pure: no I/O, no clock (the caller says
/// when each line was printed).
#[derive(Debug)]
pub struct ProgressBatcher {
    lines: Vec<String>,
    printed: Vec<Instant>,
    bytes: usize,
    /// The last `seq` taken, shared with whatever else reports progress for the attempt.
    last_seq: Arc<AtomicU64>,
}

impl ProgressBatcher {
    /// Numbering starts at 1, so a server that keeps "last seq seen" starting at 0 accepts
    /// the first call.
    pub fn new() -> ProgressBatcher {
        ProgressBatcher::numbered_by(Arc::new(AtomicU64::new(0)))
    }

    /// Numbers batches after `last_seq`, taking each number from it.
    pub fn numbered_by(last_seq: Arc<AtomicU64>) -> ProgressBatcher {
        ProgressBatcher {
            lines: Vec::new(),
            printed: Vec::new(),
            bytes: 0,
            last_seq,
        }
    }

    /// Adds a line printed at `printed` (cut to [`MAX_LINE_BYTES`]). Returns a batch that
    /// must be sent now when the line filled the current one or did not fit in it.
    pub fn push(&mut self, line: String, printed: Instant) -> Option<Batch> {
        let line = cut_line(line);
        let ready = if !self.lines.is_empty() && self.bytes + line.len() > MAX_BATCH_BYTES {
            self.take()
        } else {
            None
        };
        self.bytes += line.len();
        self.lines.push(line);
        self.printed.push(printed);
        // A line is at most 4 KiB, so a batch started by a cut holds one line and cannot be
        // full by count as well.
        ready.or_else(|| {
            (self.lines.len() >= MAX_LINES_PER_PROGRESS)
                .then(|| self.take())
                .flatten()
        })
    }

    /// The lines collected so far as a numbered batch, if there are any.
    pub fn take(&mut self) -> Option<Batch> {
        if self.lines.is_empty() {
            return None;
        }
        let seq = self.last_seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.bytes = 0;
        Some(Batch {
            seq,
            lines: std::mem::take(&mut self.lines),
            printed: std::mem::take(&mut self.printed),
        })
    }
}

impl Default for ProgressBatcher {
    fn default() -> Self {
        ProgressBatcher::new()
    }
}

/// Cuts a line to [`MAX_LINE_BYTES`] on a character boundary.
fn cut_line(mut line: String) -> String {
    if line.len() > MAX_LINE_BYTES {
        let mut end = MAX_LINE_BYTES;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line
}

/// Most bytes of one output line read: the protocol's limit and one more, so a line of
/// exactly [`MAX_LINE_BYTES`] is read whole with its newline. A longer line is cut there
/// (and cut to the limit on a character boundary when batched); the rest of it is skipped.
pub const READ_LINE_BYTES: u64 = MAX_LINE_BYTES as u64 + 1;

/// A program's output pipe, read line by line for its run's output.
pub struct OutputLines<R> {
    reader: BufReader<R>,
    buffer: Vec<u8>,
    /// Inside a line already cut: the rest of it is skipped.
    skipping: bool,
}

impl<R: AsyncRead + Unpin> OutputLines<R> {
    pub fn new(pipe: R) -> OutputLines<R> {
        OutputLines {
            reader: BufReader::new(pipe),
            buffer: Vec::new(),
            skipping: false,
        }
    }

    /// The next line without its line ending (bytes that are not UTF-8 replaced), at most
    /// [`READ_LINE_BYTES`]; `None` once the pipe ends or cannot be read.
    pub async fn next_line(&mut self) -> Option<String> {
        loop {
            self.buffer.clear();
            let read = (&mut self.reader)
                .take(READ_LINE_BYTES)
                .read_until(b'\n', &mut self.buffer)
                .await;
            if let Ok(0) | Err(_) = read {
                return None;
            }
            let complete = self.buffer.last() == Some(&b'\n');
            if !std::mem::replace(&mut self.skipping, !complete) {
                let text = String::from_utf8_lossy(&self.buffer);
                return Some(text.trim_end_matches(['\n', '\r']).to_owned());
            }
        }
    }
}

/// Whether the reporter should go on after a delivery attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    Delivered,
    /// The run lost its lease or the device its token: nothing more may be sent.
    Abandoned,
}

/// Longest a flush waits for the reporter: a question is never held up longer by lines
/// that cannot be delivered.
pub const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// Asks a run's reporter to send every line queued so far, so that what is posted next
/// (a question) comes after them on the job's timeline.
#[derive(Debug, Clone)]
pub struct Flusher(mpsc::Sender<oneshot::Sender<()>>);

/// The reporter's end of a [`Flusher`].
#[derive(Debug)]
pub struct FlushRequests(mpsc::Receiver<oneshot::Sender<()>>);

/// A flusher and the requests it sends, for [`report_output`].
pub fn flusher() -> (Flusher, FlushRequests) {
    let (sender, receiver) = mpsc::channel(16);
    (Flusher(sender), FlushRequests(receiver))
}

impl Flusher {
    /// Returns once every line sent to the reporter before this call was delivered (or
    /// dropped for good), the reporter is gone, or [`FLUSH_WAIT`] passed.
    pub async fn flush(&self) {
        let (done, delivered) = oneshot::channel();
        let asked = async {
            if self.0.send(done).await.is_ok() {
                let _ = delivered.await;
            }
        };
        if tokio::time::timeout(FLUSH_WAIT, asked).await.is_err() {
            tracing::warn!("the run's output lines were not delivered in time; asking anyway");
        }
    }
}

/// What woke the reporter.
enum Wake {
    Line(Option<String>),
    Tick,
    Flush(Option<oneshot::Sender<()>>),
}

/// Sends the run's output until `lines` closes, then flushes what is left. A request on
/// `flushes` is answered once every line queued before it was sent.
///
/// Stops early when the lease is lost for good or the device revoked (raising that on
/// `stop`), and raises a cancel when an answer says the owner asked to stop. A lease found
/// stale after an outage is reattached ([`RunLease::recover`]) and the batch sent again
/// under the new lease, with the same `seq`.
pub async fn report_output(
    client: DeviceClient,
    lease: Arc<RunLease>,
    mut lines: mpsc::Receiver<String>,
    flushes: Option<FlushRequests>,
    stop: RunStop,
    hidden: Arc<Vec<String>>,
    tap: Option<Tap>,
) {
    let mut batcher = ProgressBatcher::numbered_by(lease.progress_seq());
    let mut flushes = flushes.map(|FlushRequests(receiver)| receiver);
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Saved secret values never leave this computer.
    // What is sent is also what a console watching the job sees.
    let redacted = |line: String| {
        let line = redact(&line, &hidden);
        if let Some(tap) = &tap {
            tap.line(&line);
        }
        line
    };
    loop {
        let wake = tokio::select! {
            line = lines.recv() => Wake::Line(line),
            _ = tick.tick() => Wake::Tick,
            request = next_flush(&mut flushes) => Wake::Flush(request),
        };
        let mut batches = Vec::new();
        let mut answer = None;
        let mut closed = false;
        match wake {
            Wake::Line(Some(line)) => batches.extend(batcher.push(redacted(line), Instant::now())),
            Wake::Line(None) => {
                batches.extend(batcher.take());
                closed = true;
            }
            Wake::Tick => batches.extend(batcher.take()),
            Wake::Flush(Some(request)) => {
                // Every line sent before the request is in the channel by now.
                while let Ok(line) = lines.try_recv() {
                    batches.extend(batcher.push(redacted(line), Instant::now()));
                }
                batches.extend(batcher.take());
                answer = Some(request);
            }
            Wake::Flush(None) => flushes = None,
        }
        for batch in batches {
            let params = ProgressParams {
                seq: batch.seq,
                lines: batch.lines,
                status: None,
                line_ages_ms: None,
                // What the run uses goes with the next batch once its engine says it.
                observed: lease.take_observed(),
            };
            let printed = Some(batch.printed.as_slice());
            if deliver(&client, &lease, params, printed, &stop).await == Delivery::Abandoned {
                return;
            }
        }
        if let Some(answer) = answer {
            let _ = answer.send(());
        }
        if closed {
            return;
        }
    }
}

/// The next flush request; never, once there are none to come.
async fn next_flush(
    flushes: &mut Option<mpsc::Receiver<oneshot::Sender<()>>>,
) -> Option<oneshot::Sender<()>> {
    match flushes {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// Sends what a run says outside its engine's output (waiting for its folder, where its
/// worktree is kept): `lines` of output and a `status`, numbered after the attempt's last
/// call. Retried like output; nothing is sent once the lease is gone.
pub async fn say(
    client: &DeviceClient,
    lease: &RunLease,
    stop: &RunStop,
    lines: Vec<String>,
    status: Option<String>,
) {
    let seq = lease.progress_seq().fetch_add(1, Ordering::SeqCst) + 1;
    let params = ProgressParams {
        seq,
        lines,
        status,
        line_ages_ms: None,
        observed: None,
    };
    deliver(client, lease, params, None, stop).await;
}

/// Sends one batch, retrying with the same `seq` while the server cannot be reached. The
/// lines' ages are measured again on each try, from when each was `printed`.
async fn deliver(
    client: &DeviceClient,
    lease: &RunLease,
    mut params: ProgressParams,
    printed: Option<&[Instant]>,
    stop: &RunStop,
) -> Delivery {
    let job_id = lease.job_id();
    let mut backoff = Backoff::new();
    loop {
        params.line_ages_ms = printed.map(|printed| line_ages(printed, Instant::now()));
        let token = lease.token();
        let wait = match client.progress(job_id, &token, &params).await {
            Ok(answer) => {
                lease.confirmed(&token);
                if answer.cancel_requested {
                    stop.raise(StopReason::Cancel);
                }
                return Delivery::Delivered;
            }
            Err(RemoteError::StaleLease) => match lease.recover(&token).await {
                Recovery::Renewed => continue,
                Recovery::Later(at_least) => backoff.next_delay().max(at_least),
                Recovery::Lost => {
                    stop.raise(StopReason::LeaseLost);
                    return Delivery::Abandoned;
                }
                Recovery::Revoked => {
                    stop.raise(StopReason::Revoked);
                    return Delivery::Abandoned;
                }
            },
            Err(RemoteError::Revoked) => {
                stop.raise(StopReason::Revoked);
                return Delivery::Abandoned;
            }
            Err(err) if err.is_transient() => {
                tracing::warn!(job = %job_id, seq = params.seq, "progress not delivered, retrying: {err}");
                backoff.next_delay().max(err.retry_after())
            }
            Err(err) => {
                // The server refused this batch for good; holding the run hostage to it would
                // help nobody, so the lines are dropped and the run goes on.
                tracing::warn!(job = %job_id, seq = params.seq, "progress refused, lines dropped: {err}");
                return Delivery::Delivered;
            }
        };
        if stop.wait_at_least(StopReason::Shutdown, wait).await {
            return Delivery::Abandoned;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_lines_are_cut_and_their_rest_skipped() {
        let limit = MAX_LINE_BYTES;
        let input = format!(
            "one\r\n{}\n{}tail\nlast",
            "a".repeat(limit),
            "b".repeat(limit + 1)
        );
        let mut lines = OutputLines::new(input.as_bytes());
        let mut read = Vec::new();
        while let Some(line) = lines.next_line().await {
            read.push(line);
        }
        assert_eq!(
            read,
            [
                "one".to_owned(),
                "a".repeat(limit),
                "b".repeat(limit + 1),
                "last".to_owned()
            ]
        );
    }

    fn lines(n: usize, width: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:0width$}")).collect()
    }

    /// Feeds `input`, then flushes; returns (seq, line count, bytes) per batch.
    fn check(input: Vec<String>, expected: &[(u64, usize)]) {
        let mut batcher = ProgressBatcher::new();
        let mut batches: Vec<Batch> = input
            .into_iter()
            .filter_map(|line| batcher.push(line, Instant::now()))
            .collect();
        batches.extend(batcher.take());
        let shape: Vec<(u64, usize)> = batches.iter().map(|b| (b.seq, b.lines.len())).collect();
        assert_eq!(shape, expected);
        for batch in &batches {
            assert!(batch.lines.len() <= MAX_LINES_PER_PROGRESS);
            assert!(batch.lines.iter().map(String::len).sum::<usize>() <= MAX_BATCH_BYTES);
        }
    }

    #[test]
    fn batches_are_cut_by_count_and_by_size() {
        check(Vec::new(), &[]);
        check(lines(3, 1), &[(1, 3)]);
        check(lines(200, 3), &[(1, 200)]);
        check(lines(450, 3), &[(1, 200), (2, 200), (3, 50)]);
        // 1000-byte lines: 65 fit in 64 KiB (65 000 bytes), the 66th starts a new batch.
        check(lines(100, 1000), &[(1, 65), (2, 35)]);
        // Lines longer than the limit are cut to 4 KiB: 16 per batch.
        check(lines(20, 10_000), &[(1, 16), (2, 4)]);
    }

    #[test]
    fn seq_goes_up_by_one_per_batch_and_survives_empty_flushes() {
        let mut batcher = ProgressBatcher::new();
        let now = Instant::now();
        assert_eq!(batcher.take(), None);
        assert_eq!(batcher.push("a".into(), now), None);
        assert_eq!(
            batcher.take(),
            Some(Batch {
                seq: 1,
                lines: vec!["a".into()],
                printed: vec![now],
            })
        );
        assert_eq!(batcher.take(), None);
        assert_eq!(batcher.push("b".into(), now), None);
        assert_eq!(batcher.take().map(|b| b.seq), Some(2));
    }

    #[test]
    fn each_line_keeps_when_it_was_printed_and_is_sent_with_its_age() {
        let start = Instant::now();
        let mut batcher = ProgressBatcher::new();
        for (line, after) in [("one", 0), ("two", 100), ("three", 300)] {
            let printed = start + Duration::from_millis(after);
            assert_eq!(batcher.push(line.into(), printed), None);
        }
        let batch = batcher.take().unwrap_or_else(|| panic!("no batch"));
        assert_eq!(batch.lines, ["one", "two", "three"]);
        let sent = start + Duration::from_millis(500);
        assert_eq!(line_ages(&batch.printed, sent), [500, 400, 200]);
        // A retry a second later says each line is a second older.
        let again = sent + Duration::from_secs(1);
        assert_eq!(line_ages(&batch.printed, again), [1500, 1400, 1200]);
        // A moment before a line (never, but not negative) is an age of 0.
        assert_eq!(line_ages(&batch.printed, start), [0, 0, 0]);
    }

    use crate::run::test_http::read_request;

    /// A stand-in for the server's progress route: every body is passed on before it is
    /// answered.
    async fn progress_server() -> (String, mpsc::UnboundedReceiver<String>) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let address = listener.local_addr().unwrap_or_else(|err| panic!("{err}"));
        let base = format!("http://{address}");
        let (bodies, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let bodies = bodies.clone();
                tokio::spawn(async move {
                    let mut socket = socket;
                    let Some(request) = read_request(&mut socket).await else {
                        return anyhow::Ok(());
                    };
                    let _ = bodies.send(String::from_utf8_lossy(&request.body).into_owned());
                    let answer =
                        r#"{"leaseExpiresAt":"2030-01-01T00:00:00Z","cancelRequested":false}"#;
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                    socket.write_all(response.as_bytes()).await?;
                    anyhow::Ok(())
                });
            }
        });
        (base, received)
    }

    #[tokio::test]
    async fn a_flush_returns_once_the_lines_before_it_were_delivered() -> anyhow::Result<()> {
        use crate::local::journal::Journal;
        use crate::local::state::DataDir;
        use crate::remote::client::ServerClient;
        use crate::run::lease::LeasePeriod;
        use tether_protocol::jobs::Mode;

        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("agent")))?;
        let (base, mut bodies) = progress_server().await;
        let client = DeviceClient::new(ServerClient::new(&base)?, "tdt_x".into());
        let job = crate::test_job::claimed_job("agent", Mode::Ask);
        let lease = RunLease::new(
            client.clone(),
            Arc::new(Journal::new(&data_dir)),
            Arc::new(LeasePeriod::new()),
            &job,
        );
        let (lines, receiver) = mpsc::channel(16);
        let (flusher, flushes) = flusher();
        let hidden = Arc::new(vec!["tok-secret-77".to_owned()]);
        let reporter = tokio::spawn(report_output(
            client,
            lease,
            receiver,
            Some(flushes),
            RunStop::new(),
            hidden,
            None,
        ));
        for round in 0..3 {
            lines.send(format!("printed {round} tok-secret-77")).await?;
            flusher.flush().await;
            // Delivered before the flush returned: nothing is waited for here.
            let body: serde_json::Value = serde_json::from_str(&bodies.try_recv()?)?;
            assert_eq!(
                body["lines"],
                serde_json::json!([format!("printed {round} [hidden]")])
            );
            let ages = body["lineAgesMs"].as_array().map(Vec::len);
            assert_eq!(ages, Some(1), "each line says how old it is: {body}");
        }
        drop(lines);
        tokio::time::timeout(Duration::from_secs(5), reporter).await??;
        // The reporter is gone: a flush returns at once.
        tokio::time::timeout(Duration::from_secs(1), flusher.flush()).await?;
        Ok(())
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let line = "é".repeat(MAX_LINE_BYTES); // 2 bytes each
        let cut = cut_line(line);
        assert_eq!(cut.len(), MAX_LINE_BYTES);
        let odd = format!("a{}", "é".repeat(MAX_LINE_BYTES));
        assert_eq!(cut_line(odd).len(), MAX_LINE_BYTES - 1);
    }
}
