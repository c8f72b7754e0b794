//! Sign-in's way back, in a real Chromium: a `next` that a browser would read as another
//! site (it drops tabs and line breaks and reads `\` as `/` before parsing a URL) lands on
//! this site's home after a real sign-in; a path of this site is followed. And the sign-up
//! page shows why a password is refused.

use crate::chromium::{chromium_or_skip, Browser};
use crate::spawn_server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_never_follows_a_next_off_site() {
    let Some(chromium) = chromium_or_skip("the redirect test") else {
        return;
    };
    let server = spawn_server(None).await;
    let base = server.base.clone();
    let host = base.trim_start_matches("http://").to_owned();
    let mut browser = Browser::launch(&chromium).await;

    // A weak password is refused on the page, with the reason under the form.
    browser.goto(&format!("{base}/signup")).await;
    browser.fill("input[name=name]", "Redirect User").await;
    browser
        .fill("input[name=email]", "redirect@example.com")
        .await;
    browser.fill("input[name=password]", "password").await;
    browser.click("form[data-api] button[type=submit]").await;
    browser
        .wait_for("document.querySelector('form[data-api] .error').textContent.length > 0")
        .await;
    let reason = browser.text("form[data-api] .error").await;
    assert!(
        reason.starts_with("password: is too easy to guess."),
        "{reason}"
    );
    assert!(browser
        .eval("location.pathname === '/signup'")
        .await
        .as_bool()
        .unwrap());
    browser.screenshot("signup-weak-password").await;

    browser
        .sign_up(&base, "Redirect User", "redirect@example.com")
        .await;
    for next in [
        "/%09/evil.example",
        "/%0a/evil.example",
        "/%0d/evil.example",
        "/%0d%0a/evil.example",
        "%09//evil.example",
        "/%5Cevil.example",
        "//evil.example",
        "https://evil.example/",
    ] {
        browser.goto(&format!("{base}/signin?next={next}")).await;
        browser
            .fill("input[name=email]", "redirect@example.com")
            .await;
        browser
            .fill("input[name=password]", "correct horse battery")
            .await;
        browser.click("form[data-api] button[type=submit]").await;
        // Wherever it goes, it leaves the sign-in page; it must stay on this site.
        browser
            .wait_for("location.pathname !== '/signin' && document.readyState === 'complete'")
            .await;
        let at = browser.eval("location.href").await;
        let at = at.as_str().unwrap_or_default().to_owned();
        assert!(
            at.starts_with(&format!("http://{host}/")),
            "next={next} led to {at}"
        );
        assert!(!at.contains("evil"), "next={next} led to {at}");
        // `/` sends a signed-in person to Computers.
        assert!(at.ends_with("/computers"), "next={next} led to {at}");
    }
    // A path of this site is where sign-in goes back to.
    browser
        .sign_in(&base, "redirect@example.com", "/jobs")
        .await;

    // The Account page makes a token, shows it once, lists it after a reload, revokes it.
    browser.goto(&format!("{base}/account")).await;
    browser.fill("#tokens input[name=name]", "ci").await;
    browser
        .click("form[data-api='/api/tokens'] button[type=submit]")
        .await;
    browser
        .wait_for("!document.getElementById('new-token').hidden")
        .await;
    let shown = browser.text("#new-token").await;
    assert!(shown.contains("tut_"), "{shown}");
    browser.screenshot("account-new-token").await;
    browser.goto(&format!("{base}/account")).await;
    let listed = browser.text("#tokens table").await;
    assert!(
        listed.contains("ci") && !listed.contains("tut_"),
        "{listed}"
    );
    browser.eval("window.confirm = () => true").await;
    browser
        .click("#tokens form[data-method=DELETE] button")
        .await;
    browser
        .wait_for("document.readyState === 'complete' && !document.querySelector('#tokens table')")
        .await;
    assert!(browser.text("#tokens").await.contains("No token yet."));
}
