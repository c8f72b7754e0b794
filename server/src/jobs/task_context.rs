//! What a run knows beyond its prompt: the links a job carries (checked here when it is
//! made), the bounded context section its claim carries, and the text both it and the
//! context route ([`crate::jobs::context_answers`]) are cut to.
//!
//! The section names the computer, the folder and the branch asked for, the links, and the
//! earlier runs of the job's chain (the jobs it continues or runs again), newest first. A
//! job without a chain gets it from the claim's own row and the device's name: no
//! statement. A chained one reads its earlier runs in one statement, which also gives the
//! follow-up's [`tether_protocol::jobs::EarlierRun`] when the job it continues is among them.
//!
//! **Invariant:** a section is at most [`MAX_CONTEXT_CHARS`] characters, and every part cut
//! to fit says so with [`CUT_MARK`].

use serde::Deserialize;
use tether_protocol::git::{BranchChoice, GitOptions};
use tether_protocol::jobs::{JobOutcome, JobSpec};
use tether_protocol::report::WorkerReport;
use tether_protocol::task_context::{MAX_CONTEXT_CHARS, MAX_LINKS, MAX_LINK_CHARS};
use tether_protocol::text::{self, TextKind};

use crate::devices::DeviceIdentity;
use crate::error::ApiError;
use crate::store::job_rows::JobRow;
use crate::store::{on_reads, ReadSource};

/// What a part cut to fit ends with.
pub const CUT_MARK: &str = "…(cut)";
/// Most earlier runs a claim's section names (newest first).
pub const SECTION_RUNS: i64 = 8;

/// The links of a new job, checked: at most [`MAX_LINKS`], each an absolute `http` or
/// `https` address of at most [`MAX_LINK_CHARS`] characters, every character visible.
///
/// # Errors
/// 422 `invalid_field` naming `links`.
pub fn check_links(links: Vec<String>) -> Result<Vec<String>, ApiError> {
    let refuse = |why: &str| Err(ApiError::invalid_field("links", why));
    if links.len() > MAX_LINKS {
        return refuse("at most 10 links.");
    }
    for link in &links {
        if link.chars().count() > MAX_LINK_CHARS {
            return refuse("each link is at most 2000 characters.");
        }
        // A link is one word: no space, control, direction or other invisible character
        // that would show the person one address and the run another.
        if link.chars().any(char::is_whitespace) || text::check(link, TextKind::Name).is_err() {
            return refuse("a link must not hold spaces or invisible characters.");
        }
        let parsed = url::Url::parse(link);
        let web = parsed.is_ok_and(|url| {
            matches!(url.scheme(), "http" | "https")
                && url.host_str().is_some_and(|h| !h.is_empty())
        });
        if !web {
            return refuse("each link must be an absolute http:// or https:// address.");
        }
    }
    Ok(links)
}

/// An earlier run of a chain, as the section and `job.chain` tell it.
#[derive(Debug, Clone)]
pub(crate) struct EarlierJob {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) prompt: String,
    pub(crate) state: String,
    pub(crate) outcome: Option<JobOutcome>,
    /// Its run number in the chain (the first job is run 1).
    pub(crate) run: i64,
}

#[derive(sqlx::FromRow)]
struct EarlierRow {
    id: String,
    title: String,
    spec_json: String,
    state: String,
    outcome_json: Option<String>,
    chain_run: Option<i64>,
}

/// The prompt of a stored spec; the rest of it is not read.
#[derive(Deserialize)]
struct PromptOnly {
    #[serde(default)]
    prompt: String,
}

impl EarlierRow {
    fn into_earlier(self) -> Result<EarlierJob, ApiError> {
        let prompt = serde_json::from_str::<PromptOnly>(&self.spec_json)?.prompt;
        let outcome = match &self.outcome_json {
            Some(json) => Some(serde_json::from_str(json)?),
            None => None,
        };
        Ok(EarlierJob {
            id: self.id,
            title: self.title,
            prompt,
            state: self.state,
            outcome,
            run: self.chain_run.unwrap_or(1),
        })
    }
}

/// Whether `job` has earlier runs to read: it continues or runs again another job.
pub(crate) fn is_chained(job: &JobRow) -> bool {
    chain_of(job).is_some()
}

/// The first job of `job`'s chain and `job`'s run number in it. A job made before chains
/// were numbered names the job it continues or runs again as its first.
fn chain_of(job: &JobRow) -> Option<(&str, i64)> {
    let root = job
        .chain_root
        .as_deref()
        .or(job.continues.as_deref())
        .or(job.rerun_of.as_deref())?;
    Some((root, job.chain_run.unwrap_or(i64::MAX)))
}

