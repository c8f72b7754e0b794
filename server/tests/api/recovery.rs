//! Outage recovery: reattach (a run that kept going), resume (a run lost to a restart), and
//! the lease grace after the server's own outage, across a real restart.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::jobs::{ClaimedJob, JobState, LeaseGrant};
use tether_server::store::ledger;
use tether_server::sweeper;

use crate::both_backends;
use crate::helpers::{assert_error, exec_sql, spawn_app, spawn_app_with, wait_for_row};

async fn grant(res: reqwest::Response) -> LeaseGrant {
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

async fn resumed(res: reqwest::Response) -> ClaimedJob {
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = res.json().await.unwrap();
    serde_json::from_value(body["job"].clone()).unwrap()
}

both_backends! {
    async fn reattach_keeps_the_attempt_and_fences_the_old_lease(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other = app.device(&ann, "install-2").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();
        let old = claimed.lease_token.expose();

        assert_error(device.reattach(job_id, 1, "wrong").await, 409, "stale_lease").await;
        assert_error(device.reattach(job_id, 2, old).await, 409, "stale_lease").await;
        assert_error(other.reattach(job_id, 1, old).await, 404, "not_found").await;
        let granted = grant(device.reattach(job_id, 1, old).await).await;
        assert_eq!((granted.job_id.clone(), granted.attempt), (job.id.clone(), 1));
        assert_ne!(granted.lease_token.expose(), old);
        assert_error(device.progress(job_id, old, &json!({ "seq": 1 })).await, 409, "stale_lease").await;
        // Only the last lease issued reattaches.
        assert_error(device.reattach(job_id, 1, old).await, 409, "stale_lease").await;
        let lease = granted.lease_token.expose();
        assert_eq!(device.progress(job_id, lease, &json!({ "seq": 1, "lines": ["still going"] })).await.status(), StatusCode::OK);
        let done = json!({ "outcome": "succeeded", "summary": "done" });
        assert_eq!(device.complete(job_id, lease, &done).await.status(), StatusCode::OK);
        // An ended run is not taken back.
        assert_error(device.reattach(job_id, 1, lease).await, 409, "stale_lease").await;
        let ended = ann.job(job_id).await;
        assert_eq!((ended.state, ended.attempt), (JobState::Succeeded, 1));
        let kinds: Vec<String> = ledger::list(&app.store, &ann.me().await.account.id).await.unwrap()
            .into_iter().map(|e| e.kind).collect();
        assert!(kinds.contains(&"job.reattached".to_owned()));
    }

    async fn reattach_revives_a_run_interrupted_by_its_lease_only(backend) {
        let app = spawn_app_with(backend, |config| config.lease_secs = 1).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;

        // Interrupted by the lease: it runs again, same attempt, and finishes once.
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();
        app.advance(Duration::from_millis(1200));
        sweeper::try_expire_leases(&app.store, app.now()).await.unwrap();
        assert_eq!(ann.job(job_id).await.state, JobState::Interrupted);
        let granted = grant(device.reattach(job_id, 1, claimed.lease_token.expose()).await).await;
        let revived = ann.job(job_id).await;
        assert_eq!((revived.state, revived.attempt), (JobState::Running, 1));
        assert!(revived.outcome.is_none() && revived.ended_at.is_none());
        let done = json!({ "outcome": "succeeded", "summary": "finished while cut off" });
        assert_eq!(device.complete(job_id, granted.lease_token.expose(), &done).await.status(), StatusCode::OK);
        assert_eq!(ann.job(job_id).await.state, JobState::Succeeded);

        // Cancelled by the person, then interrupted: not taken back, not carried on.
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();
        assert_eq!(ann.post_empty(&format!("/api/jobs/{job_id}/cancel")).await.status(), StatusCode::OK);
        app.advance(Duration::from_millis(1200));
        sweeper::try_expire_leases(&app.store, app.now()).await.unwrap();
        assert_error(device.reattach(job_id, 1, claimed.lease_token.expose()).await, 409, "stale_lease").await;
        let message = assert_error(device.resume(job_id, 1).await, 409, "resume_refused").await;
        assert!(message.contains("cancelled"), "{message}");

        // Interrupted by a revocation: the same computer paired again cannot take it back.
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let job_id = job.id.as_str();
        assert_eq!(ann.delete(&format!("/api/devices/{}", device.device_id)).await.status(), StatusCode::NO_CONTENT);
        let again = app.device(&ann, "install-1").await;
        assert_eq!(again.device_id, device.device_id);
        assert_error(again.reattach(job_id, 1, claimed.lease_token.expose()).await, 409, "stale_lease").await;
        let message = assert_error(again.resume(job_id, 1).await, 409, "resume_refused").await;
        assert!(message.contains("revoked"), "{message}");
    }

    async fn resume_makes_a_new_attempt_at_most_twice(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let other = app.device(&ann, "install-2").await;
        let job = ann.create_job(&device.device_id).await;
        let first = device.claim_job().await;
        let job_id = job.id.as_str();

        assert_error(other.resume(job_id, 1).await, 404, "not_found").await;
        let message = assert_error(device.resume(job_id, 2).await, 409, "resume_refused").await;
        assert!(message.contains("latest"), "{message}");
        let second = resumed(device.resume(job_id, 1).await).await;
        assert_eq!((second.attempt, second.resumed), (2, Some(1)));
        assert_eq!(second.spec, first.spec);
        assert_error(device.progress(job_id, first.lease_token.expose(), &json!({ "seq": 1 })).await, 409, "stale_lease").await;
        // The lost attempt's lease no longer reattaches: a later attempt superseded it.
        assert_error(device.reattach(job_id, 1, first.lease_token.expose()).await, 409, "stale_lease").await;
        assert_error(device.resume(job_id, 1).await, 409, "resume_refused").await;
        let third = resumed(device.resume(job_id, 2).await).await;
        assert_eq!((third.attempt, third.resumed), (3, Some(2)));
        let message = assert_error(device.resume(job_id, 3).await, 409, "resume_refused").await;
        assert!(message.contains("2 times"), "{message}");
        assert_eq!(device.progress(job_id, third.lease_token.expose(), &json!({ "seq": 1 })).await.status(), StatusCode::OK);
        let done = json!({ "outcome": "failed", "summary": "gave up" });
        assert_eq!(device.complete(job_id, third.lease_token.expose(), &done).await.status(), StatusCode::OK);
        let message = assert_error(device.resume(job_id, 3).await, 409, "resume_refused").await;
        assert!(message.contains("failed"), "{message}");
        let ended = ann.job(job_id).await;
        assert_eq!((ended.state, ended.attempt), (JobState::Failed, 3));
        let kinds: Vec<String> = ledger::list(&app.store, &ann.me().await.account.id).await.unwrap()
            .into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds.iter().filter(|kind| *kind == "job.resumed").count(), 2);
    }

    async fn resume_after_interruption_only_within_a_day(backend) {
        let app = spawn_app_with(backend, |config| config.lease_secs = 1).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let recent = ann.create_job(&device.device_id).await;
        device.claim_job().await;
        let old = ann.create_job(&device.device_id).await;
        device.claim_job().await;
        app.advance(Duration::from_millis(1200));
        sweeper::try_expire_leases(&app.store, app.now()).await.unwrap();
        let day_ago = app.now().timestamp_millis() - 24 * 3600 * 1000 - 60_000;
        exec_sql(&app.store, &format!("UPDATE jobs SET ended_at = {day_ago} WHERE id = '{}'", old.id)).await;

        let message = assert_error(device.resume(old.id.as_str(), 1).await, 409, "resume_refused").await;
        assert!(message.contains("24 hours"), "{message}");
        let carried = resumed(device.resume(recent.id.as_str(), 1).await).await;
        assert_eq!((carried.attempt, carried.resumed), (2, Some(1)));
        let job = ann.job(recent.id.as_str()).await;
        assert_eq!(job.state, JobState::Running);
        assert!(job.events.iter().any(|e| e.text.contains("Resumed by the device")));
    }

    async fn a_restarted_server_gives_running_leases_one_more_period(backend) {
        let mut app = spawn_app_with(backend, |config| {
            config.lease_secs = 2;
            config.sweep_secs = 1;
        }).await;
        let ann = app.user("ann@example.com").await;
        let mut device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        // Let the sweeper note the server alive, then stop the server for longer than a lease.
        let noted = "SELECT at FROM server_heartbeat WHERE id = 1";
        wait_for_row(&app.store, noted, |at| at.is_some()).await;
        app.stop().await;
        app.advance(Duration::from_millis(2600));

        let restarted = app.another().await;
        device.base = restarted.base.clone();
        let mut ann = ann;
        ann.base = restarted.base.clone();
        // The sweeper ran at start-up (grace first): the lease runs a period past the outage,
        // and the run was not interrupted.
        let now = restarted.now().timestamp_millis();
        let lease_end = format!("SELECT lease_expires_at FROM jobs WHERE id = '{}'", job.id);
        wait_for_row(&restarted.store, &lease_end, |until| until.is_some_and(|until| until > now)).await;
        assert_eq!(ann.job(job.id.as_str()).await.state, JobState::Running);
        let lease = claimed.lease_token.expose();
        let res = device.progress(job.id.as_str(), lease, &json!({ "seq": 1, "lines": ["survived"] })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let done = json!({ "outcome": "succeeded", "summary": "once" });
        assert_eq!(device.complete(job.id.as_str(), lease, &done).await.status(), StatusCode::OK);
        let ended = ann.job(job.id.as_str()).await;
        assert_eq!((ended.state, ended.attempt), (JobState::Succeeded, 1));
    }
}
