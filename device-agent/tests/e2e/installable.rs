//! The installable app in a real headless Chromium, as a phone (390 × 844) and as a desktop
//! window (1280 × 900): the manifest and its icons, the service worker at scope `/`,
//! Chromium's own installability check, the offline page and the saved Needs me, a push
//! shown as a notification, and the Notifications page's list, kinds and Remove.

use std::time::Duration;

use serde_json::{json, Value};

use crate::chromium::{chromium_or_skip, Browser};
use crate::spawn_server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_installs_works_offline_and_takes_notifications() {
    let Some(chromium) = chromium_or_skip("the installable app test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    for phone in [true, false] {
        let mut browser = Browser::launch(&chromium).await;
        if phone {
            browser.phone_viewport().await;
        } else {
            browser.desktop_viewport().await;
        }
        let email = if phone {
            "phone@example.com"
        } else {
            "desk@example.com"
        };
        browser.sign_up(&base, "Owner", email).await;
        header_fits_one_row(&mut browser, phone).await;
        icons_and_manifest(&mut browser).await;
        service_worker_and_install(&mut browser, &base).await;
        offline(&mut browser, &base).await;
        a_push_shows_a_notification(&mut browser, &base).await;
        notifications_page(&mut browser, &base).await;
    }
}

/// Evaluates `expression` (a promise is awaited) every 200 ms until it is `true`, for at
/// most a minute (the whole suite shares two cores).
async fn eventually(browser: &mut Browser, expression: &str) {
    if !within(browser, expression, 300).await {
        panic!("never true: {expression}");
    }
}

/// Whether `expression` becomes `true` within `tries` evaluations 200 ms apart.
async fn within(browser: &mut Browser, expression: &str, tries: usize) -> bool {
    for _ in 0..tries {
        if browser.eval(expression).await == json!(true) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Every item of the navigation shown sits on the same row, inside the window, with a
/// two-digit Needs me count; Sign out is in the header on a desktop, on the Account page on
/// a phone.
async fn header_fits_one_row(browser: &mut Browser, phone: bool) {
    browser
        .eval("Object.assign(document.getElementById('needs-me-badge'), {textContent: '12', hidden: false})")
        .await;
    let rows = browser
        .eval(
            "new Set([...document.querySelector('header').children]
                .filter((node) => node.getClientRects().length > 0)
                .map((node) => {
                    const box = node.getBoundingClientRect();
                    return Math.round((box.top + box.bottom) / 2);
                })).size",
        )
        .await;
    let fits = browser
        .eval("document.documentElement.scrollWidth <= window.innerWidth && window.innerWidth === (PHONE ? 390 : 1280)"
            .replace("PHONE", &phone.to_string())
            .as_str())
        .await;
    let sign_out = browser
        .eval("document.querySelector('header .sign-out').getClientRects().length > 0")
        .await;
    browser
        .screenshot(if phone {
            "header-phone"
        } else {
            "header-desktop"
        })
        .await;
    assert_eq!(
        (rows, fits, sign_out),
        (json!(1), json!(true), json!(!phone)),
        "phone: {phone}"
    );
}

async fn icons_and_manifest(browser: &mut Browser) {
    let favicon = browser
        .eval("fetch('/favicon.ico').then((r) => [r.status, r.headers.get('content-type')])")
        .await;
    assert_eq!(favicon, json!([200, "image/x-icon"]));
    let head = browser
        .eval(
            "['link[rel=manifest]', 'link[rel=icon][type=\"image/svg+xml\"]', \
              'link[rel=apple-touch-icon]', 'meta[name=theme-color]']
                .map((selector) => !!document.querySelector(selector))",
        )
        .await;
    assert_eq!(head, json!([true, true, true, true]));
    let manifest = browser
        .eval(
            "fetch(document.querySelector('link[rel=manifest]').href)
                .then(async (r) => ({type: r.headers.get('content-type'), body: await r.json()}))",
        )
        .await;
    assert_eq!(manifest["type"], "application/manifest+json");
    let body = &manifest["body"];
    assert_eq!(
        [
            &body["name"],
            &body["start_url"],
            &body["scope"],
            &body["display"]
        ],
        [
            &json!("Tether"),
            &json!("/"),
            &json!("/"),
            &json!("standalone")
        ]
    );
    let icons = body["icons"].as_array().unwrap();
    assert!(icons.iter().any(|icon| icon["purpose"] == "maskable"));
    for icon in icons {
        check_icon(browser, icon).await;
    }
}

/// The icon answers 200 with its type, and a PNG decodes at the size the manifest says.
async fn check_icon(browser: &mut Browser, icon: &Value) {
    let script = format!(
        "fetch({src}).then(async (r) => {{
            const blob = await r.blob();
            const size = blob.type === 'image/png'
                ? await createImageBitmap(blob).then((b) => `${{b.width}}x${{b.height}}`) : 'any';
            return [r.status, blob.type, size];
        }})",
        src = icon["src"]
    );
    let answer = browser.eval(&script).await;
    assert_eq!(
        answer,
        json!([200, icon["type"], icon["sizes"]]),
        "icon {icon}"
    );
}

