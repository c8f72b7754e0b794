//! What comes after a run, on its job page: the same job again (with the prompt as it was,
//! or a new one), or a follow-up that carries on from what the run left in the folder, and
//! the chain of runs that run one another again or continue one another, numbered.
//!
//! Both forms post to the API from the browser (`POST /api/jobs/{id}/rerun`, `POST
//! /api/jobs` with `continues`), and both carry every setting of the earlier job — engine,
//! mode, network, secrets, git choices, time limit — as controls filled in with its values,
//! so what is sent is what the form shows. `assets/assign.js` keeps the `git` field equal to
//! the Git choices, as on Assign.

use maud::{html, Markup};
use tether_protocol::devices::Device;
use tether_protocol::git::{BranchChoice, Delivery, GitOptions, MergeChoice};
use tether_protocol::jobs::{Job, JobSpec};
use tether_protocol::secrets::SavedName;
use tether_protocol::{Code, JobId};

use super::assign::mode_field;
use super::attachments::attach_fields;
use super::delivery::{asked_text, FIELD_WORDS};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::jobs::MAX_TITLE_CHARS;
use crate::state::AppState;

/// A job this one links to, with its title and run number when they could be read.
pub(super) struct Linked {
    pub id: JobId,
    pub title: Option<String>,
    pub run: Option<u32>,
}

/// Where a job stands among the runs made from one another, and the secrets its computer
/// holds (the choices of Run again and Continue).
pub(super) struct Chain {
    run_number: Option<u32>,
    rerun_of: Option<Linked>,
    continues: Option<Linked>,
    reruns: Vec<Linked>,
    continued_by: Option<Linked>,
    held: Vec<SavedName>,
}

/// Reads what [`chain`] and [`next_steps`] show of `job`'s neighbours.
///
/// # Errors
/// A database error.
pub(super) async fn load_chain(
    state: &AppState,
    caller: &Caller,
    job: &Job,
) -> Result<Chain, ApiError> {
    let mut reruns = Vec::with_capacity(job.reruns.len());
    for id in &job.reruns {
        reruns.push(linked(state, caller, id).await?);
    }
    let held = if job.state.is_final() {
        let listed =
            crate::devices::secrets::list(&state.store, &caller.account.id, &job.device_id).await;
        match listed {
            Ok(listing) => listing.names,
            // A computer that is gone holds nothing to choose from.
            Err(error) if error.code() == Code::NotFound => Vec::new(),
            Err(error) => return Err(error),
        }
    } else {
        Vec::new()
    };
    Ok(Chain {
        run_number: job.run_number,
        rerun_of: maybe_linked(state, caller, job.rerun_of.as_ref()).await?,
        continues: maybe_linked(state, caller, job.continues.as_ref()).await?,
        reruns,
        continued_by: maybe_linked(state, caller, job.continued_by.as_ref()).await?,
        held,
    })
}

async fn maybe_linked(
    state: &AppState,
    caller: &Caller,
    job_id: Option<&JobId>,
) -> Result<Option<Linked>, ApiError> {
    match job_id {
        Some(job_id) => Ok(Some(linked(state, caller, job_id).await?)),
        None => Ok(None),
    }
}

async fn linked(state: &AppState, caller: &Caller, job_id: &JobId) -> Result<Linked, ApiError> {
    let found = crate::jobs::chain_link(&state.store, &caller.account.id, job_id).await?;
    let (title, run) = found.map_or((None, None), |(title, run)| (Some(title), Some(run)));
    Ok(Linked {
        id: job_id.clone(),
        title,
        run,
    })
}

/// "Run 3 · again from #2 …" or "Run 2 · continues #1 …", then the runs made from this one:
/// "Run again as #3 …, #4 …" and "Continued by #5 …", each a link to that job.
pub(super) fn chain(chain: &Chain) -> Markup {
    let earlier = chain.rerun_of.is_some() || chain.continues.is_some();
    html! {
        @if earlier || chain.run_number.is_some() || !chain.reruns.is_empty() || chain.continued_by.is_some() {
            div.chain {
                @if earlier || chain.run_number.is_some() {
                    p data-field="run" {
                        @if let Some(run) = chain.run_number { "Run " (run) }
                        @if let Some(again) = &chain.rerun_of {
                            @if chain.run_number.is_some() { " · " }
                            span data-field="rerun-of" { "again from " (link(again, "an earlier job")) }
                        }
                        @if let Some(continued) = &chain.continues {
                            @if chain.run_number.is_some() { " · " }
                            span data-field="continues" { "continues " (link(continued, "an earlier job")) }
                        }
                    }
                }
                @if !chain.reruns.is_empty() {
                    p data-field="reruns" {
                        "Run again as "
                        @for (n, again) in chain.reruns.iter().enumerate() {
                            @if n > 0 { ", " }
                            (link(again, "a later job"))
                        }
                    }
                }
                @if let Some(later) = &chain.continued_by {
                    p data-field="continued-by" { "Continued by " (link(later, "a later job")) }
                }
            }
        }
        // The forms of Run again and Continue may arrive with a refresh of the page's end
        // (app.js), whose scripts do not run: the script is loaded with the page.
        script src="/assets/assign.js" defer {}
    }
}

