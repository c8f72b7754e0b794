//! `acp-sessions.json`: which ACP session each recent run of this computer worked in, so a
//! follow-up of that job (Continue) or a carry-on after a restart can ask the coding agent to
//! load it again (`session/load`) instead of starting from nothing.
//!
//! Only ids are kept: the job, the engine's name, the agent's session id, the folder's label
//! and canonical path, when, and the folders the owner allowed that run to change (a
//! follow-up of it in the same folder starts with them; the server is never asked which).
//! The conversation itself stays with the agent. The newest
//! [`MAX_SESSIONS`] jobs are kept, the oldest dropped first. A missing, unreadable or partly
//! unreadable file costs only the sessions it held: a run then starts a new session.
//!
//! The owner may delete a stopped job's session from its page (`engines::acp::deletion`):
//! [`Sessions::sharing`] finds every record of it, [`Sessions::forget`] removes them and
//! [`Sessions::restore`] puts them back when the agent's own copy could not be deleted.

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_protocol::JobId;

use crate::local::state::write_atomic;

/// The file's name in the data dir.
pub const SESSIONS_FILE: &str = "acp-sessions.json";
/// How many jobs keep their session.
pub const MAX_SESSIONS: usize = 500;

/// Held while the file is read, changed and written back: runs end concurrently, and one
/// agent process owns the data dir (`run.lock`), so an in-process lock is enough.
static FILE_LOCK: Mutex<()> = Mutex::new(());

/// The session one job's run worked in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSession {
    pub job_id: JobId,
    /// The engine's name on this computer: a session belongs to the agent that made it.
    pub engine: String,
    /// The agent's own id for the session, as `session/new` answered it.
    pub session_id: String,
    /// The shared folder's label.
    pub folder: String,
    /// The folder's canonical path, the session's `cwd`: an agent loads a session only in
    /// the folder it was made in.
    pub cwd: PathBuf,
    pub at: DateTime<Utc>,
    /// The folders the owner allowed the run to change ("allow for this run"), canonical.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub granted: Vec<PathBuf>,
}

/// The sessions file of one data dir.
#[derive(Debug, Clone)]
pub struct Sessions {
    path: PathBuf,
}

impl Sessions {
    /// The sessions file in `data_dir`.
    pub fn in_dir(data_dir: &Path) -> Sessions {
        Sessions::at(data_dir.join(SESSIONS_FILE))
    }

    fn at(path: PathBuf) -> Sessions {
        Sessions { path }
    }

    /// Stores `session` as its job's (replacing an earlier one), keeping the newest
    /// [`MAX_SESSIONS`].
    ///
    /// # Errors
    /// When the file cannot be read or written.
    pub fn remember(&self, session: StoredSession) -> Result<()> {
        self.remember_within(session, MAX_SESSIONS)
    }

