//! The job page, which follows a running job until it ends and then shows
//! what it changed, its folder, and how to run it again or carry on from it. A member of a
//! space job's space who is not its owner gets a page of what the space may see of it.

use std::collections::HashMap;

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use tether_protocol::capabilities::EngineKind;
use tether_protocol::decisions::DecisionState;
use tether_protocol::devices::Device;
use tether_protocol::jobs::{Job, JobState, TimelineKind};
use tether_protocol::{Code, JobId};

use super::attachments::task_attachments;
use super::changes::{changes_listed, changes_section};
use super::delivery::{asked_text, delivery_section};
use super::engine_session::session_section;
use super::follow_up::{chain, load_chain, next_steps, Chain};
use super::layout::{duration_text, error_page, human_size, moment, page};
use super::redirects::signin_redirect;
use super::results::{gallery, held_items, listed_file, report_section, used_section};
use super::space_job::{self, space_line, MemberJob, SpaceLink};
use super::timeline::timeline;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::timeline::{is_exit, terminal_line};
use crate::state::AppState;

pub async fn job_page(
    state: web::Data<AppState>,
    caller: Option<Caller>,
    path: web::Path<String>,
) -> HttpResponse {
    let raw_id = path.into_inner();
    let Some(caller) = caller else {
        return signin_redirect(&format!(
            "/jobs/{}",
            JobId::parse(&raw_id)
                .map(|id| id.to_string())
                .unwrap_or_default()
        ));
    };
    let Ok(job_id) = JobId::parse(&raw_id) else {
        return error_page(&caller, &ApiError::not_found("job"));
    };
    let now = state.store.clock().now();
    match load(&state, &caller, &job_id).await {
        Ok(Loaded::Owner(context)) => {
            page(&context.job.title, Some(&caller), job_view(&context, now))
        }
        Ok(Loaded::Member(view)) => page(&view.job.title, Some(&caller), member_view(&view, now)),
        Err(error) => error_page(&caller, &error),
    }
}

/// A job with what its page names besides it: its computer and its neighbours in a chain.
struct JobContext {
    job: Job,
    /// `None` when the computer's record is gone.
    device: Option<Device>,
    chain: Chain,
    /// The space it is in, when the owner is still in it.
    space: Option<SpaceLink>,
}

/// The owner's whole page, or a space member's view of someone else's job.
enum Loaded {
    Owner(Box<JobContext>),
    Member(Box<MemberJob>),
}

async fn load(state: &AppState, caller: &Caller, job_id: &JobId) -> Result<Loaded, ApiError> {
    let account_id = &caller.account.id;
    let (mut job, owner) = crate::jobs::get_visible(&state.store, account_id, job_id).await?;
    job.queued_because =
        crate::jobs::queue_reason(&state.store, &state.config, &owner, &job).await?;
    if job.shared_view {
        let view = space_job::load(state, caller, job, &owner).await?;
        return Ok(Loaded::Member(Box::new(view)));
    }
    let device = crate::devices::get(&state.store, account_id, &job.device_id, &state.config).await;
    let device = unless_not_found(device)?;
    let chain = load_chain(state, caller, &job).await?;
    let space = space_job::space_of(state, account_id, &job).await?;
    Ok(Loaded::Owner(Box::new(JobContext {
        job,
        device,
        chain,
        space,
    })))
}

