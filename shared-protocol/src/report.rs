//! What the work hands back in its own words: the worker's report (`tether_report`, or
//! `.tether/result.json` in the run's folder), and what the run really used (the engine,
//! its version, the model and its effort or mode, as the agent said them).
//!
//! Both sides check a report with [`WorkerReport::check`]: the computer before it sends it
//! with `complete`, the server again before it keeps it. A report that fails is dropped
//! with a line in the job's timeline; it never fails the job.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::text::{self, TextKind};

/// Longest `summary`, in characters.
pub const MAX_REPORT_SUMMARY_CHARS: usize = 2_000;
/// Most entries of each list (`done`, `tested`, `notDone`, `risks`).
pub const MAX_REPORT_ITEMS: usize = 30;
/// Longest entry of a list (and a tested command or its detail), in characters.
pub const MAX_REPORT_ITEM_CHARS: usize = 1_000;
/// Most `links`.
pub const MAX_REPORT_LINKS: usize = 10;
/// Longest link, in characters.
pub const MAX_REPORT_LINK_CHARS: usize = 2_000;
/// Where a worker without MCP leaves its report, relative to the run's folder.
pub const RESULT_FILE: &str = ".tether/result.json";
/// Largest `.tether/result.json` read, in bytes.
pub const MAX_RESULT_FILE_BYTES: u64 = 256 * 1024;

/// The worker's own report of a run: what it did, how it tested it, what it left undone
/// and what could go wrong. Every field but `summary` may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerReport {
    /// What the run did, in a few sentences; the first line leads the notification.
    #[schema(max_length = 2000)]
    pub summary: String,
    /// What was done, one entry each.
    #[serde(default)]
    #[schema(max_items = 30)]
    pub done: Vec<String>,
    /// How it was tested: each command and how it came out.
    #[serde(default)]
    #[schema(max_items = 30)]
    pub tested: Vec<TestedCommand>,
    /// What was asked and not done.
    #[serde(default)]
    #[schema(max_items = 30)]
    pub not_done: Vec<String>,
    /// What a reviewer should look at twice.
    #[serde(default)]
    #[schema(max_items = 30)]
    pub risks: Vec<String>,
    /// Where to look: http or https addresses (a preview, a pull request, a document).
    #[serde(default)]
    #[schema(max_items = 10)]
    pub links: Vec<String>,
}

/// One test the worker ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestedCommand {
    /// The command as it was run, e.g. `cargo test -p web`.
    pub command: String,
    pub outcome: TestOutcome,
    /// A line about it, e.g. `2 of 118 failed: both flaky on CI too`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// How a tested command came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TestOutcome {
    Passed,
    Failed,
    Skipped,
}

impl TestOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            TestOutcome::Passed => "passed",
            TestOutcome::Failed => "failed",
            TestOutcome::Skipped => "skipped",
        }
    }
}

/// Why a report was refused: the field and the rule, for the timeline line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportProblem(pub String);

impl fmt::Display for ReportProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReportProblem {}

impl WorkerReport {
    /// Parses and checks a report as it came (from the MCP tool, the result file or the
    /// wire).
    ///
    /// # Errors
    /// The shape is wrong or a bound is broken; the problem names the field.
    pub fn parse(raw: serde_json::Value) -> Result<WorkerReport, ReportProblem> {
        let report: WorkerReport = serde_json::from_value(raw)
            .map_err(|err| ReportProblem(format!("not a report: {err}")))?;
        report.check()?;
        Ok(report)
    }

