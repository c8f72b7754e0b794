//! Jobs, their leases and their progress.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::attachments::Attachment;
use crate::changes::Changes;
use crate::decisions::Decision;
use crate::evidence::{EvidenceDetails, EvidenceVariant};
use crate::git::{DeliveryReport, GitOptions};
use crate::ids::{AttachmentId, DeviceId, JobId, SpaceId};
use crate::lease::LeaseToken;
use crate::report::{ObservedAttempt, ObservedRun, WorkerReport};

/// How much a run may do before it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Commands and edits ask unless the folder is trusted locally.
    Ask,
    /// Work in the run's folder goes ahead; anything beyond it asks.
    Review,
    /// Never waits: takes the recommended answer and lists it in the result.
    Unattended,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Ask, Mode::Review, Mode::Unattended];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::Review => "review",
            Mode::Unattended => "unattended",
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    /// Running, with a decision pending.
    Waiting,
    Succeeded,
    Failed,
    Blocked,
    Cancelled,
    Interrupted,
}

impl JobState {
    pub const ALL: [JobState; 8] = [
        JobState::Queued,
        JobState::Running,
        JobState::Waiting,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Blocked,
        JobState::Cancelled,
        JobState::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Waiting => "waiting",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Blocked => "blocked",
            JobState::Cancelled => "cancelled",
            JobState::Interrupted => "interrupted",
        }
    }

    pub fn parse(raw: &str) -> Option<JobState> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == raw)
    }

    /// Whether the job has ended for good.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            JobState::Queued | JobState::Running | JobState::Waiting
        )
    }
}

/// How a device may end a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Succeeded,
    Failed,
    Blocked,
    Cancelled,
    /// Set by the server only: the lease ran out or the device was revoked.
    Interrupted,
}

impl Outcome {
    pub fn state(self) -> JobState {
        match self {
            Outcome::Succeeded => JobState::Succeeded,
            Outcome::Failed => JobState::Failed,
            Outcome::Blocked => JobState::Blocked,
            Outcome::Cancelled => JobState::Cancelled,
            Outcome::Interrupted => JobState::Interrupted,
        }
    }
}

/// `POST /api/jobs`: what the web asks a device to do. Never argv, never a device path.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewJobParams {
    pub device_id: DeviceId,
    pub title: String,
    pub prompt: String,
    /// A label the device shares.
    pub folder: String,
    /// An engine name the device publishes.
    pub engine: String,
    pub mode: Mode,
    /// Whether the run may reach the network.
    pub network: bool,
    pub timeout_minutes: u32,
    #[serde(default)]
    pub secrets: Vec<String>,
    /// An earlier job of the same computer and folder this one follows up: it is not
    /// claimed before that one ended, and works on what that one left in the folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<JobId>,
    /// What becomes of the work in a git repository; `null`: nothing (no git handling).
    /// Absent: nothing, except for a job that `continues` another, which then keeps that
    /// job's choices (a new branch it made is the branch to go on with), as the page's
    /// Continue does; `null` is how such a follow-up asks for no git handling.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<GitOptions>, nullable)]
    pub git: Option<Option<GitOptions>>,
    /// Uploads (`POST /api/attachments`) the job carries, in this order: at most
    /// [`crate::attachments::MAX_ATTACHMENTS_PER_JOB`], together at most
    /// [`crate::attachments::MAX_ATTACHMENT_BYTES_PER_JOB`] bytes (413 past it). Each is
    /// taken by this job and no other; a follow-up may also name the continued job's own
    /// attachments, and gets copies of them.
    #[serde(default)]
    pub attachments: Vec<AttachmentId>,
    /// Links the person added for the run to read (`http` or `https`), at most
    /// [`crate::task_context::MAX_LINKS`].
    #[serde(default)]
    pub links: Vec<String>,
    /// A space the caller may assign in: the job runs on the caller's own computer as any
    /// other, and the space's members see what it did (docs/SPACES.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_id: Option<SpaceId>,
}

