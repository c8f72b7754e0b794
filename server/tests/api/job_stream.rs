//! `GET /api/jobs/{id}/events`: a job's lines and state as server-sent events, read with a
//! real HTTP client. Lines a paired device sends arrive in order, without a gap or a repeat,
//! as `GET /api/jobs/{id}` lists them (gaps the feed was not told of are read from the
//! database); the catch-up resumes after `?after=` or `Last-Event-ID`; the final `job` event
//! ends the stream; another account's job is a 404 before any stream; a space member gets
//! the space view only and is cut off when removed; a sign-out ends the stream; two
//! replicas on PostgreSQL and Redis act as one; hostile `after` values are 400s.

use std::time::{Duration, Instant};

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{
    assert_error, exec_sql, job_body, spawn_app, two_replicas, DeviceClient, SseStream, TestApp,
    WebClient,
};
use crate::spaces::{join, made_space, PRIVATE};

const SOON: Duration = Duration::from_secs(5);
/// A live batch must reach its watcher well within this (the page polled once a second).
const LIVE_WITHIN: Duration = Duration::from_secs(1);

/// One event of the stream.
#[derive(Debug)]
enum Event {
    /// A `lines` event: its `id:` and its lines.
    Lines(i64, Vec<Value>),
    /// A `job` event's data.
    Job(Value),
}

/// An open `GET /api/jobs/{id}/events` stream.
struct JobStream(SseStream);

impl JobStream {
    async fn open(web: &WebClient, job_id: &str, query: &str) -> JobStream {
        JobStream::opened(web.get(&format!("/api/jobs/{job_id}/events{query}")).await)
    }

    fn opened(res: Response) -> JobStream {
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["cache-control"], "no-store");
        JobStream(SseStream::new(res))
    }

    /// The next event; `Err(())` when the stream ended; `Ok(None)` when none came within
    /// `within`.
    async fn next(&mut self, within: Duration) -> Result<Option<Event>, ()> {
        let Some(event) = self.0.next(within).await? else {
            return Ok(None);
        };
        Ok(Some(match event.name.as_str() {
            "lines" => Event::Lines(
                event.id.expect("a lines event has an id").parse().unwrap(),
                event.data["events"].as_array().unwrap().clone(),
            ),
            "job" => Event::Job(event.data),
            other => panic!("an unknown event {other}"),
        }))
    }

    async fn expect(&mut self) -> Event {
        match self.next(SOON).await {
            Ok(Some(event)) => event,
            Ok(None) => panic!("no event within {SOON:?}"),
            Err(()) => panic!("the stream ended"),
        }
    }

    async fn expect_job(&mut self) -> Value {
        match self.expect().await {
            Event::Job(state) => state,
            other => panic!("a job event expected, got {other:?}"),
        }
    }

    /// Lines until the one whose text is `last`, checked to follow `seen` without a gap or
    /// a repeat (a `lines` event's id is its last line's seq); added to `seen`.
    async fn lines_until(&mut self, seen: &mut Vec<Value>, last: &str) {
        while seen.last().and_then(|line| line["text"].as_str()) != Some(last) {
            let Event::Lines(id, lines) = self.expect().await else {
                continue;
            };
            assert!(!lines.is_empty());
            for line in lines {
                let expected = seen.last().map_or(1, |before| seq(before) + 1);
                assert_eq!(seq(&line), expected, "a gap or a repeat: {line}");
                seen.push(line);
            }
            assert_eq!(id, seq(seen.last().unwrap()));
        }
    }

    /// Whether the stream ends within `within` (sending nothing more than keep-alives).
    async fn ends_within(&mut self, within: Duration) -> bool {
        match self.next(within).await {
            Err(()) => true,
            Ok(None) => false,
            Ok(Some(event)) => panic!("no more events expected, got {event:?}"),
        }
    }
}

fn seq(line: &Value) -> i64 {
    line["seq"].as_i64().unwrap()
}

fn texts(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|line| line["text"].as_str().unwrap())
        .collect()
}