fn unless_not_found<T>(result: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match result {
        Ok(found) => Ok(Some(found)),
        Err(error) if error.code() == Code::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

fn job_view(context: &JobContext, now: DateTime<Utc>) -> Markup {
    let job = &context.job;
    let last_seq = job.events.last().map_or(0, |event| event.seq);
    let failing = failing_step(job);
    // A coding agent's run reads best as its timeline; a recipe's as its log. The engine's
    // kind as its computer publishes it, else what the run printed so far.
    let engine_kind = context
        .device
        .as_ref()
        .and_then(|device| device.capabilities.as_ref())
        .and_then(|capabilities| {
            let mut engines = capabilities.engines.iter();
            engines.find(|engine| engine.name == job.spec.engine)
        })
        .map(|engine| engine.kind);
    let printed_steps = job.events.iter().any(|event| {
        event.entry.is_some_and(|entry| {
            matches!(
                entry.kind,
                TimelineKind::Message
                    | TimelineKind::Plan
                    | TimelineKind::Tool
                    | TimelineKind::Command
            )
        })
    });
    let timeline_first = engine_kind.map_or(printed_steps, |kind| kind == EngineKind::Acp);
    let run = html! {
        section.run #run aria-labelledby="run-heading" {
            h2 #run-heading { "The run" }
            div #job-run data-refresh data-last-seq=(last_seq) { (timeline(job, now)) }
        }
    };
    let log = log_section(job, failing.as_ref().and_then(|failing| failing.line));
    html! {
        section.job data-job-live={ "/api/jobs/" (job.id) } data-state=(job.state.as_str()) data-last-seq=(last_seq) {
            div.job-head {
                h1 { (job.title) }
                p.job-status {
                    span data-field="state" class={ "badge state-" (job.state.as_str()) } { (job.state.as_str()) }
                    // Only a run carried on or tried again has an attempt worth naming.
                    span.muted data-field="attempt" hidden[job.attempt < 2] { "attempt " (job.attempt) }
                    span #job-took data-refresh {
                        @if let Some(duration) = run_duration(job, now) { "for " (duration) }
                    }
                    span { "on " (computer_link(context.device.as_ref())) }
                    (space_line(context.space.as_ref()))
                }
                div #job-failing data-refresh { (failing_view(failing.as_ref())) }
                p data-field="outcome" { @if let Some(summary) = outcome_text(job) { (sentences(summary)) } }
                (chain(&context.chain))
                @if job.state == JobState::Running {
                    p { a.button.secondary href={ "/computers/" (job.device_id) "/console?watch=" (job.id) } { "Watch" }
                        " its commands as they run (read-only, sealed for your computer)" }
                }
                @if !job.state.is_final() {
                    form.cancel data-while-active data-api={ "/api/jobs/" (job.id) "/cancel" } data-confirm="Stop this job?" {
                        button.danger type="submit" { "Cancel" }
                        span.error {}
                    }
                }
            }
            // The worker's own word leads what the run hands back.
            div #job-report data-refresh { (report_section(job)) }
            (section_links(job, context.device.as_ref()))
            (pending_questions(job))
            @if timeline_first { (run) (log) } @else { (log) (run) }
            // The regions marked data-refresh are rendered again when the job's state
            // changes (app.js), so what an ended run brings appears without a reload.
            div #job-changes data-refresh {
                @if let Some(changes) = &job.changes { (changes_section(&job.id, changes)) }
            }
            div #job-delivery data-refresh {
                @if let Some(report) = &job.delivery { (delivery_section(report, job.spec.git.as_ref())) }
            }
            div #job-end data-refresh {
                (gallery(job))
                (held_items(job))
                (session_section(job, context.device.as_ref(), engine_kind))
                (evidence_list(job))
                (used_section(job))
                (next_steps(job, context.device.as_ref(), &context.chain))
            }
            (files_section(job))
            section.details #details aria-labelledby="details-heading" {
                h2 #details-heading { "Details" }
                @if !job.spec.prompt.is_empty() { p.prompt { (job.spec.prompt) } }
                (task_attachments(&job.id, &job.spec.attachments, &job.spec.links))
                (where_it_runs(job, context.device.as_ref()))
                (when_it_ran(job, now))
                p.muted {
                    @if job.spec.network { "Network on" } @else { "Network off" }
                    @if !job.spec.secrets.is_empty() {
                        " · secrets: "
                        @for (n, name) in job.spec.secrets.iter().enumerate() {
                            @if n > 0 { ", " } code { (name) }
                        }
                    }
                }
            }
        }
        script src="/assets/log.js" defer {}
        script src="/assets/job.js" defer {}
        script src="/assets/results.js" defer {}
    }
}

