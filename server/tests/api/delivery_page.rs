//! Git delivery on the pages: Assign offers the Git choices only for a computer that reports
//! git, and the job page says what was asked and what its computer delivered (branch,
//! commits, push, pull request), as text. Completions are faked through the device API.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::capabilities::GitCapability;
use tether_protocol::jobs::Job;

use crate::both_backends;
use crate::helpers::{job_body, spawn_app, DeviceClient, TestApp, WebClient};

async fn html(web: &WebClient, path: &str) -> (u16, String) {
    let res = web.get(path).await;
    let status = res.status().as_u16();
    (status, res.text().await.unwrap())
}

/// A paired device that reports git delivery, with GitHub sign-ins for `github_hosts`.
async fn git_device(
    app: &TestApp,
    owner: &WebClient,
    install_id: &str,
    github_hosts: &[&str],
) -> DeviceClient {
    let device = app.device(owner, install_id).await;
    let mut caps = device.capabilities();
    caps.git = Some(GitCapability {
        version: "2.47.3".into(),
        github_hosts: github_hosts.iter().map(|host| host.to_string()).collect(),
    });
    assert_eq!(
        device.heartbeat_with(caps, &[]).await.status(),
        StatusCode::OK
    );
    device
}

/// Queues a job with these `git` choices, claims it and completes it with `delivery`.
async fn delivered(ann: &WebClient, device: &DeviceClient, git: Value, delivery: Value) -> Job {
    let mut body = job_body(&device.device_id);
    body["network"] = json!(true);
    body["git"] = git;
    let res = ann.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let claimed = device.claim_job().await;
    let done = json!({ "outcome": "succeeded", "summary": "Delivered.", "delivery": delivery });
    let res = device
        .complete(job.id.as_str(), claimed.lease_token.expose(), &done)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    ann.job(job.id.as_str()).await
}

