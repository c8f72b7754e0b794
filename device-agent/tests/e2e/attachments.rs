//! Attachments end to end: files uploaded on the web (`POST /api/attachments`), named in a
//! new job, downloaded by the real agent under the run's lease, checked and shown to the run
//! alone (under Landlock, as the other end-to-end tests, and under bubblewrap): a recipe reads them from
//! `$TETHER_ATTACHMENTS` and its task context from `$TETHER_TASK_CONTEXT`, and cannot write
//! there; the scripted ACP agent, advertising images and embedded context, gets the PNG as
//! an image block and the text file embedded; the folder is gone once each run ended. A
//! stored copy that changed after its upload fails the run before anything runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::jobs::{Job, JobState};

use crate::{agent_ok, backend_works, output_lines, pair, spawn_server, start_daemon, Web, AGENT};

/// One transparent pixel.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";
const NOTES: &str = "the bug shows on the second click\nsee the screenshot\n";
/// A name that must travel percent-encoded in the upload's header.
const PNG_NAME: &str = "shot one.png";
const RECIPE: &str = r#"set -u
echo "listed: $(ls "$TETHER_ATTACHMENTS" | tr '\n' '|')"
echo "notes: $(head -n 1 "$TETHER_ATTACHMENTS/notes.txt")"
echo "png: $(sha256sum "$TETHER_ATTACHMENTS/shot one.png" | cut -d ' ' -f 1)"
echo "context: $(printf '%s\n' "$TETHER_TASK_CONTEXT" | head -n 1)"
if echo x > "$TETHER_ATTACHMENTS/new.txt" 2>/dev/null; then echo "wrote a new file"; else echo "no new file"; fi
if echo y >> "$TETHER_ATTACHMENTS/notes.txt" 2>/dev/null; then echo "changed notes"; else echo "notes kept"; fi
echo "folder: $TETHER_ATTACHMENTS""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reads_its_attachments_and_its_context() {
    reads_its_attachments_and_its_context("landlock").await;
}

/// Under bubblewrap the folder is a read-only bind in the run's private file tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reads_its_attachments_and_its_context_under_bubblewrap() {
    if backend_works("bwrap").await {
        reads_its_attachments_and_its_context("bwrap").await;
    }
}

async fn reads_its_attachments_and_its_context(backend: &str) {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    agent_ok(
        home.path(),
        &["recipe", "add", "attached", "--", "sh", "-c", RECIPE],
    )
    .await;
    let agent = scripted_agent();
    agent_ok(
        home.path(),
        &[
            "engine",
            "add",
            "scripted",
            "--acp",
            "--",
            agent.to_str().unwrap(),
            "--images",
        ],
    )
    .await;
    let daemon = start_daemon(home.path(), backend);
    web.wait_for_engines(&device_id, &["attached", "scripted"])
        .await;
    let png_sha256 = hex(&Sha256::digest(PNG));

    // A recipe: the files are there under their names, byte-identical, read-only.
    let job = run(&web, &device_id, "attached", "look at the screenshot").await;
    let output = output_lines(&job);
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    for expected in [
        "listed: notes.txt|shot one.png|".to_owned(),
        "notes: the bug shows on the second click".to_owned(),
        format!("png: {png_sha256}"),
        "context: ## Task context".to_owned(),
        "no new file".to_owned(),
        "notes kept".to_owned(),
    ] {
        assert!(
            output.contains(&expected),
            "{expected:?} not in {output:?}\n{}",
            daemon.stderr()
        );
    }
    let folder = said(&output, "folder: ");
    let runs = runs_root(home.path()).canonicalize().unwrap();
    assert_eq!(
        PathBuf::from(&folder),
        runs.join(job.id.as_str()).join("attachments"),
        "the folder is the run's own, beside the data dir"
    );
    assert!(
        !runs.join(job.id.as_str()).exists(),
        "the folder goes when the run ends"
    );

    // A coding agent advertising images and embedded context: the PNG as an image block,
    // the text file embedded, after the prompt and its context.
    // Its `fs/read_text_file` of an attached file (outside the job's folder, beside the data
    // dir the guard protects) is answered.
    let script = json!({ "steps": [
        { "read": { "path": "$TETHER_ATTACHMENTS/notes.txt" } },
        { "say": "seen" },
    ] })
    .to_string();
    let job = run(&web, &device_id, "scripted", &script).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let output = output_lines(&job);
    let blocks: Vec<Value> = output
        .iter()
        .filter_map(|line| line.strip_prefix("stderr: scripted: block "))
        .map(|json| serde_json::from_str(json).unwrap())
        .collect();
    assert_eq!(blocks.len(), 3, "{output:#?}");
    let context = blocks[0]["text"].as_str().unwrap_or_default();
    assert!(
        blocks[0]["type"] == "text" && context.trim_start().starts_with("## Task context"),
        "{blocks:#?}"
    );
    let placed = runs.join(job.id.as_str()).join("attachments");
    let uri = |name: &str| format!("file://{}/{name}", placed.display());
    assert_eq!(
        blocks[1],
        json!({
            "type": "image", "mimeType": "image/png", "uri": uri("shot%20one.png"),
            "size": PNG.len(), "sha256": png_sha256,
        })
    );
    assert_eq!(blocks[2]["type"], "resource", "{blocks:#?}");
    assert_eq!(
        (
            blocks[2]["resource"]["text"].as_str(),
            blocks[2]["resource"]["uri"].as_str()
        ),
        (Some(NOTES), Some(uri("notes.txt").as_str())),
        "{blocks:#?}"
    );
    let read = json!({ "ok": NOTES }).to_string();
    assert!(
        output.contains(&format!("stderr: scripted: read {read}")),
        "{output:#?}"
    );
    assert!(!placed.exists(), "the folder goes when the run ends");
    drop(daemon);
}

