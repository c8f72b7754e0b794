//! What a run knows beyond its prompt: the links a job carries, the bounded context section
//! of its claim (computer, folder, links, the chain it continues or runs again), the prompt's
//! limit, and the context route a run asks under its lease (`job.chain`, `job.get`,
//! `jobs.search`): bounded, answered from the job's own account only, fenced and limited.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tether_protocol::jobs::{ClaimedJob, Job};
use tether_protocol::task_context::{MAX_CONTEXT_ANSWER_CHARS, MAX_CONTEXT_CHARS};
use tether_server::rate_limits::Rate;

use crate::both_backends;
use crate::helpers::{assert_error, job_body, spawn_app, spawn_app_with, DeviceClient, WebClient};

const CUT: &str = "…(cut)";

/// `POST /api/devices/self/jobs/{id}/context` with `lease`.
async fn ask(device: &DeviceClient, job_id: &str, lease: &str, body: Value) -> Response {
    device
        .http
        .post(format!(
            "{}/api/devices/self/jobs/{job_id}/context",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The text of a 200 answer.
async fn answer(res: Response) -> String {
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = res.json().await.unwrap();
    body["text"].as_str().unwrap().to_owned()
}

async fn create(web: &WebClient, body: &Value) -> Job {
    let res = web.post("/api/jobs", body).await;
    let status = res.status();
    let answer: Value = res.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    serde_json::from_value(answer).unwrap()
}

/// Claims the device's next job and completes it with `done`.
async fn finish_next(device: &DeviceClient, done: &Value) -> ClaimedJob {
    let claimed = device.claim_job().await;
    let res = device
        .complete(claimed.id.as_str(), claimed.lease_token.expose(), done)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    claimed
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

fn with(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}

both_backends! {
    async fn links_are_checked_and_carried(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);

        let eleven: Vec<String> = (0..11).map(|n| format!("https://example.com/{n}")).collect();
        let long = format!("https://example.com/{}", "a".repeat(1_981));
        assert_eq!(chars(&long), 2_001);
        for bad in [
            json!(eleven),
            json!(["ftp://example.com/file"]),
            json!(["javascript:alert(1)"]),
            json!([long]),
            json!(["https://example.com/a\u{7}b"]),
            json!(["https://example.com/\u{202e}gpj.exe"]),
            json!(["example.com/no-scheme"]),
        ] {
            let res = ann.post("/api/jobs", &with(body.clone(), "links", bad.clone())).await;
            let message = assert_error(res, 422, "invalid_field").await;
            assert!(message.starts_with("links:"), "{bad}: {message}");
        }

        let ten: Vec<String> = (0..10).map(|n| format!("https://example.com/issue/{n}?q=a&b=c#x")).collect();
        let mut at_limit = format!("https://example.com/{}", "b".repeat(1_980));
        assert_eq!(chars(&at_limit), 2_000);
        let job = create(&ann, &with(body.clone(), "links", json!(ten))).await;
        assert_eq!(job.spec.links, ten);
        let single = create(&ann, &with(body.clone(), "links", json!([at_limit.clone()]))).await;
        assert_eq!(single.spec.links, vec![at_limit.clone()]);
        at_limit.push('b');

        // A re-run keeps the links unless given, and checks given ones as a new job.
        finish_next(&device, &json!({ "outcome": "succeeded", "summary": "Done." })).await;
        let rerun = format!("/api/jobs/{}/rerun", job.id);
        let res = ann.post_empty(&rerun).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let again: Job = res.json().await.unwrap();
        assert_eq!(again.spec.links, ten);
        let message = assert_error(ann.post(&rerun, &json!({ "links": ["ftp://x.org/"] })).await, 422, "invalid_field").await;
        assert!(message.starts_with("links:"), "{message}");
        assert_error(ann.post(&rerun, &json!({ "links": [at_limit] })).await, 422, "invalid_field").await;
        let res = ann.post(&rerun, &json!({ "links": [] })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let none: Job = res.json().await.unwrap();
        assert!(none.spec.links.is_empty());
    }

    async fn a_long_prompt_is_refused_never_cut(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        // Characters, not bytes: 20,001 two-byte characters are one too many.
        let message = assert_error(
            ann.post("/api/jobs", &with(body.clone(), "prompt", json!("é".repeat(20_001)))).await,
            422, "invalid_field",
        ).await;
        assert!(message.starts_with("prompt:") && message.contains("20000"), "{message}");

        let prompt = format!("{}{}", "é".repeat(19_999), "Z");
        let job = create(&ann, &with(body, "prompt", json!(prompt))).await;
        assert_eq!(job.spec.prompt, prompt);
        let claimed = device.claim_job().await;
        assert_eq!(claimed.spec.prompt, prompt);
        assert_eq!(ann.job(job.id.as_str()).await.spec.prompt, prompt);
    }

    async fn a_claim_names_computer_folder_and_links(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let links = json!(["https://example.com/issue/7", "http://docs.example.com/spec"]);
        let job = create(&ann, &with(job_body(&device.device_id), "links", links)).await;
        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, job.id);
        let context = claimed.context.unwrap();
        assert!(context.contains("Computer: laptop\n"), "{context}");
        assert!(context.contains("Folder: work\n"), "{context}");
        assert!(context.contains("- https://example.com/issue/7\n"), "{context}");
        assert!(context.contains("- http://docs.example.com/spec\n"), "{context}");
        // Alone: no earlier runs, no branch asked for.
        assert!(!context.contains("Earlier runs"), "{context}");
        assert!(!context.contains("Branch"), "{context}");

        // A carry-on after a restart carries the same section.
        let res = device.resume(job.id.as_str(), claimed.attempt).await;
        assert_eq!(res.status(), StatusCode::OK);
        let resumed: Value = res.json().await.unwrap();
        assert_eq!(resumed["job"]["context"].as_str(), Some(context.as_str()));
    }

    async fn follow_ups_and_re_runs_carry_the_earlier_runs(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let first = create(&ann, &with(body.clone(), "prompt", json!("make the build pass"))).await;
        let done = json!({ "outcome": "failed", "summary": "2 tests failed in auth.", "exitCode": 1,
                           "report": { "summary": "auth::login and auth::logout fail.",
                                       "tested": [{ "command": "cargo test auth", "outcome": "failed" }] } });
        finish_next(&device, &done).await;

        let mut follow = with(body.clone(), "prompt", json!("now fix the failing tests"));
        follow["continues"] = json!(first.id);
        let second = create(&ann, &follow).await;
        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, second.id);
        // The follow-up is told of the earlier run as before, too.
        assert_eq!(claimed.continues.as_ref().unwrap().summary, "2 tests failed in auth.");
        let context = claimed.context.unwrap();
        assert!(context.contains("## Earlier runs of this task, newest first"), "{context}");
        assert!(context.contains(&format!("### Run 1 · job {} · this job continues it", first.id)), "{context}");
        assert!(context.contains("Prompt: make the build pass\n"), "{context}");
        assert!(context.contains("Outcome: failed (exit code 1)\n"), "{context}");
        assert!(context.contains("Summary: 2 tests failed in auth.\n"), "{context}");
        assert!(context.contains("Worker's report: auth::login and auth::logout fail.\nTested:\n- failed: cargo test auth\n"), "{context}");
        let done = json!({ "outcome": "succeeded", "summary": "Fixed the session check." });
        let res = device.complete(second.id.as_str(), claimed.lease_token.expose(), &done).await;
        assert_eq!(res.status(), StatusCode::OK);

        // Running the follow-up again: both earlier runs, newest first.
        let res = ann.post(&format!("/api/jobs/{}/rerun", second.id), &json!({ "prompt": "fix it again" })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let third: Job = res.json().await.unwrap();
        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, third.id);
        assert!(claimed.continues.is_none());
        let context = claimed.context.unwrap();
        let run2 = context.find(&format!("### Run 2 · job {} · this job runs it again", second.id));
        let run1 = context.find(&format!("### Run 1 · job {}\n", first.id));
        assert!(run2.is_some() && run1.is_some() && run2 < run1, "{context}");
        assert!(context.contains("Prompt: now fix the failing tests\n"), "{context}");
        assert!(context.contains("Summary: Fixed the session check.\n"), "{context}");
        assert!(context.contains("Prompt: make the build pass\n"), "{context}");
        assert!(!context.contains("fix it again"), "its own prompt is not an earlier run: {context}");
    }

    async fn a_chain_of_huge_runs_still_fits_the_section(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let huge = |c: &str| c.repeat(20_000);
        let links: Vec<String> = (0..10).map(|n| format!("https://example.com/{n}/{}", "l".repeat(1_900))).collect();
        let mut body = with(job_body(&device.device_id), "prompt", json!(huge("p")));
        body["links"] = json!(links);
        body["title"] = json!("t".repeat(200));
        let done = json!({ "outcome": "failed", "summary": "s".repeat(10_000), "exitCode": 2,
                           "report": { "summary": "r".repeat(2_000), "done": vec!["d".repeat(1_000); 30] } });
        let mut earlier = create(&ann, &body).await;
        finish_next(&device, &done).await;
        for _ in 0..3 {
            let res = ann.post_empty(&format!("/api/jobs/{}/rerun", earlier.id)).await;
            assert_eq!(res.status(), StatusCode::CREATED);
            earlier = res.json().await.unwrap();
            finish_next(&device, &done).await;
        }
        let mut follow = body.clone();
        follow["continues"] = json!(earlier.id);
        create(&ann, &follow).await;
        let claimed = device.claim_job().await;
        let context = claimed.context.unwrap();
        assert!(chars(&context) <= MAX_CONTEXT_CHARS, "{}", chars(&context));
        // Every earlier run is there, each cut visibly rather than left out.
        for run in 1..=4 {
            assert!(context.contains(&format!("### Run {run} · job ")), "{context}");
        }
        assert!(context.contains("Prompt: ppp"), "{context}");
        assert!(context.contains("Summary: sss"), "{context}");
        assert!(context.contains("Worker's report: rrr"), "{context}");
        assert!(context.contains(&format!("rrr{CUT}")), "{context}");
        assert!(context.contains("- https://example.com/0/"), "{context}");
        // The follow-up's own summary of the earlier run keeps its own, larger bound.
        assert_eq!(chars(&claimed.continues.unwrap().prompt), 4_000);
    }

    async fn the_context_route_answers_the_chain_and_other_jobs(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let first = create(&ann, &with(body.clone(), "prompt", json!("make the build pass"))).await;
        let changes = json!({
            "base": { "kind": "git" },
            "files": [
                { "path": "package.json", "status": "modified", "additions": 2, "deletions": 1,
                  "binary": false, "flags": ["runs_later"] },
                { "path": "src/new.rs", "status": "renamed", "from": "src/old.rs",
                  "additions": 0, "deletions": 0, "binary": false, "flags": [] },
            ],
            "totals": { "files": 2, "additions": 2, "deletions": 1 },
            "truncated": false,
        });
        let done = json!({ "outcome": "failed", "summary": "2 tests failed.", "exitCode": 1,
                           "report": { "summary": "2 failing.", "notDone": ["the fix"] }, "changes": changes });
        finish_next(&device, &done).await;
        let mut follow = with(body.clone(), "prompt", json!("fix the failing tests"));
        follow["continues"] = json!(first.id);
        let second = create(&ann, &follow).await;
        let claimed = device.claim_job().await;
        let (job_id, lease) = (second.id.as_str(), claimed.lease_token.expose());

        let chain = answer(ask(&device, job_id, lease, json!({ "name": "job.chain" })).await).await;
        assert!(chain.contains(&format!("### Run 1 · job {}", first.id)), "{chain}");
        assert!(chain.contains("Prompt: make the build pass\n"), "{chain}");
        assert!(chain.contains("Outcome: failed (exit code 1)\n"), "{chain}");
        assert!(chain.contains("Summary: 2 tests failed.\n"), "{chain}");
        assert!(chain.contains("Worker's report: 2 failing.\nNot done:\n- the fix\n"), "{chain}");
        assert!(!chain.contains("fix the failing tests"), "{chain}");

        let get = json!({ "name": "job.get", "args": { "id": first.id } });
        let got = answer(ask(&device, job_id, lease, get).await).await;
        assert!(got.contains(&format!("## Job {}", first.id)), "{got}");
        assert!(got.contains("Title: Run the tests\n"), "{got}");
        assert!(got.contains("Prompt: make the build pass\n"), "{got}");
        assert!(got.contains("State: failed"), "{got}");
        assert!(got.contains("## Changed files (2 files, +2 −1)"), "{got}");
        assert!(got.contains("modified package.json (+2 −1) [runs_later]"), "{got}");
        assert!(got.contains("renamed src/old.rs → src/new.rs (+0 −0)"), "{got}");

        // A job without a chain says so.
        let alone = create(&ann, &body).await;
        let get = json!({ "name": "job.get", "args": { "id": alone.id } });
        assert!(answer(ask(&device, job_id, lease, get).await).await.contains("State: queued"));

        // Another account's job, or none, is not found; bad questions name what is wrong.
        let bob = app.user("bob@example.com").await;
        let bobs_device = app.device(&bob, "install-b").await;
        let bobs = create(&bob, &job_body(&bobs_device.device_id)).await;
        for id in [bobs.id.to_string(), tether_protocol::JobId::generate().to_string()] {
            let get = json!({ "name": "job.get", "args": { "id": id } });
            assert_error(ask(&device, job_id, lease, get).await, 404, "not_found").await;
        }
        let message = assert_error(ask(&device, job_id, lease, json!({ "name": "job.delete" })).await, 422, "invalid_field").await;
        assert!(message.starts_with("name:"), "{message}");
        for (bad, field) in [
            (json!({ "name": "job.get" }), "id:"),
            (json!({ "name": "job.get", "args": { "id": 7 } }), "id:"),
            (json!({ "name": "job.get", "args": { "id": "../../etc" } }), "id:"),
            (json!({ "name": "jobs.search", "args": { "query": " " } }), "query:"),
            (json!({ "name": "jobs.search", "args": [] }), "args:"),
        ] {
            let message = assert_error(ask(&device, job_id, lease, bad.clone()).await, 422, "invalid_field").await;
            assert!(message.starts_with(field), "{bad}: {message}");
        }
        assert_error(ask(&device, job_id, lease, json!({ "args": {} })).await, 400, "invalid_request").await;
    }

    async fn search_finds_every_word_newest_first_in_the_account_only(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let asking = create(&ann, &with(body.clone(), "title", json!("Asking run"))).await;
        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, asking.id);
        let (job_id, lease) = (asking.id.as_str(), claimed.lease_token.expose());
        let search = |query: &str| json!({ "name": "jobs.search", "args": { "query": query } });
        let titled = |title: &str, prompt: &str| {
            let mut body = with(body.clone(), "title", json!(title));
            body["prompt"] = json!(prompt);
            body
        };

        let older = create(&ann, &titled("Fix LOGIN bug", "the form fails")).await;
        app.advance(Duration::from_secs(1));
        let newer = create(&ann, &titled("Session work", "fix the login redirect")).await;
        app.advance(Duration::from_secs(1));
        let one_word = create(&ann, &titled("Docs", "login page docs")).await;
        let percent = create(&ann, &titled("50% off banner", "sale")).await;
        let five_thousand = create(&ann, &titled("5000 items", "bulk")).await;
        let underscore = create(&ann, &titled("a_b test", "x")).await;
        let axb = create(&ann, &titled("axb test", "x")).await;
        let bob = app.user("bob@example.com").await;
        let bobs_device = app.device(&bob, "install-b").await;
        let mut bobs = with(job_body(&bobs_device.device_id), "title", json!("Fix login bug"));
        bobs["prompt"] = json!("login fix");
        let bobs = create(&bob, &bobs).await;

        let found = answer(ask(&device, job_id, lease, search("login FIX")).await).await;
        let at = |id: &tether_protocol::JobId| found.find(id.as_str());
        assert!(at(&newer.id).is_some() && at(&older.id).is_some(), "{found}");
        assert!(at(&newer.id) < at(&older.id), "newest first: {found}");
        assert!(at(&one_word.id).is_none() && at(&bobs.id).is_none(), "{found}");
        assert!(found.contains(&format!("{} · Fix LOGIN bug · queued · created ", older.id)), "{found}");
        let lines = found.lines().filter(|line| line.contains(" · created ")).count();
        assert_eq!(lines, 2, "{found}");

        let found = answer(ask(&device, job_id, lease, search("50%")).await).await;
        assert!(found.contains(percent.id.as_str()) && !found.contains(five_thousand.id.as_str()), "{found}");
        let found = answer(ask(&device, job_id, lease, search("a_b")).await).await;
        assert!(found.contains(underscore.id.as_str()) && !found.contains(axb.id.as_str()), "{found}");
        let found = answer(ask(&device, job_id, lease, search("nothing-like-this")).await).await;
        assert!(found.starts_with("No job"), "{found}");

        // At most 20, the newest.
        let mut batch = Vec::new();
        for n in 0..22 {
            app.advance(Duration::from_millis(10));
            batch.push(create(&ann, &titled(&format!("Batch {n}"), "sweep")).await);
        }
        let found = answer(ask(&device, job_id, lease, search("sweep")).await).await;
        let ids: Vec<&str> = found.lines().filter_map(|line| line.split(" · ").next()).filter(|id| !id.starts_with('#')).collect();
        let newest: Vec<&str> = batch.iter().rev().take(20).map(|job| job.id.as_str()).collect();
        assert_eq!(ids, newest, "{found}");
    }

    async fn answers_are_bounded(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut body = with(job_body(&device.device_id), "prompt", json!("p".repeat(20_000)));
        body["links"] = json!((0..10).map(|n| format!("https://example.com/{n}/{}", "l".repeat(1_900))).collect::<Vec<_>>());
        let files: Vec<Value> = (0..1_000)
            .map(|n| json!({ "path": format!("src/{n:04}/{}.rs", "f".repeat(50)), "status": "added",
                             "additions": 1, "deletions": 0, "binary": false, "flags": [] }))
            .collect();
        let changes = json!({ "base": { "kind": "git" }, "files": files,
                              "totals": { "files": 1_000, "additions": 1_000, "deletions": 0 },
                              "truncated": false });
        let done = json!({ "outcome": "failed", "summary": "s".repeat(10_000),
                           "report": { "summary": "r".repeat(2_000), "risks": vec!["k".repeat(1_000); 30] }, "changes": changes });
        let mut earlier = create(&ann, &body).await;
        finish_next(&device, &done).await;
        let first = earlier.id.clone();
        for _ in 0..2 {
            let res = ann.post_empty(&format!("/api/jobs/{}/rerun", earlier.id)).await;
            earlier = res.json().await.unwrap();
            finish_next(&device, &done).await;
        }
        let res = ann.post_empty(&format!("/api/jobs/{}/rerun", earlier.id)).await;
        let asking: Job = res.json().await.unwrap();
        let claimed = device.claim_job().await;
        let (job_id, lease) = (asking.id.as_str(), claimed.lease_token.expose());

        let last_line = "is shortened.)\n";
        let chain = answer(ask(&device, job_id, lease, json!({ "name": "job.chain" })).await).await;
        assert!(chars(&chain) <= MAX_CONTEXT_ANSWER_CHARS, "{}", chars(&chain));
        assert!(chain.ends_with(last_line), "{}", &chain[chain.len() - 300..]);
        let (run1, run3) = (chain.find("### Run 1 · job "), chain.find("### Run 3 · job "));
        assert!(run1.is_some() && run1 < run3, "oldest first: {chain}");

        let get = json!({ "name": "job.get", "args": { "id": first } });
        let got = answer(ask(&device, job_id, lease, get).await).await;
        assert!(chars(&got) <= MAX_CONTEXT_ANSWER_CHARS, "{}", chars(&got));
        assert!(got.ends_with(last_line));
        assert!(got.contains("Prompt: ppp") && got.contains("added src/0000/"), "{got}");
        assert!(got.contains(&format!("ppp{CUT}")), "{got}");
    }

    async fn the_context_route_is_fenced_by_the_lease(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other = app.device(&ann, "install-2").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let theirs = ann.create_job(&other.device_id).await;
        let their_claim = other.claim_job().await;
        assert_eq!(their_claim.id, theirs.id);
        let (job_id, lease) = (job.id.as_str(), claimed.lease_token.expose());
        let chain = json!({ "name": "job.chain" });
        assert!(answer(ask(&device, job_id, lease, chain.clone()).await).await.contains("no earlier runs"));

        // Another lease, or none that could be one: stale.
        let other_lease = their_claim.lease_token.expose();
        assert_error(ask(&device, job_id, other_lease, chain.clone()).await, 409, "stale_lease").await;
        assert_error(ask(&device, job_id, "not a lease", chain.clone()).await, 409, "stale_lease").await;
        // Another device's job, even with its own lease: not found.
        assert_error(ask(&device, theirs.id.as_str(), other_lease, chain.clone()).await, 404, "not_found").await;
        assert_error(ask(&other, job_id, lease, chain.clone()).await, 404, "not_found").await;
        // An expired lease, then an ended run: stale.
        app.advance(Duration::from_secs(app.config.lease_secs + 1));
        assert_error(ask(&device, job_id, lease, chain.clone()).await, 409, "stale_lease").await;
        let res = device.reattach(job_id, claimed.attempt, lease).await;
        assert_eq!(res.status(), StatusCode::OK);
        let grant: Value = res.json().await.unwrap();
        let lease = grant["leaseToken"].as_str().unwrap().to_owned();
        assert_eq!(ask(&device, job_id, &lease, chain.clone()).await.status(), StatusCode::OK);
        let res = device.complete(job_id, &lease, &json!({ "outcome": "succeeded", "summary": "Done." })).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_error(ask(&device, job_id, &lease, chain).await, 409, "stale_lease").await;
    }

    async fn the_context_route_is_rate_limited_per_device(backend) {
        let app = spawn_app_with(backend, |config| {
            config.rate_limits.context = Rate::per_minute(3);
        }).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other = app.device(&ann, "install-2").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let theirs = ann.create_job(&other.device_id).await;
        let their_claim = other.claim_job().await;
        let chain = json!({ "name": "job.chain" });
        for _ in 0..3 {
            let res = ask(&device, job.id.as_str(), claimed.lease_token.expose(), chain.clone()).await;
            assert_eq!(res.status(), StatusCode::OK);
        }
        let res = ask(&device, job.id.as_str(), claimed.lease_token.expose(), chain.clone()).await;
        let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=20).contains(&retry), "{retry}");
        let message = assert_error(res, 429, "rate_limited").await;
        assert!(message.contains("context"), "{message}");
        // Each device has its own.
        let res = ask(&other, theirs.id.as_str(), their_claim.lease_token.expose(), chain).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
}
