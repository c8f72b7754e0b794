//! What a run changed (`changes` on complete), running a job again (`rerun`) and following
//! it up (`continues`): the shapes accepted, the order follow-ups are claimed in, every
//! setting carried on (and changed where asked), the chain's numbers both ways, and another
//! account's job a 404 everywhere.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::capabilities::{Engine as EngineCap, EngineKind, GitCapability};
use tether_protocol::git::{BranchChoice, Delivery, GitOptions};
use tether_protocol::jobs::{Job, JobState, Mode};

use crate::both_backends;
use crate::helpers::{assert_error, job_body, spawn_app, DeviceClient, TestApp, WebClient};

/// A paired device that reports git delivery and a second engine, `lint`.
async fn git_device(app: &TestApp, owner: &WebClient) -> DeviceClient {
    let device = app.device(owner, "install-git").await;
    let mut caps = device.capabilities();
    caps.git = Some(GitCapability {
        version: "2.47.3".into(),
        github_hosts: vec!["github.com".into()],
    });
    caps.engines.push(EngineCap {
        name: "lint".into(),
        kind: EngineKind::Recipe,
        check: None,
    });
    assert_eq!(
        device.heartbeat_with(caps, &[]).await.status(),
        StatusCode::OK
    );
    device
}

/// A job that commits on a new branch, with network, a secret, `ask` and 45 minutes.
fn committing_job(device_id: &str) -> Value {
    let mut body = job_body(device_id);
    body["network"] = json!(true);
    body["mode"] = json!("ask");
    body["timeoutMinutes"] = json!(45);
    body["secrets"] = json!(["API_KEY"]);
    body["git"] = json!({ "delivery": "commit", "branch": { "new": "tether/fix" } });
    body
}

/// Claims the device's next job and completes it `succeeded`.
async fn finish_next(device: &DeviceClient) -> tether_protocol::jobs::ClaimedJob {
    let claimed = device.claim_job().await;
    let done = json!({ "outcome": "succeeded", "summary": "Done." });
    let res = device
        .complete(claimed.id.as_str(), claimed.lease_token.expose(), &done)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    claimed
}

async fn html(web: &WebClient, path: &str) -> String {
    let res = web.get(path).await;
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    res.text().await.unwrap()
}

fn changes() -> Value {
    json!({
        "base": { "kind": "git", "head": "4b825dc642cb6eb9a060e54bf8d69288fbee4904" },
        "files": [
            { "path": "package.json", "status": "modified", "additions": 2, "deletions": 1,
              "binary": false, "flags": ["runs_later"] },
            { "path": "src/new.rs", "status": "renamed", "from": "src/old.rs",
              "additions": 0, "deletions": 0, "binary": false, "flags": [] },
            { "path": "logo.png", "status": "added", "additions": 0, "deletions": 0,
              "binary": true, "flags": [] },
        ],
        "totals": { "files": 3, "additions": 2, "deletions": 1 },
        "truncated": false,
    })
}

