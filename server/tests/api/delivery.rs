//! Git delivery on the server: the `git` choices of a new job, and the delivery report of
//! a completion, stored as metadata and entered in the ledger.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::capabilities::GitCapability;
use tether_protocol::git::{BranchChoice, PullRequestState};
use tether_protocol::jobs::{Job, JobState};

use crate::both_backends;
use crate::helpers::{
    assert_error, job_body, query_i64, spawn_app, DeviceClient, TestApp, WebClient,
};

/// A paired device that reports git delivery.
async fn git_device(app: &TestApp, owner: &WebClient) -> DeviceClient {
    let device = app.device(owner, "install-git").await;
    let mut caps = device.capabilities();
    caps.git = Some(GitCapability {
        version: "2.47.3".into(),
        github_hosts: vec!["github.com".into()],
    });
    assert_eq!(
        device.heartbeat_with(caps, &[]).await.status(),
        StatusCode::OK
    );
    device
}

fn with_git(device_id: &str, git: Value) -> Value {
    let mut body = job_body(device_id);
    body["network"] = json!(true);
    body["mode"] = json!("ask");
    body["git"] = git;
    body
}

both_backends! {
    async fn git_choices_are_checked(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let plain = app.device(&ann, "install-plain").await;
        let device = git_device(&app, &ann).await;
        let field = |message: String, name: &str| assert!(message.starts_with(name), "{message}");

        let pr = json!({ "delivery": "pull_request", "branch": { "new": "fix/login" }, "base": "main", "merge": "ask" });
        let res = ann.post("/api/jobs", &with_git(&device.device_id, pr.clone())).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let job: Job = res.json().await.unwrap();
        assert_eq!(job.spec.git.unwrap().branch, Some(BranchChoice::New("fix/login".into())));

        // A computer that does not deliver with git.
        field(assert_error(ann.post("/api/jobs", &with_git(&plain.device_id, pr.clone())).await, 422, "invalid_field").await, "git");
        // Names, combinations, network and mode.
        for (git, name) in [
            (json!({ "delivery": "push", "branch": { "new": "a..b" } }), "git.branch"),
            (json!({ "delivery": "push", "branch": { "existing": "-x" } }), "git.branch"),
            (json!({ "delivery": "push", "branch": { "current": false } }), "git.branch"),
            (json!({ "delivery": "pull_request", "base": "bad name" }), "git.base"),
            (json!({ "delivery": "commit", "merge": "auto" }), "git.merge"),
            (json!({ "delivery": "push", "base": "main" }), "git.base"),
        ] {
            field(assert_error(ann.post("/api/jobs", &with_git(&device.device_id, git.clone())).await, 422, "invalid_field").await, name);
        }
        let mut offline_pr = with_git(&device.device_id, json!({ "delivery": "pull_request" }));
        offline_pr["network"] = json!(false);
        field(assert_error(ann.post("/api/jobs", &offline_pr).await, 422, "invalid_field").await, "git.delivery");
        let mut unattended = with_git(&device.device_id, json!({ "delivery": "pull_request", "merge": "ask" }));
        unattended["mode"] = json!("unattended");
        field(assert_error(ann.post("/api/jobs", &unattended).await, 422, "invalid_field").await, "git.merge");
        // Shapes that do not parse are a 400, never a 500.
        for git in [json!({ "delivery": "force_push" }), json!({ "delivery": "push", "branch": { "new": 7 } }), json!("push")] {
            assert_eq!(ann.post("/api/jobs", &with_git(&device.device_id, git.clone())).await.status(), StatusCode::BAD_REQUEST, "{git}");
        }

        // A new branch without a name gets tether/<short id>/<slug>.
        let res = ann.post("/api/jobs", &with_git(&device.device_id, json!({ "delivery": "push", "branch": { "new": "" } }))).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let job: Job = res.json().await.unwrap();
        let Some(BranchChoice::New(name)) = job.spec.git.and_then(|git| git.branch) else { panic!("no branch") };
        assert!(name.starts_with("tether/") && name.ends_with("/run-the-tests"), "{name}");
    }

    async fn a_delivery_report_is_shown_and_entered_in_the_ledger(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = git_device(&app, &ann).await;
        let body = with_git(&device.device_id, json!({ "delivery": "pull_request", "merge": "auto" }));
        let job: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let claimed = device.claim_job().await;
        assert!(claimed.spec.git.is_some());
        let report = json!({
            "branch": "tether/1234abcd/run-the-tests",
            "commits": [{ "sha": "0123456789abcdef", "subject": "Run the tests" }],
            "pushed": true,
            "pullRequest": { "number": 12, "url": "https://github.com/o/r/pull/12", "state": "merged" },
        });
        let done = json!({ "outcome": "succeeded", "summary": "Merged #12.", "delivery": report });
        assert_eq!(device.complete(job.id.as_str(), claimed.lease_token.expose(), &done).await.status(), StatusCode::OK);
        let seen = ann.job(job.id.as_str()).await;
        let delivery = seen.delivery.unwrap();
        assert!(delivery.pushed);
        assert_eq!(delivery.commits[0].subject, "Run the tests");
        assert_eq!(delivery.pull_request.unwrap().state, PullRequestState::Merged);
        for kind in ["git.pushed", "git.pull_request", "git.merged"] {
            let sql = format!("SELECT COUNT(*) FROM ledger WHERE kind = '{kind}' AND subject = '{}'", job.id);
            assert_eq!(query_i64(&app.store, &sql).await, Some(1), "{kind}");
        }

        // A report of the wrong shape is dropped; the job keeps its outcome.
        let job: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let claimed = device.claim_job().await;
        let bad = json!({ "branch": "x", "commits": [], "pushed": true,
                          "pullRequest": { "number": 1, "url": "javascript:alert(1)", "state": "open" } });
        let done = json!({ "outcome": "blocked", "summary": "The push was refused.", "delivery": bad });
        assert_eq!(device.complete(job.id.as_str(), claimed.lease_token.expose(), &done).await.status(), StatusCode::OK);
        let seen = ann.job(job.id.as_str()).await;
        assert_eq!(seen.state, JobState::Blocked);
        assert!(seen.delivery.is_none());
        assert!(seen.events.iter().any(|e| e.text.contains("delivery report was dropped")));
    }
}
