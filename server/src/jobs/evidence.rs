//! Evidence: files a run attaches to its result (seed 003 §4.11).
//!
//! The device uploads each file under the run's lease with its description
//! ([`EvidenceMeta`], base64url JSON in `x-tether-evidence`). The server trusts neither the
//! name nor the device: it checks the description ([`Upload::decode`]), the size and the
//! digest of the bytes, and the type sniffed from the bytes ([`Sniffer`], [`ContentType`])
//! against the declared kind; then it keeps the bytes in the blob store
//! ([`crate::store::blobs`]) and the description here.
//!
//! A device with evidence upload turned off sends the description only (`local: true`, an
//! empty body): the job lists the file as kept on the computer, and reading it answers 409.
//! A file the computer holds for its owner (`held: true`) comes the same way; its owner may
//! preview, release or discard it ([`crate::jobs::held_evidence`]). A variant (a
//! screenshot's small picture, `variantOf`) names a file of the same job stored before it.
//!
//! **Invariant:** only the job's owner reads evidence (another account's is `not_found`), and
//! the ledger records each upload by name, size and digest, never its bytes.

use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use serde_json::json;
use tether_protocol::credential_files::{credential_kind, CredentialKind};
use tether_protocol::evidence::{EvidenceDetails, EvidenceVariant};
use tether_protocol::jobs::{Evidence, EvidenceKind, EvidenceMeta, MAX_EVIDENCE_FILES};
use tether_protocol::routes::EVIDENCE_HEADER;
use tether_protocol::text::{self, TextKind};
use tether_protocol::{AccountId, Code, JobId, LeaseToken};

use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::store::job_rows;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_read, on_reads, on_tx, ReadSource, Store, Tx};

/// Longest `x-tether-evidence` header, in bytes (before decoding).
pub const MAX_META_BYTES: usize = 8 * 1024;
/// Longest file name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest caption, in characters.
pub const MAX_CAPTION_CHARS: usize = 1000;
/// How much of the beginning of a file the sniffer keeps.
const HEAD_BYTES: usize = 1024;

/// An evidence description that passed every check of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub id: String,
    pub kind: EvidenceKind,
    pub name: String,
    pub size: u64,
    pub sha256: String,
    /// What the device says the type is; kept only for a `local` item (there are no bytes
    /// to sniff), otherwise replaced by the sniffed type.
    pub mime: Option<String>,
    pub caption: Option<String>,
    pub local: bool,
    /// Held on the computer for its owner: no bytes, like `local`.
    pub held: bool,
    pub variant_of: Option<String>,
    pub variant: Option<EvidenceVariant>,
    pub details: Option<EvidenceDetails>,
}

impl Upload {
    /// Decodes and checks the `x-tether-evidence` header.
    ///
    /// # Errors
    /// 400 `invalid_request` for a missing or malformed header or an unacceptable field, 413
    /// `payload_too_large` for a `size` over `max_bytes` (unless the file stays local), 422
    /// `invalid_field` for a credential file's name.
    pub fn decode(header: Option<&str>, max_bytes: u64) -> Result<Upload, ApiError> {
        let raw = header.map(str::trim).filter(|raw| !raw.is_empty());
        let raw = raw.ok_or_else(|| {
            bad(format!(
                "This route needs the {EVIDENCE_HEADER} header: base64url JSON describing the file."
            ))
        })?;
        if raw.len() > MAX_META_BYTES {
            return Err(bad(format!(
                "{EVIDENCE_HEADER} is longer than {MAX_META_BYTES} bytes."
            )));
        }
        let lenient = GeneralPurpose::new(
            &URL_SAFE,
            GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
        );
        let json = lenient
            .decode(raw)
            .map_err(|_| bad(format!("{EVIDENCE_HEADER} is not base64url.")))?;
        let meta: EvidenceMeta = serde_json::from_slice(&json).map_err(|error| {
            bad(format!(
                "{EVIDENCE_HEADER} is not a valid description: {error}."
            ))
        })?;
        Upload::check(meta, max_bytes)
    }

