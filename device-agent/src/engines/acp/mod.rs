//! The `acp` engine: a coding agent speaking the Agent Client Protocol, started confined in
//! the job's folder, with this computer as its client.
//!
//! One run is one ACP session of one turn:
//!
//! 1. the agent is started through the same confinement layer as recipes ([`process`]), its
//!    stdio the transport ([`transport`]);
//! 2. `initialize` (advertising exactly what [`client`] implements: `fs.readTextFile`,
//!    `fs.writeTextFile`, `terminal`), `session/new` in the job's folder (or, for a
//!    follow-up or a carry-on, `session/load` of a session this computer stored:
//!    [`continuation`]), `session/prompt` with the job's prompt;
//! 3. while the turn runs, the agent's updates become the job's output and its requests go
//!    through the guard, the run's policy and the sandbox ([`client`]);
//! 4. the owner's cancel becomes `session/cancel` (and a kill if the turn does not end within
//!    [`CANCEL_GRACE`]); the time limit, a lost lease or a shutdown kill the agent's tree;
//! 5. the files the agent and its terminals left in the run's evidence folder are delivered
//!    as a recipe's are ([`RunEvidence`]);
//! 6. the stop reason and the agent's last message become the outcome.
//!
//! **Architecture Invariant:** the agent never gets more than a recipe would: its process is
//! confined like one, and everything it asks this (unconfined) process to do on its behalf
//! passes the guard and the policy first.

pub mod check;
pub mod client;
pub mod continuation;
pub mod deletion;
pub mod files;
pub mod handshake;
pub mod observed;
pub mod outfit;
pub mod permissions;
pub mod preview;
pub mod process;
pub mod prompt;
pub mod shown;
pub mod sign_in;
pub mod terminals;
pub mod transport;
pub mod updates;

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    CancelNotification, CreateTerminalRequest, InitializeResponse, KillTerminalRequest,
    LoadSessionRequest, McpServer, NewSessionRequest, PromptRequest, PromptResponse,
    ReadTextFileRequest, ReleaseTerminalRequest, RequestPermissionRequest, SessionId,
    SessionNotification, StopReason as AcpStopReason, TerminalOutputRequest,
    WaitForTerminalExitRequest, WriteTextFileRequest,
};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Agent, Client};
use tether_protocol::jobs::{CompleteParams, Outcome};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::local::state::{AcpEngine, SharedFolder};
use crate::policy::guard::Guard;
use crate::policy::hard_floor;
use crate::run::decisions;
use crate::run::engine::{blocked, time_limit, Engine, RunContext};
use crate::run::evidence::RunEvidence;
use crate::run::grant::{start_broker, Granted};
use crate::run::model_network;
use crate::run::process_group::TERMINATE_GRACE;
use crate::run::progress::{self, report_output};
use crate::run::stop::{RunStop, StopReason};
use crate::run::tool_channel;
use crate::run::worker_report;
use crate::sandbox;
use client::{Denial, Said, Session};
use continuation::{Load, Opening, Place, Recall};
use handshake::describe;
use observed::Observed;
use outfit::{Fitting, Outfit};
use process::AgentProcess;
use terminals::{Launch, Terminals};
use tether_protocol::report::ObservedRun;
use updates::cut_chars;

/// How long the turn may take to end after `session/cancel` before the agent is killed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// The same, when the agent itself is shutting down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// How long the agent may take to exit on its own once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Output lines waiting for the reporter (as for recipes).
const LINE_BUFFER: usize = 1024;
/// Lines of the agent's stderr a failure's summary quotes.
const STDERR_IN_SUMMARY: usize = 3;

/// How the turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Turn {
    /// The prompt was answered with this stop reason.
    Ended(AcpStopReason),
    /// The run was stopped; `cooperated` when the agent ended the turn after `session/cancel`.
    Stopped {
        reason: StopReason,
        cooperated: bool,
    },
    TimedOut,
    /// The agent exited, broke the protocol or refused to start a session; why.
    Failed(String),
    /// The agent cannot start a session until the owner does something on this computer
    /// (sign it in); what.
    Blocked(String),
}

impl Engine for AcpEngine {
    async fn run(&self, ctx: RunContext<'_>) -> Result<CompleteParams, StopReason> {
        execute(self, ctx).await
    }
}