/// The agent does not trust the server's bytes: a file whose stored copy changed after it
/// was uploaded (same size, one byte off) fails the run before anything runs, saying which
/// file and that its SHA-256 differs, and nothing is left placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_differ_from_the_upload_fail_the_run_before_it_starts() {
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    let recipe = "echo ran > ran.txt";
    agent_ok(
        home.path(),
        &["recipe", "add", "attached", "--", "sh", "-c", recipe],
    )
    .await;
    let daemon = start_daemon(home.path(), "landlock");
    web.wait_for_engines(&device_id, &["attached"]).await;
    let notes = upload(&web, "notes.txt", NOTES.as_bytes()).await;
    // The stored copy rots: the server still serves it (its size is right).
    let digest = hex(&Sha256::digest(NOTES.as_bytes()));
    let blob = server
        ._data_dir
        .path()
        .join("blobs/sha256")
        .join(&digest[..2])
        .join(&digest[2..]);
    let mut rotten = std::fs::read(&blob).unwrap();
    rotten[0] ^= 0x20;
    let writable = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&blob, writable).unwrap();
    std::fs::write(&blob, &rotten).unwrap();
    let body = json!({
        "deviceId": device_id, "title": "rotten", "prompt": "read the notes",
        "folder": "work", "engine": "attached", "mode": "unattended", "network": false,
        "timeoutMinutes": 5, "attachments": [notes],
    });
    let res = web.post("/api/jobs", &body).await;
    let text = res.text().await.unwrap();
    let job: Value = serde_json::from_str(&text).unwrap();
    let job_id = job["id"].as_str().unwrap_or_else(|| panic!("{text}"));
    let job = web
        .wait_for_job(job_id, Duration::from_secs(60), |job| job.state.is_final())
        .await;
    assert_eq!(job.state, JobState::Failed, "{job:#?}\n{}", daemon.stderr());
    let summary = job.outcome.as_ref().map(|outcome| outcome.summary.clone());
    let summary = summary.unwrap_or_default();
    assert!(
        summary.contains("\"notes.txt\" did not arrive as the job lists it")
            && summary.contains("SHA-256")
            && summary.contains("nothing ran"),
        "{summary}"
    );
    assert!(
        !work.path().join("ran.txt").exists(),
        "the recipe never ran"
    );
    assert!(!runs_root(home.path()).join(job_id).exists());
    drop(daemon);
}

/// Uploads the PNG and the notes, queues a job on `engine` carrying them and waits for it
/// to end.
async fn run(web: &Web, device_id: &str, engine: &str, prompt: &str) -> Job {
    let png = upload(web, PNG_NAME, PNG).await;
    let notes = upload(web, "notes.txt", NOTES.as_bytes()).await;
    let body = json!({
        "deviceId": device_id, "title": format!("run {engine}"), "prompt": prompt,
        "folder": "work", "engine": engine, "mode": "unattended", "network": false,
        "timeoutMinutes": 5, "attachments": [png, notes],
    });
    let res = web.post("/api/jobs", &body).await;
    let status = res.status();
    let text = res.text().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let job: Value = serde_json::from_str(&text).unwrap();
    web.wait_for_job(
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
        |job| job.state.is_final(),
    )
    .await
}

/// `POST /api/attachments`, the name percent-encoded in its header; the upload's id.
async fn upload(web: &Web, name: &str, bytes: &[u8]) -> String {
    let res = web
        .http
        .post(format!("{}/api/attachments", web.base))
        .bearer_auth(&web.token)
        .header("x-tether-attachment-name", percent_encoded(name))
        .header("content-type", "application/octet-stream")
        .body(bytes.to_vec())
        .send()
        .await
        .unwrap();
    let status = res.status();
    let answer: Value = res.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(
        (answer["name"].as_str(), answer["size"].as_u64()),
        (Some(name), Some(bytes.len() as u64)),
        "{answer}"
    );
    assert_eq!(answer["sha256"], hex(&Sha256::digest(bytes)));
    answer["id"].as_str().unwrap().to_owned()
}

/// The first output line starting with `prefix`, without it.
fn said(output: &[String], prefix: &str) -> String {
    output
        .iter()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {output:?}"))
        .to_owned()
}

/// `<data dir>-runs`, where the agent keeps what its runs are shown of itself.
fn runs_root(home: &Path) -> PathBuf {
    home.with_file_name(format!(
        "{}-runs",
        home.file_name().unwrap().to_string_lossy()
    ))
}

/// The scripted ACP agent, built by `cargo build --all-targets` next to the agent.
fn scripted_agent() -> PathBuf {
    let path = Path::new(AGENT)
        .with_file_name("examples")
        .join("scripted-acp-agent");
    assert!(path.exists(), "{} is missing", path.display());
    path
}

fn percent_encoded(name: &str) -> String {
    name.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
