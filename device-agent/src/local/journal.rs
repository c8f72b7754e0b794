//! The local journal of runs: what this computer is running or has yet to report, kept on
//! disk so that an outage or a restart of the agent loses nothing and runs nothing twice.
//!
//! One small JSON file per run, `runs/<jobId>.json` in the data dir (mode 0600, written
//! atomically). A run's record is written **before** its process starts, updated once the
//! process exists (its pid and start time), the moment it ended (its outcome, before any of
//! its output, evidence or delivery goes anywhere), once its completion is made (the change
//! list and delivery added), and removed when the server acknowledged the completion or
//! refused the run for good. A record left behind by an earlier agent process is what
//! [`crate::daemon::reconcile`] settles at start-up: a run whose process ended is reported,
//! never run again.
//!
//! `job-folders.json` remembers which shared folder (by label) each recent job worked in,
//! so the web can still browse a job's files after it ended (`file.request`).

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_protocol::jobs::{ClaimedJob, CompleteParams, Outcome};
use tether_protocol::report::ObservedRun;
use tether_protocol::{JobId, LeaseToken};

use crate::local::private_files::create_private_dir;
use crate::local::state::{write_atomic, DataDir};

const RUNS_DIR: &str = "runs";
const JOB_FOLDERS_FILE: &str = "job-folders.json";
/// How many ended jobs keep their folder label for file browsing.
const MAX_REMEMBERED_JOBS: usize = 1000;

/// One run as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub job_id: JobId,
    pub attempt: u32,
    /// The lease the run holds now (replaced on reattach); a plain string on disk.
    pub lease_token: LeaseToken,
    /// The shared folder's label; the path comes from the configuration.
    pub folder: String,
    pub engine: String,
    /// Which carry-on this attempt is, when it is one.
    #[serde(default)]
    pub resumed: Option<u32>,
    /// The run's process, once it exists: the leader of its own process group.
    #[serde(default)]
    pub process: Option<ProcessMark>,
    pub state: RunState,
    pub started_at: DateTime<Utc>,
    /// The agent process that wrote the record: a record of another (earlier) agent process
    /// is one whose run nobody supervises any more.
    pub agent_pid: u32,
}

/// Identifies a process across a restart of the agent: its pid (also its process group id)
/// and its start time, so a reused pid is never mistaken for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessMark {
    pub pid: u32,
    /// Clock ticks since boot at which the process started (`/proc/PID/stat`, field 22);
    /// `None` where that cannot be read.
    pub start_ticks: Option<u64>,
}

/// Where a run is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunState {
    /// Claimed; the process may not exist yet.
    Starting,
    /// The process exists.
    Running,
    /// The process ended with this outcome; what follows it (the rest of its output, its
    /// evidence, its change list, its git delivery) may not have happened. A restarted
    /// agent reports it as it stands and runs nothing again.
    #[serde(rename_all = "camelCase")]
    Ended {
        outcome: Outcome,
        summary: String,
        exit_code: Option<i32>,
        /// The worker's report, as it goes with the completion.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<serde_json::Value>,
        /// What the run used, as its agent said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observed: Option<ObservedRun>,
        /// How far the job's git delivery got.
        #[serde(default)]
        delivery: DeliveryStage,
    },
    /// The process ended; this completion is to be reported (complete is idempotent with
    /// the same lease, so sending it again is always safe).
    #[serde(rename_all = "camelCase")]
    Finished {
        outcome: Outcome,
        summary: String,
        exit_code: Option<i32>,
        /// The worker's report, as it goes with the completion.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<serde_json::Value>,
        /// What the run used, as its agent said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        observed: Option<ObservedRun>,
        /// What the run changed in its folder, as reported with the completion.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        changes: Option<serde_json::Value>,
        /// What became of the work in git, as reported with the completion.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delivery: Option<serde_json::Value>,
    },
}

