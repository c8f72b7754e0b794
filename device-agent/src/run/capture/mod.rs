//! Screenshots of what a run built: a page of the dev server it started on this computer's
//! loopback, or a file of its folder, taken with the computer's own Chromium (or Chrome),
//! confined like the run's commands, and kept in the run's evidence folder with a small
//! preview beside it.
//!
//! - [`target`]: what may be shown (loopback pages, files inside the run's folder);
//! - [`browser`]: finding the browser, starting it confined with a throwaway profile and
//!   only loopback reachable, ending its whole process group;
//! - [`devtools`]: the DevTools protocol over its pipe, and the capture steps.
//!
//! Rules: width and height are 100..=4096 CSS pixels (1280×800 when not given), at scale 1;
//! a full page is at most 16384 tall; the whole capture is bounded by [`CAPTURE_LIMIT`] and
//! the browser is killed afterwards whatever happened. The PNG is recorded as a
//! `screenshot` with its width and height; the JPEG preview (at most
//! `PREVIEW_VARIANT_WIDTH`, 320, wide) as its `preview` variant. Neither file ever overwrites
//! another of the folder.

pub mod browser;
pub mod devtools;
pub mod target;

pub use target::Target;

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tether_protocol::evidence::{EvidenceDetails, EvidenceVariant, MAX_PREVIEW_BYTES};
use tether_protocol::jobs::EvidenceKind;

use crate::local::private_files::hex;
use crate::policy::guard::Guard;
use crate::run::evidence::{Recorded, Recorder};
use crate::run::stop::RunStop;
use crate::sandbox::Sandbox;
use browser::{Browser, Confinement};
use devtools::{Pictures, Pipe, Shot};

/// The smallest and largest width or height, in CSS pixels.
pub const SIZE_RANGE: std::ops::RangeInclusive<u32> = 100..=4096;
/// The size when none is asked for.
pub const DEFAULT_SIZE: (u32, u32) = (1280, 800);
/// How long one capture may take, browser start included.
pub const CAPTURE_LIMIT: Duration = Duration::from_secs(60);

/// What to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenshotRequest {
    pub target: Target,
    /// The viewport, in CSS pixels (the picture's size at scale 1).
    pub width: u32,
    pub height: u32,
    /// The whole page's height rather than the viewport's (at most 16384).
    pub full_page: bool,
}

impl ScreenshotRequest {
    /// `target` at [`DEFAULT_SIZE`], the viewport only.
    pub fn new(target: Target) -> ScreenshotRequest {
        ScreenshotRequest {
            target,
            width: DEFAULT_SIZE.0,
            height: DEFAULT_SIZE.1,
            full_page: false,
        }
    }
}

/// What a capture left in the evidence folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The PNG's name in the evidence folder.
    pub name: String,
    /// The JPEG preview's name in the same folder.
    pub preview_name: String,
    /// The PNG's size in pixels.
    pub width: u32,
    pub height: u32,
}

/// What the run gives a capture: its folder (where a `path` target lives), its evidence
/// recorder, the confinement its commands start in, and its stop (which ends a capture).
pub struct CaptureRun<'a> {
    pub folder: &'a Path,
    pub recorder: &'a Recorder,
    pub sandbox: &'a Sandbox,
    pub guard: &'a Guard,
    /// The run's scrubbed environment (its `PATH` is also where the browser is looked for).
    pub env: &'a [(String, String)],
    pub stop: &'a RunStop,
}

/// Takes the screenshot `request` asks for and keeps it (and its preview) in the run's
/// evidence folder.
///
/// # Errors
/// A sentence for the run: a refused target or size, no browser, a page that did not load.
pub async fn screenshot(
    request: ScreenshotRequest,
    run: &CaptureRun<'_>,
) -> Result<Captured, String> {
    for (what, size) in [("width", request.width), ("height", request.height)] {
        if !SIZE_RANGE.contains(&size) {
            return Err(format!(
                "the {what} must be {} to {} pixels, not {size}",
                SIZE_RANGE.start(),
                SIZE_RANGE.end()
            ));
        }
    }
    let url = target::resolve(&request.target, run.folder)?;
    let program = browser::find(
        std::env::var_os(browser::BROWSER_VAR),
        search_path(run.env),
        browser::is_program,
    )?;
    let shot = Shot {
        url,
        width: request.width,
        height: request.height,
        full_page: request.full_page,
    };
    let pictures = take(&program, &shot, run).await?;
    let recorder = run.recorder.clone();
    tokio::task::spawn_blocking(move || keep(&pictures, &recorder))
        .await
        .map_err(|err| format!("the screenshot could not be saved: {err}"))?
}