/// `POST /api/jobs/{id}/rerun`: a new job with the earlier job's spec, on the same
/// computer. Each field given replaces that setting; an absent one keeps the earlier
/// job's. Checked as `POST /api/jobs` checks a new job.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RerunParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A label the device shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    /// An engine name the device publishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_minutes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<String>>,
    /// Absent: the earlier job's choices, with a new branch of its own where the earlier
    /// one made a new branch; `null`: no git handling.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<GitOptions>, nullable)]
    pub git: Option<Option<GitOptions>>,
    /// Absent: the earlier job's attachments again. Given: exactly these, each either an
    /// attachment of the earlier job or a new upload of this account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<AttachmentId>>,
    /// Absent: the earlier job's links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<String>>,
}

/// A field that tells absent (`None`, by `default`) from `null` (`Some(None)`).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// The part of a job the device receives when it claims it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    pub title: String,
    pub prompt: String,
    pub folder: String,
    pub engine: String,
    pub mode: Mode,
    pub network: bool,
    pub timeout_minutes: u32,
    #[serde(default)]
    pub secrets: Vec<String>,
    /// What becomes of the work in a git repository (delivery, branch, pull request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitOptions>,
    /// The files attached to the task, in the order the person gave them. The computer
    /// downloads each under the job's lease.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// Links the person added for the run to read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
}

/// One line of a job's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobEvent {
    pub seq: i64,
    pub at: DateTime<Utc>,
    /// `output` (a line the run printed), `status` (what the run says it is doing) or
    /// `system` (what the server recorded: claimed, interrupted, cancel requested).
    pub kind: String,
    pub text: String,
    /// Where the line goes on the job page's timeline, read by the server from this line
    /// and the ones before it, so a page that appends lines as they come shows what a
    /// reload shows. Absent where the server does not read it (lists, older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<EventEntry>,
}

/// A line's place on the timeline: what it is, and which earlier line it adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventEntry {
    pub kind: TimelineKind,
    /// The `seq` of the line this one belongs to: a plan's `plan:` line for its steps, a
    /// tool call's first line for its later status, a command's `$` line for its output
    /// and exit. Absent for a line that starts an entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<i64>,
}

/// What a line of a run is, as the job page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimelineKind {
    /// What the coding agent said.
    Message,
    /// The agent's plan (`plan:`), or one of its steps.
    Plan,
    /// A tool call and its status (`tool: …`).
    Tool,
    /// A command the agent started (`$ …`), or its output and exit (`term-N: …`).
    Command,
    /// What the agent printed on its own stderr (`stderr: …`).
    Stderr,
    /// Something the computer refused (`refused: …`).
    Refused,
    /// What the computer noted: the agent's name, an allowed action, a file written.
    Note,
    /// What the run says it is doing (`status` lines).
    Status,
    /// The server's line that the run asked a question and waits for the answer.
    Asked,
    /// What the server recorded.
    System,
    /// Any other line the run printed.
    Output,
}

/// How a job ended, as the device (or the sweeper) recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobOutcome {
    pub outcome: Outcome,
    pub summary: String,
    pub exit_code: Option<i32>,
    /// The worker's own report, as the server checked it.
    #[serde(default, deserialize_with = "crate::report::lenient")]
    pub report: Option<WorkerReport>,
}

/// A job as the web sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub id: JobId,
    pub device_id: DeviceId,
    pub title: String,
    pub spec: JobSpec,
    pub state: JobState,
    pub attempt: u32,
    pub cancel_requested: bool,
    pub outcome: Option<JobOutcome>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// The timeline; empty in lists, complete on `GET /api/jobs/{id}`.
    pub events: Vec<JobEvent>,
    pub decisions: Vec<Decision>,
    pub evidence: Vec<Evidence>,
    /// What the run changed in its folder, as its computer reported it.
    #[serde(default)]
    pub changes: Option<Changes>,
    /// The earlier job this one follows up.
    #[serde(default)]
    pub continues: Option<JobId>,
    /// The follow-up of this job, once there is one.
    #[serde(default)]
    pub continued_by: Option<JobId>,
    /// The earlier job this one runs again (`POST /api/jobs/{id}/rerun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<JobId>,
    /// The jobs that run this one again, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reruns: Vec<JobId>,
    /// Which run of its chain this is: 1 for the job the chain started from, then one
    /// more for each re-run or follow-up in the order they were made. Absent for a job
    /// that neither runs another again nor continues one, and that none does either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_number: Option<u32>,
    /// Why a queued job has not started: its computer is offline, another run holds its
    /// folder, the job it follows up has not ended, or the account's run limit.
    #[serde(default)]
    pub queued_because: Option<String>,
    /// What became of the work in git (branch, commits, push, pull request), once known.
    #[serde(default)]
    pub delivery: Option<DeliveryReport>,
    /// What each attempt really used (engine, version, model, effort, mode), as its agent
    /// said; an attempt that said nothing is absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed: Vec<ObservedAttempt>,
    /// The space the job belongs to; absent for a personal job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_id: Option<SpaceId>,
    /// This is a space member's view: what only the job's owner sees (file text, diffs,
    /// command output, decisions, held evidence, secrets) is left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_view: bool,
}