/// How far the git delivery of a run that ended got, while its completion was not made yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStage {
    /// The job asks for none.
    #[default]
    NotAsked,
    /// Asked, not begun.
    Pending,
    /// Begun: commits, a push, a pull request may have been made.
    Begun,
}

impl RunRecord {
    /// A fresh record for a claimed job, before its process starts.
    pub fn claimed(job: &ClaimedJob) -> RunRecord {
        RunRecord {
            job_id: job.id.clone(),
            attempt: job.attempt,
            lease_token: job.lease_token.clone(),
            folder: job.spec.folder.clone(),
            engine: job.spec.engine.clone(),
            resumed: job.resumed,
            process: None,
            state: RunState::Starting,
            started_at: Utc::now(),
            agent_pid: std::process::id(),
        }
    }

    /// The completion a finished run still has to report.
    pub fn completion(&self) -> Option<CompleteParams> {
        match &self.state {
            RunState::Finished {
                outcome,
                summary,
                exit_code,
                report,
                observed,
                changes,
                delivery,
            } => Some(CompleteParams {
                outcome: *outcome,
                summary: summary.clone(),
                exit_code: *exit_code,
                report: report.clone(),
                observed: observed.clone(),
                changes: changes.clone(),
                delivery: delivery.clone(),
            }),
            RunState::Ended {
                outcome,
                summary,
                exit_code,
                report,
                observed,
                delivery,
            } => {
                let (outcome, summary) = undelivered(*outcome, summary, *delivery);
                Some(CompleteParams {
                    outcome,
                    summary,
                    exit_code: *exit_code,
                    report: report.clone(),
                    observed: observed.clone(),
                    changes: None,
                    delivery: None,
                })
            }
            RunState::Starting | RunState::Running => None,
        }
    }
}

/// The outcome and summary of a run that ended but whose git delivery did not finish, as
/// a restarted agent reports them. The delivery is not retried: what it commits and pushes
/// is judged against the folder as the run left it, which nobody has watched since, and a
/// push or a merge half made must not be made twice. Work the job asked to have delivered
/// and that was not is no success: `blocked`, saying what to look at.
fn undelivered(outcome: Outcome, summary: &str, stage: DeliveryStage) -> (Outcome, String) {
    let note = match stage {
        DeliveryStage::NotAsked => return (outcome, summary.to_owned()),
        DeliveryStage::Pending => {
            "the agent restarted after the run ended and before its work was delivered: \
             Tether made no commit, push or merge for it (nor undid any), and the work is in \
             the folder as the run left it"
        }
        DeliveryStage::Begun => {
            "the agent restarted while the run's work was being delivered, and the delivery \
             was not retried: see the branch for what was committed or pushed"
        }
    };
    let outcome = match outcome {
        Outcome::Succeeded => Outcome::Blocked,
        other => other,
    };
    (outcome, format!("{note}\n{summary}"))
}

/// The journal in the data dir. Each run's file is written only by the task of that run
/// (or by reconciliation before the run starts), so writes to different files need no lock;
/// the shared `job-folders.json` is guarded by a mutex.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    job_folders: PathBuf,
    /// Held while `job-folders.json` is read, changed and written back.
    job_folders_lock: Mutex<()>,
}

impl Journal {
    pub fn new(data_dir: &DataDir) -> Journal {
        Journal {
            dir: data_dir.path(RUNS_DIR),
            job_folders: data_dir.path(JOB_FOLDERS_FILE),
            job_folders_lock: Mutex::new(()),
        }
    }

