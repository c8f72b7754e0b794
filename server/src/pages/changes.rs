//! What a run changed, on its job page: the files its computer reported, each one's diff
//! read from the computer on a tap (`assets/job.js`), and a warning on files that can run
//! code outside the sandbox later. Credential files are named, never opened.
//!
//! A diff is the run's start against the run's end, as the computer recorded them: later
//! jobs' work is no part of it. Beside each diff, "Compare with the folder now" asks for the
//! start against the folder as it is now (`against=now`).

use maud::{html, Markup};
use tether_protocol::changes::{
    ChangeBase, ChangeBaseKind, ChangeStatus, ChangedFile, Changes, FLAG_CREDENTIAL,
    FLAG_RUNS_LATER,
};
use tether_protocol::JobId;

/// The Changes section: a warning first when any file runs later, the totals, the files.
pub(super) fn changes_section(job_id: &JobId, changes: &Changes) -> Markup {
    section(Some(job_id), changes)
}

/// The Changes section as a space's members see it: which files changed, no diffs (a
/// file's text is its computer owner's).
pub(super) fn changes_listed(changes: &Changes) -> Markup {
    section(None, changes)
}

/// `diffs_of`: the job whose diffs a tap reads, or `None` for a list without them.
fn section(diffs_of: Option<&JobId>, changes: &Changes) -> Markup {
    let flagged = changes
        .files
        .iter()
        .filter(|file| has_flag(file, FLAG_RUNS_LATER))
        .count();
    let listed = u64::try_from(changes.files.len()).unwrap_or(u64::MAX);
    html! {
        section.changes data-changes=[diffs_of.map(|job_id| format!("/api/jobs/{job_id}/diff"))] aria-labelledby="changes-heading" {
            h2 #changes-heading { "Changes" }
            @if flagged > 0 { (runs_later_warning(flagged)) }
            p.totals { (totals_text(changes)) }
            @if !changes.files.is_empty() {
                ul.change-list {
                    @for (n, file) in changes.files.iter().enumerate() { (file_item(n, file, diffs_of.is_some())) }
                }
            }
            @if changes.truncated {
                p.muted { "… and " (plural(changes.totals.files.saturating_sub(listed), "more file")) " not listed." }
            }
            p.muted { (base_text(&changes.base)) }
        }
    }
}

/// "3 files changed, +12 −4", or "No files changed."
fn totals_text(changes: &Changes) -> String {
    let totals = changes.totals;
    if totals.files == 0 {
        return "No files changed.".to_owned();
    }
    format!(
        "{} changed, +{} \u{2212}{}",
        plural(totals.files, "file"),
        totals.additions,
        totals.deletions
    )
}

fn runs_later_warning(flagged: usize) -> Markup {
    let files = plural(u64::try_from(flagged).unwrap_or(u64::MAX), "file");
    html! {
        div.warning role="note" {
            strong { "Review before you build or run." }
            " " (files) " here can run code outside the sandbox later: hooks, build scripts, \
              task and CI files run when you build, test, commit or push. Read their diffs first."
        }
    }
}

fn file_item(n: usize, file: &ChangedFile, diffs: bool) -> Markup {
    let credential = has_flag(file, FLAG_CREDENTIAL);
    // A credential's diff is never asked for; a binary file has no lines to show.
    let diffable = diffs && !credential && !file.binary;
    let panel = format!("diff-{n}");
    html! {
        li.change data-change-path=(file.path) {
            div.change-head {
                @if diffable {
                    button.file-link type="button" data-diff-path=(file.path)
                        aria-expanded="false" aria-controls=(panel) { (file.path) }
                } @else {
                    span.file-name { (file.path) }
                }
                span class={ "status status-" (status_name(file.status)) } { (status_text(file)) }
                (counts(file))
            }
            @if has_flag(file, FLAG_RUNS_LATER) {
                p.flag {
                    span.badge.warn-badge { "Review before you build or run" }
                    " This file can run code outside the sandbox later."
                }
            }
            @if credential {
                p.flag {
                    span.badge { "Credential file" }
                    " Listed only: its contents are never shown."
                }
            }
            @if diffable {
                div.diff id=(panel) hidden {
                    p.diff-caption.muted aria-live="polite" {}
                    div.diff-body {}
                    p.diff-tools {
                        button.secondary type="button" data-diff-against="now" aria-controls=(panel) {
                            "Compare with the folder now"
                        }
                    }
                }
            }
        }
    }
}

fn counts(file: &ChangedFile) -> Markup {
    html! {
        @if file.binary {
            span.counts.muted { "binary" }
        } @else {
            span.counts {
                span.add { "+" (file.additions) } " " span.del { "\u{2212}" (file.deletions) }
            }
        }
    }
}

fn status_text(file: &ChangedFile) -> String {
    match (file.status, &file.from) {
        (ChangeStatus::Renamed, Some(from)) => format!("renamed from {from}"),
        (status, _) => status_name(status).to_owned(),
    }
}

