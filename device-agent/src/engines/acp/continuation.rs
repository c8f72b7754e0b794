//! How a run opens its ACP session, decided before the agent starts.
//!
//! A plain run starts a new session with the job's prompt. Two kinds of run may instead
//! carry on a conversation the agent already had, through `session/load`, when this computer
//! stored that session for the same engine and folder ([`Sessions`]) and the agent's
//! `initialize` answer advertises `loadSession`:
//!
//! - a **follow-up** (`ClaimedJob.continues`) loads the earlier job's session and prompts
//!   the follow-up's request; without it, a new session gets the request prefaced with the
//!   earlier request and how that run ended (each cut to [`EARLIER_TEXT_CHARS`]);
//! - a **carry-on** after a restart (`ClaimedJob.resumed`) loads the job's own session and
//!   tells the agent why it stopped; without it, the run starts over as any run of that job
//!   would.
//!
//! The history an agent replays while loading is not output ([`super::client::Session`]).
//!
//! Either kind also starts with the folders the owner allowed the earlier run to change
//! ([`inherited`]), as this computer stored them beside that run's session, for the same
//! shared folder only: what the server says about the earlier run never grants anything.

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::SessionId;
use chrono::Utc;
use tether_protocol::jobs::{ClaimedJob, EarlierRun, Outcome};
use tether_protocol::JobId;

use super::updates::cut_chars;
use crate::local::sessions::{Sessions, StoredSession};

/// Most characters of the earlier request, and of how it ended, a new session is told.
pub const EARLIER_TEXT_CHARS: usize = 2000;

/// The job's output when a follow-up loads the earlier session.
pub const CONTINUING: &str = "Continuing the agent's earlier session";
/// The job's output when a follow-up starts a new session instead.
pub const SUMMARISED: &str = "Starting a new session with a summary of the earlier run";
/// The job's output when a carry-on loads the session it lost.
pub const CARRYING_ON: &str = "Continuing the agent's session from before the restart";
/// The job's output when a carry-on that had a session starts a new one instead.
pub const STARTING_OVER: &str = "Starting the task again in a new session";

/// A stored session to load, and what to prompt once it is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub session_id: String,
    pub prompt: String,
    /// What the job's output says once it is loaded.
    pub note: &'static str,
}

/// How a run opens its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    /// Tried first, when the agent advertises `loadSession`.
    pub load: Option<Load>,
    /// The prompt of a new session, when nothing is loaded.
    pub prompt: String,
    /// What the job's output says when a new session starts; nothing for a plain run.
    pub note: Option<&'static str>,
}

/// Where a run works: what a stored session must match to be loaded, and what the run's
/// own session is stored under.
#[derive(Debug, Clone)]
pub struct Place {
    pub job_id: JobId,
    pub engine: String,
    pub folder: String,
    /// The folder's canonical path, the session's `cwd`.
    pub cwd: PathBuf,
}

impl Place {
    fn admits(&self, stored: &StoredSession) -> bool {
        stored.engine == self.engine && self.same_folder(stored)
    }

    /// A grant is the owner's for the folder's runs, whichever engine worked in it.
    fn same_folder(&self, stored: &StoredSession) -> bool {
        stored.folder == self.folder && stored.cwd == self.cwd
    }
}

/// The sessions this run may load and the one it makes, in the data dir's sessions file.
#[derive(Debug, Clone)]
pub struct Recall {
    sessions: Sessions,
    place: Place,
}

impl Recall {
    pub fn new(data_dir: &Path, place: Place) -> Recall {
        Recall {
            sessions: Sessions::in_dir(data_dir),
            place,
        }
    }

    /// How `job` opens its session, from what is stored.
    pub fn opening(&self, job: &ClaimedJob) -> Opening {
        opening(job, &self.place, |job_id| self.sessions.find(job_id))
    }

    /// The folders `job` starts allowed to change, from what is stored.
    pub fn inherited(&self, job: &ClaimedJob) -> Vec<PathBuf> {
        inherited(job, &self.place, |job_id| self.sessions.find(job_id))
    }