/// Runs the job of `ctx` with the ACP engine `engine`; the completion to report, or why
/// nothing may be reported (the lease is gone, the device revoked, or the agent is shutting
/// down).
async fn execute(engine: &AcpEngine, ctx: RunContext<'_>) -> Result<CompleteParams, StopReason> {
    let RunContext {
        client,
        job,
        config,
        folder,
        worktree,
        stop,
        lease,
        secrets,
        named,
        guard,
        hub,
        taps,
        attachments,
        tools,
    } = ctx;
    let work_folder = match checked_before_start(engine, folder, guard) {
        Ok(path) => path,
        Err(refusal) => return Ok(blocked(refusal)),
    };
    let recall = Recall::new(
        guard.data_dir(),
        Place {
            job_id: job.id.clone(),
            engine: engine.name.clone(),
            folder: folder.label.clone(),
            cwd: work_folder.clone(),
        },
    );
    let opening = recall.opening(job);
    let (lines, line_receiver) = mpsc::channel(LINE_BUFFER);
    let (flusher, flushes) = progress::flusher();
    let reporter = tokio::spawn(report_output(
        client.clone(),
        lease.clone(),
        line_receiver,
        Some(flushes),
        stop.clone(),
        secrets.hidden.clone(),
        Some(taps.open(&job.id)),
    ));
    // The agent and each of its terminals see the attempt's evidence folder, as a recipe
    // does; it is delivered once they all ended.
    let broker = match start_broker(guard.data_dir(), job, named.references, secrets, &lines) {
        Ok(broker) => broker,
        Err(refusal) => {
            drop(lines);
            let _ = reporter.await;
            return Ok(blocked(refusal));
        }
    };
    let evidence = RunEvidence::prepare(job, guard);
    if let (Some(tools), Some(evidence)) = (tools, &evidence) {
        tools.handback().keep_evidence_in(evidence.recorder());
    }
    let (env, writable, readable) = Granted {
        secret_env: named.env,
        evidence: evidence.as_ref(),
        broker: broker.as_ref(),
        worktree,
        attachments,
        tools,
    }
    .into_parts(job);
    let launch = Launch {
        guard: guard.clone(),
        folder: work_folder.clone(),
        network: job.spec.network,
        env,
        writable,
        readable,
    };
    let fitting = Fitting {
        launch: &launch,
        job_network: job.spec.network,
        home: guard.home(),
        sockets: &model_network::run_folder(guard.data_dir()),
    };
    let started = Outfit::fit(engine, &fitting)
        .and_then(|outfit| Ok((process::start(&outfit, &launch, lines.clone())?, outfit)));
    let ((agent, pipes), outfit) = match started {
        Ok(started) => started,
        Err(refusal) => {
            if let Some(evidence) = evidence {
                evidence.discard();
            }
            drop(lines);
            let _ = reporter.await;
            return Ok(blocked(refusal));
        }
    };
    lease.spawned(agent.pgid());
    let asking = decisions::Asking {
        client,
        job,
        config,
        lease,
        stop,
        hub,
    };
    let gate = decisions::gate(asking, guard, &work_folder, flusher);
    // A follow-up (or a carry-on) starts with the folders the owner allowed the run it
    // continues to change, its commands' sandbox included.
    for folder in gate.policy().inherit_folders(&recall.inherited(job)) {
        let _ = lines
            .send(format!(
                "allowed for this run, as for the run it continues: changes inside {}",
                folder.display()
            ))
            .await;
    }
    let terminals = Terminals::new(launch, lines.clone());
    let session = Arc::new(Session::new(
        work_folder,
        guard.clone(),
        gate,
        terminals,
        Said {
            lines: lines.clone(),
            hidden: secrets.hidden.clone(),
            observed: Arc::new(Observed::new(lease.clone())),
        },
        recall.clone(),
    ));
    let deadline = Instant::now() + time_limit(job);
    let mcp_servers = tool_channel::acp_servers(tools);
    let conversation = Conversation {
        opening: &opening,
        recall: &recall,
        mcp_servers: &mcp_servers,
        stop,
        deadline,
        sign_in: SignInPlace {
            engine: &engine.name,
            engine_env: &outfit.variable_names(),
            hint: outfit.sign_in_command,
            reads_files: outfit.client_reads_files,
        },
        task: prompt::Task {
            context: job.context.as_deref(),
            attachments: attachments.map_or(&[], |attachments| attachments.placed()),
        },
    };
    let turn = converse(&session, pipes, &conversation).await;
    let stop_note = match &turn {
        Turn::Ended(reason) => {
            stop_word(*reason).map(|word| format!("the agent ended its turn ({word})"))
        }
        _ => None,
    };
    let Ended {
        status,
        notes,
        stderr_tail,
    } = end(agent, &session, &turn, stop).await;
    drop(broker);
    outfit::forget_written_key(engine, &outfit.state_home);
    let (rest, final_message) = session.finish_transcript();
    let mut outcome = completion(Completion {
        turn,
        final_message,
        choices: session.gate().unattended_choices(),
        denied: session.denied(),
        exit: status,
        stderr_tail,
        timeout_minutes: job.spec.timeout_minutes,
        stop: stop.current(),
    });
    if let Ok(params) = &mut outcome {
        params.observed = session.observed().current();
    }
    // The worker's report (its tool call, else `.tether/result.json`) goes with the outcome.
    let mut report_note = None;
    if let Ok(params) = &mut outcome {
        let handback = tools.map(tool_channel::ToolChannel::handback);
        let collected = worker_report::collect(handback, &folder.path, &secrets.hidden).await;
        params.report = collected.wire();
        report_note = collected.note;
    }
    // The session's end is the run's: journaled now, before its last lines, evidence and
    // delivery go anywhere (the server may be unreachable for long), so a restarted agent
    // reports it and starts no session for it again.
    if let Ok(params) = &outcome {
        lease.ended(params, &secrets.hidden);
    }
    if let Some(refused) = outfit
        .model_network
        .as_ref()
        .and_then(|network| network.summary())
    {
        let _ = lines.send(refused).await;
    }
    drop(outfit);
    for line in rest
        .into_iter()
        .chain(notes)
        .chain(stop_note)
        .chain(report_note)
    {
        let _ = lines.send(line).await;
    }
    if let Some(evidence) = evidence {
        evidence
            .deliver(client, lease, config, &secrets.hidden, stop, &lines)
            .await;
    }
    drop(session);
    drop(lines);
    // The reporter ends once every line is sent (or the lease is gone).
    let _ = reporter.await;
    let params = outcome?;
    stop.reportable()?;
    tracing::info!(job = %job.id, engine = %engine.name, outcome = ?params.outcome, "acp run ended");
    Ok(params)
}

