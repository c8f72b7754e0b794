//! Simulated web users: assignments at a constant arrival rate, then an audit of every job.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt};
use serde_json::{json, Value};

use crate::report::{Audit, Recorder};
use crate::setup::{Account, Device};

/// A job the run assigned, and whose token can read it back.
#[derive(Debug, Clone)]
pub struct Assigned {
    pub job_id: String,
    pub account: usize,
    pub device_id: String,
}

/// The arrival process of assignments.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Assignments per second.
    pub rate: f64,
    pub duration: Duration,
}

/// Assigns jobs round-robin over `devices` (and `servers`) at a constant rate, passing over
/// devices their owner revoked. Arrivals are open-loop: a slow answer does not delay the next
/// assignment, and a replica that does not answer is skipped for the next one.
pub async fn assign_at_rate(
    http: &reqwest::Client,
    servers: &[String],
    devices: &[Device],
    accounts: &[Account],
    load: Load,
    recorder: Arc<Recorder>,
) -> Vec<Assigned> {
    let Load { rate, duration } = load;
    let period = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let deadline = Instant::now() + duration;
    let mut pending = Vec::new();
    let mut index = 0usize;
    while Instant::now() < deadline {
        ticks.tick().await;
        let Some(device) = next_live(devices, &mut index, &recorder) else {
            continue;
        };
        let first = index % servers.len();
        let body = json!({"deviceId": device.id, "title": "load", "prompt": "go", "folder": "work",
                          "engine": "load", "mode": "unattended", "network": false, "timeoutMinutes": 5});
        let token = accounts[device.account].token.clone();
        let (http, servers, recorder) = (http.clone(), servers.to_vec(), recorder.clone());
        let (account, device_id) = (device.account, device.id.clone());
        pending.push(tokio::spawn(async move {
            let sent = Instant::now();
            let mut answer = None;
            for attempt in 0..servers.len() {
                let server = &servers[(first + attempt) % servers.len()];
                let sending = http
                    .post(format!("{server}/api/jobs"))
                    .bearer_auth(&token)
                    .json(&body)
                    .send();
                match sending.await {
                    Ok(reply) => {
                        answer = Some(reply);
                        break;
                    }
                    Err(_) => recorder.error("assign: replica unreachable"),
                }
            }
            let answer = answer?;
            if answer.status() == reqwest::StatusCode::NOT_FOUND && recorder.is_revoked(&device_id)
            {
                // Sent before the owner's revocation landed: the server rightly refuses it.
                recorder.refused_after_revocation();
                return None;
            }
            if !answer.status().is_success() {
                recorder.error(&format!("assign {}", answer.status()));
                return None;
            }
            let job: Value = answer.json().await.ok()?;
            let job_id = job["id"].as_str()?.to_owned();
            recorder.assigned(&job_id, sent);
            Some(Assigned {
                job_id,
                account,
                device_id,
            })
        }));
    }
    let mut assigned = Vec::new();
    for task in pending {
        if let Ok(Some(job)) = task.await {
            assigned.push(job);
        }
    }
    assigned
}

/// The next device in round-robin order that its owner has not revoked.
fn next_live<'a>(
    devices: &'a [Device],
    index: &mut usize,
    recorder: &Recorder,
) -> Option<&'a Device> {
    for _ in 0..devices.len() {
        let device = &devices[*index % devices.len()];
        *index += 1;
        if !recorder.is_revoked(&device.id) {
            return Some(device);
        }
    }
    None
}

/// Waits until every job of a device that was not revoked completed, or `limit` passed;
/// returns how many of those completed. A revoked device's jobs end on the server, not the device.
pub async fn wait_settled(recorder: &Recorder, assigned: &[Assigned], limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let live = assigned
            .iter()
            .filter(|job| !recorder.is_revoked(&job.device_id));
        let expected = live.clone().count();
        let done = live
            .filter(|job| recorder.is_completed(&job.job_id))
            .count();
        if done == expected || Instant::now() >= deadline {
            return done;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads every assigned job back from the server: the database is the truth about lost and
/// duplicated work. A revoked device's job may have succeeded before the revocation or been
/// ended by it; left `queued` or `running` it is lost.
pub async fn audit(
    http: &reqwest::Client,
    servers: &[String],
    accounts: &[Account],
    assigned: &[Assigned],
    recorder: &Recorder,
) -> anyhow::Result<Audit> {
    let server = servers.first().map_or("", String::as_str);
    let states: Vec<(bool, Option<(String, u64)>)> = stream::iter(assigned)
        .map(|job| async move {
            let revoked = recorder.is_revoked(&job.device_id);
            (revoked, read_state(http, server, accounts, job).await)
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut audit = Audit {
        jobs: assigned.len(),
        ..Audit::default()
    };
    for (revoked, state) in states {
        match (revoked, state) {
            (_, Some((state, attempt))) if state == "succeeded" => {
                audit.succeeded += 1;
                if attempt > 1 {
                    audit.rerun += 1;
                }
            }
            (true, Some((state, _))) if state == "interrupted" => {
                audit.interrupted_by_revocation += 1
            }
            (true, Some((state, _))) if state == "cancelled" => audit.cancelled_by_revocation += 1,
            _ => audit.lost += 1,
        }
    }
    Ok(audit)
}

/// A job's state and attempt, as the server has them.
async fn read_state(
    http: &reqwest::Client,
    server: &str,
    accounts: &[Account],
    job: &Assigned,
) -> Option<(String, u64)> {
    let answer = http
        .get(format!("{server}/api/jobs/{}", job.job_id))
        .bearer_auth(&accounts[job.account].token)
        .send()
        .await
        .ok()?;
    let body: Value = answer.json().await.ok()?;
    Some((
        body["state"].as_str()?.to_owned(),
        body["attempt"].as_u64()?,
    ))
}
