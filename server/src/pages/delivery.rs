//! Git delivery on the pages: the Assign page's Git choices (for a computer that reports
//! `capabilities.git`), the job page's line saying what was asked, and its Delivery section
//! saying what the computer did (branch, commits, push, pull request).
//!
//! The choices are plain controls marked `data-unsent`; `assets/assign.js` composes them
//! into the hidden `git` field (`data-json`) that `app.js` posts, and disables what the
//! server would refuse. The server checks every choice again.

use maud::{html, Markup};
use tether_protocol::capabilities::GitCapability;
use tether_protocol::devices::Device;
use tether_protocol::git::{
    BranchChoice, DeliveredCommit, Delivery, DeliveryReport, GitOptions, MergeChoice, PullRequest,
    PullRequestState,
};

/// The API's field names in the words of the Assign form (`data-fields`), so that a 422
/// reads "Branch: …" rather than "git.branch: …".
pub(super) const FIELD_WORDS: &str = r#"{"git":"Git","git.delivery":"Delivery","git.branch":"Branch","git.base":"Base branch","git.merge":"Merge","attachments":"Attachments","links":"Links"}"#;

/// The Git fieldset of Assign: the choices for a computer that delivers with git, else one
/// line saying why there are none. `last` is the latest job's choices on this computer.
pub(super) fn git_fieldset(device: &Device, last: Option<&GitOptions>) -> Markup {
    let Some(git) = device
        .capabilities
        .as_ref()
        .and_then(|caps| caps.git.as_ref())
    else {
        return html! {
            fieldset.git {
                legend { "Git" }
                p.muted {
                    (device.name) " does not report git delivery, so its jobs leave the folder as \
                     they are; update its agent to commit, push or open pull requests from here."
                }
            }
        };
    };
    let (start, merge) = starting_choices(last);
    html! {
        fieldset.git data-git-choices {
            legend { "Git" }
            input type="hidden" name="git" data-json value=(initial_json(&start));
            (delivery_choices(start.delivery))
            (branch_choices())
            (pull_request_choices(git, merge))
            label.inline {
                input type="checkbox" data-unsent data-git="worktree" checked[start.worktree];
                "Run in a separate copy (git worktree) if the folder is busy"
            }
        }
    }
}

/// The header's line of what a job asked git to do: "Pull request from new branch x into
/// main, merged when you allow it".
pub(super) fn asked_text(options: &GitOptions) -> Markup {
    html! {
        (delivery_words(options.delivery)) " "
        @match &options.branch {
            None | Some(BranchChoice::Current(_)) => "on the current branch",
            Some(BranchChoice::New(name)) => { "on a new branch " code { (name) } }
            Some(BranchChoice::Existing(name)) => { "on branch " code { (name) } }
        }
        @if options.delivery == Delivery::PullRequest {
            " into "
            @match &options.base { Some(base) => code { (base) }, None => "the default branch" }
            ", " (merge_words(options.merge.unwrap_or(MergeChoice::Never)))
        }
        @if options.worktree { "; in a separate worktree if the folder is busy" }
    }
}

/// The Delivery section: what the computer reported it did with the work.
pub(super) fn delivery_section(report: &DeliveryReport, asked: Option<&GitOptions>) -> Markup {
    let local = asked.is_some_and(|options| options.delivery == Delivery::Local);
    html! {
        section.delivery aria-labelledby="delivery-heading" {
            h2 #delivery-heading { "Delivery" }
            dl.facts {
                dt { "Branch" } dd data-field="branch" { code { (report.branch) } }
                dt { "Commits" }
                dd data-field="commits" {
                    @if report.commits.is_empty() {
                        @if local { "no commits kept" } @else { "none" }
                    } @else {
                        ul.commits { @for commit in &report.commits { (commit_item(commit)) } }
                    }
                }
                dt { "Pushed" }
                dd data-field="pushed" { @if report.pushed { "pushed" } @else { "not pushed" } }
                @if let Some(pull) = &report.pull_request {
                    dt { "Pull request" } dd data-field="pull-request" { (pull_request_link(pull)) }
                }
            }
        }
    }
}

/// The choices to start from: the latest job's on this computer (a branch is the job's
/// own, so it starts from the current one), else Local only; and the merge choice for when
/// Pull request is picked. A pull request starts as Push: the fresh form has network access
/// off, which a pull request needs.
fn starting_choices(last: Option<&GitOptions>) -> (GitOptions, MergeChoice) {
    let delivery = match last.map(|options| options.delivery) {
        None => Delivery::Local,
        Some(Delivery::PullRequest) => Delivery::Push,
        Some(delivery) => delivery,
    };
    let start = GitOptions {
        delivery,
        branch: Some(BranchChoice::Current(true)),
        base: None,
        merge: None,
        worktree: last.is_some_and(|options| options.worktree),
    };
    let merge = last.and_then(|options| options.merge);
    (start, merge.unwrap_or(MergeChoice::Never))
}