/// Starts the browser, takes the pictures within [`CAPTURE_LIMIT`] unless the run stops
/// first, ends the browser.
async fn take(program: &Path, shot: &Shot, run: &CaptureRun<'_>) -> Result<Pictures, String> {
    let confinement = Confinement {
        sandbox: run.sandbox,
        guard: run.guard,
        env: run.env,
        run_folder: run.folder,
    };
    let mut browser = Browser::start(program, &confinement).await?;
    let taken = {
        let mut pipe = Pipe::new(&mut browser.to, &mut browser.from);
        tokio::select! {
            taken = tokio::time::timeout(CAPTURE_LIMIT, devtools::take(&mut pipe, shot)) => Some(taken),
            _ = run.stop.raised() => None,
        }
    };
    match taken {
        Some(Ok(Ok(pictures))) => {
            browser.end().await;
            Ok(pictures)
        }
        Some(Ok(Err(why))) => Err(browser.fail(&why).await),
        Some(Err(_)) => Err(browser
            .fail(&format!(
                "the screenshot took longer than {} seconds",
                CAPTURE_LIMIT.as_secs()
            ))
            .await),
        None => {
            browser.end().await;
            Err("the run is stopping; the screenshot was not taken".to_owned())
        }
    }
}

/// The run's `PATH`, else the agent's.
fn search_path(env: &[(String, String)]) -> Option<OsString> {
    env.iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| OsString::from(value))
        .or_else(|| std::env::var_os("PATH"))
}

/// Writes both pictures into the evidence folder under unused names and records them.
fn keep(pictures: &Pictures, recorder: &Recorder) -> Result<Captured, String> {
    let (width, height) =
        png_size(&pictures.png).ok_or_else(|| "the browser's picture is not a PNG".to_owned())?;
    if pictures.preview_jpeg.len() as u64 > MAX_PREVIEW_BYTES {
        return Err("the preview came out larger than a preview may be".to_owned());
    }
    let name = write_new(recorder, "screenshot.png", &pictures.png)?;
    let stem = name.trim_end_matches(".png");
    let preview_name = write_new(
        recorder,
        &format!("{stem}-preview.jpg"),
        &pictures.preview_jpeg,
    )?;
    recorder.record(Recorded {
        name: name.clone(),
        kind: EvidenceKind::Screenshot,
        caption: None,
        variant_of: None,
        variant: None,
        details: Some(EvidenceDetails {
            width: Some(width),
            height: Some(height),
            duration_ms: None,
        }),
        sha256: hex(&Sha256::digest(&pictures.png)),
    });
    recorder.record(Recorded {
        name: preview_name.clone(),
        kind: EvidenceKind::Screenshot,
        caption: None,
        variant_of: Some(name.clone()),
        variant: Some(EvidenceVariant::Preview),
        details: None,
        sha256: hex(&Sha256::digest(&pictures.preview_jpeg)),
    });
    Ok(Captured {
        name,
        preview_name,
        width,
        height,
    })
}

/// Creates `wanted` (or the next unused name) in the folder, never replacing a file.
fn write_new(recorder: &Recorder, wanted: &str, bytes: &[u8]) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = recorder.unused_name(wanted);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(recorder.folder().join(&name))
        .and_then(|mut file| file.write_all(bytes).map(|()| file))
        .map_err(|err| format!("{name} could not be written: {err}"))?;
    file.flush()
        .map_err(|err| format!("{name} could not be written: {err}"))?;
    Ok(name)
}

/// A PNG's width and height, from its header.
pub fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if bytes.get(..8)? != SIGNATURE || bytes.get(12..16)? != b"IHDR" {
        return None;
    }
    let word = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    Some((word(16)?, word(20)?))
}
