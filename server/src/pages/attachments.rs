//! Files and links a person gives a job's task: the field that takes them on Assign, Run
//! again and Continue, and how the job page shows them.
//!
//! Each file uploads on its own as soon as it is chosen, dropped or pasted
//! (`POST /api/attachments`, `assets/assign.js`), so a phone on a bad network retries one
//! file, not the job; the form then sends the uploads' ids in `attachments`. The field is
//! rendered here with what it must say before anything is chosen (the limits) and the
//! earlier job's files a follow-up keeps; the script adds the rest.
//!
//! The job page is its owner's alone, and so is every file it links to
//! (`GET /api/jobs/{id}/attachments/{aid}`). Links are shown as text in an anchor, never as
//! markup, and only `http`/`https` ones are made links at all.

use maud::{html, Markup};
use tether_protocol::attachments::{
    Attachment, MAX_ATTACHMENTS_PER_JOB, MAX_ATTACHMENT_BYTES, MAX_ATTACHMENT_BYTES_PER_JOB,
};
use tether_protocol::task_context::MAX_LINKS;
use tether_protocol::JobId;

use super::layout::human_size;

/// The types a browser shows inline (the download route sends these inline too).
const PICTURES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

fn is_picture(attachment: &Attachment) -> bool {
    PICTURES.contains(&attachment.media_type.as_str())
}

/// "LOG" for `build.log`, "FILE" for a name without an extension: the tile of a file
/// that is not a picture.
fn extension(name: &str) -> String {
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() && ext.len() <= 5 => {
            ext.to_uppercase()
        }
        _ => "FILE".to_owned(),
    }
}

fn file_url(job_id: &JobId, attachment: &Attachment) -> String {
    format!("/api/jobs/{job_id}/attachments/{}", attachment.id)
}

/// "Up to 20 files, 25 MB each, 100 MB in all." (the limits are whole megabytes).
fn limits_text() -> String {
    let megabytes = |bytes: u64| bytes / 1_000_000;
    format!(
        "Up to {MAX_ATTACHMENTS_PER_JOB} files, {} MB each, {} MB in all. Drop files on the \
         form or paste them.",
        megabytes(MAX_ATTACHMENT_BYTES),
        megabytes(MAX_ATTACHMENT_BYTES_PER_JOB),
    )
}

/// The attachments and links of a form; ids start with `prefix` (a job page holds two such
/// forms). `kept` are the earlier job's files, sent again unless removed; `from` is the job
/// they belong to, to show their thumbnails.
pub(super) fn attach_fields(
    prefix: &str,
    kept: &[Attachment],
    from: Option<&JobId>,
    links: &[String],
) -> Markup {
    let kept_ids: Vec<&str> = kept
        .iter()
        .map(|attachment| attachment.id.as_str())
        .collect();
    let kept_json = serde_json::to_string(&kept_ids).unwrap_or_else(|_| "[]".to_owned());
    let links_json = serde_json::to_string(links).unwrap_or_else(|_| "[]".to_owned());
    let limits = format!("{prefix}-attach-limits");
    html! {
        fieldset.attach data-attach
            data-max-files=(MAX_ATTACHMENTS_PER_JOB)
            data-max-bytes=(MAX_ATTACHMENT_BYTES)
            data-max-total=(MAX_ATTACHMENT_BYTES_PER_JOB) {
            legend { "Attachments" }
            p.muted id=(limits) { (limits_text()) }
            // What the form sends: the script writes the ids here just before it posts.
            input type="hidden" name="attachments" data-json value=(kept_json);
            ul.attach-list aria-label="Attached files" {
                @for attachment in kept {
                    li.attach-item data-state="kept" data-attachment-id=(attachment.id)
                        data-size=(attachment.size) {
                        @if let (true, Some(job_id)) = (is_picture(attachment), from) {
                            img.attach-thumb src=(file_url(job_id, attachment)) alt=""
                                width="48" height="48" loading="lazy";
                        }
                        span.attach-text {
                            span.attach-name { (attachment.name) }
                            span.muted.attach-facts {
                                (human_size(attachment.size)) " · " (attachment.media_type) " · from this job"
                            }
                        }
                        span.attach-actions {
                            button.secondary type="button" data-attach-remove
                                aria-label={ "Remove " (attachment.name) } { "Remove" }
                        }
                    }
                }
            }
            div.attach-pick {
                label.button-like {
                    input.visually-hidden type="file" multiple aria-describedby=(limits);
                    "Choose files"
                }
                label.button-like {
                    input.visually-hidden type="file" accept="image/*" capture="environment"
                        aria-describedby=(limits);
                    "Take photo"
                }
            }
            p.attach-problem role="alert" {}
        }
        label {
            "Links (one per line, at most " (MAX_LINKS) ")"
            textarea data-links data-unsent rows="2" maxlength="20000"
                placeholder="https://" autocapitalize="off" spellcheck="false" {
                @for (n, link) in links.iter().enumerate() {
                    @if n > 0 { "\n" }
                    (link)
                }
            }
        }
        input type="hidden" name="links" data-json value=(links_json);
    }
}