/// The page a member of the job's space sees: what `jobs::shared_view` lets through, and
/// nothing whose route is the owner's — no log (its lines and raw text), diffs or folder
/// browser, questions, Cancel, Run again, Continue, Watch or console, held files. The same
/// `data-job-live` root and `data-refresh` regions, so `app.js` follows it alike.
fn member_view(view: &MemberJob, now: DateTime<Utc>) -> Markup {
    let job = &view.job;
    let last_seq = job.events.last().map_or(0, |event| event.seq);
    let owner = view
        .owner_name
        .as_deref()
        .unwrap_or("someone no longer in the space");
    let computer = view.computer.as_deref();
    html! {
        section.job.shared-job data-job-live={ "/api/jobs/" (job.id) } data-state=(job.state.as_str()) data-last-seq=(last_seq) {
            div.job-head {
                h1 { (job.title) }
                p.job-status {
                    span data-field="state" class={ "badge state-" (job.state.as_str()) } { (job.state.as_str()) }
                    span.muted data-field="attempt" hidden[job.attempt < 2] { "attempt " (job.attempt) }
                    span #job-took data-refresh {
                        @if let Some(duration) = run_duration(job, now) { "for " (duration) }
                    }
                    span data-field="computer" { "on " (computer_name(computer)) }
                    (space_line(view.space.as_ref()))
                }
                p.shared-note data-field="owner" {
                    "Assigned by " strong { (owner) } ". You see what the run did; its command \
                     output, file contents, questions and secrets stay with its computer's owner."
                }
                p data-field="outcome" { @if let Some(summary) = outcome_text(job) { (sentences(summary)) } }
            }
            div #job-report data-refresh { (report_section(job)) }
            nav.section-links #job-sections data-refresh aria-label="This job" {
                @if job.outcome.as_ref().is_some_and(|o| o.report.is_some()) { a href="#report" { "Report" } }
                a href="#run" { "Timeline" }
                @if job.changes.is_some() { a href="#job-changes" { "Changes" } }
                @if job.delivery.is_some() { a href="#job-delivery" { "Delivery" } }
                a href="#details" { "Details" }
            }
            section.run #run aria-labelledby="run-heading" {
                h2 #run-heading { "The run" }
                div #job-run data-refresh data-last-seq=(last_seq) { (timeline(job, now)) }
            }
            div #job-changes data-refresh {
                @if let Some(changes) = &job.changes { (changes_listed(changes)) }
            }
            div #job-delivery data-refresh {
                @if let Some(report) = &job.delivery { (delivery_section(report, job.spec.git.as_ref())) }
            }
            div #job-end data-refresh {
                (gallery(job))
                (evidence_list(job))
                (used_section(job))
            }
            section.details #details aria-labelledby="details-heading" {
                h2 #details-heading { "Details" }
                @if !job.spec.prompt.is_empty() { p.prompt { (job.spec.prompt) } }
                dl.facts {
                    dt { "Computer" } dd { (computer_name(computer)) }
                    dt { "Folder" } dd { code { (job.spec.folder) } }
                    dt { "Engine" } dd { (job.spec.engine) }
                    dt { "Mode" } dd { (job.spec.mode.as_str()) }
                    @if let Some(git) = &job.spec.git { dt { "Git" } dd data-field="git" { (asked_text(git)) } }
                }
                (when_it_ran(job, now))
                p.muted { @if job.spec.network { "Network on" } @else { "Network off" } }
            }
        }
    }
}

/// The computer's name as a member sees it: no link, its card is the owner's.
fn computer_name(name: Option<&str>) -> Markup {
    html! {
        @match name {
            Some(name) => (name),
            None => span.muted { "a removed computer" },
        }
    }
}