    fn remember_within(&self, session: StoredSession, max: usize) -> Result<()> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sessions = self.read()?;
        sessions.retain(|known| known.job_id != session.job_id);
        sessions.push_back(session);
        while sessions.len() > max {
            sessions.pop_front();
        }
        self.write(&sessions)
    }

    /// Records `granted` as the folders `job_id`'s run was allowed to change, when its
    /// session is stored (a run that started none ran nothing there).
    ///
    /// # Errors
    /// When the file cannot be read or written.
    pub fn keep_granted(&self, job_id: &JobId, granted: &[PathBuf]) -> Result<()> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sessions = self.read()?;
        let Some(stored) = sessions.iter_mut().find(|known| &known.job_id == job_id) else {
            return Ok(());
        };
        if stored.granted == granted {
            return Ok(());
        }
        stored.granted = granted.to_vec();
        self.write(&sessions)
    }

    /// The session `job_id` worked in, as every record naming it: the job's own, and those
    /// of runs that carried it on (a follow-up that loaded it stores the same engine's same
    /// session id). Empty when none is stored. Unlike [`Sessions::find`], a file that cannot
    /// be read is an error: deleting must never take "unreadable" for "nothing there".
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn sharing(&self, job_id: &JobId) -> Result<Vec<StoredSession>> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let sessions = self.read()?;
        let Some(own) = sessions.iter().find(|known| &known.job_id == job_id) else {
            return Ok(Vec::new());
        };
        let same = |known: &&StoredSession| {
            known.engine == own.engine && known.session_id == own.session_id
        };
        Ok(sessions.iter().filter(same).cloned().collect())
    }

    /// Removes `records` (each its job's, while it still names the same session): no run
    /// finds them again. Returns how many were removed.
    ///
    /// # Errors
    /// When the file cannot be read or written; then nothing was removed.
    pub fn forget(&self, records: &[StoredSession]) -> Result<usize> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sessions = self.read()?;
        let before = sessions.len();
        sessions.retain(|known| {
            !records.iter().any(|gone| {
                gone.job_id == known.job_id
                    && gone.engine == known.engine
                    && gone.session_id == known.session_id
            })
        });
        let removed = before - sessions.len();
        if removed > 0 {
            self.write(&sessions)?;
        }
        Ok(removed)
    }

    /// Puts back `records` removed by [`Sessions::forget`] (a deletion that failed), except
    /// for a job that stored another session meanwhile.
    ///
    /// # Errors
    /// When the file cannot be read or written.
    pub fn restore(&self, records: &[StoredSession]) -> Result<()> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sessions = self.read()?;
        let mut changed = false;
        for record in records {
            if !sessions.iter().any(|known| known.job_id == record.job_id) {
                sessions.push_back(record.clone());
                changed = true;
            }
        }
        if changed {
            self.write(&sessions)?;
        }
        Ok(())
    }

    fn write(&self, sessions: &VecDeque<StoredSession>) -> Result<()> {
        let bytes = serde_json::to_vec(sessions)?;
        write_atomic(&self.path, &bytes)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// The session stored for `job_id`, if any. A file that cannot be read is no session.
    pub fn find(&self, job_id: &JobId) -> Option<StoredSession> {
        let _guard = FILE_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        match self.read() {
            Ok(sessions) => sessions.into_iter().find(|known| &known.job_id == job_id),
            Err(err) => {
                tracing::warn!("stored ACP sessions unreadable: {err:#}");
                None
            }
        }
    }

    /// Every stored session, oldest first; entries that do not parse are left out (and gone
    /// at the next write), a file that does not parse at all is empty.
    fn read(&self) -> Result<VecDeque<StoredSession>> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(VecDeque::new()),
            Err(err) => {
                return Err(err).with_context(|| format!("cannot read {}", self.path.display()))
            }
        };
        let entries: Vec<serde_json::Value> = match serde_json::from_slice(&bytes) {
            Ok(entries) => entries,
            Err(err) => {
                tracing::warn!("{SESSIONS_FILE} is unreadable, starting afresh: {err}");
                Vec::new()
            }
        };
        Ok(entries
            .into_iter()
            .filter_map(|entry| serde_json::from_value(entry).ok())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(job: &str, engine: &str) -> StoredSession {
        StoredSession {
            job_id: JobId::parse(job).unwrap_or_else(|err| panic!("{err}")),
            engine: engine.to_owned(),
            session_id: format!("session-of-{job}"),
            folder: "work".to_owned(),
            cwd: PathBuf::from("/work"),
            at: Utc::now(),
            granted: Vec::new(),
        }
    }

    fn id(job: &str) -> JobId {
        JobId::parse(job).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn sessions_are_found_by_job_and_replaced() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let sessions = Sessions::in_dir(tmp.path());
        assert_eq!(sessions.find(&id("job1")), None);
        sessions.remember(session("job1", "claude"))?;
        sessions.remember(session("job2", "codex"))?;
        let mut again = session("job1", "claude");
        again.session_id = "newer".to_owned();
        sessions.remember(again.clone())?;
        assert_eq!(sessions.find(&id("job1")), Some(again));
        assert_eq!(
            sessions.find(&id("job2")).map(|found| found.engine),
            Some("codex".to_owned())
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(tmp.path().join(SESSIONS_FILE))?
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        Ok(())
    }

    #[test]
    fn the_folders_a_run_was_allowed_are_kept_with_its_session() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let sessions = Sessions::in_dir(tmp.path());
        let granted = [PathBuf::from("/srv/other"), PathBuf::from("/srv/more")];
        // No session stored: nothing to keep them with.
        sessions.keep_granted(&id("job1"), &granted)?;
        assert_eq!(sessions.find(&id("job1")), None);
        sessions.remember(session("job1", "claude"))?;
        sessions.remember(session("job2", "claude"))?;
        sessions.keep_granted(&id("job1"), &granted)?;
        assert_eq!(
            sessions.find(&id("job1")).map(|found| found.granted),
            Some(granted.to_vec())
        );
        assert_eq!(
            sessions.find(&id("job2")).map(|found| found.granted),
            Some(Vec::new())
        );
        // A file written before grants were kept reads as none granted.
        let path = tmp.path().join(SESSIONS_FILE);
        let mut old = serde_json::to_value(session("job3", "claude"))?;
        if let Some(entry) = old.as_object_mut() {
            entry.remove("granted");
        }
        fs::write(&path, serde_json::to_vec(&serde_json::json!([old]))?)?;
        assert_eq!(
            sessions.find(&id("job3")).map(|found| found.granted),
            Some(Vec::new())
        );
        Ok(())
    }

    #[test]
    fn a_session_is_forgotten_with_every_run_that_carried_it_on() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let sessions = Sessions::in_dir(tmp.path());
        assert!(sessions.sharing(&id("job1"))?.is_empty());
        let first = session("job1", "claude");
        // A follow-up that loaded it stores the same session; another job has its own.
        let follow_up = StoredSession {
            job_id: id("job2"),
            ..first.clone()
        };
        let other = session("job3", "claude");
        // Another engine's session of the same id is that engine's.
        let elsewhere = StoredSession {
            job_id: id("job4"),
            engine: "codex".to_owned(),
            ..first.clone()
        };
        for stored in [&first, &follow_up, &other, &elsewhere] {
            sessions.remember(stored.clone())?;
        }
        let shared = sessions.sharing(&id("job2"))?;
        assert_eq!(shared, [first.clone(), follow_up.clone()]);
        assert_eq!(sessions.forget(&shared)?, 2);
        assert_eq!(sessions.find(&id("job1")), None);
        assert_eq!(sessions.find(&id("job2")), None);
        assert!(sessions.find(&id("job3")).is_some() && sessions.find(&id("job4")).is_some());
        assert_eq!(sessions.forget(&shared)?, 0);
        // Put back, except where the job stored another session meanwhile.
        let newer = StoredSession {
            session_id: "newer".to_owned(),
            ..follow_up.clone()
        };
        sessions.remember(newer.clone())?;
        sessions.restore(&shared)?;
        assert_eq!(sessions.find(&id("job1")), Some(first));
        assert_eq!(sessions.find(&id("job2")), Some(newer));
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn an_unreadable_file_is_an_error_when_deleting() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let sessions = Sessions::in_dir(tmp.path());
        // A folder where the file should be: it cannot be read.
        fs::create_dir(tmp.path().join(SESSIONS_FILE))?;
        assert!(sessions.sharing(&id("job1")).is_err());
        assert!(sessions.forget(&[session("job1", "claude")]).is_err());
        Ok(())
    }

    #[test]
    fn the_oldest_go_first() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let sessions = Sessions::in_dir(tmp.path());
        for job in ["job1", "job2", "job3", "job4"] {
            sessions.remember_within(session(job, "claude"), 3)?;
        }
        let kept: Vec<bool> = ["job1", "job2", "job3", "job4"]
            .iter()
            .map(|job| sessions.find(&id(job)).is_some())
            .collect();
        assert_eq!(kept, [false, true, true, true]);
        Ok(())
    }

    #[test]
    fn a_corrupt_file_costs_only_what_it_held() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let sessions = Sessions::in_dir(tmp.path());
        let path = tmp.path().join(SESSIONS_FILE);
        fs::write(&path, b"{not json")?;
        assert_eq!(sessions.find(&id("job1")), None);
        sessions.remember(session("job1", "claude"))?;
        assert!(sessions.find(&id("job1")).is_some());
        // One bad entry among good ones leaves the others readable.
        let good = serde_json::to_value(session("job2", "claude"))?;
        fs::write(
            &path,
            serde_json::to_vec(&serde_json::json!([{"jobId": "x y"}, 7, good]))?,
        )?;
        assert!(sessions.find(&id("job2")).is_some());
        Ok(())
    }
}