    fn check(meta: EvidenceMeta, max_bytes: u64) -> Result<Upload, ApiError> {
        check_id(&meta.id)?;
        check_name(&meta.name)?;
        if let Some(why) = credential_name(&meta.name) {
            return Err(ApiError::invalid_field("name", why));
        }
        let sha256 = meta.sha256.to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("sha256 must be 64 hex digits."));
        }
        if meta.local && meta.held {
            return Err(bad("A file is either local or held, not both."));
        }
        if let Some(of) = &meta.variant_of {
            if check_id(of).is_err() || *of == meta.id {
                return Err(bad("variantOf must name another evidence id of this job."));
            }
        }
        if !meta.local && !meta.held && meta.size > max_bytes {
            return Err(too_large(max_bytes));
        }
        let mime = match meta.mime.filter(|mime| !mime.is_empty()) {
            Some(mime) if !is_mime(&mime) => {
                return Err(bad("mime must look like type/subtype."));
            }
            mime => mime.map(|mime| mime.to_ascii_lowercase()),
        };
        let caption = meta.caption.filter(|caption| !caption.trim().is_empty());
        if let Some(caption) = &caption {
            let printable = text::check(caption, TextKind::MultiLine).is_ok();
            if caption.chars().count() > MAX_CAPTION_CHARS || !printable {
                return Err(bad(
                    "caption must be at most 1000 characters, without control characters.",
                ));
            }
        }
        Ok(Upload {
            id: meta.id,
            kind: meta.kind,
            name: meta.name,
            size: meta.size,
            sha256,
            mime,
            caption,
            local: meta.local,
            held: meta.held,
            variant_of: meta.variant_of,
            variant: meta.variant,
            details: meta.details,
        })
    }
}

/// What the stored bytes are, as sniffed from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentType {
    Png,
    Jpeg,
    Gif,
    Webp,
    Pdf,
    Zip,
    Mp4,
    QuickTime,
    Webm,
    Json,
    Text,
    Html,
    Svg,
    Xml,
    Binary,
}

impl ContentType {
    const ALL: [ContentType; 15] = [
        ContentType::Png,
        ContentType::Jpeg,
        ContentType::Gif,
        ContentType::Webp,
        ContentType::Pdf,
        ContentType::Zip,
        ContentType::Mp4,
        ContentType::QuickTime,
        ContentType::Webm,
        ContentType::Json,
        ContentType::Text,
        ContentType::Html,
        ContentType::Svg,
        ContentType::Xml,
        ContentType::Binary,
    ];

    pub fn mime(self) -> &'static str {
        match self {
            ContentType::Png => "image/png",
            ContentType::Jpeg => "image/jpeg",
            ContentType::Gif => "image/gif",
            ContentType::Webp => "image/webp",
            ContentType::Pdf => "application/pdf",
            ContentType::Zip => "application/zip",
            ContentType::Mp4 => "video/mp4",
            ContentType::QuickTime => "video/quicktime",
            ContentType::Webm => "video/webm",
            ContentType::Json => "application/json",
            ContentType::Text => "text/plain",
            ContentType::Html => "text/html",
            ContentType::Svg => "image/svg+xml",
            ContentType::Xml => "application/xml",
            ContentType::Binary => "application/octet-stream",
        }
    }

    /// The type a stored mime names; anything unknown is served as opaque bytes.
    pub fn from_mime(mime: Option<&str>) -> ContentType {
        ContentType::ALL
            .into_iter()
            .find(|known| Some(known.mime()) == mime)
            .unwrap_or(ContentType::Binary)
    }

    /// The `Content-Type` of a download: text gets its charset.
    pub fn header_value(self) -> String {
        match self {
            ContentType::Text | ContentType::Html | ContentType::Json => {
                format!("{}; charset=utf-8", self.mime())
            }
            other => other.mime().to_owned(),
        }
    }

    /// Whether a browser may show it in place: plain pictures, plain text and JSON. Anything
    /// active (markup, SVG, PDF, archives, video players' formats, unknown bytes) is only
    /// ever a download.
    pub fn inline(self) -> bool {
        matches!(
            self,
            ContentType::Png
                | ContentType::Jpeg
                | ContentType::Gif
                | ContentType::Webp
                | ContentType::Text
                | ContentType::Json
        )
    }

    fn is_text(self) -> bool {
        matches!(
            self,
            ContentType::Json
                | ContentType::Text
                | ContentType::Html
                | ContentType::Svg
                | ContentType::Xml
        )
    }
}

