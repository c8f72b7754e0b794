//! Evidence end to end: a recipe leaves files in `$TETHER_EVIDENCE_DIR`, the real agent
//! sends them under the run's lease, the job lists them and its owner downloads them
//! byte-identical (text with the saved secret hidden); links and binary files holding the
//! secret are named in the output and never sent (nothing held: `evidence hold none`). With
//! `evidence off` every file is held: only its description goes up, and it stays in the held
//! folder on the computer.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::jobs::{Job, JobState};

use crate::{
    agent_ok, backend_works, output_lines, pair, postgres, save_secret, spawn_server, start_daemon,
    Web,
};

const SECRET: &str = "tok-77e1-evidence-secret";
/// One transparent pixel.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";
const RECIPE: &str = r#"cp shot.png "$TETHER_EVIDENCE_DIR/screenshot.png"
echo "build log: all good" > "$TETHER_EVIDENCE_DIR/build.log"
printf 'token is %s\n' "$API_TOKEN" > "$TETHER_EVIDENCE_DIR/session.log"
printf '\000\001%s' "$API_TOKEN" > "$TETHER_EVIDENCE_DIR/dump.bin"
ln -s /etc/hostname "$TETHER_EVIDENCE_DIR/link.txt"
echo done"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_reaches_the_job_byte_identical_sqlite() {
    evidence_reaches_the_job_byte_identical(None, "landlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_reaches_the_job_byte_identical_postgres() {
    if let Some(url) = postgres::fresh_database_url() {
        evidence_reaches_the_job_byte_identical(Some(url), "landlock").await;
    }
}

/// Under bubblewrap the evidence folder is a bind mount inside the run's private file tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_reaches_the_job_byte_identical_bwrap() {
    if backend_works("bwrap").await {
        evidence_reaches_the_job_byte_identical(None, "bwrap").await;
    }
}

async fn evidence_reaches_the_job_byte_identical(database_url: Option<String>, sandbox: &str) {
    let server = spawn_server(database_url).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let evidence_root = home.path().with_file_name(format!(
        "{}-evidence",
        home.path().file_name().unwrap().to_string_lossy()
    ));
    let device_id = pair(&server.base, &web, home.path()).await;
    std::fs::write(work.path().join("shot.png"), PNG).unwrap();
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "evidence", "--", "sh", "-c", RECIPE],
    )
    .await;
    agent_ok(home.path(), &["evidence", "hold", "none"]).await;
    let daemon = start_daemon(home.path(), sandbox);
    let device = web
        .wait_for_device(&device_id, |device| {
            device.online && device.seal_key.is_some() && device.capabilities.is_some()
        })
        .await;
    let seal_key = device.seal_key.unwrap();
    save_secret(
        &web,
        home.path(),
        &device_id,
        &seal_key,
        ("API_TOKEN", SECRET),
        None,
    )
    .await;

    let job = run(&web, &device_id, "evidence", &["API_TOKEN"]).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let listed: Vec<(&str, &str, bool)> = job
        .evidence
        .iter()
        .map(|item| (item.name.as_str(), item.kind.as_str(), item.local))
        .collect();
    assert_eq!(
        listed,
        [
            ("build.log", "log", false),
            ("screenshot.png", "screenshot", false),
            ("session.log", "log", false)
        ]
    );
    // Opened from the job page: its links, in order, give back what the run wrote.
    let page = web
        .get(&format!("/jobs/{}", job.id))
        .await
        .text()
        .await
        .unwrap();
    let links = evidence_links(&page);
    assert_eq!(links.len(), 3, "{page}");
    let expected: [&[u8]; 3] = [b"build log: all good\n", PNG, b"token is [hidden]\n"];
    for ((item, link), bytes) in job.evidence.iter().zip(&links).zip(expected) {
        assert_eq!(*link, format!("/api/jobs/{}/evidence/{}", job.id, item.id));
        let res = web.get(link).await;
        assert_eq!(res.status(), StatusCode::OK, "{}", item.name);
        assert_eq!(res.headers()["x-content-type-options"], "nosniff");
        assert_eq!(res.bytes().await.unwrap().as_ref(), bytes, "{}", item.name);
        assert_eq!(item.sha256, hex(&Sha256::digest(bytes)));
    }
    let output = output_lines(&job);
    for expected in [
        "evidence: dump.bin: holds a saved secret value, not sent",
        "evidence: link.txt: a link, not sent",
        "evidence: 3 evidence file(s) sent",
    ] {
        assert!(
            output.iter().any(|line| line == expected),
            "{expected:?} not in {output:?}"
        );
    }
    let everything = serde_json::to_string(&job).unwrap();
    assert!(!everything.contains(SECRET), "the value left the computer");

    // Evidence off: the next run's files are held here, only their descriptions go up. A new
    // recipe published after the switch shows the daemon read the new setting.
    agent_ok(home.path(), &["evidence", "off"]).await;
    let plain = r#"echo plain > "$TETHER_EVIDENCE_DIR/plain.log"; echo done"#;
    agent_ok(
        home.path(),
        &["recipe", "add", "plain", "--", "sh", "-c", plain],
    )
    .await;
    web.wait_for_device(&device_id, |device| {
        device
            .capabilities
            .as_ref()
            .is_some_and(|caps| caps.engines.iter().any(|engine| engine.name == "plain"))
    })
    .await;
    let job = run(&web, &device_id, "plain", &[]).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let item = &job.evidence[0];
    assert_eq!(job.evidence.len(), 1);
    assert!(item.held && !item.local, "{item:?}");
    assert_eq!((item.name.as_str(), item.size), ("plain.log", 6));
    assert_eq!(item.sha256, hex(&Sha256::digest(b"plain\n")));
    let res = web
        .get(&format!("/api/jobs/{}/evidence/{}", job.id, item.id))
        .await;
    assert_eq!(res.status(), StatusCode::CONFLICT);
    let kept = evidence_root
        .join("held")
        .join(job.id.as_str())
        .join(&item.id);
    assert_eq!(std::fs::read(&kept).unwrap(), b"plain\n");
    assert!(output_lines(&job)
        .iter()
        .any(|line| line.contains("1 held on this computer")));
    drop(daemon);
    let _ = std::fs::remove_dir_all(&evidence_root);
}

/// Queues a job on `engine` naming `secrets` and waits for it to end.
async fn run(web: &Web, device_id: &str, engine: &str, secrets: &[&str]) -> Job {
    let body = json!({
        "deviceId": device_id, "title": format!("run {engine}"), "prompt": "",
        "folder": "work", "engine": engine, "mode": "unattended", "network": false,
        "timeoutMinutes": 5, "secrets": secrets,
    });
    let res = web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Value = res.json().await.unwrap();
    web.wait_for_job(
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
        |job| job.state.is_final(),
    )
    .await
}

/// The evidence download links of a job page, in page order.
/// The links of the page's evidence list (the gallery above it links pictures again).
fn evidence_links(page: &str) -> Vec<String> {
    let list = page
        .split_once("<ul class=\"evidence\">")
        .map_or("", |(_, rest)| rest.split("</ul>").next().unwrap_or(""));
    list.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|href| href.starts_with("/api/jobs/") && href.contains("/evidence/"))
        .map(str::to_owned)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