/// The job's files (pictures as thumbnails, linked to the whole picture; the rest as name,
/// size and type) and the links the person added, below its prompt.
pub(super) fn task_attachments(
    job_id: &JobId,
    attachments: &[Attachment],
    links: &[String],
) -> Markup {
    html! {
        @if !attachments.is_empty() {
            h3 #attachments-heading { "Attachments" }
            ul.attachments aria-labelledby="attachments-heading" {
                @for attachment in attachments {
                    li data-attachment=(attachment.id) {
                        @if is_picture(attachment) {
                            a.attachment-picture href=(file_url(job_id, attachment)) {
                                img src=(file_url(job_id, attachment)) alt=(attachment.name)
                                    width="160" height="120" loading="lazy";
                            }
                        } @else {
                            span.attachment-file aria-hidden="true" { (extension(&attachment.name)) }
                        }
                        a.attachment-name href=(file_url(job_id, attachment)) { (attachment.name) }
                        span.muted { (human_size(attachment.size)) " · " (attachment.media_type) }
                    }
                }
            }
        }
        @if !links.is_empty() {
            h3 #links-heading { "Links" }
            ul.task-links aria-labelledby="links-heading" {
                @for link in links {
                    li {
                        @if link.starts_with("https://") || link.starts_with("http://") {
                            a href=(link) rel="noopener noreferrer" { (link) }
                        } @else {
                            code { (link) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tether_protocol::AttachmentId;

    use super::*;

    fn attached(name: &str, media_type: &str) -> Attachment {
        Attachment {
            id: AttachmentId::generate(),
            name: name.to_owned(),
            size: 2_500,
            sha256: "0".repeat(64),
            media_type: media_type.to_owned(),
        }
    }

    #[test]
    fn pictures_are_thumbnails_and_links_are_text_that_opens_without_a_referrer() {
        let job_id = JobId::generate();
        let picture = attached("bug <1>.png", "image/png");
        let log = attached("build.log", "text/plain");
        let links = [
            "https://example.com/a?b=<i>x</i>".to_owned(),
            "javascript:alert(1)".to_owned(),
        ];
        let html = task_attachments(&job_id, &[picture.clone(), log.clone()], &links).into_string();
        let picture_url = format!("/api/jobs/{job_id}/attachments/{}", picture.id);
        assert!(
            html.contains(&format!(
                r#"<a class="attachment-picture" href="{picture_url}"><img src="{picture_url}" alt="bug &lt;1&gt;.png" width="160" height="120" loading="lazy">"#
            )),
            "{html}"
        );
        let log_url = format!("/api/jobs/{job_id}/attachments/{}", log.id);
        assert!(
            html.contains(&format!(r#"href="{log_url}">build.log</a>"#)),
            "{html}"
        );
        assert!(
            !html.contains(&format!(r#"href="{log_url}"><img"#)),
            "{html}"
        );
        assert!(html.contains("2.5 KB · text/plain"), "{html}");
        assert!(
            html.contains(r#"<span class="attachment-file" aria-hidden="true">LOG</span>"#),
            "{html}"
        );
        assert!(
            html.contains(
                r#"<a href="https://example.com/a?b=&lt;i&gt;x&lt;/i&gt;" rel="noopener noreferrer">https://example.com/a?b=&lt;i&gt;x&lt;/i&gt;</a>"#
            ),
            "{html}"
        );
        assert!(!html.contains(r#"href="javascript"#), "{html}");
        assert!(html.contains("<code>javascript:alert(1)</code>"), "{html}");
    }

    #[test]
    fn a_file_tile_names_its_extension() {
        assert_eq!(extension("build.log"), "LOG");
        assert_eq!(extension("Makefile"), "FILE");
        assert_eq!(extension(".env"), "FILE");
        assert_eq!(extension("archive.verylongext"), "FILE");
    }

    #[test]
    fn nothing_attached_shows_nothing() {
        assert_eq!(
            task_attachments(&JobId::generate(), &[], &[]).into_string(),
            ""
        );
    }

    #[test]
    fn the_limits_are_named_as_the_server_counts_them() {
        assert_eq!(
            limits_text(),
            "Up to 20 files, 25 MB each, 100 MB in all. Drop files on the form or paste them."
        );
    }
}