/// The sections below the log, one tap each: a bar that stays at the top while the page
/// scrolls. Rendered again when the job's state changes (what an ended run brings).
fn section_links(job: &Job, device: Option<&Device>) -> Markup {
    let ended = job.state.is_final();
    let can_run_again = ended && device.is_some_and(|device| device.revoked_at.is_none());
    html! {
        nav.section-links #job-sections data-refresh aria-label="This job" {
            @if job.outcome.as_ref().is_some_and(|o| o.report.is_some()) { a href="#report" { "Report" } }
            a href="#log" { "Log" }
            a href="#run" { "Timeline" }
            @if job.changes.is_some() { a href="#job-changes" { "Changes" } }
            @if job.delivery.is_some() { a href="#job-delivery" { "Delivery" } }
            a href="#files" { "Files" }
            @if can_run_again {
                a href="#run-again-heading" { "Run again" }
                a href="#continue-heading" { "Continue" }
            }
            a href="#details" { "Details" }
        }
    }
}

/// The computer, linked to its card on Computers.
fn computer_link(device: Option<&Device>) -> Markup {
    html! {
        @match device {
            Some(device) => {
                a href={ "/computers#device-" (device.id) } { (device.name) }
                @if device.revoked_at.is_some() { span.muted { " (no longer paired)" } }
                @else if !device.online { span.muted { " (offline)" } }
            }
            None => span.muted { "a removed computer" },
        }
    }
}

/// A summary a sentence a line (`white-space: pre-line` shows the breaks): a sentence ends
/// at `.`, `!` or `?` before a space, or before a capital letter (an agent's messages run
/// together: "Made the change.Finished."). `app.js`'s `outcomeText` splits alike.
fn sentences(summary: &str) -> String {
    let mut out = String::with_capacity(summary.len());
    let mut chars = summary.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        let next = chars.peek().copied();
        let ends = next.is_some_and(|next| next == ' ' || next.is_uppercase());
        if matches!(c, '.' | '!' | '?') && ends {
            while chars.peek() == Some(&' ') {
                chars.next();
            }
            out.push('\n');
        }
    }
    out
}

/// The step a run that did not succeed stopped at: the last command that failed, else its
/// program's exit; and the log's line to open at.
struct Failing {
    /// `$ command`, or the engine's name.
    step: String,
    /// `exit code 2`, `killed by SIGKILL`.
    exit: Option<String>,
    /// The log's line with the error (its `seq`).
    line: Option<i64>,
}

fn failing_step(job: &Job) -> Option<Failing> {
    if !matches!(
        job.state,
        JobState::Failed | JobState::Blocked | JobState::Interrupted
    ) {
        return None;
    }
    let mut commands: HashMap<i64, &str> = HashMap::new();
    let mut failed = None;
    for event in &job.events {
        let Some(entry) = event
            .entry
            .filter(|entry| entry.kind == TimelineKind::Command)
        else {
            continue;
        };
        match entry.group {
            None => {
                commands.insert(event.seq, event.text.as_str());
            }
            Some(group) => {
                let rest = terminal_line(&event.text).map_or(event.text.as_str(), |(_, rest)| rest);
                if is_exit(rest) && rest != "exit code 0" {
                    failed = commands
                        .get(&group)
                        .map(|command| (*command, rest, event.seq));
                }
            }
        }
    }
    let error = error_line(job);
    if let Some((command, exit, seq)) = failed {
        return Some(Failing {
            step: command.to_owned(),
            exit: Some(exit.to_owned()),
            line: error.or(Some(seq)),
        });
    }
    let exit = job
        .outcome
        .as_ref()
        .and_then(|outcome| outcome.exit_code)
        .map(|code| format!("exit code {code}"));
    Some(Failing {
        step: job.spec.engine.clone(),
        exit,
        line: error,
    })
}

/// The last line of output that reads like an error, else the last line of output.
fn error_line(job: &Job) -> Option<i64> {
    const WORDS: [&str; 8] = [
        "error",
        "fail",
        "fatal",
        "panic",
        "exception",
        "traceback",
        "denied",
        "refused",
    ];
    let printed = || {
        job.events
            .iter()
            .rev()
            .filter(|event| event.kind == "output")
    };
    printed()
        .find(|event| {
            let text = event.text.to_lowercase();
            WORDS.iter().any(|word| text.contains(word))
                && !text.contains("0 errors")
                && !text.contains("0 failed")
        })
        .or_else(|| printed().next())
        .map(|event| event.seq)
}