/// Whether bytes of type `found` may be evidence of `kind`.
pub fn kind_allows(kind: EvidenceKind, found: ContentType) -> bool {
    use ContentType as T;
    match kind {
        EvidenceKind::Screenshot | EvidenceKind::Image => {
            matches!(found, T::Png | T::Jpeg | T::Gif | T::Webp)
        }
        EvidenceKind::Video => matches!(found, T::Mp4 | T::QuickTime | T::Webm),
        EvidenceKind::Trace => matches!(found, T::Zip | T::Json | T::Text),
        EvidenceKind::Report => matches!(found, T::Pdf | T::Html | T::Xml) || found.is_text(),
        EvidenceKind::Log => matches!(found, T::Text | T::Json),
        EvidenceKind::File => true,
    }
}

/// Watches bytes go by and tells their type from them: magic numbers at the start, and
/// whether the whole of it is UTF-8 text (checked across chunk boundaries) without NUL.
#[derive(Debug, Default)]
pub struct Sniffer {
    head: Vec<u8>,
    /// The start of a character cut at the end of the last chunk.
    pending: Vec<u8>,
    not_text: bool,
}

impl Sniffer {
    pub fn new() -> Sniffer {
        Sniffer::default()
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if self.head.len() < HEAD_BYTES {
            let take = (HEAD_BYTES - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
        }
        if self.not_text {
            return;
        }
        if chunk.contains(&0) {
            self.not_text = true;
            return;
        }
        if self.pending.is_empty() {
            self.check_utf8(chunk);
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(chunk);
            self.check_utf8(&joined);
        }
    }

    fn check_utf8(&mut self, bytes: &[u8]) {
        match std::str::from_utf8(bytes) {
            Ok(_) => {}
            // A character cut at the end: wait for the rest of it.
            Err(error) if error.error_len().is_none() => {
                self.pending = bytes[error.valid_up_to()..].to_vec();
            }
            Err(_) => self.not_text = true,
        }
    }

    /// Whether what was fed is text that starts like JSON (`{` or `[`): only then is it
    /// worth parsing the whole of it.
    pub fn looks_like_json(&self) -> bool {
        !self.not_text && matches!(first_visible(&self.head).first(), Some(b'{' | b'['))
    }

    /// The type of everything fed; `parses_as_json` says whether the whole of it parsed as
    /// JSON (asked only when [`Sniffer::looks_like_json`]).
    pub fn finish(self, parses_as_json: bool) -> ContentType {
        let text = !self.not_text && self.pending.is_empty();
        classify(&self.head, text, parses_as_json)
    }
}

/// Magic numbers first (the bytes' own claim), then text and its shape.
fn classify(head: &[u8], text: bool, parses_as_json: bool) -> ContentType {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        return ContentType::Png;
    }
    if head.starts_with(b"\xff\xd8\xff") {
        return ContentType::Jpeg;
    }
    if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        return ContentType::Gif;
    }
    if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        return ContentType::Webp;
    }
    if head.starts_with(b"%PDF-") {
        return ContentType::Pdf;
    }
    if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        return ContentType::Zip;
    }
    if head.len() >= 12 && &head[4..8] == b"ftyp" {
        return if &head[8..12] == b"qt  " {
            ContentType::QuickTime
        } else {
            ContentType::Mp4
        };
    }
    if head.starts_with(b"\x1a\x45\xdf\xa3") && contains(head, b"webm") {
        return ContentType::Webm;
    }
    if !text {
        return ContentType::Binary;
    }
    let start = first_visible(head);
    match start.first() {
        Some(b'<') => markup(start),
        Some(b'{' | b'[') if parses_as_json => ContentType::Json,
        _ => ContentType::Text,
    }
}