/// Run again and Continue, for an ended job whose computer can still take work.
pub(super) fn next_steps(job: &Job, device: Option<&Device>, chain: &Chain) -> Markup {
    if !job.state.is_final() {
        return html! {};
    }
    let Some(device) = device.filter(|device| device.revoked_at.is_none()) else {
        return html! {
            p.muted { "Its computer is no longer paired, so this job cannot run there again." }
        };
    };
    html! {
        section.next-steps aria-labelledby="run-again-heading" {
            h2 #run-again-heading { "Run again" }
            (rerun_form(job, device, &chain.held))
        }
        section.next-steps aria-labelledby="continue-heading" {
            h2 #continue-heading { "Continue" }
            @match &chain.continued_by {
                Some(later) => p { "This job was continued already: go on from " (link(later, "the later job")) "." },
                None => (continue_form(job, device, &chain.held)),
            }
        }
    }
}

/// The same job as a new one, on the same computer and folder; the prompt and every
/// setting can be changed first. A new branch the earlier run made gets a new one.
fn rerun_form(job: &Job, device: &Device, held: &[SavedName]) -> Markup {
    let git = job.spec.git.clone().map(|mut git| {
        if matches!(git.branch, Some(BranchChoice::New(_))) {
            git.branch = Some(BranchChoice::New(String::new()));
        }
        git
    });
    html! {
        form.stack data-api={ "/api/jobs/" (job.id) "/rerun" } data-redirect="/jobs/{id}" data-fields=(FIELD_WORDS) {
            p.muted { "The same job on the same computer and folder, from the folder as it is now." }
            label { "Prompt"
                textarea name="prompt" maxlength="20000" { (job.spec.prompt) } }
            (attach_fields("rerun", &job.spec.attachments, Some(&job.id), &job.spec.links))
            (settings("rerun", &job.spec, git.as_ref(), device, held))
            p.error role="alert" {}
            div { button type="submit" { "Run again" } }
        }
    }
}

/// A follow-up on the same computer and folder, with every setting of this job (editable);
/// it starts once this job ended and works on what it left. A new branch this run made is
/// the branch the follow-up goes on with.
fn continue_form(job: &Job, device: &Device, held: &[SavedName]) -> Markup {
    let spec = &job.spec;
    let git = spec.git.clone().map(|mut git| {
        if let Some(BranchChoice::New(name)) = &git.branch {
            git.branch = Some(BranchChoice::Existing(name.clone()));
        }
        git
    });
    html! {
        form.stack data-api="/api/jobs" data-redirect="/jobs/{id}" data-fields=(FIELD_WORDS) {
            input type="hidden" name="deviceId" value=(job.device_id);
            input type="hidden" name="continues" value=(job.id);
            input type="hidden" name="folder" value=(spec.folder);
            p.muted { "A follow-up carries on from what this run left in " code { (spec.folder) } ", with the same settings." }
            label { "Title"
                input type="text" name="title" maxlength="200" required value=(follow_up_title(&job.title)); }
            label { "What next"
                textarea name="prompt" maxlength="20000" required {} }
            // The earlier job's files are offered again (copies, removable), as on Run again.
            (attach_fields("continue", &spec.attachments, Some(&job.id), &spec.links))
            (settings("continue", spec, git.as_ref(), device, held))
            @if git.is_none() {
                // Sent as null: a follow-up without `git` would keep the earlier job's.
                input type="hidden" name="git" value="null" data-json;
            }
            p.error role="alert" {}
            div { button type="submit" { "Continue" } }
        }
    }
}

