//! Shared spaces: single-use invitations, roles, the space ledger, space jobs on their
//! creator's computer, what members see of them (and the 404 on everything else, on every
//! job and device route the OpenAPI document lists), removal at once on two replicas, and
//! the context route answering from the space.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::{Method, Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::both_backends;
use crate::helpers::{
    assert_error, job_body, spawn_app, two_replicas, DeviceClient, SseStream, TestApp, WebClient,
};

const SOON: Duration = Duration::from_secs(5);
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";
/// Text only the job's owner may ever read: command output, stderr, a question, secret and
/// attachment names, a held file.
pub(crate) const PRIVATE: &str = "PRIVATE-7f3a";

pub(crate) async fn made_space(web: &WebClient, name: &str) -> String {
    let res = web.post("/api/spaces", &json!({ "name": name })).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let space: Value = res.json().await.unwrap();
    assert_eq!(space["role"], "owner");
    assert_eq!(space["members"], 1);
    space["id"].as_str().unwrap().to_owned()
}

/// A new invitation's secret, from its link's fragment.
async fn invitation(web: &WebClient, space_id: &str, role: &str) -> String {
    let res = web
        .post(
            &format!("/api/spaces/{space_id}/invitations"),
            &json!({ "role": role }),
        )
        .await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let made: Value = res.json().await.unwrap();
    let link = made["link"].as_str().unwrap();
    let (before, token) = link.split_once('#').unwrap();
    assert!(before.ends_with("/invitations"), "{link}");
    assert_eq!(token, made["token"].as_str().unwrap());
    assert!(token.starts_with("tsi_"));
    token.to_owned()
}

async fn accept(web: &WebClient, token: &str) -> Response {
    web.post("/api/invitations/accept", &json!({ "token": token }))
        .await
}

/// `space_id` with `web` in it as `role`.
pub(crate) async fn join(owner: &WebClient, web: &WebClient, space_id: &str, role: &str) {
    let token = invitation(owner, space_id, role).await;
    let res = accept(web, &token).await;
    assert_eq!(res.status(), StatusCode::OK);
    let space: Value = res.json().await.unwrap();
    assert_eq!(
        (space["id"].as_str(), space["role"].as_str()),
        (Some(space_id), Some(role))
    );
}

fn space_job(device_id: &str, space_id: &str) -> Value {
    let mut body = job_body(device_id);
    body["spaceId"] = json!(space_id);
    body
}

/// A device route under its lease.
async fn device_send(
    device: &DeviceClient,
    method: Method,
    path: &str,
    lease: &str,
    body: Option<&Value>,
) -> Response {
    let mut request = device
        .http
        .request(method, format!("{}{path}", device.base))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease);
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.unwrap()
}

