//! The context route's answers (`POST /api/devices/self/jobs/{id}/context`): what a run may
//! ask while it holds its lease, answered from its job's account only, or, for a space job,
//! from its space only (its members' space jobs, never anyone's personal ones).
//!
//! - `job.chain`: the earlier runs of the job's chain, oldest first.
//! - `job.get {id}`: another job of the account: prompt, outcome, report and the list of
//!   files it changed (paths, statuses, counts; never file text).
//! - `jobs.search {query}`: the account's jobs whose title or prompt hold every word,
//!   newest first, at most [`MAX_SEARCH_RESULTS`].
//!
//! The route writes nothing, so the lease is checked on a read connection, not in a write
//! transaction: a run asking questions never waits behind, or holds up, the writes of runs.
//!
//! **Invariant:** an answer is at most [`MAX_CONTEXT_ANSWER_CHARS`] characters, and one cut
//! to fit ends with a line saying so.

use std::fmt::Write as _;

use serde_json::Value;
use tether_protocol::changes::{ChangeStatus, Changes};
use tether_protocol::task_context::{
    ContextAnswer, ContextRequest, CHAIN, GET, MAX_CONTEXT_ANSWER_CHARS, MAX_SEARCH_RESULTS, SEARCH,
};
use tether_protocol::text::{self, TextKind};
use tether_protocol::{AccountId, JobId, LeaseToken};

use crate::clock::to_time;
use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::jobs::task_context::{self, tell_outcome, tell_run, Sheet, CUT_MARK};
use crate::store::job_rows::{self, JobRow};
use crate::store::{on_reads, ReadSource, Reads, Store};

/// Most earlier runs `job.chain` tells (the newest of them, oldest first).
pub const CHAIN_RUNS: i64 = 50;
/// Longest `jobs.search` query, in characters.
pub const MAX_QUERY_CHARS: usize = 200;
/// Most words of a `jobs.search` query.
pub const MAX_QUERY_WORDS: usize = 10;

/// A checked [`ContextRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Question {
    Chain,
    Get(JobId),
    /// Lowercased words, each to be found in the title or the prompt.
    Search(Vec<String>),
}

impl TryFrom<ContextRequest> for Question {
    type Error = ApiError;

    fn try_from(request: ContextRequest) -> Result<Question, ApiError> {
        let args = match request.args {
            Value::Null => serde_json::Map::new(),
            Value::Object(args) => args,
            _ => return Err(ApiError::invalid_field("args", "must be an object.")),
        };
        match request.name.as_str() {
            CHAIN => Ok(Question::Chain),
            GET => {
                let id = args.get("id").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid_field("id", "job.get needs the id of a job, as a string.")
                })?;
                JobId::parse(id)
                    .map(Question::Get)
                    .map_err(|_| ApiError::invalid_field("id", "is not a job id."))
            }
            SEARCH => {
                let query = args.get("query").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid_field("query", "jobs.search needs a query, as a string.")
                })?;
                search_words(query).map(Question::Search)
            }
            _ => Err(ApiError::invalid_field(
                "name",
                "must be job.chain, job.get or jobs.search.",
            )),
        }
    }
}

/// The lowercased words of a search query.
///
/// # Errors
/// 422 `invalid_field` naming `query`.
fn search_words(query: &str) -> Result<Vec<String>, ApiError> {
    let refuse = |why: &str| Err(ApiError::invalid_field("query", why));
    if query.chars().count() > MAX_QUERY_CHARS {
        return refuse("must be at most 200 characters.");
    }
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    if words
        .iter()
        .any(|word| text::check(word, TextKind::Name).is_err())
    {
        return refuse("must not hold control or invisible characters.");
    }
    if words.is_empty() {
        return refuse("must hold a word.");
    }
    if words.len() > MAX_QUERY_WORDS {
        return refuse("at most 10 words.");
    }
    Ok(words)
}