/// The earlier job's settings as controls, folded under one line that names them.
fn settings(
    prefix: &str,
    spec: &JobSpec,
    git: Option<&GitOptions>,
    device: &Device,
    held: &[SavedName],
) -> Markup {
    let engines: Vec<&str> = device
        .capabilities
        .as_ref()
        .map(|caps| {
            caps.engines
                .iter()
                .map(|engine| engine.name.as_str())
                .collect()
        })
        .unwrap_or_default();
    let mut secrets: Vec<(&str, Option<&SavedName>)> = held
        .iter()
        .map(|saved| (saved.name.as_str(), Some(saved)))
        .collect();
    for name in &spec.secrets {
        if !held.iter().any(|saved| &saved.name == name) {
            secrets.push((name, None));
        }
    }
    html! {
        details.settings {
            summary {
                "Settings: " (spec.engine) " · " (spec.mode.as_str()) " · network "
                @if spec.network { "on" } @else { "off" }
                " · " (spec.timeout_minutes) " min"
                @if !spec.secrets.is_empty() { " · secrets: " (spec.secrets.join(", ")) }
                " · "
                @match git { Some(git) => (asked_text(git)), None => "no git delivery" }
            }
            div.stack {
                label { "Engine"
                    select name="engine" {
                        @for name in &engines {
                            option value=(name) selected[*name == spec.engine] { (name) }
                        }
                        @if !engines.contains(&spec.engine.as_str()) {
                            option value=(spec.engine) selected { (spec.engine) " (no longer published)" }
                        }
                    }
                }
                (mode_field(prefix, spec.mode))
                label.inline { input type="checkbox" name="network" checked[spec.network]; "Allow network access" }
                @if !secrets.is_empty() {
                    fieldset.secrets {
                        legend { "Secrets this job may use" }
                        @for (name, saved) in &secrets {
                            label.inline {
                                input type="checkbox" name="secrets" value=(name) data-list
                                    checked[spec.secrets.iter().any(|chosen| chosen == name)];
                                code { (name) }
                                @match saved {
                                    Some(saved) => @if let Some(sites) = &saved.allow {
                                        " " span.muted { "only to " (sites.join(", ")) ", by reference" }
                                    },
                                    None => { " " span.muted { "(" (device.name) " does not hold it)" } }
                                }
                            }
                        }
                    }
                }
                @match git {
                    Some(git) => (git_choices(prefix, device, git)),
                    None => p.muted { "No git delivery: the work stays as files in the folder, as before." },
                }
                label { "Time limit (minutes)"
                    input type="number" name="timeoutMinutes" value=(spec.timeout_minutes) min="1" max="1440"; }
            }
        }
    }
}