/// The head without a byte order mark and leading white space.
fn first_visible(head: &[u8]) -> &[u8] {
    let start = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let visible = start
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(start.len());
    &start[visible..]
}

/// Text that starts with `<`: a browser would render it, so it is never plain text.
fn markup(start: &[u8]) -> ContentType {
    let lower = start.to_ascii_lowercase();
    if lower.starts_with(b"<svg") || (lower.starts_with(b"<?xml") && contains(&lower, b"<svg")) {
        ContentType::Svg
    } else if lower.starts_with(b"<?xml") {
        ContentType::Xml
    } else {
        ContentType::Html
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The job and its lease are fine for an upload, and this id is not stored yet: `None`. The
/// same id already stored: that item (answered 200 once the body is read).
///
/// # Errors
/// 404 for a job not of this device, 409 `stale_lease`, 409 `invalid_state` for an id stored
/// with other content or a job holding [`MAX_EVIDENCE_FILES`] already.
pub async fn precheck(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    lease: &LeaseToken,
    upload: &Upload,
) -> Result<Option<Evidence>, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let job = job_rows::fenced(&mut tx, &device.device_id, job_id, lease, now).await?;
    let existing = stored(&mut tx, &job.id, &upload.id).await?;
    let count = count(&mut tx, &job.id).await?;
    if existing.is_none() {
        check_variant_of(&mut tx, &job.id, upload).await?;
    }
    drop(tx);
    match existing {
        Some(row) => same_upload(row, upload).map(Some),
        None if count >= MAX_EVIDENCE_FILES => Err(too_many()),
        None => Ok(None),
    }
}

/// Records a checked upload (its bytes already in the blob store, of type `mime`) under the
/// lease. Returns the item and whether it is new.
///
/// # Errors
/// As [`precheck`]: the lease or the limit may have changed while the bytes came in.
pub async fn record(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    lease: &LeaseToken,
    upload: Upload,
    mime: Option<&str>,
) -> Result<(Evidence, bool), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let job = job_rows::fenced(&mut tx, &device.device_id, job_id, lease, now).await?;
    if let Some(row) = stored(&mut tx, &job.id, &upload.id).await? {
        return same_upload(row, &upload).map(|evidence| (evidence, false));
    }
    if count(&mut tx, &job.id).await? >= MAX_EVIDENCE_FILES {
        return Err(too_many());
    }
    check_variant_of(&mut tx, &job.id, &upload).await?;
    let size = i64::try_from(upload.size).map_err(|_| bad("size is too large."))?;
    let details_json = upload
        .details
        .map(|d| serde_json::to_string(&d))
        .transpose()?;
    let variant = upload.variant.map(EvidenceVariant::as_str);
    let sql = "INSERT INTO evidence (job_id, id, account_id, attempt, kind, name, size, sha256, \
               mime, caption, kept_local, created_at, held, variant_of, variant, details_json) \
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";
    on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(&job.id)
        .bind(&upload.id)
        .bind(&job.account_id)
        .bind(job.attempt)
        .bind(upload.kind.as_str())
        .bind(&upload.name)
        .bind(size)
        .bind(&upload.sha256)
        .bind(mime)
        .bind(upload.caption.as_deref())
        .bind(i64::from(upload.local))
        .bind(now)
        .bind(i64::from(upload.held))
        .bind(upload.variant_of.as_deref())
        .bind(variant)
        .bind(details_json.as_deref())
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    let account_id: AccountId = job.account_id()?;
    let detail = json!({ "jobId": job.id, "evidenceId": upload.id, "kind": upload.kind.as_str(),
                         "name": upload.name, "size": upload.size, "sha256": upload.sha256,
                         "local": upload.local, "held": upload.held,
                         "variantOf": upload.variant_of, "attempt": job.attempt });
    ledger::record(
        &mut tx,
        &account_id,
        now,
        LedgerKind::EvidenceUploaded,
        &job.id,
        detail,
    )
    .await?;
    tx.commit().await?;
    tracing::info!(job_id = %job_id, evidence_id = %upload.id, size = upload.size,
                   local = upload.local, held = upload.held, "evidence stored");
    let evidence = EvidenceRow {
        id: upload.id,
        kind: upload.kind.as_str().to_owned(),
        name: upload.name,
        size,
        sha256: upload.sha256,
        mime: mime.map(str::to_owned),
        caption: upload.caption,
        kept_local: i64::from(upload.local),
        held: i64::from(upload.held),
        variant_of: upload.variant_of,
        variant: variant.map(str::to_owned),
        details_json,
    }
    .into_evidence();
    Ok((evidence, true))
}