/// Answers `question` for a run of `device` that holds `lease` on `job_id`.
///
/// # Errors
/// 404 for a job not of this device (or, for `job.get`, a job not of its account), 409
/// `stale_lease`.
pub async fn answer(
    store: &Store,
    device: &DeviceIdentity,
    job_id: &JobId,
    lease: &LeaseToken,
    question: Question,
) -> Result<ContextAnswer, ApiError> {
    let now = store.now();
    let mut reads = store.hold_reader().await?;
    let job = job_rows::read_for_account(&mut reads, &device.account_id, job_id)
        .await?
        .filter(|job| job.device_id == device.device_id.as_str())
        .ok_or_else(|| ApiError::not_found("job"))?;
    if !job_rows::holds_lease(&job, lease, now) {
        return Err(job_rows::stale_lease());
    }
    let scope = match &job.space_id {
        Some(space_id) => Scope::Space(space_id.clone()),
        None => Scope::Account(device.account_id.to_string()),
    };
    let sheet = match question {
        Question::Chain => chain(&mut reads, &job).await?,
        Question::Get(other) => get(&mut reads, &scope, &other).await?,
        Question::Search(words) => search(&mut reads, &scope, &words).await?,
    };
    Ok(ContextAnswer {
        text: bounded(&sheet),
    })
}

/// Whose jobs `job.get` and `jobs.search` read: the job's account's, or its space's.
enum Scope {
    Account(String),
    Space(String),
}

impl Scope {
    /// The `jobs` column that names the scope, and its value.
    fn column(&self) -> (&'static str, &str) {
        match self {
            Scope::Account(id) => ("account_id", id),
            Scope::Space(id) => ("space_id", id),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Scope::Account(_) => "account",
            Scope::Space(_) => "space",
        }
    }
}

/// The sheet at most [`MAX_CONTEXT_ANSWER_CHARS`] characters, with a last line saying so
/// when it was cut.
fn bounded(sheet: &Sheet) -> String {
    let whole = sheet.render(MAX_CONTEXT_ANSWER_CHARS);
    if !whole.cut {
        return whole.text;
    }
    let note = format!(
        "(This answer was cut to {MAX_CONTEXT_ANSWER_CHARS} characters: each part ending \
         {CUT_MARK} is shortened.)\n"
    );
    let room = MAX_CONTEXT_ANSWER_CHARS - note.chars().count();
    let mut text = sheet.render(room).text;
    text.push_str(&note);
    text
}

async fn chain(reads: impl ReadSource, job: &JobRow) -> Result<Sheet, ApiError> {
    let mut earlier = task_context::earlier_runs(reads, job, CHAIN_RUNS + 1).await?;
    let mut sheet = Sheet::default();
    if earlier.is_empty() {
        sheet
            .line("This job has no earlier runs: it neither continues nor runs again another job.");
        return Ok(sheet);
    }
    let more = earlier.len() > usize::try_from(CHAIN_RUNS).unwrap_or(usize::MAX);
    earlier.truncate(usize::try_from(CHAIN_RUNS).unwrap_or(usize::MAX));
    earlier.reverse();
    sheet.line("## Earlier runs of this job's chain, oldest first");
    if more {
        sheet.line(format!(
            "(Only the latest {CHAIN_RUNS} are told; job.get reads any job by id.)"
        ));
    }
    for run in &earlier {
        sheet.line(format!("### Run {} · job {}", run.run, run.id));
        tell_run(&mut sheet, run);
    }
    Ok(sheet)
}

