//! Answering an `evidence.request`: the owner asks, from the job page, to **preview**,
//! **release** or **discard** a file this computer holds ([`crate::local::held_evidence`]).
//! The answer goes to `POST /api/devices/self/evidence-uploads/{uploadId}`
//! ([`DeviceClient::answer_evidence_request`]); the daemon answers while idle too.
//!
//! - Only a file the held index lists for the frame's job is acted on: an unknown id, or a
//!   file of another job, is refused ("not held on this computer"), never looked for on
//!   disk. A discard of a file the index no longer lists at all (swept after 30 days, or
//!   deleted by hand) is answered as done: what the owner asked is already true, and the
//!   job page may drop the row.
//! - Preview and release read the file again by the rules of any upload (the same size and
//!   digest as when it was held, not a credential by name, text with every saved value
//!   hidden, a binary file holding one refused), and send it only when that is still the
//!   file its description gave. A release while evidence upload is off is refused with
//!   [`KEPT_PREFIX`], which the server answers as 409 `evidence_kept`. A released file is
//!   marked released in the index once the server took it.
//! - Discard deletes the file and its variants, then answers with an empty body; a file
//!   that cannot be deleted is a refusal naming why, never "done".
//! - A refusal is an empty body with the reason in `x-tether-evidence-refused`.
//! - The work is bounded by the frame's `timeoutMs` (less a margin), at most
//!   [`MAX_CONCURRENT_ANSWERS`] at once; the log names ids and actions, never bytes.

use std::time::{Duration, Instant};

use tether_protocol::evidence::{EvidenceAction, MAX_PREVIEW_BYTES};
use tether_protocol::jobs::EvidenceMeta;
use tether_protocol::JobId;

use crate::local::evidence_files::sha256_hex;
use crate::local::held_evidence::{HeldFile, HeldStore};
use crate::local::vault::Vault;
use crate::remote::client::{DeviceClient, EvidenceAnswer};
use crate::remote::events::EvidenceRequest;
use crate::remote::frames::FrameContext;

/// How a refusal starts when evidence upload is off on this computer (the server's
/// `held_evidence::KEPT_PREFIX`).
pub const KEPT_PREFIX: &str = "code=evidence_kept";
/// How long the agent works on a request when the server does not say how long it waits.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(50);
/// The longest the agent works on one request: a release may be 100 MB.
pub const MAX_BUDGET: Duration = Duration::from_secs(15 * 60);
/// Most requests worked on at once; more wait their turn (within their budget).
pub const MAX_CONCURRENT_ANSWERS: usize = 2;

static ANSWERING: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MAX_CONCURRENT_ANSWERS);

/// What the held file gives for a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Prepared {
    /// Bytes to send: a preview or a release.
    Send {
        meta: EvidenceMeta,
        body: Vec<u8>,
    },
    /// Deleted, with its variants.
    Discarded,
    Refused(String),
}

/// Answers `request` and, for a release the server took, marks the file released.
pub async fn handle(context: FrameContext, request: EvidenceRequest) {
    let deadline = Instant::now() + budget(request.timeout);
    tracing::info!(request = %request.id, job = %request.job_id, evidence = %request.evidence_id,
                   action = request.action.as_str(), "evidence request");
    let client = context.client.clone();
    let store = HeldStore::for_data_dir(context.guard.data_dir());
    let answered =
        tokio::time::timeout_at(deadline.into(), answer(&client, &store, context, &request)).await;
    let outcome = match answered {
        Ok(outcome) => outcome,
        Err(_) => {
            let reason = "this computer could not send it in time";
            client
                .answer_evidence_request(&request.upload_id, EvidenceAnswer::Refused(reason))
                .await
        }
    };
    match outcome {
        Ok(()) => {
            tracing::info!(request = %request.id, evidence = %request.evidence_id, "evidence request answered")
        }
        Err(err) => {
            tracing::warn!(request = %request.id, evidence = %request.evidence_id, "evidence answer not delivered: {err}")
        }
    }
}