fn status_name(status: ChangeStatus) -> &'static str {
    match status {
        ChangeStatus::Added => "added",
        ChangeStatus::Modified => "modified",
        ChangeStatus::Deleted => "deleted",
        ChangeStatus::Renamed => "renamed",
    }
}

fn base_text(base: &ChangeBase) -> String {
    match (base.kind, &base.head) {
        (ChangeBaseKind::Git, Some(head)) => format!(
            "The folder as the run found it (git, HEAD {}) against the folder as the run left \
             it: later work is no part of these diffs.",
            head.get(..7).unwrap_or(head)
        ),
        (ChangeBaseKind::Git, None) => "The folder as the run found it (git, no commit yet) \
             against the folder as the run left it: later work is no part of these diffs."
            .to_owned(),
        (ChangeBaseKind::Snapshot, _) => "A snapshot of the folder taken when the run started \
             against one taken when it ended: later work is no part of these diffs."
            .to_owned(),
    }
}

fn has_flag(file: &ChangedFile, flag: &str) -> bool {
    file.flags.iter().any(|each| each == flag)
}

/// "1 file", "3 files".
fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::changes::ChangeTotals;

    fn file(path: &str, status: ChangeStatus, flags: &[&str]) -> ChangedFile {
        ChangedFile {
            path: path.to_owned(),
            status,
            from: None,
            additions: 3,
            deletions: 1,
            binary: false,
            flags: flags.iter().map(|flag| (*flag).to_owned()).collect(),
        }
    }

    fn render(files: Vec<ChangedFile>, totals: ChangeTotals, truncated: bool) -> String {
        let changes = Changes {
            base: ChangeBase {
                kind: ChangeBaseKind::Git,
                head: Some("0123456789abcdef".to_owned()),
            },
            files,
            totals,
            truncated,
        };
        let job_id = JobId::generate();
        changes_section(&job_id, &changes).into_string()
    }

    fn totals(files: u64, additions: u64, deletions: u64) -> ChangeTotals {
        ChangeTotals {
            files,
            additions,
            deletions,
        }
    }

    #[test]
    fn lists_files_with_counts_and_warns_about_those_that_run_later() {
        let mut renamed = file("src/new.rs", ChangeStatus::Renamed, &[]);
        renamed.from = Some("src/old.rs".to_owned());
        let html = render(
            vec![
                file("package.json", ChangeStatus::Modified, &[FLAG_RUNS_LATER]),
                renamed,
                file("notes.txt", ChangeStatus::Deleted, &[]),
            ],
            totals(3, 9, 3),
            false,
        );
        assert!(html.contains("3 files changed, +9 \u{2212}3"), "{html}");
        assert!(html.contains(r#"<div class="warning" role="note"><strong>Review before you build or run.</strong> 1 file here can run code"#), "{html}");
        assert_eq!(html.matches("warn-badge").count(), 1, "{html}");
        assert!(html.contains("renamed from src/old.rs"), "{html}");
        assert!(
            html.contains(
                r#"data-diff-path="package.json" aria-expanded="false" aria-controls="diff-0""#
            ),
            "{html}"
        );
        assert!(
            html.contains(r#"<span class="status status-deleted">deleted</span>"#),
            "{html}"
        );
        assert!(html.contains("HEAD 0123456"), "{html}");
        assert!(
            html.contains("later work is no part of these diffs"),
            "{html}"
        );
        assert_eq!(
            html.matches(r#"data-diff-against="now" aria-controls="diff-"#)
                .count(),
            3,
            "each diff can be compared with the folder now: {html}"
        );
        assert!(!html.contains("not listed"), "{html}");
    }

    #[test]
    fn credential_and_binary_files_have_no_diff_and_truncation_is_said() {
        let mut binary = file("logo.png", ChangeStatus::Added, &[]);
        binary.binary = true;
        let html = render(
            vec![
                file(".env", ChangeStatus::Modified, &[FLAG_CREDENTIAL]),
                binary,
            ],
            totals(1002, 6, 2),
            true,
        );
        assert!(!html.contains("data-diff-path"), "{html}");
        assert!(
            html.contains("Credential file") && html.contains("never shown"),
            "{html}"
        );
        assert!(
            html.contains(r#"<span class="counts muted">binary</span>"#),
            "{html}"
        );
        assert!(
            html.contains("1002 files changed") && html.contains("and 1000 more files not listed"),
            "{html}"
        );
        assert!(
            !html.contains("role=\"note\""),
            "no file runs later: {html}"
        );
    }

    #[test]
    fn paths_are_escaped_and_an_empty_list_says_so() {
        let html = render(
            vec![file("<img src=x>.txt", ChangeStatus::Added, &[])],
            totals(1, 3, 1),
            false,
        );
        assert!(
            !html.contains("<img") && html.contains("&lt;img src=x&gt;.txt"),
            "{html}"
        );
        let html = render(Vec::new(), totals(0, 0, 0), false);
        assert!(
            html.contains("No files changed.") && !html.contains("<ul"),
            "{html}"
        );
    }
}
