//! What the [`Gate`](super::gate::Gate) asks the owner and how asking can end, and the one
//! thing it needs from whoever asks ([`Ask`]).
//!
//! The policy never knows how a question travels: the run wing implements [`Ask`] (its
//! `Asker` creates the decision on the server and on this computer and waits), so policy
//! depends on nothing that runs.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use tether_protocol::decisions::{Answer, Scope};

/// One question for the owner.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// `command`, `write`, `read`, `network`, `tool` or `folder`.
    pub kind: String,
    pub question: String,
    /// The canonical action, as it is shown.
    pub action: serde_json::Value,
    /// SHA-256 hex of the canonical action: an answer counts only for it.
    pub action_hash: String,
    /// For a file write: the proposed change as a redacted, bounded unified diff.
    pub preview: Option<String>,
}

/// Who answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredOn {
    Web,
    Computer,
}

impl AnsweredOn {
    pub fn describe(self) -> &'static str {
        match self {
            AnsweredOn::Web => "on the web",
            AnsweredOn::Computer => "on this computer",
        }
    }
}

/// How asking ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Answered {
        answer: Answer,
        scope: Scope,
        on: AnsweredOn,
    },
    /// Nobody answered in time (or the server gave the decision up).
    Expired,
    /// The run stopped while waiting; why, in words ("cancelled", "its lease is lost").
    Withdrawn(&'static str),
    /// The question could not be asked; why.
    Unasked(String),
}

/// Whoever can be asked about an action whose verdict is "ask".
pub trait Ask: fmt::Debug + Send + Sync {
    /// Asks `question` and waits until asking ended, whichever way. Only
    /// [`Outcome::Answered`] with [`Answer::Allow`] allows anything.
    fn ask<'a>(
        &'a self,
        question: &'a Question,
    ) -> Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;
}
