//! Device list, rename, revoke, self-removal and the admin routes.

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::jobs::JobState;
use tether_server::store::ledger;

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app, spawn_app_with};

both_backends! {
    async fn list_and_rename(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let listed = ann.devices().await;
        assert_eq!(listed.len(), 1);
        assert!(listed[0].online);
        assert!(listed[0].last_seen_at.is_some());
        assert_eq!(listed[0].capabilities.as_ref().unwrap().folders, vec!["work".to_owned()]);

        let path = format!("/api/devices/{}", device.device_id);
        let res = ann.patch(&path, &json!({ "name": "  Workstation " })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let renamed: Value = res.json().await.unwrap();
        assert_eq!(renamed["name"], "Workstation");
        // Heartbeats keep the saved name.
        device.heartbeat(&[]).await;
        assert_eq!(ann.devices().await[0].name, "Workstation");
        assert_error(ann.patch(&path, &json!({ "name": "" })).await, 422, "invalid_field").await;
        assert_error(ann.patch(&path, &json!({ "title": "x" })).await, 400, "invalid_request").await;
        assert_error(ann.patch("/api/devices/unknown-device", &json!({ "name": "x" })).await, 404, "not_found").await;
    }

    async fn revoking_kills_the_token_and_ends_its_jobs(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let running = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let queued = ann.create_job(&device.device_id).await;

        let path = format!("/api/devices/{}", device.device_id);
        assert_eq!(ann.delete(&path).await.status(), StatusCode::NO_CONTENT);
        assert_error(device.heartbeat(&[]).await, 401, "revoked").await;
        assert_error(device.claim().await, 401, "revoked").await;
        assert_error(device.get_self().await, 401, "revoked").await;
        assert_error(device.progress(running.id.as_str(), claimed.lease_token.expose(), &json!({ "seq": 1 })).await, 401, "revoked").await;

        let interrupted = ann.job(running.id.as_str()).await;
        assert_eq!(interrupted.state, JobState::Interrupted);
        assert_eq!(ann.job(queued.id.as_str()).await.state, JobState::Cancelled);
        let listed = ann.devices().await;
        assert!(listed[0].revoked_at.is_some());
        assert!(!listed[0].online);
        // A revoked device takes no new jobs, and revoking again changes nothing.
        assert_error(ann.post("/api/jobs", &crate::helpers::job_body(&device.device_id)).await, 404, "not_found").await;
        assert_eq!(ann.delete(&path).await.status(), StatusCode::NO_CONTENT);
        let kinds: Vec<String> = ledger::list(&app.store, &ann.me().await.account.id).await.unwrap()
            .into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds.iter().filter(|k| *k == "device.revoked").count(), 1);
        assert_eq!(kinds.iter().filter(|k| *k == "job.ended").count(), 2);
    }

    async fn a_device_removes_itself(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        assert_eq!(device.delete_self().await.status(), StatusCode::NO_CONTENT);
        assert_error(device.get_self().await, 401, "revoked").await;
        let kinds: Vec<String> = ledger::list(&app.store, &ann.me().await.account.id).await.unwrap()
            .into_iter().map(|e| e.kind).collect();
        assert!(kinds.contains(&"device.removed".to_owned()));
        let res = reqwest::Client::new().get(format!("{}/api/devices/self", app.base))
            .header("x-tether-protocol", "1").send().await.unwrap();
        assert_error(res, 401, "unauthorized").await;
    }

    async fn admin_routes_are_for_the_platform_admin(backend) {
        let app = spawn_app(backend).await;
        let admin = app.user("admin@example.com").await;
        let bob = app.user("bob@example.com").await;
        let bobs = app.device(&bob, "install-1").await;
        assert_error(bob.get("/api/admin/devices").await, 403, "forbidden").await;
        assert_error(bob.delete(&format!("/api/admin/devices/{}", bobs.device_id)).await, 403, "forbidden").await;

        let res = admin.get("/api/admin/devices").await;
        assert_eq!(res.status(), StatusCode::OK);
        let all: Vec<Value> = res.json().await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0]["id"], bobs.device_id);
        assert_eq!(all[0]["accountId"], json!(bob.me().await.account.id));
        // The admin's own list is only the admin's account.
        assert!(admin.devices().await.is_empty());

        assert_eq!(admin.delete(&format!("/api/admin/devices/{}", bobs.device_id)).await.status(), StatusCode::NO_CONTENT);
        assert_error(bobs.heartbeat(&[]).await, 401, "revoked").await;
        assert_error(admin.delete("/api/admin/devices/nope").await, 404, "not_found").await;
    }
}

both_backends! {
    // A heartbeat that only says "still here" is not written at once; its contact time
    // arrives with the next batch. A changed report is written at once.
    async fn contact_times_are_written_in_batches(backend) {
        let backend_again = backend.clone();
        let app = spawn_app_with(backend, |config| config.presence_flush_ms = 60_000).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let first = ann.devices().await[0].last_seen_at.unwrap();
        app.advance(std::time::Duration::from_secs(1));
        assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
        assert_eq!(ann.devices().await[0].last_seen_at, Some(first), "held for the batch");

        let mut changed = device.capabilities();
        changed.folders.push("photos".to_owned());
        assert_eq!(device.heartbeat_with(changed, &[]).await.status(), StatusCode::OK);
        let listed = ann.devices().await;
        assert!(listed[0].last_seen_at.unwrap() > first, "a changed report is written at once");
        assert_eq!(listed[0].capabilities.as_ref().unwrap().folders, vec!["work".to_owned(), "photos".to_owned()]);

        // With a short interval the batch lands on its own.
        let app = spawn_app_with(backend_again, |config| config.presence_flush_ms = 50).await;
        let bea = app.user("bea@example.com").await;
        let device = app.device(&bea, "install-2").await;
        let first = bea.devices().await[0].last_seen_at.unwrap();
        app.advance(std::time::Duration::from_secs(1));
        assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
        let mut advanced = false;
        for _ in 0..100 {
            if bea.devices().await[0].last_seen_at.unwrap() > first {
                advanced = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(advanced, "the batch wrote the newer contact time");
    }
}

both_backends! {
    // An agent that stops closes its event stream with "going away": its computer is
    // offline at once, its last contact kept; its next heartbeat makes it online again. A
    // stream that closes while another of the device is open, or that just breaks, is no stop.
    async fn a_clean_close_of_the_stream_is_offline_at_once(backend) {
        use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
        use tokio_tungstenite::tungstenite::protocol::CloseFrame;
        let going_away = || Some(CloseFrame { code: CloseCode::Away, reason: "stopping".into() });
        let soon = std::time::Duration::from_secs(2);
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let seen = ann.devices().await[0].last_seen_at;

        // Two streams: closing one leaves the device online.
        let mut first = device.events().await;
        let mut second = device.events().await;
        first.close(going_away()).await.unwrap();
        assert_eq!(crate::helpers::closed_within(&mut first, soon).await, Some(1000));
        assert!(ann.devices().await[0].online, "another stream is still open");

        second.close(going_away()).await.unwrap();
        assert_eq!(crate::helpers::closed_within(&mut second, soon).await, Some(1000));
        let listed = ann.devices().await;
        assert!(!listed[0].online, "offline at once after a clean close");
        assert_eq!(listed[0].last_seen_at, seen, "the last contact is kept");

        app.advance(std::time::Duration::from_secs(1));
        assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
        assert!(ann.devices().await[0].online, "a heartbeat after the stop is online again");

        // A stream dropped without a close frame is not a stop.
        let events = device.events().await;
        drop(events);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(ann.devices().await[0].online);
    }
}
