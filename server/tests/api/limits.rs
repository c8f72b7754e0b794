//! Rate limits: 429 `rate_limited` with `Retry-After`, per bucket and key; off when asked.

use reqwest::StatusCode;
use serde_json::json;
use tether_server::rate_limits::{Rate, RateLimitConfig};

use crate::both_backends;
use crate::helpers::{assert_error, seal_key, spawn_app_with};

both_backends! {
    async fn buckets_answer_429_with_retry_after(backend) {
        let app = spawn_app_with(backend, |config| {
            config.rate_limits.heartbeat = Rate::per_minute(3);
            config.rate_limits.progress = Rate::per_minute(2);
            config.rate_limits.pairing = Rate::per_minute(3);
            config.rate_limits.files = Rate::per_minute(1);
        }).await;
        let ann = app.user("ann@example.com").await;
        // Pairing the device took one pairing token; a heartbeat one heartbeat token.
        let device = app.device(&ann, "install-1").await;
        let other = app.device(&ann, "install-2").await;
        assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
        assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
        let res = device.heartbeat(&[]).await;
        let retry: u64 = res.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=20).contains(&retry), "{retry}");
        let message = assert_error(res, 429, "rate_limited").await;
        assert!(message.contains("heartbeat"));
        // Buckets are per device.
        assert_eq!(other.heartbeat(&[]).await.status(), StatusCode::OK);

        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let lease = claimed.lease_token.expose();
        for seq in 1..=2 {
            let res = device.progress(job.id.as_str(), lease, &json!({ "seq": seq })).await;
            assert_eq!(res.status(), StatusCode::OK);
        }
        assert_error(device.progress(job.id.as_str(), lease, &json!({ "seq": 3 })).await, 429, "rate_limited").await;

        // Pairing is per address: two devices paired, the third start is refused.
        assert_eq!(app.pair("install-3", &seal_key()).await.status(), StatusCode::CREATED);
        assert_error(app.pair("install-4", &seal_key()).await, 429, "rate_limited").await;

        let tree = format!("/api/jobs/{}/tree?path=", job.id);
        assert_error(ann.get(&tree).await, 409, "device_offline").await;
        assert_error(ann.get(&tree).await, 429, "rate_limited").await;
    }

    async fn limits_can_be_turned_off(backend) {
        let app = spawn_app_with(backend, |config| {
            config.rate_limits = RateLimitConfig::parse("off").unwrap();
        }).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        for _ in 0..80 {
            assert_eq!(device.heartbeat(&[]).await.status(), StatusCode::OK);
        }
        for n in 0..12 {
            assert_eq!(app.pair(&format!("install-x{n}"), &seal_key()).await.status(), StatusCode::CREATED);
        }
    }
}