fn failing_view(failing: Option<&Failing>) -> Markup {
    html! {
        @if let Some(failing) = failing {
            p.failing {
                "Stopped at " code { (failing.step) }
                @if let Some(exit) = &failing.exit { " · " span.exit-failed { (exit) } }
                @if let Some(line) = failing.line { " · " a href={ "#L" (line) } { "line " (line) } }
            }
        }
    }
}

/// Lines of the run the page carries for the log to show at once: its end. The viewer
/// reads the rest a page at a time (`GET /api/jobs/{id}/lines`).
const LOG_TAIL_LINES: usize = 2000;

/// The run's log (`assets/log.js`): numbered lines, each with its time and colours, search,
/// links to lines, following the end while it runs; the raw text to download.
fn log_section(job: &Job, error_line: Option<i64>) -> Markup {
    let last_seq = job.events.last().map_or(0, |event| event.seq);
    let from = job.events.len().saturating_sub(LOG_TAIL_LINES);
    let tail: Vec<(i64, i64, &str, &str)> = job
        .events
        .iter()
        .skip(from)
        .map(|event| {
            let at = event.at.timestamp_millis();
            (event.seq, at, event.kind.as_str(), event.text.as_str())
        })
        .collect();
    let tail = serde_json::to_string(&tail).unwrap_or_else(|_| "[]".to_owned());
    html! {
        section.log-section #log aria-labelledby="log-heading" {
            div.log-head {
                h2 #log-heading { "Log" }
                a.log-download href={ "/api/jobs/" (job.id) "/log" } download { "Download" }
            }
            div.log data-log={ "/api/jobs/" (job.id) } data-state=(job.state.as_str())
                data-total=(last_seq) data-error-line=[error_line] data-tail=(tail) {
                div.log-tools role="search" {
                    input type="search" aria-label="Search the log" placeholder="Search the log" enterkeyhint="search";
                    span.log-count role="status" {}
                    button.secondary type="button" data-log-previous aria-label="Previous match" { "↑" }
                    button.secondary type="button" data-log-next aria-label="Next match" { "↓" }
                }
                div.log-scroll tabindex="0" role="region" aria-label="Log" {
                    div.log-spacer { div.log-rows {} }
                }
                button.log-jump type="button" data-log-jump hidden { "Jump to latest" }
                p.log-status role="status" {}
                noscript { p { "Showing the log needs JavaScript; " a href={ "/api/jobs/" (job.id) "/log" } { "download it" } " instead." } }
            }
        }
    }
}

/// The computer (linked to its card on Computers), folder, engine and mode.
fn where_it_runs(job: &Job, device: Option<&Device>) -> Markup {
    html! {
        dl.facts {
            dt { "Computer" }
            dd data-field="computer" {
                @match device {
                    Some(device) => {
                        a href={ "/computers#device-" (device.id) } { (device.name) }
                        @if device.revoked_at.is_some() { span.muted { " (no longer paired)" } }
                        @else if !device.online { span.muted { " (offline)" } }
                    }
                    None => span.muted { "a removed computer" },
                }
            }
            dt { "Folder" } dd { code { (job.spec.folder) } }
            dt { "Engine" } dd { (job.spec.engine) }
            dt { "Mode" } dd { (job.spec.mode.as_str()) }
            @if let Some(git) = &job.spec.git { dt { "Git" } dd data-field="git" { (asked_text(git)) } }
        }
    }
}

/// Created, started, ended and how long it took, and why a queued job waits. Rendered again
/// on each change of state.
fn when_it_ran(job: &Job, now: DateTime<Utc>) -> Markup {
    let waiting = job
        .queued_because
        .as_deref()
        .filter(|_| job.state == JobState::Queued);
    html! {
        div #job-when data-refresh {
            dl.facts {
                dt { "Created" } dd { (moment(job.created_at, now)) }
                @if let Some(at) = job.started_at { dt { "Started" } dd { (moment(at, now)) } }
                @if let Some(at) = job.ended_at { dt { "Ended" } dd { (moment(at, now)) } }
                @if let Some(duration) = run_duration(job, now) {
                    dt { "Duration" } dd data-field="duration" { (duration) }
                }
            }
            p.queued-because data-field="queued-because" hidden[waiting.is_none()] {
                @if let Some(reason) = waiting { (reason) }
            }
        }
    }
}

