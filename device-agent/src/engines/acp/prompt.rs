//! The content of a run's `session/prompt`: the prompt's text, the task's context section
//! (from the claim) as a text block of its own, then each attached file as ACP intends it, by what the agent
//! advertised in `promptCapabilities`:
//!
//! | file | advertised | block |
//! |---|---|---|
//! | PNG, JPEG, GIF, WebP up to [`MAX_INLINE_IMAGE_BYTES`] | `image` | `image`: base64 data, type, `file://` URI |
//! | `text/*`, JSON up to [`MAX_EMBEDDED_TEXT_BYTES`], UTF-8 | `embeddedContext` | `resource`: the text, embedded |
//! | anything else, or not advertised | | `resource_link` to the local copy |
//!
//! Every ACP agent takes text and resource links (the protocol's baseline), so a file is
//! never left out: at worst the agent is told where the copy lies, which its sandbox reads.

use std::path::Path;

use agent_client_protocol::v1::schema::{
    ContentBlock, EmbeddedResource, EmbeddedResourceResource, ImageContent, PromptCapabilities,
    ResourceLink, TextContent, TextResourceContents,
};
use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::run::attachments::PlacedAttachment;

/// Largest image sent inline (5 MB): model providers refuse larger ones.
pub const MAX_INLINE_IMAGE_BYTES: u64 = 5_000_000;
/// Largest text file embedded (256 KiB): past that, the agent reads what it needs itself.
pub const MAX_EMBEDDED_TEXT_BYTES: u64 = 256 * 1024;
/// The image types models take inline.
const INLINE_IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// How one attachment goes to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    Image,
    Embedded,
    Link,
}

/// What a turn's prompt carries besides its text.
#[derive(Debug, Clone, Copy)]
pub struct Task<'a> {
    /// The job's context section, from its claim.
    pub context: Option<&'a str>,
    /// The job's files, placed for the run.
    pub attachments: &'a [PlacedAttachment],
}

/// The prompt's blocks: `prompt`, the task's context when there is one, then each of its
/// attachments as `capabilities` allow.
pub fn blocks(
    prompt: &str,
    task: Task<'_>,
    capabilities: &PromptCapabilities,
) -> Vec<ContentBlock> {
    let Task {
        context,
        attachments,
    } = task;
    let mut blocks = vec![ContentBlock::Text(TextContent::new(prompt.to_owned()))];
    if let Some(context) = context.filter(|context| !context.trim().is_empty()) {
        // The section brings its own heading (`## Task context`); it starts on a line of
        // its own, since some agents join text blocks with nothing between.
        blocks.push(ContentBlock::Text(TextContent::new(format!(
            "\n\n{context}"
        ))));
    }
    blocks.extend(
        attachments
            .iter()
            .map(|placed| block(placed, carried(placed, capabilities))),
    );
    blocks
}

/// How `placed` goes to an agent advertising `capabilities`.
pub fn carried(placed: &PlacedAttachment, capabilities: &PromptCapabilities) -> Carried {
    let attachment = &placed.attachment;
    let media_type = essence(&attachment.media_type);
    if capabilities.image
        && INLINE_IMAGE_TYPES.contains(&media_type.as_str())
        && attachment.size <= MAX_INLINE_IMAGE_BYTES
    {
        return Carried::Image;
    }
    let text = media_type.starts_with("text/") || media_type == "application/json";
    if capabilities.embedded_context && text && attachment.size <= MAX_EMBEDDED_TEXT_BYTES {
        return Carried::Embedded;
    }
    Carried::Link
}

/// The block of `placed`; a file that cannot be read as chosen (gone, not UTF-8) goes as a
/// link.
fn block(placed: &PlacedAttachment, carried: Carried) -> ContentBlock {
    let attachment = &placed.attachment;
    let uri = file_uri(&placed.path);
    let media_type = essence(&attachment.media_type);
    match carried {
        Carried::Image => {
            if let Some(bytes) = read_at_most(&placed.path, MAX_INLINE_IMAGE_BYTES) {
                let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                return ContentBlock::Image(ImageContent::new(data, media_type).uri(uri));
            }
        }
        Carried::Embedded => {
            let text = read_at_most(&placed.path, MAX_EMBEDDED_TEXT_BYTES)
                .and_then(|bytes| String::from_utf8(bytes).ok());
            if let Some(text) = text {
                let contents = TextResourceContents::new(text, uri).mime_type(media_type);
                return ContentBlock::Resource(EmbeddedResource::new(
                    EmbeddedResourceResource::TextResourceContents(contents),
                ));
            }
        }
        Carried::Link => {}
    }
    ContentBlock::ResourceLink(
        ResourceLink::new(attachment.name.clone(), uri)
            .mime_type(media_type)
            .size(i64::try_from(attachment.size).ok())
            .description("A file attached to the task, on this computer".to_owned()),
    )
}

/// The media type without its parameters, in lower case (`text/plain; charset=utf-8` is
/// `text/plain`).
fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The whole file, when it holds at most `limit` bytes.
fn read_at_most(path: &Path, limit: u64) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > limit {
        return None;
    }
    std::fs::read(path).ok()
}

/// Every byte but RFC 3986's unreserved characters is percent-encoded (a name in a URI).
pub const OUTSIDE_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The same, but `/` too is kept (a path in a URI).
const OUTSIDE_UNRESERVED_OR_SLASH: &AsciiSet = &OUTSIDE_UNRESERVED.remove(b'/');

