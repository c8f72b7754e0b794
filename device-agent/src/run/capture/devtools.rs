//! The DevTools protocol over the browser's pipe, as much as a screenshot needs: messages
//! are JSON objects ended by a NUL byte; a command is answered by the message with its `id`,
//! events (no `id`) are kept until they are waited for.
//!
//! The steps: a fresh page (`Target.createTarget`, attached flat) → its size
//! (`Emulation.setDeviceMetricsOverride`, scale 1) → `Page.navigate` (a navigation error is
//! answered with its text) → `Page.loadEventFired`, bounded → for a full page, the page's
//! height from `Page.getLayoutMetrics` (at most [`MAX_FULL_HEIGHT`]) → the PNG, then the
//! JPEG preview scaled to at most [`PREVIEW_VARIANT_WIDTH`] wide.

use std::collections::VecDeque;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use tether_protocol::evidence::PREVIEW_VARIANT_WIDTH;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

/// The tallest full-page capture, in CSS pixels.
pub const MAX_FULL_HEIGHT: u32 = 16384;
/// How long a page has to load.
pub const LOAD_LIMIT: Duration = Duration::from_secs(30);
/// The JPEG quality of the preview.
const PREVIEW_QUALITY: u32 = 70;
/// The largest message read from the browser (a 4096×16384 PNG, base64).
const MAX_MESSAGE: usize = 400 * 1024 * 1024;

/// The browser's side of the pipe.
pub struct Pipe<'a> {
    to: &'a mut pipe::Sender,
    from: &'a mut pipe::Receiver,
    buffer: Vec<u8>,
    events: VecDeque<Value>,
    next_id: u64,
}

