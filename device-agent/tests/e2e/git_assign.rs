//! Assign's Git choices in a real headless Chromium, as a phone (390 × 844) and as a desktop
//! window (1280 × 900): a computer whose report has `git` is offered them, the choices the
//! server would refuse are disabled, a 422 reads in words next to the form, and the `git`
//! the page posts is read back from the job it made.
//!
//! The computer is a fake one paired and heartbeating over HTTP (as the API tests' devices
//! are), since it only has to be offered work, not run it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::RngCore;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tether_protocol::capabilities::{
    Capabilities, Engine, EngineKind, GitCapability, SandboxReport, SandboxStrength, SealKey,
};
use tether_protocol::git::{BranchChoice, Delivery, GitOptions, MergeChoice};

use crate::chromium::{chromium_or_skip, Browser};
use crate::{spawn_server, Web};

const SUBMIT: &str = "form[data-api='/api/jobs'] button[type=submit]";
/// The page's content is no wider than the screen (the navigation is the layout's).
const FITS: &str = "document.querySelector('main').scrollWidth <= screen.width";

/// Pairs a computer into `web`'s account over HTTP and sends one heartbeat reporting git
/// (with no GitHub sign-in). Returns its id.
async fn fake_git_computer(web: &Web) -> String {
    let http = reqwest::Client::new();
    let seal_key = random_seal_key();
    let paired: Value = http
        .post(format!("{}/api/devices/pair", web.base))
        .header("x-tether-protocol", "1")
        .json(
            &json!({ "name": "git-box", "platform": "linux", "installId": "install-git",
                       "agentVersion": "0.1.0", "sealKey": seal_key }),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let res = web
        .post(
            "/api/devices/link",
            &json!({ "userCode": paired["userCode"] }),
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    let registered: Value = http
        .post(format!("{}/api/devices/register", web.base))
        .header("x-tether-protocol", "1")
        .json(&json!({ "deviceCode": paired["deviceCode"] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let capabilities = Capabilities {
        protocol: 1,
        agent_version: "0.1.0".into(),
        install_id: "install-git".into(),
        engines: vec![Engine {
            name: "echo".into(),
            kind: EngineKind::Recipe,
            check: None,
        }],
        folders: vec!["work".into()],
        sandbox: SandboxReport {
            backend: "none".into(),
            strength: SandboxStrength::Advisory,
            guarantees: Default::default(),
            reasons: vec!["a fake computer".into()],
        },
        seal_key,
        accept_web_approvals: true,
        git: Some(GitCapability {
            version: "2.47.3".into(),
            github_hosts: Vec::new(),
        }),
        evidence: None,
        console: None,
    };
    let res = http
        .post(format!("{}/api/devices/self/heartbeat", web.base))
        .bearer_auth(registered["token"].as_str().unwrap())
        .header("x-tether-protocol", "1")
        .json(&json!({ "capabilities": capabilities, "running": [] }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    registered["deviceId"].as_str().unwrap().to_owned()
}

/// A seal key whose kid and fingerprint derive from random SPKI bytes; this computer never
/// opens a sealed value.
fn random_seal_key() -> SealKey {
    let mut spki = vec![0u8; 91];
    rand::thread_rng().fill_bytes(&mut spki);
    let digest = Sha256::digest(&spki);
    SealKey {
        kid: URL_SAFE_NO_PAD.encode(&digest[..16]),
        alg: "ECDH-P256".into(),
        spki: URL_SAFE_NO_PAD.encode(&spki),
        fingerprint: format!("SHA256:{}", URL_SAFE_NO_PAD.encode(digest)),
    }
}

async fn is(browser: &mut Browser, expression: &str) -> bool {
    browser.eval(&format!("!!({expression})")).await == json!(true)
}

/// Submits the Assign form and returns the id of the job page it went to.
async fn assign(browser: &mut Browser) -> String {
    browser.click(SUBMIT).await;
    browser
        .wait_for("location.pathname.startsWith('/jobs/') && document.readyState === 'complete'")
        .await;
    let path = browser.eval("location.pathname").await;
    path.as_str()
        .unwrap()
        .trim_start_matches("/jobs/")
        .to_owned()
}

/// The phone: Pull request needs network; a refused branch name reads in words; a new
/// branch with the default name, a base, merging automatically, a worktree.
async fn pull_request_on_a_new_branch(browser: &mut Browser, web: &Web) {
    browser.fill("input[name=title]", "Fix the login").await;
    assert!(
        is(
            browser,
            "document.querySelector('input[value=pull_request]').disabled"
        )
        .await
    );
    assert!(
        is(
            browser,
            "!document.querySelector('#git-network-note').hidden"
        )
        .await
    );
    assert!(
        is(
            browser,
            "document.querySelector('#git-pull-request').hidden"
        )
        .await
    );
    browser.click("input[name=network]").await;
    browser.click("input[value=pull_request]").await;
    assert!(
        is(
            browser,
            "!document.querySelector('#git-pull-request').hidden"
        )
        .await
    );
    let needs = browser.text("#git-needs-github").await;
    assert!(needs.contains("tether-agent github add"), "{needs}");
    // Unattended cannot ask before merging.
    browser
        .eval("(() => { const mode = document.querySelector('select[name=mode]'); mode.value = 'unattended'; mode.dispatchEvent(new Event('change', {bubbles: true})); })()")
        .await;
    assert!(
        is(
            browser,
            "document.querySelector('input[name=git-merge][value=ask]').disabled"
        )
        .await
    );
    assert!(is(browser, "!document.querySelector('#git-ask-note').hidden").await);

    // A name the server refuses: its words, next to the form, and no job.
    browser
        .click("input[name=git-branch][value=existing]")
        .await;
    browser.fill("input[data-git=existing]", "a..b").await;
    browser.click(SUBMIT).await;
    browser
        .wait_for("document.querySelector('form .error').textContent !== ''")
        .await;
    let error = browser.text("form p.error").await;
    assert!(
        error.starts_with("Branch: must not contain '..'"),
        "{error}"
    );

    browser.click("input[name=git-branch][value=new]").await;
    browser.fill("input[data-git=base]", "main").await;
    browser.click("input[name=git-merge][value=auto]").await;
    browser.click("input[data-git=worktree]").await;
    assert!(is(browser, FITS).await, "the form is wider than a phone");
    browser.screenshot("assign-git-phone").await;
    browser
        .eval("document.querySelector('fieldset.git').scrollIntoView()")
        .await;
    browser.screenshot("assign-git-phone-choices").await;
    let job_id = assign(browser).await;

    let git = web.job(&job_id).await.spec.git.unwrap();
    let Some(BranchChoice::New(branch)) = &git.branch else {
        panic!("no new branch: {git:?}");
    };
    assert!(
        branch.starts_with("tether/") && branch.ends_with("/fix-the-login"),
        "{branch}"
    );
    let expected = GitOptions {
        delivery: Delivery::PullRequest,
        branch: git.branch.clone(),
        base: Some("main".into()),
        merge: Some(MergeChoice::Auto),
        worktree: true,
    };
    assert_eq!(git, expected);
    let line = browser.text("[data-field=git]").await;
    assert!(
        line.starts_with(&format!("Pull request on a new branch {branch} into main")),
        "{line}"
    );
}

/// The desktop: Commit on an existing branch, after the last job's Pull request (which
/// starts as Push, network access being off).
async fn commit_on_an_existing_branch(browser: &mut Browser, web: &Web) {
    assert!(
        is(
            browser,
            "document.querySelector('input[value=push]').checked"
        )
        .await,
        "starts from the last job"
    );
    assert!(
        is(
            browser,
            "document.querySelector('input[data-git=worktree]').checked"
        )
        .await
    );
    browser.click("input[data-git=worktree]").await;
    browser.fill("input[name=title]", "Tidy up").await;
    browser.click("input[value=commit]").await;
    assert!(
        is(
            browser,
            "document.querySelector('#git-pull-request').hidden"
        )
        .await
    );
    browser
        .click("input[name=git-branch][value=existing]")
        .await;
    browser.fill("input[data-git=existing]", "main").await;
    assert!(is(browser, FITS).await);
    browser.screenshot("assign-git-desktop").await;
    let job_id = assign(browser).await;
    let git = web.job(&job_id).await.spec.git.unwrap();
    let expected = GitOptions {
        delivery: Delivery::Commit,
        branch: Some(BranchChoice::Existing("main".into())),
        base: None,
        merge: None,
        worktree: false,
    };
    assert_eq!(git, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assign_sends_the_git_choices_as_picked() {
    let Some(chromium) = chromium_or_skip("the Assign git choices test") else {
        return;
    };
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    fake_git_computer(&web).await;
    let mut browser = Browser::launch(&chromium).await;
    browser.phone_viewport().await;
    browser
        .sign_in(&server.base, "owner@example.com", "/assign")
        .await;
    assert_eq!(browser.eval("screen.width").await, json!(390));
    pull_request_on_a_new_branch(&mut browser, &web).await;

    browser.desktop_viewport().await;
    browser.goto(&format!("{}/assign", server.base)).await;
    assert_eq!(browser.eval("window.innerWidth").await, json!(1280));
    commit_on_an_existing_branch(&mut browser, &web).await;
}