/// The hidden field's value before the script runs: what the checked controls say.
fn initial_json(start: &GitOptions) -> String {
    serde_json::to_string(start).unwrap_or_else(|_| r#"{"delivery":"local"}"#.to_owned())
}

/// One radio button per delivery, each with a line saying what it does.
fn delivery_choices(chosen: Delivery) -> Markup {
    const CHOICES: [(Delivery, &str); 4] = [
        (Delivery::Local, "Leaves the changes as files in the folder: no commits (one made anyway is undone, its changes kept)."),
        (Delivery::Commit, "Commits the work on the branch; nothing leaves the computer."),
        (Delivery::Push, "Commits and pushes the branch (never forced)."),
        (Delivery::PullRequest, "Pushes, then opens a pull request into the base branch."),
    ];
    html! {
        fieldset.choices {
            legend { "Delivery" }
            @for (delivery, what) in CHOICES {
                @let id = format!("git-delivery-{}", delivery.as_str());
                div.choice {
                    label.inline {
                        input type="radio" name="git-delivery" data-unsent value=(delivery.as_str())
                            checked[delivery == chosen] aria-describedby={ (id) "-hint" };
                        (delivery_words(delivery))
                    }
                    p.muted id={ (id) "-hint" } { (what) }
                }
            }
            p.muted #git-network-note hidden {
                "A pull request needs network access: tick “Allow network access” to choose it."
            }
        }
    }
}

/// The current branch, a new one (empty: the default name) or an existing one.
fn branch_choices() -> Markup {
    html! {
        fieldset.choices {
            legend { "Branch" }
            label.inline {
                input type="radio" name="git-branch" data-unsent value="current" checked;
                "The current branch"
            }
            label.inline {
                input type="radio" name="git-branch" data-unsent value="new";
                "A new branch"
            }
            label.indented { "New branch name (empty: the default)"
                input type="text" data-unsent data-git="new" maxlength="200" disabled
                    placeholder="tether/<job id>/<title>" autocomplete="off" autocapitalize="off" spellcheck="false";
            }
            label.inline {
                input type="radio" name="git-branch" data-unsent value="existing";
                "An existing branch"
            }
            label.indented { "Existing branch name"
                input type="text" data-unsent data-git="existing" maxlength="200" disabled required
                    autocomplete="off" autocapitalize="off" spellcheck="false";
            }
        }
    }
}

/// A pull request's base branch and when it is merged; shown (by the script) only for
/// Pull request.
fn pull_request_choices(git: &GitCapability, merge: MergeChoice) -> Markup {
    const MERGES: [(MergeChoice, &str, &str); 3] = [
        (MergeChoice::Ask, "ask", "When I allow it"),
        (MergeChoice::Auto, "auto", "Automatically when checks pass"),
        (MergeChoice::Never, "never", "Never"),
    ];
    html! {
        fieldset.choices #git-pull-request hidden disabled {
            legend { "Pull request" }
            @if git.github_hosts.is_empty() {
                p.warning #git-needs-github role="note" {
                    "This computer has no GitHub sign-in yet: on it, run "
                    code { "tether-agent github add" } " first."
                }
            } @else {
                p.muted { "Opened on " (git.github_hosts.join(", ")) " with the computer's own sign-in." }
            }
            label { "Base branch (empty: the repository's default)"
                input type="text" data-unsent data-git="base" maxlength="200"
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
                p.muted #git-ask-note hidden { "An unattended job cannot ask: choose another mode to merge when you allow it." }
            }
        }
    }
}

fn commit_item(commit: &DeliveredCommit) -> Markup {
    // Seven characters, as git abbreviates; the whole id on hover.
    let short = commit.sha.get(..7).unwrap_or(&commit.sha);
    html! {
        li { code.sha title=(commit.sha) { (short) } " " span.subject { (commit.subject) } }
    }
}

fn pull_request_link(pull: &PullRequest) -> Markup {
    let state = match pull.state {
        PullRequestState::Open => "open",
        PullRequestState::Merged => "merged",
        PullRequestState::Closed => "closed",
    };
    html! {
        a href=(pull.url) rel="noreferrer" { "#" (pull.number) }
        " " span class={ "badge pr-" (state) } { (state) }
    }
}

fn delivery_words(delivery: Delivery) -> &'static str {
    match delivery {
        Delivery::Local => "Local only",
        Delivery::Commit => "Commit",
        Delivery::Push => "Push",
        Delivery::PullRequest => "Pull request",
    }
}

fn merge_words(merge: MergeChoice) -> &'static str {
    match merge {
        MergeChoice::Ask => "merged when you allow it",
        MergeChoice::Auto => "merged automatically when checks pass",
        MergeChoice::Never => "never merged",
    }
}