async fn service_worker_and_install(browser: &mut Browser, base: &str) {
    let registered = browser
        .eval(
            "navigator.serviceWorker.ready.then((r) => [r.scope, r.active.scriptURL, r.active.state])",
        )
        .await;
    assert_eq!(
        registered,
        json!([format!("{base}/"), format!("{base}/sw.js"), "activated"])
    );
    // A document whose load began while the worker was still activating misses its
    // `clients.claim()` (the document did not exist yet) and stays uncontrolled until the
    // next load; one loaded after activation is always controlled.
    let here = browser.eval("location.href").await;
    browser
        .goto(
            here.as_str()
                .unwrap_or_else(|| panic!("no location: {here}")),
        )
        .await;
    eventually(browser, "!!navigator.serviceWorker.controller").await;
    let manifest = browser.page_call("Page.getAppManifest", json!({})).await;
    assert_eq!(manifest["errors"], json!([]), "{manifest}");
    let installable = browser
        .page_call("Page.getInstallabilityErrors", json!({}))
        .await;
    assert_eq!(
        installable["installabilityErrors"],
        json!([]),
        "Chromium would not offer to install: {installable}"
    );
}

/// Takes the page and its service worker off the network: DevTools emulates it per target,
/// and the worker's fetches are its own. Answers the worker sessions, for [`go_online`].
async fn go_offline(browser: &mut Browser) -> Vec<String> {
    browser.page_call("Network.enable", json!({})).await;
    browser
        .page_call("Network.emulateNetworkConditions", conditions(true))
        .await;
    let targets = browser.call(None, "Target.getTargets", json!({})).await;
    let workers: Vec<String> = targets["targetInfos"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|target| target["type"] == "service_worker")
        .map(|target| target["targetId"].as_str().unwrap().to_owned())
        .collect();
    assert!(!workers.is_empty(), "no service worker target: {targets}");
    let mut sessions = Vec::new();
    for target_id in workers {
        let attached = browser
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        let session = attached["sessionId"].as_str().unwrap().to_owned();
        browser
            .call(Some(&session), "Network.enable", json!({}))
            .await;
        browser
            .call(
                Some(&session),
                "Network.emulateNetworkConditions",
                conditions(true),
            )
            .await;
        sessions.push(session);
    }
    sessions
}

async fn go_online(browser: &mut Browser, workers: Vec<String>) {
    browser
        .page_call("Network.emulateNetworkConditions", conditions(false))
        .await;
    for session in workers {
        browser
            .call(
                Some(&session),
                "Network.emulateNetworkConditions",
                conditions(false),
            )
            .await;
        browser
            .call(
                None,
                "Target.detachFromTarget",
                json!({"sessionId": session}),
            )
            .await;
    }
}