/// The earlier runs of `job`'s chain (numbered before it), newest first, at most `limit`,
/// in one statement; none, and no statement, for a job without a chain.
///
/// # Errors
/// A database error.
pub(crate) async fn earlier_runs(
    mut reads: impl ReadSource,
    job: &JobRow,
    limit: i64,
) -> Result<Vec<EarlierJob>, ApiError> {
    let Some((root, run)) = chain_of(job) else {
        return Ok(Vec::new());
    };
    let rows = on_reads!(reads, |exec| sqlx::query_as::<_, EarlierRow>(
        "SELECT id, title, spec_json, state, outcome_json, chain_run FROM jobs \
         WHERE account_id = $1 AND (id = $2 OR chain_root = $2) AND id <> $3 \
         AND COALESCE(chain_run, 1) < $4 \
         ORDER BY COALESCE(chain_run, 1) DESC, created_at DESC, id DESC LIMIT $5"
    )
    .bind(&job.account_id)
    .bind(root)
    .bind(&job.id)
    .bind(run)
    .bind(limit)
    .fetch_all(exec)
    .await)?;
    rows.into_iter().map(EarlierRow::into_earlier).collect()
}

/// The claim's context section of `job` (its `spec`), run on `device`, with its earlier
/// runs (newest first, as [`earlier_runs`] answers them).
pub(crate) fn section(
    device: &DeviceIdentity,
    job: &JobRow,
    spec: &JobSpec,
    earlier: &[EarlierJob],
) -> String {
    let mut sheet = Sheet::default();
    sheet.line("## Task context");
    sheet.line(format!("Computer: {}", device.name));
    sheet.line(format!("Folder: {}", spec.folder));
    if let Some(git) = &spec.git {
        sheet.part("Branch", &branch_asked(git));
    }
    if !spec.links.is_empty() {
        sheet.line("## Links the person added");
        for link in &spec.links {
            sheet.part("-", link);
        }
    }
    if !earlier.is_empty() {
        sheet.line("## Earlier runs of this task, newest first");
        let shown = earlier
            .iter()
            .take(usize::try_from(SECTION_RUNS).unwrap_or(8));
        for run in shown {
            let relation = if job.continues.as_deref() == Some(run.id.as_str()) {
                " · this job continues it"
            } else if job.rerun_of.as_deref() == Some(run.id.as_str()) {
                " · this job runs it again"
            } else {
                ""
            };
            sheet.line(format!("### Run {} · job {}{relation}", run.run, run.id));
            tell_run(&mut sheet, run);
        }
        sheet.line("(More with the context route's job.chain and job.get.)");
    }
    sheet.render(MAX_CONTEXT_CHARS).text
}

/// Title, prompt, outcome, summary and report of an earlier run; absent parts are left out.
pub(crate) fn tell_run(sheet: &mut Sheet, run: &EarlierJob) {
    sheet.part("Title", &run.title);
    if !run.prompt.is_empty() {
        sheet.part("Prompt", &run.prompt);
    }
    match &run.outcome {
        Some(outcome) => tell_outcome(sheet, outcome),
        None => sheet.line(format!("State: {}", run.state)),
    }
}

/// Outcome, exit code, summary and report (compact JSON) of a run that ended.
pub(crate) fn tell_outcome(sheet: &mut Sheet, outcome: &JobOutcome) {
    let code = outcome
        .exit_code
        .map_or_else(String::new, |code| format!(" (exit code {code})"));
    sheet.line(format!(
        "Outcome: {}{code}",
        outcome.outcome.state().as_str()
    ));
    if !outcome.summary.is_empty() {
        sheet.part("Summary", &outcome.summary);
    }
    if let Some(report) = &outcome.report {
        tell_report(sheet, report);
    }
}

/// The worker's report as headed text: its summary, then each list under its heading, `- `
/// an entry, empty lists left out. Each list is one part, so a long report takes no more
/// of the section's shares than a few texts do.
fn tell_report(sheet: &mut Sheet, report: &WorkerReport) {
    sheet.part("Worker's report", &report.summary);
    let tested: Vec<String> = report
        .tested
        .iter()
        .map(|test| {
            let detail = test
                .detail
                .as_deref()
                .map_or_else(String::new, |detail| format!(" ({detail})"));
            format!("{}: {}{detail}", test.outcome.as_str(), test.command)
        })
        .collect();
    let lists = [
        ("Done", report.done.as_slice()),
        ("Tested", tested.as_slice()),
        ("Not done", report.not_done.as_slice()),
        ("Risks", report.risks.as_slice()),
        ("Links", report.links.as_slice()),
    ];
    for (heading, items) in lists {
        if !items.is_empty() {
            sheet.list(heading, items);
        }
    }
}

