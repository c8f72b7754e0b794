//! Settling the runs an earlier agent process left in the journal (seed 003 §3).
//!
//! When `run` starts, every record in the journal belongs to an agent process that is gone
//! (a crash, `kill -9`, a power cut, Ctrl-C, an upgrade): `run` holds the data dir's lock, so
//! no other agent writes there. Each record is settled exactly one way:
//!
//! | the record says | what happens |
//! |---|---|
//! | ended or finished, completion not acknowledged | the completion is sent again under its lease (complete is idempotent); if that lease is stale, the run is reattached (`/reattach`, same attempt) and then completed. A run that only ended (its process done, its output, evidence or delivery not) is reported as journaled and never run again: [`RunRecord::completion`] |
//! | claimed or running, not finished | the run was cut off by the restart: whatever is left of its process group is stopped (its output pipe and exit status died with the old agent, so nobody can supervise it), then it is carried on (`/resume`): a new attempt in the same folder, started from the beginning with `TETHER_RESUMED=n` (an ACP agent that can load its stored session carries on in it: [`crate::engines::acp::continuation`]) |
//!
//! The server has the last word: a 409 (`stale_lease`, `resume_refused`) or 404 drops the
//! record, and nothing runs. A run is never both reattached and resumed, and never resumed
//! twice: the record is replaced by the new attempt's record the moment it is granted.
//! Runs the agent kept supervising through a network outage are not settled here but by
//! their own lease ([`crate::run::lease::RunLease::recover`]).

use std::time::Duration;

use tether_protocol::jobs::{ClaimedJob, CompleteParams};

use crate::local::journal::{process_still_runs, Journal, ProcessMark, RunRecord};
use crate::remote::client::{DeviceClient, RemoteError};
use crate::run::process_group::{self, Signal, TERMINATE_GRACE};

/// What to do with a leftover record.
#[derive(Debug, Clone)]
pub enum Plan {
    /// Report the completion it recorded.
    Report(Box<CompleteParams>),
    /// Carry it on as a new attempt, after stopping what is left of its process group.
    Resume { leftover: Option<ProcessMark> },
}

/// How settling one record ended.
#[derive(Debug)]
pub enum Settled {
    /// Nothing more to do for it; its record is removed.
    Done,
    /// Run this new attempt (its record replaces the old one when it starts); boxed, as a
    /// job is many times the size of the other variants.
    Resumed(Box<ClaimedJob>),
    /// The server could not be reached (or asked to slow down): try again after this.
    Later(Duration),
    /// The device was revoked.
    Revoked,
}

/// The plan for one record. `group_left` says whether a process group is still there.
pub fn plan(record: &RunRecord, group_left: impl Fn(&ProcessMark) -> bool) -> Plan {
    if let Some(completion) = record.completion() {
        return Plan::Report(Box::new(completion));
    }
    Plan::Resume {
        leftover: record.process.filter(|mark| group_left(mark)),
    }
}

/// Whether the run's process group is still there and certainly the run's: its leader runs
/// (same start time), or the leader is gone but members of its group live on (a group id
/// is not reused while the group exists, and no other process holds the leader's pid).
pub fn group_left(mark: &ProcessMark) -> bool {
    if process_still_runs(mark) {
        return true;
    }
    let pid_in_use = std::path::Path::new(&format!("/proc/{}", mark.pid)).exists();
    !pid_in_use && process_group::group_alive(mark.pid)
}

/// Settles one leftover record with the server. Removes the record when it is done (but
/// not when resumed: the caller's new run replaces it).
pub async fn settle(client: &DeviceClient, journal: &Journal, record: &RunRecord) -> Settled {
    let settled = match plan(record, group_left) {
        Plan::Report(completion) => report(client, journal, record, &completion).await,
        Plan::Resume { leftover } => {
            if let Some(mark) = leftover {
                tracing::warn!(job = %record.job_id, pid = mark.pid, "stopping what is left of a run the previous agent process could no longer supervise");
                stop_group(mark.pid).await;
            }
            resume(client, record).await
        }
    };
    if matches!(settled, Settled::Done) {
        if let Err(err) = journal.remove(&record.job_id) {
            tracing::error!(job = %record.job_id, "cannot remove a settled run record: {err:#}");
        }
    }
    settled
}

async fn report(
    client: &DeviceClient,
    journal: &Journal,
    record: &RunRecord,
    completion: &CompleteParams,
) -> Settled {
    let job_id = &record.job_id;
    match client
        .complete(job_id, &record.lease_token, completion)
        .await
    {
        Ok(()) => {
            tracing::info!(job = %job_id, "reported a completion the previous agent process could not");
            return Settled::Done;
        }
        Err(RemoteError::StaleLease) => {}
        Err(err) => return refused_or_later(record, err),
    }
    // The lease ran out while the agent was away: take the run back, then report.
    let grant = match client
        .reattach(job_id, record.attempt, &record.lease_token)
        .await
    {
        Ok(grant) => grant,
        Err(err) => return refused_or_later(record, err),
    };
    tracing::info!(job = %job_id, attempt = record.attempt, "reattached a finished run");
    if let Err(err) = journal.update(job_id, |record| {
        record.lease_token = grant.lease_token.clone()
    }) {
        tracing::error!(job = %job_id, "cannot journal the new lease: {err:#}");
    }
    match client
        .complete(job_id, &grant.lease_token, completion)
        .await
    {
        Ok(()) => Settled::Done,
        Err(err) => refused_or_later(record, err),
    }
}

