//! Two replicas on one PostgreSQL and one Redis behave as one server.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tether_protocol::frames::ServerFrame;

use crate::helpers::{
    assert_error, closed_within, next_frame, spawn_app_with, Backend, DeviceClient, WebClient,
};
use crate::redis;

const SOON: Duration = Duration::from_secs(1);

fn on(device: &DeviceClient, base: &str) -> DeviceClient {
    DeviceClient {
        base: base.to_owned(),
        http: reqwest::Client::new(),
        token: device.token.clone(),
        device_id: device.device_id.clone(),
        install_id: device.install_id.clone(),
        seal_key: device.seal_key.clone(),
    }
}

#[tokio::test]
async fn two_replicas_on_one_database_and_one_redis_behave_as_one_server() {
    let Some(redis_url) = redis::url() else {
        return;
    };
    let Some(backend) = Backend::postgres() else {
        return;
    };
    let a = spawn_app_with(backend, |config| {
        config.redis_url = Some(redis_url);
        config.relay_timeout_secs = 5;
    })
    .await;
    let b = a.another().await;
    let mut ann = a.user("ann@example.com").await;
    let device = a.device(&ann, "install-1").await;
    let device_b = on(&device, &b.base);

    // A job created through A wakes the device connected to B.
    let mut stream_b = device_b.events().await;
    let job = ann.create_job(&device.device_id).await;
    assert_eq!(
        next_frame(&mut stream_b, SOON).await,
        Some(ServerFrame::Wake)
    );
    let claimed = device.claim_job().await;

    // A cancel through B reaches the device connected to A.
    let mut stream_a = device.events().await;
    ann.base = b.base.clone();
    let res = ann
        .post_empty(&format!("/api/jobs/{}/cancel", job.id))
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let cancel = ServerFrame::JobCancel {
        job_id: job.id.clone(),
    };
    assert_eq!(next_frame(&mut stream_a, SOON).await, Some(cancel.clone()));
    assert_eq!(next_frame(&mut stream_b, SOON).await, Some(cancel));

    // A file answer posted to B completes the request waiting on A.
    drop(stream_b);
    ann.base = a.base.clone();
    let job_id = job.id.clone();
    // The same signed-in person, asking through A while the test answers as the device.
    let asker = WebClient {
        base: a.base.clone(),
        http: ann.http.clone(),
        csrf: ann.csrf.clone(),
    };
    let pending = tokio::spawn(async move {
        asker
            .get(&format!("/api/jobs/{job_id}/tree?path=src"))
            .await
    });
    let Some(ServerFrame::FileRequest { id, .. }) = next_frame(&mut stream_a, SOON).await else {
        panic!("no file.request frame on A");
    };
    let other = a.device(&ann, "install-2").await;
    let answer = json!({ "tree": { "path": "src", "entries": [{ "name": "lib.rs", "kind": "file", "size": 1 }] } });
    assert_error(
        on(&other, &b.base).answer_file(&id, &answer).await,
        404,
        "not_found",
    )
    .await;
    assert_eq!(
        device_b.answer_file(&id, &answer).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_error(device.answer_file(&id, &answer).await, 404, "not_found").await;
    let res = pending.await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let tree: Value = res.json().await.unwrap();
    assert_eq!(tree["entries"][0]["name"], "lib.rs");

    // A device with no stream on any replica is offline for both.
    let job2 = ann.create_job(&other.device_id).await;
    assert_error(
        ann.get(&format!("/api/jobs/{}/tree?path=", job2.id)).await,
        409,
        "device_offline",
    )
    .await;
    ann.base = b.base.clone();
    assert_error(
        ann.get(&format!("/api/jobs/{}/tree?path=", job2.id)).await,
        409,
        "device_offline",
    )
    .await;

    // Revoking through B closes the stream held by A within a second.
    let res = ann
        .delete(&format!("/api/devices/{}", device.device_id))
        .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        next_frame(&mut stream_a, SOON).await,
        Some(ServerFrame::DeviceRevoked)
    );
    closed_within(&mut stream_a, SOON).await;
    let done = json!({ "outcome": "cancelled", "summary": "stopped" });
    assert_error(
        device
            .complete(job.id.as_str(), claimed.lease_token.expose(), &done)
            .await,
        401,
        "revoked",
    )
    .await;
}