impl<'a> Pipe<'a> {
    pub fn new(to: &'a mut pipe::Sender, from: &'a mut pipe::Receiver) -> Pipe<'a> {
        Pipe {
            to,
            from,
            buffer: Vec::new(),
            events: VecDeque::new(),
            next_id: 1,
        }
    }

    /// Sends `method` (to `session` when given) and waits for its answer's `result`.
    ///
    /// # Errors
    /// The browser's error message, or that the pipe closed.
    pub async fn call(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).map_err(|err| err.to_string())?;
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .await
            .map_err(|err| format!("the browser stopped listening: {err}"))?;
        loop {
            let message = self.next_message().await?;
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                if message.get("method").is_some() {
                    self.events.push_back(message);
                }
                continue;
            }
            if let Some(error) = message.get("error") {
                let said = error.get("message").and_then(Value::as_str).unwrap_or("");
                return Err(format!("{method} failed: {said}"));
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// Waits for the event `method` of `session` (kept ones first).
    ///
    /// # Errors
    /// That the pipe closed.
    pub async fn event(&mut self, method: &str, session: &str) -> Result<Value, String> {
        let matches = |event: &Value| {
            event.get("method").and_then(Value::as_str) == Some(method)
                && event.get("sessionId").and_then(Value::as_str) == Some(session)
        };
        if let Some(at) = self.events.iter().position(matches) {
            return Ok(self.events.remove(at).unwrap_or(Value::Null));
        }
        loop {
            let message = self.next_message().await?;
            if matches(&message) {
                return Ok(message);
            }
        }
    }

    /// The next whole message from the browser.
    async fn next_message(&mut self) -> Result<Value, String> {
        loop {
            if let Some(end) = self.buffer.iter().position(|byte| *byte == 0) {
                let message: Vec<u8> = self.buffer.drain(..=end).collect();
                return serde_json::from_slice(&message[..end])
                    .map_err(|err| format!("the browser sent something that is not JSON: {err}"));
            }
            if self.buffer.len() > MAX_MESSAGE {
                return Err("the browser sent a message larger than a screenshot can be".to_owned());
            }
            let mut chunk = vec![0_u8; 256 * 1024];
            let read = self
                .from
                .read(&mut chunk)
                .await
                .map_err(|err| format!("cannot read from the browser: {err}"))?;
            if read == 0 {
                return Err("the browser closed its DevTools pipe".to_owned());
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}

/// What to capture, once the target was allowed.
#[derive(Debug, Clone)]
pub struct Shot {
    pub url: String,
    pub width: u32,
    pub height: u32,
    pub full_page: bool,
}

/// The two pictures of a page.
#[derive(Debug)]
pub struct Pictures {
    pub png: Vec<u8>,
    pub preview_jpeg: Vec<u8>,
}

/// Opens `shot.url` in a fresh page and takes its pictures.
///
/// # Errors
/// A sentence: the page did not load (with the browser's reason), or a step failed.
pub async fn take(pipe: &mut Pipe<'_>, shot: &Shot) -> Result<Pictures, String> {
    let target = pipe
        .call("Target.createTarget", json!({ "url": "about:blank" }), None)
        .await?;
    let target_id = text(&target, "targetId")?;
    let attached = pipe
        .call(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
            None,
        )
        .await?;
    let session_id = text(&attached, "sessionId")?;
    let session = Some(session_id.as_str());
    pipe.call(
        "Emulation.setDeviceMetricsOverride",
        json!({ "width": shot.width, "height": shot.height, "deviceScaleFactor": 1, "mobile": false }),
        session,
    )
    .await?;
    pipe.call("Page.enable", json!({}), session).await?;
    let navigated = pipe
        .call("Page.navigate", json!({ "url": shot.url }), session)
        .await?;
    if let Some(error) = navigated.get("errorText").and_then(Value::as_str) {
        return Err(format!(
            "the page {} could not be opened: {error}",
            shot.url
        ));
    }
    let loaded = tokio::time::timeout(LOAD_LIMIT, pipe.event("Page.loadEventFired", &session_id));
    loaded.await.map_err(|_| {
        format!(
            "the page {} did not finish loading within {} seconds",
            shot.url,
            LOAD_LIMIT.as_secs()
        )
    })??;
    let height = if shot.full_page {
        full_height(pipe, session, shot.height).await?
    } else {
        shot.height
    };
    let clip = |scale: f64| json!({ "x": 0, "y": 0, "width": shot.width, "height": height, "scale": scale });
    let beyond = height > shot.height;
    let png = capture(
        pipe,
        session,
        json!({ "format": "png", "clip": clip(1.0), "captureBeyondViewport": beyond }),
    )
    .await?;
    let scale = (f64::from(PREVIEW_VARIANT_WIDTH) / f64::from(shot.width)).min(1.0);
    let preview_jpeg = capture(
        pipe,
        session,
        json!({ "format": "jpeg", "quality": PREVIEW_QUALITY, "clip": clip(scale), "captureBeyondViewport": beyond }),
    )
    .await?;
    Ok(Pictures { png, preview_jpeg })
}

/// The page's whole height (at least the viewport's, at most [`MAX_FULL_HEIGHT`]).
async fn full_height(
    pipe: &mut Pipe<'_>,
    session: Option<&str>,
    viewport: u32,
) -> Result<u32, String> {
    let metrics = pipe
        .call("Page.getLayoutMetrics", json!({}), session)
        .await?;
    let content = metrics
        .get("cssContentSize")
        .or_else(|| metrics.get("contentSize"))
        .and_then(|size| size.get("height"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let content = if content.is_finite() && content > 0.0 {
        // Bounded just below, so the conversion cannot wrap.
        content.ceil().min(f64::from(MAX_FULL_HEIGHT)) as u32
    } else {
        0
    };
    Ok(content.clamp(viewport, MAX_FULL_HEIGHT.max(viewport)))
}

/// One `Page.captureScreenshot`, decoded.
async fn capture(
    pipe: &mut Pipe<'_>,
    session: Option<&str>,
    params: Value,
) -> Result<Vec<u8>, String> {
    let taken = pipe.call("Page.captureScreenshot", params, session).await?;
    base64::engine::general_purpose::STANDARD
        .decode(text(&taken, "data")?)
        .map_err(|err| format!("the browser's picture is not base64: {err}"))
}

fn text(value: &Value, field: &str) -> Result<String, String> {
    value
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("the browser's answer has no {field}"))
}