async fn evidence(device: &DeviceClient, job_id: &str, lease: &str, id: &str, held: bool) {
    let mut meta = json!({ "id": id, "kind": "screenshot", "name": format!("{id}.png"),
                           "size": PNG.len(), "sha256": hex(&Sha256::digest(PNG)) });
    let mut request = device
        .http
        .post(format!(
            "{}/api/devices/self/jobs/{job_id}/evidence",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease);
    if held {
        meta["held"] = json!(true);
        meta["name"] = json!(format!("{PRIVATE}.png"));
    } else {
        request = request
            .header("content-type", "application/octet-stream")
            .body(PNG.to_vec());
    }
    let header = URL_SAFE_NO_PAD.encode(meta.to_string());
    let res = request
        .header("x-tether-evidence", header)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED, "{id}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How a space job of the tests ends: its outcome, summary and exit code.
pub(crate) type Ending = (&'static str, &'static str, i32);
pub(crate) const SUCCEEDED: Ending = ("succeeded", "Tests pass.", 0);

/// Ann's space job `title`, run to `ending` on Ann's computer: an agent's message, a command
/// with private output and its exit, private stderr, a question, an uploaded and a held
/// file, a report and changed files.
pub(crate) async fn finished_space_job(
    app: &TestApp,
    ann: &WebClient,
    space_id: &str,
    title: &str,
    ending: Ending,
) -> (DeviceClient, String) {
    let device = app.device(ann, "install-ann").await;
    let mut body = space_job(&device.device_id, space_id);
    body["title"] = json!(title);
    body["secrets"] = json!([format!("{PRIVATE}_TOKEN")]);
    let res = ann.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Value = res.json().await.unwrap();
    assert_eq!(job["spaceId"], space_id);
    let job_id = job["id"].as_str().unwrap().to_owned();
    let claimed = device.claim_job().await;
    let lease = claimed.lease_token.expose().to_owned();
    let lines = json!({ "seq": 1, "lines": [
        "agent: scripted 1.0",
        "I will run the tests.",
        "$ cargo test",
        format!("term-1: {PRIVATE} output of the tests"),
        "term-1: exit code 0",
        format!("stderr: {PRIVATE} on stderr"),
        format!("wrote {PRIVATE}.rs"),
    ]});
    assert_eq!(
        device.progress(&job_id, &lease, &lines).await.status(),
        StatusCode::OK
    );
    let ask = json!({ "kind": "command", "question": format!("{PRIVATE}: push?"),
                      "action": { "command": ["git", "push"], "folder": "work" },
                      "actionHash": "9f86d081884c7d659a2feb8e8bfa6ac5c9f4b8b2c4c53e1f1e0c6e8d2b1a3f40",
                      "expiresInSecs": 600 });
    let path = format!("/api/devices/self/jobs/{job_id}/ask");
    let res = device_send(&device, Method::POST, &path, &lease, Some(&ask)).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    evidence(&device, &job_id, &lease, "shot", false).await;
    evidence(&device, &job_id, &lease, "kept", true).await;
    let (outcome, summary, exit_code) = ending;
    let end = json!({ "outcome": outcome, "summary": summary, "exitCode": exit_code,
        "report": { "summary": "Ran the tests.", "done": ["the tests"] },
        "changes": { "base": { "kind": "git", "head": "4b825dc642cb6eb9a060e54bf8d69288fbee4904" },
                     "files": [{ "path": "src/lib.rs", "status": "modified", "additions": 2,
                                 "deletions": 1, "binary": false, "flags": [] }],
                     "totals": { "files": 1, "additions": 2, "deletions": 1 }, "truncated": false } });
    assert_eq!(
        device.complete(&job_id, &lease, &end).await.status(),
        StatusCode::OK
    );
    (device, job_id)
}

/// Every `/api/jobs/{id}…` and `/api/devices/{id}…` route of the OpenAPI document, each
/// method, with the job's and its computer's ids filled in.
async fn owner_routes(app: &TestApp, job_id: &str, device_id: &str) -> Vec<(Method, String)> {
    let document: Value = reqwest::get(format!("{}/api/openapi.json", app.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut routes = Vec::new();
    for (path, operations) in document["paths"].as_object().unwrap() {
        let filled = if let Some(rest) = path.strip_prefix("/api/jobs/{id}") {
            format!("/api/jobs/{job_id}{rest}")
        } else if let Some(rest) = path.strip_prefix("/api/devices/{id}") {
            format!("/api/devices/{device_id}{rest}")
        } else {
            continue;
        };
        let filled = filled
            .replace("{evidence_id}", "kept")
            .replace("{decision_id}", "d1")
            .replace("{attachment_id}", "a1");
        for method in operations.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            routes.push((method, filled.clone()));
        }
    }
    assert!(routes.len() >= 20, "{routes:?}");
    routes
}

async fn send(web: &WebClient, method: &Method, path: &str) -> Response {
    // As a browser sends it: the console's socket checks the origin first.
    let mut request = web
        .http
        .request(method.clone(), format!("{}{path}", web.base))
        .header("origin", &web.base);
    if let Some(csrf) = &web.csrf {
        request = request.header("x-tether-csrf", csrf);
    }
    if *method != Method::GET && *method != Method::DELETE {
        request = request.json(&json!({}));
    }
    request.send().await.unwrap()
}

both_backends! {
    async fn an_invitation_works_once_for_seven_days(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let cat = app.user("cat@example.com").await;
        let eve = app.user("eve@example.com").await;
        let space_id = made_space(&ann, "Platform team").await;

        let token = invitation(&ann, &space_id, "member").await;
        let res = bob.post("/api/invitations/lookup", &json!({ "token": token })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let preview: Value = res.json().await.unwrap();
        assert_eq!(preview["spaceName"], "Platform team");
        assert_eq!(preview["role"], "member");
        assert_eq!(preview["invitedBy"], ann.me().await.account.name);
        let res = accept(&bob, &token).await;
        assert_eq!(res.status(), StatusCode::OK);
        // Single use: the same link again, for anyone, is gone.
        assert_error(accept(&cat, &token).await, 410, "invitation_gone").await;
        let res = cat.post("/api/invitations/lookup", &json!({ "token": token })).await;
        assert_error(res, 410, "invitation_gone").await;

        // Someone already in the space leaves the link unused for the next person.
        let token = invitation(&ann, &space_id, "viewer").await;
        assert_error(accept(&bob, &token).await, 409, "already_member").await;
        assert_eq!(accept(&cat, &token).await.status(), StatusCode::OK);

        // Revoked by an owner (not by a member, not twice): gone at once.
        let res = ann
            .post(&format!("/api/spaces/{space_id}/invitations"), &json!({ "role": "member" }))
            .await;
        let made: Value = res.json().await.unwrap();
        let revoke = format!("/api/spaces/{space_id}/invitations/{}", made["id"].as_str().unwrap());
        assert_error(bob.delete(&revoke).await, 403, "forbidden").await;
        assert_error(eve.delete(&revoke).await, 404, "not_found").await;
        assert_eq!(ann.delete(&revoke).await.status(), StatusCode::NO_CONTENT);
        assert_error(ann.delete(&revoke).await, 404, "not_found").await;
        let token = made["token"].as_str().unwrap();
        assert_error(accept(&eve, token).await, 410, "invitation_gone").await;

        // Seven days, then gone.
        let token = invitation(&ann, &space_id, "member").await;
        app.advance(Duration::from_secs(7 * 24 * 3600 + 1));
        assert_error(accept(&eve, &token).await, 410, "invitation_gone").await;

        // Unknown, malformed and hostile tokens.
        for bad in ["tsi_unknown", "", "tsi_../../x", &"tsi_a".repeat(100), "tut_abc"] {
            assert_error(accept(&eve, bad).await, 404, "not_found").await;
        }
        let res = eve.post("/api/invitations/accept", &json!({ "token": "tsi_x", "role": "owner" })).await;
        assert_error(res, 400, "invalid_request").await;
        let res = eve.post("/api/invitations/accept", &json!({ "token": 7 })).await;
        assert_error(res, 400, "invalid_request").await;

        let detail: Value = ann.get(&format!("/api/spaces/{space_id}")).await.json().await.unwrap();
        let roles: Vec<&str> = detail["members"].as_array().unwrap().iter()
            .map(|member| member["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["owner", "member", "viewer"]);
        // The expired one is not open any more; none is.
        assert_eq!(detail["invitations"], json!([]));
        // Members see the members, not the invitations; others see nothing.
        let seen: Value = bob.get(&format!("/api/spaces/{space_id}")).await.json().await.unwrap();
        assert_eq!(seen["space"]["role"], "member");
        assert_eq!(seen["members"].as_array().unwrap().len(), 3);
        for path in ["", "/ledger", "/jobs", "/events"] {
            let res = eve.get(&format!("/api/spaces/{space_id}{path}")).await;
            assert_error(res, 404, "not_found").await;
        }
        let res = eve.post(&format!("/api/spaces/{space_id}/invitations"), &json!({ "role": "owner" })).await;
        assert_error(res, 404, "not_found").await;
        let listed: Vec<Value> = eve.get("/api/spaces").await.json().await.unwrap();
        assert!(listed.is_empty());
    }

    async fn roles_decide_who_manages_and_a_space_keeps_an_owner(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let space_id = made_space(&ann, "Docs").await;
        join(&ann, &bob, &space_id, "member").await;
        let ann_id = ann.me().await.account.id.to_string();
        let bob_id = bob.me().await.account.id.to_string();

        // A member neither invites, changes roles, removes others nor reads the ledger.
        let res = bob.post(&format!("/api/spaces/{space_id}/invitations"), &json!({ "role": "member" })).await;
        assert_error(res, 403, "forbidden").await;
        let res = bob.patch(&format!("/api/spaces/{space_id}/members/{bob_id}"), &json!({ "role": "owner" })).await;
        assert_error(res, 403, "forbidden").await;
        assert_error(bob.delete(&format!("/api/spaces/{space_id}/members/{ann_id}")).await, 403, "forbidden").await;
        assert_error(bob.get(&format!("/api/spaces/{space_id}/ledger")).await, 403, "forbidden").await;

        // The last owner can neither leave nor step down.
        assert_error(ann.delete(&format!("/api/spaces/{space_id}/members/{ann_id}")).await, 409, "last_owner").await;
        let res = ann.patch(&format!("/api/spaces/{space_id}/members/{ann_id}"), &json!({ "role": "member" })).await;
        assert_error(res, 409, "last_owner").await;
        let res = ann.patch(&format!("/api/spaces/{space_id}/members/{bob_id}"), &json!({ "role": "king" })).await;
        assert_error(res, 400, "invalid_request").await;
        let res = ann.patch(&format!("/api/spaces/{space_id}/members/nobody"), &json!({ "role": "owner" })).await;
        assert_error(res, 404, "not_found").await;

        // Another owner first; then Ann may leave.
        let res = ann.patch(&format!("/api/spaces/{space_id}/members/{bob_id}"), &json!({ "role": "owner" })).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(ann.delete(&format!("/api/spaces/{space_id}/members/{ann_id}")).await.status(), StatusCode::NO_CONTENT);
        assert_error(ann.get(&format!("/api/spaces/{space_id}")).await, 404, "not_found").await;

        let ledger: Vec<Value> = bob.get(&format!("/api/spaces/{space_id}/ledger")).await.json().await.unwrap();
        let kinds: Vec<&str> = ledger.iter().rev().map(|line| line["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["space.created", "invitation.created", "member.joined", "member.role_changed", "member.left"]);
        assert_eq!(ledger[0]["subject"], ann_id.as_str());
        // Named also once they are out of the space.
        assert_eq!(ledger[0]["subjectName"], ann.me().await.account.name);
        assert_eq!(ledger[1]["detail"], "owner");

        // Names are checked like every other name.
        for bad in ["", &"x".repeat(101), "a\u{202e}b"] {
            assert_error(ann.post("/api/spaces", &json!({ "name": bad })).await, 422, "invalid_field").await;
        }
        assert_error(ann.post("/api/spaces", &json!({ "name": "x", "id": "mine" })).await, 400, "invalid_request").await;
    }

    async fn a_space_job_runs_on_its_creators_computer_and_members_see_what_it_did(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let cat = app.user("cat@example.com").await;
        let eve = app.user("eve@example.com").await;
        let space_id = made_space(&ann, "Platform").await;
        join(&ann, &bob, &space_id, "member").await;
        join(&ann, &cat, &space_id, "viewer").await;
        let (anns, job_id) = finished_space_job(&app, &ann, &space_id, "Run the tests", SUCCEEDED).await;

        // Never on another member's computer; never assigned by a viewer or an outsider.
        let res = bob.post("/api/jobs", &space_job(&anns.device_id, &space_id)).await;
        assert_error(res, 404, "not_found").await;
        let cats = app.device(&cat, "install-cat").await;
        assert_error(cat.post("/api/jobs", &space_job(&cats.device_id, &space_id)).await, 403, "forbidden").await;
        let eves = app.device(&eve, "install-eve").await;
        assert_error(eve.post("/api/jobs", &space_job(&eves.device_id, &space_id)).await, 404, "not_found").await;

        // The owner sees everything.
        let whole: Value = ann.get(&format!("/api/jobs/{job_id}")).await.json().await.unwrap();
        assert!(whole.to_string().contains(PRIVATE));
        assert!(whole.get("sharedView").is_none());

        for (web, who) in [(&bob, "member"), (&cat, "viewer")] {
            let res = web.get(&format!("/api/jobs/{job_id}")).await;
            assert_eq!(res.status(), StatusCode::OK, "{who}");
            let seen: Value = res.json().await.unwrap();
            assert_eq!(seen["sharedView"], true);
            assert_eq!(seen["spaceId"], space_id.as_str());
            assert_eq!(seen["state"], "succeeded");
            assert!(!seen.to_string().contains(PRIVATE), "{who} saw private text: {seen}");
            let texts: Vec<&str> = seen["events"].as_array().unwrap().iter()
                .map(|event| event["text"].as_str().unwrap()).collect();
            for line in ["I will run the tests.", "$ cargo test", "term-1: exit code 0"] {
                assert!(texts.contains(&line), "{who}: {texts:?}");
            }
            assert_eq!(seen["decisions"], json!([]));
            let evidence: Vec<&str> = seen["evidence"].as_array().unwrap().iter()
                .map(|item| item["id"].as_str().unwrap()).collect();
            assert_eq!(evidence, ["shot"]);
            assert_eq!(seen["outcome"]["report"]["summary"], "Ran the tests.");
            assert_eq!(seen["changes"]["files"][0]["path"], "src/lib.rs");
            // The released file downloads; the held one is not there at all.
            let res = web.get(&format!("/api/jobs/{job_id}/evidence/shot")).await;
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);

            // Every other job and computer route is a 404, as for a stranger.
            for (method, path) in owner_routes(&app, &job_id, &anns.device_id).await {
                // The job itself and its live stream (the space view, tested in job_stream).
                let seen = [format!("/api/jobs/{job_id}"), format!("/api/jobs/{job_id}/events")];
                if method == Method::GET && (seen.contains(&path) || path.ends_with("/evidence/kept")) {
                    continue;
                }
                let res = send(web, &method, &path).await;
                let status = res.status().as_u16();
                // A body the route cannot take is refused before the job is looked up,
                // which tells nothing either; never a 200, 401, 403 or 409.
                let refused_body = [400, 415, 422].contains(&status) && method != Method::GET;
                assert!(status == 404 || refused_body, "{who}: {method} {path} → {status}");
            }
            let res = web.get(&format!("/api/jobs/{job_id}/evidence/kept")).await;
            assert_error(res, 404, "not_found").await;

            // Their own lists and questions stay their own.
            let mine: Vec<Value> = web.get("/api/jobs").await.json().await.unwrap();
            assert!(mine.is_empty(), "{who}");
            let decisions: Vec<Value> = web.get("/api/decisions").await.json().await.unwrap();
            assert!(decisions.is_empty(), "{who}");
            // The space's list has it, with who assigned it and where.
            let listed: Vec<Value> = web.get(&format!("/api/spaces/{space_id}/jobs")).await.json().await.unwrap();
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0]["id"], job_id.as_str());
            assert_eq!(listed[0]["computerName"], "laptop");
            assert_eq!(listed[0]["ownerName"], ann.me().await.account.name);
            assert!(!listed[0].to_string().contains(PRIVATE));
        }
        // An outsider sees none of it.
        assert_error(eve.get(&format!("/api/jobs/{job_id}")).await, 404, "not_found").await;
        assert_error(eve.get(&format!("/api/jobs/{job_id}/evidence/shot")).await, 404, "not_found").await;

        // A re-run stays in the space.
        let res = ann.post_empty(&format!("/api/jobs/{job_id}/rerun")).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let again: Value = res.json().await.unwrap();
        assert_eq!(again["spaceId"], space_id.as_str());
        let ledger: Vec<Value> = ann.get(&format!("/api/spaces/{space_id}/ledger")).await.json().await.unwrap();
        let jobs_created = ledger.iter().filter(|line| line["kind"] == "job.created").count();
        assert_eq!(jobs_created, 2);
    }

    async fn the_context_route_answers_from_the_jobs_space(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let space_id = made_space(&ann, "Platform").await;
        join(&ann, &bob, &space_id, "member").await;
        let bobs = app.device(&bob, "install-bob").await;
        let mut shared = space_job(&bobs.device_id, &space_id);
        shared["title"] = json!("Migrate the invoices table");
        assert_eq!(bob.post("/api/jobs", &shared).await.status(), StatusCode::CREATED);
        let mut personal = job_body(&bobs.device_id);
        personal["title"] = json!("Migrate my own invoices");
        assert_eq!(bob.post("/api/jobs", &personal).await.status(), StatusCode::CREATED);

        let anns = app.device(&ann, "install-ann").await;
        let mut asking = space_job(&anns.device_id, &space_id);
        asking["title"] = json!("Check the migration");
        let res = ann.post("/api/jobs", &asking).await;
        let job: Value = res.json().await.unwrap();
        let job_id = job["id"].as_str().unwrap();
        let lease = anns.claim_job().await.lease_token.expose().to_owned();
        let path = format!("/api/devices/self/jobs/{job_id}/context");
        let search = json!({ "name": "jobs.search", "args": { "query": "migrate invoices" } });
        let res = device_send(&anns, Method::POST, &path, &lease, Some(&search)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let text = res.json::<Value>().await.unwrap()["text"].as_str().unwrap().to_owned();
        assert!(text.contains("Migrate the invoices table"), "{text}");
        assert!(!text.contains("Migrate my own invoices"), "{text}");
    }
}

/// An open `GET /api/spaces/{id}/events` stream.
struct SpaceStream(SseStream);

impl SpaceStream {
    async fn open(web: &WebClient, space_id: &str) -> SpaceStream {
        let res = web.get(&format!("/api/spaces/{space_id}/events")).await;
        SpaceStream(SseStream::new(res))
    }

    /// The next `jobs` event's data; `Err(())` when the stream ended; `Ok(None)` when nothing
    /// came within `within`.
    async fn next(&mut self, within: Duration) -> Result<Option<Value>, ()> {
        let Some(event) = self.0.next(within).await? else {
            return Ok(None);
        };
        assert_eq!(event.name, "jobs", "{event:?}");
        Ok(Some(event.data))
    }
}

#[tokio::test]
async fn a_removal_takes_effect_at_once_on_every_replica() {
    let Some((a, b)) = two_replicas(|_| {}).await else {
        return;
    };
    let ann = a.user("ann@example.com").await;
    let mut bob = a.user("bob@example.com").await;
    let space_id = made_space(&ann, "Platform").await;
    join(&ann, &bob, &space_id, "member").await;
    let anns = a.device(&ann, "install-ann").await;
    let bobs = a.device(&bob, "install-bob").await;
    let res = ann
        .post("/api/jobs", &space_job(&anns.device_id, &space_id))
        .await;
    let job: Value = res.json().await.unwrap();
    let job_id = job["id"].as_str().unwrap().to_owned();
    let res = bob
        .post("/api/jobs", &space_job(&bobs.device_id, &space_id))
        .await;
    let bobs_job: Value = res.json().await.unwrap();
    let bobs_job_id = bobs_job["id"].as_str().unwrap().to_owned();

    // Bob follows the space on replica B; a job changing on A reaches him.
    bob.base = b.base.clone();
    let mut stream = SpaceStream::open(&bob, &space_id).await;
    let first = stream.next(SOON).await.unwrap().unwrap();
    assert_eq!(first["jobs"].as_array().unwrap().len(), 2);
    anns.claim_job().await;
    let changed = stream.next(SOON).await.unwrap().unwrap();
    let states: Vec<&str> = changed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| job["state"].as_str().unwrap())
        .collect();
    assert!(states.contains(&"running"), "{changed}");

    // Ann removes Bob on replica A: his stream on B ends, his next request is a 404.
    let bob_id = bob.me().await.account.id.to_string();
    let res = ann
        .delete(&format!("/api/spaces/{space_id}/members/{bob_id}"))
        .await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let ended = loop {
        match stream.next(Duration::from_secs(3)).await {
            Err(()) => break true,
            Ok(Some(_)) => continue,
            Ok(None) => break false,
        }
    };
    assert!(ended, "the removed member's stream stayed open");
    assert_error(
        bob.get(&format!("/api/jobs/{job_id}")).await,
        404,
        "not_found",
    )
    .await;
    assert_error(
        bob.get(&format!("/api/spaces/{space_id}/jobs")).await,
        404,
        "not_found",
    )
    .await;
    let res = bob
        .post("/api/jobs", &space_job(&bobs.device_id, &space_id))
        .await;
    assert_error(res, 404, "not_found").await;

    // The job Bob had queued in the space stays in it, cancelled: his computer takes none
    // of the space's work any more.
    let listed: Vec<Value> = ann
        .get(&format!("/api/spaces/{space_id}/jobs"))
        .await
        .json()
        .await
        .unwrap();
    let his = listed
        .iter()
        .find(|job| job["id"] == bobs_job_id.as_str())
        .unwrap();
    assert_eq!(his["state"], "cancelled");
    assert_eq!(bobs.claim().await.status(), StatusCode::NO_CONTENT);
}