    /// Checks every bound and that no text carries control characters.
    ///
    /// # Errors
    /// The first broken rule.
    pub fn check(&self) -> Result<(), ReportProblem> {
        if self.summary.trim().is_empty() {
            return Err(ReportProblem("summary: must not be empty".into()));
        }
        check_text(
            "summary",
            &self.summary,
            MAX_REPORT_SUMMARY_CHARS,
            TextKind::MultiLine,
        )?;
        for (field, items) in [
            ("done", &self.done),
            ("notDone", &self.not_done),
            ("risks", &self.risks),
        ] {
            check_list(field, items.len(), MAX_REPORT_ITEMS)?;
            for item in items {
                check_text(field, item, MAX_REPORT_ITEM_CHARS, TextKind::MultiLine)?;
            }
        }
        check_list("tested", self.tested.len(), MAX_REPORT_ITEMS)?;
        for tested in &self.tested {
            check_text(
                "tested.command",
                &tested.command,
                MAX_REPORT_ITEM_CHARS,
                TextKind::MultiLine,
            )?;
            if let Some(detail) = &tested.detail {
                check_text(
                    "tested.detail",
                    detail,
                    MAX_REPORT_ITEM_CHARS,
                    TextKind::MultiLine,
                )?;
            }
        }
        check_list("links", self.links.len(), MAX_REPORT_LINKS)?;
        for link in &self.links {
            check_text("links", link, MAX_REPORT_LINK_CHARS, TextKind::MultiLine)?;
            if !is_web_link(link) {
                return Err(ReportProblem(format!(
                    "links: {link:?} is not an http or https address"
                )));
            }
        }
        Ok(())
    }

    /// The summary's first non-empty line, for a notification.
    pub fn first_line(&self) -> &str {
        self.summary
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or("")
    }

    /// Applies `f` to every text of the report (to hide saved secret values).
    pub fn map_text(&mut self, f: impl Fn(&str) -> String) {
        self.summary = f(&self.summary);
        for item in self
            .done
            .iter_mut()
            .chain(self.not_done.iter_mut())
            .chain(self.risks.iter_mut())
            .chain(self.links.iter_mut())
        {
            *item = f(item);
        }
        for tested in &mut self.tested {
            tested.command = f(&tested.command);
            tested.detail = tested.detail.as_deref().map(&f);
        }
    }
}

fn check_list(field: &str, len: usize, max: usize) -> Result<(), ReportProblem> {
    if len > max {
        return Err(ReportProblem(format!(
            "{field}: at most {max} entries, not {len}"
        )));
    }
    Ok(())
}

fn check_text(field: &str, value: &str, max: usize, kind: TextKind) -> Result<(), ReportProblem> {
    let chars = value.chars().count();
    if chars > max {
        return Err(ReportProblem(format!(
            "{field}: at most {max} characters, not {chars}"
        )));
    }
    text::check(value, kind).map_err(|err| ReportProblem(format!("{field}: {err}")))
}

fn is_web_link(link: &str) -> bool {
    let lower = link.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    rest.is_some_and(|rest| !rest.is_empty() && !link.chars().any(char::is_whitespace))
}

/// Reads a stored report leniently: what is not a valid [`WorkerReport`] (a free-form report
/// kept before reports had a shape) reads as none rather than failing the whole job.
///
/// # Errors
/// Never: any value reads.
pub fn lenient<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<WorkerReport>, D::Error> {
    let raw = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(raw.and_then(|raw| WorkerReport::parse(raw).ok()))
}

/// Longest text of an [`ObservedRun`] field, in characters.
pub const MAX_OBSERVED_CHARS: usize = 200;

/// What a run really used, as its engine said (ACP: the agent's name and version at
/// `initialize`, the session's current model and mode). A field the agent did not say is
/// absent, shown as "not reported".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedRun {
    /// The engine's own name (e.g. `claude-code-acp`), not the computer's label for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    /// The model id as the agent names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The reasoning effort, when the agent reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// The session mode (e.g. `default`, `plan`, `acceptEdits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl ObservedRun {
    /// Each field as it may be kept: control characters made visible, cut at
    /// [`MAX_OBSERVED_CHARS`], empty ones dropped.
    #[must_use]
    pub fn bounded(self) -> ObservedRun {
        let bound = |value: Option<String>| {
            value
                .map(|value| {
                    text::sanitize(value.trim(), TextKind::Name)
                        .chars()
                        .take(MAX_OBSERVED_CHARS)
                        .collect::<String>()
                })
                .filter(|value| !value.is_empty())
        };
        ObservedRun {
            engine: bound(self.engine),
            engine_version: bound(self.engine_version),
            model: bound(self.model),
            effort: bound(self.effort),
            mode: bound(self.mode),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == ObservedRun::default()
    }
}