/// The evidence of a job of `account_id`, oldest first.
///
/// # Errors
/// A database error.
pub(crate) async fn list(
    mut source: impl ReadSource,
    account_id: &AccountId,
    job_id: &JobId,
) -> Result<Vec<Evidence>, ApiError> {
    let sql = format!(
        "SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE job_id = $1 AND account_id = $2 \
         ORDER BY created_at, id"
    );
    let rows = on_reads!(source, |pool| sqlx::query_as::<_, EvidenceRow>(&sql)
        .bind(job_id.as_str())
        .bind(account_id.as_str())
        .fetch_all(pool)
        .await)?;
    Ok(rows.into_iter().map(EvidenceRow::into_evidence).collect())
}

/// One evidence item of a job of `account_id`.
///
/// # Errors
/// 404 `not_found` for an unknown item, job, or another account's.
pub async fn find(
    store: &Store,
    account_id: &AccountId,
    job_id: &JobId,
    evidence_id: &str,
) -> Result<Evidence, ApiError> {
    if check_id(evidence_id).is_err() {
        return Err(ApiError::not_found("evidence"));
    }
    let sql = format!(
        "SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE job_id = $1 AND id = $2 \
         AND account_id = $3"
    );
    let row = on_read!(store, |pool| sqlx::query_as::<_, EvidenceRow>(&sql)
        .bind(job_id.as_str())
        .bind(evidence_id)
        .bind(account_id.as_str())
        .fetch_optional(pool)
        .await)?;
    row.map(EvidenceRow::into_evidence)
        .ok_or_else(|| ApiError::not_found("evidence"))
}

/// The refusal for reading an item whose bytes stayed on the computer.
pub fn kept_local(evidence: &Evidence) -> ApiError {
    ApiError::new(
        Code::InvalidState,
        format!(
            "{} was kept on the computer that ran the job (evidence upload is off there); \
             only its description was sent.",
            evidence.name
        ),
    )
}

/// The refusal for reading the bytes of a file the computer holds for its owner.
pub fn held_there(evidence: &Evidence) -> ApiError {
    ApiError::new(
        Code::InvalidState,
        format!(
            "{} is held on the computer that ran the job; preview or release it first.",
            evidence.name
        ),
    )
}

const EVIDENCE_COLUMNS: &str = "id, kind, name, size, sha256, mime, caption, kept_local, held, \
                                variant_of, variant, details_json";

/// An `evidence` row. Not `Serialize`: [`EvidenceRow::into_evidence`] builds the wire type.
#[derive(sqlx::FromRow)]
struct EvidenceRow {
    id: String,
    kind: String,
    name: String,
    size: i64,
    sha256: String,
    mime: Option<String>,
    caption: Option<String>,
    kept_local: i64,
    held: i64,
    variant_of: Option<String>,
    variant: Option<String>,
    details_json: Option<String>,
}

