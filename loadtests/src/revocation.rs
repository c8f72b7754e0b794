//! Revocation under load: part-way through the assignment window the owners revoke some
//! devices, all at once, through the real API; the run then measures how fast each device
//! notices and, at the end, probes every revoked token once.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use rand::seq::SliceRandom;
use serde_json::json;

use crate::device::{capabilities, is_revoked_error};
use crate::report::Recorder;
use crate::setup::{Account, Device};

/// Picks `count` devices at random, spread over their accounts: one from each account in
/// turn. At random, because assignments go round-robin: a fixed choice would always catch
/// the same devices idle (or busy).
pub fn pick(devices: &[Device], count: usize) -> Vec<Device> {
    let mut shuffled: Vec<&Device> = devices.iter().collect();
    shuffled.shuffle(&mut rand::thread_rng());
    let mut by_account: BTreeMap<usize, VecDeque<&Device>> = BTreeMap::new();
    for device in shuffled {
        by_account
            .entry(device.account)
            .or_default()
            .push_back(device);
    }
    let count = count.min(devices.len());
    let mut picked = Vec::with_capacity(count);
    while picked.len() < count {
        for queue in by_account.values_mut() {
            if picked.len() == count {
                break;
            }
            if let Some(device) = queue.pop_front() {
                picked.push(device.clone());
            }
        }
    }
    picked
}

/// Revokes `devices` concurrently through `server`, each with its owner's API token. The web
/// users stop assigning to a device as soon as its owner decides to revoke it.
pub async fn revoke(
    http: &reqwest::Client,
    server: &str,
    accounts: &[Account],
    devices: &[Device],
    recorder: &Recorder,
) {
    for device in devices {
        recorder.revoking(&device.id);
    }
    join_all(devices.iter().map(|device| async move {
        let sent = Instant::now();
        let answer = http
            .delete(format!("{server}/api/devices/{}", device.id))
            .bearer_auth(&accounts[device.account].token)
            .send()
            .await;
        let answered = Instant::now();
        match answer {
            Ok(answer) if answer.status() == reqwest::StatusCode::NO_CONTENT => {
                recorder.revoke_answered(&device.id, sent, answered)
            }
            Ok(answer) => recorder.error(&format!("revoke {}", answer.status())),
            Err(error) => recorder.error(&format!("revoke: {error}")),
        }
    }))
    .await;
}

/// Waits until every revoked device noticed, or `limit` passed since the last revocation
/// was answered.
pub async fn wait_noticed(recorder: &Recorder, limit: Duration) {
    loop {
        let revocations = recorder.revocations();
        let answered = revocations.values().filter_map(|times| times.answered);
        let deadline = answered.max().map(|last| last + limit);
        let all_noticed = revocations
            .values()
            .all(|times| times.answered.is_none() || times.noticed.is_some());
        if all_noticed || deadline.is_none_or(|deadline| Instant::now() >= deadline) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends one heartbeat with each revoked device's token to the replica it used; returns how
/// many were not refused with 401 `revoked`.
pub async fn probe_tokens(http: &reqwest::Client, servers: &[String], devices: &[Device]) -> usize {
    let refused = join_all(devices.iter().map(|device| async move {
        let server = &servers[device.home(servers.len())];
        let body = json!({"capabilities": capabilities(device), "running": []});
        let Ok(answer) = http
            .post(format!("{server}/api/devices/self/heartbeat"))
            .bearer_auth(&device.token)
            .header("x-tether-protocol", "1")
            .json(&body)
            .send()
            .await
        else {
            return false;
        };
        answer.status() == reqwest::StatusCode::UNAUTHORIZED
            && answer
                .bytes()
                .await
                .is_ok_and(|body| is_revoked_error(&body))
    }))
    .await;
    refused.into_iter().filter(|refused| !refused).count()
}

/// Revoked devices whose event stream is on another replica than `servers[0]`, the one
/// the revocations go to: their `device.revoked` frame crosses replicas.
pub fn on_other_replica(servers: &[String], devices: &[Device]) -> usize {
    devices
        .iter()
        .filter(|device| device.home(servers.len()) != 0)
        .count()
}
