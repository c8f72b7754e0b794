//! The event stream: wake-ups, cancels, revocation, pings, authentication.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::json;
use tether_protocol::frames::ServerFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::both_backends;
use crate::helpers::{closed_within, next_frame, spawn_app, spawn_app_with};

const SOON: Duration = Duration::from_secs(1);

both_backends! {
    async fn wakes_cancels_and_revocation_reach_the_stream_at_once(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let mut events = device.events().await;

        let job = ann.create_job(&device.device_id).await;
        assert_eq!(next_frame(&mut events, SOON).await, Some(ServerFrame::Wake));
        let claimed = device.claim_job().await;
        assert_eq!(claimed.id, job.id);

        let res = ann.post_empty(&format!("/api/jobs/{}/cancel", job.id)).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            next_frame(&mut events, SOON).await,
            Some(ServerFrame::JobCancel { job_id: job.id.clone() })
        );

        let res = ann.delete(&format!("/api/devices/{}", device.device_id)).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert_eq!(next_frame(&mut events, SOON).await, Some(ServerFrame::DeviceRevoked));
        // Closed for the revocation (1008), not for going silent.
        assert_eq!(closed_within(&mut events, SOON).await, Some(1008));
    }

    async fn bad_and_revoked_tokens_are_refused_before_the_upgrade(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let mut device = app.device(&ann, "install-1").await;
        let good = device.token.clone();
        device.token = "tdt_not-a-token".to_owned();
        assert_eq!(refusal(device.try_events().await), 401);
        device.token = "tut_wrong-kind".to_owned();
        assert_eq!(refusal(device.try_events().await), 401);
        device.token = good;
        let mut events = device.events().await;
        assert_eq!(device.delete_self().await.status(), StatusCode::NO_CONTENT);
        assert_eq!(next_frame(&mut events, SOON).await, Some(ServerFrame::DeviceRevoked));
        closed_within(&mut events, SOON).await;
        assert_eq!(refusal(device.try_events().await), 401);
        // A plain GET without the upgrade is refused too, with the error body.
        let res = device.http.get(format!("{}/api/devices/self/events", app.base))
            .bearer_auth(&device.token).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    }

    async fn the_server_pings_and_closes_a_silent_stream(backend) {
        let app = spawn_app_with(backend, |config| {
            config.events_ping_secs = 1;
            config.events_idle_secs = 2;
        }).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;

        // A client that reads answers pings by itself and stays connected.
        let mut events = device.events().await;
        let started = Instant::now();
        let (mut text_pings, mut ws_pings) = (0, 0);
        while started.elapsed() < Duration::from_millis(3500) {
            match tokio::time::timeout(Duration::from_secs(2), events.next()).await {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let frame: ServerFrame = serde_json::from_str(text.as_str()).unwrap();
                    assert_eq!(frame, ServerFrame::Ping);
                    text_pings += 1;
                }
                Ok(Some(Ok(Message::Ping(_)))) => ws_pings += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(text_pings >= 2 && ws_pings >= 2, "{text_pings} {ws_pings}");

        // A client that stops reading sends no pongs and is closed as silent.
        drop(events);
        let mut silent = device.events().await;
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(closed_within(&mut silent, Duration::from_secs(2)).await, Some(1001));
        // Its registration went with it: a new stream is the one served.
        let mut events = device.events().await;
        let _job = ann.create_job(&device.device_id).await;
        assert_eq!(next_frame(&mut events, SOON).await, Some(ServerFrame::Wake));
    }

    async fn a_device_that_pings_is_not_pinged(backend) {
        let app = spawn_app_with(backend, |config| {
            config.events_ping_secs = 1;
            config.events_idle_secs = 3;
        }).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;

        // The agent pings its stream itself: the server only answers, and never closes it.
        let mut events = device.events().await;
        let started = Instant::now();
        let mut pongs = 0;
        while started.elapsed() < Duration::from_millis(3500) {
            events.send(Message::Ping(b"agent".to_vec().into())).await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_millis(400);
            while let Ok(Some(message)) = tokio::time::timeout_at(deadline, events.next()).await {
                match message.unwrap() {
                    Message::Pong(_) => pongs += 1,
                    other => panic!("a device that pings was sent {other:?}"),
                }
            }
        }
        assert!(pongs >= 7, "{pongs}");
        let _job = ann.create_job(&device.device_id).await;
        assert_eq!(next_frame(&mut events, SOON).await, Some(ServerFrame::Wake));
    }

    async fn a_freed_run_slot_wakes_the_accounts_devices_with_queued_work(backend) {
        let app = spawn_app_with(backend, |config| config.max_running_per_account = 1).await;
        let ann = app.user("ann@example.com").await;
        let first = app.device(&ann, "install-1").await;
        let second = app.device(&ann, "install-2").await;
        let running = ann.create_job(&first.device_id).await;
        let claimed = first.claim_job().await;
        let _queued = ann.create_job(&second.device_id).await;
        assert_eq!(second.claim().await.status(), StatusCode::NO_CONTENT);

        let mut events = second.events().await;
        let done = json!({ "outcome": "succeeded", "summary": "done" });
        let res = first.complete(running.id.as_str(), claimed.lease_token.expose(), &done).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(next_frame(&mut events, SOON).await, Some(ServerFrame::Wake));
        assert_eq!(second.claim().await.status(), StatusCode::OK);
    }
}

fn refusal(result: Result<crate::helpers::Events, WsError>) -> u16 {
    match result {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("the stream opened"),
    }
}