impl EvidenceRow {
    fn into_evidence(self) -> Evidence {
        Evidence {
            id: self.id,
            kind: self.kind,
            name: self.name,
            size: u64::try_from(self.size).unwrap_or(0),
            sha256: self.sha256,
            mime: self.mime,
            local: self.kept_local != 0,
            caption: self.caption,
            held: self.held != 0,
            variant_of: self.variant_of,
            variant: self
                .variant
                .and_then(|name| serde_json::from_value(serde_json::Value::String(name)).ok()),
            details: self
                .details_json
                .and_then(|json| serde_json::from_str(&json).ok()),
        }
    }
}

async fn stored(tx: &mut Tx, job_id: &str, id: &str) -> Result<Option<EvidenceRow>, ApiError> {
    let sql = format!("SELECT {EVIDENCE_COLUMNS} FROM evidence WHERE job_id = $1 AND id = $2");
    let row = on_tx!(tx, |conn| sqlx::query_as::<_, EvidenceRow>(&sql)
        .bind(job_id)
        .bind(id)
        .fetch_optional(conn)
        .await)?;
    Ok(row)
}

async fn count(tx: &mut Tx, job_id: &str) -> Result<u64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM evidence WHERE job_id = $1"
    )
    .bind(job_id)
    .fetch_one(conn)
    .await)?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// The same id again is a repeat only with the same content; anything else is a conflict.
fn same_upload(row: EvidenceRow, upload: &Upload) -> Result<Evidence, ApiError> {
    let same = row.sha256 == upload.sha256
        && u64::try_from(row.size).ok() == Some(upload.size)
        && (row.kept_local != 0) == upload.local
        && (row.held != 0) == upload.held;
    if same {
        Ok(row.into_evidence())
    } else {
        Err(ApiError::new(
            Code::InvalidState,
            format!(
                "Evidence {} of this job is stored already with other content.",
                upload.id
            ),
        ))
    }
}

/// A variant names a file of the same job stored before it.
async fn check_variant_of(tx: &mut Tx, job_id: &str, upload: &Upload) -> Result<(), ApiError> {
    let Some(of) = &upload.variant_of else {
        return Ok(());
    };
    if stored(tx, job_id, of).await?.is_none() {
        return Err(bad(format!(
            "variantOf: {of} is not an evidence id of this job stored before this file."
        )));
    }
    Ok(())
}

fn too_many() -> ApiError {
    ApiError::new(
        Code::InvalidState,
        format!("This job holds {MAX_EVIDENCE_FILES} evidence files already."),
    )
}

/// 413 for a file over the configured limit.
pub fn too_large(max_bytes: u64) -> ApiError {
    ApiError::new(
        Code::PayloadTooLarge,
        format!("Evidence files are at most {max_bytes} bytes."),
    )
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::InvalidRequest, message)
}

/// Ids are what the device chose: 1 to 64 letters, digits, `-` and `_`.
pub(crate) fn check_id(id: &str) -> Result<(), ApiError> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(bad(
            "id must be 1 to 64 letters, digits, '-' or '_'.".to_owned()
        ))
    }
}

/// A file name, never a path: no separators, no `.` or `..`, no control characters.
fn check_name(name: &str) -> Result<(), ApiError> {
    if is_file_name(name) {
        Ok(())
    } else {
        Err(bad(
            "name must be a file name (at most 255 bytes, no folder, every character visible).",
        ))
    }
}

/// Whether `name` is one file's name as a person sees it (evidence and attachments): at
/// most [`MAX_NAME_BYTES`], no folder, not `.` or `..`, no surrounding space, and every
/// character visible.
pub(crate) fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name != "."
        && name != ".."
        && name.trim() == name
        && !name.chars().any(|c| matches!(c, '/' | '\\'))
        // No control character, and nothing invisible or direction-changing: `a\u{202E}fdp.exe`
        // must not read as `aexe.pdf` on the job page.
        && text::check(name, TextKind::Name).is_ok()
}