/// The branch and delivery a job asked for, in words.
fn branch_asked(git: &GitOptions) -> String {
    let branch = match &git.branch {
        None | Some(BranchChoice::Current(_)) => "the branch checked out".to_owned(),
        Some(BranchChoice::New(name)) => format!("a new branch {name}"),
        Some(BranchChoice::Existing(name)) => format!("the existing branch {name}"),
    };
    let base = git
        .base
        .as_ref()
        .map_or_else(String::new, |base| format!(", pull request into {base}"));
    format!("{branch} (delivery: {}{base})", git.delivery.as_str())
}

/// Text made of lines kept whole and parts cut to fit a bound: the bound's room left by the
/// lines is shared out so the shortest parts stay whole and the longer ones get equal
/// shares, each cut one ending with [`CUT_MARK`].
#[derive(Debug, Default)]
pub(crate) struct Sheet {
    pieces: Vec<Piece>,
}

#[derive(Debug)]
enum Piece {
    Whole(String),
    /// A label kept whole, then text that may be cut.
    Part(String, String),
}

/// A rendered [`Sheet`].
#[derive(Debug)]
pub(crate) struct Rendered {
    pub(crate) text: String,
    /// Whether anything was cut.
    pub(crate) cut: bool,
}

impl Sheet {
    /// A line kept whole (short text only: a heading, a name, a state).
    pub(crate) fn line(&mut self, line: impl Into<String>) {
        let mut line = line.into();
        line.push('\n');
        self.pieces.push(Piece::Whole(line));
    }

    /// `label: text` on a line of its own, where the text may be cut (a multi-line text
    /// goes on the lines after the label).
    pub(crate) fn part(&mut self, label: &str, text: &str) {
        let label = if text.contains('\n') {
            format!("{label}:\n")
        } else if label == "-" {
            "- ".to_owned()
        } else {
            format!("{label}: ")
        };
        self.pieces
            .push(Piece::Part(label, text.trim_end().to_owned()));
    }

    /// `heading:` on a line of its own, then `- item` a line, where the items may be cut
    /// (as one text).
    pub(crate) fn list(&mut self, heading: &str, items: &[String]) {
        let text: Vec<String> = items.iter().map(|item| format!("- {item}")).collect();
        self.pieces
            .push(Piece::Part(format!("{heading}:\n"), text.join("\n")));
    }

    /// The text, at most `max` characters.
    pub(crate) fn render(&self, max: usize) -> Rendered {
        let fixed: usize = self
            .pieces
            .iter()
            .map(|piece| match piece {
                Piece::Whole(line) => line.chars().count(),
                // The label and the line's end.
                Piece::Part(label, _) => label.chars().count() + 1,
            })
            .sum();
        let lengths: Vec<usize> = self
            .pieces
            .iter()
            .filter_map(|piece| match piece {
                Piece::Part(_, text) => Some(text.chars().count()),
                Piece::Whole(_) => None,
            })
            .collect();
        let share = fair_share(&lengths, max.saturating_sub(fixed));
        let mut cut = false;
        let mut text = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Whole(line) => text.push_str(line),
                Piece::Part(label, part) => {
                    text.push_str(label);
                    let (kept, was_cut) = cut_to(part, share);
                    cut |= was_cut;
                    text.push_str(&kept);
                    text.push('\n');
                }
            }
        }
        // Only lines longer than the bound itself get here: cut the whole.
        let (text, over) = cut_to(&text, max);
        Rendered {
            text,
            cut: cut || over,
        }
    }
}

/// The largest length each part may keep so that all of them fit `room`: parts at most that
/// long stay whole, longer ones are cut to it. `usize::MAX` when everything fits.
fn fair_share(lengths: &[usize], room: usize) -> usize {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let mut left = room;
    for (index, length) in sorted.iter().enumerate() {
        let share = left / (sorted.len() - index);
        if *length > share {
            return share;
        }
        left -= length;
    }
    usize::MAX
}

