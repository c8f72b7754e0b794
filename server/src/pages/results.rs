//! What a run hands back, on its job page: the worker's own report (leading the page), what
//! the run really used per attempt, a gallery of its screenshots and images, and the files
//! its computer holds until the owner previews, releases or discards them
//! (`assets/results.js`).
//!
//! Every text here is the worker's or the agent's, so it is shown as text only: a report's
//! links are made anchors only when they are `http`/`https` (the server checked that) and
//! open without a referrer, as the task's links do. A picture's variant (its small preview)
//! is never listed on its own: it is the thumbnail of the picture it was made from.

use maud::{html, Markup};
use tether_protocol::evidence::EvidenceVariant;
use tether_protocol::jobs::{Evidence, Job};
use tether_protocol::report::{ObservedRun, TestOutcome, WorkerReport};

use super::layout::human_size;

/// The worker's report, when the run left one.
pub(super) fn report_section(job: &Job) -> Markup {
    let Some(report) = job.outcome.as_ref().and_then(|o| o.report.as_ref()) else {
        return html! {};
    };
    html! {
        section.report #report aria-labelledby="report-heading" {
            h2 #report-heading { "The worker's report" }
            p.report-summary { (report.summary) }
            (text_list("report-done", "Done", &report.done))
            (tested_list(report))
            (text_list("report-not-done", "Not done", &report.not_done))
            (text_list("report-risks", "Risks", &report.risks))
            @if !report.links.is_empty() {
                h3 #report-links { "Links" }
                ul.task-links aria-labelledby="report-links" {
                    @for link in &report.links {
                        li { (web_link(link)) }
                    }
                }
            }
        }
    }
}

fn text_list(id: &str, heading: &str, items: &[String]) -> Markup {
    html! {
        @if !items.is_empty() {
            h3 id=(id) { (heading) }
            ul aria-labelledby=(id) {
                @for item in items { li { (item) } }
            }
        }
    }
}

fn tested_list(report: &WorkerReport) -> Markup {
    html! {
        @if !report.tested.is_empty() {
            h3 #report-tested { "Tested" }
            ul.tested aria-labelledby="report-tested" {
                @for test in &report.tested {
                    li {
                        span class={ "badge test-" (test.outcome.as_str()) } {
                            (outcome_mark(test.outcome)) " " (test.outcome.as_str())
                        }
                        " " code { (test.command) }
                        @if let Some(detail) = &test.detail { span.muted { " · " (detail) } }
                    }
                }
            }
        }
    }
}

/// A mark that tells the outcomes apart without colour.
fn outcome_mark(outcome: TestOutcome) -> &'static str {
    match outcome {
        TestOutcome::Passed => "✓",
        TestOutcome::Failed => "✗",
        TestOutcome::Skipped => "–",
    }
}

/// An anchor for an `http`/`https` address (opened without a referrer), else text.
fn web_link(link: &str) -> Markup {
    let web = link.starts_with("https://") || link.starts_with("http://");
    html! {
        @if web { a href=(link) rel="noopener noreferrer" { (link) } } @else { code { (link) } }
    }
}

/// What each attempt used, once the run started; "not reported" for what its agent did not
/// say, and one line when no attempt said anything (a recipe never does).
pub(super) fn used_section(job: &Job) -> Markup {
    if job.started_at.is_none() {
        return html! {};
    }
    let attempts = job.attempt.max(1);
    let none = ObservedRun::default();
    html! {
        section.used #used aria-labelledby="used-heading" {
            h2 #used-heading { "What the run used" }
            @if job.observed.is_empty() {
                p.muted { "Not reported: a coding agent says its engine, model and mode as it runs; a recipe does not." }
            }
            @for attempt in (1..=attempts).filter(|_| !job.observed.is_empty()) {
                @let used = job.observed.iter().find(|o| o.attempt == attempt).map_or(&none, |o| &o.used);
                @if attempts > 1 { h3 { "Attempt " (attempt) } }
                dl.used-facts data-attempt=(attempt) {
                    dt { "Engine" } dd { (said(used.engine.as_deref())) }
                    dt { "Version" } dd { (said(used.engine_version.as_deref())) }
                    dt { "Model" } dd { (said(used.model.as_deref())) }
                    dt { "Effort" } dd { (said(used.effort.as_deref())) }
                    dt { "Mode" } dd { (said(used.mode.as_deref())) }
                }
            }
        }
    }
}