/// What one attempt of a job used, as `GET /api/jobs/{id}` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedAttempt {
    pub attempt: u32,
    #[serde(flatten)]
    pub used: ObservedRun,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    fn full() -> serde_json::Value {
        json!({
            "summary": "Added the export button.\nIt writes CSV.",
            "done": ["button", "CSV writer"],
            "tested": [{"command": "npm test", "outcome": "passed"},
                       {"command": "npm run e2e", "outcome": "failed", "detail": "1 flaky"}],
            "notDone": ["PDF export"],
            "risks": ["large tables are slow"],
            "links": ["http://127.0.0.1:3000/export"],
        })
    }

    #[test]
    fn a_full_report_reads_and_leads_with_its_first_line() {
        let report = WorkerReport::parse(full()).unwrap();
        assert_eq!(report.first_line(), "Added the export button.");
        assert_eq!(report.tested[1].outcome, TestOutcome::Failed);
        let back = serde_json::to_value(&report).unwrap();
        assert_eq!(back, full());
    }

    #[test]
    fn only_the_summary_is_required() {
        let report = WorkerReport::parse(json!({"summary": "done"})).unwrap();
        assert!(report.done.is_empty() && report.links.is_empty());
        assert!(WorkerReport::parse(json!({"done": ["x"]})).is_err());
        assert!(WorkerReport::parse(json!({"summary": "  "})).is_err());
    }

    #[test]
    fn every_bound_is_checked_and_named() {
        let cases = [
            (json!({"summary": "x".repeat(2001)}), "summary"),
            (json!({"summary": "s", "done": vec!["x"; 31]}), "done"),
            (
                json!({"summary": "s", "risks": ["y".repeat(1001)]}),
                "risks",
            ),
            (json!({"summary": "s", "links": ["ftp://host/x"]}), "links"),
            (
                json!({"summary": "s", "links": ["javascript:alert(1)"]}),
                "links",
            ),
            (
                json!({"summary": "s", "tested": [{"command": "c", "outcome": "green"}]}),
                "report",
            ),
            (json!({"summary": "s", "extra": 1}), "report"),
            (json!({"summary": "bell \u{7}"}), "summary"),
            (json!("just text"), "report"),
        ];
        for (raw, field) in cases {
            let problem = WorkerReport::parse(raw.clone()).unwrap_err();
            assert!(problem.0.contains(field), "{raw}: {problem}");
        }
    }

    #[test]
    fn a_stored_free_form_report_reads_as_none() {
        #[derive(Deserialize)]
        struct Holder {
            #[serde(default, deserialize_with = "lenient")]
            report: Option<WorkerReport>,
        }
        let old: Holder = serde_json::from_value(json!({"report": {"notes": "x"}})).unwrap();
        assert!(old.report.is_none());
        let new: Holder = serde_json::from_value(json!({"report": full()})).unwrap();
        assert!(new.report.is_some());
        let absent: Holder = serde_json::from_value(json!({})).unwrap();
        assert!(absent.report.is_none());
    }

    #[test]
    fn observed_fields_are_bounded_and_empty_ones_dropped() {
        let observed = ObservedRun {
            engine: Some(" claude-code-acp ".into()),
            model: Some("m".repeat(300)),
            mode: Some(String::new()),
            ..ObservedRun::default()
        }
        .bounded();
        assert_eq!(observed.engine.as_deref(), Some("claude-code-acp"));
        assert_eq!(observed.model.map(|m| m.len()), Some(MAX_OBSERVED_CHARS));
        assert_eq!(observed.mode, None);
        let attempt = ObservedAttempt {
            attempt: 2,
            used: ObservedRun {
                model: Some("sonnet".into()),
                ..ObservedRun::default()
            },
        };
        assert_eq!(
            serde_json::to_value(attempt).unwrap(),
            json!({"attempt": 2, "model": "sonnet"})
        );
    }
}
