//! Screenshots taken for real: a page served on 127.0.0.1 by this test, captured through the
//! real sandbox (with the real `tether-agent` as its launcher) and the computer's Chromium,
//! then decoded and checked pixel by pixel.
//!
//! Without Chromium or a working sandbox the test skips with a message, unless
//! `TETHER_REQUIRE_EXTERNAL=1`, which makes it fail.

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};

use crate::external;
use tether_agent::policy::guard::Guard;
use tether_agent::run::capture::{self, browser, CaptureRun, ScreenshotRequest, Target};
use tether_agent::run::environment;
use tether_agent::run::evidence::Recorder;
use tether_agent::run::stop::RunStop;
use tether_agent::sandbox::{Sandbox, Settings};
use tether_protocol::evidence::{EvidenceVariant, PREVIEW_VARIANT_WIDTH};
use tether_protocol::jobs::EvidenceKind;

const AGENT: &str = env!("CARGO_BIN_EXE_tether-agent");
/// The page's background: a colour no browser picks by itself.
const COLOUR: [u8; 3] = [0x12, 0xb4, 0x6a];

/// Serves `body` as HTML to every request on a new loopback port; its address.
pub fn serve(body: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut byte = [0_u8; 1];
            while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                request.push(byte[0]);
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    format!("http://{address}/")
}

/// The sandbox of backend `choice`, or `None` (with a message) when it does not work here.
fn sandbox(choice: &str) -> Option<Sandbox> {
    let sandbox = Sandbox::probe(&Settings {
        choice: choice.to_owned(),
        bwrap: PathBuf::from("/usr/bin/bwrap"),
        launcher: PathBuf::from(AGENT),
        allow_unsandboxed: false,
    });
    if sandbox.report().backend != choice {
        let why = sandbox.report().reasons.join("; ");
        external::unavailable(&format!("the {choice} backend does not work here: {why}"));
        return None;
    }
    Some(sandbox)
}

/// An RGB(A) PNG's width, height and the colour of pixel (x, y).
pub fn decode(bytes: &[u8], x: usize, y: usize) -> (u32, u32, [u8; 3]) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.line_size / info.width as usize;
    assert!(channels >= 3, "{info:?}");
    let at = y * info.line_size + x * channels;
    (
        info.width,
        info.height,
        [pixels[at], pixels[at + 1], pixels[at + 2]],
    )
}

/// A baseline or progressive JPEG's width, from its frame header.
pub fn jpeg_width(bytes: &[u8]) -> u32 {
    assert_eq!(&bytes[..3], &[0xff, 0xd8, 0xff], "not a JPEG");
    let mut at = 2;
    while at + 9 < bytes.len() {
        assert_eq!(bytes[at], 0xff);
        let marker = bytes[at + 1];
        let length = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        if matches!(marker, 0xc0..=0xc2) {
            return u32::from(u16::from_be_bytes([bytes[at + 7], bytes[at + 8]]));
        }
        at += 2 + length;
    }
    panic!("no frame header in the JPEG");
}