async fn resume(client: &DeviceClient, record: &RunRecord) -> Settled {
    match client.resume(&record.job_id, record.attempt).await {
        Ok(job) => {
            tracing::info!(job = %job.id, attempt = job.attempt, resumed = ?job.resumed, "carrying on a run lost to a restart");
            Settled::Resumed(Box::new(job))
        }
        Err(err) => refused_or_later(record, err),
    }
}

/// A transient failure waits; a revocation ends everything; any other answer is the
/// server's final word on this run, and the record goes.
fn refused_or_later(record: &RunRecord, err: RemoteError) -> Settled {
    match err {
        RemoteError::Revoked => Settled::Revoked,
        err if err.is_transient() => {
            tracing::warn!(job = %record.job_id, "cannot settle this run yet: {err}");
            Settled::Later(err.retry_after())
        }
        err => {
            tracing::warn!(job = %record.job_id, attempt = record.attempt, "the server will not carry this run on: {err}");
            Settled::Done
        }
    }
}

/// SIGTERM to the group, a grace, then SIGKILL to whatever is left.
async fn stop_group(pgid: u32) {
    let _ = process_group::signal_group(pgid, Signal::Terminate);
    let deadline = tokio::time::Instant::now() + TERMINATE_GRACE;
    while process_group::group_alive(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = process_group::signal_group(pgid, Signal::Kill);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::journal::{DeliveryStage, RunState};
    use tether_protocol::jobs::{JobSpec, Mode, Outcome};
    use tether_protocol::{JobId, LeaseToken};

    fn record(state: RunState, process: Option<ProcessMark>) -> RunRecord {
        let job = ClaimedJob {
            id: JobId::generate(),
            attempt: 1,
            lease_token: LeaseToken::parse("l").unwrap_or_else(|err| panic!("{err}")),
            lease_expires_at: chrono::Utc::now(),
            spec: JobSpec {
                title: "t".into(),
                prompt: "p".into(),
                folder: "work".into(),
                engine: "e".into(),
                mode: Mode::Unattended,
                network: false,
                timeout_minutes: 1,
                secrets: Vec::new(),
                git: None,
                attachments: Vec::new(),
                links: Vec::new(),
            },
            resumed: None,
            continues: None,
            context: None,
        };
        RunRecord {
            state,
            process,
            ..RunRecord::claimed(&job)
        }
    }

    #[test]
    fn each_record_is_settled_exactly_one_way() {
        let mark = ProcessMark {
            pid: 4242,
            start_ticks: Some(1),
        };
        let alive = |_: &ProcessMark| true;
        let gone = |_: &ProcessMark| false;
        let finished = RunState::Finished {
            outcome: Outcome::Failed,
            summary: "exit code 2".into(),
            exit_code: Some(2),
            report: None,
            observed: None,
            changes: None,
            delivery: None,
        };
        // Ended or finished: report, whatever its process; never run again.
        let plan_of = |state: RunState, process, group: &dyn Fn(&ProcessMark) -> bool| {
            plan(&record(state, process), group)
        };
        assert!(matches!(
            plan_of(finished.clone(), Some(mark), &alive),
            Plan::Report(completion) if matches!(*completion, CompleteParams {
                outcome: Outcome::Failed,
                exit_code: Some(2),
                ..
            })
        ));
        let ended = RunState::Ended {
            outcome: Outcome::Succeeded,
            summary: "exit code 0".into(),
            exit_code: Some(0),
            report: None,
            observed: None,
            delivery: DeliveryStage::NotAsked,
        };
        assert!(matches!(
            plan_of(ended, Some(mark), &alive),
            Plan::Report(completion) if matches!(*completion, CompleteParams {
                outcome: Outcome::Succeeded,
                exit_code: Some(0),
                ..
            })
        ));
        // Cut off by the restart: resume; stop the leftover group first if there is one.
        assert!(matches!(
            plan_of(RunState::Running, Some(mark), &alive),
            Plan::Resume { leftover: Some(left) } if left == mark
        ));
        assert!(matches!(
            plan_of(RunState::Running, Some(mark), &gone),
            Plan::Resume { leftover: None }
        ));
        assert!(matches!(
            plan_of(RunState::Starting, None, &alive),
            Plan::Resume { leftover: None }
        ));
    }

    #[tokio::test]
    async fn a_leftover_group_is_found_and_stopped() -> anyhow::Result<()> {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 30 & wait"])
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        let mark = crate::local::journal::mark_process(pid);
        assert!(group_left(&mark));
        let wrong = ProcessMark {
            pid,
            start_ticks: mark.start_ticks.map(|ticks| ticks + 7),
        };
        assert!(!group_left(&wrong), "a reused pid is not the run");
        stop_group(pid).await;
        let _ = child.wait().await;
        // The killed `sleep` is reaped by whoever inherited it, a moment later.
        for _ in 0..50 {
            if !process_group::group_alive(pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!process_group::group_alive(pid));
        Ok(())
    }
}
