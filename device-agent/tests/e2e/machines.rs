//! Computers and Admin as someone running many machines uses them, in a real Chromium:
//! 120 computers (paired through the API, as the API tests pair them) searched, filtered
//! and sorted, the view kept in the address; rows that change without a reload when a
//! computer stops or takes a job, and a new job that appears on Jobs; stacked rows and
//! 44 px targets on a phone; the admin page's Revoke behind its confirmation.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use rand::RngCore;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_server::rate_limits::RateLimitConfig;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

use crate::chromium::{chromium_or_skip, Browser};
use crate::{spawn_server_with, Web};

const MACHINES: usize = 120;

/// A computer paired through the API, with its device token.
struct Machine {
    id: String,
    name: String,
    token: String,
    install_id: String,
    seal_key: Value,
    agent_version: String,
}

/// A seal key whose kid and fingerprint derive from random SPKI bytes (DESIGN §5).
fn seal_key() -> Value {
    let mut spki = vec![0u8; 91];
    rand::thread_rng().fill_bytes(&mut spki);
    let digest = Sha256::digest(&spki);
    json!({
        "kid": URL_SAFE_NO_PAD.encode(&digest[..16]), "alg": "ECDH-P256",
        "spki": URL_SAFE_NO_PAD.encode(&spki),
        "fingerprint": format!("SHA256:{}", URL_SAFE_NO_PAD.encode(digest)),
    })
}

