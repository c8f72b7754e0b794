//! The spaces pages: `/spaces`, `/spaces/{id}` (members only; owners get the invitations
//! and the ledger), `/invitations`, the Space choice on Assign, and a member's job page,
//! which has no log, diff, folder, question or owner's action and never a line of command
//! output.

use reqwest::redirect::Policy;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{job_body, spawn_app, WebClient};
use crate::spaces::{finished_space_job, join, made_space, PRIVATE};

async fn html(web: &WebClient, path: &str) -> (u16, String) {
    let res = web.get(path).await;
    let status = res.status().as_u16();
    (status, res.text().await.unwrap())
}

both_backends! {
    async fn a_space_page_is_its_members_and_the_404_page_for_anyone_else(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let carol = app.user("carol@example.com").await;
        let space_id = made_space(&ann, "Web <b>team</b>").await;
        join(&ann, &bob, &space_id, "member").await;

        // The list: each space with the caller's role and its count; a form for a new one.
        let (status, page) = html(&ann, "/spaces").await;
        assert_eq!(status, 200);
        assert!(page.contains(r#"<a href="/spaces">Spaces</a>"#), "the navigation links it: {page}");
        assert!(page.contains(&format!(r#"href="/spaces/{space_id}""#)), "{page}");
        assert!(page.contains("Web &lt;b&gt;team&lt;/b&gt;") && !page.contains("<b>team</b>"), "{page}");
        assert!(page.contains(r#"<span class="badge">owner</span>"#) && page.contains("2 members"), "{page}");
        assert!(page.contains(r#"data-api="/api/spaces" data-redirect="/spaces/{id}""#), "{page}");
        let (_, page) = html(&carol, "/spaces").await;
        assert!(!page.contains(&space_id) && page.contains("You are in no space yet"), "{page}");

        // The owner's page: live jobs, members with roles to change, Invite with the links
        // still waiting, the ledger.
        let path = format!("/api/spaces/{space_id}/invitations");
        assert_eq!(ann.post(&path, &json!({ "role": "viewer" })).await.status(), StatusCode::CREATED);
        let (status, page) = html(&ann, &format!("/spaces/{space_id}")).await;
        assert_eq!(status, 200);
        assert!(page.contains("You are an owner here · 2 members"), "{page}");
        assert!(page.contains(&format!(r#"data-space-events="/api/spaces/{space_id}/events""#)), "{page}");
        assert!(page.contains(r#"<script src="/assets/spaces.js" defer>"#), "{page}");
        assert!(page.contains(&format!(r#"data-invite="/api/spaces/{space_id}/invitations""#)), "{page}");
        assert!(page.contains(r#"data-method="PATCH""#) && page.contains(">Remove</button>"), "{page}");
        assert!(page.contains(">Leave</button>") && page.contains(r#"id="ledger-heading""#), "{page}");
        assert!(page.contains("joined as a member") && page.contains("made an invitation link for a member"), "{page}");
        assert!(page.contains("viewer · made by Tester · works until"), "the waiting link: {page}");
        assert!(!page.contains("member · made by"), "a used link is not waiting: {page}");

        // A member's: the jobs and the members, nothing an owner manages.
        let (status, page) = html(&bob, &format!("/spaces/{space_id}")).await;
        assert_eq!(status, 200);
        assert!(page.contains("You are a member here"), "{page}");
        assert!(page.contains(&format!(r#"href="/assign?space={space_id}""#)), "{page}");
        assert!(!page.contains("data-invite") && !page.contains("ledger-heading"), "{page}");
        assert!(!page.contains(r#"data-method="PATCH""#) && !page.contains(">Remove</button>"), "{page}");
        assert_eq!(page.matches(">Leave</button>").count(), 1, "only for themself: {page}");

        // A viewer may not assign: no link to Assign.
        let dan = app.user("dan@example.com").await;
        join(&ann, &dan, &space_id, "viewer").await;
        let (_, page) = html(&dan, &format!("/spaces/{space_id}")).await;
        assert!(page.contains("You are a viewer here") && !page.contains("/assign?space="), "{page}");

        // Anyone else, an unknown space and a malformed id: the 404 page.
        for path in [
            format!("/spaces/{space_id}"),
            "/spaces/01900000-0000-7000-8000-000000000000".to_owned(),
            "/spaces/nonsense".to_owned(),
        ] {
            let (status, page) = html(&carol, &path).await;
            assert_eq!(status, 404, "{path}");
            assert!(page.contains("<h1>Not found</h1>") && !page.contains("team"), "{page}");
        }

        // Signed out: sign in first, and back.
        let signed_out = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
        let res = signed_out.get(format!("{}/spaces/{space_id}", app.base)).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::SEE_OTHER);
        assert_eq!(res.headers()["location"], format!("/signin?next=/spaces/{space_id}").as_str());

        // Removed: the page is gone at once.
        let res = ann.delete(&format!("/api/spaces/{space_id}/members/{}", bob.me().await.account.id)).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert_eq!(html(&bob, &format!("/spaces/{space_id}")).await.0, 404);
    }

    async fn the_invitation_page_never_holds_the_secret(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let space_id = made_space(&ann, "Team").await;
        let made: Value = ann
            .post(&format!("/api/spaces/{space_id}/invitations"), &json!({ "role": "viewer" }))
            .await
            .json()
            .await
            .unwrap();
        let token = made["token"].as_str().unwrap();

        // Signed out: a page (not a redirect, which would lose the fragment's place) with
        // ways to sign in and up that come back here; the script keeps the secret.
        let (status, page) = html(&app.web(), "/invitations").await;
        assert_eq!(status, 200);
        assert!(page.contains("data-invitation-signed-out"), "{page}");
        assert!(page.contains(r#"href="/signin?next=/invitations""#) && page.contains(r#"href="/signup?next=/invitations""#), "{page}");
        assert!(page.contains(r#"<script src="/assets/spaces.js" defer>"#), "{page}");

        // Signed in: the script asks what it joins; the page itself names nothing.
        let bob = app.user("bob@example.com").await;
        let (status, page) = html(&bob, "/invitations").await;
        assert_eq!(status, 200);
        assert!(page.contains("data-invitation-page") && page.contains("data-accept"), "{page}");
        assert!(!page.contains("Team") && !page.contains(token) && !page.contains("tsi_"), "{page}");

        let script = bob.get("/assets/spaces.js").await;
        assert!(script.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
        let script = script.text().await.unwrap();
        assert!(script.contains("sessionStorage") && script.contains("/api/invitations/lookup"), "{script}");
        assert!(!script.contains("innerHTML"), "text from the server never becomes markup");
    }

    async fn a_members_job_page_shows_what_the_run_did_and_nothing_of_the_owners(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let space_id = made_space(&ann, "Team").await;
        join(&ann, &bob, &space_id, "member").await;
        let failed = ("failed", "exit code 2", 2);
        let (device, job_id) = finished_space_job(&app, &ann, &space_id, "Fix the build", failed).await;
        let path = format!("/jobs/{job_id}");

        // The owner's page is whole, and names the space.
        let (status, page) = html(&ann, &path).await;
        assert_eq!(status, 200);
        assert!(page.contains(&format!(r#"<span data-field="space">in <a href="/spaces/{space_id}">Team</a></span>"#)), "{page}");
        assert!(page.contains("data-log=") && page.contains(PRIVATE), "{page}");

        let (status, page) = html(&bob, &path).await;
        assert_eq!(status, 200);
        // Followed like the owner's page, from the member's view of the job.
        assert!(page.contains(&format!(r#"data-job-live="/api/jobs/{job_id}""#)), "{page}");
        assert!(page.contains(r#"<span data-field="state" class="badge state-failed">failed</span>"#), "{page}");
        assert!(page.contains("<h1>Fix the build</h1>") && page.contains("Assigned by <strong>Tester</strong>"), "{page}");
        assert!(page.contains(&format!(r#"in <a href="/spaces/{space_id}">Team</a>"#)), "{page}");
        assert!(page.contains(r#"<span data-field="computer">on laptop</span>"#), "{page}");
        // The timeline's entries: the message, the command and its exit.
        assert!(page.contains("I will run the tests."), "{page}");
        assert!(page.contains(r#"<code class="command-line">$ cargo test</code>"#), "{page}");
        assert!(page.contains(r#"data-field="exit">exit code 0</span>"#), "{page}");
        // The report, and which files changed, without their diffs.
        assert!(page.contains("Ran the tests.") && page.contains(r#"<span class="file-name">src/lib.rs</span>"#), "{page}");
        assert!(page.contains("1 file changed, +2 \u{2212}1"), "{page}");
        // None of what is the owner's: output, stderr, the question, the log, diffs, the
        // folder, the answers, and every action on the job.
        assert!(!page.contains(PRIVATE), "{page}");
        for owners in [
            "data-log", "log.js", "/lines", "/log\"", "data-changes", "data-diff-path", "/diff",
            "data-files", "data-job-decisions", "decision-", "data-answer", "/cancel", "/rerun",
            "/console", "Watch", "data-held", "results.js", "job.js", "continues",
        ] {
            assert!(!page.contains(owners), "{owners} on a member's page: {page}");
        }
        // The routes those would use are the owner's.
        for owners in ["lines", "log", "diff?path=src/lib.rs", "tree", "file?path=src/lib.rs"] {
            let res = bob.get(&format!("/api/jobs/{job_id}/{owners}")).await;
            assert_eq!(res.status(), StatusCode::NOT_FOUND, "{owners}");
        }

        // Someone outside the space gets the 404 page.
        let carol = app.user("carol@example.com").await;
        let (status, page) = html(&carol, &path).await;
        assert_eq!(status, 404);
        assert!(!page.contains("Fix the build"), "{page}");
        drop(device);
    }

    async fn assign_offers_only_the_spaces_the_caller_assigns_in(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        app.device(&bob, "install-bob").await;

        // No space: no Space choice at all.
        let (_, page) = html(&bob, "/assign").await;
        assert!(page.contains("Assign to laptop") && !page.contains(r#"name="spaceId""#), "{page}");

        let owned = made_space(&bob, "Bob's own").await;
        let member = made_space(&ann, "Ann's team").await;
        let viewer = made_space(&ann, "Ann's board").await;
        join(&ann, &bob, &member, "member").await;
        join(&ann, &bob, &viewer, "viewer").await;
        let (_, page) = html(&bob, "/assign").await;
        assert!(page.contains(r#"<select name="spaceId" data-json"#), "{page}");
        assert!(page.contains(r#"<option value="null" selected>Personal (only you)</option>"#), "{page}");
        for assigns in [&owned, &member] {
            assert!(page.contains(&format!(r#"<option value="&quot;{assigns}&quot;">"#)), "{assigns}: {page}");
        }
        assert!(!page.contains(&viewer) && !page.contains("board"), "a viewer's space: {page}");

        // From a space's page: that space chosen, and kept when the computer changes.
        let (_, page) = html(&bob, &format!("/assign?space={member}")).await;
        assert!(page.contains(&format!(r#"<option value="&quot;{member}&quot;" selected>"#)), "{page}");
        assert!(page.contains(&format!(r#"data-navigate="/assign?space={member}&amp;device=""#)), "{page}");
        let (_, page) = html(&bob, &format!("/assign?space={viewer}")).await;
        assert!(page.contains(r#"<option value="null" selected>"#), "{page}");

        // What the select sends is what the API takes.
        let device_id = bob.devices().await[0].id.to_string();
        let mut body = job_body(&device_id);
        body["spaceId"] = serde_json::from_str::<Value>(&format!("\"{member}\"")).unwrap();
        assert_eq!(bob.post("/api/jobs", &body).await.status(), StatusCode::CREATED);
        body["spaceId"] = Value::Null;
        let res = bob.post("/api/jobs", &body).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let personal: Value = res.json().await.unwrap();
        assert!(personal.get("spaceId").is_none_or(Value::is_null), "{personal}");
    }
}