/// Assign's Git choices (same names, so `assets/assign.js` composes `git` from them), filled
/// in with `start`; ids start with `prefix`, as a job page holds two such forms.
fn git_choices(prefix: &str, device: &Device, start: &GitOptions) -> Markup {
    const DELIVERIES: [(Delivery, &str, &str); 4] = [
        (Delivery::Local, "Local only", "Leaves the changes as files in the folder: no commits (one made anyway is undone, its changes kept)."),
        (Delivery::Commit, "Commit", "Commits the work on the branch; nothing leaves the computer."),
        (Delivery::Push, "Push", "Commits and pushes the branch (never forced)."),
        (Delivery::PullRequest, "Pull request", "Pushes, then opens a pull request into the base branch."),
    ];
    const MERGES: [(MergeChoice, &str, &str); 3] = [
        (MergeChoice::Ask, "ask", "When I allow it"),
        (MergeChoice::Auto, "auto", "Automatically when checks pass"),
        (MergeChoice::Never, "never", "Never"),
    ];
    let hosts = device
        .capabilities
        .as_ref()
        .and_then(|caps| caps.git.as_ref())
        .map(|git| git.github_hosts.clone())
        .unwrap_or_default();
    let (branch, new_name, existing_name) = match &start.branch {
        None | Some(BranchChoice::Current(_)) => ("current", "", ""),
        Some(BranchChoice::New(name)) => ("new", name.as_str(), ""),
        Some(BranchChoice::Existing(name)) => ("existing", "", name.as_str()),
    };
    let pull_request = start.delivery == Delivery::PullRequest;
    let merge = start.merge.unwrap_or(MergeChoice::Never);
    let json = serde_json::to_string(start).unwrap_or_else(|_| "null".to_owned());
    html! {
        fieldset.git data-git-choices {
            legend { "Git" }
            input type="hidden" name="git" data-json value=(json);
            fieldset.choices {
                legend { "Delivery" }
                @for (delivery, words, what) in DELIVERIES {
                    @let hint = format!("{prefix}-git-delivery-{}-hint", delivery.as_str());
                    div.choice {
                        label.inline {
                            input type="radio" name="git-delivery" data-unsent value=(delivery.as_str())
                                checked[delivery == start.delivery] aria-describedby=(hint);
                            (words)
                        }
                        p.muted id=(hint) { (what) }
                    }
                }
                p.muted id={ (prefix) "-git-network-note" } hidden {
                    "A pull request needs network access: tick “Allow network access” to choose it."
                }
            }
            fieldset.choices {
                legend { "Branch" }
                label.inline {
                    input type="radio" name="git-branch" data-unsent value="current" checked[branch == "current"];
                    "The current branch"
                }
                label.inline {
                    input type="radio" name="git-branch" data-unsent value="new" checked[branch == "new"];
                    "A new branch"
                }
                label.indented { "New branch name (empty: the default)"
                    input type="text" data-unsent data-git="new" maxlength="200" value=(new_name)
                        disabled[branch != "new"] placeholder="tether/<job id>/<title>"
                        autocomplete="off" autocapitalize="off" spellcheck="false";
                }
                label.inline {
                    input type="radio" name="git-branch" data-unsent value="existing" checked[branch == "existing"];
                    "An existing branch"
                }
                label.indented { "Existing branch name"
                    input type="text" data-unsent data-git="existing" maxlength="200" value=(existing_name)
                        disabled[branch != "existing"] autocomplete="off" autocapitalize="off" spellcheck="false";
                }
            }
            fieldset.choices id={ (prefix) "-git-pull-request" } hidden[!pull_request] disabled[!pull_request] {
                legend { "Pull request" }
                @if hosts.is_empty() {
                    p.warning role="note" {
                        "This computer has no GitHub sign-in yet: on it, run "
                        code { "tether-agent github add" } " first."
                    }
                } @else {
                    p.muted { "Opened on " (hosts.join(", ")) " with the computer's own sign-in." }
                }
                label { "Base branch (empty: the repository's default)"
                    input type="text" data-unsent data-git="base" maxlength="200" value=(start.base.as_deref().unwrap_or(""))
                        autocomplete="off" autocapitalize="off" spellcheck="false";
                }
                fieldset.choices {
                    legend { "Merge" }
                    @for (choice, value, words) in MERGES {
                        label.inline {
                            input type="radio" name="git-merge" data-unsent value=(value) checked[choice == merge];
                            (words)
                        }
                    }
                    p.muted id={ (prefix) "-git-ask-note" } hidden { "An unattended job cannot ask: choose another mode to merge when you allow it." }
                }
            }
            label.inline {
                input type="checkbox" data-unsent data-git="worktree" checked[start.worktree];
                "Run in a separate copy (git worktree) if the folder is busy"
            }
        }
    }
}

/// "Follow-up: <title>", never "Follow-up: Follow-up: …", at most the title limit.
pub(super) fn follow_up_title(title: &str) -> String {
    const PREFIX: &str = "Follow-up: ";
    let base = title.strip_prefix(PREFIX).unwrap_or(title);
    let full = format!("{PREFIX}{base}");
    full.chars()
        .take(MAX_TITLE_CHARS)
        .collect::<String>()
        .trim_end()
        .to_owned()
}

/// "#3 Run the tests": the run number and title, linked to the job.
fn link(linked: &Linked, fallback: &str) -> Markup {
    html! {
        a href={ "/jobs/" (linked.id) } {
            @if let Some(run) = linked.run { "#" (run) " " }
            @match &linked.title { Some(title) => (title), None => (fallback) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_up_titles_stay_single_prefixed_and_within_the_limit() {
        assert_eq!(follow_up_title("Fix the build"), "Follow-up: Fix the build");
        assert_eq!(follow_up_title("Follow-up: Fix it"), "Follow-up: Fix it");
        let long = "é".repeat(MAX_TITLE_CHARS);
        let cut = follow_up_title(&long);
        assert_eq!(cut.chars().count(), MAX_TITLE_CHARS);
        assert!(cut.starts_with("Follow-up: é"));
        let spaced = format!("{}{}", "a".repeat(188), " b");
        assert!(!follow_up_title(&spaced).ends_with(' '));
    }
}
