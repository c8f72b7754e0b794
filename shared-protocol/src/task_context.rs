//! What a run knows beyond its prompt: a bounded context section in the claim, and the
//! context route a run may ask while it holds its lease
//! (`POST /api/devices/self/jobs/{id}/context`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Longest context section a claim carries, in characters: the chain the job continues
/// (earlier prompts, outcomes, reports), the links the person added, and the computer,
/// folder and branch it was asked for. Built by the server, shortest parts kept whole.
pub const MAX_CONTEXT_CHARS: usize = 5_000;
/// Longest answer of the context route, in characters.
pub const MAX_CONTEXT_ANSWER_CHARS: usize = 20_000;
/// Most links one job carries.
pub const MAX_LINKS: usize = 10;
/// Longest link, in characters.
pub const MAX_LINK_CHARS: usize = 2_000;
/// Most jobs `jobs.search` answers with.
pub const MAX_SEARCH_RESULTS: usize = 20;

/// The names the context route answers.
pub const CONTEXT_NAMES: [&str; 3] = [CHAIN, GET, SEARCH];
/// `job.chain`: the earlier runs of this job's chain, oldest first. No arguments.
pub const CHAIN: &str = "job.chain";
/// `job.get {id}`: another job of the same account: its prompt, outcome, report and
/// changed-file list, never file text.
pub const GET: &str = "job.get";
/// `jobs.search {query}`: the account's jobs whose title or prompt hold every word of
/// `query`, newest first, at most [`MAX_SEARCH_RESULTS`].
pub const SEARCH: &str = "jobs.search";

/// `POST /api/devices/self/jobs/{id}/context`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextRequest {
    /// One of [`CONTEXT_NAMES`].
    pub name: String,
    /// The name's arguments: `{}` for `job.chain`, `{id}` for `job.get`, `{query}` for
    /// `jobs.search`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub args: serde_json::Value,
}

/// The answer: plain text, at most [`MAX_CONTEXT_ANSWER_CHARS`] characters, ending with a
/// line saying so where it was cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextAnswer {
    pub text: String,
}
