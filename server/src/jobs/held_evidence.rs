//! Held evidence: a file the computer keeps for its owner (`held: true`, no bytes on the
//! server) until the owner asks to **preview**, **release** or **discard** it.
//!
//! The owner's request is relayed to the device as an `evidence.request` frame under a
//! single-use upload id ([`crate::relay::Hub::request_evidence`]); the device answers at
//! `POST /api/devices/self/evidence-uploads/{uploadId}`, on any replica. That replica
//! checks the upload against the held row (the same id, size and digest: the bytes are the
//! file that was described), does the work (a preview into [`crate::previews`], a release
//! into the blob store and the row, a discard off the table) and hands the outcome to the
//! waiting request.
//!
//! **Invariant:** only the job's owner asks (another account's file is `not_found`); only
//! the device the upload id was given to answers; a release and a discard are in the
//! ledger, in the transaction that changes the rows.

use std::time::Duration;

use serde_json::json;
use tether_protocol::evidence::EvidenceAction;
use tether_protocol::jobs::Evidence;
use tether_protocol::{AccountId, Code, JobId};

use crate::devices;
use crate::error::ApiError;
use crate::jobs::attachments::percent_decode;
use crate::jobs::evidence::{self, Upload};
use crate::relay::{EvidenceAnswer, Hub, UploadBinding};
use crate::store::job_rows;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{on_tx, Store};

/// The prefix a refusal starts with when the computer's evidence upload is off.
pub const KEPT_PREFIX: &str = "code=evidence_kept";

/// Asks the job's device to `action` held file `evidence_id` of a job of `account_id`, and
/// waits up to `timeout` for the outcome (a refusal is an error).
///
/// # Errors
/// 404 for another account's job or file; 409 `invalid_state` for a file that is not held
/// or a refusal; 409 `evidence_kept` for a release while the computer's upload is off; 409
/// `device_offline`; 504 `device_timeout`.
pub async fn ask(
    store: &Store,
    hub: &Hub,
    (account_id, job_id, evidence_id): (&AccountId, &JobId, &str),
    action: EvidenceAction,
    timeout: Duration,
) -> Result<EvidenceAnswer, ApiError> {
    let item = evidence::find(store, account_id, job_id, evidence_id).await?;
    if !item.held {
        return Err(ApiError::new(
            Code::InvalidState,
            format!("{} is not held on the computer.", item.name),
        ));
    }
    let device_id = job_rows::device_of(store, account_id, job_id).await?;
    if action == EvidenceAction::Release {
        let capabilities = devices::usable_capabilities(store, account_id, &device_id).await?;
        let upload_off = capabilities
            .and_then(|caps| caps.evidence)
            .is_some_and(|settings| !settings.upload);
        if upload_off {
            return Err(kept("Evidence upload is off on that computer."));
        }
    }
    let binding = UploadBinding {
        account_id: account_id.clone(),
        job_id: job_id.clone(),
        evidence_id: evidence_id.to_owned(),
        action,
    };
    match hub.request_evidence(&device_id, binding, timeout).await? {
        EvidenceAnswer::Refused { kept: true, reason } => Err(kept(&says(&reason))),
        EvidenceAnswer::Refused { reason, .. } => {
            Err(ApiError::new(Code::InvalidState, says(&reason)))
        }
        answer => Ok(answer),
    }
}

fn kept(message: &str) -> ApiError {
    ApiError::new(
        Code::EvidenceKept,
        format!("{message} The file stays on the computer; preview it there or discard it."),
    )
}

fn says(reason: &str) -> String {
    let reason = job_rows::truncate(reason.trim(), 500);
    if reason.is_empty() {
        "The computer refused.".to_owned()
    } else {
        format!("The computer says: {reason}")
    }
}

