//! Asking the owner and waiting for the answer (DESIGN §7): the run's side of the policy's
//! [`Ask`], and the [`Gate`] of a claimed job built with it ([`gate`]).
//!
//! A run's [`Asker`] creates the decision on the server (`POST …/jobs/{id}/ask` under the
//! run's lease), writes it to `decisions/pending/<id>.json` in the data dir so the owner can
//! answer on the computer ([`LocalDecisions`]), and waits for the first of:
//!
//! - a `decision.answered` frame for that id (routed here by the daemon through the
//!   [`DecisionHub`]), followed by `GET /api/devices/self/decisions/{id}`;
//! - the same `GET` every [`Timings::poll`] (the fallback when the event stream is down);
//! - a local answer, `decisions/answers/<id>.json`, written by `tether-agent decisions
//!   allow|deny` (checked every [`Timings::local_poll`]), which closes the decision on the
//!   server as `answered_locally`;
//! - the run's stop (cancel, lease lost, shutdown): closed `withdrawn`;
//! - the expiry: closed `expired`;
//! - the wait abandoned (the agent withdrew its permission request, the turn timed out, the
//!   run ended while the question was open): closed `withdrawn` in the background.
//!
//! Whichever it is, the decision's files in the data dir go with it (a drop guard).
//!
//! **Architecture Invariant:** only an answer counts as an allow. A web answer counts only
//! when it is for this decision, carries the same action hash, and the owner accepts web
//! answers (`approvals on`); a timeout, a withdrawn or expired decision, or any error is a
//! refusal.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use tether_protocol::decisions::{
    Answer, AskRequest, CloseReason, CloseRequest, DecisionState, DeviceDecision, Scope,
    MAX_QUESTION_CHARS,
};
use tether_protocol::jobs::ClaimedJob;
use tether_protocol::{DecisionId, JobId};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::local::decisions::{LocalDecisions, PendingDecision};
use crate::local::state::{Config, DataDir};
use crate::policy::asking::{AnsweredOn, Ask, Outcome, Question};
use crate::policy::gate::Gate;
use crate::policy::guard::Guard;
use crate::policy::{zones, RunPolicy, RunSettings};
use crate::remote::backoff::Backoff;
use crate::remote::client::{DeviceClient, RemoteError};
use crate::run::lease::{Recovery, RunLease};
use crate::run::progress::Flusher;
use crate::run::stop::{RunStop, StopReason};
use crate::sandbox;

/// How long a decision stays open by default (`TETHER_DECISION_SECS` overrides it).
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(600);
/// How often the server is asked where a decision is, frame or not.
pub const POLL_EVERY: Duration = Duration::from_secs(5);
/// How often the data dir is checked for an answer given on the computer.
pub const LOCAL_POLL_EVERY: Duration = Duration::from_millis(250);

/// How long to wait and how often to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// Past this, the decision expires and the action is not taken.
    pub expires: Duration,
    /// Between two reads of the decision on the server.
    pub poll: Duration,
    /// Between two looks for a local answer.
    pub local_poll: Duration,
}

impl Timings {
    /// The defaults, with the expiry from `TETHER_DECISION_SECS` when set (tests shorten it).
    pub fn from_env() -> Timings {
        let expires = std::env::var("TETHER_DECISION_SECS")
            .ok()
            .and_then(|secs| secs.trim().parse::<u64>().ok())
            .filter(|secs| *secs > 0)
            .map_or(DEFAULT_EXPIRY, Duration::from_secs);
        Timings {
            expires,
            poll: POLL_EVERY,
            local_poll: LOCAL_POLL_EVERY,
        }
    }
}

/// Routes `decision.answered` frames to the run waiting on that decision, and knows where
/// local answers live. One per agent process.
#[derive(Debug)]
pub struct DecisionHub {
    /// Where pending decisions and local answers are written; `None` when there is no data
    /// dir (then only the web can answer).
    local: Option<LocalDecisions>,
    /// Decisions waited on, each with the notify its waiter listens to. A std mutex: held
    /// only to insert, remove or clone.
    waiting: Mutex<HashMap<DecisionId, Arc<Notify>>>,
}