/// Queues `body`, claims it and completes it `succeeded` with `extra` merged in.
async fn run_to_end(ann: &WebClient, device: &DeviceClient, body: &Value, extra: Value) -> Job {
    let res = ann.post("/api/jobs", body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let claimed = device.claim_job().await;
    assert_eq!(claimed.id, job.id);
    let mut done = json!({ "outcome": "succeeded", "summary": "Done: all green." });
    if let (Some(done), Some(extra)) = (done.as_object_mut(), extra.as_object()) {
        done.extend(extra.clone());
    }
    let res = device
        .complete(job.id.as_str(), claimed.lease_token.expose(), &done)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    ann.job(job.id.as_str()).await
}

both_backends! {
    async fn changes_are_stored_as_reported_and_a_bad_list_is_dropped(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);

        let job = run_to_end(&ann, &device, &body, json!({ "changes": changes() })).await;
        assert_eq!(job.state, JobState::Succeeded);
        let listed = serde_json::to_value(job.changes.as_ref().unwrap()).unwrap();
        assert_eq!(listed, changes());

        // Each bad shape: the job completes, the list is dropped, the timeline says why.
        let mut outside = changes();
        outside["files"][0]["path"] = json!("../../etc/passwd");
        let mut undercounted = changes();
        undercounted["totals"]["files"] = json!(1);
        let mut unknown_flag = changes();
        unknown_flag["files"][0]["flags"] = json!(["<img src=x>"]);
        for bad in [json!("nonsense"), json!({ "files": 3 }), outside, undercounted, unknown_flag] {
            let job = run_to_end(&ann, &device, &body, json!({ "changes": bad })).await;
            assert_eq!(job.state, JobState::Succeeded, "{bad}");
            assert!(job.changes.is_none(), "{bad}");
            assert!(
                job.events.iter().any(|e| e.kind == "system" && e.text.contains("list of changes was dropped")),
                "{:?}", job.events
            );
        }
        // Without a list, nothing is said.
        let job = run_to_end(&ann, &device, &body, json!({})).await;
        assert!(job.changes.is_none());
        assert!(!job.events.iter().any(|e| e.text.contains("list of changes")));
    }

    async fn a_finished_job_runs_again_with_its_spec(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut body = job_body(&device.device_id);
        body["secrets"] = json!(["API_KEY"]);
        body["network"] = json!(true);
        let first = run_to_end(&ann, &device, &body, json!({})).await;

        let res = ann.post_empty(&format!("/api/jobs/{}/rerun", first.id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let again: Job = res.json().await.unwrap();
        assert_ne!(again.id, first.id);
        assert_eq!(again.state, JobState::Queued);
        assert_eq!(again.spec, first.spec);
        assert!(again.continues.is_none());

        let res = ann.post(&format!("/api/jobs/{}/rerun", first.id), &json!({ "prompt": "cargo test -p x" })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let with_prompt: Job = res.json().await.unwrap();
        assert_eq!(with_prompt.spec.prompt, "cargo test -p x");
        assert_eq!(with_prompt.spec.folder, first.spec.folder);

        // A job that has not ended is not run again; bad bodies are refused.
        assert_error(ann.post_empty(&format!("/api/jobs/{}/rerun", again.id)).await, 409, "invalid_state").await;
        let path = format!("/api/jobs/{}/rerun", first.id);
        assert_error(ann.post(&path, &json!({ "prompt": 7 })).await, 400, "invalid_request").await;
        assert_error(ann.post(&path, &json!({ "prompt": "x".repeat(20_001) })).await, 422, "invalid_field").await;
        assert_error(ann.post(&path, &json!({ "prompt": "a\u{0}b" })).await, 422, "invalid_field").await;
    }

    async fn a_follow_up_waits_for_the_job_it_continues(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let first: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let claimed = device.claim_job().await;

        let mut follow = body.clone();
        follow["prompt"] = json!("now fix the failing test");
        follow["continues"] = json!(first.id);
        let res = ann.post("/api/jobs", &follow).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let second: Job = res.json().await.unwrap();
        assert_eq!(second.continues.as_ref(), Some(&first.id));
        // Queued behind a running job, and says so.
        let seen = ann.job(second.id.as_str()).await;
        assert!(seen.queued_because.as_deref().unwrap_or("").contains("has not ended"), "{:?}", seen.queued_because);
        assert_eq!(ann.job(first.id.as_str()).await.continued_by.as_ref(), Some(&second.id));
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);

        // One follow-up per job.
        assert_error(ann.post("/api/jobs", &follow).await, 409, "invalid_state").await;

        let done = json!({ "outcome": "failed", "summary": "2 tests failed", "exitCode": 1 });
        let res = device.complete(first.id.as_str(), claimed.lease_token.expose(), &done).await;
        assert_eq!(res.status(), StatusCode::OK);
        let next = device.claim_job().await;
        assert_eq!(next.id, second.id);
        let earlier = next.continues.unwrap();
        assert_eq!(earlier.job_id, first.id);
        assert_eq!(earlier.prompt, "cargo test");
        assert_eq!(earlier.summary, "2 tests failed");
        assert_eq!(earlier.outcome, Some(tether_protocol::jobs::Outcome::Failed));
    }

    async fn a_follow_up_names_the_same_computer_and_folder(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other_device = app.device(&ann, "install-2").await;
        let first = run_to_end(&ann, &device, &job_body(&device.device_id), json!({})).await;

        let mut elsewhere = job_body(&other_device.device_id);
        elsewhere["continues"] = json!(first.id);
        let message = assert_error(ann.post("/api/jobs", &elsewhere).await, 422, "invalid_field").await;
        assert!(message.contains("deviceId"), "{message}");

        let mut with_caps = device.capabilities();
        with_caps.folders.push("other".into());
        device.heartbeat_with(with_caps, &[]).await;
        let mut other_folder = job_body(&device.device_id);
        other_folder["folder"] = json!("other");
        other_folder["continues"] = json!(first.id);
        let message = assert_error(ann.post("/api/jobs", &other_folder).await, 422, "invalid_field").await;
        assert!(message.contains("folder"), "{message}");

        let mut unknown = job_body(&device.device_id);
        unknown["continues"] = json!("not-a-job");
        assert_error(ann.post("/api/jobs", &unknown).await, 404, "not_found").await;
        unknown["continues"] = json!(tether_protocol::JobId::generate());
        assert_error(ann.post("/api/jobs", &unknown).await, 404, "not_found").await;
    }

    async fn another_accounts_job_is_not_found_on_every_new_route(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let bobs_device = app.device(&bob, "install-b").await;
        let job = run_to_end(&ann, &device, &job_body(&device.device_id), json!({ "changes": changes() })).await;

        assert_error(bob.post_empty(&format!("/api/jobs/{}/rerun", job.id)).await, 404, "not_found").await;
        assert_error(bob.get(&format!("/api/jobs/{}/diff?path=package.json", job.id)).await, 404, "not_found").await;
        let mut follow = job_body(&bobs_device.device_id);
        follow["continues"] = json!(job.id);
        assert_error(bob.post("/api/jobs", &follow).await, 404, "not_found").await;
        // Nothing of Ann's job changed.
        assert!(ann.job(job.id.as_str()).await.continued_by.is_none());
    }

    async fn a_queued_job_says_why_it_waits(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let first: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let waiting = ann.job(first.id.as_str()).await;
        assert!(waiting.queued_because.as_deref().unwrap_or("").contains("Waiting for"), "{:?}", waiting.queued_because);
        device.claim_job().await;
        let second: Job = ann.post("/api/jobs", &body).await.json().await.unwrap();
        let busy = ann.job(second.id.as_str()).await;
        assert!(busy.queued_because.as_deref().unwrap_or("").contains("busy"), "{:?}", busy.queued_because);
        assert!(ann.job(first.id.as_str()).await.queued_because.is_none());

        app.advance(std::time::Duration::from_secs(3600));
        let offline = ann.job(second.id.as_str()).await;
        assert!(offline.queued_because.as_deref().unwrap_or("").contains("offline"), "{:?}", offline.queued_because);
    }

    async fn a_rerun_keeps_every_setting_unless_told_otherwise(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = git_device(&app, &ann).await;
        let first = run_to_end(&ann, &device, &committing_job(&device.device_id), json!({})).await;
        let path = format!("/api/jobs/{}/rerun", first.id);

        // Nothing given: the earlier spec, on a new branch of its own.
        let res = ann.post(&path, &json!({})).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let again: Job = res.json().await.unwrap();
        let git = again.spec.git.clone().unwrap();
        assert_eq!(git.delivery, Delivery::Commit);
        assert!(matches!(&git.branch, Some(BranchChoice::New(name)) if name != "tether/fix" && name.starts_with("tether/")), "{git:?}");
        let mut same = again.spec.clone();
        same.git = first.spec.git.clone();
        assert_eq!(same, first.spec);
        assert_eq!(again.rerun_of.as_ref(), Some(&first.id));
        assert_eq!(again.run_number, Some(2));
        device.claim_job().await;

        // Each setting given replaces the earlier one; the rest stays.
        let changed = json!({
            "title": "Lint it", "engine": "lint", "mode": "unattended", "network": false,
            "timeoutMinutes": 5, "secrets": [], "git": { "delivery": "local" },
        });
        let res = ann.post(&path, &changed).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let other: Job = res.json().await.unwrap();
        assert_eq!((other.spec.title.as_str(), other.spec.engine.as_str()), ("Lint it", "lint"));
        assert_eq!((other.spec.mode, other.spec.network, other.spec.timeout_minutes), (Mode::Unattended, false, 5));
        assert!(other.spec.secrets.is_empty());
        assert_eq!(other.spec.git, Some(GitOptions { delivery: Delivery::Local, branch: None, base: None, merge: None, worktree: false }));
        assert_eq!((other.spec.prompt.as_str(), other.spec.folder.as_str()), ("cargo test", "work"));
        assert_eq!(other.run_number, Some(3));
        // `null` asks for no git handling.
        let res = ann.post(&path, &json!({ "git": null })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let plain: Job = res.json().await.unwrap();
        assert!(plain.spec.git.is_none());

        // Checked as POST /api/jobs checks a new job, and nothing is queued when refused.
        for (bad, status, code) in [
            (json!({ "engine": "nope" }), 422, "unknown_engine"),
            (json!({ "folder": "nope" }), 422, "unknown_folder"),
            (json!({ "timeoutMinutes": 0 }), 422, "invalid_field"),
            (json!({ "title": "" }), 422, "invalid_field"),
            (json!({ "secrets": ["no spaces"] }), 422, "invalid_field"),
            (json!({ "network": false, "git": { "delivery": "pull_request" } }), 422, "invalid_field"),
            (json!({ "git": { "delivery": "commit", "branch": { "new": "bad..name" } } }), 422, "invalid_field"),
            (json!({ "mode": "sideways" }), 400, "invalid_request"),
            (json!({ "network": "yes" }), 400, "invalid_request"),
        ] {
            assert_error(ann.post(&path, &bad).await, status, code).await;
        }
        // A computer without git delivery cannot take the earlier job's git choices.
        let plain_device = app.device(&ann, "install-plain").await;
        let mut body = job_body(&plain_device.device_id);
        body["git"] = json!(null);
        let done = run_to_end(&ann, &plain_device, &body, json!({})).await;
        let res = ann.post(&format!("/api/jobs/{}/rerun", done.id), &json!({ "git": { "delivery": "commit" } })).await;
        let message = assert_error(res, 422, "invalid_field").await;
        assert!(message.starts_with("git:"), "{message}");

        // The earlier job lists its re-runs, oldest first.
        let seen = ann.job(first.id.as_str()).await;
        assert_eq!(seen.reruns, vec![again.id.clone(), other.id.clone(), plain.id.clone()]);
        assert_eq!(seen.run_number, Some(1));

        // Another account's job is not found, with settings given or not.
        let bob = app.user("bob@example.com").await;
        assert_error(bob.post(&path, &changed).await, 404, "not_found").await;
        assert_error(bob.post(&path, &json!({ "engine": "nope" })).await, 404, "not_found").await;
        assert_eq!(ann.job(first.id.as_str()).await.reruns.len(), 3);
    }

    async fn a_follow_up_keeps_the_git_delivery_of_the_job_it_continues(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = git_device(&app, &ann).await;
        let body = committing_job(&device.device_id);

        // Without `git`: the earlier job's choices, going on with the branch it made.
        let first = run_to_end(&ann, &device, &body, json!({})).await;
        let mut follow = body.clone();
        follow.as_object_mut().unwrap().remove("git");
        follow["continues"] = json!(first.id);
        let res = ann.post("/api/jobs", &follow).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let second: Job = res.json().await.unwrap();
        let git = second.spec.git.clone().unwrap();
        assert_eq!(git.delivery, Delivery::Commit);
        assert_eq!(git.branch, Some(BranchChoice::Existing("tether/fix".into())));
        assert_eq!(finish_next(&device).await.spec.git, Some(git));

        // `null`: no git handling; given: as given.
        let first = run_to_end(&ann, &device, &body, json!({})).await;
        follow["continues"] = json!(first.id);
        follow["git"] = json!(null);
        let res = ann.post("/api/jobs", &follow).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert!(res.json::<Job>().await.unwrap().spec.git.is_none());
        finish_next(&device).await;
        let first = run_to_end(&ann, &device, &body, json!({})).await;
        follow["continues"] = json!(first.id);
        follow["git"] = json!({ "delivery": "push" });
        let res = ann.post("/api/jobs", &follow).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert_eq!(res.json::<Job>().await.unwrap().spec.git.unwrap().delivery, Delivery::Push);
        finish_next(&device).await;

        // The earlier choices are checked against the follow-up's settings.
        let mut pull = committing_job(&device.device_id);
        pull["git"] = json!({ "delivery": "pull_request", "merge": "ask" });
        let first = run_to_end(&ann, &device, &pull, json!({})).await;
        let mut follow = pull.clone();
        follow.as_object_mut().unwrap().remove("git");
        follow["continues"] = json!(first.id);
        follow["mode"] = json!("unattended");
        let message = assert_error(ann.post("/api/jobs", &follow).await, 422, "invalid_field").await;
        assert!(message.starts_with("git.merge:"), "{message}");
        assert!(ann.job(first.id.as_str()).await.continued_by.is_none());

        // The page's Continue carries the git choices, editable, with the branch to go on with.
        let first = run_to_end(&ann, &device, &body, json!({})).await;
        let page = html(&ann, &format!("/jobs/{}", first.id)).await;
        let (_, form) = page.split_once(r#"<h2 id="continue-heading">"#).unwrap();
        assert!(form.contains(r#"<fieldset class="git" data-git-choices>"#), "{form}");
        assert!(form.contains(r#"<input type="hidden" name="git" data-json value="{&quot;delivery&quot;:&quot;commit&quot;,&quot;branch&quot;:{&quot;existing&quot;:&quot;tether/fix&quot;},&quot;worktree&quot;:false}">"#), "{form}");
        assert!(form.contains(r#"<input type="radio" name="git-delivery" data-unsent value="commit" checked aria-describedby="continue-git-delivery-commit-hint">"#), "{form}");
        assert!(form.contains(r#"<input type="radio" name="git-branch" data-unsent value="existing" checked>"#), "{form}");
        assert!(form.contains(r#"data-git="existing" maxlength="200" value="tether/fix""#), "{form}");
        assert!(form.contains(r#"<option value="ask" selected>ask</option>"#), "{form}");
        assert!(form.contains(r#"<input type="number" name="timeoutMinutes" value="45" min="1" max="1440">"#), "{form}");
        // Run again's form has its own, on a new branch of the default name.
        let (rerun_form, _) = page.split_once(r#"<h2 id="continue-heading">"#).unwrap();
        assert!(rerun_form.contains(r#"&quot;branch&quot;:{&quot;new&quot;:&quot;&quot;}"#), "{rerun_form}");
        assert!(rerun_form.contains(r#"aria-describedby="rerun-git-delivery-commit-hint""#), "{rerun_form}");
    }

    async fn re_runs_and_follow_ups_are_numbered_and_linked_both_ways(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let alone = run_to_end(&ann, &device, &body, json!({})).await;
        assert_eq!((alone.run_number, alone.rerun_of.as_ref(), alone.reruns.len()), (None, None, 0));

        let first = run_to_end(&ann, &device, &body, json!({})).await;
        // Run 2 runs the first again; run 3 continues run 2; run 4 runs the first again.
        let second: Job = ann.post_empty(&format!("/api/jobs/{}/rerun", first.id)).await.json().await.unwrap();
        let claimed = device.claim_job().await;
        device.complete(second.id.as_str(), claimed.lease_token.expose(), &json!({ "outcome": "succeeded", "summary": "ok" })).await;
        let mut follow = body.clone();
        follow["title"] = json!("Follow-up: Run the tests");
        follow["continues"] = json!(second.id);
        let third: Job = ann.post("/api/jobs", &follow).await.json().await.unwrap();
        let claimed = device.claim_job().await;
        device.complete(third.id.as_str(), claimed.lease_token.expose(), &json!({ "outcome": "failed", "summary": "no" })).await;
        let fourth: Job = ann.post_empty(&format!("/api/jobs/{}/rerun", first.id)).await.json().await.unwrap();
        for (job, run) in [(&first, 1), (&second, 2), (&third, 3), (&fourth, 4)] {
            assert_eq!(ann.job(job.id.as_str()).await.run_number, Some(run));
        }
        let seen = ann.job(third.id.as_str()).await;
        assert_eq!((seen.continues.as_ref(), seen.rerun_of.as_ref()), (Some(&second.id), None));
        // A re-run of run 3 is run 5 of the same chain.
        let fifth: Job = ann.post_empty(&format!("/api/jobs/{}/rerun", third.id)).await.json().await.unwrap();
        assert_eq!(fifth.run_number, Some(5));
        assert_eq!(ann.job(fifth.id.as_str()).await.run_number, Some(5));

        // The pages say so both ways.
        let page = html(&ann, &format!("/jobs/{}", first.id)).await;
        assert!(page.contains(&format!(
            r#"<p data-field="run">Run 1</p><p data-field="reruns">Run again as <a href="/jobs/{}">#2 Run the tests</a>, <a href="/jobs/{}">#4 Run the tests</a></p>"#,
            second.id, fourth.id
        )), "{page}");
        let page = html(&ann, &format!("/jobs/{}", second.id)).await;
        assert!(page.contains(&format!(
            r#"<p data-field="run">Run 2 · <span data-field="rerun-of">again from <a href="/jobs/{}">#1 Run the tests</a></span></p><p data-field="continued-by">Continued by <a href="/jobs/{}">#3 Follow-up: Run the tests</a></p>"#,
            first.id, third.id
        )), "{page}");
        let page = html(&ann, &format!("/jobs/{}", third.id)).await;
        assert!(page.contains(&format!(
            r#"<p data-field="run">Run 3 · <span data-field="continues">continues <a href="/jobs/{}">#2 Run the tests</a></span></p><p data-field="reruns">Run again as <a href="/jobs/{}">#5 Follow-up: Run the tests</a></p>"#,
            second.id, fifth.id
        )), "{page}");
        let page = html(&ann, &format!("/jobs/{}", alone.id)).await;
        assert!(!page.contains(r#"data-field="run""#), "{page}");

        // Another account sees none of it.
        let bob = app.user("bob@example.com").await;
        assert_error(bob.get(&format!("/api/jobs/{}", second.id)).await, 404, "not_found").await;
        let res = bob.get(&format!("/jobs/{}", first.id)).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert!(!res.text().await.unwrap().contains(second.id.as_str()));
    }

    async fn assign_says_what_each_mode_means_in_one_line(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        app.device(&ann, "install-1").await;
        let page = html(&ann, "/assign").await;
        assert!(page.contains(r#"<select name="mode" aria-describedby="assign-mode-hints">"#), "{page}");
        let (_, hints) = page.split_once(r#"<ul class="mode-hints muted" id="assign-mode-hints">"#).unwrap();
        let (hints, _) = hints.split_once("</ul>").unwrap();
        for (mode, says) in [
            ("ask", "asks you before it runs a command or changes a file"),
            ("review", "works freely in the job's folder"),
            ("unattended", "never waits for you"),
        ] {
            assert!(hints.contains(&format!("<li><strong>{mode}</strong>: {says}")), "{mode}: {hints}");
        }
        assert_eq!(hints.matches("<li>").count(), 3, "{hints}");
    }
}
