//! A headless Chromium driven over the DevTools protocol, for the browser test.
//!
//! Only what the test needs: open a page, run JavaScript in it, wait for a condition. The
//! browser is the machine's real Chromium (`/usr/bin/chromium`, or `TETHER_CHROMIUM`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Where Chromium is, or `None` when this machine has none.
fn chromium_path() -> Option<PathBuf> {
    let candidates = [
        std::env::var("TETHER_CHROMIUM").ok(),
        Some("/usr/bin/chromium".to_owned()),
        Some("/usr/bin/chromium-browser".to_owned()),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(PathBuf::from)
        .find(|path| path.exists())
}

/// Chromium for `test`, or `None` (with a printed reason) when this machine has none.
///
/// # Panics
/// When Chromium is missing and `TETHER_REQUIRE_EXTERNAL=1`.
pub fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    let found = chromium_path();
    if found.is_none() {
        crate::external::unavailable(&format!(
            "{test} needs Chromium: none at /usr/bin/chromium (set TETHER_CHROMIUM)"
        ));
    }
    found
}

/// A running headless Chromium with one page attached.
pub struct Browser {
    process: Child,
    socket: Socket,
    session_id: String,
    next_id: u64,
    /// DevTools events seen while waiting for answers, oldest first (the last 500).
    events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium with a fresh profile and opens a blank page.
    pub async fn launch(binary: &PathBuf) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // The flags keep Chromium off the network beyond loopback: this machine refuses
        // outside connections, and background fetches would only add noise.
        let mut process = Command::new(binary)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--remote-debugging-port=0",
                "--window-size=390,844",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = process.stderr.take().unwrap();
        let ws_url = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stderr).lines();
            let url = lines.by_ref().map_while(Result::ok).find_map(|line| {
                line.split("DevTools listening on ")
                    .nth(1)
                    .map(str::to_owned)
            });
            // Keep draining so Chromium never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            url
        })
        .await
        .unwrap()
        .expect("Chromium did not print its DevTools address");
        let (socket, _) = tokio_tungstenite::connect_async(ws_url.trim())
            .await
            .unwrap();
        let mut browser = Browser {
            process,
            socket,
            session_id: String::new(),
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        let target = browser
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        browser.session_id = attached["sessionId"].as_str().unwrap().to_owned();
        browser
    }

    /// Sends one DevTools command (to the browser, or to the target `session` is attached
    /// to) and waits for its answer, keeping the events that arrive meanwhile.
    pub async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let answer = self.try_call(session, method, params).await;
        answer.unwrap_or_else(|error| panic!("{method} failed: {error}"))
    }

    /// Like [`Browser::call`], answering DevTools' error instead of failing on it.
    async fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .expect("Chromium did not answer in 30 s")
                .expect("Chromium closed the DevTools connection")
                .unwrap();
            let Message::Text(text) = frame else { continue };
            let answer: Value = serde_json::from_str(&text).unwrap();
            if answer["id"] == json!(id) {
                return match answer.get("error") {
                    Some(_) => Err(answer),
                    None => Ok(answer["result"].clone()),
                };
            }
            if answer.get("method").is_some() {
                if self.events.len() == 500 {
                    self.events.remove(0);
                }
                self.events.push(answer);
            }
        }
    }

    /// Sends one DevTools command to the page.
    pub async fn page_call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session_id.clone();
        self.call(Some(&session), method, params).await
    }

    /// The parameters of the latest event `method` seen so far (DevTools sends events on
    /// the socket; they are read while waiting for answers).
    pub async fn last_event(&mut self, method: &str) -> Option<Value> {
        // A harmless call, so events sent since the last one are read.
        self.call(None, "Browser.getVersion", json!({})).await;
        self.events
            .iter()
            .rev()
            .find(|event| event["method"] == json!(method))
            .map(|event| event["params"].clone())
    }

    /// Opens `url` in the page.
    pub async fn goto(&mut self, url: &str) {
        // Mark the old document so the wait below sees the new one, wherever it redirected.
        self.eval("window.__tetherOldPage = true").await;
        self.page_call("Page.navigate", json!({"url": url})).await;
        self.wait_for("!window.__tetherOldPage && document.readyState === 'complete'")
            .await;
    }

    /// Runs `expression` in the page and returns its value (promises are awaited).
    /// One evaluation that meets a navigation committing (a document a service worker
    /// answers can commit just after `Page.navigate` returns) runs again in the new page.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let params = json!({"expression": expression, "returnByValue": true, "awaitPromise": true});
        let session = self.session_id.clone();
        for _ in 0..3 {
            match self
                .try_call(Some(&session), "Runtime.evaluate", params.clone())
                .await
            {
                Ok(answer) => return answer["result"]["value"].clone(),
                Err(error) if error.to_string().contains("navigated or closed") => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => panic!("Runtime.evaluate failed: {error}"),
            }
        }
        panic!("the page kept navigating while evaluating {expression}");
    }

    /// Waits until `condition` is true in the page; panics with the page's text after 30 s.
    pub async fn wait_for(&mut self, condition: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let probe = format!(
            "(() => {{ try {{ return !!({condition}); }} catch (e) {{ return false; }} }})()"
        );
        while Instant::now() < deadline {
            if self.eval(&probe).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = self
            .eval("document.body ? document.body.innerText : ''")
            .await;
        panic!("timed out waiting for `{condition}`; the page shows:\n{text}");
    }

    /// Sets a form field's value the way typing would.
    pub async fn fill(&mut self, selector: &str, value: &str) {
        let script = format!(
            "(() => {{ const field = document.querySelector({selector}); field.value = {value}; \
             field.dispatchEvent(new Event('input', {{bubbles: true}})); return true; }})()",
            selector = json!(selector),
            value = json!(value),
        );
        assert_eq!(self.eval(&script).await, json!(true), "no field {selector}");
    }

    /// Opens `url` again every half second until `condition` holds there (up to 30 s);
    /// returns whether it did. For pages rendered from state that arrives later.
    pub async fn reload_until(&mut self, url: &str, condition: &str) -> bool {
        for _ in 0..60 {
            self.goto(url).await;
            if self.eval(&format!("!!({condition})")).await == json!(true) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    }

    /// Signs up on the server at `base` through its page; lands on Computers.
    pub async fn sign_up(&mut self, base: &str, name: &str, email: &str) {
        self.goto(&format!("{base}/signup")).await;
        self.fill("input[name=name]", name).await;
        self.fill("input[name=email]", email).await;
        self.fill("input[name=password]", "correct horse battery")
            .await;
        self.click("form[data-api] button[type=submit]").await;
        self.wait_for("location.pathname === '/computers' && document.readyState === 'complete'")
            .await;
    }

    /// Signs in on the server at `base` through its page (the e2e password); lands on
    /// `next`.
    pub async fn sign_in(&mut self, base: &str, email: &str, next: &str) {
        self.goto(&format!("{base}/signin?next={next}")).await;
        self.fill("input[name=email]", email).await;
        self.fill("input[name=password]", "correct horse battery")
            .await;
        self.click("form[data-api] button[type=submit]").await;
        self.wait_for(&format!(
            "location.pathname === {} && document.readyState === 'complete'",
            json!(next)
        ))
        .await;
    }

    /// Makes the page a phone: 390 × 844 CSS pixels, touch, a phone's user agent width.
    pub async fn phone_viewport(&mut self) {
        self.page_call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": true}),
        )
        .await;
        self.page_call(
            "Emulation.setTouchEmulationEnabled",
            json!({"enabled": true, "maxTouchPoints": 5}),
        )
        .await;
    }

    /// Makes the page a desktop window: 1280 × 900 CSS pixels, a mouse, no touch.
    pub async fn desktop_viewport(&mut self) {
        self.page_call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await;
        self.page_call(
            "Emulation.setTouchEmulationEnabled",
            json!({"enabled": false}),
        )
        .await;
    }

    /// Clicks the element `selector` matches.
    pub async fn click(&mut self, selector: &str) {
        let script = format!(
            "(() => {{ const node = document.querySelector({selector}); if (!node) return false; node.click(); return true; }})()",
            selector = json!(selector),
        );
        assert_eq!(
            self.eval(&script).await,
            json!(true),
            "nothing to click at {selector}"
        );
    }

    /// The visible text of the first element `selector` matches.
    pub async fn text(&mut self, selector: &str) -> String {
        let script = format!(
            "document.querySelector({})?.innerText ?? ''",
            json!(selector)
        );
        self.eval(&script)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Browser {
    /// Saves a PNG of the page when `TETHER_SCREENSHOTS` names a folder, for looking at the
    /// pages by eye; does nothing otherwise.
    pub async fn screenshot(&mut self, name: &str) {
        let Ok(folder) = std::env::var("TETHER_SCREENSHOTS") else {
            return;
        };
        let shot = self
            .page_call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let bytes = base64_decode(shot["data"].as_str().unwrap_or_default());
        std::fs::write(
            std::path::Path::new(&folder).join(format!("{name}.png")),
            bytes,
        )
        .unwrap();
    }
}

/// Standard base64, as DevTools sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