/// What is checked before anything starts, whatever the backend: the hard floor on the
/// engine's command, the guard on the folder. The folder's canonical path, or the refusal.
fn checked_before_start(
    engine: &AcpEngine,
    folder: &SharedFolder,
    guard: &Guard,
) -> Result<std::path::PathBuf, String> {
    let argv: Vec<String> = std::iter::once(engine.program.clone())
        .chain(engine.args.iter().cloned())
        .collect();
    if let Some(refusal) = hard_floor::check(&argv).refusal() {
        return Err(refusal);
    }
    guard
        .check_shared_folder(&folder.label, &folder.path)
        .map_err(|err| format!("the guard refused the folder: {err}"))
}

/// What [`end`] found when the agent was gone.
struct Ended {
    status: Option<ExitStatus>,
    notes: Vec<String>,
    stderr_tail: Vec<String>,
}

/// Ends the agent and every terminal it left, as the turn's end calls for.
async fn end(agent: AgentProcess, session: &Session, turn: &Turn, stop: &RunStop) -> Ended {
    session.terminals().stop_all().await;
    let lease_gone = stop
        .current()
        .is_some_and(|reason| reason >= StopReason::LeaseLost);
    // A turn that ended (or a cancel the agent obeyed) leaves it time to exit on its own.
    let (exit_grace, kill_grace) = match turn {
        _ if lease_gone => (Duration::ZERO, Duration::ZERO),
        Turn::Ended(_)
        | Turn::Failed(_)
        | Turn::Blocked(_)
        | Turn::Stopped {
            cooperated: true, ..
        } => (EXIT_GRACE, TERMINATE_GRACE),
        Turn::Stopped { .. } | Turn::TimedOut => (Duration::ZERO, TERMINATE_GRACE),
    };
    let stderr = agent.stderr_handle();
    let (status, notes) = agent.stop(exit_grace, kill_grace).await;
    Ended {
        status,
        notes,
        stderr_tail: stderr.lines(),
    }
}

/// What the conversation goes by besides its session.
struct Conversation<'a> {
    /// How the session is opened, and prompted.
    opening: &'a Opening,
    /// Where the session is stored once the agent names it.
    recall: &'a Recall,
    /// The MCP servers the session gets: the run's tool channel, `tether-agent mcp`.
    mcp_servers: &'a [McpServer],
    stop: &'a RunStop,
    deadline: Instant,
    sign_in: SignInPlace<'a>,
    /// What the prompt carries besides its text: the task's context and attachments.
    task: prompt::Task<'a>,
}

/// What signing the agent in goes by.
#[derive(Debug, Clone, Copy)]
struct SignInPlace<'a> {
    /// The engine's name, for the `engine check` the owner is told to run.
    engine: &'a str,
    /// The names of the variables the agent was started with.
    engine_env: &'a [String],
    /// Whether the agent is offered `fs/read_text_file`.
    reads_files: bool,
    /// The engine's own sign-in command, when it is known.
    hint: Option<&'a str>,
}

