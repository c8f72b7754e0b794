//! What a run is granted besides its folder, the same for a recipe and for an ACP agent and
//! each of its terminals: the allow-listed environment with the job's prompt, exactly the
//! secrets the job names, its evidence folder, its `secret-http` broker, its attachments and
//! its tool channel.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tether_protocol::jobs::ClaimedJob;
use tokio::sync::mpsc;

use crate::changes::worktree::Worktree;
use crate::local::state::DataDir;
use crate::local::vault::{Missing, NamedSecrets, Reference, Vault};
use crate::run::attachments::RunAttachments;
use crate::run::environment;
use crate::run::evidence::RunEvidence;
use crate::run::secret_http::{Broker, BrokerContext};
use crate::run::tool_channel::ToolChannel;

/// The secrets of one run, read from the vault when it starts.
#[derive(Clone)]
pub struct RunSecrets {
    /// Exactly the secrets the job names, or the first one missing.
    pub named: Result<NamedSecrets, Missing>,
    /// Every saved value: hidden in whatever the run sends.
    pub hidden: Arc<Vec<String>>,
}

impl RunSecrets {
    /// Reads the vault of `data_dir` for `job`. A job naming no secret never fails here.
    pub fn load(data_dir: &DataDir, job: &ClaimedJob) -> RunSecrets {
        let vault = Vault::new(data_dir);
        RunSecrets {
            named: vault.named(&job.spec.secrets),
            hidden: Arc::new(vault.all_values()),
        }
    }

    /// No secrets at all (tests, and computers that have none).
    pub fn none() -> RunSecrets {
        RunSecrets {
            named: Ok(NamedSecrets::default()),
            hidden: Arc::new(Vec::new()),
        }
    }
}

/// What a run's programs get besides the allow-listed environment: the job's named
/// environment secrets, the evidence folder and the secrets broker.
pub struct Granted<'a> {
    pub secret_env: Vec<(String, String)>,
    pub evidence: Option<&'a RunEvidence>,
    pub broker: Option<&'a Broker>,
    /// The run's worktree: its repository's git folders, for commits.
    pub worktree: Option<&'a Worktree>,
    /// The files attached to the task: their folder readable, named in the environment.
    pub attachments: Option<&'a RunAttachments>,
    /// The run's tool channel: its socket readable, named in the environment.
    pub tools: Option<&'a ToolChannel>,
}

impl Granted<'_> {
    /// The run's environment, its extra writable folders and its extra readable paths.
    pub fn into_parts(
        self,
        job: &ClaimedJob,
    ) -> (Vec<(String, String)>, Vec<PathBuf>, Vec<PathBuf>) {
        let mut env = with_secrets(child_env(std::env::vars_os(), job), self.secret_env);
        let (mut writable, mut readable) = (Vec::new(), Vec::new());
        if let Some(evidence) = self.evidence {
            evidence.grant(&mut env, &mut writable);
        }
        if let Some(broker) = self.broker {
            broker.grant(&mut env, &mut readable);
        }
        if let Some(worktree) = self.worktree {
            writable.extend(worktree.writable());
            readable.extend(worktree.readable());
        }
        if let Some(attachments) = self.attachments {
            attachments.grant(&mut env, &mut readable);
        }
        if let Some(tools) = self.tools {
            tools.grant(&mut env, &mut readable);
        }
        (env, writable, readable)
    }
}

/// Starts the run's `secret-http` broker, beside the agent's `data_dir`, when the job names
/// any secret.
///
/// # Errors
/// The blocked job's summary, when it cannot start.
pub fn start_broker(
    data_dir: &Path,
    job: &ClaimedJob,
    references: Vec<Reference>,
    secrets: &RunSecrets,
    lines: &mpsc::Sender<String>,
) -> Result<Option<Broker>, String> {
    if references.is_empty() {
        return Ok(None);
    }
    let context = BrokerContext {
        secrets: references,
        hidden: secrets.hidden.clone(),
        network: job.spec.network,
        lines: lines.clone(),
    };
    Broker::start(data_dir, context)
        .map(Some)
        .map_err(|err| format!("the secrets of this job cannot be offered to it: {err:#}"))
}