/// Prepares the answer off the async threads, sends it, and marks a release.
async fn answer(
    client: &DeviceClient,
    store: &HeldStore,
    context: FrameContext,
    request: &EvidenceRequest,
) -> Result<(), crate::remote::client::RemoteError> {
    let _turn = ANSWERING.acquire().await;
    let (blocking_store, data_dir) = (store.clone(), context.data_dir.clone());
    let (job_id, evidence_id, action) = (
        request.job_id.clone(),
        request.evidence_id.clone(),
        request.action,
    );
    let config = context.config;
    let prepared = tokio::task::spawn_blocking(move || {
        let upload = config().evidence_upload;
        let hidden = || Vault::new(&data_dir).all_values();
        prepare(
            &blocking_store,
            (&job_id, &evidence_id, action),
            upload,
            hidden,
        )
    })
    .await
    .unwrap_or_else(|_| Prepared::Refused("the answer failed on this computer".to_owned()));
    let upload_id = &request.upload_id;
    match prepared {
        Prepared::Refused(reason) => {
            tracing::info!(request = %request.id, evidence = %request.evidence_id, "evidence request refused: {reason}");
            let refused = EvidenceAnswer::Refused(&reason);
            client.answer_evidence_request(upload_id, refused).await
        }
        Prepared::Discarded => {
            client
                .answer_evidence_request(upload_id, EvidenceAnswer::Done)
                .await
        }
        Prepared::Send { meta, body } => {
            let file = EvidenceAnswer::File { meta: &meta, body };
            client.answer_evidence_request(upload_id, file).await?;
            if request.action == EvidenceAction::Release {
                mark_released(store, &request.job_id, &request.evidence_id).await;
            }
            Ok(())
        }
    }
}

async fn mark_released(store: &HeldStore, job_id: &JobId, evidence_id: &str) {
    let (store, job_id, evidence_id) = (store.clone(), job_id.clone(), evidence_id.to_owned());
    let marked =
        tokio::task::spawn_blocking(move || store.mark_released(&job_id, &evidence_id)).await;
    if !matches!(marked, Ok(Ok(()))) {
        tracing::warn!("a released evidence file could not be marked released");
    }
}

/// What the held file `evidence_id` of `job_id` gives for `action`, with upload on or off;
/// `hidden` gives every saved value, asked only when a file is read.
pub fn prepare(
    store: &HeldStore,
    (job_id, evidence_id, action): (&JobId, &str, EvidenceAction),
    upload: bool,
    hidden: impl FnOnce() -> Vec<String>,
) -> Prepared {
    let file = match store.find(evidence_id) {
        Ok(Some(file)) if &file.job_id == job_id => file,
        Ok(None) if action == EvidenceAction::Discard => return Prepared::Discarded,
        Ok(_) => return Prepared::Refused("not held on this computer".to_owned()),
        Err(err) => {
            return Prepared::Refused(format!("the index of held evidence cannot be read: {err}"))
        }
    };
    match action {
        EvidenceAction::Discard => match store.discard(job_id, evidence_id) {
            Ok(_) => Prepared::Discarded,
            Err(why) => Prepared::Refused(why),
        },
        EvidenceAction::Release if !upload => Prepared::Refused(format!(
            "{KEPT_PREFIX}: evidence upload is off on this computer"
        )),
        EvidenceAction::Preview if file.described_size > MAX_PREVIEW_BYTES => {
            Prepared::Refused(format!(
                "{} is over {MAX_PREVIEW_BYTES} bytes, too large to preview",
                file.name
            ))
        }
        EvidenceAction::Preview | EvidenceAction::Release => read(store, &file, &hidden()),
    }
}

/// The bytes to send, if they are still the file its description gave.
fn read(store: &HeldStore, file: &HeldFile, hidden: &[String]) -> Prepared {
    match store.read(file, hidden) {
        Ok(body)
            if body.len() as u64 == file.described_size
                && sha256_hex(&body) == file.described_sha256 =>
        {
            Prepared::Send {
                meta: description(file),
                body,
            }
        }
        Ok(_) => Prepared::Refused(format!(
            "{}: secret values saved since the run would be hidden in it, so it is no longer the file described",
            file.name
        )),
        Err(why) => Prepared::Refused(format!("{}: {why}", file.name)),
    }
}

