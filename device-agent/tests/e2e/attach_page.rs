//! Attachments through the pages, in a real headless Chromium sized as a phone and as a
//! desktop: files chosen with the picker (DevTools sets the input's files, as a person's
//! choice does), a picture pasted into the prompt and a file dropped on the form upload
//! one by one; one that could not reach the server is tried again alone; a credential file
//! is refused by the server and says so on its own line; a link that is not http(s) is
//! refused before anything is sent. The job page shows the files (pictures as thumbnails
//! that load) and the links, to the owner alone; Run again keeps the files not removed and
//! takes a new one, sent while it still uploads; Continue offers them again and takes new files.

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::chromium::{chromium_or_skip, Browser};
use crate::{agent_ok, npm, pair, spawn_server, Daemon, Web};

/// A real PNG (the app's icon, 192 × 192), so the thumbnail has something to decode.
const PICTURE: &[u8] = include_bytes!("../../../server/src/pages/assets/icon-192.png");

const ASSIGN_FORM: &str = "form[data-api='/api/jobs']";
const RERUN_FORM: &str = "form[data-api$='/rerun']";
const CONTINUE_FORM: &str = "form[data-api='/api/jobs']:has(input[name=continues])";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Screen {
    Phone,
    Desktop,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_attaches_files_and_a_pasted_picture() {
    attaches_on(Screen::Phone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_attaches_files_and_a_pasted_picture() {
    attaches_on(Screen::Desktop).await;
}

async fn attaches_on(screen: Screen) {
    let Some(chromium) = chromium_or_skip("the attachments page test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let web = Web::sign_up_as(&base, "owner@example.com").await;
    let home = tempfile::tempdir().unwrap();
    let device_id = pair(&base, &web, home.path()).await;
    let work = tempfile::tempdir().unwrap();
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "look", "--", "sh", "-c", "echo looked"],
    )
    .await;
    let _daemon = Daemon::start(home.path());
    web.wait_for_engines(&device_id, &["look"]).await;

    let files = tempfile::tempdir().unwrap();
    let picture = files.path().join("screenshot.png");
    std::fs::write(&picture, PICTURE).unwrap();
    let notes = files.path().join("notes.txt");
    std::fs::write(&notes, "the build fails on line 3\n").unwrap();
    let notes_again = files.path().join("more-notes.txt");
    std::fs::write(&notes_again, "and on line 4\n").unwrap();
    let credentials = files.path().join(".env");
    std::fs::write(&credentials, "API_KEY=secret\n").unwrap();
    let too_big = files.path().join("huge.bin");
    std::fs::File::create(&too_big)
        .unwrap()
        .set_len(25_000_001)
        .unwrap();

    let mut browser = Browser::launch(&chromium).await;
    match screen {
        Screen::Phone => browser.phone_viewport().await,
        Screen::Desktop => browser.desktop_viewport().await,
    }
    browser.sign_in(&base, "owner@example.com", "/assign").await;
    browser
        .wait_for("document.querySelector('select[name=engine]')")
        .await;
    let limits = browser
        .text(&format!("{ASSIGN_FORM} #assign-attach-limits"))
        .await;
    assert!(
        limits.contains("Up to 20 files, 25 MB each, 100 MB in all"),
        "{limits}: {}",
        browser
            .eval("document.querySelector('main').innerHTML")
            .await
    );
    browser.fill("input[name=title]", "Fix the build").await;
    browser
        .fill("textarea[name=prompt]", "See the screenshot.")
        .await;

    // The picker: two files at once, each its own upload.
    choose_files(&mut browser, ASSIGN_FORM, &[&picture, &notes]).await;
    wait_uploaded(&mut browser, ASSIGN_FORM, 2).await;
    assert_eq!(
        browser
            .eval(&thumbnail_loaded(&format!(
                "{ASSIGN_FORM} li.attach-item img.attach-thumb"
            )))
            .await,
        json!(true),
        "the chosen picture's thumbnail shows before it is sent"
    );

    // Too big is refused in the browser, before any upload, naming the limit.
    choose_files(&mut browser, ASSIGN_FORM, &[&too_big]).await;
    let problem = browser
        .text(&format!("{ASSIGN_FORM} .attach-problem"))
        .await;
    assert!(
        problem.contains("huge.bin") && problem.contains("at most 25 MB"),
        "{problem}"
    );
    assert_eq!(items(&mut browser, ASSIGN_FORM).await.len(), 2);

    // A credential file: the server refuses it; the file says why and offers Retry for it
    // alone; submitting is refused while it is listed; Remove takes it away.
    choose_files(&mut browser, ASSIGN_FORM, &[&credentials]).await;
    browser
        .wait_for(&format!(
            "document.querySelector(\"{ASSIGN_FORM} li.attach-item[data-state=failed]\")"
        ))
        .await;
    let failed = format!("{ASSIGN_FORM} li.attach-item[data-state=failed]");
    let why = browser.text(&format!("{failed} .attach-status")).await;
    assert_eq!(
        why, "environment files hold secrets and are never attached.",
        "the server's reason, on the file's own line"
    );
    assert_eq!(
        browser
            .eval(&format!(
                "!document.querySelector(\"{failed} [data-attach-retry]\").hidden \
                 && document.querySelectorAll(\"{ASSIGN_FORM} [data-attach-retry]:not([hidden])\").length === 1"
            ))
            .await,
        json!(true),
        "Retry is offered for the failed file alone"
    );
    browser
        .click(&format!("{ASSIGN_FORM} button[type=submit]"))
        .await;
    browser
        .wait_for(&format!(
            "document.querySelector(\"{ASSIGN_FORM} p.error\").textContent.includes('.env did not upload')"
        ))
        .await;
    if screen == Screen::Desktop {
        accessible(&mut browser, "Assign with a file refused").await;
    }
    browser
        .click(&format!("{failed} [data-attach-remove]"))
        .await;
    assert_eq!(items(&mut browser, ASSIGN_FORM).await.len(), 2);

    // A file that could not reach the server (the browser offline) is tried again alone.
    browser.page_call("Network.enable", json!({})).await;
    network(&mut browser, false).await;
    choose_files(&mut browser, ASSIGN_FORM, &[&notes_again]).await;
    browser
        .wait_for(&format!(
            "document.querySelector(\"{failed} .attach-status\")?.textContent === \
             'The upload did not reach the server.'"
        ))
        .await;
    network(&mut browser, true).await;
    browser
        .click(&format!("{failed} [data-attach-retry]"))
        .await;
    wait_uploaded(&mut browser, ASSIGN_FORM, 3).await;
    browser
        .click(&format!(
            "{ASSIGN_FORM} li.attach-item:last-child [data-attach-remove]"
        ))
        .await;
    assert_eq!(items(&mut browser, ASSIGN_FORM).await.len(), 2);

    // A picture pasted into the prompt, as a phone's or a desktop's clipboard gives it.
    paste_picture(
        &mut browser,
        &format!("{ASSIGN_FORM} textarea[name=prompt]"),
        "pasted.png",
        Then::Wait,
    )
    .await;
    wait_uploaded(&mut browser, ASSIGN_FORM, 3).await;
    assert_eq!(
        browser
            .eval(&format!(
                "document.querySelector(\"{ASSIGN_FORM} textarea[name=prompt]\").value"
            ))
            .await,
        json!("See the screenshot."),
        "pasting a picture leaves the prompt's text alone"
    );
    fits(&mut browser, screen, "Assign with three files").await;
    browser
        .screenshot(&format!("attach-assign-{}", screen.name()))
        .await;

    // A link that is not http(s) is refused in the browser; a good one goes.
    browser
        .fill("textarea[data-links]", "javascript:alert(1)")
        .await;
    browser
        .click(&format!("{ASSIGN_FORM} button[type=submit]"))
        .await;
    browser
        .wait_for(&format!(
            "document.querySelector(\"{ASSIGN_FORM} p.error\").textContent.includes('not an http or https address')"
        ))
        .await;
    assert_eq!(browser.eval("location.pathname").await, json!("/assign"));
    browser
        .fill(
            "textarea[data-links]",
            "https://example.com/spec?a=<b>\n\n  https://example.com/issue/27  ",
        )
        .await;
    browser
        .eval("document.querySelector('select[name=engine]').value = 'look'")
        .await;
    browser
        .click(&format!("{ASSIGN_FORM} button[type=submit]"))
        .await;
    browser
        .wait_for("location.pathname.startsWith('/jobs/')")
        .await;
    let job_id = browser
        .eval("location.pathname.split('/')[2]")
        .await
        .as_str()
        .unwrap()
        .to_owned();

    // The job lists the files in the order given, with the links.
    let job = web.job(&job_id).await;
    let spec = serde_json::to_value(&job.spec).unwrap();
    assert_eq!(
        names(&spec),
        ["screenshot.png", "notes.txt", "pasted.png"],
        "{spec:#}"
    );
    assert_eq!(
        spec["links"],
        json!([
            "https://example.com/spec?a=<b>",
            "https://example.com/issue/27"
        ])
    );
    assert_eq!(spec["attachments"][0]["mediaType"], json!("image/png"));

    // The job page: pictures as thumbnails that loaded, linked to the whole picture; the
    // text file as its name, size and type; the links as text, opening without a referrer.
    browser.goto(&format!("{base}/jobs/{job_id}")).await;
    browser
        .eval("document.getElementById('details').scrollIntoView()")
        .await;
    let pictures = "ul.attachments a.attachment-picture img";
    browser
        .wait_for(&format!(
            "document.querySelectorAll('{pictures}').length === 2 && \
             [...document.querySelectorAll('{pictures}')].every((img) => img.complete && img.naturalWidth > 0)"
        ))
        .await;
    let listed = browser.text("ul.attachments").await;
    assert!(
        listed.contains("notes.txt") && listed.contains("text/plain"),
        "{listed}"
    );
    let links = browser
        .eval(
            "[...document.querySelectorAll('ul.task-links a')].map((a) => \
             [a.textContent, a.getAttribute('href'), a.rel])",
        )
        .await;
    assert_eq!(
        links,
        json!([
            [
                "https://example.com/spec?a=<b>",
                "https://example.com/spec?a=<b>",
                "noopener noreferrer"
            ],
            [
                "https://example.com/issue/27",
                "https://example.com/issue/27",
                "noopener noreferrer"
            ]
        ])
    );
    assert_eq!(
        browser
            .eval("document.querySelectorAll('ul.task-links b').length")
            .await,
        json!(0),
        "a link's text is never markup"
    );
    fits(&mut browser, screen, "the job page").await;
    if screen == Screen::Desktop {
        accessible(&mut browser, "the job page with its files and links").await;
    }
    browser
        .screenshot(&format!("attach-job-{}", screen.name()))
        .await;

    // Owner-only: the owner reads each file, another account gets 404 for every one.
    let stranger = Web::sign_up_as(&base, "stranger@example.com").await;
    for attachment in spec["attachments"].as_array().unwrap() {
        let path = format!(
            "/api/jobs/{job_id}/attachments/{}",
            attachment["id"].as_str().unwrap()
        );
        assert_eq!(web.get(&path).await.status(), StatusCode::OK, "{path}");
        assert_eq!(
            stranger.get(&path).await.status(),
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }

    // Run again lists the files, kept unless removed, and takes a new one.
    web.wait_until_ended(&job_id, Duration::from_secs(60)).await;
    browser
        .reload_until(
            &format!("{base}/jobs/{job_id}"),
            &format!("document.querySelector(\"{RERUN_FORM}\")"),
        )
        .await;
    browser
        .eval(&format!(
            "document.querySelector(\"{RERUN_FORM}\").scrollIntoView()"
        ))
        .await;
    let kept = items(&mut browser, RERUN_FORM).await;
    assert_eq!(kept, ["screenshot.png", "notes.txt", "pasted.png"]);
    browser
        .click(&format!(
            "{RERUN_FORM} li.attach-item[data-attachment-id='{}'] [data-attach-remove]",
            spec["attachments"][1]["id"].as_str().unwrap()
        ))
        .await;
    if screen == Screen::Desktop {
        accessible(&mut browser, "the job page with Run again's files").await;
    }
    // Sent while the pasted picture still uploads: the form waits for it.
    paste_picture(
        &mut browser,
        &format!("{RERUN_FORM} textarea[name=prompt]"),
        "again.png",
        Then::Submit,
    )
    .await;
    browser
        .wait_for(&format!(
            "location.pathname.startsWith('/jobs/') && location.pathname !== '/jobs/{job_id}'"
        ))
        .await;
    let again_id = browser
        .eval("location.pathname.split('/')[2]")
        .await
        .as_str()
        .unwrap()
        .to_owned();
    let again = serde_json::to_value(&web.job(&again_id).await.spec).unwrap();
    assert_eq!(
        names(&again),
        ["screenshot.png", "pasted.png", "again.png"],
        "{again:#}"
    );
    // A re-run's files are copies (ids of its own) of the same bytes.
    assert_eq!(
        again["attachments"][0]["sha256"],
        spec["attachments"][0]["sha256"]
    );
    assert_ne!(again["attachments"][0]["id"], spec["attachments"][0]["id"]);
    assert_eq!(again["links"], spec["links"]);

    // Continue offers the earlier job's files again (copies) and takes new ones, and starts
    // from its links.
    browser.goto(&format!("{base}/jobs/{job_id}")).await;
    browser
        .wait_for(&format!("document.querySelector(\"{CONTINUE_FORM}\")"))
        .await;
    let earlier = names(&spec);
    assert_eq!(
        items(&mut browser, CONTINUE_FORM).await.len(),
        earlier.len()
    );
    // A file dropped on the form, as a file manager's drag gives it.
    let dropped = browser
        .eval(&format!(
            "(() => {{
                const data = new DataTransfer();
                data.items.add(new File(['and on line 5\\n'], 'dropped.txt', {{ type: 'text/plain' }}));
                const form = document.querySelector(\"{CONTINUE_FORM}\");
                const over = new DragEvent('dragover', {{ dataTransfer: data, bubbles: true, cancelable: true }});
                const drop = new DragEvent('drop', {{ dataTransfer: data, bubbles: true, cancelable: true }});
                return [form.dispatchEvent(over), form.dispatchEvent(drop)];
            }})()"
        ))
        .await;
    assert_eq!(dropped, json!([false, false]), "the form takes the drop");
    wait_uploaded(&mut browser, CONTINUE_FORM, earlier.len() + 1).await;
    browser
        .fill(
            &format!("{CONTINUE_FORM} textarea[name=prompt]"),
            "Now line 4.",
        )
        .await;
    browser
        .click(&format!("{CONTINUE_FORM} button[type=submit]"))
        .await;
    browser
        .wait_for(&format!(
            "location.pathname.startsWith('/jobs/') && !['/jobs/{job_id}', '/jobs/{again_id}'].includes(location.pathname)"
        ))
        .await;
    let next_id = browser
        .eval("location.pathname.split('/')[2]")
        .await
        .as_str()
        .unwrap()
        .to_owned();
    let next = web.job(&next_id).await;
    assert_eq!(
        next.continues.as_ref().map(|id| id.as_str()),
        Some(job_id.as_str())
    );
    let next = serde_json::to_value(&next.spec).unwrap();
    let mut expected = earlier.clone();
    expected.push("dropped.txt".to_owned());
    assert_eq!(names(&next), expected, "{next:#}");
    assert_ne!(next["attachments"][0]["id"], spec["attachments"][0]["id"]);
    assert_eq!(next["links"], spec["links"]);
}

impl Screen {
    fn name(self) -> &'static str {
        match self {
            Screen::Phone => "phone",
            Screen::Desktop => "desktop",
        }
    }
}