    /// Stores the run's session (new or loaded) with the folders it may change so far, so a
    /// follow-up or a carry-on can load it.
    pub fn remember(&self, session_id: &SessionId, granted: Vec<PathBuf>) {
        let stored = StoredSession {
            job_id: self.place.job_id.clone(),
            engine: self.place.engine.clone(),
            session_id: session_id.0.to_string(),
            folder: self.place.folder.clone(),
            cwd: self.place.cwd.clone(),
            at: Utc::now(),
            granted,
        };
        if let Err(err) = self.sessions.remember(stored) {
            tracing::warn!(job = %self.place.job_id, "the run's ACP session is not stored: {err:#}");
        }
    }

    /// Stores the folders the run may change, beside its session.
    pub fn keep_granted(&self, granted: &[PathBuf]) {
        if let Err(err) = self.sessions.keep_granted(&self.place.job_id, granted) {
            tracing::warn!(job = %self.place.job_id, "the run's allowed folders are not stored: {err:#}");
        }
    }
}

/// The folders `job` at `place` starts allowed to change: those of the run it continues,
/// and for a carry-on its own run's, when stored for the same shared folder.
pub fn inherited(
    job: &ClaimedJob,
    place: &Place,
    stored: impl Fn(&JobId) -> Option<StoredSession>,
) -> Vec<PathBuf> {
    let earlier = job.continues.as_ref().map(|earlier| &earlier.job_id);
    let own = job.resumed.map(|_| &job.id);
    let mut folders: Vec<PathBuf> = Vec::new();
    for job_id in earlier.into_iter().chain(own) {
        let Some(session) = stored(job_id).filter(|session| place.same_folder(session)) else {
            continue;
        };
        for folder in session.granted {
            if folder.is_absolute() && !folders.contains(&folder) {
                folders.push(folder);
            }
        }
    }
    folders
}

/// How `job` opens its session at `place`; `stored` gives a job's stored session.
pub fn opening(
    job: &ClaimedJob,
    place: &Place,
    stored: impl Fn(&JobId) -> Option<StoredSession>,
) -> Opening {
    let matching = |job_id: &JobId| stored(job_id).filter(|session| place.admits(session));
    let fresh = match &job.continues {
        None => Opening {
            load: None,
            prompt: job.spec.prompt.clone(),
            note: None,
        },
        Some(earlier) => Opening {
            load: matching(&earlier.job_id).map(|session| Load {
                session_id: session.session_id,
                prompt: job.spec.prompt.clone(),
                note: CONTINUING,
            }),
            prompt: prefaced(earlier, &job.spec.prompt),
            note: Some(SUMMARISED),
        },
    };
    let Some(carry_on) = job.resumed else {
        return fresh;
    };
    let Some(own) = matching(&job.id) else {
        return fresh;
    };
    Opening {
        load: Some(Load {
            session_id: own.session_id,
            prompt: carry_on_prompt(carry_on, &job.spec.prompt),
            note: CARRYING_ON,
        }),
        prompt: fresh.prompt,
        note: fresh.note.or(Some(STARTING_OVER)),
    }
}

/// What a loaded session is told after a restart cut its turn short.
fn carry_on_prompt(carry_on: u32, prompt: &str) -> String {
    format!(
        "Tether restarted on this computer while you were working (carry-on {carry_on}). \
         Continue the task where you left off; the original request was:\n{}",
        cut_chars(prompt, EARLIER_TEXT_CHARS)
    )
}

/// A follow-up's request for a new session: the earlier request and how it ended, marked as
/// such and bounded, then the request itself.
fn prefaced(earlier: &EarlierRun, prompt: &str) -> String {
    let ended = match earlier.outcome {
        Some(outcome) => format!("how it ended: {}", outcome_word(outcome)),
        None => "how it ended".to_owned(),
    };
    let summary = match earlier.summary.trim() {
        "" => "(no summary)".to_owned(),
        summary => cut_chars(summary, EARLIER_TEXT_CHARS),
    };
    format!(
        "This is a follow-up of an earlier job in this folder. Its session could not be \
         continued, so here is what it was asked and how it ended.\n\
         --- earlier request ---\n{}\n\
         --- {ended} ---\n{summary}\n\
         --- follow-up request ---\n{prompt}",
        cut_chars(earlier.prompt.trim(), EARLIER_TEXT_CHARS)
    )
}

