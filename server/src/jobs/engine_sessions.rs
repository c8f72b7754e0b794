//! A stopped job's engine session, deleted for its owner: the conversation a coding agent
//! had for the job, which its computer keeps so a follow-up can carry it on. The server
//! keeps none of it, so the request is relayed to the computer as a `session.delete` frame
//! under a single-use request id ([`crate::relay::Hub::request_deletion`]); the computer
//! answers at `POST /api/devices/self/session-deletions/{id}`, on any replica.
//!
//! **Invariant:** only the job's owner asks (the job is looked up by the owner's account:
//! anyone else's is `not_found`); only the device the request id was given to answers; only
//! the computer's `deleted: true` is done, and that is in the ledger (`session.deleted`),
//! written by the replica that took the answer before the waiting request hears it.

use std::time::Duration;

use serde_json::json;
use tether_protocol::capabilities::EngineKind;
use tether_protocol::engine_sessions::{SessionDeletion, MAX_DELETION_ERROR_CHARS};
use tether_protocol::text::{sanitize, TextKind};
use tether_protocol::{AccountId, Code, JobId};

use crate::devices;
use crate::error::ApiError;
use crate::relay::{DeletionBinding, Hub};
use crate::store::job_rows;
use crate::store::ledger::{self, LedgerKind};
use crate::store::{stored_id, Store};

/// A device's answer, checked: a deletion, or the computer's reason it could not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedDeletion(SessionDeletion);

impl TryFrom<SessionDeletion> for CheckedDeletion {
    type Error = ApiError;

    fn try_from(answer: SessionDeletion) -> Result<CheckedDeletion, ApiError> {
        let Some(error) = answer.error else {
            return Ok(CheckedDeletion(answer));
        };
        if answer.deleted {
            return Err(ApiError::invalid_field(
                "error",
                "must be absent when deleted is true.",
            ));
        }
        if error.chars().count() > MAX_DELETION_ERROR_CHARS {
            return Err(ApiError::invalid_field(
                "error",
                "must be at most 500 characters.",
            ));
        }
        let error = sanitize(error.trim(), TextKind::MultiLine).into_owned();
        Ok(CheckedDeletion(SessionDeletion {
            deleted: false,
            error: Some(error),
        }))
    }
}

impl CheckedDeletion {
    pub fn deleted(&self) -> bool {
        self.0.deleted
    }

    pub fn into_inner(self) -> SessionDeletion {
        self.0
    }
}

/// Asks the computer of job `job_id` of `account_id` to delete the job's engine session,
/// and waits up to `timeout` for it to say it did.
///
/// # Errors
/// 404 for a job not of this account; 409 `job_active` while the
/// job is queued, running or waiting; 409 `no_session` when its computer publishes its
/// engine as a recipe; 409 `device_offline` (also once it is revoked); 504
/// `device_timeout`; 409 `device_refused`
/// with the computer's sentence when it could not delete it.
pub async fn delete(
    store: &Store,
    hub: &Hub,
    account_id: &AccountId,
    job_id: &JobId,
    timeout: Duration,
) -> Result<(), ApiError> {
    let row = job_rows::read_for_account(store, account_id, job_id)
        .await?
        .ok_or_else(|| ApiError::not_found("job"))?;
    let state = row.state()?;
    if !state.is_final() {
        return Err(ApiError::new(
            Code::JobActive,
            format!(
                "The job is {}: delete its agent session once it stopped.",
                state.as_str()
            ),
        ));
    }
    let engine = row.spec()?.engine;
    let device_id = stored_id(row.device_id)?;
    let capabilities = match devices::usable_capabilities(store, account_id, &device_id).await {
        Err(error) if error.code() == Code::NotFound => {
            return Err(ApiError::new(
                Code::DeviceOffline,
                "That computer is no longer paired: nothing can be deleted on it.",
            ))
        }
        found => found?,
    };
    let published = capabilities
        .iter()
        .flat_map(|capabilities| &capabilities.engines)
        .find(|published| published.name == engine);
    if published.is_some_and(|published| published.kind != EngineKind::Acp) {
        return Err(ApiError::new(
            Code::NoSession,
            format!("{engine} is a recipe on that computer: it keeps no agent session."),
        ));
    }
    let binding = DeletionBinding {
        account_id: account_id.clone(),
        job_id: job_id.clone(),
    };
    let answer = hub.request_deletion(&device_id, binding, timeout).await?;
    if answer.deleted {
        return Ok(());
    }
    Err(ApiError::new(Code::DeviceRefused, says(answer.error)))
}

fn says(reason: Option<String>) -> String {
    let reason = reason.unwrap_or_default();
    let reason = job_rows::truncate(reason.trim(), 1000);
    if reason.is_empty() {
        "The computer did not delete the session.".to_owned()
    } else {
        format!("The computer did not delete the session: {reason}")
    }
}

/// Records in the ledger that the computer deleted the session `binding` names.
///
/// # Errors
/// A database error.
pub async fn record_deleted(store: &Store, binding: &DeletionBinding) -> Result<(), ApiError> {
    let now = store.now();
    let mut tx = store.begin().await?;
    let detail = json!({ "jobId": binding.job_id });
    let (kind, subject) = (LedgerKind::SessionDeleted, binding.job_id.as_str());
    ledger::record(&mut tx, &binding.account_id, now, kind, subject, detail).await?;
    tx.commit().await?;
    tracing::info!(job_id = %binding.job_id, "engine session deleted on its computer");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(deleted: bool, error: Option<&str>) -> Result<CheckedDeletion, ApiError> {
        CheckedDeletion::try_from(SessionDeletion {
            deleted,
            error: error.map(str::to_owned),
        })
    }

    #[test]
    fn an_answer_is_one_or_the_other_and_bounded() {
        assert!(checked(true, None).is_ok_and(|done| done.deleted()));
        assert!(checked(false, None).is_ok_and(|done| !done.deleted()));
        assert!(checked(true, Some("but")).is_err());
        assert!(checked(false, Some(&"x".repeat(501))).is_err());
        let told = checked(false, Some(" the disk is full\u{1b}[31m ")).map(|done| done.0.error);
        assert_eq!(
            told.ok().flatten().as_deref(),
            Some("the disk is full\u{fffd}[31m")
        );
    }
}