/// A job of Ann's, claimed by her computer: the job id and its lease.
async fn running_job(app: &TestApp, ann: &WebClient) -> (DeviceClient, String, String) {
    let device = app.device(ann, "install-ann").await;
    let job = ann.create_job(&device.device_id).await;
    let claimed = device.claim_job().await;
    (
        device,
        job.id.to_string(),
        claimed.lease_token.expose().to_owned(),
    )
}

async fn progress(device: &DeviceClient, job_id: &str, lease: &str, body: Value) {
    let res = device.progress(job_id, lease, &body).await;
    assert_eq!(res.status(), StatusCode::OK);
}

/// The lines `GET /api/jobs/{id}` lists for `web`.
async fn listed(web: &WebClient, job_id: &str) -> Vec<Value> {
    let res = web.get(&format!("/api/jobs/{job_id}")).await;
    assert_eq!(res.status(), StatusCode::OK);
    let job: Value = res.json().await.unwrap();
    job["events"].as_array().unwrap().clone()
}

both_backends! {
async fn lines_arrive_in_order_as_the_job_lists_them_and_its_end_ends_the_stream(backend) {
    let app = spawn_app(backend).await;
    let ann = app.user("ann@example.com").await;
    let device = app.device(&ann, "install-ann").await;
    let job = ann.create_job(&device.device_id).await;
    let job_id = job.id.to_string();

    // Queued: the stream opens with the job's state and why it waits.
    let mut stream = JobStream::open(&ann, &job_id, "").await;
    let opened = stream.expect_job().await;
    assert_eq!(opened["state"], "queued", "{opened}");
    assert_eq!(opened["attempt"], 0);
    assert_eq!(opened["cancelRequested"], false);
    assert!(opened["queuedBecause"].as_str().is_some(), "{opened}");

    // Claimed: the claim's line, then the new state.
    let claimed = device.claim_job().await;
    let lease = claimed.lease_token.expose().to_owned();
    let mut seen = Vec::new();
    stream.lines_until(&mut seen, &seen_text(&listed(&ann, &job_id).await, 0)).await;
    let running = stream.expect_job().await;
    assert_eq!((&running["state"], &running["attempt"]), (&json!("running"), &json!(1)));

    // Each batch arrives as the device sends it, in order, with its status line last.
    let mut slowest = Duration::ZERO;
    for batch in 1..=5 {
        let lines: Vec<String> = (1..=4).map(|n| format!("batch {batch} line {n}")).collect();
        let sent = Instant::now();
        progress(&device, &job_id, &lease, json!({
            "seq": batch, "lines": lines, "status": format!("step {batch}"),
            "lineAgesMs": [40, 30, 20, 10],
        })).await;
        stream.lines_until(&mut seen, &format!("step {batch}")).await;
        slowest = slowest.max(sent.elapsed());
    }
    println!("slowest batch from progress call to the watcher: {slowest:?}");
    assert!(slowest < LIVE_WITHIN, "{slowest:?}");

    // A retried batch adds nothing; the next one follows on.
    progress(&device, &job_id, &lease, json!({ "seq": 5, "lines": ["again"] })).await;
    // A line the feed was not told of: the next batch starts past it, so the gap is read.
    exec_sql(&app.store, &format!(
        "INSERT INTO job_events (job_id, account_id, at, kind, seq, text) \
         SELECT id, account_id, created_at, 'system', event_seq + 1, 'Written behind the feed' \
         FROM jobs WHERE id = '{job_id}'")).await;
    exec_sql(&app.store, &format!(
        "UPDATE jobs SET event_seq = event_seq + 1 WHERE id = '{job_id}'")).await;
    progress(&device, &job_id, &lease, json!({ "seq": 6, "lines": ["after the gap"] })).await;
    stream.lines_until(&mut seen, "after the gap").await;
    let tail = texts(&seen[seen.len() - 2..]).join("|");
    assert_eq!(tail, "Written behind the feed|after the gap");
    assert!(!texts(&seen).contains(&"again"));

    // A cancel request: its line, then the state that says so.
    let res = ann.post_empty(&format!("/api/jobs/{job_id}/cancel")).await;
    assert_eq!(res.status(), StatusCode::OK);
    stream.lines_until(&mut seen, "Cancel requested.").await;
    let cancelling = stream.expect_job().await;
    assert_eq!((&cancelling["state"], &cancelling["cancelRequested"]), (&json!("running"), &json!(true)));

    // The end: its lines, then the final state, then the stream ends.
    let end = json!({ "outcome": "cancelled", "summary": "Stopped as asked.", "exitCode": 130 });
    assert_eq!(device.complete(&job_id, &lease, &end).await.status(), StatusCode::OK);
    let listed_lines = listed(&ann, &job_id).await;
    let last = seen_text(&listed_lines, listed_lines.len() - 1);
    stream.lines_until(&mut seen, &last).await;
    let ended = stream.expect_job().await;
    assert_eq!(ended["state"], "cancelled", "{ended}");
    assert_eq!(ended["summary"], "Stopped as asked.");
    assert!(stream.ends_within(SOON).await, "the stream stayed open after the end");

    // Every line as the job lists it: seq, time, kind, text and entry.
    assert_eq!(seen, listed_lines);
}

async fn the_catch_up_resumes_after_the_query_or_last_event_id_a_page_at_a_time(backend) {
    let app = spawn_app(backend).await;
    let ann = app.user("ann@example.com").await;
    let (device, job_id, lease) = running_job(&app, &ann).await;
    for batch in 1..=3 {
        let lines: Vec<String> = (1..=200).map(|n| format!("{batch}.{n}")).collect();
        progress(&device, &job_id, &lease, json!({ "seq": batch, "lines": lines })).await;
    }
    let all = listed(&ann, &job_id).await;
    assert_eq!(all.len(), 601);

    // From the start: every line, in pages, then the state.
    let mut stream = JobStream::open(&ann, &job_id, "").await;
    let mut seen = Vec::new();
    let mut events = 0;
    while seen.len() < all.len() {
        let Event::Lines(id, lines) = stream.expect().await else {
            panic!("the state came before the catch-up ended");
        };
        events += 1;
        seen.extend(lines);
        assert_eq!(id, seq(seen.last().unwrap()));
    }
    assert!(events >= 2, "601 lines came in {events} event(s)");
    assert_eq!(seen, all);
    assert_eq!(stream.expect_job().await["state"], "running");

    // After a seq: the lines past it only.
    let mut stream = JobStream::open(&ann, &job_id, "?after=590").await;
    let Event::Lines(id, lines) = stream.expect().await else {
        panic!("lines expected");
    };
    assert_eq!((seq(&lines[0]), id, lines.len()), (591, 601, 11));
    assert_eq!(lines, all[590..]);
    assert_eq!(stream.expect_job().await["state"], "running");

    // Last-Event-ID wins over the query (as EventSource resumes).
    let res = ann
        .http
        .get(format!("{}/api/jobs/{job_id}/events?after=3", ann.base))
        .header("last-event-id", "598")
        .send()
        .await
        .unwrap();
    let mut stream = JobStream::opened(res);
    let Event::Lines(id, lines) = stream.expect().await else {
        panic!("lines expected");
    };
    assert_eq!((seq(&lines[0]), id), (599, 601));
    // Then live lines follow on.
    progress(&device, &job_id, &lease, json!({ "seq": 4, "lines": ["live"] })).await;
    let mut seen = lines;
    stream.lines_until(&mut seen, "live").await;

    // Caught up already: the state only, then what comes.
    let mut stream = JobStream::open(&ann, &job_id, "?after=602").await;
    assert_eq!(stream.expect_job().await["state"], "running");
    assert!(stream.next(Duration::from_millis(300)).await.unwrap().is_none());
}

async fn another_account_gets_a_404_and_hostile_values_a_400(backend) {
    let app = spawn_app(backend).await;
    let ann = app.user("ann@example.com").await;
    let bob = app.user("bob@example.com").await;
    let (device, job_id, lease) = running_job(&app, &ann).await;
    progress(&device, &job_id, &lease, json!({ "seq": 1, "lines": [PRIVATE] })).await;

    // Bob's request is a 404 with the error body, never a stream.
    let res = bob.get(&format!("/api/jobs/{job_id}/events")).await;
    assert_eq!(res.headers()["content-type"], "application/json");
    let message = assert_error(res, 404, "not_found").await;
    assert!(!message.contains(PRIVATE));
    let unknown = tether_protocol::JobId::generate();
    assert_error(ann.get(&format!("/api/jobs/{unknown}/events")).await, 404, "not_found").await;
    let res = reqwest::get(format!("{}/api/jobs/{job_id}/events", app.base)).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    for after in ["-1", "abc", "1e3", "99999999999999999999", "%00", "4%202", "-9223372036854775808"] {
        let res = ann.get(&format!("/api/jobs/{job_id}/events?after={after}")).await;
        let message = assert_error(res, 400, "invalid_request").await;
        assert!(message.starts_with("after:"), "{after}: {message}");
    }
    for last in ["x", "-5", "18446744073709551616"] {
        let res = ann
            .http
            .get(format!("{}/api/jobs/{job_id}/events", ann.base))
            .header("last-event-id", last)
            .send()
            .await
            .unwrap();
        let message = assert_error(res, 400, "invalid_request").await;
        assert!(message.starts_with("Last-Event-ID:"), "{last}: {message}");
    }

    // The largest seq is fine: nothing is past it, the state still comes and so do ends.
    let mut stream = JobStream::open(&ann, &job_id, "?after=9223372036854775807").await;
    assert_eq!(stream.expect_job().await["state"], "running");
    progress(&device, &job_id, &lease, json!({ "seq": 2, "lines": ["past"] })).await;
    let end = json!({ "outcome": "succeeded", "summary": "Done.", "exitCode": 0 });
    assert_eq!(device.complete(&job_id, &lease, &end).await.status(), StatusCode::OK);
    assert_eq!(stream.expect_job().await["state"], "succeeded");
    assert!(stream.ends_within(SOON).await);

    // An API token follows its account's jobs alike; an ended job's stream ends at once.
    let res = ann.post("/api/tokens", &json!({ "name": "ci" })).await;
    let token: Value = res.json().await.unwrap();
    let res = reqwest::Client::new()
        .get(format!("{}/api/jobs/{job_id}/events?after=2", app.base))
        .bearer_auth(token["token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    let mut stream = JobStream::opened(res);
    let Event::Lines(_, lines) = stream.expect().await else {
        panic!("lines expected");
    };
    assert_eq!(texts(&lines)[0], "past");
    assert_eq!(stream.expect_job().await["state"], "succeeded");
    assert!(stream.ends_within(SOON).await);
}

async fn a_member_gets_the_space_view_and_is_cut_off_when_removed(backend) {
    let app = spawn_app(backend).await;
    let ann = app.user("ann@example.com").await;
    let bob = app.user("bob@example.com").await;
    let carol = app.user("carol@example.com").await;
    let space_id = made_space(&ann, "Platform").await;
    join(&ann, &bob, &space_id, "member").await;
    join(&ann, &carol, &space_id, "viewer").await;
    let device = app.device(&ann, "install-ann").await;
    let mut body = job_body(&device.device_id);
    body["spaceId"] = json!(space_id);
    let res = ann.post("/api/jobs", &body).await;
    let job: Value = res.json().await.unwrap();
    let job_id = job["id"].as_str().unwrap().to_owned();
    let claimed = device.claim_job().await;
    let lease = claimed.lease_token.expose().to_owned();

    let mut bobs = JobStream::open(&bob, &job_id, "").await;
    let mut carols = JobStream::open(&carol, &job_id, "").await;
    progress(&device, &job_id, &lease, json!({ "seq": 1, "lines": [
        "agent: scripted 1.0",
        "I will run the tests.",
        "$ cargo test",
        format!("term-1: {PRIVATE} output of the tests"),
        format!("stderr: {PRIVATE} on stderr"),
        "term-1: exit code 0",
        format!("refused: {PRIVATE}"),
    ], "status": "testing" })).await;
    for stream in [&mut bobs, &mut carols] {
        let mut seen = Vec::new();
        while seen.last().and_then(|line: &Value| line["text"].as_str()) != Some("testing") {
            if let Event::Lines(_, lines) = stream.expect().await {
                seen.extend(lines);
            }
        }
        let all = serde_json::to_string(&seen).unwrap();
        assert!(!all.contains(PRIVATE), "{all}");
        assert_eq!(
            texts(&seen),
            ["Claimed by the device (attempt 1).", "I will run the tests.", "$ cargo test",
             "term-1: exit code 0", "testing"],
        );
        // As the member's view of the job lists them, entries and all.
        assert_eq!(seen, listed(&bob, &job_id).await);
    }

    // Bob is removed: his stream ends; Carol's goes on.
    let bob_id = bob.me().await.account.id.to_string();
    let res = ann.delete(&format!("/api/spaces/{space_id}/members/{bob_id}")).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let ended = loop {
        match bobs.next(SOON).await {
            Err(()) => break true,
            Ok(Some(Event::Job(_))) => continue,
            Ok(other) => panic!("{other:?}"),
        }
    };
    assert!(ended);
    assert_error(bob.get(&format!("/api/jobs/{job_id}/events")).await, 404, "not_found").await;
    progress(&device, &job_id, &lease, json!({ "seq": 2, "lines": [format!("stderr: {PRIVATE}"), "tool: Read a (read) done"] })).await;
    // (The state may come first: the catch-up tells it after the lines it read, which may
    // have been all of the first batch.)
    let lines = loop {
        match carols.expect().await {
            Event::Lines(_, lines) => break lines,
            Event::Job(state) => assert_eq!(state["state"], "running"),
        }
    };
    assert_eq!(texts(&lines), ["tool: Read a (read) done"]);
}

async fn a_session_ended_elsewhere_ends_its_stream(backend) {
    let app = spawn_app(backend).await;
    let ann = app.user("ann@example.com").await;
    let (_device, job_id, _lease) = running_job(&app, &ann).await;
    let mut stream = JobStream::open(&ann, &job_id, "").await;
    assert!(matches!(stream.expect().await, Event::Lines(..)));
    assert_eq!(stream.expect_job().await["state"], "running");
    let mut phone = app.web();
    let res = phone.login("ann@example.com", "correct horse battery").await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = phone.post_empty("/api/auth/sessions/end-others").await;
    assert!(res.status().is_success(), "{}", res.status());
    assert!(stream.ends_within(SOON).await, "the stream outlived its session");
}
}

/// The text of line `index` of `lines`.
fn seen_text(lines: &[Value], index: usize) -> String {
    lines[index]["text"].as_str().unwrap().to_owned()
}

/// A page on replica B follows a job whose computer reports to replica A.
#[tokio::test]
async fn two_replicas_on_postgres_and_redis_stream_as_one() {
    let Some((a, b)) = two_replicas(|_| {}).await else {
        return;
    };
    let mut ann = a.user("ann@example.com").await;
    let (device, job_id, lease) = running_job(&a, &ann).await;
    ann.base = b.base.clone();
    let mut stream = JobStream::open(&ann, &job_id, "").await;
    let mut seen = Vec::new();
    stream
        .lines_until(&mut seen, "Claimed by the device (attempt 1).")
        .await;
    assert_eq!(stream.expect_job().await["state"], "running");

    let mut slowest = Duration::ZERO;
    for batch in 1..=10 {
        let sent = Instant::now();
        let lines: Vec<String> = (1..=3).map(|n| format!("{batch}.{n}")).collect();
        progress(
            &device,
            &job_id,
            &lease,
            json!({ "seq": batch, "lines": lines }),
        )
        .await;
        stream.lines_until(&mut seen, &format!("{batch}.3")).await;
        slowest = slowest.max(sent.elapsed());
    }
    println!("slowest batch across replicas: {slowest:?}");
    assert!(slowest < LIVE_WITHIN, "{slowest:?}");

    let end = json!({ "outcome": "succeeded", "summary": "Done.", "exitCode": 0 });
    assert_eq!(
        device.complete(&job_id, &lease, &end).await.status(),
        StatusCode::OK
    );
    let listed_lines = listed(&ann, &job_id).await;
    stream
        .lines_until(&mut seen, &seen_text(&listed_lines, listed_lines.len() - 1))
        .await;
    assert_eq!(stream.expect_job().await["state"], "succeeded");
    assert!(stream.ends_within(SOON).await);
    assert_eq!(seen, listed_lines);
}