fn outcome_word(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded => "succeeded",
        Outcome::Failed => "failed",
        Outcome::Blocked => "blocked",
        Outcome::Cancelled => "cancelled",
        Outcome::Interrupted => "interrupted",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::grant::tests::claimed_job;

    fn id(text: &str) -> JobId {
        JobId::parse(text).unwrap_or_else(|err| panic!("{err}"))
    }

    fn place() -> Place {
        Place {
            job_id: id("job1"),
            engine: "claude".to_owned(),
            folder: "work".to_owned(),
            cwd: PathBuf::from("/home/me/work"),
        }
    }

    fn stored(job: &str, session: &str) -> StoredSession {
        StoredSession {
            job_id: id(job),
            engine: "claude".to_owned(),
            session_id: session.to_owned(),
            folder: "work".to_owned(),
            cwd: PathBuf::from("/home/me/work"),
            at: Utc::now(),
            granted: Vec::new(),
        }
    }

    #[test]
    fn a_follow_up_starts_with_the_folders_allowed_its_earlier_run_in_the_same_folder() {
        let granted = |job: &str, folders: &[&str]| StoredSession {
            granted: folders.iter().map(PathBuf::from).collect(),
            ..stored(job, "s")
        };
        let check = |job: &ClaimedJob, known: &[StoredSession]| {
            inherited(job, &place(), |job_id| {
                known.iter().find(|s| &s.job_id == job_id).cloned()
            })
        };
        let earlier = granted("earlier", &["/srv/other", "relative"]);
        let paths = |folders: &[&str]| folders.iter().map(PathBuf::from).collect::<Vec<_>>();
        // A plain run inherits nothing, whatever is stored.
        assert!(check(&claimed_job("p", 5), std::slice::from_ref(&earlier)).is_empty());
        assert_eq!(
            check(&follow_up("p"), std::slice::from_ref(&earlier)),
            paths(&["/srv/other"])
        );
        // Another engine in the same folder: the grant was the owner's for the folder.
        let other_engine = StoredSession {
            engine: "codex".to_owned(),
            ..earlier.clone()
        };
        assert_eq!(
            check(&follow_up("p"), &[other_engine]),
            paths(&["/srv/other"])
        );
        // Another shared folder (or the same label elsewhere): nothing.
        let elsewhere = StoredSession {
            cwd: PathBuf::from("/home/me/elsewhere"),
            ..earlier.clone()
        };
        assert!(check(&follow_up("p"), &[elsewhere]).is_empty());
        let relabelled = StoredSession {
            folder: "other".to_owned(),
            ..earlier.clone()
        };
        assert!(check(&follow_up("p"), &[relabelled]).is_empty());
        // A carry-on of a follow-up keeps its own run's grants as well.
        let mut carry_on = follow_up("p");
        carry_on.resumed = Some(1);
        let own = granted("job1", &["/srv/more", "/srv/other"]);
        assert_eq!(
            check(&carry_on, &[earlier, own]),
            paths(&["/srv/other", "/srv/more"])
        );
    }

    fn follow_up(prompt: &str) -> ClaimedJob {
        let mut job = claimed_job(prompt, 5);
        job.continues = Some(EarlierRun {
            job_id: id("earlier"),
            prompt: "fix the parser".to_owned(),
            summary: "The parser accepts trailing commas.".to_owned(),
            outcome: Some(Outcome::Succeeded),
        });
        job
    }

    /// The opening of `job` with `known` the sessions stored.
    fn check(job: &ClaimedJob, known: &[StoredSession]) -> Opening {
        opening(job, &place(), |job_id| {
            known.iter().find(|s| &s.job_id == job_id).cloned()
        })
    }

    const PREFACED: &str = "This is a follow-up of an earlier job in this folder. Its session \
        could not be continued, so here is what it was asked and how it ended.\n\
        --- earlier request ---\nfix the parser\n\
        --- how it ended: succeeded ---\nThe parser accepts trailing commas.\n\
        --- follow-up request ---\nnow the lexer";

    #[test]
    fn a_plain_run_starts_a_new_session_with_its_prompt() {
        let job = claimed_job("fix the tests", 5);
        let expected = Opening {
            load: None,
            prompt: "fix the tests".to_owned(),
            note: None,
        };
        assert_eq!(check(&job, &[stored("job1", "s1")]), expected);
    }

    #[test]
    fn a_follow_up_loads_the_earlier_session_else_summarises_it() {
        let job = follow_up("now the lexer");
        assert_eq!(
            check(&job, &[stored("earlier", "s-earlier")]),
            Opening {
                load: Some(Load {
                    session_id: "s-earlier".to_owned(),
                    prompt: "now the lexer".to_owned(),
                    note: CONTINUING,
                }),
                prompt: PREFACED.to_owned(),
                note: Some(SUMMARISED),
            }
        );
        let summarised = Opening {
            load: None,
            prompt: PREFACED.to_owned(),
            note: Some(SUMMARISED),
        };
        assert_eq!(check(&job, &[]), summarised);
        // A session of another engine, folder or path is not this run's to load.
        let mut other_engine = stored("earlier", "s");
        other_engine.engine = "codex".to_owned();
        let mut other_folder = stored("earlier", "s");
        other_folder.folder = "other".to_owned();
        let mut moved = stored("earlier", "s");
        moved.cwd = PathBuf::from("/elsewhere");
        for session in [other_engine, other_folder, moved] {
            assert_eq!(check(&job, &[session]), summarised);
        }
    }

    #[test]
    fn the_preface_is_bounded() {
        let mut job = follow_up("next");
        if let Some(earlier) = job.continues.as_mut() {
            earlier.prompt = "p".repeat(4000);
            earlier.summary = "s".repeat(4000);
            earlier.outcome = None;
        }
        let prompt = check(&job, &[]).prompt;
        assert!(prompt.contains(&format!("\n{}…\n", "p".repeat(EARLIER_TEXT_CHARS))));
        assert!(prompt.contains(&format!(
            "--- how it ended ---\n{}…\n",
            "s".repeat(EARLIER_TEXT_CHARS)
        )));
        assert!(prompt.ends_with("--- follow-up request ---\nnext"));
        assert!(prompt.chars().count() < 2 * EARLIER_TEXT_CHARS + 400);
    }

    #[test]
    fn a_carry_on_loads_its_own_session_else_starts_over() {
        let mut job = claimed_job("fix the tests", 5);
        job.resumed = Some(1);
        let carried_on = check(&job, &[stored("job1", "s-own")]);
        assert_eq!(
            carried_on,
            Opening {
                load: Some(Load {
                    session_id: "s-own".to_owned(),
                    prompt: "Tether restarted on this computer while you were working \
                             (carry-on 1). Continue the task where you left off; the \
                             original request was:\nfix the tests"
                        .to_owned(),
                    note: CARRYING_ON,
                }),
                prompt: "fix the tests".to_owned(),
                note: Some(STARTING_OVER),
            }
        );
        // Lost before the agent named a session: the run starts over, as it always did.
        assert_eq!(
            check(&job, &[]),
            check(&claimed_job("fix the tests", 5), &[])
        );
    }

    #[test]
    fn a_carried_on_follow_up_prefers_its_own_session() {
        let mut job = follow_up("now the lexer");
        job.resumed = Some(2);
        let both = [stored("job1", "s-own"), stored("earlier", "s-earlier")];
        let opened = check(&job, &both);
        assert_eq!(
            opened.load.map(|load| (load.session_id, load.note)),
            Some(("s-own".to_owned(), CARRYING_ON))
        );
        assert_eq!(
            (opened.prompt.as_str(), opened.note),
            (PREFACED, Some(SUMMARISED))
        );
        // Without its own, it continues the earlier one like any follow-up.
        let opened = check(&job, &both[1..]);
        assert_eq!(
            opened.load.map(|load| (load.session_id, load.prompt)),
            Some(("s-earlier".to_owned(), "now the lexer".to_owned()))
        );
    }

    #[test]
    fn the_runs_session_is_stored_for_its_job() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let recall = Recall::new(tmp.path(), place());
        recall.remember(&SessionId::new("s-new"), Vec::new());
        let found = Sessions::in_dir(tmp.path()).find(&id("job1"));
        assert_eq!(
            found.map(|s| (s.session_id, s.engine, s.folder)),
            Some(("s-new".to_owned(), "claude".to_owned(), "work".to_owned()))
        );
        let mut job = claimed_job("again", 5);
        job.resumed = Some(1);
        assert_eq!(
            recall.opening(&job).load.map(|load| load.session_id),
            Some("s-new".to_owned())
        );
    }
}
