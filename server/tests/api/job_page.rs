//! The job page after a run: what it changed, where and when it ran, Run again and
//! Continue, the chain of follow-ups; the Jobs list's lines; Assign starting from the last
//! used. Runs are faked through the device API; the page's HTML is checked.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::capabilities::{Engine, EngineKind};
use tether_protocol::jobs::{EventEntry, Job, TimelineKind};

use crate::both_backends;
use crate::helpers::{job_body, spawn_app, DeviceClient, TestApp, WebClient};

async fn html(web: &WebClient, path: &str) -> (u16, String) {
    let res = web.get(path).await;
    let status = res.status().as_u16();
    (status, res.text().await.unwrap())
}

fn changes() -> Value {
    json!({
        "base": { "kind": "git", "head": "4b825dc642cb6eb9a060e54bf8d69288fbee4904" },
        "files": [
            { "path": ".env", "status": "modified", "additions": 1, "deletions": 0,
              "binary": false, "flags": ["credential"] },
            { "path": "package.json", "status": "modified", "additions": 2, "deletions": 1,
              "binary": false, "flags": ["runs_later"] },
            { "path": "src/<b>new</b>.rs", "status": "renamed", "from": "src/old.rs",
              "additions": 9, "deletions": 3, "binary": false, "flags": [] },
        ],
        "totals": { "files": 5, "additions": 14, "deletions": 4 },
        "truncated": true,
    })
}