fn said(value: Option<&str>) -> Markup {
    html! {
        @match value {
            Some(value) => (value),
            None => span.muted { "not reported" },
        }
    }
}

fn is_picture(item: &Evidence) -> bool {
    matches!(item.kind.as_str(), "screenshot" | "image")
}

/// Whether the server holds the bytes (so a link downloads them).
fn stored(item: &Evidence) -> bool {
    !item.local && !item.held
}

fn evidence_url(job: &Job, item: &Evidence) -> String {
    format!("/api/jobs/{}/evidence/{}", job.id, item.id)
}

/// The stored preview variant of `item`, if its computer sent one.
fn preview_of<'a>(job: &'a Job, item: &Evidence) -> Option<&'a Evidence> {
    job.evidence.iter().find(|other| {
        other.variant_of.as_deref() == Some(item.id.as_str())
            && other.variant == Some(EvidenceVariant::Preview)
            && stored(other)
    })
}

/// The run's stored screenshots and images as thumbnails, each opening the whole picture.
pub(super) fn gallery(job: &Job) -> Markup {
    let pictures: Vec<&Evidence> = job
        .evidence
        .iter()
        .filter(|item| item.variant.is_none() && is_picture(item) && stored(item))
        .collect();
    html! {
        @if !pictures.is_empty() {
            h2 #gallery-heading { "Screenshots and images" }
            ul.gallery aria-labelledby="gallery-heading" {
                @for item in pictures {
                    @let thumb = preview_of(job, item).unwrap_or(item);
                    @let alt = item.caption.as_deref().unwrap_or(&item.name);
                    li data-picture=(item.id) {
                        a href=(evidence_url(job, item)) target="_blank" rel="noopener" {
                            img src=(evidence_url(job, thumb)) alt=(alt) loading="lazy"
                                width=[thumb.details.and_then(|d| d.width)]
                                height=[thumb.details.and_then(|d| d.height)];
                        }
                        @if let Some(caption) = &item.caption { span.muted { (caption) } }
                    }
                }
            }
        }
    }
}

/// The files the computer holds, each with Preview, Release and Discard.
pub(super) fn held_items(job: &Job) -> Markup {
    let held: Vec<&Evidence> = job
        .evidence
        .iter()
        .filter(|item| item.held && item.variant.is_none())
        .collect();
    html! {
        @if !held.is_empty() {
            h2 #held-heading { "On this computer" }
            p.muted { "Held by the computer until you look: a preview is kept 5 minutes." }
            ul.held aria-labelledby="held-heading" {
                @for item in held {
                    @let url = evidence_url(job, item);
                    li data-held=(item.id) data-url=(url) {
                        strong { (item.name) }
                        span.muted { " · " (item.kind) " · " (human_size(item.size)) " · on this computer" }
                        @if let Some(caption) = &item.caption { div.muted { (caption) } }
                        div.held-actions {
                            button.secondary type="button" data-held-action="preview" { "Preview" }
                            button.secondary type="button" data-held-action="release" { "Release" }
                            button.danger type="button" data-held-action="discard"
                                data-confirm={ "Discard " (item.name) " on the computer?" } { "Discard" }
                        }
                        p.held-status role="status" {}
                        div.held-preview {}
                    }
                }
            }
        }
    }
}

/// Whether an evidence file is listed with the run's other files: not a variant, not held.
pub(super) fn listed_file(item: &Evidence) -> bool {
    item.variant.is_none() && !item.held
}