/// The description the file went up with.
fn description(file: &HeldFile) -> EvidenceMeta {
    EvidenceMeta {
        id: file.evidence_id.clone(),
        kind: file.kind,
        name: file.name.clone(),
        size: file.described_size,
        sha256: file.described_sha256.clone(),
        mime: None,
        caption: file.caption.clone(),
        local: false,
        held: true,
        variant_of: file.variant_of.clone(),
        variant: file.variant,
        details: file.details,
    }
}

/// How long the agent works on a request the server waits `server_waits` for: a fifth less
/// (at most a second less, for the answer's way back), at most [`MAX_BUDGET`];
/// [`DEFAULT_BUDGET`] when the server does not say.
pub fn budget(server_waits: Option<Duration>) -> Duration {
    match server_waits {
        None => DEFAULT_BUDGET,
        Some(waits) => {
            let margin = (waits / 5).min(Duration::from_secs(1));
            waits.saturating_sub(margin).min(MAX_BUDGET)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use tether_protocol::jobs::EvidenceKind;

    use super::*;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn job(id: &str) -> JobId {
        JobId::parse(id).unwrap_or_else(|_| JobId::generate())
    }

    fn hold(store: &HeldStore, dir: &Path, job_id: &str, id: &str, bytes: &[u8]) -> Result<()> {
        let source = dir.join(id);
        fs::write(&source, bytes)?;
        let file = HeldFile::sample(job_id, id, &format!("{id}.log"), EvidenceKind::Log, bytes);
        store.hold(&source, file)?;
        Ok(())
    }

    fn refused(prepared: Prepared) -> String {
        match prepared {
            Prepared::Refused(reason) => reason,
            other => format!("not refused: {other:?}"),
        }
    }

    #[test]
    fn requests_are_answered_from_the_held_index_only() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let store = HeldStore::in_root(dir.path());
        hold(&store, dir.path(), "job-1", "aa", PNG)?;
        hold(&store, dir.path(), "job-1", "log", b"plain text\n")?;
        let none = Vec::new;
        let ask = |job_id: &str, id: &str, action| {
            prepare(&store, (&job(job_id), id, action), true, none)
        };
        assert_eq!(
            refused(ask("job-1", "zz", EvidenceAction::Preview)),
            "not held on this computer"
        );
        // Gone already (swept, or deleted by hand): a discard is what is already true.
        assert!(matches!(
            ask("job-1", "zz", EvidenceAction::Discard),
            Prepared::Discarded
        ));
        // Another job's file is not found under this job.
        assert_eq!(
            refused(ask("job-2", "aa", EvidenceAction::Discard)),
            "not held on this computer"
        );
        assert!(store.find("aa")?.is_some());
        match ask("job-1", "aa", EvidenceAction::Preview) {
            Prepared::Send { meta, body } => {
                assert_eq!(body, PNG);
                assert!(meta.held && meta.id == "aa" && meta.size == PNG.len() as u64);
            }
            other => return Err(format!("{other:?}").into()),
        }
        // Release with upload off: the server reads the prefix as 409 evidence_kept.
        let off = prepare(
            &store,
            (&job("job-1"), "aa", EvidenceAction::Release),
            false,
            none,
        );
        assert_eq!(
            refused(off),
            "code=evidence_kept: evidence upload is off on this computer"
        );
        assert_eq!(
            ask("job-1", "aa", EvidenceAction::Discard),
            Prepared::Discarded
        );
        assert_eq!(store.find("aa")?, None);
        Ok(())
    }

    #[test]
    fn a_changed_file_or_one_a_later_secret_would_change_is_refused() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let store = HeldStore::in_root(dir.path());
        hold(
            &store,
            dir.path(),
            "job-1",
            "log",
            b"value abc-later-secret\n",
        )?;
        let later = || vec!["abc-later-secret".to_owned()];
        let ask = prepare(
            &store,
            (&job("job-1"), "log", EvidenceAction::Release),
            true,
            later,
        );
        assert!(refused(ask).starts_with("log.log: secret values saved since the run"));
        let file = store.find("log")?.ok_or("log")?;
        fs::write(store.path_of(&file)?, b"value changed!!!!!!!!!!\n")?;
        let ask = prepare(
            &store,
            (&job("job-1"), "log", EvidenceAction::Preview),
            true,
            Vec::new,
        );
        assert_eq!(refused(ask), "log.log: changed since it was held");
        Ok(())
    }

    /// One request the handler sends, as the server reads it: head and body.
    async fn one_request(listener: &tokio::net::TcpListener) -> Result<(String, Vec<u8>)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await?;
        let mut seen = Vec::new();
        let mut buffer = vec![0_u8; 8192];
        let (head, length) = loop {
            let read = socket.read(&mut buffer).await?;
            seen.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&seen).into_owned();
            if let Some((head, _)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|line| {
                        line.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_owned)
                    })
                    .and_then(|value| value.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (head.to_owned(), length);
            }
            if read == 0 {
                return Err("the request ended early".into());
            }
        };
        let start = head.len() + 4;
        while seen.len() < start + length {
            let read = socket.read(&mut buffer).await?;
            if read == 0 {
                break;
            }
            seen.extend_from_slice(&buffer[..read]);
        }
        socket.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await?;
        socket.shutdown().await?;
        Ok((head, seen[start..].to_vec()))
    }

    #[tokio::test]
    async fn the_answer_reaches_the_upload_route_and_a_release_is_marked() -> Result<()> {
        use crate::local::state::DataDir;
        use crate::remote::client::ServerClient;
        let dir = tempfile::tempdir()?;
        let data_dir =
            DataDir::resolve(Some(dir.path().join("agent"))).map_err(|err| err.to_string())?;
        data_dir.ensure().map_err(|err| err.to_string())?;
        let guard = crate::policy::guard::Guard::new(None, data_dir.root());
        let store = HeldStore::for_data_dir(guard.data_dir());
        let run = dir.path().join("run");
        fs::create_dir_all(&run)?;
        hold(&store, &run, "job-1", "aa", PNG)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let client = DeviceClient::new(
            ServerClient::new(&base).map_err(|e| e.to_string())?,
            "tdt_x".into(),
        );
        let context = |upload: bool| {
            let mut config = serde_json::from_value::<crate::local::state::Config>(
                serde_json::json!({"installId": "i"}),
            )
            .unwrap_or_else(|err| panic!("{err}"));
            config.evidence_upload = upload;
            FrameContext {
                client: client.clone(),
                data_dir: data_dir.clone(),
                guard: guard.clone(),
                journal: std::sync::Arc::new(crate::local::journal::Journal::new(&data_dir)),
                config: Box::new(move || config),
            }
        };
        let request = |action, upload_id: &str| EvidenceRequest {
            id: "r1".to_owned(),
            job_id: job("job-1"),
            evidence_id: "aa".to_owned(),
            action,
            upload_id: upload_id.to_owned(),
            timeout: Some(Duration::from_secs(10)),
        };

        let answered = tokio::spawn(handle(
            context(true),
            request(EvidenceAction::Release, "up-1"),
        ));
        let (head, body) = one_request(&listener).await?;
        answered.await?;
        assert!(
            head.starts_with("POST /api/devices/self/evidence-uploads/up-1 "),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase().contains("x-tether-evidence: "),
            "{head}"
        );
        assert_eq!(body, PNG);
        assert!(store.find("aa")?.is_some_and(|file| file.released));

        let answered = tokio::spawn(handle(
            context(false),
            request(EvidenceAction::Release, "up-2"),
        ));
        let (head, body) = one_request(&listener).await?;
        answered.await?;
        assert!(
            head.contains("x-tether-evidence-refused: code%3Devidence%5Fkept%3A%20evidence"),
            "{head}"
        );
        assert!(body.is_empty());

        let answered = tokio::spawn(handle(
            context(false),
            request(EvidenceAction::Discard, "up-3"),
        ));
        let (head, body) = one_request(&listener).await?;
        answered.await?;
        assert!(!head.contains("refused"), "{head}");
        assert!(body.is_empty());
        assert_eq!(store.find("aa")?, None);
        Ok(())
    }

    #[test]
    fn the_budget_follows_the_server_wait() {
        assert_eq!(budget(None), DEFAULT_BUDGET);
        assert_eq!(
            budget(Some(Duration::from_secs(60))),
            Duration::from_secs(59)
        );
        assert_eq!(budget(Some(Duration::from_secs(3600))), MAX_BUDGET);
    }
}
