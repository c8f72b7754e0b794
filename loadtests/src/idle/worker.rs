//! Generator processes: one process cannot hold more sockets than its open-files limit, so a
//! fleet larger than that runs in several, each this same program with `--worker`.
//!
//! The coordinator writes each worker one line of JSON (its share of the devices), waits for
//! `ready`, then sends `go UNIX_MS` (the storm's start, the same instant for all), and at the
//! end `stop`. A worker prints `finished N` every half second until all its devices finished
//! the storm, then the line `outcome JSON` once stopped.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use crate::agent::{Agent, Milestones};
use crate::tally::{Outcome, Tally};
use crate::wire::Target;

/// One worker's share of the fleet.
#[derive(Debug, Serialize, Deserialize)]
pub struct Share {
    pub server: String,
    pub sources: usize,
    /// The fleet index of this share's first device.
    pub first_index: usize,
    pub devices: Vec<SharedDevice>,
}

/// What a worker needs of one device.
#[derive(Debug, Serialize, Deserialize)]
pub struct SharedDevice {
    pub token: String,
    pub heartbeat_body: String,
}

/// The worker side: runs its share until told to stop.
pub async fn serve() -> anyhow::Result<()> {
    let mut input = stdin_lines();
    let share: Share = serde_json::from_str(&next_line(&mut input).await?)?;
    let target = Arc::new(Target::new(&share.server, share.sources)?);
    println!("ready");
    let go = next_line(&mut input).await?;
    let start_ms: u64 = go
        .strip_prefix("go ")
        .and_then(|ms| ms.parse().ok())
        .context("expected `go UNIX_MS`")?;
    let storm = instant_of(start_ms);
    let tally = Arc::new(Tally::new(share.devices.len()));
    let mut agents = JoinSet::new();
    for (slot, device) in share.devices.into_iter().enumerate() {
        let agent = Agent {
            index: share.first_index + slot,
            slot,
            token: device.token,
            heartbeat_body: device.heartbeat_body.into_bytes(),
            target: target.clone(),
            tally: tally.clone(),
            storm,
            wake: Notify::new(),
            milestones: Mutex::new(Milestones::default()),
        };
        agents.spawn(Arc::new(agent).run());
    }
    let reporting = tokio::spawn(report_progress(tally.clone(), agents.len()));
    let stop = next_line(&mut input).await?;
    if stop != "stop" {
        bail!("expected `stop`, read {stop:?}");
    }
    reporting.abort();
    agents.shutdown().await;
    println!("outcome {}", serde_json::to_string(&tally.take())?);
    Ok(())
}

/// Prints the finished count every half second, the last time once all finished.
async fn report_progress(tally: Arc<Tally>, devices: usize) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let finished = tally.finished_count();
        println!("finished {finished}");
        if finished == devices {
            return;
        }
    }
}

/// This process's input lines, read on a thread of their own (blocking reads).
fn stdin_lines() -> mpsc::UnboundedReceiver<std::io::Result<String>> {
    let (lines, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

async fn next_line(
    input: &mut mpsc::UnboundedReceiver<std::io::Result<String>>,
) -> anyhow::Result<String> {
    Ok(input
        .recv()
        .await
        .context("the coordinator closed the worker's input")??)
}

/// The tokio instant of a unix time in milliseconds (this machine's clock).
fn instant_of(unix_ms: u64) -> tokio::time::Instant {
    let now_ms = unix_ms_now();
    let now = tokio::time::Instant::now();
    if unix_ms >= now_ms {
        now + Duration::from_millis(unix_ms - now_ms)
    } else {
        now - Duration::from_millis(now_ms - unix_ms)
    }
}

pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0))
}

/// The coordinator's handle on one worker process.
pub struct Worker {
    child: Child,
    input: ChildStdin,
    output: Lines<BufReader<ChildStdout>>,
    /// Devices in its share.
    pub devices: usize,
    /// Devices of its share that finished the storm, as last reported.
    pub finished: usize,
}

impl Worker {
    /// Starts this program with `--worker` and hands it `share`; returns once it is ready.
    pub async fn start(share: &Share) -> anyhow::Result<Worker> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--worker")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a generator process")?;
        let mut input = child.stdin.take().context("no stdin")?;
        let output = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let mut line = serde_json::to_string(share)?;
        line.push('\n');
        input.write_all(line.as_bytes()).await?;
        let mut worker = Worker {
            child,
            input,
            output,
            devices: share.devices.len(),
            finished: 0,
        };
        let ready = worker.next_line().await?;
        if ready != "ready" {
            bail!("a generator process answered {ready:?}");
        }
        Ok(worker)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub async fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.input.write_all(format!("{line}\n").as_bytes()).await?;
        Ok(())
    }

    /// Reads the next progress line, unless all its devices finished already.
    pub async fn progress(&mut self) -> anyhow::Result<usize> {
        if self.finished == self.devices {
            return Ok(self.finished);
        }
        let line = self.next_line().await?;
        self.finished = line
            .strip_prefix("finished ")
            .and_then(|count| count.parse().ok())
            .with_context(|| format!("a generator process said {line:?}"))?;
        Ok(self.finished)
    }

    /// Stops the worker's devices and reads its outcome.
    pub async fn finish(mut self) -> anyhow::Result<Outcome> {
        self.send("stop").await?;
        loop {
            let line = self.next_line().await?;
            if let Some(json) = line.strip_prefix("outcome ") {
                let outcome = serde_json::from_str(json)?;
                let _ = self.child.wait().await;
                return Ok(outcome);
            }
        }
    }

    async fn next_line(&mut self) -> anyhow::Result<String> {
        self.output
            .next_line()
            .await?
            .context("a generator process ended early")
    }
}