/// The `lines` event of `GET /api/jobs/{id}/events`: timeline lines after the last one
/// sent, in order, as `GET /api/jobs/{id}` lists them (with their `entry`). A space member
/// gets only the lines the space view shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobLinesEvent {
    pub events: Vec<JobEvent>,
}

/// The `job` event of `GET /api/jobs/{id}/events`: what the job page's header shows, when
/// the stream opens and whenever it changes. After one whose `state` is final the stream
/// ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStateEvent {
    pub state: JobState,
    pub attempt: u32,
    pub cancel_requested: bool,
    /// The outcome's summary, once the job ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Why a queued job has not started, as `GET /api/jobs/{id}` says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_because: Option<String>,
}

/// A file a run attached to its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Evidence {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub size: u64,
    pub sha256: String,
    /// The type the server sniffed from the bytes (for a `local` item, what the device said).
    pub mime: Option<String>,
    /// Kept on the computer rather than uploaded: only its description reached the server.
    pub local: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    /// Held on the computer for its owner: Preview, Release and Discard reach it there.
    #[serde(default)]
    pub held: bool,
    /// The evidence id of the file this one is a smaller picture of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_of: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<EvidenceVariant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<EvidenceDetails>,
}

/// Largest evidence file, in bytes (100 MB).
pub const MAX_EVIDENCE_BYTES: u64 = 100_000_000;
/// Most evidence files one job may hold.
pub const MAX_EVIDENCE_FILES: u64 = 100;

/// What an evidence file is; the server checks the bytes are of a type the kind allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    /// A picture of a screen: PNG, JPEG, GIF or WebP.
    Screenshot,
    /// Any other picture: PNG, JPEG, GIF or WebP.
    Image,
    /// MP4, QuickTime or WebM.
    Video,
    /// A recorded trace: a ZIP archive, JSON or text.
    Trace,
    /// A report: text, JSON, PDF or markup.
    Report,
    /// A log: UTF-8 text.
    Log,
    /// Anything else.
    File,
}

impl EvidenceKind {
    pub const ALL: [EvidenceKind; 7] = [
        EvidenceKind::Screenshot,
        EvidenceKind::Image,
        EvidenceKind::Video,
        EvidenceKind::Trace,
        EvidenceKind::Report,
        EvidenceKind::Log,
        EvidenceKind::File,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Screenshot => "screenshot",
            EvidenceKind::Image => "image",
            EvidenceKind::Video => "video",
            EvidenceKind::Trace => "trace",
            EvidenceKind::Report => "report",
            EvidenceKind::Log => "log",
            EvidenceKind::File => "file",
        }
    }
}

/// `x-tether-evidence` on `POST /api/devices/self/jobs/{id}/evidence`: this JSON,
/// base64url-encoded (padding optional). The body is the file's bytes, or nothing when
/// `local` is set (the file stays on the computer; `size` and `sha256` describe it there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceMeta {
    /// Chosen by the device, stable for one file of one attempt, so a retry is a repeat.
    pub id: String,
    pub kind: EvidenceKind,
    /// The file's name, without any folder.
    pub name: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    #[serde(default)]
    pub local: bool,
    /// Held for the owner ([`crate::evidence`]): like `local`, no bytes come with it, but
    /// the owner may preview, release or discard it from the web.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// The id of the file of this job this one is a variant of, sent before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_of: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<EvidenceVariant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<EvidenceDetails>,
}