/// The conversation: connect, then [`talk`]. A broken transport is a failed turn.
async fn converse(
    session: &Arc<Session>,
    pipes: process::Pipes,
    conversation: &Conversation<'_>,
) -> Turn {
    let transport = transport::lines(pipes.stdout, pipes.input);
    let connection = Client
        .v1()
        .name("tether-agent")
        .on_receive_notification(
            {
                let session = session.clone();
                async move |notification: SessionNotification, _cx: ConnectionTo<Agent>| {
                    session.update(notification).await;
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: RequestPermissionRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            cx: ConnectionTo<Agent>| {
                    let session = session.clone();
                    let cancellation = responder.cancellation();
                    cx.spawn(async move {
                        let answer = session.permission(request, cancellation).await;
                        respond(responder, answer)
                    })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: ReadTextFileRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            cx: ConnectionTo<Agent>| {
                    let session = session.clone();
                    cx.spawn(
                        async move { respond(responder, session.read_text_file(request).await) },
                    )
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: WriteTextFileRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            cx: ConnectionTo<Agent>| {
                    let session = session.clone();
                    cx.spawn(
                        async move { respond(responder, session.write_text_file(request).await) },
                    )
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: CreateTerminalRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            cx: ConnectionTo<Agent>| {
                    let session = session.clone();
                    cx.spawn(
                        async move { respond(responder, session.create_terminal(request).await) },
                    )
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: TerminalOutputRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            _cx: ConnectionTo<Agent>| {
                    respond(responder, session.terminal_output(&request))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: WaitForTerminalExitRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            cx: ConnectionTo<Agent>| {
                    let session = session.clone();
                    cx.spawn(async move {
                        respond(responder, session.wait_for_terminal_exit(&request).await)
                    })
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: KillTerminalRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            _cx: ConnectionTo<Agent>| {
                    respond(responder, session.kill_terminal(&request))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let session = session.clone();
                async move |request: ReleaseTerminalRequest,
                            responder: agent_client_protocol::v1::Responder<_>,
                            _cx: ConnectionTo<Agent>| {
                    respond(responder, session.release_terminal(&request))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async |cx: ConnectionTo<Agent>| {
            Ok(talk(&cx, session, conversation).await)
        })
        .await;
    match connection {
        Ok(turn) => turn,
        Err(err) => Turn::Failed(format!("the connection to the agent broke: {err}")),
    }
}

/// Answers a request; a connection already closing has nobody to answer.
fn respond<T: agent_client_protocol::JsonRpcResponse>(
    responder: agent_client_protocol::v1::Responder<T>,
    answer: Result<T, agent_client_protocol::Error>,
) -> Result<(), agent_client_protocol::Error> {
    if let Err(err) = responder.respond_with_result(answer) {
        tracing::debug!("an answer to the agent was not sent: {err}");
    }
    Ok(())
}

/// `initialize`, `session/new` (or `session/load`), then the one `session/prompt` of the
/// run, racing the run's stop and its time limit.
async fn talk(
    cx: &ConnectionTo<Agent>,
    session: &Session,
    conversation: &Conversation<'_>,
) -> Turn {
    let Conversation {
        opening,
        recall,
        mcp_servers,
        stop,
        deadline,
        sign_in,
        task,
    } = *conversation;
    let opened = tokio::select! {
        ready = open_session(cx, session, opening, mcp_servers, sign_in) => match ready {
            Ok(ready) => ready,
            Err(turn) => return turn,
        },
        reason = stop.raised() => return Turn::Stopped { reason, cooperated: false },
        () = tokio::time::sleep_until(deadline) => return Turn::TimedOut,
    };
    let session_id = opened.session_id;
    recall.remember(&session_id, session.gate().policy().granted_folders());
    session.observed().update(|seen| {
        observed::agent(seen, opened.agent.agent_info.as_ref());
        let said = opened.used;
        seen.model = said.model.or(seen.model.take());
        seen.effort = said.effort.or(seen.effort.take());
        seen.mode = said.mode.or(seen.mode.take());
    });
    if let Some(info) = &opened.agent.agent_info {
        session
            .say(format!("agent: {} {}", info.name, info.version))
            .await;
    }
    for note in opened.notes {
        session.say(note).await;
    }
    // A follow-up's turn carries its own job's context and attachments, as a first turn does.
    let capabilities = &opened.agent.agent_capabilities.prompt_capabilities;
    let request = PromptRequest::new(
        session_id.clone(),
        prompt::blocks(&opened.prompt, task, capabilities),
    );
    let answer = cx.send_request(request).block_task();
    tokio::pin!(answer);
    tokio::select! {
        answered = &mut answer => prompt_ended(answered),
        reason = stop.raised() => {
            if reason >= StopReason::LeaseLost {
                return Turn::Stopped { reason, cooperated: false };
            }
            let grace = if reason == StopReason::Cancel { CANCEL_GRACE } else { SHUTDOWN_GRACE };
            let cooperated = cancel_turn(cx, session, session_id, grace, &mut answer).await;
            Turn::Stopped { reason, cooperated }
        }
        () = tokio::time::sleep_until(deadline) => {
            cancel_turn(cx, session, session_id, Duration::ZERO, &mut answer).await;
            Turn::TimedOut
        }
    }
}

/// A session the agent opened, and what to do with it.
struct Opened {
    /// What the agent said of itself.
    agent: InitializeResponse,
    session_id: SessionId,
    prompt: String,
    /// Lines of output saying how the session was opened.
    notes: Vec<String>,
    /// The mode, model and thought level the session opened with.
    used: ObservedRun,
}

/// `initialize`, `authenticate` when the agent lists an `env_var` method whose variables the
/// agent has, then `session/load` of the session `opening` names when the agent can load
/// one, else `session/new` in the job's folder; the failed (or blocked) turn when neither
/// works. The session gets `mcp_servers`.
async fn open_session(
    cx: &ConnectionTo<Agent>,
    session: &Session,
    opening: &Opening,
    mcp_servers: &[McpServer],
    place: SignInPlace<'_>,
) -> Result<Opened, Turn> {
    let introduced = handshake::initialize(cx, place.reads_files)
        .await
        .map_err(Turn::Failed)?;
    handshake::check_version(&introduced.agent).map_err(Turn::Failed)?;
    let methods = sign_in::methods(&introduced.raw);
    let mut notes = Vec::new();
    if let Some(method) = sign_in::env_method(&methods, place.engine_env) {
        sign_in::authenticate(cx, method)
            .await
            .map_err(Turn::Blocked)?;
        notes.push(format!(
            "signed the agent in: {} ({})",
            method.name,
            method
                .vars
                .iter()
                .map(|var| var.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let agent = introduced.agent;
    if let Some(load) = &opening.load {
        match load_session(cx, session, &agent, load, mcp_servers).await {
            Ok((session_id, used)) => {
                return Ok(Opened {
                    agent,
                    session_id,
                    prompt: load.prompt.clone(),
                    notes: vec![load.note.to_owned()],
                    used,
                })
            }
            Err(why) => notes.push(why),
        }
    }
    let new_session = cx
        .send_request(
            NewSessionRequest::new(session.folder().to_path_buf())
                .mcp_servers(mcp_servers.to_vec()),
        )
        .block_task()
        .await
        .map_err(|err| session_refused(&methods, &err, place))?;
    session.started(new_session.session_id.clone());
    notes.extend(opening.note.map(str::to_owned));
    let mut used = ObservedRun::default();
    observed::session(
        &mut used,
        new_session.modes.as_ref(),
        new_session.config_options.as_deref(),
    );
    Ok(Opened {
        agent,
        session_id: new_session.session_id,
        prompt: opening.prompt.clone(),
        notes,
        used,
    })
}

/// `session/load` of the stored session, when the agent advertises `loadSession`; what it
/// replays meanwhile is not output. The session's id and what it uses, or why it was not
/// loaded.
async fn load_session(
    cx: &ConnectionTo<Agent>,
    session: &Session,
    agent: &InitializeResponse,
    load: &Load,
    mcp_servers: &[McpServer],
) -> Result<(SessionId, ObservedRun), String> {
    if !agent.agent_capabilities.load_session {
        return Err("the agent does not offer to load an earlier session (loadSession)".to_owned());
    }
    let session_id = SessionId::new(load.session_id.as_str());
    session.loading();
    let request = LoadSessionRequest::new(session_id.clone(), session.folder().to_path_buf())
        .mcp_servers(mcp_servers.to_vec());
    match cx.send_request(request).block_task().await {
        Ok(loaded) => {
            session.started(session_id.clone());
            let mut used = ObservedRun::default();
            observed::session(
                &mut used,
                loaded.modes.as_ref(),
                loaded.config_options.as_deref(),
            );
            Ok((session_id, used))
        }
        Err(err) => Err(format!(
            "the agent did not load its earlier session: {}",
            describe(&err)
        )),
    }
}

/// Sends `session/cancel` and waits up to `grace` for the prompt to be answered; whether
/// it was.
async fn cancel_turn(
    cx: &ConnectionTo<Agent>,
    session: &Session,
    session_id: SessionId,
    grace: Duration,
    answer: &mut (impl std::future::Future<Output = Result<PromptResponse, agent_client_protocol::Error>>
              + Unpin),
) -> bool {
    session.cancel();
    if let Err(err) = cx.send_notification(CancelNotification::new(session_id)) {
        tracing::debug!("session/cancel not sent: {err}");
        return false;
    }
    matches!(tokio::time::timeout(grace, answer).await, Ok(Ok(_)))
}

fn prompt_ended(answered: Result<PromptResponse, agent_client_protocol::Error>) -> Turn {
    match answered {
        Ok(response) => Turn::Ended(response.stop_reason),
        Err(err) => Turn::Failed(format!(
            "the agent did not finish the turn: {}",
            describe(&err)
        )),
    }
}

/// Why `session/new` failed: a sign-in the agent needs first blocks the run, naming the
/// agent's methods and what to run on this computer.
fn session_refused(
    methods: &[sign_in::Method],
    err: &agent_client_protocol::Error,
    place: SignInPlace<'_>,
) -> Turn {
    if err.code == agent_client_protocol::ErrorCode::AUTH_REQUIRED {
        return Turn::Blocked(sign_in::needed(
            place.engine,
            methods,
            place.engine_env,
            place.hint,
        ));
    }
    Turn::Failed(format!(
        "the agent did not start a session: {}",
        describe(err)
    ))
}

/// Everything the completion is made of.
#[derive(Debug)]
struct Completion {
    turn: Turn,
    final_message: String,
    choices: Vec<String>,
    /// What the gate refused during the turn, in order.
    denied: Vec<Denial>,
    exit: Option<ExitStatus>,
    stderr_tail: Vec<String>,
    timeout_minutes: u32,
    stop: Option<StopReason>,
}

/// Maps how the turn ended to the completion to report.
fn completion(done: Completion) -> Result<CompleteParams, StopReason> {
    // Once the lease or the token is gone, nothing more may be reported, however it ended.
    if let Some(reason) = done.stop.filter(|reason| *reason >= StopReason::LeaseLost) {
        return Err(reason);
    }
    let (outcome, summary) = match &done.turn {
        Turn::Ended(reason) => ended_with(*reason, &done.final_message, &done.denied),
        Turn::Stopped {
            reason: StopReason::Cancel,
            cooperated,
        } => {
            let summary = if *cooperated {
                "cancelled".to_owned()
            } else {
                format!(
                    "cancelled (the agent did not end its turn within {} s of session/cancel and was stopped)",
                    CANCEL_GRACE.as_secs()
                )
            };
            (Outcome::Cancelled, summary)
        }
        Turn::Stopped { reason, .. } => return Err(*reason),
        Turn::TimedOut => (
            Outcome::Failed,
            format!("timed out after {} min", done.timeout_minutes.max(1)),
        ),
        Turn::Failed(why) => {
            if done.exit.and_then(|status| status.code()) == Some(sandbox::SANDBOX_FAILED) {
                return Ok(blocked(format!(
                    "the sandbox could not be applied, so the agent never ran: {}",
                    done.stderr_tail.join(" ")
                )));
            }
            (Outcome::Failed, failure(why, &done))
        }
        Turn::Blocked(why) => return Ok(blocked(why.clone())),
    };
    let mut summary = summary;
    if !done.choices.is_empty() {
        summary.push_str("\nTaken without asking (unattended):");
        for choice in &done.choices {
            summary.push_str("\n- ");
            summary.push_str(choice);
        }
    }
    Ok(CompleteParams {
        outcome,
        summary: cut_chars(&summary, 9000),
        exit_code: None,
        report: None,
        observed: None,
        changes: None,
        delivery: None,
    })
}

/// The outcome of a turn the agent ended with `reason`. A turn it ended after the gate
/// refused something did not do what it was asked, however the agent words it: `blocked`,
/// naming what was denied.
fn ended_with(reason: AcpStopReason, final_message: &str, denied: &[Denial]) -> (Outcome, String) {
    let said = |prefix: &str| {
        if final_message.is_empty() {
            prefix.to_owned()
        } else {
            format!("{prefix}: {final_message}")
        }
    };
    let gave_up = matches!(
        reason,
        AcpStopReason::EndTurn | AcpStopReason::Cancelled | AcpStopReason::Refusal
    );
    if let (true, Some(first)) = (gave_up, denied.first()) {
        return (
            Outcome::Blocked,
            after_denial(first, denied.len(), final_message),
        );
    }
    match reason {
        AcpStopReason::EndTurn => {
            let summary = if final_message.is_empty() {
                "the agent ended its turn without a message".to_owned()
            } else {
                final_message.to_owned()
            };
            (Outcome::Succeeded, summary)
        }
        // Not the owner's Cancel (that is `Turn::Stopped`): the agent gave up on its own.
        AcpStopReason::Cancelled => (Outcome::Failed, said("the agent cancelled its turn itself")),
        AcpStopReason::Refusal => (
            Outcome::Failed,
            said("the agent refused to go on (refusal)"),
        ),
        AcpStopReason::MaxTokens => (
            Outcome::Failed,
            said("the agent stopped at its token limit (max_tokens)"),
        ),
        AcpStopReason::MaxTurnRequests => (
            Outcome::Failed,
            said(
                "the agent stopped at its limit of model requests for one turn (max_turn_requests)",
            ),
        ),
        _ => (
            Outcome::Failed,
            said("the agent stopped for a reason this computer does not know"),
        ),
    }
}

/// The stop reason as ACP spells it, for the line the job's output ends with.
fn stop_word(reason: AcpStopReason) -> Option<&'static str> {
    match reason {
        AcpStopReason::EndTurn => Some("end_turn"),
        AcpStopReason::Cancelled => Some("cancelled"),
        AcpStopReason::Refusal => Some("refusal"),
        AcpStopReason::MaxTokens => Some("max_tokens"),
        AcpStopReason::MaxTurnRequests => Some("max_turn_requests"),
        _ => None,
    }
}

/// "stopped after you denied: FIRST [and N more]" (or "after Tether refused", when a rule
/// of the run refused it, not the owner), then the agent's last message.
fn after_denial(first: &Denial, count: usize, final_message: &str) -> String {
    let who = if first.by_owner {
        "you denied"
    } else {
        "Tether refused"
    };
    let mut summary = format!("stopped after {who}: {}", first.what);
    if count > 1 {
        summary.push_str(&format!(" and {} more", count - 1));
    }
    if !final_message.is_empty() {
        summary.push('\n');
        summary.push_str(final_message);
    }
    summary
}

/// A failed turn's summary: why, how the agent ended, what it last said on stderr.
fn failure(why: &str, done: &Completion) -> String {
    let mut summary = why.to_owned();
    if let Some(status) = done.exit {
        summary.push_str(&format!(" ({})", exit_words(status)));
    }
    let tail: Vec<&String> = done
        .stderr_tail
        .iter()
        .rev()
        .take(STDERR_IN_SUMMARY)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if !tail.is_empty() {
        summary.push_str("; it said: ");
        summary.push_str(
            &tail
                .iter()
                .map(|line| line.as_str())
                .collect::<Vec<_>>()
                .join(" / "),
        );
    }
    summary
}

fn exit_words(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => "killed by a signal".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn by_owner(what: &str) -> Denial {
        Denial {
            what: what.to_owned(),
            by_owner: true,
        }
    }

    #[test]
    fn a_rule_that_refused_is_not_said_to_be_the_owner() {
        let mut turn = done(Turn::Ended(AcpStopReason::EndTurn));
        turn.denied = vec![Denial {
            what: "cat ~/.claude/x".to_owned(),
            by_owner: false,
        }];
        assert_eq!(
            check(turn),
            Ok((
                Outcome::Blocked,
                "stopped after Tether refused: cat ~/.claude/x\nI fixed the tests.".to_owned()
            ))
        );
    }

    fn done(turn: Turn) -> Completion {
        Completion {
            turn,
            final_message: "I fixed the tests.".to_owned(),
            choices: Vec::new(),
            denied: Vec::new(),
            exit: None,
            stderr_tail: Vec::new(),
            timeout_minutes: 7,
            stop: None,
        }
    }

    fn check(done: Completion) -> Result<(Outcome, String), StopReason> {
        completion(done).map(|params| (params.outcome, params.summary))
    }

    #[test]
    fn stop_reasons_become_outcomes() {
        let ok = |outcome, summary: &str| Ok((outcome, summary.to_owned()));
        assert_eq!(
            check(done(Turn::Ended(AcpStopReason::EndTurn))),
            ok(Outcome::Succeeded, "I fixed the tests.")
        );
        let mut silent = done(Turn::Ended(AcpStopReason::EndTurn));
        silent.final_message.clear();
        assert_eq!(
            check(silent),
            ok(
                Outcome::Succeeded,
                "the agent ended its turn without a message"
            )
        );
        assert_eq!(
            check(done(Turn::Ended(AcpStopReason::Refusal))),
            ok(
                Outcome::Failed,
                "the agent refused to go on (refusal): I fixed the tests."
            )
        );
        assert_eq!(
            check(done(Turn::Ended(AcpStopReason::MaxTokens)))
                .map(|(o, s)| (o, s.contains("max_tokens"))),
            Ok((Outcome::Failed, true))
        );
        assert_eq!(
            check(done(Turn::Ended(AcpStopReason::MaxTurnRequests)))
                .map(|(o, s)| (o, s.contains("max_turn_requests"))),
            Ok((Outcome::Failed, true))
        );
        // The agent's own cancel is not the owner's: it failed to do the job.
        assert_eq!(
            check(done(Turn::Ended(AcpStopReason::Cancelled))),
            ok(
                Outcome::Failed,
                "the agent cancelled its turn itself: I fixed the tests."
            )
        );
        assert_eq!(
            check(done(Turn::TimedOut)),
            ok(Outcome::Failed, "timed out after 7 min")
        );
    }

    #[test]
    fn stops_are_cancelled_or_not_reported() {
        let stopped = |reason, cooperated| done(Turn::Stopped { reason, cooperated });
        assert_eq!(
            check(stopped(StopReason::Cancel, true)),
            Ok((Outcome::Cancelled, "cancelled".to_owned()))
        );
        assert_eq!(
            check(stopped(StopReason::Cancel, false)).map(|(o, s)| (o, s.contains("was stopped"))),
            Ok((Outcome::Cancelled, true))
        );
        assert_eq!(
            check(stopped(StopReason::Shutdown, true)),
            Err(StopReason::Shutdown)
        );
        let mut lost = done(Turn::Ended(AcpStopReason::EndTurn));
        lost.stop = Some(StopReason::LeaseLost);
        assert_eq!(check(lost), Err(StopReason::LeaseLost));
    }

    #[test]
    fn failures_say_why_and_what_the_agent_said_last() {
        let mut crashed = done(Turn::Failed(
            "the agent did not finish the turn: the agent exited".to_owned(),
        ));
        crashed.stderr_tail = ["one", "two", "three", "four"].map(str::to_owned).to_vec();
        let summary = check(crashed).map(|(_, summary)| summary);
        assert_eq!(
            summary.as_deref(),
            Ok("the agent did not finish the turn: the agent exited; it said: two / three / four")
        );
    }

    #[test]
    fn unattended_choices_are_listed() {
        let mut turn = done(Turn::Ended(AcpStopReason::EndTurn));
        turn.choices = vec!["allowed without asking: Run `make`?".to_owned()];
        let params = completion(turn);
        let params = params.as_ref().map_err(|reason| *reason);
        assert_eq!(
            params.map(|params| params.summary.clone()),
            Ok("I fixed the tests.\nTaken without asking (unattended):\n- allowed without asking: Run `make`?".to_owned())
        );
        // The report is the worker's own, collected after the turn; the engine makes none.
        assert_eq!(params.ok().and_then(|params| params.report.clone()), None);
    }

    #[test]
    fn the_hard_floor_and_the_guard_refuse_before_the_agent_starts() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let root = tmp.path().canonicalize().unwrap_or_default();
        std::fs::create_dir_all(root.join("work")).unwrap_or_default();
        let guard = Guard::new(None, &root.join("data"));
        let engine = |program: &str, args: &[&str]| AcpEngine {
            name: "agent".into(),
            program: program.into(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            ..AcpEngine::default()
        };
        let folder = |path: std::path::PathBuf| SharedFolder {
            label: "work".into(),
            path,
        };
        let work = folder(root.join("work"));
        assert_eq!(
            checked_before_start(&engine("agent-acp", &[]), &work, &guard),
            Ok(root.join("work"))
        );
        let floor = checked_before_start(&engine("sudo", &["agent-acp"]), &work, &guard);
        assert!(
            floor.as_ref().is_err_and(|why| why.contains("hard floor")),
            "{floor:?}"
        );
        let data = checked_before_start(
            &engine("agent-acp", &[]),
            &folder(root.join("data")),
            &guard,
        );
        assert!(
            data.as_ref()
                .is_err_and(|why| why.starts_with("the guard refused")),
            "{data:?}"
        );
    }

    #[test]
    fn a_turn_ended_after_a_denial_is_blocked_naming_it() {
        let denied = |reason, titles: &[&str]| {
            let mut turn = done(Turn::Ended(reason));
            turn.denied = titles.iter().map(|title| by_owner(title)).collect();
            check(turn)
        };
        assert_eq!(
            denied(AcpStopReason::EndTurn, &["Write notes.md"]),
            Ok((
                Outcome::Blocked,
                "stopped after you denied: Write notes.md\nI fixed the tests.".to_owned()
            ))
        );
        for reason in [AcpStopReason::Cancelled, AcpStopReason::Refusal] {
            assert_eq!(
                denied(reason, &["Write notes.md", "$ make", "read .env.local"]),
                Ok((
                    Outcome::Blocked,
                    "stopped after you denied: Write notes.md and 2 more\nI fixed the tests."
                        .to_owned()
                ))
            );
        }
        let mut silent = done(Turn::Ended(AcpStopReason::EndTurn));
        silent.denied = vec![by_owner("$ make")];
        silent.final_message.clear();
        assert_eq!(
            check(silent),
            Ok((
                Outcome::Blocked,
                "stopped after you denied: $ make".to_owned()
            ))
        );
        // A limit reached is a failure of its own; the owner's Cancel stays a cancel.
        assert_eq!(
            denied(AcpStopReason::MaxTokens, &["$ make"]).map(|(o, _)| o),
            Ok(Outcome::Failed)
        );
        let mut cancelled = done(Turn::Stopped {
            reason: StopReason::Cancel,
            cooperated: true,
        });
        cancelled.denied = vec![by_owner("$ make")];
        assert_eq!(check(cancelled).map(|(o, _)| o), Ok(Outcome::Cancelled));
    }

    #[test]
    fn a_sign_in_needed_is_blocked_not_failed() {
        let place = SignInPlace {
            engine: "claude",
            engine_env: &[],
            hint: Some("claude /login"),
            reads_files: true,
        };
        let methods = sign_in::methods(&json!({"authMethods": [
            {"id": "claude-login", "name": "Log in with Claude Code",
             "description": "Run `claude /login` in the terminal"}
        ]}));
        let auth = agent_client_protocol::Error::new(
            agent_client_protocol::ErrorCode::AUTH_REQUIRED,
            "Authentication required".to_owned(),
        );
        let turn = session_refused(&methods, &auth, place);
        let Turn::Blocked(why) = &turn else {
            panic!("{turn:?}");
        };
        assert!(
            why.contains("Log in with Claude Code (Run `claude /login` in the terminal)")
                && why.contains("run `claude /login` on this computer")
                && why.contains("`tether-agent engine check claude`"),
            "{why}"
        );
        assert_eq!(check(done(turn)).map(|(o, _)| o), Ok(Outcome::Blocked));
        let other = agent_client_protocol::Error::new(
            agent_client_protocol::ErrorCode::INTERNAL_ERROR,
            "boom".to_owned(),
        );
        assert_eq!(
            session_refused(&methods, &other, place),
            Turn::Failed("the agent did not start a session: boom".to_owned())
        );
    }
}
