//! The running jobs of a streaming run: accounts and devices paired through the real API,
//! one job assigned to each device and claimed by it, leases kept by heartbeats listing the
//! run as the real agent's do, and every job completed at the end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context};
use futures_util::{stream, StreamExt, TryStreamExt};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::device::capabilities;
use crate::setup::{self, Account, Device};

/// A job its device claimed and holds under a lease.
#[derive(Debug, Clone)]
pub struct RunningJob {
    pub id: String,
    pub lease: String,
    pub device: Device,
    /// The owning account's API token, which reads the job and follows its stream.
    pub owner_token: String,
}

/// Jobs running at once, and the heartbeat pace the server asked for.
pub struct Fleet {
    pub jobs: Vec<RunningJob>,
    pub heartbeat_secs: u64,
}

/// Signs up enough accounts that `jobs` runs fit under the per-account limit
/// (`runs_per_account`), pairs one device per job and has each claim its own job.
pub async fn start(
    http: &reqwest::Client,
    server: &str,
    jobs: usize,
    runs_per_account: usize,
    timeout_minutes: u64,
) -> anyhow::Result<Fleet> {
    let accounts = setup::accounts(http, server, jobs.div_ceil(runs_per_account.max(1))).await?;
    let servers = [server.to_owned()];
    let devices = setup::pair_devices(http, &servers, &accounts, jobs, 64).await?;
    let started: Vec<(RunningJob, u64)> = stream::iter(devices)
        .map(|device| start_one(http, server, &accounts, device, timeout_minutes))
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let heartbeat_secs = started.first().map_or(30, |(_, secs)| *secs);
    Ok(Fleet {
        jobs: started.into_iter().map(|(job, _)| job).collect(),
        heartbeat_secs,
    })
}

/// One device: its first heartbeat (the server learns its engine and folder), its job
/// assigned by the owner, then claimed. Returns the heartbeat pace the server asked for.
async fn start_one(
    http: &reqwest::Client,
    server: &str,
    accounts: &[Account],
    device: Device,
    timeout_minutes: u64,
) -> anyhow::Result<(RunningJob, u64)> {
    let beat: Value = device_call(
        http,
        server,
        &device,
        "heartbeat",
        None,
        &heartbeat_body(&device, None),
    )
    .await?
    .json()
    .await?;
    let heartbeat_secs = beat["intervals"]["heartbeatSecs"].as_u64().unwrap_or(30);
    let owner_token = accounts[device.account].token.clone();
    let assigned: Value = http
        .post(format!("{server}/api/jobs"))
        .bearer_auth(&owner_token)
        .json(
            &json!({"deviceId": device.id, "title": "stream", "prompt": "print", "folder": "work",
                      "engine": "load", "mode": "unattended", "network": false,
                      "timeoutMinutes": timeout_minutes}),
        )
        .send()
        .await?
        .error_for_status()
        .context("assign")?
        .json()
        .await?;
    let claimed: Value = device_call(http, server, &device, "claim", None, &json!({}))
        .await?
        .json()
        .await
        .context("claim answered no job")?;
    let id = claimed["job"]["id"].as_str().unwrap_or_default().to_owned();
    if id.is_empty() || assigned["id"].as_str() != Some(&id) {
        bail!(
            "device {} claimed {id:?}, not its job {}",
            device.id,
            assigned["id"]
        );
    }
    let lease = claimed["job"]["leaseToken"]
        .as_str()
        .context("claim without a lease")?
        .to_owned();
    Ok((
        RunningJob {
            id,
            lease,
            device,
            owner_token,
        },
        heartbeat_secs,
    ))
}

/// A heartbeat as the real agent sends it: its capabilities and the lease it holds.
fn heartbeat_body(device: &Device, running: Option<&RunningJob>) -> Value {
    let running: Vec<Value> = running
        .map(|job| json!({"jobId": job.id, "leaseToken": job.lease}))
        .into_iter()
        .collect();
    json!({"capabilities": capabilities(device), "running": running})
}

