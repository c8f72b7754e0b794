//! PostgreSQL writes of a job's row and its timeline lines in one statement: the `UPDATE`
//! numbers the lines (it moves `event_seq`, locking the row) and an `INSERT` in the same
//! statement stores them.
//!
//! Under load each statement is a round trip that wakes both the server and a PostgreSQL
//! backend, and on a small machine those wake-ups cost more than the work. So a claim and
//! an end write their row and their line in one statement, and a progress batch is one
//! statement with no transaction at all: its lease fence is in the `WHERE`.

use sqlx::{PgExecutor, Postgres, QueryBuilder};

use crate::clock::Millis;
use crate::error::ApiError;

/// A timeline line to append: its kind and its text.
pub(crate) type Line<'a> = (&'a str, &'a str);

/// Pushes the rest of a clause onto the statement (binding its values).
pub(crate) type Clause<'a> = Box<dyn FnOnce(&mut QueryBuilder<'a, Postgres>) + Send + 'a>;

/// What a matched [`update_with_timed_lines`] answers: the row's `cancel_requested`, and
/// where its lines went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct Matched {
    pub(crate) cancel_requested: i64,
    /// The job's last line's seq before these: they are `base + 1 ..`.
    pub(crate) base: i64,
    /// The time of the job's last line before these, when the lines were timed: none is
    /// stored before it.
    pub(crate) floor: Option<Millis>,
}

/// `UPDATE jobs SET event_seq = event_seq + n<set> WHERE id = $job<filter>`, appending
/// `lines` numbered after the job's last event. `set` starts with `, `; `filter` with
/// ` AND `. Answers the row's `cancel_requested` when it matched, `None` when it did not
/// (and then nothing was written).
///
/// # Errors
/// A database error.
pub(crate) async fn update_with_lines<'a>(
    executor: impl PgExecutor<'_>,
    job_id: &'a str,
    now: Millis,
    lines: &'a [Line<'a>],
    set: Option<Clause<'a>>,
    filter: Option<Clause<'a>>,
) -> Result<Option<i64>, ApiError> {
    let matched = update_with_timed_lines(executor, job_id, now, lines, &[], set, filter).await?;
    Ok(matched.map(|matched| matched.cancel_requested))
}

/// [`update_with_lines`], each line stamped with its time in `ats` (`now` past its end),
/// but never before the job's last line already stored; answers where the lines went too.
///
/// # Errors
/// A database error.
pub(crate) async fn update_with_timed_lines<'a>(
    executor: impl PgExecutor<'_>,
    job_id: &'a str,
    now: Millis,
    lines: &'a [Line<'a>],
    ats: &[Millis],
    set: Option<Clause<'a>>,
    filter: Option<Clause<'a>>,
) -> Result<Option<Matched>, ApiError> {
    let count = lines.len();
    let mut query = QueryBuilder::<Postgres>::new(format!(
        "WITH changed AS (UPDATE jobs SET event_seq = event_seq + {count}"
    ));
    if let Some(set) = set {
        set(&mut query);
    }
    query.push(" WHERE id = ").push_bind(job_id);
    if let Some(filter) = filter {
        filter(&mut query);
    }
    query.push(format!(
        " RETURNING id, account_id, cancel_requested, event_seq - {count} AS base)"
    ));
    if count > 0 {
        query
            .push(
                ", appended AS (INSERT INTO job_events (job_id, account_id, at, kind, seq, text) \
                 SELECT changed.id, changed.account_id, ",
            )
            .push(if ats.is_empty() {
                "lines.at"
            } else {
                // The statement reads the rows as they were before it: the last line stored.
                "GREATEST(lines.at, COALESCE((SELECT last.at FROM job_events last \
                 WHERE last.job_id = changed.id ORDER BY last.seq DESC LIMIT 1), lines.at))"
            })
            .push(", lines.kind, changed.base + lines.n, lines.text FROM changed, (VALUES ");
        for (index, (kind, text)) in lines.iter().enumerate() {
            if index > 0 {
                query.push(", ");
            }
            query
                .push(format!("({}, ", index + 1))
                .push_bind(*kind)
                .push(", ")
                .push_bind(*text)
                .push(", ")
                .push_bind(ats.get(index).copied().unwrap_or(now))
                .push(")");
        }
        query.push(") AS lines (n, kind, text, at))");
    }
    // Like `appended`, the floor's subquery reads the lines as they were before the statement.
    query
        .push(" SELECT changed.cancel_requested, changed.base, ")
        .push(if ats.is_empty() {
            "CAST(NULL AS BIGINT)"
        } else {
            "(SELECT last.at FROM job_events last WHERE last.job_id = changed.id \
         ORDER BY last.seq DESC LIMIT 1)"
        });
    query.push(" AS floor FROM changed");
    let matched = query
        .build_query_as::<Matched>()
        .fetch_optional(executor)
        .await?;
    Ok(matched)
}
