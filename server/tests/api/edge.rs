//! What every request passes before its route: the body deadline, the connection cap and the
//! headers of every answer; and `/metrics` on its own listener only.
//!
//! The deadline is real time (it paces I/O, not the server's clock): these tests configure it
//! short. They run on SQLite only: none of it reaches the store.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{assert_error, spawn_app_with, Backend, TestApp};

/// The head of a login whose body announces 1000 bytes, and its first byte.
const SLOW_LOGIN: &[u8] = b"POST /api/auth/login HTTP/1.1\r\nHost: localhost\r\n\
    Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";

/// An answer read off a raw connection.
struct RawAnswer {
    status: u16,
    head: String,
    body: String,
    /// The server closed the connection after answering.
    closed: bool,
}

fn address(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Connects and writes `request` (the server may answer before all of it is written).
async fn send(app: &TestApp, request: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(address(app)).await.unwrap();
    let _ = stream.write_all(request).await;
    stream
}

/// Reads one answer (head and a `Content-Length` body) as text.
async fn read_one(stream: &mut TcpStream, within: Duration) -> String {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    return;
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .expect("an answer in time");
    String::from_utf8_lossy(&bytes).into_owned()
}

fn status_of(text: &str) -> u16 {
    text.split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

/// Reads one answer, then whether the server closes the connection.
async fn answer(stream: &mut TcpStream, within: Duration) -> RawAnswer {
    let text = read_one(stream, within).await;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut rest = [0u8; 64];
    let closed = matches!(
        tokio::time::timeout(Duration::from_secs(3), stream.read(&mut rest)).await,
        Ok(Ok(0) | Err(_))
    );
    RawAnswer {
        status: status_of(head),
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
        closed,
    }
}

/// Reads one answer off a kept-alive connection; its status.
async fn answer_kept(stream: &mut TcpStream) -> u16 {
    status_of(&read_one(stream, Duration::from_secs(5)).await)
}

/// Whether the server has sent nothing on `stream` yet (no answer, no close), looked at
/// without waiting.
fn nothing_said(stream: TcpStream) -> (TcpStream, bool) {
    let stream = stream.into_std().unwrap();
    let silent = matches!(
        stream.peek(&mut [0u8; 1]),
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock
    );
    (TcpStream::from_std(stream).unwrap(), silent)
}

fn error_code(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("JSON: {body:?}"));
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A server whose bodies must arrive within `millis`.
async fn with_body_timeout(millis: u64) -> TestApp {
    spawn_app_with(Backend::Sqlite, |config| config.body_timeout_ms = millis).await
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_408_within_the_deadline() {
    let app = with_body_timeout(500).await;
    let started = Instant::now();
    let mut stream = send(&app, SLOW_LOGIN).await;
    let answer = answer(&mut stream, Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert_eq!(answer.status, 408, "{}", answer.head);
    assert_eq!(error_code(&answer.body), "request_timeout");
    assert!(
        took >= Duration::from_millis(450),
        "not before the deadline: {took:?}"
    );
    assert!(answer.head.contains("connection: close"), "{}", answer.head);
    assert!(
        answer.head.contains("x-content-type-options: nosniff"),
        "{}",
        answer.head
    );
    assert!(answer.closed, "the connection is closed after the 408");
}

#[tokio::test]
async fn a_body_that_arrives_in_pieces_within_the_deadline_is_read() {
    let app = with_body_timeout(1_500).await;
    let body = br#"{"email": "nobody@example.com", "password": "not the password"}"#;
    let head = format!(
        "POST /api/auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = send(&app, head.as_bytes()).await;
    for piece in body.chunks(16) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(piece).await.unwrap();
    }
    let answer = answer(&mut stream, Duration::from_secs(10)).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    assert_eq!(error_code(&answer.body), "invalid_credentials");
}

/// The probe's case: hundreds of connections that sent headers and one body byte. Each is
/// answered 408 at its deadline, and `/healthz` answers all along: before any of them is.
#[tokio::test]
async fn many_slow_bodies_do_not_stop_healthz() {
    let app = with_body_timeout(10_000).await;
    let mut slow = Vec::new();
    for _ in 0..300 {
        slow.push(send(&app, SLOW_LOGIN).await);
    }
    let health = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    // Answered while every slow body still waited for its deadline, not behind them.
    let mut slow: Vec<TcpStream> = slow
        .into_iter()
        .enumerate()
        .map(|(n, stream)| {
            let (stream, silent) = nothing_said(stream);
            assert!(silent, "slow body {n} was answered before /healthz");
            stream
        })
        .collect();
    let answers = futures_util::future::join_all(
        slow.iter_mut()
            .map(|stream| answer(stream, Duration::from_secs(30))),
    )
    .await;
    for answer in answers {
        assert_eq!(answer.status, 408, "{}", answer.head);
        assert_eq!(error_code(&answer.body), "request_timeout");
    }
    let health = reqwest::get(format!("{}/healthz", app.base)).await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_with_503_but_healthz_answers() {
    let app = spawn_app_with(Backend::Sqlite, |config| config.max_connections = 3).await;
    // Three connections, each served once and kept open (keep-alive).
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = send(&app, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
        assert_eq!(answer_kept(&mut stream).await, 200);
        held.push(stream);
    }
    let mut fourth = send(&app, b"GET /api/me HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    let refused = answer(&mut fourth, Duration::from_secs(5)).await;
    assert_eq!(refused.status, 503, "{}", refused.head);
    assert_eq!(error_code(&refused.body), "unavailable");
    assert!(refused.head.contains("retry-after: 5"), "{}", refused.head);
    assert!(
        refused.head.contains("connection: close"),
        "{}",
        refused.head
    );
    assert!(refused.closed, "a refused connection is closed");
    // The liveness check is answered past the cap, so a busy replica is not restarted.
    let mut probe = send(
        &app,
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(answer(&mut probe, Duration::from_secs(5)).await.status, 200);
    // The connections held first are still served.
    let first = held.first_mut().unwrap();
    first
        .write_all(b"GET /api/me HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer_kept(first).await, 401);
    // Once they close, new connections are served again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let res = reqwest::Client::new()
            .get(format!("{}/api/me", app.base))
            .send()
            .await
            .unwrap();
        if res.status() == StatusCode::UNAUTHORIZED {
            break;
        }
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(Instant::now() < deadline, "slots were given back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_answer_says_nosniff_and_hsts_only_over_https() {
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let http = reqwest::Client::new();
    let json = http
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .unwrap();
    let page = http
        .get(format!("{}/signin", app.base))
        .send()
        .await
        .unwrap();
    let error = http
        .get(format!("{}/api/me", app.base))
        .send()
        .await
        .unwrap();
    let unknown = http
        .get(format!("{}/no/such/route", app.base))
        .send()
        .await
        .unwrap();
    let asset = http
        .get(format!("{}/assets/app.js", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(json.status(), StatusCode::OK);
    assert_eq!(page.status(), StatusCode::OK);
    for res in [json, page, error, unknown, asset] {
        assert_eq!(
            res.headers()["x-content-type-options"],
            "nosniff",
            "{}",
            res.url()
        );
        assert!(
            res.headers().get("strict-transport-security").is_none(),
            "not over http"
        );
    }

    let https = spawn_app_with(Backend::Sqlite, |config| {
        config.public_url = Some("https://tether.example.com".to_owned());
    })
    .await;
    for path in ["/healthz", "/signin", "/api/me"] {
        let res = http
            .get(format!("{}{path}", https.base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.headers()["strict-transport-security"],
            "max-age=31536000; includeSubDomains",
            "{path}"
        );
        assert_eq!(res.headers()["x-content-type-options"], "nosniff", "{path}");
    }
}

#[tokio::test]
async fn metrics_are_served_on_their_own_listener_only() {
    let app = spawn_app_with(Backend::Sqlite, |config| {
        config.metrics_listen = Some("127.0.0.1:0".to_owned());
    })
    .await;
    let public = reqwest::get(format!("{}/metrics", app.base)).await.unwrap();
    assert_error(public, 404, "not_found").await;
    let metrics = app.metrics.clone().unwrap();
    assert_ne!(metrics, app.base);
    let res = reqwest::get(format!("{metrics}/metrics")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    assert!(res
        .text()
        .await
        .unwrap()
        .contains("tether_http_requests_total"));
    // The metrics listener serves nothing else.
    let other = reqwest::get(format!("{metrics}/api/me")).await.unwrap();
    assert_error(other, 404, "not_found").await;

    // Unset: no metrics listener at all, and still none on the public port.
    let plain = spawn_app_with(Backend::Sqlite, |_| {}).await;
    assert!(plain.metrics.is_none());
    let res = reqwest::get(format!("{}/metrics", plain.base))
        .await
        .unwrap();
    assert_error(res, 404, "not_found").await;
}
