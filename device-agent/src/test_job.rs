//! The unit tests' claimed job: `job1`, attempt 1, lease `lease`, folder `work`.

use tether_protocol::jobs::{ClaimedJob, JobSpec, Mode};
use tether_protocol::{JobId, LeaseToken};

/// A claimed job for engine `engine` in `mode`.
pub(crate) fn claimed_job(engine: &str, mode: Mode) -> ClaimedJob {
    ClaimedJob {
        id: JobId::parse("job1").unwrap_or_else(|err| panic!("{err}")),
        attempt: 1,
        lease_token: LeaseToken::parse("lease").unwrap_or_else(|err| panic!("{err}")),
        lease_expires_at: chrono::Utc::now(),
        spec: JobSpec {
            title: "t".into(),
            prompt: "p".into(),
            folder: "work".into(),
            engine: engine.into(),
            mode,
            network: false,
            timeout_minutes: 5,
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
