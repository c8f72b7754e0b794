//! Operations: readiness, metrics and the migrate-only start.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::both_backends;
use crate::external;
use crate::helpers::{spawn_app_with, Backend};

both_backends! {
    async fn ready_and_metrics_tell_the_truth(backend) {
        let app = spawn_app_with(backend, |config| config.metrics_listen = Some("127.0.0.1:0".to_owned())).await;
        let http = reqwest::Client::new();
        let ready = http.get(format!("{}/readyz", app.base)).send().await.unwrap();
        assert_eq!(ready.status().as_u16(), 200);

        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        device.heartbeat(&[]).await;
        let job = ann.create_job(&device.device_id).await;
        let res = ann.get(&format!("/api/jobs/{}", job.id)).await;
        assert_eq!(res.status().as_u16(), 200);

        let text = app.metrics_text().await;
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
        external::unavailable("redis-server is not installed");
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

/// With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the real server binary exports a span per request
/// and the request metrics over OTLP/HTTP to a collector on loopback, and flushes on SIGTERM.
#[tokio::test]
async fn otlp_export_reaches_a_collector() {
    let collector = Collector::start().await;
    let data_dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_tether-server"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(data_dir.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.base)
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_SERVICE_NAME", "tether-otlp-test")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let mut up = false;
    for _ in 0..100 {
        if http.get(format!("{base}/healthz")).send().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "the server never answered");
    let missing = http
        .get(format!("{base}/api/jobs/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 401);

    let traces = collector.wait_for("/v1/traces", b"/healthz").await;
    assert!(
        contains(&traces, b"tether-otlp-test"),
        "the service name is on the spans"
    );
    let metrics = collector
        .wait_for("/v1/metrics", b"tether.http.requests")
        .await;
    assert!(
        contains(&metrics, b"/api/jobs/{id}"),
        "requests are labelled by route pattern"
    );
    assert!(
        !contains(&metrics, b"/api/jobs/nope"),
        "never by the raw path"
    );

    // SIGTERM stops the server cleanly, sending what is still buffered.
    let before = collector.count("/v1/metrics");
    let pid = server.id().unwrap().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(20), server.wait())
        .await
        .expect("the server stops on SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(
        collector.count("/v1/metrics") > before,
        "the last metrics were flushed"
    );
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Every body a collector was sent, with its path.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on loopback that keeps every body it is sent, by path.
struct Collector {
    base: String,
    received: Received,
}

impl Collector {
    async fn start() -> Collector {
        use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
        let received: Received = Default::default();
        let kept = received.clone();
        let server = HttpServer::new(move || {
            let kept = kept.clone();
            App::new().default_service(web::to(move |req: HttpRequest, body: web::Bytes| {
                let kept = kept.clone();
                async move {
                    kept.lock()
                        .unwrap()
                        .push((req.path().to_owned(), body.to_vec()));
                    HttpResponse::Ok()
                        .content_type("application/x-protobuf")
                        .finish()
                }
            }))
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .unwrap();
        let base = format!("http://{}", server.addrs()[0]);
        tokio::spawn(server.run());
        Collector { base, received }
    }

    fn count(&self, path: &str) -> usize {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .count()
    }

    /// All bodies sent to `path` so far, once one of them holds `needle`.
    async fn wait_for(&self, path: &str, needle: &[u8]) -> Vec<u8> {
        for _ in 0..150 {
            let bodies: Vec<u8> = self
                .received
                .lock()
                .unwrap()
                .iter()
                .filter(|(p, _)| p == path)
                .flat_map(|(_, body)| body.clone())
                .collect();
            if contains(&bodies, needle) {
                return bodies;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "nothing for {path} held {:?}",
            String::from_utf8_lossy(needle)
        );
    }
}