/// `POST /api/devices/self/{path}` as `device`, under `lease` when given; a non-2xx answer
/// is an error. Sent again, like the agent does, when no answer came: a pooled connection
/// the server closed for idling fails the first try.
pub async fn device_call(
    http: &reqwest::Client,
    server: &str,
    device: &Device,
    path: &str,
    lease: Option<&str>,
    body: &Value,
) -> anyhow::Result<reqwest::Response> {
    let mut attempt = 0;
    let answer = loop {
        let mut request = http
            .post(format!("{server}/api/devices/self/{path}"))
            .bearer_auth(&device.token)
            .header("x-tether-protocol", "1")
            .json(body);
        if let Some(lease) = lease {
            request = request.header("x-tether-lease", lease);
        }
        match request.send().await {
            Err(error) if attempt < 2 && !error.is_timeout() => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answer => break answer?,
        }
    };
    let status = answer.status();
    if !status.is_success() {
        let body: Value = answer.json().await.unwrap_or_default();
        bail!("{path} answered {status} {}", body["error"]["code"]);
    }
    Ok(answer)
}

/// An error in a few words that do not name the job, so the report's counts group.
pub fn error_kind(error: &anyhow::Error) -> String {
    match error.downcast_ref::<reqwest::Error>() {
        Some(error) if error.is_timeout() => "timeout".to_owned(),
        Some(error) if error.is_connect() => "connect".to_owned(),
        Some(_) => "transport".to_owned(),
        None => error
            .to_string()
            .split_once(" answered ")
            .map_or_else(|| error.to_string(), |(_, why)| why.to_owned()),
    }
}

/// The heartbeats that keep the fleet's leases, as the real agent sends them.
pub struct LeaseKeeper {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    failed: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl LeaseKeeper {
    /// Heartbeats every device every `secs`, spread over the interval, each listing its
    /// running job.
    pub fn start(
        http: &reqwest::Client,
        server: &str,
        jobs: &[RunningJob],
        secs: u64,
    ) -> LeaseKeeper {
        let (stop, mut stopped) = watch::channel(false);
        let failed = Arc::new(Mutex::new(BTreeMap::new()));
        let period = Duration::from_secs(secs.max(1));
        let gap = period / u32::try_from(jobs.len().max(1)).unwrap_or(u32::MAX);
        let (http, server, jobs) = (http.clone(), server.to_owned(), jobs.to_vec());
        let failures = failed.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(gap.max(Duration::from_micros(100)));
            ticks.tick().await;
            for job in jobs.into_iter().cycle() {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stopped.changed() => return,
                }
                let (http, server, failures) = (http.clone(), server.clone(), failures.clone());
                tokio::spawn(async move {
                    let body = heartbeat_body(&job.device, Some(&job));
                    let beat = device_call(&http, &server, &job.device, "heartbeat", None, &body);
                    if let Err(error) = beat.await {
                        let why = format!("heartbeat: {}", error_kind(&error));
                        let mut failures = failures.lock().unwrap_or_else(PoisonError::into_inner);
                        *failures.entry(why).or_default() += 1;
                    }
                });
            }
        });
        LeaseKeeper { stop, task, failed }
    }

    /// Stops heartbeating; returns the heartbeats that failed, by why.
    pub async fn stop(self) -> BTreeMap<String, u64> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        std::mem::take(&mut *self.failed.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Completes every job (`succeeded`); returns the completions that failed, by why.
pub async fn complete_all(
    http: &reqwest::Client,
    server: &str,
    jobs: &[RunningJob],
) -> BTreeMap<String, u64> {
    let body = json!({"outcome": "succeeded", "summary": "streamed", "exitCode": 0});
    let failures: Vec<String> = stream::iter(jobs)
        .map(|job| {
            let path = format!("jobs/{}/complete", job.id);
            let body = &body;
            async move {
                let answer =
                    device_call(http, server, &job.device, &path, Some(&job.lease), body).await;
                answer
                    .err()
                    .map(|error| format!("complete: {}", error_kind(&error)))
            }
        })
        .buffer_unordered(32)
        .filter_map(std::future::ready)
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    for failure in failures {
        *counts.entry(failure).or_default() += 1;
    }
    counts
}