/// Why a file with this name is never evidence: environment files, keys, credential files
/// and folders. The list is the one the agent keeps out of runs and the live file view
/// (`tether_protocol::credential_files`), so the two cannot disagree.
pub fn credential_name(name: &str) -> Option<&'static str> {
    credential_kind(name).map(|kind| match kind {
        CredentialKind::Environment => "environment files hold secrets and are never evidence.",
        CredentialKind::CredentialFolder | CredentialKind::CredentialFile | CredentialKind::Key => {
            "keys and credential files are never evidence."
        }
    })
}

/// `type/subtype` with the characters RFC 6838 allows, at most 100 bytes, no parameters.
fn is_mime(mime: &str) -> bool {
    let token = |part: &str| {
        !part.is_empty()
            && part.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(
                        b,
                        b'!' | b'#' | b'$' | b'&' | b'-' | b'^' | b'_' | b'.' | b'+'
                    )
            })
    };
    mime.len() <= 100
        && mime
            .split_once('/')
            .is_some_and(|(kind, subtype)| token(kind) && token(subtype))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sniff(chunks: &[&[u8]]) -> ContentType {
        let mut sniffer = Sniffer::new();
        for chunk in chunks {
            sniffer.feed(chunk);
        }
        let all: Vec<u8> = chunks.concat();
        let parses = serde_json::from_slice::<serde::de::IgnoredAny>(&all).is_ok();
        assert_eq!(
            sniffer.looks_like_json(),
            all.trim_ascii_start().starts_with(b"{")
        );
        sniffer.finish(parses)
    }

    #[test]
    fn types_come_from_the_bytes() {
        let cases: &[(&[&[u8]], ContentType)] = &[
            (&[b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"], ContentType::Png),
            (&[b"\xff\xd8\xff\xe0\0\x10JFIF"], ContentType::Jpeg),
            (&[b"GIF89a\x01\0"], ContentType::Gif),
            (&[b"RIFF\x24\0\0\0WEBPVP8 "], ContentType::Webp),
            (&[b"%PDF-1.7\n"], ContentType::Pdf),
            (&[b"PK\x03\x04\x14\0"], ContentType::Zip),
            (&[b"\0\0\0\x18ftypmp42"], ContentType::Mp4),
            (&[b"\0\0\0\x14ftypqt  "], ContentType::QuickTime),
            (
                &[b"\x1a\x45\xdf\xa3\x9f\x42\x82\x84webm"],
                ContentType::Webm,
            ),
            (&[b"{\"a\": [1, 2]}\n"], ContentType::Json),
            (&[b"{not json"], ContentType::Text),
            (&[b"plain ", b"log line\n"], ContentType::Text),
            (&[b""], ContentType::Text),
            (
                &[b"\xef\xbb\xbf  <!DOCTYPE html><script>"],
                ContentType::Html,
            ),
            (&[b"<?xml version=\"1.0\"?><svg xmlns="], ContentType::Svg),
            (&[b"<svg onload=alert(1)>"], ContentType::Svg),
            (&[b"<?xml version=\"1.0\"?><feed>"], ContentType::Xml),
            (&[b"text with a \0 NUL"], ContentType::Binary),
            (&[b"\xc3\x28 invalid"], ContentType::Binary),
        ];
        for (chunks, expected) in cases {
            assert_eq!(sniff(chunks), *expected, "{chunks:?}");
        }
    }

    #[test]
    fn a_character_cut_between_chunks_is_still_text() {
        let text = "héllo wörld ✓".as_bytes();
        for cut in 0..text.len() {
            assert_eq!(
                sniff(&[&text[..cut], &text[cut..]]),
                ContentType::Text,
                "{cut}"
            );
        }
        assert_eq!(sniff(&[b"ends cut \xe2\x9c"]), ContentType::Binary);
    }

    #[test]
    fn kinds_allow_their_types_only() {
        assert!(kind_allows(EvidenceKind::Screenshot, ContentType::Png));
        assert!(!kind_allows(EvidenceKind::Screenshot, ContentType::Text));
        assert!(!kind_allows(EvidenceKind::Image, ContentType::Svg));
        assert!(!kind_allows(EvidenceKind::Log, ContentType::Png));
        assert!(kind_allows(EvidenceKind::Log, ContentType::Json));
        assert!(kind_allows(EvidenceKind::Report, ContentType::Pdf));
        assert!(kind_allows(EvidenceKind::Video, ContentType::Webm));
        assert!(!kind_allows(EvidenceKind::Video, ContentType::Zip));
        assert!(kind_allows(EvidenceKind::Trace, ContentType::Zip));
        assert!(ContentType::ALL
            .into_iter()
            .all(|found| kind_allows(EvidenceKind::File, found)));
    }

    #[test]
    fn only_plain_pictures_and_text_are_shown_in_place() {
        let inline: Vec<ContentType> = ContentType::ALL
            .into_iter()
            .filter(|found| found.inline())
            .collect();
        assert_eq!(
            inline,
            [
                ContentType::Png,
                ContentType::Jpeg,
                ContentType::Gif,
                ContentType::Webp,
                ContentType::Json,
                ContentType::Text
            ]
        );
        for found in ContentType::ALL {
            assert_eq!(ContentType::from_mime(Some(found.mime())), found);
        }
        assert_eq!(
            ContentType::from_mime(Some("text/html; x")),
            ContentType::Binary
        );
    }

    fn meta(overrides: serde_json::Value) -> Option<String> {
        let mut base = json!({
            "id": "ev-1", "kind": "log", "name": "run.log", "size": 3,
            "sha256": "a".repeat(64),
        });
        if let (Some(base), Some(overrides)) = (base.as_object_mut(), overrides.as_object()) {
            for (key, value) in overrides {
                base.insert(key.clone(), value.clone());
            }
        }
        Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(base.to_string()))
    }

    #[test]
    fn descriptions_are_checked() {
        let code = |header: Option<String>| {
            Upload::decode(header.as_deref(), 1000).map_err(|error| error.code().name())
        };
        assert!(code(meta(json!({}))).is_ok());
        assert!(code(meta(json!({"sha256": "A".repeat(64)}))).is_ok());
        assert!(code(meta(json!({"name": "résumé final.txt"}))).is_ok());
        for bad_one in [
            json!({"id": ""}),
            json!({"id": "../x"}),
            json!({"kind": "script"}),
            json!({"name": "../../etc/passwd"}),
            json!({"name": "a/b.txt"}),
            json!({"name": "..\\x"}),
            json!({"name": ".."}),
            json!({"name": "line\nbreak"}),
            json!({"name": ""}),
            json!({"sha256": "abc"}),
            json!({"sha256": "g".repeat(64)}),
            json!({"size": -1}),
            json!({"mime": "not a mime"}),
            json!({"caption": "bell\u{7}"}),
        ] {
            assert_eq!(
                code(meta(bad_one.clone())),
                Err("invalid_request"),
                "{bad_one}"
            );
        }
        assert_eq!(code(None), Err("invalid_request"));
        assert_eq!(code(Some("!!!".to_owned())), Err("invalid_request"));
        assert_eq!(code(meta(json!({"size": 1001}))), Err("payload_too_large"));
        assert!(code(meta(json!({"size": 1001, "local": true}))).is_ok());
        for credential in [
            ".env",
            ".env.local",
            "id_rsa",
            "server.PEM",
            "credentials.json",
            "known_hosts",
            "authorized_keys",
            "release.asc",
        ] {
            assert_eq!(
                code(meta(json!({ "name": credential }))),
                Err("invalid_field"),
                "{credential}"
            );
        }
    }
}
