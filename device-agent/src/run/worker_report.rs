//! The worker's own report of a run: what it did, how it tested it, what it left undone.
//!
//! A worker hands it over in one of two ways:
//!
//! - `tether_report` on the tool channel ([`Handback::report`]): checked at once, so an
//!   invalid one is refused with the problem and the worker can fix it and call again; the
//!   last valid call wins;
//! - `.tether/result.json` in the run's folder ([`RESULT_FILE`]), read when the run ends
//!   without a tool report ([`collect`]): no link followed, at most
//!   [`MAX_RESULT_FILE_BYTES`]; a file that cannot be used is named in the job's output
//!   and the run completes without a report. The file is left in place.
//!
//! Either way every saved secret value is hidden before the report is kept, and the report
//! goes with `complete` for recipe and ACP runs alike. [`Handback`] is also where the run's
//! evidence [`Recorder`] is found by `tether_attach`, once the engine has made the folder.
//!
//! **Architecture Invariant:** a report is the worker's word; it never changes the run's
//! outcome, and a bad one never fails the run.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tether_protocol::report::{ReportProblem, WorkerReport, MAX_RESULT_FILE_BYTES, RESULT_FILE};

use crate::local::private_files::{link_count, open_no_follow};
use crate::local::vault::redact;
use crate::run::evidence::Recorder;

/// What a run hands back while it runs: its report, and where `tether_attach` keeps files.
/// Shared by the tool channel (which fills it) and the engine (which reads it at the end).
#[derive(Debug)]
pub struct Handback {
    folder: PathBuf,
    hidden: Arc<Vec<String>>,
    report: Mutex<Option<WorkerReport>>,
    recorder: Mutex<Option<Recorder>>,
}

impl Handback {
    /// For a run working in `folder`, hiding the saved values `hidden`.
    pub fn new(folder: PathBuf, hidden: Arc<Vec<String>>) -> Arc<Handback> {
        Arc::new(Handback {
            folder,
            hidden,
            report: Mutex::default(),
            recorder: Mutex::default(),
        })
    }

    /// The run's folder: where `.tether/result.json` is, what attached paths are inside.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Keeps the worker's report (the last valid one wins), its saved values hidden.
    ///
    /// # Errors
    /// The report is not valid; the problem names the field.
    pub fn report(&self, raw: serde_json::Value) -> Result<(), ReportProblem> {
        let report = with_hidden(WorkerReport::parse(raw)?, &self.hidden);
        *lock(&self.report) = Some(report);
        Ok(())
    }

    /// The report kept from the tool channel, if any.
    pub fn kept_report(&self) -> Option<WorkerReport> {
        lock(&self.report).clone()
    }

    /// The engine made the run's evidence folder: `tether_attach` keeps files there.
    pub fn keep_evidence_in(&self, recorder: Recorder) {
        *lock(&self.recorder) = Some(recorder);
    }

