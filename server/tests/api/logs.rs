//! What the server logs for a request head it cannot parse: the client's fault, so a warning,
//! never an error. The test binary's one global subscriber is `telemetry::install`'s, writing
//! JSON lines into a buffer (the console's tests read it too, for what must never be logged).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tether_server::telemetry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing_subscriber::EnvFilter;

use crate::helpers::{spawn_app_with, Backend, TestApp};

/// What the subscriber wrote.
type Written = Arc<Mutex<Vec<u8>>>;

struct Capture(Written);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything the server logged so far in this process (the server's own lines from debug
/// up, everything else from info up), as JSON lines; the first call starts the capture.
pub fn written() -> String {
    static WRITTEN: OnceLock<Written> = OnceLock::new();
    let written = WRITTEN.get_or_init(|| {
        let written = Written::default();
        let sink = written.clone();
        let installed = telemetry::install(
            EnvFilter::new("info,tether_server=debug"),
            true,
            move || Capture(sink.clone()),
            None,
        );
        assert!(installed, "no other subscriber in this test binary");
        written
    });
    let text = String::from_utf8_lossy(&written.lock().unwrap()).into_owned();
    text
}

/// The log lines written so far in this process, as JSON.
fn logs() -> Vec<Value> {
    written()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Sends `request` on a connection of its own; the status of the answer, if one came.
async fn status_for(app: &TestApp, request: &[u8]) -> Option<u16> {
    let mut stream = TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    // The server may answer and close before all of it is written.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
}

fn about_a_malformed_head(line: &Value) -> bool {
    let message = line["fields"]["message"].as_str().unwrap_or_default();
    message.contains("request parse error")
}

#[tokio::test]
async fn a_malformed_request_head_is_logged_as_a_warning() {
    logs();
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let garbage: [(&[u8], u16); 3] = [
        (b"\x16\x03\x01\x02\x00\x01 not http\r\n\r\n", 400),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
            400,
        ),
        (huge.as_bytes(), 431),
    ];
    for (request, status) in garbage {
        assert_eq!(status_for(&app, request).await, Some(status));
    }
    // actix-http logs after its answer is written: wait for the lines.
    let started = Instant::now();
    let warnings = loop {
        let lines = logs();
        let warnings: Vec<Value> = lines
            .iter()
            .filter(|line| about_a_malformed_head(line) && line["level"] == "WARN")
            .cloned()
            .collect();
        let errors: Vec<&Value> = lines
            .iter()
            .filter(|line| about_a_malformed_head(line) && line["level"] == "ERROR")
            .collect();
        assert!(errors.is_empty(), "logged as errors: {errors:?}");
        if warnings.len() >= 3 || started.elapsed() > Duration::from_secs(10) {
            break warnings;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(warnings.len() >= 3, "{warnings:?}");
    let head_too_large = warnings.iter().any(|line| {
        let message = line["fields"]["message"].as_str().unwrap_or_default();
        message.contains("message head is too large")
    });
    assert!(head_too_large, "{warnings:?}");
}