/// `pair`, `link` as the owner, `register`: what `tether-agent pair` does, without the wait.
async fn pair(http: &reqwest::Client, web: &Web, name: &str, platform: &str) -> Machine {
    let install_id = format!("install-{name}");
    let key = seal_key();
    let res = http
        .post(format!("{}/api/devices/pair", web.base))
        .header("x-tether-protocol", "1")
        .json(
            &json!({ "name": name, "platform": platform, "installId": install_id,
                       "agentVersion": "0.1.0", "sealKey": key }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let paired: Value = res.json().await.unwrap();
    let res = web
        .post(
            "/api/devices/link",
            &json!({ "userCode": paired["userCode"] }),
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = http
        .post(format!("{}/api/devices/register", web.base))
        .header("x-tether-protocol", "1")
        .json(&json!({ "deviceCode": paired["deviceCode"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let registered: Value = res.json().await.unwrap();
    Machine {
        id: registered["deviceId"].as_str().unwrap().to_owned(),
        name: name.to_owned(),
        token: registered["token"].as_str().unwrap().to_owned(),
        install_id,
        seal_key: key,
        agent_version: String::new(),
    }
}

impl Machine {
    fn device_call(
        &self,
        http: &reqwest::Client,
        base: &str,
        path: &str,
    ) -> reqwest::RequestBuilder {
        http.post(format!("{base}{path}"))
            .bearer_auth(&self.token)
            .header("x-tether-protocol", "1")
    }

    /// One heartbeat reporting an agent version and a sandbox strength: online.
    async fn heartbeat(
        &mut self,
        http: &reqwest::Client,
        base: &str,
        version: &str,
        strength: &str,
    ) {
        let capabilities = json!({
            "protocol": 1, "agentVersion": version, "installId": self.install_id,
            "engines": [{ "name": "echo", "kind": "recipe" }], "folders": ["work"],
            "sandbox": { "backend": "test", "strength": strength },
            "sealKey": self.seal_key, "acceptWebApprovals": true,
        });
        let res = self
            .device_call(http, base, "/api/devices/self/heartbeat")
            .json(&json!({ "capabilities": capabilities, "running": [] }))
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.status(),
            StatusCode::OK,
            "{}",
            res.text().await.unwrap()
        );
        self.agent_version = version.to_owned();
    }

    /// Takes the job queued for it: it runs, the computer is busy.
    async fn claim(&self, http: &reqwest::Client, base: &str) -> Value {
        let res = self
            .device_call(http, base, "/api/devices/self/claim")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.json().await.unwrap()
    }

    /// Opens its event stream and closes it as a stopping agent does: offline at once.
    async fn stop(&self, base: &str) {
        let url = format!(
            "{}/api/devices/self/events",
            base.replacen("http://", "ws://", 1)
        );
        let mut request = url.into_client_request().unwrap();
        let headers = request.headers_mut();
        headers.insert(
            "authorization",
            format!("Bearer {}", self.token).parse().unwrap(),
        );
        headers.insert("x-tether-protocol", "1".parse().unwrap());
        let (mut events, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        events
            .send(tokio_tungstenite::tungstenite::Message::Close(Some(
                CloseFrame {
                    code: CloseCode::Normal,
                    reason: "stopping".into(),
                },
            )))
            .await
            .unwrap();
        // The server answers the close once it has recorded the stop.
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(Ok(_)) = events.next().await {}
        })
        .await;
    }
}

/// How many of the table's rows show, and the names of those that do, in order.
const VISIBLE: &str = "(() => { const rows = [...document.querySelectorAll('tbody[data-row]')].filter((r) => !r.hidden); \
    return { count: rows.length, names: rows.map((r) => r.dataset.name), \
             states: [...new Set(rows.map((r) => r.dataset.state))].sort() }; })()";

async fn visible(browser: &mut Browser) -> Value {
    browser.eval(VISIBLE).await
}

async fn choose_show(browser: &mut Browser, value: &str) {
    let script = format!(
        "(() => {{ const s = document.querySelector('select[data-show]'); s.value = {}; \
         s.dispatchEvent(new Event('change', {{bubbles: true}})); return true; }})()",
        json!(value)
    );
    assert_eq!(browser.eval(&script).await, json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computers_with_120_machines_filter_sort_update_live_and_admin_revokes() {
    let Some(chromium) = chromium_or_skip("the Computers table test") else {
        return;
    };
    // Pairing 120 computers from one address is past the limits meant for guessing; an
    // online window longer than the test, so only a stop makes a computer offline.
    let server = spawn_server_with(None, |config| {
        config.rate_limits = RateLimitConfig::off();
        config.online_secs = 3600;
        config.latest_agent_version = Some("0.1.4".to_owned());
    })
    .await;
    let base = server.base.clone();
    let web = Web::sign_up(&base).await;
    let http = reqwest::Client::new();
    let platforms = ["linux", "macos", "windows"];
    let strengths = ["strong", "reduced", "advisory"];
    let mut machines = Vec::with_capacity(MACHINES);
    for i in 0..MACHINES {
        let mut machine = pair(&http, &web, &format!("m-{i:03}"), platforms[i % 3]).await;
        // Every fourth never reports: offline, not seen yet.
        if i % 4 != 0 {
            let version = format!("0.1.{}", i % 5);
            machine
                .heartbeat(&http, &base, &version, strengths[i % 3])
                .await;
        }
        machines.push(machine);
    }
    // Three take a job each: busy.
    for i in [1, 2, 3] {
        web.post(
            "/api/jobs",
            &json!({ "deviceId": machines[i].id, "title": format!("build {i}"), "prompt": "go",
                     "folder": "work", "engine": "echo", "mode": "unattended", "network": false,
                     "timeoutMinutes": 5 }),
        )
        .await;
        machines[i].claim(&http, &base).await;
    }

    let mut browser = Browser::launch(&chromium).await;
    browser.desktop_viewport().await;
    browser
        .sign_in(&base, "owner@example.com", "/computers")
        .await;
    assert_eq!(visible(&mut browser).await["count"], json!(MACHINES));
    assert_eq!(browser.text("[data-count]").await, "120 computers");
    // The pairing steps are folded away once there are computers.
    assert_eq!(
        browser
            .eval("document.querySelector('details.pair-help').open")
            .await,
        json!(false)
    );
    // The agent's column says which are behind the newest release.
    let behind = browser
        .eval("document.querySelectorAll('.m-agent .update').length")
        .await;
    let expected = machines
        .iter()
        .filter(|m| !m.agent_version.is_empty() && m.agent_version != "0.1.4")
        .count();
    assert_eq!(behind, json!(expected));

    // Filters: offline, busy, online.
    choose_show(&mut browser, "offline").await;
    let shown = visible(&mut browser).await;
    assert_eq!(shown["count"], json!(MACHINES / 4), "{shown}");
    assert_eq!(shown["states"], json!(["offline"]));
    assert_eq!(browser.text("[data-count]").await, "30 of 120 computers");
    choose_show(&mut browser, "busy").await;
    let shown = visible(&mut browser).await;
    assert_eq!(
        shown["names"],
        json!(["m-001", "m-002", "m-003"]),
        "{shown}"
    );
    choose_show(&mut browser, "online").await;
    let shown = visible(&mut browser).await;
    assert_eq!(shown["count"], json!(MACHINES - MACHINES / 4), "{shown}");
    assert_eq!(shown["states"], json!(["busy", "online"]));

    // Search, within the filter: the names m-010 … m-019 that are online.
    browser.fill("input[data-search]", "m-01").await;
    let shown = visible(&mut browser).await;
    let expected: Vec<String> = (10..20)
        .filter(|i| i % 4 != 0)
        .map(|i| format!("m-{i:03}"))
        .collect();
    assert_eq!(shown["names"], json!(expected), "{shown}");
    // Sort by name, then the other way.
    browser.click("th[data-sort=name] button").await;
    let shown = visible(&mut browser).await;
    let mut reversed = expected.clone();
    reversed.reverse();
    assert_eq!(shown["names"], json!(reversed), "{shown}");
    assert_eq!(
        browser
            .eval("document.querySelector('th[data-sort=name]').getAttribute('aria-sort')")
            .await,
        json!("descending")
    );
    // The view is in the address and survives a reload.
    let address = browser.eval("location.search").await;
    assert_eq!(address, json!("?q=m-01&show=online&sort=-name"));
    browser
        .goto(&format!("{base}/computers?q=m-01&show=online&sort=-name"))
        .await;
    assert_eq!(visible(&mut browser).await["names"], json!(reversed));
    // Sort by sandbox strength, strongest last; by agent version, newest last.
    browser
        .goto(&format!("{base}/computers?show=online&sort=sandbox"))
        .await;
    let ranks = browser
        .eval("[...document.querySelectorAll('tbody[data-row]')].filter((r) => !r.hidden).map((r) => Number(r.dataset.sandbox))")
        .await;
    let ranks: Vec<u64> = serde_json::from_value(ranks).unwrap();
    assert!(
        ranks.windows(2).all(|w| w[0] <= w[1]) && ranks.first() < ranks.last(),
        "{ranks:?}"
    );
    browser.click("th[data-sort=agent] button").await;
    browser.click("th[data-sort=agent] button").await;
    let first = browser
        .eval("[...document.querySelectorAll('tbody[data-row]')].find((r) => !r.hidden).dataset.agent")
        .await;
    assert_eq!(first, json!("0.1.4"));

    // Live: a computer that stops goes offline, one that takes a job shows it, with no
    // reload of the page.
    browser.goto(&format!("{base}/computers")).await;
    browser.eval("window.__samePage = true").await;
    let stopping = &machines[5];
    assert_eq!(
        browser
            .eval(&format!(
                "document.getElementById('device-{}').dataset.state",
                stopping.id
            ))
            .await,
        json!("online")
    );
    stopping.stop(&base).await;
    browser
        .wait_for(&format!(
            "window.__samePage && document.getElementById('device-{}').dataset.state === 'offline'",
            stopping.id
        ))
        .await;
    let state = browser
        .text(&format!("#device-{} .m-state", stopping.id))
        .await;
    assert!(
        state.contains("offline") && state.contains("last seen"),
        "{state}"
    );
    let taking = &machines[6];
    let res = web
        .post(
            "/api/jobs",
            &json!({ "deviceId": taking.id, "title": "deploy the site", "prompt": "go",
                     "folder": "work", "engine": "echo", "mode": "unattended", "network": false,
                     "timeoutMinutes": 5 }),
        )
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Value = res.json().await.unwrap();
    taking.claim(&http, &base).await;
    browser
        .wait_for(&format!(
            "window.__samePage && document.querySelector('#device-{} .m-job a')?.textContent === 'deploy the site'",
            taking.id
        ))
        .await;
    assert_eq!(
        browser
            .eval(&format!(
                "document.querySelector('#device-{} .m-job a').getAttribute('href')",
                taking.id
            ))
            .await,
        json!(format!("/jobs/{}", job["id"].as_str().unwrap()))
    );
    // Jobs too: a job assigned elsewhere appears.
    browser.goto(&format!("{base}/jobs")).await;
    browser.eval("window.__samePage = true").await;
    let res = web
        .post(
            "/api/jobs",
            &json!({ "deviceId": machines[7].id, "title": "a job from elsewhere", "prompt": "go",
                     "folder": "work", "engine": "echo", "mode": "unattended", "network": false,
                     "timeoutMinutes": 5 }),
        )
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    browser
        .wait_for("window.__samePage && document.getElementById('job-list').textContent.includes('a job from elsewhere')")
        .await;

    // A phone: rows stacked, nothing wider than the screen, navigation targets 44 px.
    browser.phone_viewport().await;
    browser.goto(&format!("{base}/computers")).await;
    assert_eq!(
        browser
            .eval("getComputedStyle(document.querySelector('tr.machine-row')).display")
            .await,
        json!("grid")
    );
    assert_eq!(
        browser
            .eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await,
        json!(true)
    );
    let small = browser
        .eval("[...document.querySelectorAll('header a, header button, details.menu > summary, th[data-sort] button')]\
               .filter((node) => node.getClientRects().length > 0)\
               .map((node) => [node.textContent.trim(), node.getBoundingClientRect()])\
               .filter(([, box]) => box.width < 44 || box.height < 44)\
               .map(([text, box]) => `${text}: ${box.width}×${box.height}`)")
        .await;
    assert_eq!(small, json!([]), "targets under 44 px");

    // The admin page: every computer with its account; Revoke asks first.
    browser.desktop_viewport().await;
    browser.goto(&format!("{base}/admin")).await;
    assert_eq!(visible(&mut browser).await["count"], json!(MACHINES));
    let doomed = &machines[9];
    let revoke = format!("#device-{} button[data-revoke]", doomed.id);
    browser
        .click(&format!("#device-{} details.menu > summary", doomed.id))
        .await;
    browser.click(&revoke).await;
    assert_eq!(
        browser
            .eval("document.getElementById('revoke-dialog').open")
            .await,
        json!(true)
    );
    assert_eq!(
        browser
            .text("#revoke-dialog [data-field=revoke-name]")
            .await,
        doomed.name
    );
    // Cancel keeps it.
    browser.click("#revoke-dialog button[data-close]").await;
    assert_eq!(
        browser
            .eval("document.getElementById('revoke-dialog').open")
            .await,
        json!(false)
    );
    assert!(revoked_at(&web, &doomed.id).await.is_null());
    // Confirmed, it goes.
    browser.click(&revoke).await;
    browser.click("#revoke-dialog button[type=submit]").await;
    browser
        .wait_for(&format!(
            "document.readyState === 'complete' && !document.getElementById('device-{}') && document.querySelectorAll('tbody[data-row]').length === {}",
            doomed.id,
            MACHINES - 1
        ))
        .await;
    assert!(!revoked_at(&web, &doomed.id).await.is_null());
    // The ledger says so, and filters to it.
    browser
        .goto(&format!("{base}/admin?action=device.revoked"))
        .await;
    let ledger = browser.text("#ledger-entries").await;
    assert!(
        ledger.contains("device.revoked") && ledger.contains(&doomed.id),
        "{ledger}"
    );
}

/// The computer's `revokedAt` as the owner's API lists it.
async fn revoked_at(web: &Web, device_id: &str) -> Value {
    let devices: Vec<Value> = web.get("/api/devices").await.json().await.unwrap();
    devices
        .into_iter()
        .find(|device| device["id"] == device_id)
        .map_or(Value::Null, |device| device["revokedAt"].clone())
}