async fn get(reads: impl ReadSource, scope: &Scope, job_id: &JobId) -> Result<Sheet, ApiError> {
    let job = match scope {
        Scope::Account(account_id) => {
            let account_id: AccountId = crate::store::stored_id(account_id.clone())?;
            job_rows::read_for_account(reads, &account_id, job_id).await?
        }
        Scope::Space(space_id) => job_rows::read_in_space(reads, space_id, job_id).await?,
    }
    .ok_or_else(|| ApiError::not_found("job"))?;
    let spec = job.spec()?;
    let mut sheet = Sheet::default();
    sheet.line(format!("## Job {}", job.id));
    sheet.part("Title", &job.title);
    sheet.line(format!(
        "State: {} · created {}",
        job.state,
        to_time(job.created_at).format("%Y-%m-%d %H:%M UTC")
    ));
    sheet.line(format!("Folder: {} · engine: {}", spec.folder, spec.engine));
    if !spec.prompt.is_empty() {
        sheet.part("Prompt", &spec.prompt);
    }
    for link in &spec.links {
        sheet.part("Link", link);
    }
    if let Some(json) = &job.outcome_json {
        tell_outcome(&mut sheet, &serde_json::from_str(json)?);
    }
    // Stored only after `Changes::check`; a row that no longer parses tells none.
    let changes = job
        .changes_json
        .as_deref()
        .and_then(|json| serde_json::from_str::<Changes>(json).ok());
    if let Some(changes) = changes {
        let totals = changes.totals;
        sheet.line(format!(
            "## Changed files ({} files, +{} −{})",
            totals.files, totals.additions, totals.deletions
        ));
        sheet.part("Files", &changed_files(&changes));
    }
    Ok(sheet)
}

/// One line per changed file: status, path, line counts and flags; never its text.
fn changed_files(changes: &Changes) -> String {
    let mut list = String::new();
    for file in &changes.files {
        let status = match file.status {
            ChangeStatus::Added => "added",
            ChangeStatus::Modified => "modified",
            ChangeStatus::Deleted => "deleted",
            ChangeStatus::Renamed => "renamed",
        };
        let from = file
            .from
            .as_ref()
            .map_or_else(String::new, |from| format!("{from} → "));
        let counts = if file.binary {
            "binary".to_owned()
        } else {
            format!("+{} −{}", file.additions, file.deletions)
        };
        let _ = write!(list, "{status} {from}{} ({counts})", file.path);
        if !file.flags.is_empty() {
            let _ = write!(list, " [{}]", file.flags.join(", "));
        }
        list.push('\n');
    }
    if changes.truncated {
        list.push_str("(More files changed than are listed.)\n");
    }
    list
}

#[derive(sqlx::FromRow)]
struct Found {
    id: String,
    title: String,
    state: String,
    created_at: i64,
}

async fn search(
    mut reads: impl ReadSource,
    scope: &Scope,
    words: &[String],
) -> Result<Sheet, ApiError> {
    let (column, value) = scope.column();
    let postgres = matches!(
        ReadSource::reads(&mut reads),
        Reads::Postgres(_) | Reads::PostgresConn(_)
    );
    let prompt = if postgres {
        "(spec_json::jsonb ->> 'prompt')"
    } else {
        "json_extract(spec_json, '$.prompt')"
    };
    let mut sql = format!("SELECT id, title, state, created_at FROM jobs WHERE {column} = $1");
    for n in 2..words.len() + 2 {
        let _ = write!(
            sql,
            " AND (LOWER(title) LIKE ${n} ESCAPE '\\' \
             OR LOWER(COALESCE({prompt}, '')) LIKE ${n} ESCAPE '\\')"
        );
    }
    let _ = write!(
        sql,
        " ORDER BY created_at DESC, id DESC LIMIT {MAX_SEARCH_RESULTS}"
    );
    let patterns: Vec<String> = words.iter().map(|word| like_pattern(word)).collect();
    let found = on_reads!(reads, |exec| {
        let mut query = sqlx::query_as::<_, Found>(&sql).bind(value);
        for pattern in &patterns {
            query = query.bind(pattern.as_str());
        }
        query.fetch_all(exec).await
    })?;
    let mut sheet = Sheet::default();
    if found.is_empty() {
        sheet.line(format!(
            "No job of this {} has every word in its title or prompt.",
            scope.name()
        ));
        return Ok(sheet);
    }
    sheet.line("## Jobs with every word in the title or prompt, newest first");
    for job in found {
        sheet.line(format!(
            "{} · {} · {} · created {}",
            job.id,
            job.title,
            job.state,
            to_time(job.created_at).format("%Y-%m-%d %H:%M UTC")
        ));
    }
    Ok(sheet)
}