pub fn close(actual: [u8; 3], expected: [u8; 3]) -> bool {
    actual.iter().zip(expected).all(|(a, e)| a.abs_diff(e) <= 3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_page_is_captured_under_bubblewrap_with_its_preview() {
    captured_under("bwrap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_page_is_captured_under_landlock_with_its_preview() {
    captured_under("landlock").await;
}

async fn captured_under(choice: &str) {
    let env = environment::scrub(std::env::vars_os());
    let path = env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.into());
    let Ok(program) = browser::find(
        std::env::var_os(browser::BROWSER_VAR),
        path,
        browser::is_program,
    ) else {
        external::unavailable(browser::NOT_FOUND);
        return;
    };
    let Some(sandbox) = sandbox(choice) else {
        return;
    };
    eprintln!(
        "capturing with {} in {}",
        program.display(),
        sandbox.report().backend
    );
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let (folder, evidence) = (root.join("work"), root.join("evidence"));
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::create_dir_all(&evidence).unwrap();
    std::fs::write(folder.join("page.html"), PAGE).unwrap();
    let guard = Guard::new(None, &root.join("data"));
    let recorder = Recorder::new(evidence.clone());
    let stop = RunStop::new();
    let run = CaptureRun {
        folder: &folder,
        recorder: &recorder,
        sandbox: &sandbox,
        guard: &guard,
        env: &env,
        stop: &stop,
    };
    let url = serve(PAGE.to_owned());

    let request = ScreenshotRequest {
        width: 640,
        height: 480,
        ..ScreenshotRequest::new(Target::Url(url.clone()))
    };
    let captured = capture::screenshot(request, &run).await.unwrap();
    assert_eq!((captured.width, captured.height), (640, 480));
    let png = std::fs::read(evidence.join(&captured.name)).unwrap();
    let (width, height, colour) = decode(&png, 20, 20);
    assert_eq!((width, height), (640, 480));
    assert!(close(colour, COLOUR), "{colour:?}");
    let preview = std::fs::read(evidence.join(&captured.preview_name)).unwrap();
    assert_eq!(jpeg_width(&preview), PREVIEW_VARIANT_WIDTH);
    check_recorded(&recorder, &captured.name, &captured.preview_name);

    // The whole page, from a file of the run's folder: taller than the viewport.
    let mut full = ScreenshotRequest::new(Target::Path(PathBuf::from("page.html")));
    full.full_page = true;
    let whole = capture::screenshot(full, &run).await.unwrap();
    assert_eq!((whole.width, whole.height), (1280, 1500), "{whole:?}");
    assert_ne!(whole.name, captured.name, "nothing is overwritten");
    let (_, _, bottom) = decode(&std::fs::read(evidence.join(&whole.name)).unwrap(), 5, 1490);
    assert!(close(bottom, COLOUR), "{bottom:?}");

    let refused = ScreenshotRequest::new(Target::Url("http://example.com/".to_owned()));
    let answer = capture::screenshot(refused, &run).await;
    assert!(
        matches!(&answer, Err(why) if why.contains("not on this computer's loopback")),
        "{answer:?}"
    );
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let nobody = ScreenshotRequest::new(Target::Url(format!("http://{closed}/")));
    let answer = capture::screenshot(nobody, &run).await;
    assert!(
        matches!(&answer, Err(why) if why.contains("could not be opened: net::ERR_CONNECTION_REFUSED")),
        "{answer:?}"
    );
    held_to_loopback(&run).await;
    let mut tiny = ScreenshotRequest::new(Target::Url(url));
    tiny.width = 5000;
    let answer = capture::screenshot(tiny, &run).await;
    assert!(
        matches!(&answer, Err(why) if why.contains("100 to 4096")),
        "{answer:?}"
    );
    let kept = std::fs::read_dir(&evidence).unwrap().count();
    assert!(kept == 4 || kept == 6, "{kept} files");
}

/// A page on loopback whose picture is on this computer's own non-loopback address: the
/// browser never asks for it (skipped when the computer has no such address).
async fn held_to_loopback(run: &CaptureRun<'_>) {
    let probe = UdpSocket::bind("0.0.0.0:0").unwrap();
    // No packet is sent: connecting a UDP socket only picks the outgoing address.
    let outside = probe
        .connect("192.0.2.1:9")
        .and_then(|()| probe.local_addr())
        .map(|address| address.ip());
    let Some(outside) = outside
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    else {
        eprintln!("no non-loopback address here: the picture check is left out");
        return;
    };
    let listener = TcpListener::bind((outside, 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let picture = format!("http://{}/picture.png", listener.local_addr().unwrap());
    let url = serve(format!(
        r#"<!doctype html><body style="margin: 0; background: #12b46a"><img src="{picture}"></body>"#
    ));
    let captured = capture::screenshot(ScreenshotRequest::new(Target::Url(url)), run)
        .await
        .unwrap();
    assert_eq!(captured.width, 1280);
    assert!(
        listener.accept().is_err(),
        "the browser reached {picture}, which is not loopback"
    );
}

/// The PNG is recorded as a screenshot with its size, the JPEG as its preview, both with the
/// digest of what was written.
fn check_recorded(recorder: &Recorder, name: &str, preview_name: &str) {
    use sha2::Digest;
    let recorded = recorder.recorded();
    let digest = |name: &str| {
        let bytes = std::fs::read(recorder.folder().join(name)).unwrap();
        sha2::Sha256::digest(bytes)
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    };
    let shot = recorded.iter().find(|r| r.name == name).unwrap();
    assert_eq!(shot.kind, EvidenceKind::Screenshot);
    assert_eq!(shot.details.and_then(|d| d.width), Some(640));
    assert_eq!(shot.sha256, digest(name));
    let preview = recorded.iter().find(|r| r.name == preview_name).unwrap();
    assert_eq!(preview.variant, Some(EvidenceVariant::Preview));
    assert_eq!(preview.variant_of.as_deref(), Some(name));
    assert_eq!(preview.sha256, digest(preview_name));
    assert!(Path::new(preview_name)
        .extension()
        .is_some_and(|e| e == "jpg"));
}

/// A page of one colour, 1500 pixels tall, with a picture on the internet it cannot load.
const PAGE: &str = r#"<!doctype html>
<html><head><style>html, body { margin: 0; background: #12b46a; }</style></head>
<body><div style="height: 1500px"></div><img style="position: absolute; top: 0; left: 0; width: 1px; height: 1px" src="https://example.com/missing.png"></body></html>"#;