impl DecisionHub {
    pub fn new(data_dir: Option<DataDir>) -> Arc<DecisionHub> {
        Arc::new(DecisionHub {
            local: data_dir.map(LocalDecisions::new),
            waiting: Mutex::new(HashMap::new()),
        })
    }

    /// A `decision.answered` frame: wake whoever waits on it (nobody, if it is not ours).
    pub fn answered(&self, decision_id: &DecisionId) {
        let notify = self.lock().get(decision_id).cloned();
        match notify {
            Some(notify) => notify.notify_one(),
            None => {
                tracing::debug!(decision = %decision_id, "an answer for a decision nobody here waits on")
            }
        }
    }

    /// The local answers, when this hub has a data dir.
    pub fn local(&self) -> Option<&LocalDecisions> {
        self.local.as_ref()
    }

    fn listen(self: &Arc<Self>, decision_id: &DecisionId) -> Listening {
        let notify = Arc::new(Notify::new());
        self.lock().insert(decision_id.clone(), notify.clone());
        Listening {
            hub: self.clone(),
            decision_id: decision_id.clone(),
            notify,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<DecisionId, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A registration with the hub, removed when dropped.
struct Listening {
    hub: Arc<DecisionHub>,
    decision_id: DecisionId,
    notify: Arc<Notify>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.hub.lock().remove(&self.decision_id);
    }
}

/// What a run needs to ask its owner.
#[derive(Debug, Clone)]
pub struct Asker {
    pub client: DeviceClient,
    pub job_id: JobId,
    pub lease: Arc<RunLease>,
    pub stop: RunStop,
    pub hub: Arc<DecisionHub>,
    /// `approvals on|off`: whether a web answer counts.
    pub accept_web_approvals: bool,
    pub timings: Timings,
    /// The run's output reporter, while there is one: the lines before a question are sent
    /// before it, so the job's timeline shows them first.
    pub flusher: Option<Flusher>,
}

impl Asker {
    /// Asks `question` and waits for the first valid answer, the run's stop or the expiry.
    /// Whatever ends the wait, the decision is settled on the server and its local files are
    /// removed.
    pub async fn ask(&self, question: &Question) -> Outcome {
        let deadline = Instant::now() + self.timings.expires;
        let decision_id = match self.create(question, deadline).await {
            Ok(decision_id) => decision_id,
            Err(outcome) => return outcome,
        };
        tracing::info!(job = %self.job_id, decision = %decision_id, kind = question.kind, "asked: {}", question.question);
        // From here on, however the wait ends (this future may simply be dropped), the
        // guard leaves no file behind and no question open on the server.
        let mut open = OpenDecision {
            decision_id: decision_id.clone(),
            client: self.client.clone(),
            local: self.hub.local().cloned(),
            settled: false,
        };
        if let Some(local) = &open.local {
            let now = Utc::now();
            let pending = PendingDecision {
                id: decision_id.clone(),
                job_id: self.job_id.clone(),
                kind: question.kind.clone(),
                question: question.question.clone(),
                action: question.action.clone(),
                action_hash: question.action_hash.clone(),
                created_at: now,
                expires_at: now
                    + chrono::Duration::from_std(self.timings.expires).unwrap_or_default(),
                preview: question.preview.clone(),
            };
            if let Err(err) = local.publish(&pending) {
                tracing::warn!(decision = %decision_id, "cannot offer the decision on this computer: {err:#}");
            }
        }
        let listening = self.hub.listen(&decision_id);
        let outcome = self
            .wait(&decision_id, &question.action_hash, deadline, &listening)
            .await;
        drop(listening);
        self.settle(&decision_id, &outcome).await;
        open.settled = true;
        drop(open);
        tracing::info!(job = %self.job_id, decision = %decision_id, ?outcome, "decision settled");
        outcome
    }

    /// Creates the decision on the server, after the run's pending output lines, retrying
    /// while it cannot be reached.
    async fn create(&self, question: &Question, deadline: Instant) -> Result<DecisionId, Outcome> {
        if let Some(flusher) = &self.flusher {
            flusher.flush().await;
        }
        let params = AskRequest {
            kind: question.kind.clone(),
            question: clip(&question.question, MAX_QUESTION_CHARS),
            action: question.action.clone(),
            action_hash: question.action_hash.clone(),
            expires_in_secs: u32::try_from(self.timings.expires.as_secs().max(1))
                .unwrap_or(u32::MAX),
            preview: question.preview.clone(),
        };
        let mut backoff = Backoff::new();
        loop {
            let token = self.lease.token();
            let wait = match self.client.ask(&self.job_id, &token, &params).await {
                Ok(asked) => return Ok(asked.decision_id),
                Err(RemoteError::StaleLease) => match self.lease.recover(&token).await {
                    Recovery::Renewed => continue,
                    Recovery::Later(at_least) => at_least.max(backoff.next_delay()),
                    Recovery::Lost => {
                        self.stop.raise(StopReason::LeaseLost);
                        return Err(Outcome::Withdrawn(StopReason::LeaseLost.describe()));
                    }
                    Recovery::Revoked => {
                        self.stop.raise(StopReason::Revoked);
                        return Err(Outcome::Withdrawn(StopReason::Revoked.describe()));
                    }
                },
                Err(err) if err.is_transient() => {
                    tracing::warn!(job = %self.job_id, "cannot ask yet: {err}");
                    backoff.next_delay().max(err.retry_after())
                }
                Err(err) => {
                    return Err(Outcome::Unasked(format!(
                        "the server refused the question: {err}"
                    )))
                }
            };
            tokio::select! {
                reason = self.stop.raised() => return Err(Outcome::Withdrawn(reason.describe())),
                () = tokio::time::sleep_until(deadline) => return Err(Outcome::Expired),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn wait(
        &self,
        decision_id: &DecisionId,
        action_hash: &str,
        deadline: Instant,
        listening: &Listening,
    ) -> Outcome {
        let mut poll =
            tokio::time::interval_at(Instant::now() + self.timings.poll, self.timings.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut local_poll = tokio::time::interval(self.timings.local_poll);
        local_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let local = self.hub.local();
        loop {
            tokio::select! {
                reason = self.stop.raised() => return Outcome::Withdrawn(reason.describe()),
                () = tokio::time::sleep_until(deadline) => return Outcome::Expired,
                () = listening.notify.notified() => {
                    if let Some(outcome) = self.read_web(decision_id, action_hash).await {
                        return outcome;
                    }
                }
                _ = poll.tick() => {
                    if let Some(outcome) = self.read_web(decision_id, action_hash).await {
                        return outcome;
                    }
                }
                _ = local_poll.tick(), if local.is_some() => {
                    if let Some(outcome) = local.and_then(|local| read_local(local, decision_id)) {
                        return outcome;
                    }
                }
            }
        }
    }

    /// Reads the decision on the server: `Some` once it settles what to do.
    async fn read_web(&self, decision_id: &DecisionId, action_hash: &str) -> Option<Outcome> {
        match self.client.get_decision(decision_id).await {
            Ok(decision) => web_outcome(
                &decision,
                decision_id,
                action_hash,
                self.accepts_web_approvals(),
            ),
            Err(err) => {
                tracing::debug!(decision = %decision_id, "cannot read the decision: {err}");
                None
            }
        }
    }

    /// Whether a web answer counts now: the owner's setting as saved (it may have changed
    /// since the run started), else the one the run started with.
    fn accepts_web_approvals(&self) -> bool {
        self.hub
            .local()
            .and_then(LocalDecisions::accepts_web_approvals)
            .unwrap_or(self.accept_web_approvals)
    }

    /// Tells the server how the device ended the wait (a web answer needs nothing more).
    async fn settle(&self, decision_id: &DecisionId, outcome: &Outcome) {
        let close = match outcome {
            Outcome::Answered {
                answer,
                scope,
                on: AnsweredOn::Computer,
            } => CloseRequest {
                reason: CloseReason::AnsweredLocally,
                answer: Some(*answer),
                scope: Some(*scope),
            },
            Outcome::Expired => CloseRequest {
                reason: CloseReason::Expired,
                answer: None,
                scope: None,
            },
            Outcome::Withdrawn(_) => CloseRequest {
                reason: CloseReason::Withdrawn,
                answer: None,
                scope: None,
            },
            Outcome::Answered {
                on: AnsweredOn::Web,
                ..
            }
            | Outcome::Unasked(_) => return,
        };
        if let Err(err) = self.client.close_decision(decision_id, &close).await {
            // Already settled there (answered, expired by the sweeper): nothing to repair.
            tracing::debug!(decision = %decision_id, "closing the decision: {err}");
        }
    }
}

impl Ask for Asker {
    fn ask<'a>(
        &'a self,
        question: &'a Question,
    ) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>> {
        Box::pin(Asker::ask(self, question))
    }
}

/// A claimed job's run, as it asks its owner: the owner's approvals setting from `config`,
/// answers routed through the process's `hub`.
#[derive(Clone, Copy)]
pub struct Asking<'a> {
    pub client: &'a DeviceClient,
    pub job: &'a ClaimedJob,
    pub config: &'a Config,
    pub lease: &'a Arc<RunLease>,
    pub stop: &'a RunStop,
    pub hub: &'a Arc<DecisionHub>,
}

impl Asking<'_> {
    /// The run's [`Asker`]; with a `flusher`, the lines printed before a question go first.
    pub fn asker(&self, flusher: Option<Flusher>) -> Asker {
        Asker {
            client: self.client.clone(),
            job_id: self.job.id.clone(),
            lease: self.lease.clone(),
            stop: self.stop.clone(),
            hub: self.hub.clone(),
            accept_web_approvals: self.config.accept_web_approvals,
            timings: Timings::from_env(),
            flusher,
        }
    }
}

/// The gate of a claimed job working in `folder` (the shared folder, already checked by
/// `guard`): the job's mode and network choice, the owner's trusted folders from its
/// config, this process's sandbox, and the run's [`Asker`].
pub fn gate(asking: Asking<'_>, guard: &Guard, folder: &Path, flusher: Flusher) -> Gate {
    let job = asking.job;
    let settings = RunSettings {
        mode: job.spec.mode,
        folder: folder.to_path_buf(),
        trusted: asking.config.trusted.clone(),
        network: job.spec.network,
        sandbox: sandbox::report().strength,
        guard: guard.clone(),
        temporary: zones::temporary_folders(),
        delivery: job.spec.git.as_ref().map(|git| git.delivery),
    };
    let asker = asking.asker(Some(flusher));
    Gate::new(RunPolicy::new(settings), Some(Box::new(asker)))
}

/// A decision this run asked and still waits on. When it goes, its files in the data dir
/// (`decisions/pending/<id>.json` and any local answer) go with it, on every way out of the
/// wait: an answer, the expiry, the run's stop, or the waiting future dropped (the agent
/// withdrew its permission request, the turn timed out, the run ended while it was open).
/// One dropped before it was settled is also closed `withdrawn` on the server, in the
/// background, when a runtime is still there to send it.
struct OpenDecision {
    decision_id: DecisionId,
    client: DeviceClient,
    local: Option<LocalDecisions>,
    /// Set once the server knows how the wait ended (or needs to be told nothing).
    settled: bool,
}

impl Drop for OpenDecision {
    fn drop(&mut self) {
        if let Some(local) = &self.local {
            if let Err(err) = local.clear(&self.decision_id) {
                tracing::warn!(decision = %self.decision_id, "cannot remove the decision's files: {err:#}");
            }
        }
        if self.settled {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(decision = %self.decision_id, "abandoned with no runtime left to withdraw it; the server settles it when the run ends");
            return;
        };
        let (client, decision_id) = (self.client.clone(), self.decision_id.clone());
        runtime.spawn(async move {
            let withdrawn = CloseRequest {
                reason: CloseReason::Withdrawn,
                answer: None,
                scope: None,
            };
            match client.close_decision(&decision_id, &withdrawn).await {
                Ok(()) => tracing::info!(decision = %decision_id, "abandoned decision withdrawn"),
                // Already settled there, or the server is away: the run's end settles it.
                Err(err) => tracing::debug!(decision = %decision_id, "withdrawing an abandoned decision: {err}"),
            }
        });
    }
}

/// What a read of the decision on the server means for the waiting run; `None` to keep
/// waiting. A web answer counts only for this decision with this action hash, and only
/// while the owner accepts web answers.
pub fn web_outcome(
    decision: &DeviceDecision,
    decision_id: &DecisionId,
    action_hash: &str,
    accept_web_approvals: bool,
) -> Option<Outcome> {
    if &decision.id != decision_id {
        tracing::warn!(decision = %decision_id, other = %decision.id, "the server answered for another decision; ignoring it");
        return None;
    }
    match decision.state {
        DecisionState::Pending => None,
        // The server gave it up (the lease was swept, or it expired there first).
        DecisionState::Expired | DecisionState::Withdrawn => Some(Outcome::Expired),
        DecisionState::Answered if !accept_web_approvals => {
            tracing::warn!(decision = %decision_id, "ignoring a web answer: approvals are off on this computer");
            None
        }
        DecisionState::Answered if decision.action_hash != action_hash => {
            tracing::warn!(decision = %decision_id, "ignoring an answer for another action");
            None
        }
        DecisionState::Answered => {
            let answer = decision.answer?;
            let scope = match answer {
                Answer::Allow => decision.scope.unwrap_or(Scope::Once),
                Answer::Deny => Scope::Once,
            };
            Some(Outcome::Answered {
                answer,
                scope,
                on: AnsweredOn::Web,
            })
        }
    }
}

fn read_local(local: &LocalDecisions, decision_id: &DecisionId) -> Option<Outcome> {
    match local.answer_of(decision_id) {
        Ok(Some(answer)) => Some(Outcome::Answered {
            answer: answer.answer,
            scope: answer.scope,
            on: AnsweredOn::Computer,
        }),
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(decision = %decision_id, "{err:#}");
            None
        }
    }
}

/// `text` cut to at most `max` characters (an ellipsis marks the cut).
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(max.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

#[cfg(test)]
mod tests {
    use anyhow::{bail, Result};

    use super::*;
    use crate::local::decisions::{LocalAnswer, ANSWERS_DIR};
    use crate::local::journal::Journal;
    use crate::remote::client::ServerClient;
    use crate::run::lease::LeasePeriod;

    fn id(raw: &str) -> DecisionId {
        DecisionId::parse(raw).unwrap_or_else(|err| panic!("{err}"))
    }

    fn decision(
        state: DecisionState,
        answer: Option<Answer>,
        scope: Option<Scope>,
        hash: &str,
    ) -> DeviceDecision {
        DeviceDecision {
            id: id("d1"),
            state,
            answer,
            scope,
            action_hash: hash.to_owned(),
        }
    }

    #[test]
    fn only_a_matching_web_answer_counts() {
        let check = |decision: &DeviceDecision, accept: bool| {
            web_outcome(decision, &id("d1"), "h1", accept)
        };
        let allow_session = decision(
            DecisionState::Answered,
            Some(Answer::Allow),
            Some(Scope::Session),
            "h1",
        );
        assert_eq!(
            check(&allow_session, true),
            Some(Outcome::Answered {
                answer: Answer::Allow,
                scope: Scope::Session,
                on: AnsweredOn::Web
            })
        );
        // Approvals off: the web answer is ignored, the run keeps waiting.
        assert_eq!(check(&allow_session, false), None);
        // Another action's hash, or another decision: ignored.
        let other_hash = decision(
            DecisionState::Answered,
            Some(Answer::Allow),
            Some(Scope::Once),
            "h2",
        );
        assert_eq!(check(&other_hash, true), None);
        assert_eq!(web_outcome(&allow_session, &id("d2"), "h1", true), None);
        // A deny always counts once.
        let deny = decision(
            DecisionState::Answered,
            Some(Answer::Deny),
            Some(Scope::Session),
            "h1",
        );
        assert_eq!(
            check(&deny, true),
            Some(Outcome::Answered {
                answer: Answer::Deny,
                scope: Scope::Once,
                on: AnsweredOn::Web
            })
        );
        // Pending waits; expired or withdrawn on the server never allows.
        assert_eq!(
            check(&decision(DecisionState::Pending, None, None, "h1"), true),
            None
        );
        assert_eq!(
            check(&decision(DecisionState::Expired, None, None, "h1"), true),
            Some(Outcome::Expired)
        );
        assert_eq!(
            check(&decision(DecisionState::Withdrawn, None, None, "h1"), false),
            Some(Outcome::Expired)
        );
        // Answered without an answer: nothing to act on.
        assert_eq!(
            check(&decision(DecisionState::Answered, None, None, "h1"), true),
            None
        );
    }

    #[test]
    fn a_local_answer_is_an_answer_on_this_computer() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let local = LocalDecisions::new(DataDir::resolve(Some(tmp.path().join("agent")))?);
        let now = Utc::now();
        local.publish(&PendingDecision {
            id: id("d1"),
            job_id: JobId::parse("job1")?,
            kind: "command".into(),
            question: "Run `make` in /w?".into(),
            action: serde_json::json!({"kind": "command"}),
            action_hash: "h1".into(),
            created_at: now,
            expires_at: now,
            preview: None,
        })?;
        assert_eq!(read_local(&local, &id("d1")), None);
        let allow = LocalAnswer {
            answer: Answer::Allow,
            scope: Scope::Session,
        };
        local.answer("d1", allow)?;
        assert_eq!(
            read_local(&local, &id("d1")),
            Some(Outcome::Answered {
                answer: Answer::Allow,
                scope: Scope::Session,
                on: AnsweredOn::Computer
            })
        );
        Ok(())
    }

    #[tokio::test]
    async fn frames_reach_only_the_decision_waited_on() {
        let hub = DecisionHub::new(None);
        let listening = hub.listen(&id("d1"));
        hub.answered(&id("d2"));
        hub.answered(&id("d1"));
        let woke = tokio::time::timeout(Duration::from_secs(5), listening.notify.notified()).await;
        assert!(woke.is_ok());
        drop(listening);
        assert!(hub.lock().is_empty());
    }

    use crate::run::test_http::read_request;

    /// A stand-in for the server's decision routes: `ask` creates `d1`, reading it says
    /// it is pending, and every close is passed on with its body.
    async fn fake_server() -> Result<(String, tokio::sync::mpsc::UnboundedReceiver<String>)> {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (closes, closed) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let closes = closes.clone();
                tokio::spawn(async move {
                    let mut socket = socket;
                    let Some(request) = read_request(&mut socket).await else {
                        return anyhow::Ok(());
                    };
                    let (status, answer) = if request.target.ends_with("/ask") {
                        ("201 Created", r#"{"decisionId":"d1"}"#)
                    } else if request.method == "GET" {
                        let pending = r#"{"id":"d1","state":"pending","answer":null,"scope":null,"actionHash":"h1"}"#;
                        ("200 OK", pending)
                    } else {
                        let _ = closes.send(String::from_utf8_lossy(&request.body).into_owned());
                        ("200 OK", "{}")
                    };
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                    socket.write_all(response.as_bytes()).await?;
                    anyhow::Ok(())
                });
            }
        });
        Ok((base, closed))
    }