/// `file://` and the absolute path, each byte outside RFC 3986's unreserved set and `/`
/// percent-encoded.
pub fn file_uri(path: &Path) -> String {
    let path = path.to_string_lossy();
    format!(
        "file://{}",
        utf8_percent_encode(&path, OUTSIDE_UNRESERVED_OR_SLASH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::attachments::Attachment;
    use tether_protocol::AttachmentId;

    /// One transparent pixel.
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";

    fn placed(folder: &Path, name: &str, media_type: &str, bytes: &[u8]) -> PlacedAttachment {
        let path = folder.join(name);
        std::fs::write(&path, bytes).unwrap_or_else(|err| panic!("{err}"));
        PlacedAttachment {
            attachment: Attachment {
                id: AttachmentId::generate(),
                name: name.to_owned(),
                size: bytes.len() as u64,
                sha256: String::new(),
                media_type: media_type.to_owned(),
            },
            path,
        }
    }

    fn capabilities(image: bool, embedded_context: bool) -> PromptCapabilities {
        PromptCapabilities::new()
            .image(image)
            .embedded_context(embedded_context)
    }

    /// What each block is, in words, for whole-list comparisons.
    fn kinds(blocks: &[ContentBlock]) -> Vec<String> {
        blocks
            .iter()
            .map(|block| match block {
                ContentBlock::Text(text) => format!("text {}", text.text.trim()),
                ContentBlock::Image(image) => format!(
                    "image {} {} {}",
                    image.mime_type,
                    image.uri.as_deref().unwrap_or("-"),
                    image.data.len()
                ),
                ContentBlock::Resource(resource) => match &resource.resource {
                    EmbeddedResourceResource::TextResourceContents(text) => format!(
                        "resource {} {} {:?}",
                        text.mime_type.as_deref().unwrap_or("-"),
                        text.uri,
                        text.text
                    ),
                    other => format!("resource {other:?}"),
                },
                ContentBlock::ResourceLink(link) => format!(
                    "link {} {} {} {:?}",
                    link.name,
                    link.mime_type.as_deref().unwrap_or("-"),
                    link.uri,
                    link.size
                ),
                other => format!("other {other:?}"),
            })
            .collect()
    }

    #[test]
    fn each_file_goes_as_the_agent_advertised() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let folder = tmp.path();
        let uri = |name: &str| file_uri(&folder.join(name));
        let files = [
            placed(folder, "shot.png", "image/png", PNG),
            placed(
                folder,
                "notes.txt",
                "text/plain; charset=utf-8",
                b"line one\n",
            ),
            placed(folder, "spec.pdf", "application/pdf", b"%PDF-1.4"),
        ];
        let png_base64 = base64::engine::general_purpose::STANDARD.encode(PNG).len();
        let image = format!("image image/png {} {png_base64}", uri("shot.png"));
        let embedded = format!("resource text/plain {} \"line one\\n\"", uri("notes.txt"));
        let png_link = format!("link shot.png image/png {} Some(67)", uri("shot.png"));
        let text_link = format!("link notes.txt text/plain {} Some(9)", uri("notes.txt"));
        let pdf_link = format!("link spec.pdf application/pdf {} Some(8)", uri("spec.pdf"));
        let check = |caps: PromptCapabilities, expected: [&str; 3]| {
            let task = Task {
                context: Some("## Task context\nFolder: work"),
                attachments: &files,
            };
            let blocks = blocks("fix it", task, &caps);
            let mut want = vec![
                "text fix it".to_owned(),
                "text ## Task context\nFolder: work".to_owned(),
            ];
            want.extend(expected.iter().map(|line| (*line).to_owned()));
            assert_eq!(kinds(&blocks), want);
        };
        check(
            capabilities(false, false),
            [&png_link, &text_link, &pdf_link],
        );
        check(capabilities(true, false), [&image, &text_link, &pdf_link]);
        check(capabilities(false, true), [&png_link, &embedded, &pdf_link]);
        check(capabilities(true, true), [&image, &embedded, &pdf_link]);
    }

    #[test]
    fn files_past_the_inline_limits_or_not_text_go_as_links() {
        let tmp = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let folder = tmp.path();
        let mut big = placed(folder, "big.png", "image/png", PNG);
        big.attachment.size = MAX_INLINE_IMAGE_BYTES + 1;
        let long = placed(
            folder,
            "long.log",
            "text/plain",
            &vec![b'a'; MAX_EMBEDDED_TEXT_BYTES as usize + 1],
        );
        let binary = placed(folder, "bad.txt", "text/plain", b"\xff\xfe\0");
        let svg = placed(folder, "x.svg", "image/svg+xml", b"<svg/>");
        let all = capabilities(true, true);
        assert_eq!(carried(&big, &all), Carried::Link);
        assert_eq!(carried(&long, &all), Carried::Link);
        assert_eq!(carried(&svg, &all), Carried::Link);
        // Listed as text, but not UTF-8: it is linked, never sent garbled.
        assert_eq!(carried(&binary, &all), Carried::Embedded);
        let files = [big, long, binary, svg];
        let task = Task {
            context: None,
            attachments: &files,
        };
        let blocks = blocks("p", task, &all);
        assert_eq!(blocks.len(), 5, "no context block without a context");
        assert!(
            blocks[1..]
                .iter()
                .all(|block| matches!(block, ContentBlock::ResourceLink(_))),
            "{blocks:?}"
        );
    }

    #[test]
    fn file_uris_are_percent_encoded() {
        assert_eq!(
            file_uri(Path::new("/tmp/a b/shot (2).png")),
            "file:///tmp/a%20b/shot%20%282%29.png"
        );
        assert_eq!(file_uri(Path::new("/x/é.txt")), "file:///x/%C3%A9.txt");
    }
}