    /// Where attached files go; `None` while (or when) the run has no evidence folder.
    pub fn recorder(&self) -> Option<Recorder> {
        lock(&self.recorder).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_hidden(mut report: WorkerReport, values: &[String]) -> WorkerReport {
    report.map_text(|text| redact(text, values));
    report
}

/// The report that goes with `complete`, and the note to show when the result file could
/// not be used.
#[derive(Debug, Default, PartialEq)]
pub struct Collected {
    pub report: Option<WorkerReport>,
    pub note: Option<String>,
}

impl Collected {
    /// The report as `CompleteParams.report` carries it.
    pub fn wire(&self) -> Option<serde_json::Value> {
        self.report
            .as_ref()
            .and_then(|report| serde_json::to_value(report).ok())
    }
}

/// The run's report at its end: the tool channel's, else `.tether/result.json` in `folder`
/// (read without blocking the runtime).
pub async fn collect(handback: Option<&Handback>, folder: &Path, hidden: &[String]) -> Collected {
    if let Some(report) = handback.and_then(Handback::kept_report) {
        return Collected {
            report: Some(report),
            note: None,
        };
    }
    let path = folder.join(RESULT_FILE);
    let values = hidden.to_vec();
    let read = tokio::task::spawn_blocking(move || read_result_file(&path, &values)).await;
    let read = read.unwrap_or_else(|err| Err(format!("it could not be read: {err}")));
    match read {
        Ok(report) => Collected { report, note: None },
        Err(why) => Collected {
            report: None,
            note: Some(redact(
                &format!("the worker's report in {RESULT_FILE} was not used: {why}"),
                hidden,
            )),
        },
    }
}

/// Reads and checks the result file at `path`: `None` when there is none.
///
/// # Errors
/// A link, not a regular file, too large, unreadable, or not a valid report.
pub fn read_result_file(path: &Path, hidden: &[String]) -> Result<Option<WorkerReport>, String> {
    if !within_no_links(path)? {
        return Ok(None);
    }
    let file = open_no_follow(path).map_err(|err| match err.raw_os_error() {
        Some(libc::ELOOP) => "it is a link, which is not followed".to_owned(),
        _ => format!("it cannot be opened: {err}"),
    })?;
    let meta = file
        .metadata()
        .map_err(|err| format!("it cannot be read: {err}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if link_count(&meta) > 1 {
        return Err("it has other names (a hard link), which are not followed".into());
    }
    if meta.len() > MAX_RESULT_FILE_BYTES {
        return Err(format!(
            "it is {} bytes, over the limit of {MAX_RESULT_FILE_BYTES}",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_RESULT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| format!("it cannot be read: {err}"))?;
    if bytes.len() as u64 > MAX_RESULT_FILE_BYTES {
        return Err(format!(
            "it grew over the limit of {MAX_RESULT_FILE_BYTES} bytes"
        ));
    }
    let raw: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|err| format!("it is not JSON: {err}"))?;
    let report = WorkerReport::parse(raw).map_err(|problem| problem.to_string())?;
    Ok(Some(with_hidden(report, hidden)))
}

/// Whether the file's folder (`.tether`) is there; an error when it is a link.
fn within_no_links(path: &Path) -> Result<bool, String> {
    let Some(parent) = path.parent() else {
        return Ok(false);
    };
    match parent.symlink_metadata() {
        Ok(meta) if meta.file_type().is_symlink() => {
            Err("its folder is a link, which is not followed".into())
        }
        Ok(meta) if meta.is_dir() => Ok(path.symlink_metadata().is_ok()),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    fn values() -> Vec<String> {
        vec!["hunter22".to_owned()]
    }

    fn write_result(folder: &Path, text: &str) -> Result<PathBuf> {
        std::fs::create_dir_all(folder.join(".tether"))?;
        let path = folder.join(RESULT_FILE);
        std::fs::write(&path, text)?;
        Ok(path)
    }

    #[test]
    fn a_tool_report_is_checked_hidden_and_the_last_wins() -> Result<()> {
        let handback = Handback::new(PathBuf::from("/nowhere"), Arc::new(values()));
        let problem = handback
            .report(json!({"summary": "", "done": []}))
            .err()
            .ok_or("an empty summary was kept")?;
        assert!(problem.to_string().contains("summary"), "{problem}");
        assert!(handback
            .report(json!({"summary": "x", "colour": 1}))
            .is_err());
        assert_eq!(handback.kept_report(), None);
        handback.report(json!({"summary": "first"}))?;
        handback.report(json!({"summary": "logged in with hunter22", "done": ["hunter22 set"]}))?;
        let kept = handback.kept_report().ok_or("no report")?;
        assert_eq!(kept.summary, "logged in with [hidden]");
        assert_eq!(kept.done, ["[hidden] set"]);
        Ok(())
    }

    #[tokio::test]
    async fn the_tool_report_wins_over_the_result_file() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        write_result(tmp.path(), r#"{"summary": "from the file"}"#)?;
        let handback = Handback::new(tmp.path().to_owned(), Arc::new(values()));
        handback.report(json!({"summary": "from the tool"}))?;
        let collected = collect(Some(&handback), tmp.path(), &values()).await;
        assert_eq!(collected.report.ok_or("none")?.summary, "from the tool");
        let from_file = collect(None, tmp.path(), &values()).await;
        assert_eq!(from_file.report.ok_or("none")?.summary, "from the file");
        assert!(
            tmp.path().join(RESULT_FILE).exists(),
            "the file is left in place"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_valid_result_file_is_read_and_hidden() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        write_result(
            tmp.path(),
            r#"{"summary": "used hunter22", "tested": [{"command": "make test", "outcome": "passed"}]}"#,
        )?;
        let collected = collect(None, tmp.path(), &values()).await;
        assert_eq!(collected.note, None);
        let wire = collected.wire().ok_or("nothing to send")?;
        assert_eq!(wire["summary"], "used [hidden]");
        assert_eq!(wire["tested"][0]["outcome"], "passed");
        Ok(())
    }

    #[tokio::test]
    async fn no_result_file_is_no_report_and_no_note() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        assert_eq!(
            collect(None, tmp.path(), &values()).await,
            Collected::default()
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_invalid_result_file_is_a_note() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        write_result(tmp.path(), "{not json")?;
        let note = collect(None, tmp.path(), &values())
            .await
            .note
            .ok_or("no note")?;
        assert!(note.starts_with("the worker's report in .tether/result.json was not used"));
        assert!(note.contains("not JSON"), "{note}");
        write_result(tmp.path(), r#"{"summary": "s", "links": ["ftp://x"]}"#)?;
        let collected = collect(None, tmp.path(), &values()).await;
        assert_eq!(collected.report, None);
        assert!(collected.note.ok_or("no note")?.contains("links"));
        Ok(())
    }

    #[tokio::test]
    async fn an_oversize_result_file_is_not_read() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let padding = " ".repeat(usize::try_from(MAX_RESULT_FILE_BYTES)?);
        write_result(tmp.path(), &format!("{{\"summary\": \"s\"}}{padding}"))?;
        let note = collect(None, tmp.path(), &values())
            .await
            .note
            .ok_or("no note")?;
        assert!(note.contains("over the limit"), "{note}");
        Ok(())
    }

    #[tokio::test]
    async fn a_linked_result_file_is_not_followed() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let outside = tmp.path().join("outside.json");
        std::fs::write(&outside, r#"{"summary": "not the run's"}"#)?;
        let run = tmp.path().join("run");
        std::fs::create_dir_all(run.join(".tether"))?;
        std::os::unix::fs::symlink(&outside, run.join(RESULT_FILE))?;
        let collected = collect(None, &run, &values()).await;
        assert_eq!(collected.report, None);
        assert!(collected.note.ok_or("no note")?.contains("link"));

        let other = tmp.path().join("other");
        std::fs::create_dir_all(other.join("elsewhere"))?;
        std::fs::copy(&outside, other.join("elsewhere/result.json"))?;
        std::os::unix::fs::symlink(other.join("elsewhere"), other.join(".tether"))?;
        let collected = collect(None, &other, &values()).await;
        assert_eq!(collected.report, None);
        assert!(collected
            .note
            .ok_or("no note")?
            .contains("folder is a link"));
        Ok(())
    }
}