/// A claimed job, with the lease that fences every write about it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedJob {
    pub id: JobId,
    pub attempt: u32,
    pub lease_token: LeaseToken,
    pub lease_expires_at: DateTime<Utc>,
    pub spec: JobSpec,
    /// Set when this attempt carries on one lost to a restart: which carry-on it is (1 or 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<u32>,
    /// Set when this job follows up an earlier one of this computer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<EarlierRun>,
    /// The task's context section, at most [`crate::task_context::MAX_CONTEXT_CHARS`]
    /// characters: the chain it continues (earlier prompts, outcomes, reports), the links
    /// the person added, and the computer, folder and branch it was asked for. Engines give
    /// it to the run after the prompt (recipes: `TETHER_TASK_CONTEXT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// The earlier job a follow-up continues, as its device is told at claim: enough to resume
/// the agent's own session (kept on the computer, by job id) or to start a new one with a
/// bounded summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EarlierRun {
    pub job_id: JobId,
    /// The earlier prompt, at most [`MAX_EARLIER_TEXT_CHARS`] characters.
    pub prompt: String,
    /// How the earlier run ended, in its own words, at most [`MAX_EARLIER_TEXT_CHARS`].
    pub summary: String,
    pub outcome: Option<Outcome>,
}

/// Longest earlier prompt or summary a follow-up carries, in characters.
pub const MAX_EARLIER_TEXT_CHARS: usize = 4000;

/// Most automatic carry-ons (`resume`) per job.
pub const MAX_AUTO_RESUMES: u32 = 2;
/// A run interrupted longer ago than this is not carried on automatically.
pub const RESUME_WINDOW_SECS: i64 = 24 * 3600;

/// Answer of `POST /api/devices/self/claim` when a job was claimed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimResponse {
    pub job: ClaimedJob,
}

/// Most output lines one progress call may carry.
pub const MAX_LINES_PER_PROGRESS: usize = 200;
/// Longest output line kept, in bytes; longer lines are cut.
pub const MAX_LINE_BYTES: usize = 4096;

/// `POST /api/devices/self/jobs/{id}/progress`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressParams {
    /// Increases by one per call of an attempt; a repeat is answered without effect.
    pub seq: u64,
    #[serde(default)]
    pub lines: Vec<String>,
    pub status: Option<String>,
    /// How long before this call each of `lines` was printed, in milliseconds, in the same
    /// order. An age rather than a time, so a computer's clock set wrong does not matter;
    /// the server stamps each line with its receipt time less its age (bounded by
    /// [`MAX_LINE_AGE_MS`]). Absent: every line is stamped with the receipt time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_ages_ms: Option<Vec<u64>>,
    /// What the run uses, sent when the agent first says it or it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedRun>,
}

/// The oldest a line's age may make it: older ones are stamped this much before the call.
pub const MAX_LINE_AGE_MS: u64 = 60_000;

/// Answer of a progress call.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgressResponse {
    pub lease_expires_at: DateTime<Utc>,
    pub cancel_requested: bool,
}

/// `POST /api/devices/self/jobs/{id}/complete`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompleteParams {
    pub outcome: Outcome,
    pub summary: String,
    pub exit_code: Option<i32>,
    /// The worker's report ([`WorkerReport`]). Checked by the server: one of the wrong
    /// shape is dropped (the job still completes, with a line saying so).
    #[schema(value_type = Option<WorkerReport>)]
    pub report: Option<serde_json::Value>,
    /// What the run used, as its agent said at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedRun>,
    /// What the run changed ([`Changes`]). Checked by the server: a list of the wrong
    /// shape is dropped (the job still completes, with a line saying so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Changes>)]
    pub changes: Option<serde_json::Value>,
    /// What became of the work in git ([`DeliveryReport`]); checked like `changes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<DeliveryReport>)]
    pub delivery: Option<serde_json::Value>,
}

/// Answer of complete, and of cancel.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobResponse {
    pub job: Job,
}

/// `POST /api/devices/self/jobs/{id}/reattach`: a run that kept going through an outage.
/// `leaseToken` is the lease it last held.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReattachParams {
    pub attempt: u32,
    pub lease_token: LeaseToken,
}

/// Answer of reattach: a new lease for the same attempt.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseGrant {
    pub job_id: JobId,
    pub attempt: u32,
    pub lease_token: LeaseToken,
    pub lease_expires_at: DateTime<Utc>,
}

/// `POST /api/devices/self/jobs/{id}/resume`: a run lost to a restart of the agent.
/// `attempt` is the attempt that was lost; the answer is a [`ClaimResponse`] for a new
/// attempt in the same folder, with `resumed` set.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeParams {
    pub attempt: u32,
}