fn conditions(offline: bool) -> Value {
    json!({"offline": offline, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
}

/// Offline, a page shows the offline page, and Needs me its saved copy, marked as such.
async fn offline(browser: &mut Browser, base: &str) {
    browser.goto(&format!("{base}/needs-me")).await;
    eventually(
        browser,
        "caches.open('tether-pages-v1').then((c) => c.match('/needs-me')).then((r) => !!r)",
    )
    .await;
    let workers = go_offline(browser).await;
    browser.goto(&format!("{base}/computers")).await;
    assert_eq!(
        (
            browser.text("h1").await,
            browser.eval("location.pathname").await
        ),
        ("You are offline".to_owned(), json!("/computers"))
    );
    assert!(browser
        .text("main")
        .await
        .contains("Tether will load again when the network is back"));
    browser.screenshot("offline").await;
    browser.goto(&format!("{base}/needs-me")).await;
    assert_eq!(browser.text("h1").await, "Needs me");
    let notice = browser.text("#stale-notice").await;
    assert!(notice.contains("may be out of date"), "{notice}");
    browser.screenshot("needs-me-offline").await;
    go_online(browser, workers).await;
    browser.goto(&format!("{base}/needs-me")).await;
    assert_eq!(browser.text("#stale-notice").await, "");
}

/// A push as the server sends it becomes a notification with its title, computer, tag and
/// page; a question stays until acted on. DevTools delivers the push to the worker, as a
/// push service would.
async fn a_push_shows_a_notification(browser: &mut Browser, base: &str) {
    browser
        .call(
            None,
            "Browser.grantPermissions",
            json!({"origin": base, "permissions": ["notifications"]}),
        )
        .await;
    browser.page_call("ServiceWorker.enable", json!({})).await;
    let mut registration = None;
    for _ in 0..50 {
        let event = browser
            .last_event("ServiceWorker.workerRegistrationUpdated")
            .await;
        registration = event.and_then(|event| {
            event["registrations"]
                .as_array()
                .and_then(|all| all.iter().find(|r| r["scopeURL"] == format!("{base}/")))
                .map(|r| r["registrationId"].clone())
        });
        if registration.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let message = json!({"kind": "decision", "title": "Run the test suite?", "computer": "laptop",
                         "url": "/needs-me#d1", "tag": "decision-d1"});
    let registration = registration.expect("no registration");
    // DevTools drops a push that reaches a worker Chromium is still starting or stopping, as
    // a push service would retry it, so it is delivered again until it shows; the tag makes a
    // second delivery replace the first rather than add to it.
    let mut shown = false;
    for _ in 0..20 {
        browser
            .page_call(
                "ServiceWorker.deliverPushMessage",
                json!({"origin": base, "registrationId": registration,
                       "data": message.to_string()}),
            )
            .await;
        shown = within(
            browser,
            "navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((n) => n.length === 1)",
            15,
        )
        .await;
        if shown {
            break;
        }
    }
    assert!(shown, "the push never became a notification");
    let shown = browser
        .eval(
            "navigator.serviceWorker.ready.then((r) => r.getNotifications()).then(([n]) =>
                [n.title, n.body, n.tag, n.data.url, n.requireInteraction])",
        )
        .await;
    assert_eq!(
        shown,
        json!([
            "Run the test suite?",
            "laptop",
            "decision-d1",
            "/needs-me#d1",
            true
        ])
    );
    browser
        .eval("navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((n) => n.forEach((x) => x.close()))")
        .await;
}

/// A subscription made with WebCrypto keys, as a browser with a push service would make it.
const SUBSCRIBE_THROUGH_THE_API: &str = r#"(async () => {
    const b64 = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
        .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    const pair = await crypto.subtle.generateKey({name: "ECDH", namedCurve: "P-256"}, true, ["deriveBits"]);
    const p256dh = b64(await crypto.subtle.exportKey("raw", pair.publicKey));
    const auth = b64(crypto.getRandomValues(new Uint8Array(16)));
    const created = await api("POST", "/api/push/subscriptions", {
        endpoint: "https://fcm.googleapis.com/fcm/send/e2e-" + auth, keys: {p256dh, auth},
        expirationTime: null, name: document.getElementById("push-name").value });
    localStorage.setItem("tether-push-id", created.id);
    return created.id;
})()"#;

/// From Needs me to the Notifications page: subscribe, the list, a kind turned off, Remove.
async fn notifications_page(browser: &mut Browser, base: &str) {
    browser.goto(&format!("{base}/needs-me")).await;
    browser.click("a[href='/account/notifications']").await;
    browser
        .wait_for("location.pathname === '/account/notifications' && !document.getElementById('push-enable').hidden")
        .await;
    let name = browser
        .eval("document.getElementById('push-name').value")
        .await;
    assert!(
        name.as_str().is_some_and(|name| name.contains("Chrome")),
        "{name}"
    );
    browser.fill("#push-name", "Test phone").await;
    browser.click("#push-enable button[type=submit]").await;
    browser
        .wait_for("document.querySelector('li[data-subscription]') || document.querySelector('#push-enable .error').textContent")
        .await;
    let refused = browser.text("#push-enable .error").await;
    if !refused.is_empty() {
        // Headless Chromium has no push service to subscribe with: the page says why, and
        // the rest of the flow runs on a subscription made through the API.
        eprintln!("pushManager.subscribe failed headless ({refused}); subscribing through the API");
        assert!(refused.contains("could not subscribe"), "{refused}");
        browser.eval(SUBSCRIBE_THROUGH_THE_API).await;
        browser.goto(&format!("{base}/account/notifications")).await;
    }
    let item = browser.text("li[data-subscription]").await;
    assert!(
        item.contains("Test phone") && item.contains("this device"),
        "{item}"
    );
    assert!(item.contains("Last delivered: not yet"), "{item}");
    browser.screenshot("notifications").await;

    browser
        .click("li[data-subscription] input[data-kind=job_ended]")
        .await;
    eventually(
        browser,
        "api('GET', '/api/push/subscriptions').then(([s]) =>
            !s.kinds.job_ended && s.kinds.decision && s.kinds.device_offline)",
    )
    .await;
    browser.goto(&format!("{base}/account/notifications")).await;
    let boxes = browser
        .eval("[...document.querySelectorAll('li[data-subscription] input[data-kind]')].map((b) => b.checked)")
        .await;
    assert_eq!(boxes, json!([true, false, true]));

    browser.eval("window.confirm = () => true").await;
    browser.click("li[data-subscription] button.danger").await;
    browser
        .wait_for("!document.querySelector('li[data-subscription]') && document.readyState === 'complete'")
        .await;
    let left = browser.eval("api('GET', '/api/push/subscriptions')").await;
    assert_eq!(left, json!([]));
}