/// `%word%` for `LIKE … ESCAPE '\'`, the word's own `\`, `%` and `_` taken literally.
fn like_pattern(word: &str) -> String {
    let mut pattern = String::from("%");
    for c in word.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ask(name: &str, args: Value) -> Result<Question, ApiError> {
        Question::try_from(ContextRequest {
            name: name.to_owned(),
            args,
        })
    }

    fn refused_field(result: Result<Question, ApiError>) -> String {
        let error = result.err().unwrap();
        assert_eq!(error.code(), tether_protocol::Code::InvalidField);
        error.to_string()
    }

    #[test]
    fn questions_are_checked_with_their_arguments() {
        assert_eq!(ask("job.chain", Value::Null).unwrap(), Question::Chain);
        assert_eq!(ask("job.chain", json!({})).unwrap(), Question::Chain);
        let id = JobId::generate();
        assert_eq!(
            ask("job.get", json!({ "id": id })).unwrap(),
            Question::Get(id)
        );
        assert_eq!(
            ask("jobs.search", json!({ "query": "  Fix  the LOGIN " })).unwrap(),
            Question::Search(vec!["fix".into(), "the".into(), "login".into()])
        );
        assert!(refused_field(ask("job.delete", json!({}))).contains("name"));
        assert!(refused_field(ask("job.chain", json!([1]))).contains("args"));
        assert!(refused_field(ask("job.get", json!({}))).contains("id"));
        assert!(refused_field(ask("job.get", json!({ "id": 7 }))).contains("id"));
        assert!(refused_field(ask("job.get", json!({ "id": "../x" }))).contains("id"));
        assert!(refused_field(ask("jobs.search", json!({}))).contains("query"));
        assert!(refused_field(ask("jobs.search", json!({ "query": "  " }))).contains("query"));
        let many = "w ".repeat(11);
        assert!(refused_field(ask("jobs.search", json!({ "query": many }))).contains("query"));
        let long = "w".repeat(201);
        assert!(refused_field(ask("jobs.search", json!({ "query": long }))).contains("query"));
        let hidden = json!({ "query": "a\u{202e}b" });
        assert!(refused_field(ask("jobs.search", hidden)).contains("query"));
    }

    #[test]
    fn like_wildcards_are_literal() {
        assert_eq!(like_pattern("50%_off\\"), "%50\\%\\_off\\\\%");
        assert_eq!(like_pattern("plain"), "%plain%");
    }

    #[test]
    fn a_long_answer_is_cut_and_says_so() {
        let mut sheet = Sheet::default();
        sheet.line("## Job");
        sheet.part("Prompt", &"p".repeat(30_000));
        sheet.part("Files", &"modified a.rs (+1 −1)\n".repeat(2_000));
        let text = bounded(&sheet);
        assert!(text.chars().count() <= MAX_CONTEXT_ANSWER_CHARS);
        assert!(
            text.ends_with("is shortened.)\n"),
            "{}",
            &text[text.len() - 200..]
        );
        let mut short = Sheet::default();
        short.part("Prompt", "fix it");
        assert_eq!(bounded(&short), "Prompt: fix it\n");
    }

    #[test]
    fn changed_files_name_paths_and_counts_only() {
        let changes: Changes = serde_json::from_value(json!({
            "base": { "kind": "git" },
            "files": [
                { "path": "src/new.rs", "status": "renamed", "from": "src/old.rs",
                  "additions": 3, "deletions": 1, "binary": false, "flags": [] },
                { "path": "logo.png", "status": "added", "additions": 0, "deletions": 0,
                  "binary": true, "flags": ["runs_later"] },
            ],
            "totals": { "files": 2, "additions": 3, "deletions": 1 },
            "truncated": true,
        }))
        .unwrap();
        assert_eq!(
            changed_files(&changes),
            "renamed src/old.rs → src/new.rs (+3 −1)\nadded logo.png (binary) [runs_later]\n\
             (More files changed than are listed.)\n"
        );
    }
}
