//! Accounts and paired devices for a run, made through the real API.

use anyhow::{bail, Context};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures_util::{stream, StreamExt, TryStreamExt};
use rand::RngCore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::capabilities::{SealKey, SEAL_KEY_ALG};

/// A web account and the API token its simulated user calls with.
#[derive(Debug, Clone)]
pub struct Account {
    pub token: String,
}

/// A paired simulated device.
#[derive(Debug, Clone)]
pub struct Device {
    pub id: String,
    pub token: String,
    pub install_id: String,
    pub seal_key: SealKey,
    /// Index into the run's accounts.
    pub account: usize,
}

impl Device {
    /// Index of the replica this device starts on.
    pub fn home(&self, servers: usize) -> usize {
        self.install_id.bytes().map(usize::from).sum::<usize>() % servers.max(1)
    }
}

/// Signs up `count` accounts, each with an API token.
pub async fn accounts(
    http: &reqwest::Client,
    server: &str,
    count: usize,
) -> anyhow::Result<Vec<Account>> {
    let run = rand::random::<u32>();
    stream::iter(0..count)
        .map(|index| account(http, server, format!("load-{run}-{index}@example.com")))
        .buffered(8)
        .try_collect()
        .await
}

async fn account(http: &reqwest::Client, server: &str, email: String) -> anyhow::Result<Account> {
    let answer = http
        .post(format!("{server}/api/auth/signup"))
        .json(&json!({"email": email, "password": "load-test-password", "name": "Load"}))
        .send()
        .await?;
    if !answer.status().is_success() {
        bail!(
            "signup answered {}: {}",
            answer.status(),
            answer.text().await?
        );
    }
    let session = answer
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with("tether_session="))
        .and_then(|value| value.split(';').next())
        .context("signup set no session cookie")?
        .to_owned();
    let csrf = answer
        .headers()
        .get("x-tether-csrf")
        .and_then(|value| value.to_str().ok())
        .context("signup sent no CSRF token")?
        .to_owned();
    let made: Value = http
        .post(format!("{server}/api/tokens"))
        .header("cookie", session)
        .header("x-tether-csrf", csrf)
        .json(&json!({"name": "load"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let token = made["token"]
        .as_str()
        .context("no token in answer")?
        .to_owned();
    Ok(Account { token })
}

/// Pairs `count` devices, spread evenly over `accounts` and `servers`, `concurrency`
/// pairings at a time.
pub async fn pair_devices(
    http: &reqwest::Client,
    servers: &[String],
    accounts: &[Account],
    count: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Device>> {
    stream::iter(0..count)
        .map(|index| {
            pair(
                http,
                &servers[index % servers.len()],
                accounts,
                index % accounts.len().max(1),
            )
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await
}

async fn pair(
    http: &reqwest::Client,
    server: &str,
    accounts: &[Account],
    account: usize,
) -> anyhow::Result<Device> {
    let install_id = format!("load-{:016x}", rand::random::<u64>());
    let seal_key = random_seal_key();
    let started: Value = http
        .post(format!("{server}/api/devices/pair"))
        .header("x-tether-protocol", "1")
        .json(
            &json!({"name": install_id, "platform": "linux", "installId": install_id,
                      "agentVersion": "loadtest", "sealKey": seal_key}),
        )
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    http.post(format!("{server}/api/devices/link"))
        .bearer_auth(&accounts[account].token)
        .json(&json!({"userCode": started["userCode"]}))
        .send()
        .await?
        .error_for_status()?;
    let registered: Value = http
        .post(format!("{server}/api/devices/register"))
        .header("x-tether-protocol", "1")
        .json(&json!({"deviceCode": started["deviceCode"]}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(Device {
        id: registered["deviceId"]
            .as_str()
            .context("no deviceId")?
            .to_owned(),
        token: registered["token"].as_str().context("no token")?.to_owned(),
        install_id,
        seal_key,
        account,
    })
}

/// A well-formed seal key (kid and fingerprint derived from the SPKI bytes); the load test
/// never opens a box, so the bytes need not be a real point.
fn random_seal_key() -> SealKey {
    let mut spki = vec![0u8; 91];
    rand::thread_rng().fill_bytes(&mut spki);
    let digest = Sha256::digest(&spki);
    SealKey {
        kid: URL_SAFE_NO_PAD.encode(&digest[..16]),
        alg: SEAL_KEY_ALG.to_owned(),
        spki: URL_SAFE_NO_PAD.encode(&spki),
        fingerprint: format!("SHA256:{}", URL_SAFE_NO_PAD.encode(digest)),
    }
}
