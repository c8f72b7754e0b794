//! Operations: readiness, metrics and the migrate-only start.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::both_backends;
use crate::helpers::{spawn_app, spawn_app_with, Backend};

both_backends! {
    async fn ready_and_metrics_tell_the_truth(backend) {
        let app = spawn_app(backend).await;
        let http = reqwest::Client::new();
        let ready = http.get(format!("{}/readyz", app.base)).send().await.unwrap();
        assert_eq!(ready.status().as_u16(), 200);

        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        device.heartbeat(&[]).await;
        let job = ann.create_job(&device.device_id).await;
        let res = ann.get(&format!("/api/jobs/{}", job.id)).await;
        assert_eq!(res.status().as_u16(), 200);

        let text = http.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        // Routes are labelled by pattern, never by the ids a client sent.
        assert!(text.contains(r#"tether_http_requests_total{route="/api/jobs/{id}",method="GET",status="200"} 1"#), "{text}");
        assert!(!text.contains(job.id.as_str()), "{text}");
        assert!(text.contains(r#"tether_jobs{state="queued"} 1"#), "{text}");
        assert!(text.contains("tether_http_request_duration_seconds_bucket"), "{text}");
        assert!(text.contains("tether_connected_devices 0"), "{text}");
        assert!(text.contains("tether_lease_expiries_total 0"), "{text}");
    }
}

/// `/readyz` fails while Redis is unreachable, so a load balancer takes the replica out.
#[tokio::test]
async fn ready_fails_while_redis_is_down() {
    let Some(binary) = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
    else {
        assert!(
            std::env::var("TETHER_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
            "redis-server is required"
        );
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut redis = Command::new(binary)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("redis://127.0.0.1:{port}/");
    let mut app = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let url = url.clone();
        if let Ok(built) = tokio::spawn(async move {
            spawn_app_with(Backend::Sqlite, |config| config.redis_url = Some(url)).await
        })
        .await
        {
            app = Some(built);
            break;
        }
    }
    let app = app.expect("the server never reached the private Redis");
    let http = reqwest::Client::new();
    let ready = http
        .get(format!("{}/readyz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    redis.kill().unwrap();
    redis.wait().unwrap();
    let down = http
        .get(format!("{}/readyz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(down.status().as_u16(), 503);
    let body: serde_json::Value = down.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable");
}