/// `text` cut to at most `max` characters, ending with [`CUT_MARK`] when cut; and whether
/// it was.
pub(crate) fn cut_to(text: &str, max: usize) -> (String, bool) {
    if text.chars().count() <= max {
        return (text.to_owned(), false);
    }
    let mark = CUT_MARK.chars().count();
    if max < mark {
        return (CUT_MARK.chars().take(max).collect(), true);
    }
    let mut kept: String = text.chars().take(max - mark).collect();
    kept.push_str(CUT_MARK);
    (kept, true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tether_protocol::git::Delivery;
    use tether_protocol::jobs::{Mode, Outcome};
    use tether_protocol::report::WorkerReport;

    fn chars(text: &str) -> usize {
        text.chars().count()
    }

    #[test]
    fn short_parts_stay_whole_and_long_ones_share_the_rest() {
        let mut sheet = Sheet::default();
        sheet.line("## Head");
        sheet.part("A", "short");
        sheet.part("B", &"b".repeat(10_000));
        sheet.part("C", &"c".repeat(10_000));
        let rendered = sheet.render(1_000);
        assert!(rendered.cut);
        assert!(chars(&rendered.text) <= 1_000, "{}", chars(&rendered.text));
        assert!(rendered.text.contains("A: short\n"));
        let b_line = rendered
            .text
            .lines()
            .find(|l| l.starts_with("B: "))
            .unwrap();
        let c_line = rendered
            .text
            .lines()
            .find(|l| l.starts_with("C: "))
            .unwrap();
        assert!(b_line.ends_with(CUT_MARK) && c_line.ends_with(CUT_MARK));
        // Equal shares, and together they use the room.
        assert_eq!(chars(b_line), chars(c_line));
        assert!(chars(&rendered.text) > 950, "{}", chars(&rendered.text));
    }

    #[test]
    fn what_fits_is_never_cut() {
        let mut sheet = Sheet::default();
        sheet.part("Prompt", "line one\nline two");
        sheet.part("Summary", "ok");
        let rendered = sheet.render(1_000);
        assert!(!rendered.cut);
        assert_eq!(rendered.text, "Prompt:\nline one\nline two\nSummary: ok\n");
    }

    #[test]
    fn lines_past_the_bound_cut_the_whole() {
        let mut sheet = Sheet::default();
        for _ in 0..100 {
            sheet.line("x".repeat(100));
        }
        let rendered = sheet.render(500);
        assert!(rendered.cut);
        assert_eq!(chars(&rendered.text), 500);
        assert!(rendered.text.ends_with(CUT_MARK));
    }

    #[test]
    fn cuts_count_characters_not_bytes() {
        let (kept, cut) = cut_to(&"é".repeat(50), 20);
        assert!(cut);
        assert_eq!(chars(&kept), 20);
        assert!(kept.starts_with("éé") && kept.ends_with(CUT_MARK));
        assert_eq!(cut_to("abc", 3), ("abc".to_owned(), false));
        assert_eq!(cut_to("abcdef", 2).0, "…(");
    }

    #[test]
    fn fair_share_keeps_the_shortest_whole() {
        assert_eq!(fair_share(&[1, 2, 3], 100), usize::MAX);
        assert_eq!(fair_share(&[10, 100, 100], 110), 50);
        assert_eq!(fair_share(&[], 0), usize::MAX);
        assert_eq!(fair_share(&[5], 0), 0);
    }

    fn device() -> DeviceIdentity {
        DeviceIdentity {
            device_id: tether_protocol::DeviceId::generate(),
            account_id: tether_protocol::AccountId::generate(),
            name: "laptop".to_owned(),
        }
    }

    fn row(continues: Option<&str>) -> JobRow {
        JobRow {
            id: "j".into(),
            account_id: "a".into(),
            device_id: "d".into(),
            title: "t".into(),
            spec_json: "{}".into(),
            state: "running".into(),
            attempt: 1,
            cancel_requested: 0,
            outcome_json: None,
            lease_token_hash: None,
            lease_expires_at: None,
            progress_seq: 0,
            created_at: 0,
            started_at: None,
            ended_at: None,
            last_lease_hash: None,
            end_cause: None,
            resumes: 0,
            continues: continues.map(str::to_owned),
            changes_json: None,
            delivery_json: None,
            rerun_of: None,
            chain_root: continues.map(str::to_owned),
            chain_run: continues.map(|_| 12),
            observed_json: None,
            space_id: None,
        }
    }

    fn spec(links: Vec<String>) -> JobSpec {
        JobSpec {
            title: "Fix it".into(),
            prompt: "fix".into(),
            folder: "work".into(),
            engine: "echo".into(),
            mode: Mode::Review,
            network: false,
            timeout_minutes: 30,
            secrets: Vec::new(),
            git: Some(GitOptions {
                delivery: Delivery::PullRequest,
                branch: Some(BranchChoice::New("tether/fix".into())),
                base: Some("main".into()),
                merge: None,
                worktree: false,
            }),
            attachments: Vec::new(),
            links,
        }
    }

    #[test]
    fn a_job_alone_names_computer_folder_branch_and_links() {
        let links = vec!["https://example.com/issue/1".to_owned()];
        let text = section(&device(), &row(None), &spec(links), &[]);
        assert!(text.contains("Computer: laptop\n"), "{text}");
        assert!(text.contains("Folder: work\n"), "{text}");
        assert!(
            text.contains(
                "Branch: a new branch tether/fix (delivery: pull_request, pull request into main)"
            ),
            "{text}"
        );
        assert!(text.contains("- https://example.com/issue/1\n"), "{text}");
        assert!(!text.contains("Earlier runs"), "{text}");
    }

    #[test]
    fn a_huge_chain_still_fits_the_section() {
        let huge = |c: &str| c.repeat(20_000);
        let earlier: Vec<EarlierJob> = (1..=11)
            .rev()
            .map(|run| EarlierJob {
                id: format!("j{run}"),
                title: huge("t").chars().take(200).collect(),
                prompt: huge("p"),
                state: "failed".into(),
                outcome: Some(JobOutcome {
                    outcome: Outcome::Failed,
                    summary: huge("s"),
                    exit_code: Some(1),
                    report: Some(WorkerReport {
                        summary: huge("r").chars().take(2_000).collect(),
                        done: vec![huge("d").chars().take(1_000).collect(); 30],
                        ..WorkerReport::default()
                    }),
                }),
                run,
            })
            .collect();
        let links = (0..10)
            .map(|i| {
                format!(
                    "https://e.com/{i}/{}",
                    huge("l").chars().take(1_900).collect::<String>()
                )
            })
            .collect();
        let text = section(&device(), &row(Some("j11")), &spec(links), &earlier);
        assert!(chars(&text) <= MAX_CONTEXT_CHARS, "{}", chars(&text));
        assert!(
            text.contains("### Run 11 · job j11 · this job continues it"),
            "{text}"
        );
        assert!(text.contains("Prompt: ppp"), "{text}");
        assert!(text.contains("Worker's report: rrr"), "{text}");
        assert!(text.contains("Done:\n- ddd"), "{text}");
        assert!(text.contains(CUT_MARK));
        // Newest first, at most SECTION_RUNS of them.
        assert!(text.find("Run 11").unwrap() < text.find("Run 10").unwrap());
        assert!(!text.contains("Run 3 "), "{text}");
    }

    #[test]
    fn an_earlier_report_reads_as_headed_text() {
        let report = WorkerReport::parse(serde_json::json!({
            "summary": "Added the export.",
            "done": ["button"],
            "tested": [{"command": "npm test", "outcome": "failed", "detail": "1 flaky"}],
            "risks": ["slow on big tables"],
            "links": ["https://example.com/pr/1"],
        }))
        .unwrap();
        let mut sheet = Sheet::default();
        tell_report(&mut sheet, &report);
        let text = sheet.render(MAX_CONTEXT_CHARS).text;
        assert_eq!(
            text,
            "Worker's report: Added the export.\nDone:\n- button\nTested:\n\
             - failed: npm test (1 flaky)\nRisks:\n- slow on big tables\nLinks:\n\
             - https://example.com/pr/1\n"
        );
    }

    #[test]
    fn links_are_web_addresses_without_hidden_characters() {
        let ok = |links: &[&str]| check_links(links.iter().map(|l| (*l).to_owned()).collect());
        assert!(ok(&["https://example.com/a?b=c#d", "http://localhost:8080/"]).is_ok());
        assert!(ok(&[]).is_ok());
        let long = format!("https://e.com/{}", "a".repeat(2_000));
        let eleven = ["https://e.com/"; 11];
        for bad in [
            &["ftp://example.com/f"][..],
            &["javascript:alert(1)"],
            &["https://"],
            &["/relative/path"],
            &["https://e.com/a b"],
            &["https://e.com/\u{7}"],
            &["https://e.com/\u{202e}gpj.exe"],
            &[long.as_str()],
            &eleven,
        ] {
            let error = ok(bad).err().unwrap();
            assert!(error.to_string().contains("links"), "{bad:?}: {error}");
        }
    }
}