    /// Writes (or replaces) a run's record atomically, mode 0600.
    ///
    /// # Errors
    /// When the directory or file cannot be written.
    pub fn record(&self, record: &RunRecord) -> Result<()> {
        self.ensure_dir()?;
        let mut bytes = serde_json::to_vec_pretty(record)?;
        bytes.push(b'\n');
        let path = self.file_of(&record.job_id);
        write_atomic(&path, &bytes).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Reads one run's record.
    ///
    /// # Errors
    /// When it exists but cannot be read or parsed.
    pub fn get(&self, job_id: &JobId) -> Result<Option<RunRecord>> {
        let path = self.file_of(job_id);
        match fs::read(&path) {
            Ok(bytes) => {
                Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
                    format!("{} is not a run record", path.display())
                })?))
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Changes one run's record in place; nothing happens when it is gone.
    ///
    /// # Errors
    /// When it cannot be read or written.
    pub fn update(&self, job_id: &JobId, change: impl FnOnce(&mut RunRecord)) -> Result<()> {
        if let Some(mut record) = self.get(job_id)? {
            change(&mut record);
            self.record(&record)?;
        }
        Ok(())
    }

    /// Removes a run's record (the run is settled with the server); absent is fine.
    ///
    /// # Errors
    /// When it exists but cannot be removed.
    pub fn remove(&self, job_id: &JobId) -> Result<()> {
        let path = self.file_of(job_id);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err).with_context(|| format!("cannot remove {}", path.display())),
        }
    }

    /// Every record on disk, oldest first. A file that does not parse is set aside (renamed
    /// `*.corrupt`) with a warning rather than blocking the agent.
    ///
    /// # Errors
    /// When the directory cannot be read.
    pub fn load_all(&self) -> Result<Vec<RunRecord>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => {
                return Err(err).with_context(|| format!("cannot read {}", self.dir.display()))
            }
        };
        let mut records = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_none_or(|ext| ext != "json") {
                continue;
            }
            let parsed = fs::read(&path)
                .map_err(anyhow::Error::from)
                .and_then(|bytes| Ok(serde_json::from_slice::<RunRecord>(&bytes)?));
            match parsed {
                Ok(record) => records.push(record),
                Err(err) => {
                    tracing::warn!(path = %path.display(), "unreadable run record set aside: {err:#}");
                    let _ = fs::rename(&path, path.with_extension("corrupt"));
                }
            }
        }
        records.sort_by_key(|record| record.started_at);
        Ok(records)
    }

    /// Remembers that `job_id` works in the folder labelled `label`, for file browsing after
    /// the run ended. Keeps the newest [`MAX_REMEMBERED_JOBS`].
    ///
    /// # Errors
    /// When the file cannot be read or written.
    pub fn remember_folder(&self, job_id: &JobId, label: &str) -> Result<()> {
        self.remember_folder_within(job_id, label, None, MAX_REMEMBERED_JOBS)
    }

    /// Remembers that `job_id` works in the worktree at `path` of the folder labelled
    /// `label`: file browsing reads the worktree, not the shared folder.
    ///
    /// # Errors
    /// When the file cannot be read or written.
    pub fn remember_worktree(&self, job_id: &JobId, label: &str, path: &Path) -> Result<()> {
        self.remember_folder_within(job_id, label, Some(path), MAX_REMEMBERED_JOBS)
    }

    fn remember_folder_within(
        &self,
        job_id: &JobId,
        label: &str,
        worktree: Option<&Path>,
        max: usize,
    ) -> Result<()> {
        let _guard = self
            .job_folders_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut folders = self.read_job_folders()?;
        folders.retain(|known| &known.job_id != job_id);
        folders.push_back(JobFolder {
            job_id: job_id.clone(),
            folder: label.to_owned(),
            worktree: worktree.map(Path::to_path_buf),
        });
        while folders.len() > max {
            folders.pop_front();
        }
        self.ensure_dir()?;
        let bytes = serde_json::to_vec(&folders)?;
        write_atomic(&self.job_folders, &bytes)
            .with_context(|| format!("cannot write {}", self.job_folders.display()))
    }

    /// The folder label a job of this computer works (or worked) in.
    ///
    /// # Errors
    /// When the files cannot be read.
    pub fn folder_of(&self, job_id: &JobId) -> Result<Option<String>> {
        if let Some(record) = self.get(job_id)? {
            return Ok(Some(record.folder));
        }
        let _guard = self
            .job_folders_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(self
            .read_job_folders()?
            .into_iter()
            .find(|known| &known.job_id == job_id)
            .map(|known| known.folder))
    }

    /// The worktree a job of this computer works (or worked) in, if it ran in one.
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn worktree_of(&self, job_id: &JobId) -> Result<Option<PathBuf>> {
        let _guard = self
            .job_folders_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(self
            .read_job_folders()?
            .into_iter()
            .find(|known| &known.job_id == job_id)
            .and_then(|known| known.worktree))
    }

    fn read_job_folders(&self) -> Result<VecDeque<JobFolder>> {
        match fs::read(&self.job_folders) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                tracing::warn!("{} is unreadable, starting afresh: {err}", JOB_FOLDERS_FILE);
                VecDeque::new()
            })),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(VecDeque::new()),
            Err(err) => {
                Err(err).with_context(|| format!("cannot read {}", self.job_folders.display()))
            }
        }
    }

    fn file_of(&self, job_id: &JobId) -> PathBuf {
        // Job ids are `[A-Za-z0-9_-]{1,64}` (checked when parsed), so they are safe names.
        self.dir.join(format!("{}.json", job_id.as_str()))
    }

    fn ensure_dir(&self) -> Result<()> {
        create_private_dir(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobFolder {
    job_id: JobId,
    folder: String,
    /// The agent's worktree of that folder the job ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worktree: Option<PathBuf>,
}

/// Marks the process `pid` with its start time, to recognise it after a restart.
pub fn mark_process(pid: u32) -> ProcessMark {
    ProcessMark {
        pid,
        start_ticks: process_start_ticks(pid),
    }
}

/// Whether the process a record names still runs: alive, not a zombie, and started when
/// the record says (so a pid reused by another program does not count).
pub fn process_still_runs(mark: &ProcessMark) -> bool {
    let Some(stat) = read_stat(mark.pid) else {
        return false;
    };
    let Some(fields) = stat_fields(&stat) else {
        return false;
    };
    if fields.first().is_some_and(|state| *state == "Z") {
        return false;
    }
    match mark.start_ticks {
        Some(expected) => start_ticks_of(&fields) == Some(expected),
        // Without a recorded start time, only the pid can be checked.
        None => true,
    }
}

fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = read_stat(pid)?;
    start_ticks_of(&stat_fields(&stat)?)
}

fn read_stat(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces and
/// parentheses, so it is skipped up to the last `)`): field 3 (state) comes first.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().collect())
}

/// Field 22 (`starttime`) is the 20th after the command name.
fn start_ticks_of(fields: &[&str]) -> Option<u64> {
    fields.get(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::jobs::{JobSpec, Mode};

    fn job(id: &str) -> ClaimedJob {
        ClaimedJob {
            id: JobId::parse(id).unwrap_or_else(|_| JobId::generate()),
            attempt: 2,
            lease_token: LeaseToken::parse("lease-a").unwrap_or_else(|err| panic!("{err}")),
            lease_expires_at: Utc::now(),
            spec: JobSpec {
                title: "t".into(),
                prompt: "p".into(),
                folder: "work".into(),
                engine: "tests".into(),
                mode: Mode::Unattended,
                network: false,
                timeout_minutes: 5,
                secrets: Vec::new(),
                git: None,
                attachments: Vec::new(),
                links: Vec::new(),
            },
            resumed: Some(1),
            continues: None,
            context: None,
        }
    }

    #[test]
    fn records_round_trip_privately_and_go_away() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("home")))?;
        let journal = Journal::new(&data_dir);
        assert_eq!(journal.load_all()?, Vec::new());

        let record = RunRecord::claimed(&job("job1"));
        journal.record(&record)?;
        journal.update(&record.job_id, |record| {
            record.process = Some(mark_process(std::process::id()));
            record.state = RunState::Running;
        })?;
        let running = journal.get(&record.job_id)?;
        assert_eq!(running.as_ref().map(|r| &r.state), Some(&RunState::Running));
        let mark = running.and_then(|r| r.process);
        assert!(mark.is_some_and(|mark| process_still_runs(&mark)));

        journal.update(&record.job_id, |record| {
            record.state = RunState::Finished {
                outcome: Outcome::Succeeded,
                summary: "exit code 0".into(),
                exit_code: Some(0),
                report: None,
                observed: None,
                changes: Some(serde_json::json!({"files": []})),
                delivery: Some(serde_json::json!({"branch": "main"})),
            };
        })?;
        let loaded = journal.load_all()?;
        assert_eq!(loaded.len(), 1);
        let completion = loaded[0].completion();
        assert_eq!(
            completion.map(|c| (c.outcome, c.exit_code, c.changes, c.delivery)),
            Some((
                Outcome::Succeeded,
                Some(0),
                Some(serde_json::json!({"files": []})),
                Some(serde_json::json!({"branch": "main"}))
            ))
        );

        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(journal.file_of(&record.job_id))?
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        journal.remove(&record.job_id)?;
        journal.remove(&record.job_id)?;
        assert_eq!(journal.load_all()?, Vec::new());
        // A change to a settled run changes nothing.
        journal.update(&record.job_id, |record| record.attempt = 9)?;
        assert_eq!(journal.get(&record.job_id)?, None);
        Ok(())
    }

    /// A run whose process ended is reported after a restart, never carried on: its
    /// outcome as journaled, or, when the delivery it asked for did not finish, `blocked`
    /// with what to look at (a failure stays a failure).
    #[test]
    fn an_ended_run_is_reported_as_it_stands() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        let journal = Journal::new(&data_dir);
        let record = RunRecord::claimed(&job("ended"));
        journal.record(&record)?;
        assert!(journal
            .get(&record.job_id)?
            .is_some_and(|r| r.completion().is_none()));
        let ended = |outcome, delivery| RunState::Ended {
            outcome,
            summary: "exit code 3".into(),
            exit_code: Some(3),
            report: Some(serde_json::json!({"summary": "fixed it"})),
            observed: Some(ObservedRun {
                engine: Some("claude-code-acp".into()),
                model: Some("opus".into()),
                ..ObservedRun::default()
            }),
            delivery,
        };
        let reported = |state: RunState| -> Result<_> {
            journal.update(&record.job_id, |record| record.state = state)?;
            // The report and what the run used are kept through a restart, as read back.
            let completion = Journal::new(&data_dir)
                .get(&record.job_id)?
                .and_then(|r| r.completion());
            if let Some(completion) = &completion {
                let observed = completion
                    .observed
                    .as_ref()
                    .and_then(|o| o.model.as_deref());
                assert_eq!(observed, Some("opus"));
            }
            Ok(completion.map(|c| (c.outcome, c.summary, c.exit_code, c.report, c.delivery)))
        };
        assert_eq!(
            reported(ended(Outcome::Failed, DeliveryStage::NotAsked))?,
            Some((
                Outcome::Failed,
                "exit code 3".into(),
                Some(3),
                Some(serde_json::json!({"summary": "fixed it"})),
                None
            ))
        );
        let pending = reported(ended(Outcome::Succeeded, DeliveryStage::Pending))?;
        assert!(
            pending
                .as_ref()
                .is_some_and(|(outcome, summary, ..)| *outcome == Outcome::Blocked
                    && summary.contains("no commit, push or merge")
                    && summary.ends_with("\nexit code 3")),
            "{pending:?}"
        );
        let begun = reported(ended(Outcome::Succeeded, DeliveryStage::Begun))?;
        assert!(
            begun
                .as_ref()
                .is_some_and(|(outcome, summary, ..)| *outcome == Outcome::Blocked
                    && summary.contains("see the branch")),
            "{begun:?}"
        );
        let failed = reported(ended(Outcome::Failed, DeliveryStage::Pending))?;
        assert_eq!(failed.map(|(outcome, ..)| outcome), Some(Outcome::Failed));
        // Written before the delivery field existed: nothing was asked.
        let written_before = serde_json::json!({
            "jobId": "old", "attempt": 1, "leaseToken": "lease-a", "folder": "work",
            "engine": "tests", "startedAt": "2025-01-01T00:00:00Z", "agentPid": 1,
            "state": {"state": "ended", "outcome": "succeeded", "summary": "exit code 0", "exitCode": 0},
        });
        let old: RunRecord = serde_json::from_value(written_before)?;
        assert_eq!(
            old.completion().map(|c| (c.outcome, c.summary)),
            Some((Outcome::Succeeded, "exit code 0".into()))
        );
        Ok(())
    }

    #[test]
    fn a_corrupt_record_is_set_aside() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        let journal = Journal::new(&data_dir);
        journal.record(&RunRecord::claimed(&job("good")))?;
        fs::write(tmp.path().join("runs").join("bad.json"), b"{nope")?;
        let loaded = journal.load_all()?;
        assert_eq!(loaded.len(), 1);
        assert!(tmp.path().join("runs").join("bad.corrupt").exists());
        Ok(())
    }

    #[test]
    fn the_lease_token_stays_a_plain_string_on_disk() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        let journal = Journal::new(&data_dir);
        // As an agent that kept the token as a `String` wrote it.
        let written_before = serde_json::json!({
            "jobId": "job1", "attempt": 2, "leaseToken": "lease-a", "folder": "work",
            "engine": "tests", "state": {"state": "running"},
            "startedAt": "2025-01-01T00:00:00Z", "agentPid": 1,
        });
        fs::create_dir_all(tmp.path().join("runs"))?;
        fs::write(
            tmp.path().join("runs").join("job1.json"),
            serde_json::to_vec(&written_before)?,
        )?;
        let loaded = journal.load_all()?;
        assert_eq!(
            loaded
                .iter()
                .map(|r| r.lease_token.expose())
                .collect::<Vec<_>>(),
            ["lease-a"]
        );
        let written = serde_json::to_value(&loaded[0])?;
        assert_eq!(written["leaseToken"], serde_json::json!("lease-a"));
        Ok(())
    }

    #[test]
    fn job_folders_are_remembered_and_bounded() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().to_path_buf()))?;
        let journal = Journal::new(&data_dir);
        let first = JobId::parse("first")?;
        journal.remember_folder_within(&first, "work", None, 3)?;
        assert_eq!(journal.folder_of(&first)?.as_deref(), Some("work"));
        assert_eq!(journal.worktree_of(&first)?, None);
        // A worktree replaces the job's entry and keeps its label.
        journal.remember_worktree(&first, "work", Path::new("/w/first"))?;
        assert_eq!(journal.folder_of(&first)?.as_deref(), Some("work"));
        assert_eq!(
            journal.worktree_of(&first)?,
            Some(PathBuf::from("/w/first"))
        );
        for i in 0..3 {
            journal.remember_folder_within(&JobId::parse(&format!("j{i}"))?, "other", None, 3)?;
        }
        assert_eq!(journal.folder_of(&first)?, None);
        assert_eq!(
            journal.folder_of(&JobId::parse("j2")?)?.as_deref(),
            Some("other")
        );
        // An active record answers too.
        journal.record(&RunRecord::claimed(&job("active")))?;
        assert_eq!(
            journal.folder_of(&JobId::parse("active")?)?.as_deref(),
            Some("work")
        );
        Ok(())
    }

    #[test]
    fn a_reused_pid_is_not_the_run() {
        let me = mark_process(std::process::id());
        assert!(me.start_ticks.is_some());
        assert!(process_still_runs(&me));
        let impostor = ProcessMark {
            pid: me.pid,
            start_ticks: me.start_ticks.map(|ticks| ticks + 1),
        };
        assert!(!process_still_runs(&impostor));
        assert!(!process_still_runs(&ProcessMark {
            pid: u32::MAX - 1,
            start_ticks: None
        }));
    }
}
