//! What comes after a run, on its job page: the same job again (with the prompt as it was,
//! or a new one), or a follow-up that carries on from what the run left in the folder, and
//! the chain of jobs that continue one another.
//!
//! Both forms post to the API from the browser (`POST /api/jobs/{id}/rerun`, `POST
//! /api/jobs` with `continues`); the page only fills them in.

use maud::{html, Markup};
use tether_protocol::devices::Device;
use tether_protocol::jobs::Job;
use tether_protocol::JobId;

use crate::jobs::MAX_TITLE_CHARS;

/// A job this one links to, with its title when it could be read.
pub(super) struct Linked {
    pub id: JobId,
    pub title: Option<String>,
}

/// "Continues …" and "Continued by …", each a link to that job.
pub(super) fn chain(continues: Option<&Linked>, continued_by: Option<&Linked>) -> Markup {
    html! {
        @if continues.is_some() || continued_by.is_some() {
            div.chain {
                @if let Some(earlier) = continues {
                    p data-field="continues" { "Continues " (link(earlier, "an earlier job")) }
                }
                @if let Some(later) = continued_by {
                    p data-field="continued-by" { "Continued by " (link(later, "a later job")) }
                }
            }
        }
    }
}

/// Run again and Continue, for an ended job whose computer can still take work.
pub(super) fn next_steps(
    job: &Job,
    device: Option<&Device>,
    continued_by: Option<&Linked>,
) -> Markup {
    if !job.state.is_final() {
        return html! {};
    }
    if device.is_none_or(|device| device.revoked_at.is_some()) {
        return html! {
            p.muted { "Its computer is no longer paired, so this job cannot run there again." }
        };
    }
    html! {
        section.next-steps aria-labelledby="run-again-heading" {
            h2 #run-again-heading { "Run again" }
            (rerun_form(job))
        }
        section.next-steps aria-labelledby="continue-heading" {
            h2 #continue-heading { "Continue" }
            @match continued_by {
                Some(later) => p { "This job was continued already: go on from " (link(later, "the later job")) "." },
                None => (continue_form(job)),
            }
        }
    }
}

/// The same spec as a new job; the prompt can be changed first.
fn rerun_form(job: &Job) -> Markup {
    html! {
        form.stack data-api={ "/api/jobs/" (job.id) "/rerun" } data-redirect="/jobs/{id}" {
            p.muted { "The same job on the same computer, folder and engine, from the folder as it is now." }
            label { "Prompt"
                textarea name="prompt" maxlength="20000" { (job.spec.prompt) } }
            p.error role="alert" {}
            div { button type="submit" { "Run again" } }
        }
    }
}

/// A follow-up on the same computer and folder, with the same engine, mode, network,
/// time limit and secrets; it starts once this job ended and works on what it left.
fn continue_form(job: &Job) -> Markup {
    let spec = &job.spec;
    let secrets = serde_json::to_string(&spec.secrets).unwrap_or_else(|_| "[]".to_owned());
    html! {
        form.stack data-api="/api/jobs" data-redirect="/jobs/{id}" {
            input type="hidden" name="deviceId" value=(job.device_id);
            input type="hidden" name="continues" value=(job.id);
            input type="hidden" name="folder" value=(spec.folder);
            input type="hidden" name="engine" value=(spec.engine);
            input type="hidden" name="mode" value=(spec.mode.as_str());
            input type="hidden" name="network" value=(spec.network) data-json;
            input type="hidden" name="timeoutMinutes" value=(spec.timeout_minutes) data-number;
            input type="hidden" name="secrets" value=(secrets) data-json;
            p.muted { "A follow-up carries on from what this run left in " code { (spec.folder) } ", with the same engine and settings." }
            label { "Title"
                input type="text" name="title" maxlength="200" required value=(follow_up_title(&job.title)); }
            label { "What next"
                textarea name="prompt" maxlength="20000" required {} }
            p.error role="alert" {}
            div { button type="submit" { "Continue" } }
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

fn link(linked: &Linked, fallback: &str) -> Markup {
    html! {
        a href={ "/jobs/" (linked.id) } {
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
