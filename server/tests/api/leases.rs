//! Heartbeat, claim, progress, complete and the lease fence; the sweeper.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::jobs::{JobState, Outcome};
use tether_server::store::ledger;
use tether_server::sweeper;
use tokio_tungstenite::tungstenite::Message;

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app, spawn_app_with, DeviceClient, WebClient};

/// The pace a heartbeat answer asks for.
async fn pace(device: &DeviceClient, running: &[(&str, &str)]) -> u64 {
    let beat: Value = device.heartbeat(running).await.json().await.unwrap();
    beat["intervals"]["heartbeatSecs"].as_u64().unwrap()
}

/// Whether the device is listed online within a few seconds (contact times are written in
/// batches).
async fn online_soon(owner: &WebClient) -> bool {
    for _ in 0..50 {
        if owner.devices().await[0].online {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

both_backends! {
    async fn an_idle_device_streaming_here_heartbeats_slowly_and_its_pings_keep_it_online(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        assert_eq!(pace(&device, &[]).await, 30, "no stream: the busy pace");
        let mut events = device.events().await;
        assert_eq!(pace(&device, &[]).await, 300, "idle, its stream open here");

        // Past the online window on pings alone: each noted by the stream.
        for _ in 0..3 {
            app.advance(Duration::from_secs(80));
            events.send(Message::Ping(b"agent".to_vec().into())).await.unwrap();
            assert!(matches!(events.next().await, Some(Ok(Message::Pong(_)))));
            assert!(online_soon(&ann).await, "online on its stream's pings");
        }

        // Running a job, it is asked for the busy pace (the agent reports a new run at once).
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let running = [(job.id.as_str(), claimed.lease_token.expose())];
        assert_eq!(pace(&device, &running).await, 30);

        // Its stream gone, the idle pace is gone too.
        drop(events);
        let done = json!({ "outcome": "succeeded", "summary": "ok" });
        let res = device.complete(job.id.as_str(), claimed.lease_token.expose(), &done).await;
        assert_eq!(res.status(), StatusCode::OK);
        let mut pace_now = 0;
        for _ in 0..50 {
            pace_now = pace(&device, &[]).await;
            if pace_now == 30 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(pace_now, 30, "no stream: the busy pace again");
    }

    async fn an_idle_heartbeat_sees_each_job_queued_after_it(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let queued = |beat: Value| beat["queued"].as_u64();
        // The first beat writes the report; the next ones are "still here", the last of them
        // answered from the server's memory of an empty queue.
        for _ in 0..3 {
            assert_eq!(queued(device.heartbeat(&[]).await.json().await.unwrap()), Some(0));
        }
        let job = ann.create_job(&device.device_id).await;
        assert_eq!(queued(device.heartbeat(&[]).await.json().await.unwrap()), Some(1));
        let claimed = device.claim_job().await;
        let done = json!({ "outcome": "succeeded", "summary": "ok" });
        let res = device.complete(job.id.as_str(), claimed.lease_token.expose(), &done).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(queued(device.heartbeat(&[]).await.json().await.unwrap()), Some(0));
        assert_eq!(queued(device.heartbeat(&[]).await.json().await.unwrap()), Some(0));
        // A re-run is queued as well.
        let res = ann.post_empty(&format!("/api/jobs/{}/rerun", job.id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert_eq!(queued(device.heartbeat(&[]).await.json().await.unwrap()), Some(1));
    }

    async fn a_claim_after_the_last_queued_job_finds_each_job_queued_after_it(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let done = json!({ "outcome": "succeeded", "summary": "ok" });
        // Claims the next job, checks it is `expected` and ends it (the run limit stays free).
        let claim_and_end = |expected: String| {
            let (device, done) = (&device, &done);
            async move {
                let claimed = device.claim_job().await;
                assert_eq!(claimed.id.as_str(), expected);
                let lease = claimed.lease_token.expose();
                let res = device.complete(&expected, lease, done).await;
                assert_eq!(res.status(), StatusCode::OK);
            }
        };
        let first = ann.create_job(&device.device_id).await;
        claim_and_end(first.id.to_string()).await;
        // That claim took the only queued job: the next finds nothing (answered from the
        // server's memory), until another is queued.
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);
        let second = ann.create_job(&device.device_id).await;
        claim_and_end(second.id.to_string()).await;
        // Two queued at once: the first claim leaves one behind, so the next reads it.
        let third = ann.create_job(&device.device_id).await;
        let fourth = ann.create_job(&device.device_id).await;
        claim_and_end(third.id.to_string()).await;
        claim_and_end(fourth.id.to_string()).await;
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);
        // A re-run is queued as well.
        let res = ann.post_empty(&format!("/api/jobs/{}/rerun", first.id)).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let rerun: Value = res.json().await.unwrap();
        claim_and_end(rerun["id"].as_str().unwrap().to_owned()).await;
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);
    }

    async fn heartbeat_claim_progress_complete(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.spec.engine, "echo");

        let beat: Value = device.heartbeat(&[]).await.json().await.unwrap();
        assert_eq!(beat["queued"], 1);
        assert_eq!(beat["intervals"], json!({ "heartbeatSecs": 30, "leaseSecs": 120 }));
        assert!(beat["serverTime"].is_string());

        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, job.id);
        assert_eq!(claimed.attempt, 1);
        assert_eq!(claimed.spec.prompt, "cargo test");
        assert!(claimed.lease_expires_at > app.now());
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);
        let lease = claimed.lease_token.expose();
        let job_id = job.id.as_str();

        let res = device.progress(job_id, lease, &json!({ "seq": 1, "lines": ["one", "two"], "status": "testing" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let answer: Value = res.json().await.unwrap();
        assert_eq!(answer["cancelRequested"], false);
        // A repeated seq is answered without effect.
        let res = device.progress(job_id, lease, &json!({ "seq": 1, "lines": ["one", "two"] })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let res = device.progress(job_id, lease, &json!({ "seq": 2, "lines": ["three"] })).await;
        assert_eq!(res.status(), StatusCode::OK);

        let beat: Value = device.heartbeat(&[(job_id, lease)]).await.json().await.unwrap();
        assert_eq!(beat["leases"][0]["jobId"], job_id);
        assert_eq!(beat["lost"], json!([]));
        assert_eq!(beat["queued"], 0);
        let running = ann.job(job_id).await;
        assert_eq!(running.state, JobState::Running);
        assert!(running.started_at.is_some());

        let done = json!({ "outcome": "succeeded", "summary": "All green.", "exitCode": 0, "report": { "summary": "3 tests pass." } });
        let res = device.complete(job_id, lease, &done).await;
        assert_eq!(res.status(), StatusCode::OK);
        let first: Value = res.json().await.unwrap();
        assert_eq!(first["job"]["state"], "succeeded");
        assert_eq!(first["job"]["outcome"]["exitCode"], 0);
        // The same call again answers the recorded job, even with another outcome.
        let res = device.complete(job_id, lease, &json!({ "outcome": "failed", "summary": "?" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let again: Value = res.json().await.unwrap();
        assert_eq!(again["job"]["outcome"], first["job"]["outcome"]);
        assert_error(device.progress(job_id, lease, &json!({ "seq": 3 })).await, 409, "stale_lease").await;

        let ended = ann.job(job_id).await;
        assert_eq!(ended.state, JobState::Succeeded);
        assert!(ended.ended_at.is_some());
        assert_eq!(ended.outcome.as_ref().unwrap().summary, "All green.");
        let timeline: Vec<(String, String)> = ended.events.iter().map(|e| (e.kind.clone(), e.text.clone())).collect();
        let kinds: Vec<&str> = timeline.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(kinds, ["system", "output", "output", "status", "output", "system"]);
        assert_eq!(timeline[1].1, "one");
        assert_eq!(timeline[3].1, "testing");
        assert_eq!(timeline[4].1, "three");
        let seqs: Vec<i64> = ended.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
        assert!(ended.decisions.is_empty() && ended.evidence.is_empty());

        let kinds: Vec<String> = ledger::list(&app.store, &ann.me().await.account.id).await.unwrap()
            .into_iter().map(|e| e.kind).collect();
        assert!(kinds.contains(&"job.created".to_owned()) && kinds.contains(&"job.ended".to_owned()));
    }

    async fn the_lease_fences_every_write(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other = app.device(&ann, "install-2").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();

        assert_error(device.progress(job_id, "wrong", &json!({ "seq": 1 })).await, 409, "stale_lease").await;
        assert_error(device.complete(job_id, "wrong", &json!({ "outcome": "failed", "summary": "" })).await, 409, "stale_lease").await;
        // A job of another device is not found, even with the right lease.
        assert_error(other.progress(job_id, claimed.lease_token.expose(), &json!({ "seq": 1 })).await, 404, "not_found").await;
        assert_error(other.complete(job_id, claimed.lease_token.expose(), &json!({ "outcome": "failed", "summary": "" })).await, 404, "not_found").await;
        let res = device.http.post(format!("{}/api/devices/self/jobs/{job_id}/progress", app.base))
            .bearer_auth(&device.token).json(&json!({ "seq": 1 })).send().await.unwrap();
        assert!(assert_error(res, 400, "invalid_request").await.contains("x-tether-lease"));
        let beat: Value = device.heartbeat(&[(job_id, "wrong")]).await.json().await.unwrap();
        assert_eq!(beat["lost"], json!([job_id]));
        assert_eq!(beat["leases"], json!([]));
        assert_eq!(ann.job(job_id).await.state, JobState::Running);
    }

    async fn an_expired_lease_is_stale_then_swept_to_interrupted(backend) {
        let app = spawn_app_with(backend, |config| config.lease_secs = 1).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();
        let lease = claimed.lease_token.expose();
        let res = device.progress(job_id, lease, &json!({ "seq": 1, "lines": ["partial"] })).await;
        assert_eq!(res.status(), StatusCode::OK);
        app.advance(Duration::from_millis(1300));

        assert_error(device.progress(job_id, lease, &json!({ "seq": 2 })).await, 409, "stale_lease").await;
        let beat: Value = device.heartbeat(&[(job_id, lease)]).await.json().await.unwrap();
        assert_eq!(beat["lost"], json!([job_id]));

        let swept = sweeper::try_expire_leases(&app.store, app.now()).await.unwrap();
        assert_eq!(swept.interrupted, vec![job.id.clone()]);
        let again = sweeper::try_expire_leases(&app.store, app.now()).await.unwrap();
        assert!(again.interrupted.is_empty());

        let ended = ann.job(job_id).await;
        assert_eq!(ended.state, JobState::Interrupted);
        assert_eq!(ended.outcome.as_ref().unwrap().outcome, Outcome::Interrupted);
        assert!(ended.outcome.as_ref().unwrap().summary.contains("lease expired"));
        assert!(ended.events.iter().any(|e| e.kind == "output" && e.text == "partial"));
        assert_eq!(ended.events.last().unwrap().kind, "system");
        assert_error(device.complete(job_id, lease, &json!({ "outcome": "succeeded", "summary": "late" })).await, 409, "stale_lease").await;
        assert_error(device.progress(job_id, lease, &json!({ "seq": 3 })).await, 409, "stale_lease").await;
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);
    }

    async fn the_sweeper_leaves_live_leases_alone_and_grants_outage_grace(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let swept = sweeper::try_expire_leases(&app.store, app.now()).await.unwrap();
        assert!(swept.interrupted.is_empty());

        // The server was down for an hour: leases get one more period before sweeping.
        let later = app.now() + chrono::Duration::minutes(60);
        sweeper::record_server_heartbeat(&app.store, app.now()).await.unwrap();
        assert_eq!(sweeper::grant_outage_grace(&app.store, later, &app.config).await.unwrap(), 1);
        let swept = sweeper::try_expire_leases(&app.store, later).await.unwrap();
        assert!(swept.interrupted.is_empty());
        // Without further word it ends one lease period later.
        let much_later = later + chrono::Duration::seconds(121);
        assert_eq!(sweeper::grant_outage_grace(&app.store, app.now(), &app.config).await.unwrap(), 0);
        let swept = sweeper::try_expire_leases(&app.store, much_later).await.unwrap();
        assert_eq!(swept.interrupted, vec![job.id.clone()]);
        assert_error(device.progress(job.id.as_str(), claimed.lease_token.expose(), &json!({ "seq": 1 })).await, 409, "stale_lease").await;
    }

    async fn progress_and_complete_limits(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();
        let lease = claimed.lease_token.expose();
        let lines: Vec<String> = (0..201).map(|n| n.to_string()).collect();
        let message = assert_error(device.progress(job_id, lease, &json!({ "seq": 1, "lines": lines })).await, 422, "invalid_field").await;
        assert!(message.contains("lines"));
        let long = "é".repeat(3000);
        let res = device.progress(job_id, lease, &json!({ "seq": 1, "lines": [long] })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let stored = ann.job(job_id).await.events.into_iter().find(|e| e.kind == "output").unwrap();
        assert!(stored.text.len() <= 4096 && stored.text.len() >= 4094);
        let message = assert_error(device.complete(job_id, lease, &json!({ "outcome": "interrupted", "summary": "" })).await, 422, "invalid_field").await;
        assert!(message.contains("outcome"));
        assert_error(device.complete(job_id, lease, &json!({ "outcome": "exploded", "summary": "" })).await, 400, "invalid_request").await;
        assert_error(device.progress(job_id, lease, &json!({ "seq": -1 })).await, 400, "invalid_request").await;
        assert_eq!(ann.job(job_id).await.state, JobState::Running);
    }

    async fn claims_at_once_from_many_devices_stay_within_the_account_limit(backend) {
        let app = spawn_app_with(backend, |config| config.max_running_per_account = 2).await;
        let ann = app.user("ann@example.com").await;
        let mut devices = Vec::new();
        for n in 0..6 {
            let device = app.device(&ann, &format!("install-{n}")).await;
            ann.create_job(&device.device_id).await;
            devices.push(device);
        }
        // Every device claims at the same moment: the run-limit count under the account's lock
        // lets exactly two through and the rest roll back whole; then the full account refuses
        // them all.
        for expected in [2, 0] {
            let claims = devices.iter().map(|device| device.claim());
            let statuses: Vec<StatusCode> = futures_util::future::join_all(claims)
                .await
                .iter()
                .map(|res| res.status())
                .collect();
            let granted = statuses.iter().filter(|status| **status == StatusCode::OK).count();
            let refused = statuses.iter().filter(|status| **status == StatusCode::NO_CONTENT).count();
            assert_eq!((granted, refused), (expected, 6 - expected), "{statuses:?}");
        }
        let jobs: Vec<Value> = ann.get("/api/jobs").await.json().await.unwrap();
        let states: Vec<&str> = jobs.iter().map(|job| job["state"].as_str().unwrap()).collect();
        assert_eq!(states.iter().filter(|state| **state == "running").count(), 2, "{states:?}");
        assert_eq!(states.iter().filter(|state| **state == "queued").count(), 4, "{states:?}");
        // A rolled-back claim left nothing behind: the queued jobs have no attempt and no
        // "Claimed" line.
        for job in jobs.iter().filter(|job| job["state"] == "queued") {
            let job = ann.job(job["id"].as_str().unwrap()).await;
            assert_eq!(job.attempt, 0);
            assert!(job.events.iter().all(|event| !event.text.starts_with("Claimed")), "{:?}", job.events);
        }
    }

    async fn claims_respect_the_account_limit_and_order(backend) {
        let app = spawn_app_with(backend, |config| config.max_running_per_account = 1).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let first = ann.create_job(&device.device_id).await;
        let second = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, first.id);
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);
        let res = device.complete(first.id.as_str(), claimed.lease_token.expose(), &json!({ "outcome": "failed", "summary": "no" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(device.claim_job().await.id, second.id);
    }

    async fn cancel_queued_at_once_and_running_through_the_device(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let queued = ann.create_job(&device.device_id).await;
        let res = ann.post_empty(&format!("/api/jobs/{}/cancel", queued.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let answer: Value = res.json().await.unwrap();
        assert_eq!(answer["job"]["state"], "cancelled");
        assert_error(ann.post_empty(&format!("/api/jobs/{}/cancel", queued.id)).await, 409, "invalid_state").await;
        assert_eq!(device.claim().await.status(), StatusCode::NO_CONTENT);

        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();
        let res = ann.post_empty(&format!("/api/jobs/{job_id}/cancel")).await;
        assert_eq!(res.status(), StatusCode::OK);
        let answer: Value = res.json().await.unwrap();
        assert_eq!(answer["job"]["state"], "running");
        assert_eq!(answer["job"]["cancelRequested"], true);
        let progress: Value = device.progress(job_id, claimed.lease_token.expose(), &json!({ "seq": 1 })).await.json().await.unwrap();
        assert_eq!(progress["cancelRequested"], true);
        let beat: Value = device.heartbeat(&[(job_id, claimed.lease_token.expose())]).await.json().await.unwrap();
        assert_eq!(beat["leases"][0]["cancelRequested"], true);
        let res = device.complete(job_id, claimed.lease_token.expose(), &json!({ "outcome": "cancelled", "summary": "Stopped." })).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(ann.job(job_id).await.state, JobState::Cancelled);
    }
}
