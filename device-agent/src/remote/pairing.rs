//! `tether-agent pair`: the device side of the RFC 8628-style pairing, and `unpair`.
//!
//! The agent asks for a code, shows it with the link where a signed-in person approves it,
//! and polls at the pace the server asks for until the person approves, refuses, or the code
//! expires.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tether_protocol::pairing::{
    PairParams, PairResponse, RegisterParams, RegisterResponse, SLOW_DOWN_STEP_SECS,
};

use crate::local::seal_key::SealKeyPair;
use crate::local::state::{DataDir, Pairing};
use crate::remote::client::{normalize_server_url, DeviceClient, RemoteError, ServerClient};
use crate::AGENT_VERSION;

/// The longest name we send; the server has the final word.
const MAX_DEVICE_NAME: usize = 64;

/// Pairs this computer with the server at `url`, printing the code and link on stdout.
///
/// # Errors
/// When already paired, the URL is bad, the server refuses, or the code expires or is
/// refused.
pub async fn pair(data_dir: &DataDir, url: &str, name: Option<String>) -> Result<Pairing> {
    let server_url = normalize_server_url(url).map_err(anyhow::Error::msg)?;
    let mut config = data_dir.load_or_init_config()?;
    if let (Some(pairing), Some(_)) = (&config.pairing, data_dir.load_token()?) {
        bail!(
            "this computer is already paired as {:?} with {}; run `tether-agent unpair` first",
            pairing.name,
            pairing.server
        );
    }
    let name = device_name(name)?;
    // A new key pair for each pairing; stored before the server sees it, so the key it pins
    // is always one we hold.
    let seal_key = SealKeyPair::generate()?;
    seal_key.save(data_dir)?;

    let server = ServerClient::new(&server_url)?;
    let params = PairParams {
        name: name.clone(),
        platform: std::env::consts::OS.to_owned(),
        install_id: config.install_id.clone(),
        agent_version: AGENT_VERSION.to_owned(),
        seal_key: seal_key.public().clone(),
    };
    let started = server
        .pair(&params)
        .await
        .with_context(|| format!("cannot start pairing with {server_url}"))?;
    show_code(&started, &seal_key.public().fingerprint);
    let registered = wait_for_approval(&server, &started).await?;

    data_dir.save_token(&registered.token)?;
    let pairing = Pairing {
        server: server_url,
        device_id: registered.device_id,
        account_id: registered.account_id,
        name,
    };
    config.pairing = Some(pairing.clone());
    data_dir.save_config(&config)?;
    Ok(pairing)
}

/// Removes this computer from the server (best effort) and forgets the token and seal key.
/// The install id, folders and recipes stay.
///
/// # Errors
/// When local files cannot be updated.
pub async fn unpair(data_dir: &DataDir) -> Result<Option<Pairing>> {
    let mut config = data_dir.load_or_init_config()?;
    let pairing = config.pairing.take();
    if let (Some(pairing), Some(token)) = (&pairing, data_dir.load_token()?) {
        let client = DeviceClient::new(ServerClient::new(&pairing.server)?, token);
        match client.delete_self().await {
            Ok(()) | Err(RemoteError::Revoked) => {}
            Err(err) => eprintln!(
                "warning: could not tell {} ({err}); remove the computer on the web too",
                pairing.server
            ),
        }
    }
    data_dir.forget_token()?;
    SealKeyPair::forget(data_dir)?;
    data_dir.save_config(&config)?;
    Ok(pairing)
}

fn show_code(started: &PairResponse, fingerprint: &str) {
    println!();
    println!("To pair this computer, open this link in a browser where you are signed in:");
    println!();
    println!("    {}", started.verification_uri_complete);
    println!();
    println!("and check that it shows this code:");
    println!();
    println!("    {}", started.user_code);
    println!();
    println!("Seal key fingerprint: {fingerprint}");
    println!(
        "Waiting for approval (the code expires in {} minutes; Ctrl-C to give up)...",
        started.expires_in.div_ceil(60)
    );
}

/// Polls `register` until the code is approved, refused or expired.
async fn wait_for_approval(
    server: &ServerClient,
    started: &PairResponse,
) -> Result<RegisterResponse> {
    let params = RegisterParams {
        device_code: started.device_code.clone(),
    };
    let mut interval = Duration::from_secs(started.interval.max(1));
    // A little past the code's life, so the server's `expired_token` is what we usually see.
    let deadline = Instant::now() + Duration::from_secs(started.expires_in + 30);
    loop {
        tokio::time::sleep(interval).await;
        if Instant::now() > deadline {
            bail!(
                "the pairing code expired before anyone approved it; run `tether-agent pair` again"
            );
        }
        match server.register(&params).await {
            Ok(registered) => return Ok(registered),
            Err(err) => match err.code() {
                Some("authorization_pending") => {}
                Some("slow_down") => interval += Duration::from_secs(SLOW_DOWN_STEP_SECS),
                Some("expired_token") => {
                    bail!("the pairing code expired before anyone approved it; run `tether-agent pair` again")
                }
                Some("access_denied") => {
                    bail!("pairing was refused (or the code was already used)")
                }
                _ if err.is_transient() => eprintln!("warning: {err}; still waiting"),
                _ => return Err(err).context("pairing failed"),
            },
        }
    }
}

/// The name given, or this computer's host name.
fn device_name(given: Option<String>) -> Result<String> {
    let name = given.unwrap_or_else(host_name);
    let name = name.trim();
    if name.is_empty()
        || name.chars().count() > MAX_DEVICE_NAME
        || name.chars().any(char::is_control)
    {
        bail!("the device name must be 1 to {MAX_DEVICE_NAME} printable characters");
    }
    Ok(name.to_owned())
}

fn host_name() -> String {
    let from_files = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty());
    from_files
        .or_else(|| {
            let output = std::process::Command::new("hostname").output().ok()?;
            let name = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            (!name.is_empty()).then_some(name)
        })
        .unwrap_or_else(|| "computer".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_default_to_the_host_and_are_checked() {
        assert_eq!(
            device_name(Some(" test-box ".into())).ok(),
            Some("test-box".to_owned())
        );
        assert!(device_name(None).is_ok_and(|name| !name.is_empty()));
        assert!(device_name(Some(String::new())).is_err());
        assert!(device_name(Some("a\nb".into())).is_err());
        assert!(device_name(Some("x".repeat(65))).is_err());
    }
}
