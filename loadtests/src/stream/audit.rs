//! The end of a run checked against what the server stored: each watched job read back
//! through `GET /api/jobs/{id}`, its lines compared with those the server accepted, and what
//! its watcher saw compared with both.

use std::collections::HashMap;

use futures_util::{stream, StreamExt};
use serde_json::Value;

use crate::fleet::RunningJob;
use crate::output::parse_line;
use crate::sender::JobSent;
use crate::watcher::Seen;

/// Lines missing or repeated, added up over the watched jobs.
#[derive(Debug, Default, Clone, Copy)]
pub struct Audit {
    /// Accepted lines the job's stored timeline lacks.
    pub stored_lost: u64,
    /// Lines stored more than once (each extra copy).
    pub stored_repeated: u64,
    /// Jobs that could not be read back.
    pub unreadable: u64,
    /// Accepted lines the watcher never received.
    pub stream_lost: u64,
    /// Lines the watcher received more than once (each extra copy).
    pub stream_repeated: u64,
    pub seq_gaps: u64,
    pub seq_repeats: u64,
    /// Watchers whose stream never said the job ended.
    pub not_ended: u64,
    pub reconnects: u64,
}

/// One watched job: what the server accepted of it, and what its watcher saw.
pub struct Watched<'a> {
    pub job: &'a RunningJob,
    pub sent: &'a JobSent,
    pub seen: &'a Seen,
}

pub async fn audit(http: &reqwest::Client, server: &str, watched: &[Watched<'_>]) -> Audit {
    let stored: Vec<Option<HashMap<u64, u32>>> = stream::iter(watched)
        .map(|one| stored_lines(http, server, one.job))
        .buffered(8)
        .collect()
        .await;
    let mut audit = Audit::default();
    for (one, stored) in watched.iter().zip(stored) {
        match stored {
            Some(stored) => {
                let (lost, repeated) = compare(one.sent, &stored);
                audit.stored_lost += lost;
                audit.stored_repeated += repeated;
            }
            None => audit.unreadable += 1,
        }
        let (lost, repeated) = compare(one.sent, &one.seen.lines);
        audit.stream_lost += lost;
        audit.stream_repeated += repeated;
        audit.seq_gaps += one.seen.seq_gaps;
        audit.seq_repeats += one.seen.seq_repeats;
        audit.not_ended += u64::from(!one.seen.ended);
        audit.reconnects += one.seen.reconnects;
    }
    audit
}

/// Accepted lines missing from `got`, and the extra copies in it.
fn compare(sent: &JobSent, got: &HashMap<u64, u32>) -> (u64, u64) {
    let lost = sent
        .accepted
        .iter()
        .flat_map(|(from, to)| *from..=*to)
        .filter(|number| !got.contains_key(number))
        .count() as u64;
    let repeated = got.values().map(|copies| u64::from(copies - 1)).sum();
    (lost, repeated)
}

/// How many times each of this run's lines is in the job's stored timeline.
async fn stored_lines(
    http: &reqwest::Client,
    server: &str,
    job: &RunningJob,
) -> Option<HashMap<u64, u32>> {
    let body: Value = http
        .get(format!("{server}/api/jobs/{}", job.id))
        .bearer_auth(&job.owner_token)
        .send()
        .await
        .ok()?
        .error_for_status()
        .ok()?
        .json()
        .await
        .ok()?;
    let mut lines = HashMap::new();
    for event in body["events"].as_array()? {
        if event["kind"].as_str() != Some("output") {
            continue;
        }
        if let Some((number, _)) = event["text"].as_str().and_then(parse_line) {
            *lines.entry(number).or_default() += 1;
        }
    }
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_repeated_lines_are_counted() {
        let sent = JobSent {
            accepted: vec![(1, 3), (5, 6)],
        };
        let got = HashMap::from([(1, 1), (2, 2), (3, 1), (6, 3)]);
        assert_eq!(compare(&sent, &got), (1, 3));
    }
}