/// How long a run took, or has taken so far: then app.js keeps counting from the server's
/// `now`, so a browser clock set wrong does not matter. Nothing before it started.
pub(super) fn run_duration(job: &Job, now: DateTime<Utc>) -> Option<Markup> {
    let started = job.started_at?;
    if job.state.is_final() {
        let ended = job.ended_at?;
        return Some(html! { span { (duration_text((ended - started).num_seconds())) } });
    }
    Some(html! {
        span data-since=(started.timestamp_millis()) data-now=(now.timestamp_millis()) {
            (duration_text((now - started).num_seconds()))
        }
    })
}

/// The outcome's summary, unless it only repeats the state ("cancelled" beside the
/// cancelled badge). app.js's `outcomeText` applies the same rule.
fn outcome_text(job: &Job) -> Option<&str> {
    let summary = job.outcome.as_ref()?.summary.trim();
    let repeats = summary
        .trim_end_matches('.')
        .eq_ignore_ascii_case(job.state.as_str());
    (!summary.is_empty() && !repeats).then_some(summary)
}

/// Browsing the job's folder, live from its computer, loaded only when asked
/// (`assets/job.js`).
fn files_section(job: &Job) -> Markup {
    html! {
        section.files #files aria-labelledby="files-heading" {
            h2 #files-heading { "Files" }
            button.secondary type="button" data-files-toggle aria-expanded="false" aria-controls="files-browser" {
                "Browse files"
            }
            div #files-browser hidden data-files={ "/api/jobs/" (job.id) } data-folder=(job.spec.folder) {
                nav.breadcrumbs aria-label="Folder path" {}
                p.files-status role="status" {}
                ul.tree {}
                div.file-view {}
            }
        }
    }
}

/// The questions waiting for an answer, linked to their cards on the timeline, where they
/// stand among the lines; the decisions stream keeps both current (`data-job-decisions`,
/// `assets/needs_me.js`).
fn pending_questions(job: &Job) -> Markup {
    let pending: Vec<_> = job
        .decisions
        .iter()
        .filter(|decision| decision.state == DecisionState::Pending)
        .collect();
    html! {
        section.decisions data-job-decisions={ "/api/jobs/" (job.id) } hidden[pending.is_empty()] {
            h2 { "Waiting for your answer" }
            ul.decision-links {
                @for decision in pending {
                    li { a href={ "#decision-" (decision.id) } { (decision.question) } }
                }
            }
        }
    }
}

/// The files the run attached: a download link each, or a note for those its computer kept.
fn evidence_list(job: &Job) -> Markup {
    html! {
        @if job.evidence.iter().any(listed_file) {
            h2 { "Evidence" }
            ul.evidence {
                @for item in job.evidence.iter().filter(|item| listed_file(item)) {
                    li data-evidence=(item.id) {
                        @if item.local {
                            strong { (item.name) }
                        } @else {
                            a href={ "/api/jobs/" (job.id) "/evidence/" (item.id) } { (item.name) }
                        }
                        span.muted { " · " (item.kind) " · " (human_size(item.size)) }
                        @if item.local { span.muted { " · on the computer, not uploaded" } }
                        @if let Some(caption) = &item.caption { div.muted { (caption) } }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sentences;

    #[test]
    fn a_summary_reads_a_sentence_a_line() {
        assert_eq!(sentences("exit code 3"), "exit code 3");
        assert_eq!(
            sentences("Built it. Tests pass!  Done?"),
            "Built it.\nTests pass!\nDone?"
        );
        assert_eq!(
            sentences("Making the change.Finished."),
            "Making the change.\nFinished."
        );
        assert_eq!(
            sentences("Bumped to v1.2.3 today"),
            "Bumped to v1.2.3 today"
        );
    }
}