both_backends! {
    async fn assign_offers_git_only_to_a_computer_that_reports_it(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let plain = app.device(&ann, "install-plain").await;
        let capable = git_device(&app, &ann, "install-git", &[]).await;

        let (_, page) = html(&ann, &format!("/assign?device={}", plain.device_id)).await;
        assert!(page.contains("does not report git delivery"), "{page}");
        assert!(!page.contains("data-git-choices") && !page.contains(r#"name="git""#), "{page}");

        let (status, page) = html(&ann, &format!("/assign?device={}", capable.device_id)).await;
        assert_eq!(status, 200);
        assert!(page.contains(r#"<fieldset class="git" data-git-choices><legend>Git</legend>"#), "{page}");
        // Before the script runs, the hidden field already holds what the checked controls say.
        assert!(page.contains(r#"<input type="hidden" name="git" data-json value="{&quot;delivery&quot;:&quot;local&quot;,&quot;branch&quot;:{&quot;current&quot;:true},&quot;worktree&quot;:false}">"#), "{page}");
        for (value, words) in [("local", "Local only"), ("commit", "Commit"), ("push", "Push"), ("pull_request", "Pull request")] {
            let radio = format!(r#"<input type="radio" name="git-delivery" data-unsent value="{value}""#);
            assert!(page.contains(&radio), "{value}: {page}");
            assert!(page.contains(&format!(r#"aria-describedby="git-delivery-{value}-hint">{words}</label>"#)), "{value}: {page}");
            assert!(page.contains(&format!(r#"<p class="muted" id="git-delivery-{value}-hint">"#)), "{value}: {page}");
        }
        assert!(page.contains(r#"value="local" checked"#), "Local only is the default: {page}");
        assert!(page.contains(r#"placeholder="tether/&lt;job id&gt;/&lt;title&gt;""#), "{page}");
        for label in ["New branch name (empty: the default)", "Existing branch name", "Base branch (empty: the repository's default)", "When I allow it", "Automatically when checks pass", "Run in a separate copy (git worktree) if the folder is busy"] {
            assert!(page.contains(label), "{label}: {page}");
        }
        // Pull request's choices wait hidden; this computer has no GitHub sign-in yet.
        assert!(page.contains(r#"<fieldset class="choices" id="git-pull-request" hidden disabled>"#), "{page}");
        assert!(page.contains("<code>tether-agent github add</code> first"), "{page}");
        assert!(page.contains(r#"<script src="/assets/assign.js" defer>"#), "{page}");
        assert!(page.contains(r#"data-fields="{&quot;git&quot;:&quot;Git&quot;"#), "{page}");
        let script = ann.get("/assets/assign.js").await;
        assert!(script.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
        let script = script.text().await.unwrap();
        assert!(script.contains("pull_request") && !script.contains("innerHTML"), "{script}");

        // With a sign-in, the page says where pull requests open; the last job's choices
        // on this computer are where the next one starts.
        let signed_in = git_device(&app, &ann, "install-gh", &["github.com"]).await;
        let mut body = job_body(&signed_in.device_id);
        body["network"] = json!(true);
        body["git"] = json!({ "delivery": "pull_request", "merge": "auto", "worktree": true });
        assert_eq!(ann.post("/api/jobs", &body).await.status(), StatusCode::CREATED);
        let (_, page) = html(&ann, &format!("/assign?device={}", signed_in.device_id)).await;
        assert!(page.contains("Opened on github.com with the computer"), "{page}");
        assert!(!page.contains("tether-agent github add"), "{page}");
        // A pull request starts as Push (network access starts off); its merge choice waits.
        assert!(page.contains(r#"value="push" checked"#) && !page.contains(r#"value="pull_request" checked"#), "{page}");
        assert!(page.contains(r#"value="auto" checked"#), "{page}");
        assert!(page.contains(r#"name="git" data-json value="{&quot;delivery&quot;:&quot;push&quot;,&quot;branch&quot;:{&quot;current&quot;:true},&quot;worktree&quot;:true}""#), "{page}");
    }

    async fn the_job_page_shows_what_was_delivered_as_text(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = git_device(&app, &ann, "install-git", &["github.com"]).await;
        let git = json!({ "delivery": "pull_request", "branch": { "new": "fix/login" }, "base": "main", "merge": "ask" });
        let report = json!({
            "branch": "fix/login",
            "commits": [
                { "sha": "0123456789abcdef0123", "subject": "Fix the login" },
                { "sha": "fedcba9876543210", "subject": "<script>alert(1)</script> & more" },
            ],
            "pushed": true,
            "pullRequest": { "number": 12, "url": "https://github.com/o/r/pull/12", "state": "open" },
        });
        let job = delivered(&ann, &device, git, report).await;
        assert!(job.delivery.is_some(), "the server kept the report");
        let (status, page) = html(&ann, &format!("/jobs/{}", job.id)).await;
        assert_eq!(status, 200);
        assert!(page.contains(r#"<dt>Git</dt><dd data-field="git">Pull request on a new branch <code>fix/login</code> into <code>main</code>, merged when you allow it</dd>"#), "{page}");
        assert!(page.contains(r#"<div id="job-delivery" data-refresh><section class="delivery" aria-labelledby="delivery-heading"><h2 id="delivery-heading">Delivery</h2>"#), "{page}");
        assert!(page.contains(r#"<dt>Branch</dt><dd data-field="branch"><code>fix/login</code></dd>"#), "{page}");
        assert!(page.contains(r#"<li><code class="sha" title="0123456789abcdef0123">0123456</code> <span class="subject">Fix the login</span></li>"#), "{page}");
        assert!(page.contains(r#"<span class="subject">&lt;script&gt;alert(1)&lt;/script&gt; &amp; more</span>"#), "{page}");
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains(r#"<dd data-field="pushed">pushed</dd>"#), "{page}");
        assert!(page.contains(r#"<dd data-field="pull-request"><a href="https://github.com/o/r/pull/12" rel="noreferrer">#12</a> <span class="badge pr-open">open</span></dd>"#), "{page}");

        // Merged and closed read as such; Local only keeps no commits and pushes nothing.
        for state in ["merged", "closed"] {
            let report = json!({ "branch": "main", "commits": [], "pushed": true,
                                 "pullRequest": { "number": 3, "url": "https://github.com/o/r/pull/3", "state": state } });
            let job = delivered(&ann, &device, json!({ "delivery": "pull_request" }), report).await;
            let (_, page) = html(&ann, &format!("/jobs/{}", job.id)).await;
            assert!(page.contains(&format!(r#"<span class="badge pr-{state}">{state}</span>"#)), "{state}: {page}");
            assert!(page.contains("into the default branch, never merged"), "{page}");
        }
        let report = json!({ "branch": "main", "commits": [], "pushed": false });
        let job = delivered(&ann, &device, json!({ "delivery": "local", "worktree": true }), report).await;
        let (_, page) = html(&ann, &format!("/jobs/{}", job.id)).await;
        assert!(page.contains(r#"<dd data-field="git">Local only on the current branch; in a separate worktree if the folder is busy</dd>"#), "{page}");
        assert!(page.contains(r#"<dd data-field="commits">no commits kept</dd>"#), "{page}");
        assert!(page.contains(r#"<dd data-field="pushed">not pushed</dd>"#), "{page}");
        assert!(!page.contains(r#"data-field="pull-request""#), "{page}");

        // Before the computer reports, the region is there, empty, for the live page to fill.
        let queued = ann.post("/api/jobs", &{
            let mut body = job_body(&device.device_id);
            body["git"] = json!({ "delivery": "commit" });
            body
        }).await.json::<Job>().await.unwrap();
        let (_, page) = html(&ann, &format!("/jobs/{}", queued.id)).await;
        assert!(page.contains(r#"<div id="job-delivery" data-refresh></div>"#), "{page}");
        assert!(page.contains(r#"<dd data-field="git">Commit on the current branch</dd>"#), "{page}");

        // Another account's job is not found, delivery and all.
        let bob = app.user("bob@example.com").await;
        let (status, page) = html(&bob, &format!("/jobs/{}", job.id)).await;
        assert_eq!(status, 404);
        assert!(!page.contains("Delivery"), "{page}");
    }
}