    /// An asker for job `job1` on the fake server, offering its decisions in `data_dir`.
    fn asker(base: &str, data_dir: &DataDir, stop: &RunStop) -> Result<Asker> {
        let client = DeviceClient::new(ServerClient::new(base)?, "tdt_x".into());
        let job = crate::test_job::claimed_job("agent", tether_protocol::jobs::Mode::Ask);
        let lease = RunLease::new(
            client.clone(),
            Arc::new(Journal::new(data_dir)),
            Arc::new(LeasePeriod::new()),
            &job,
        );
        Ok(Asker {
            client,
            job_id: job.id.clone(),
            lease,
            stop: stop.clone(),
            hub: DecisionHub::new(Some(data_dir.clone())),
            accept_web_approvals: true,
            timings: Timings {
                expires: Duration::from_secs(60),
                poll: Duration::from_secs(5),
                local_poll: Duration::from_millis(50),
            },
            flusher: None,
        })
    }

    fn question() -> Question {
        Question {
            kind: "command".into(),
            question: "Run `make`?".into(),
            action: serde_json::json!({"kind": "command"}),
            action_hash: "h1".into(),
            preview: None,
        }
    }

    /// Waits until the question is offered on the computer.
    async fn offered(local: &LocalDecisions) -> Result<()> {
        for _ in 0..200 {
            if !local.list()?.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        bail!("the question was never offered on the computer")
    }

    async fn next_close(
        closed: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Option<serde_json::Value> {
        let body = tokio::time::timeout(Duration::from_secs(5), closed.recv()).await;
        body.ok()
            .flatten()
            .and_then(|body| serde_json::from_str(&body).ok())
    }

    #[tokio::test]
    async fn an_abandoned_wait_leaves_no_files_and_withdraws_the_decision() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("agent")))?;
        let local = LocalDecisions::new(data_dir.clone());
        let (base, mut closed) = fake_server().await?;
        let asker = asker(&base, &data_dir, &RunStop::new())?;
        let question = question();
        let mut asking = Box::pin(asker.ask(&question));
        tokio::select! {
            outcome = &mut asking => bail!("the wait ended by itself: {outcome:?}"),
            offered = offered(&local) => offered?,
        }
        // Nobody answers; the run gives the question up (the agent withdrew its request, the
        // turn timed out, the run ended): the waiting future is simply dropped.
        drop(asking);
        assert!(local.list()?.is_empty());
        assert_eq!(
            next_close(&mut closed).await,
            Some(serde_json::json!({"reason": "withdrawn", "answer": null, "scope": null}))
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_stopped_run_withdraws_once_and_clears_the_answer_file_too() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("agent")))?;
        let local = LocalDecisions::new(data_dir.clone());
        let (base, mut closed) = fake_server().await?;
        let stop = RunStop::new();
        let asker = asker(&base, &data_dir, &stop)?;
        let asking = tokio::spawn(async move { asker.ask(&question()).await });
        offered(&local).await?;
        stop.raise(StopReason::Cancel);
        let outcome = tokio::time::timeout(Duration::from_secs(5), asking).await??;
        assert_eq!(outcome, Outcome::Withdrawn(StopReason::Cancel.describe()));
        assert!(local.list()?.is_empty());
        assert!(data_dir.list_dir(ANSWERS_DIR)?.is_empty());
        assert_eq!(
            next_close(&mut closed)
                .await
                .map(|close| close["reason"].clone()),
            Some(serde_json::json!("withdrawn"))
        );
        // Settled once: the guard sends nothing more.
        let again = tokio::time::timeout(Duration::from_millis(300), closed.recv()).await;
        assert!(again.is_err(), "closed twice: {again:?}");
        Ok(())
    }

    #[test]
    fn the_guard_removes_the_pending_file_and_a_late_local_answer() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data_dir = DataDir::resolve(Some(tmp.path().join("agent")))?;
        let local = LocalDecisions::new(data_dir.clone());
        let now = Utc::now();
        local.publish(&PendingDecision {
            id: id("d1"),
            job_id: JobId::parse("job1")?,
            kind: "command".into(),
            question: "Run `make`?".into(),
            action: serde_json::json!({}),
            action_hash: "h1".into(),
            created_at: now,
            expires_at: now + chrono::Duration::seconds(60),
            preview: None,
        })?;
        let allow = LocalAnswer {
            answer: Answer::Allow,
            scope: Scope::Once,
        };
        local.answer("d1", allow)?;
        assert_eq!(data_dir.list_dir(ANSWERS_DIR)?.len(), 1);
        // Dropped unsettled with no runtime left to withdraw it (the agent is exiting): the
        // files go all the same, and nothing panics.
        let client = DeviceClient::new(ServerClient::new("http://127.0.0.1:9")?, "tdt_x".into());
        drop(OpenDecision {
            decision_id: id("d1"),
            client,
            local: Some(local.clone()),
            settled: false,
        });
        assert!(local.list()?.is_empty());
        assert!(data_dir.list_dir(ANSWERS_DIR)?.is_empty());
        Ok(())
    }

    #[test]
    fn questions_are_clipped_for_the_server() {
        assert_eq!(clip("short", 10), "short");
        let long = "x".repeat(600);
        let clipped = clip(&long, MAX_QUESTION_CHARS);
        assert_eq!(clipped.chars().count(), MAX_QUESTION_CHARS);
        assert!(clipped.ends_with('…'));
    }
}