/// Queues `body`, claims it, lets `took` pass on the server's clock and completes it with
/// `done`.
async fn run_to_end(
    app: &TestApp,
    ann: &WebClient,
    device: &DeviceClient,
    body: &Value,
    took: Duration,
    done: Value,
) -> Job {
    let res = ann.post("/api/jobs", body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let claimed = device.claim_job().await;
    assert_eq!(claimed.id, job.id);
    app.advance(took);
    let res = device
        .complete(job.id.as_str(), claimed.lease_token.expose(), &done)
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    ann.job(job.id.as_str()).await
}

fn succeeded_with_changes() -> Value {
    json!({ "outcome": "succeeded", "summary": "exit code 0", "exitCode": 0, "changes": changes() })
}

both_backends! {
    async fn an_ended_job_shows_what_it_changed(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let job = run_to_end(&app, &ann, &device, &body, Duration::from_secs(5), succeeded_with_changes()).await;
        assert!(job.changes.is_some(), "the server keeps the list");
        let (status, page) = html(&ann, &format!("/jobs/{}", job.id)).await;
        assert_eq!(status, 200);
        assert!(page.contains(&format!(r#"data-changes="/api/jobs/{}/diff""#, job.id)), "{page}");
        assert!(page.contains("5 files changed, +14 \u{2212}4"), "{page}");
        assert!(page.contains("and 2 more files not listed"), "{page}");
        // The summary warning, then a badge on the one file that runs later.
        assert!(page.contains("<strong>Review before you build or run.</strong> 1 file here can run code outside the sandbox later: hooks, build scripts, task and CI files"), "{page}");
        assert_eq!(page.matches(r#"<span class="badge warn-badge">Review before you build or run</span>"#).count(), 1);
        assert!(page.contains(r#"data-diff-path="package.json""#), "{page}");
        // A credential is named, with no way to its diff.
        assert!(page.contains(r#"<span class="file-name">.env</span>"#) && !page.contains(r#"data-diff-path=".env""#), "{page}");
        assert!(page.contains("Credential file"), "{page}");
        assert!(page.contains("renamed from src/old.rs"), "{page}");
        assert!(page.contains("src/&lt;b&gt;new&lt;/b&gt;.rs") && !page.contains("<b>new</b>"), "{page}");
        assert!(page.contains(r#"<script src="/assets/job.js" defer>"#), "{page}");
        let script = ann.get("/assets/job.js").await;
        assert!(script.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
        let script = script.text().await.unwrap();
        assert!(script.contains("device_offline") && script.contains("device_timeout"), "{script}");
        assert!(!script.contains("innerHTML"), "the computer's text never becomes markup");

        // A job that has not run shows no Changes and no way to run it again.
        let queued = ann.create_job(&device.device_id).await;
        let (_, page) = html(&ann, &format!("/jobs/{}", queued.id)).await;
        assert!(!page.contains("data-changes") && !page.contains("/rerun"), "{page}");
        assert!(page.contains(r#"data-files-toggle aria-expanded="false" aria-controls="files-browser""#), "{page}");
        assert!(page.contains(&format!(r#"data-files="/api/jobs/{}" data-folder="work""#, queued.id)), "{page}");
    }

    async fn the_page_says_where_and_when_and_never_repeats_the_state(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let done = json!({ "outcome": "cancelled", "summary": "cancelled" });
        let job = run_to_end(&app, &ann, &device, &body, Duration::from_secs(100), done).await;
        let (_, page) = html(&ann, &format!("/jobs/{}", job.id)).await;
        assert!(page.contains(&format!(r#"<a href="/computers#device-{}">laptop</a>"#, device.device_id)), "{page}");
        assert!(page.contains("<dt>Folder</dt><dd><code>work</code></dd><dt>Engine</dt><dd>echo</dd><dt>Mode</dt><dd>review</dd>"), "{page}");
        for label in ["Created", "Started", "Ended"] {
            assert!(page.contains(&format!("<dt>{label}</dt><dd><time datetime=")), "{label}: {page}");
        }
        assert!(page.contains(r#"<dd data-field="duration"><span>1 min 40 s</span></dd>"#), "{page}");
        assert!(page.contains("UTC</time> (1 min ago)"), "{page}");
        assert!(page.contains(r#"<p data-field="outcome"></p>"#), "the badge says cancelled once: {page}");
        // Ended jobs of a paired computer offer both ways on.
        assert!(page.contains(&format!(r#"data-api="/api/jobs/{}/rerun" data-redirect="/jobs/{{id}}""#, job.id)), "{page}");
        assert!(page.contains(r#"<textarea name="prompt" maxlength="20000">cargo test</textarea>"#), "the old prompt: {page}");

        // A running job counts its duration in the browser, from the server's clock.
        let running = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        app.advance(Duration::from_secs(42));
        let (_, page) = html(&ann, &format!("/jobs/{}", running.id)).await;
        let since = app.now() - chrono::Duration::seconds(42);
        assert!(page.contains(&format!(r#"<span data-since="{}" data-now="{}">42 s</span>"#, since.timestamp_millis(), app.now().timestamp_millis())), "{page}");
        assert!(!page.contains("/rerun") && page.contains("data-while-active"), "{page}");
        let done = json!({ "outcome": "failed", "summary": "exit code 3", "exitCode": 3 });
        device.complete(running.id.as_str(), claimed.lease_token.expose(), &done).await;
        let (_, page) = html(&ann, &format!("/jobs/{}", running.id)).await;
        assert!(page.contains(r#"<p data-field="outcome">exit code 3</p>"#), "{page}");

        // A queued job says why it waits, as the API does.
        let queued = ann.create_job(&device.device_id).await;
        let api: Value = ann.get(&format!("/api/jobs/{}", queued.id)).await.json().await.unwrap();
        let (_, page) = html(&ann, &format!("/jobs/{}", queued.id)).await;
        match api["queuedBecause"].as_str() {
            Some(why) => assert!(page.contains(&maud::html! { (why) }.into_string()), "{why}: {page}"),
            None => assert!(page.contains(r#"data-field="queued-because" hidden"#), "{page}"),
        }
    }

    async fn continue_and_the_chain_of_follow_ups(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut body = job_body(&device.device_id);
        body["secrets"] = json!(["API_KEY"]);
        body["network"] = json!(true);
        let earlier = run_to_end(&app, &ann, &device, &body, Duration::from_secs(1), succeeded_with_changes()).await;
        let (_, page) = html(&ann, &format!("/jobs/{}", earlier.id)).await;
        // The Continue form carries the spec as the API takes it, each setting a control
        // filled in with the earlier job's value.
        let (_, continue_form) = page.split_once(r#"<h2 id="continue-heading">"#).unwrap();
        for field in [
            format!(r#"<input type="hidden" name="deviceId" value="{}">"#, device.device_id),
            format!(r#"<input type="hidden" name="continues" value="{}">"#, earlier.id),
            r#"<input type="hidden" name="folder" value="work">"#.to_owned(),
            r#"<option value="echo" selected>echo</option>"#.to_owned(),
            r#"<option value="review" selected>review</option>"#.to_owned(),
            r#"<input type="checkbox" name="network" checked>"#.to_owned(),
            r#"<input type="number" name="timeoutMinutes" value="30" min="1" max="1440">"#.to_owned(),
            r#"<input type="checkbox" name="secrets" value="API_KEY" data-list checked>"#.to_owned(),
            r#"<input type="hidden" name="git" value="null" data-json>"#.to_owned(),
            r#"value="Follow-up: Run the tests""#.to_owned(),
        ] {
            assert!(continue_form.contains(&field), "{field}: {continue_form}");
        }
        // What the form posts, as app.js sends it.
        let follow_up = json!({
            "deviceId": device.device_id, "continues": earlier.id, "folder": "work", "engine": "echo",
            "mode": "review", "network": true, "timeoutMinutes": 30, "secrets": ["API_KEY"],
            "title": "Follow-up: Run the tests", "prompt": "Now fix what failed",
        });
        let res = ann.post("/api/jobs", &follow_up).await;
        assert_eq!(res.status(), StatusCode::CREATED, "{}", res.text().await.unwrap());
        let later: Job = res.json().await.unwrap();
        let (_, page) = html(&ann, &format!("/jobs/{}", later.id)).await;
        assert!(page.contains(&format!(r#"<p data-field="run">Run 2 · <span data-field="continues">continues <a href="/jobs/{}">#1 Run the tests</a></span></p>"#, earlier.id)), "{page}");
        let (_, page) = html(&ann, &format!("/jobs/{}", earlier.id)).await;
        assert!(page.contains(&format!(r#"<p data-field="run">Run 1</p><p data-field="continued-by">Continued by <a href="/jobs/{}">#2 Follow-up: Run the tests</a></p>"#, later.id)), "{page}");
        // Continued once: the way on is from the later job.
        assert!(!page.contains(r#"name="continues""#) && page.contains("go on from"), "{page}");

        // Another account sees none of it.
        let eve = app.user("eve@example.com").await;
        let (status, page) = html(&eve, &format!("/jobs/{}", later.id)).await;
        assert_eq!(status, 404);
        assert!(!page.contains("Run the tests"), "{page}");
    }

    async fn bad_job_addresses_are_not_found_pages(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        for path in ["/jobs/not-a-job", "/jobs/%00", "/jobs/0190d4b8-0000-7000-8000-000000000000", "/jobs/%F0%9F%92%A5"] {
            let (status, page) = html(&ann, path).await;
            assert_eq!(status, 404, "{path}");
            assert!(page.contains("Not found"), "{path}: {page}");
        }
    }

    async fn the_jobs_list_names_computer_state_duration_and_when(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let body = job_body(&device.device_id);
        let done = json!({ "outcome": "succeeded", "summary": "ok" });
        run_to_end(&app, &ann, &device, &body, Duration::from_secs(75), done).await;
        app.advance(Duration::from_secs(180));
        let (_, list) = html(&ann, "/jobs").await;
        assert!(list.contains(r#"<span class="badge state-succeeded">succeeded</span>"#), "{list}");
        assert!(list.contains("laptop · echo in work · <span>1 min 15 s</span> · <time datetime="), "{list}");
        assert!(list.contains(" data-ago>4 min ago</time>"), "{list}");
    }

    async fn assign_starts_from_the_last_used_computer_folder_and_engine(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let first = app.device(&ann, "install-1").await;
        let second = app.device(&ann, "install-2").await;
        let mut capabilities = second.capabilities();
        capabilities.folders = vec!["work".to_owned(), "docs".to_owned()];
        capabilities.engines.push(Engine { name: "tests".to_owned(), kind: EngineKind::Recipe, check: None });
        assert_eq!(second.heartbeat_with(capabilities.clone(), &[]).await.status(), StatusCode::OK);
        let (_, page) = html(&ann, "/assign").await;
        assert!(page.contains(&format!(r#"<option value="{}" selected>"#, first.device_id)), "no job yet: the first: {page}");

        let mut body = job_body(&second.device_id);
        body["folder"] = json!("docs");
        body["engine"] = json!("tests");
        assert_eq!(ann.post("/api/jobs", &body).await.status(), StatusCode::CREATED);
        let (_, page) = html(&ann, "/assign").await;
        assert!(page.contains(&format!(r#"<option value="{}" selected>"#, second.device_id)), "{page}");
        assert!(page.contains(r#"<option value="docs" selected>docs</option>"#), "{page}");
        assert!(page.contains(r#"<option value="tests" selected>tests</option>"#), "{page}");
        // Asking for the other computer starts from its own defaults.
        let (_, page) = html(&ann, &format!("/assign?device={}", first.device_id)).await;
        assert!(page.contains(r#"<option value="work">work</option>"#) && !page.contains("docs"), "{page}");

        // A folder the computer stopped sharing is not chosen.
        capabilities.folders = vec!["work".to_owned()];
        assert_eq!(second.heartbeat_with(capabilities, &[]).await.status(), StatusCode::OK);
        let (_, page) = html(&ann, "/assign").await;
        assert!(page.contains(r#"<option value="work">work</option>"#) && !page.contains("docs"), "{page}");
    }

    async fn the_run_reads_as_a_timeline_in_the_order_it_happened(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let (_, page) = html(&ann, &format!("/jobs/{}", job.id)).await;
        assert!(page.contains(r#"<span class="muted" data-field="attempt" hidden>"#), "no attempt 0: {page}");
        let claimed = device.claim_job().await;
        let (id, lease) = (job.id.as_str(), claimed.lease_token.expose());
        let mut first = vec![
            "agent: my-agent 1.2.0", "I'll run the tests.", "plan:", "  [x] read the parser",
            "  [~] run the tests", "tool: Read src/parser.rs (read) pending", "tool: Read src/parser.rs done",
            "$ sh -c 'cargo test'", "stderr: <script>alert(1)</script>",
        ];
        let output: Vec<String> = (1..=6).map(|n| format!("term-1: test {n} ok")).collect();
        first.extend(output.iter().map(String::as_str));
        let sent = device.progress(id, lease, &json!({ "seq": 1, "lines": first })).await;
        assert_eq!(sent.status(), StatusCode::OK);
        let asked = timeline_ask(&device, id, lease).await;
        // Printed before the question, sent in the next batch: shown before it.
        let late = json!({ "seq": 2, "lines": ["term-1: exit code 0", "Tests <b>pass</b>."] });
        assert_eq!(device.progress(id, lease, &late).await.status(), StatusCode::OK);
        app.advance(Duration::from_secs(5));
        let answer = json!({ "answer": "allow", "scope": "once" });
        let res = ann.post(&format!("/api/decisions/{asked}/answer"), &answer).await;
        assert_eq!(res.status(), StatusCode::OK, "{}", res.text().await.unwrap());
        app.advance(Duration::from_secs(2));
        let after = json!({ "seq": 3, "lines": [
            "allowed: $ sh -c 'cargo build' (allowed once on the web)", "$ sh -c 'cargo build'",
            "term-2: exit code 101",
        ], "status": "building" });
        assert_eq!(device.progress(id, lease, &after).await.status(), StatusCode::OK);

        // The API says where each line goes, so a page appending lines agrees with a reload.
        let api = ann.job(id).await;
        let seq = |text: &str| api.events.iter().find(|e| e.text == text).map(|e| e.seq).unwrap();
        let entry = |text: &str| api.events.iter().find(|e| e.text == text).and_then(|e| e.entry).unwrap();
        assert_eq!(entry("term-1: exit code 0"), EventEntry { kind: TimelineKind::Command, group: Some(seq("$ sh -c 'cargo test'")) });
        assert_eq!(entry("  [~] run the tests"), EventEntry { kind: TimelineKind::Plan, group: Some(seq("plan:")) });
        assert_eq!(entry("tool: Read src/parser.rs done").group, Some(seq("tool: Read src/parser.rs (read) pending")));
        assert_eq!(entry("Tests <b>pass</b>.").kind, TimelineKind::Message);
        assert_eq!(entry("stderr: <script>alert(1)</script>").kind, TimelineKind::Stderr);
        assert_eq!(entry("Waiting for an answer (command question).").kind, TimelineKind::Asked);

        let (_, page) = html(&ann, &format!("/jobs/{id}")).await;
        let at = |needle: String| page.find(&needle).unwrap_or_else(|| panic!("{needle}: {page}"));
        let event = |text: &str| at(format!(r#"id="event-{}""#, seq(text)));
        let order = [
            event("Claimed by the device (attempt 1)."),
            event("I'll run the tests."),
            event("plan:"),
            event("$ sh -c 'cargo test'"),
            event("Tests <b>pass</b>."),
            event("Waiting for an answer (command question)."),
            at(format!(r#"id="decision-{asked}""#)),
            event("allowed: $ sh -c 'cargo build' (allowed once on the web)"),
            event("$ sh -c 'cargo build'"),
            event("building"),
        ];
        assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{order:?}: {page}");
        assert!(page.contains(r#"<li class="step step-done"><span class="step-state">done</span> read the parser</li>"#), "{page}");
        assert!(page.contains(r#"<span class="tool-title">Read src/parser.rs</span> <span class="muted">(read)</span> <span class="tool-status tool-done" data-field="tool-status">done</span>"#), "one row, its last status: {page}");
        assert_eq!(page.matches("Read src/parser.rs</span>").count(), 1, "{page}");
        // Six lines of output fold under their command; its exit is on the summary.
        let tests = &page[event("$ sh -c 'cargo test'")..event("Tests <b>pass</b>.")];
        assert!(tests.contains(r#"<details class="command"><summary><code class="command-line">$ sh -c 'cargo test'</code><span class="exit" data-field="exit">exit code 0</span></summary>"#), "{tests}");
        assert!(tests.contains("test 1 ok\ntest 2 ok") && tests.contains("test 6 ok\n"), "{tests}");
        assert!(page.contains(r#"<span class="exit exit-failed" data-field="exit">exit code 101</span>"#), "{page}");
        // stderr is marked, and what the computer sent is text.
        assert!(page.contains(r#"<span class="label label-stderr">stderr</span><pre class="lines">&lt;script&gt;alert(1)&lt;/script&gt;"#), "{page}");
        assert!(!page.contains("<script>alert") && !page.contains("<b>pass</b>") && page.contains("Tests &lt;b&gt;pass&lt;/b&gt;."), "{page}");
        // Each entry has its time; the plain text of every line is kept.
        assert_eq!(page.matches(" data-clock>").count(), page.matches(r#"<li class="entry"#).count(), "{page}");
        assert!(page.matches(r#"<li class="entry"#).count() >= 10, "{page}");
        // The log (assets/log.js) comes with the run's lines, the end first, and the raw
        // text to download.
        assert!(page.contains(&format!(r#"data-log="/api/jobs/{id}" data-state="running" data-total=""#)), "{page}");
        assert!(page.contains("&quot;status&quot;,&quot;building&quot;]]"), "{page}");
        assert!(page.contains(&format!(r#"<a class="log-download" href="/api/jobs/{id}/log" download>"#)), "{page}");
        // Answered: nothing waits at the top.
        assert!(page.contains(r#"<section class="decisions" data-job-decisions="#) && page.contains("hidden><h2>Waiting for your answer</h2>"), "{page}");
    }
}

/// The device asks a command question; its id.
async fn timeline_ask(device: &DeviceClient, job_id: &str, lease: &str) -> String {
    let body = json!({
        "kind": "command", "question": "Run cargo build?",
        "action": { "command": ["sh", "-c", "cargo build"], "folder": "work" },
        "actionHash": "9f86d081884c7d659a2feb8e8bfa6ac5c9f4b8b2c4c53e1f1e0c6e8d2b1a3f40", "expiresInSecs": 600,
    });
    let res = device
        .http
        .post(format!(
            "{}/api/devices/self/jobs/{job_id}/ask",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let answer: Value = res.json().await.unwrap();
    answer["decisionId"].as_str().unwrap().to_owned()
}
