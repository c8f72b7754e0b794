//! Measures what the live file view's redaction costs on the hostile inputs of issue 13
//! (finding 4) and on ordinary text, and prints the time per call. No assertion: numbers
//! to read, recorded in docs/PERFORMANCE.md ("Agent redaction").
//!
//! ```text
//! cargo run --release -p tether-agent --example redaction-bench
//! ```
//!
//! Three groups: the pattern redaction alone (`remote::frames::redaction::redact`), the
//! saved values (`local::vault::redact`, 20 values), and a whole file answer as the web gets
//! it (`file_request::answer_within`: read from disk, saved values, patterns, fitted).

use std::path::Path;
use std::time::{Duration, Instant};

use tether_agent::local::vault;
use tether_agent::remote::frames::file_request;
use tether_agent::remote::frames::redaction::{self, Deadline, MAX_CHECKED_LINE_BYTES};
use tether_protocol::files::{FileOp, MAX_FILE_BYTES};

const MIB: usize = 1024 * 1024;

fn main() {
    let inputs = inputs();
    println!(
        "pattern redaction (lines over {} KiB are hidden whole, unchecked)",
        MAX_CHECKED_LINE_BYTES / 1024
    );
    header();
    for (name, text) in &inputs {
        let per_call = time(|| redaction::redact(text).len());
        row(name, text.len(), per_call);
    }

    println!("\nsaved values (local::vault::redact, 20 values of 24 bytes, none present)");
    header();
    let values: Vec<String> = (0..20)
        .map(|i| format!("saved-value-{i:04}-xxxxxxx"))
        .collect();
    for (name, text) in &inputs {
        let per_call = time(|| vault::redact(text, &values).len());
        row(name, text.len(), per_call);
    }

    println!("\nwhole file answer (file_request::answer_within: read, values, patterns, fit)");
    header();
    let folder = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
    let no_guard = |_: &Path| None;
    for (index, (name, text)) in inputs.iter().enumerate() {
        let file = format!("input-{index}.txt");
        std::fs::write(folder.path().join(&file), text).unwrap_or_else(|err| panic!("{err}"));
        let per_call = time(|| {
            let answer = file_request::answer_within(
                folder.path(),
                FileOp::File,
                &file,
                &no_guard,
                &values,
                Deadline::NONE,
            );
            answer
                .file
                .and_then(|file| file.text)
                .map_or(0, |text| text.len())
        });
        row(name, text.len().min(MAX_FILE_BYTES as usize), per_call);
    }
}

/// The inputs: the hostile lines of issue 13, the worst that is still checked (1 MiB of
/// lines at the limit), and an ordinary log with secrets in it.
fn inputs() -> Vec<(&'static str, String)> {
    let line = MAX_CHECKED_LINE_BYTES;
    let lines_of = |unit: &str| {
        let one = unit.repeat(line / unit.len());
        format!("{one}\n").repeat(MIB / (one.len() + 1))
    };
    let base64 = base64_text(MIB);
    let base64_lines = base64
        .as_bytes()
        .chunks(line)
        .map(|chunk| String::from_utf8_lossy(chunk).into_owned() + "\n")
        .collect::<String>();
    vec![
        ("64 KiB line of `a.`", "a.".repeat(line / 2)),
        ("1 MiB single-line base64", base64),
        ("1 MiB base64 in 64 KiB lines", base64_lines),
        ("1 MiB of 64 KiB lines of `a.`", lines_of("a.")),
        ("1 MiB of 64 KiB lines of `\"a\": `", lines_of("\"a\": ")),
        ("1 MiB of 64 KiB lines of `u://a:b@`", lines_of("u://a:b@")),
        ("1 MiB multi-line log", log_text(MIB)),
    ]
}

/// `bytes` of base64 (no padding inside): a key or an image pasted on one line.
fn base64_text(bytes: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(ALPHABET[(state % 64) as usize])
        })
        .collect()
}

/// A service's log: requests, JSON bodies, URLs, now and then a secret.
fn log_text(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 256);
    let mut n = 0u64;
    while text.len() < bytes {
        let line = match n % 8 {
            0 => format!(
                "2026-11-30T12:00:{:02}.{n:06}Z INFO request id=req_{n:08x} method=GET path=/api/jobs/{n} status=200 took={}ms\n",
                n % 60,
                n % 97
            ),
            1 => format!(
                r#"2026-11-30T12:00:{:02}Z DEBUG body {{"user": "bob{n}", "password": "p@ss{n}", "count": {n}, "tags": ["a", "b"]}}"#,
                n % 60
            ) + "\n",
            2 => format!("2026-11-30T12:00:{:02}Z INFO connecting to postgres://app:s3cret@db-{n}.internal:5432/app?sslmode=require\n", n % 60),
            3 => format!("2026-11-30T12:00:{:02}Z WARN retrying with Authorization: Bearer ghp_{n:036}\n", n % 60),
            4 => "    at tether::jobs::claim (src/jobs.rs:212:17) -> Result<Lease, Error>\n".to_owned(),
            5 => format!("export API_TOKEN=tok_{n:020}\n"),
            6 => format!("2026-11-30T12:00:{:02}Z INFO GET /cb?code={n}&access_token=abc{n}&state=x 302\n", n % 60),
            _ => "2026-11-30T12:00:00Z INFO nothing to see here, just an ordinary line of text.\n".to_owned(),
        };
        text.push_str(&line);
        n += 1;
    }
    text
}

/// The median time of one call of `work`: repeated for about half a second (at least three
/// times, once only if a call takes longer than five seconds).
fn time(mut work: impl FnMut() -> usize) -> Duration {
    let mut sink = 0usize;
    let first = Instant::now();
    sink = sink.wrapping_add(work());
    let mut times = vec![first.elapsed()];
    let started = Instant::now();
    while times[0] < Duration::from_secs(5)
        && (times.len() < 3 || started.elapsed() < Duration::from_millis(500))
        && times.len() < 1000
    {
        let call = Instant::now();
        sink = sink.wrapping_add(work());
        times.push(call.elapsed());
    }
    std::hint::black_box(sink);
    times.sort();
    times[times.len() / 2]
}

fn header() {
    println!(
        "{:<40} {:>9} {:>12} {:>9}",
        "input", "bytes", "per call", "MiB/s"
    );
}

fn row(name: &str, bytes: usize, per_call: Duration) {
    let rate = bytes as f64 / MIB as f64 / per_call.as_secs_f64().max(1e-9);
    println!(
        "{name:<40} {bytes:>9} {:>12} {rate:>9.0}",
        format!("{per_call:.2?}")
    );
}