/// Reads the `x-tether-evidence-refused` header: percent-encoded UTF-8, `kept` when it
/// starts with [`KEPT_PREFIX`] (the computer's evidence upload is off); the rest is the
/// reason.
///
/// # Errors
/// 400 for malformed percent-encoding.
pub fn refusal(raw: &str) -> Result<(bool, String), ApiError> {
    let text = percent_decode(raw).ok_or_else(|| {
        ApiError::new(
            Code::InvalidRequest,
            "The refusal is not percent-encoded UTF-8.",
        )
    })?;
    Ok(match text.strip_prefix(KEPT_PREFIX) {
        Some(rest) => (true, rest.trim_start_matches([':', ' ']).to_owned()),
        None => (false, text),
    })
}

/// The held row an upload under `binding` answers for, checked against the upload's
/// description: the same id, kind, size and digest (the bytes are the file described).
///
/// # Errors
/// 404 when the row is gone; 400 `invalid_request` for a description of another file.
pub async fn expected(
    store: &Store,
    binding: &UploadBinding,
    upload: &Upload,
) -> Result<Evidence, ApiError> {
    let row = evidence::find(
        store,
        &binding.account_id,
        &binding.job_id,
        &binding.evidence_id,
    )
    .await?;
    let same = upload.id == row.id
        && upload.kind.as_str() == row.kind
        && upload.size == row.size
        && upload.sha256 == row.sha256;
    if !same {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "The description is not the one of the held file this upload id asks for \
             (id, kind, size and sha256 must match).",
        ));
    }
    Ok(row)
}

/// Marks the held file released (its bytes, of type `mime`, are in the blob store now),
/// with its ledger line, and returns it.
///
/// # Errors
/// 409 `invalid_state` when it is no longer held (released or discarded meanwhile).
pub async fn release(
    store: &Store,
    binding: &UploadBinding,
    mime: &str,
) -> Result<Evidence, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let sql = "UPDATE evidence SET held = 0, released_at = $1, mime = $2 \
               WHERE job_id = $3 AND id = $4 AND account_id = $5 AND held = 1";
    let changed = on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(now)
        .bind(mime)
        .bind(binding.job_id.as_str())
        .bind(&binding.evidence_id)
        .bind(binding.account_id.as_str())
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    if changed == 0 {
        return Err(ApiError::new(
            Code::InvalidState,
            "The file is no longer held.",
        ));
    }
    let detail = json!({ "jobId": binding.job_id, "evidenceId": binding.evidence_id,
                         "mime": mime });
    let kind = LedgerKind::EvidenceRelease;
    let subject = binding.job_id.as_str();
    ledger::record(&mut tx, &binding.account_id, now, kind, subject, detail).await?;
    tx.commit().await?;
    tracing::info!(job_id = %binding.job_id, evidence_id = %binding.evidence_id,
                   "held evidence released");
    evidence::find(
        store,
        &binding.account_id,
        &binding.job_id,
        &binding.evidence_id,
    )
    .await
}

/// Deletes the discarded file's row and its variants' rows, with a ledger line.
///
/// # Errors
/// A database error.
pub async fn discard(store: &Store, binding: &UploadBinding) -> Result<u64, ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let sql = "DELETE FROM evidence WHERE job_id = $1 AND account_id = $2 \
               AND (id = $3 OR variant_of = $3)";
    let deleted = on_tx!(&mut tx, |conn| sqlx::query(sql)
        .bind(binding.job_id.as_str())
        .bind(binding.account_id.as_str())
        .bind(&binding.evidence_id)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
    let detail = json!({ "jobId": binding.job_id, "evidenceId": binding.evidence_id,
                         "rows": deleted });
    let kind = LedgerKind::EvidenceDiscard;
    let subject = binding.job_id.as_str();
    ledger::record(&mut tx, &binding.account_id, now, kind, subject, detail).await?;
    tx.commit().await?;
    tracing::info!(job_id = %binding.job_id, evidence_id = %binding.evidence_id, rows = deleted,
                   "held evidence discarded");
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_whether_upload_is_off() {
        assert_eq!(
            refusal("code%3Devidence_kept%3A%20upload%20is%20off").ok(),
            Some((true, "upload is off".to_owned()))
        );
        assert_eq!(
            refusal("no%20such%20file").ok(),
            Some((false, "no such file".to_owned()))
        );
        assert!(refusal("%zz").is_err());
    }
}