/// Sets the first file input of `form` to `paths`, as choosing them in the picker does
/// (DevTools fires the input's `change`).
async fn choose_files(browser: &mut Browser, form: &str, paths: &[&Path]) {
    let document = browser.page_call("DOM.getDocument", json!({})).await;
    let found = browser
        .page_call(
            "DOM.querySelector",
            json!({
                "nodeId": document["root"]["nodeId"],
                "selector": format!("{form} fieldset[data-attach] input[type=file][multiple]"),
            }),
        )
        .await;
    let node_id = found["nodeId"].clone();
    assert_ne!(node_id, json!(0), "no file picker in {form}");
    let files: Vec<String> = paths
        .iter()
        .map(|path| path.to_str().unwrap().to_owned())
        .collect();
    browser
        .page_call(
            "DOM.setFileInputFiles",
            json!({"nodeId": node_id, "files": files}),
        )
        .await;
}

/// What follows a paste.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Wait,
    /// Submits the form at once, while the pasted file is still uploading.
    Submit,
}

/// Pastes a picture drawn in the page into `target`, as a `paste` whose clipboard holds a
/// PNG file named `name`.
async fn paste_picture(browser: &mut Browser, target: &str, name: &str, then: Then) {
    let script = format!(
        "(async () => {{
            const canvas = document.createElement('canvas');
            canvas.width = 40; canvas.height = 30;
            const context = canvas.getContext('2d');
            context.fillStyle = '#c0302b'; context.fillRect(0, 0, 40, 30);
            const blob = await new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
            const data = new DataTransfer();
            data.items.add(new File([blob], {name}, {{ type: 'image/png' }}));
            const target = document.querySelector({target});
            target.focus();
            const pasted = target.dispatchEvent(new ClipboardEvent('paste',
                {{ clipboardData: data, bubbles: true, cancelable: true }}));
            {submit}
            return pasted;
        }})()",
        name = json!(name),
        target = json!(target),
        // In the same task as the paste: the upload cannot have ended yet.
        submit = match then {
            Then::Wait => "",
            Then::Submit => "target.form.requestSubmit();",
        },
    );
    // Not cancelled: a clipboard with only a file has no text to paste.
    assert_eq!(
        browser.eval(&script).await,
        json!(false),
        "paste into {target}"
    );
}