/// The run's environment: the allow-listed part of the agent's (see [`environment`]), plus
/// the job's prompt, id and title, its task context, and which carry-on or follow-up it is.
pub fn child_env(
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
    job: &ClaimedJob,
) -> Vec<(String, String)> {
    let mut env = environment::scrub(inherited);
    // The owner's `~/.gitconfig` is protected; git that cannot read it refuses to run.
    env.push(("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()));
    env.push(("TETHER_TASK_PROMPT".into(), job.spec.prompt.clone()));
    env.push(("TETHER_JOB_ID".into(), job.id.as_str().into()));
    env.push(("TETHER_JOB_TITLE".into(), job.spec.title.clone()));
    if let Some(context) = &job.context {
        // What the server knows around the task: the chain it continues, its links, where
        // it was asked to run.
        env.push(("TETHER_TASK_CONTEXT".into(), context.clone()));
    }
    if let Some(resumed) = job.resumed {
        // A carry-on of a run lost to a restart: the recipe may pick up where it stopped.
        env.push(("TETHER_RESUMED".into(), resumed.to_string()));
    }
    if let Some(earlier) = &job.continues {
        // A follow-up: the recipe may look at what that job left in the folder.
        env.push(("TETHER_CONTINUES".into(), earlier.job_id.as_str().into()));
    }
    env
}

/// Adds the job's named secrets to its environment (replacing a variable of the same name):
/// exactly those, added explicitly after the allow list.
pub fn with_secrets(
    mut env: Vec<(String, String)>,
    secrets: Vec<(String, String)>,
) -> Vec<(String, String)> {
    for (name, value) in secrets {
        env.retain(|(existing, _)| *existing != name);
        env.push((name, value));
    }
    env
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tether_protocol::jobs::{JobSpec, Mode};
    use tether_protocol::{JobId, LeaseToken};

    /// A claimed job for tests of a run's pieces (here and in the engines).
    pub(crate) fn claimed_job(prompt: &str, timeout_minutes: u32) -> ClaimedJob {
        ClaimedJob {
            id: JobId::parse("job1").unwrap_or_else(|_| JobId::generate()),
            attempt: 1,
            lease_token: LeaseToken::parse("lease").unwrap_or_else(|err| panic!("{err}")),
            lease_expires_at: chrono::Utc::now(),
            spec: JobSpec {
                title: "Title".into(),
                prompt: prompt.into(),
                folder: "work".into(),
                engine: "tests".into(),
                mode: Mode::Unattended,
                network: false,
                timeout_minutes,
                secrets: Vec::new(),
                git: None,
                attachments: Vec::new(),
                links: Vec::new(),
            },
            resumed: None,
            continues: None,
            context: None,
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).into(), (*value).into()))
            .collect()
    }

    #[test]
    fn named_secrets_are_added_explicitly_and_only_those() {
        let base = vec![
            ("PATH".to_owned(), "/bin".to_owned()),
            ("API_KEY".to_owned(), "old".to_owned()),
        ];
        let env = with_secrets(base, vec![("API_KEY".to_owned(), "new".to_owned())]);
        assert_eq!(
            env,
            vec![
                ("PATH".to_owned(), "/bin".to_owned()),
                ("API_KEY".to_owned(), "new".to_owned())
            ]
        );
    }

    #[test]
    fn credentials_are_scrubbed_from_the_child_environment() {
        let inherited = vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/me"),
            ("LANG", "C.UTF-8"),
            ("GIT_AUTHOR_NAME", "Me"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("AWS_ACCESS_KEY_ID", "x"),
            ("OPENAI_API_KEY", "x"),
            ("db_password", "x"),
            ("PGPASSWORD", "x"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/x.json"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("MY_PRIVATE_THING", "x"),
            ("TETHER_AGENT_HOME", "/secret/place"),
            ("TETHER_TASK_PROMPT", "forged"),
        ]);
        let env = child_env(inherited, &claimed_job("fix the tests", 5));
        let names: Vec<String> = env.iter().map(|(name, _)| name.clone()).collect();
        assert_eq!(
            names,
            [
                "PATH",
                "HOME",
                "LANG",
                "GIT_CONFIG_GLOBAL",
                "TETHER_TASK_PROMPT",
                "TETHER_JOB_ID",
                "TETHER_JOB_TITLE"
            ]
        );
        let prompt = env
            .iter()
            .find(|(name, _)| name == "TETHER_TASK_PROMPT")
            .map(|(_, v)| v.clone());
        assert_eq!(prompt, Some("fix the tests".into()));
    }

    #[test]
    fn carry_ons_and_follow_ups_are_named_in_the_environment() {
        let mut job = claimed_job("next", 5);
        job.resumed = Some(2);
        job.continues = Some(tether_protocol::jobs::EarlierRun {
            job_id: JobId::parse("earlier-job").unwrap_or_else(|_| JobId::generate()),
            prompt: "first".into(),
            summary: "done".into(),
            outcome: None,
        });
        job.context = Some("Continues: first (done)".into());
        let env = child_env(vars(&[("PATH", "/usr/bin")]), &job);
        let ours: Vec<(&str, &str)> = env
            .iter()
            .filter(|(name, _)| {
                ["TETHER_RESUMED", "TETHER_CONTINUES", "TETHER_TASK_CONTEXT"]
                    .contains(&name.as_str())
            })
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        assert_eq!(
            ours,
            [
                ("TETHER_TASK_CONTEXT", "Continues: first (done)"),
                ("TETHER_RESUMED", "2"),
                ("TETHER_CONTINUES", "earlier-job")
            ]
        );
    }
}