/// Waits until `form` lists `count` files, every one uploaded (or kept from the earlier
/// job).
async fn wait_uploaded(browser: &mut Browser, form: &str, count: usize) {
    browser
        .wait_for(&format!(
            "(() => {{ const listed = [...document.querySelectorAll(\"{form} li.attach-item\")]; \
             return listed.length === {count} && listed.every((item) => \
             ['done', 'kept'].includes(item.dataset.state) && item.dataset.attachmentId); }})()"
        ))
        .await;
}

/// The names `form` lists, in order.
async fn items(browser: &mut Browser, form: &str) -> Vec<String> {
    let names = browser
        .eval(&format!(
            "[...document.querySelectorAll(\"{form} li.attach-item .attach-name\")].map((n) => n.textContent)"
        ))
        .await;
    serde_json::from_value(names).unwrap()
}

fn names(spec: &Value) -> Vec<String> {
    spec["attachments"]
        .as_array()
        .map(|listed| {
            listed
                .iter()
                .map(|attachment| attachment["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Takes the page offline or back online.
async fn network(browser: &mut Browser, online: bool) {
    browser
        .page_call(
            "Network.emulateNetworkConditions",
            json!({"offline": !online, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}),
        )
        .await;
}

/// Whether every image `selector` matches has loaded a picture.
fn thumbnail_loaded(selector: &str) -> String {
    format!(
        "(() => {{ const images = [...document.querySelectorAll({selector})]; \
         return images.length > 0 && images.every((img) => img.complete && img.naturalWidth > 0); }})()",
        selector = json!(selector)
    )
}

async fn fits(browser: &mut Browser, screen: Screen, what: &str) {
    assert_eq!(
        browser
            .eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await,
        json!(true),
        "{what} scrolls sideways on a {screen:?}"
    );
}

/// axe-core on the page as it is now (files listed by the script included): no serious
/// or critical violation. Skipped, saying why, where axe-core cannot be installed.
async fn accessible(browser: &mut Browser, what: &str) {
    let Some(dir) = npm::AXE_CORE.installed().await else {
        return;
    };
    let axe = std::fs::read_to_string(dir.join("node_modules/axe-core/axe.min.js")).unwrap();
    browser.eval(&axe).await;
    let problems = browser
        .eval(
            "axe.run(document).then((result) => result.violations \
             .filter((v) => v.impact === 'serious' || v.impact === 'critical') \
             .map((v) => `${v.id}: ${v.help}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`))",
        )
        .await;
    assert_eq!(problems, json!([]), "axe on {what}");
}
