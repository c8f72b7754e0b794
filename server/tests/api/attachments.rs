//! Attachments: uploads before the job (sniffed, limited, credential files refused, hostile
//! names refused), the job taking them in its spec and the claim, the owner's download, the
//! device's download under the lease, re-runs carrying them, and unused uploads expiring
//! with their blobs.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::both_backends;
use crate::helpers::{
    assert_error, exec_sql, job_body, query_i64, spawn_app, spawn_app_with, DeviceClient, TestApp,
    WebClient,
};
use tether_protocol::attachments::{MAX_ATTACHMENT_BYTES, UPLOAD_TTL_SECS};
use tether_server::jobs::attachments;
use tether_server::rate_limits::RateLimitConfig;

/// The smallest valid PNG: one transparent pixel.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";

/// RFC 3986 percent-encoding of every byte but the unreserved ones.
fn encode(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `POST /api/attachments` with the name header as given (already encoded) and `body`.
async fn upload_raw(web: &WebClient, header: Option<&str>, body: Vec<u8>) -> Response {
    let mut request = web
        .http
        .post(format!("{}/api/attachments", web.base))
        .header("content-type", "application/octet-stream")
        .body(body);
    if let Some(csrf) = &web.csrf {
        request = request.header("x-tether-csrf", csrf);
    }
    if let Some(header) = header {
        request = request.header("x-tether-attachment-name", header);
    }
    request.send().await.unwrap()
}

async fn upload(web: &WebClient, name: &str, body: &[u8]) -> Response {
    upload_raw(web, Some(&encode(name)), body.to_vec()).await
}

/// Uploads and expects 201; answers the description.
async fn uploaded(web: &WebClient, name: &str, body: &[u8]) -> Value {
    let res = upload(web, name, body).await;
    assert_eq!(res.status(), StatusCode::CREATED, "{name}");
    res.json().await.unwrap()
}

fn job_with(device_id: &str, ids: &[&Value]) -> Value {
    let mut body = job_body(device_id);
    body["attachments"] = json!(ids.iter().map(|item| &item["id"]).collect::<Vec<_>>());
    body
}

fn device_path(job_id: &str, attachment_id: &str) -> String {
    format!("/api/devices/self/jobs/{job_id}/attachments/{attachment_id}")
}

async fn device_get(device: &DeviceClient, job_id: &str, id: &str, lease: &str) -> Response {
    device
        .http
        .get(format!("{}{}", device.base, device_path(job_id, id)))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease)
        .send()
        .await
        .unwrap()
}

fn blob(app: &TestApp, sha256: &str) -> PathBuf {
    app.config
        .data_dir
        .join("blobs/sha256")
        .join(&sha256[..2])
        .join(&sha256[2..])
}

/// A new API token of `web`'s user, for requests written by hand.
async fn api_token(web: &WebClient) -> String {
    let res = web.post("/api/tokens", &json!({ "name": "raw" })).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    res.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn raw_head(token: &str, framing: &str) -> String {
    format!(
        "POST /api/attachments HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         x-tether-attachment-name: huge.txt\r\n{framing}\r\nConnection: close\r\n\r\n"
    )
}

/// The status and whole answer of a request written to a socket by hand; the server may
/// answer (and close) before all of it is written.
async fn raw_answer(base: &str, request: &[u8]) -> (u16, String) {
    let address = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text)
}

fn files_under(path: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

fn id_of(item: &Value) -> &str {
    item["id"].as_str().unwrap()
}

both_backends! {
    async fn uploads_are_sniffed_and_only_their_owner_reads_them(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let device = app.device(&ann, "install-1").await;

        // A PNG named like text is a PNG: the type comes from the bytes.
        let picture = uploaded(&ann, "notes.txt", PNG).await;
        assert_eq!(picture["name"], "notes.txt");
        assert_eq!(picture["mediaType"], "image/png");
        assert_eq!(picture["size"], PNG.len());
        assert_eq!(picture["sha256"], hex(PNG));
        let log = uploaded(&ann, "run.log", b"step 1 ok\n").await;
        assert_eq!(log["mediaType"], "text/plain");
        // A 0-byte file is a real file.
        let empty = uploaded(&ann, "empty", b"").await;
        assert_eq!(empty["size"], 0);
        assert!(blob(&app, &hex(PNG)).is_file());

        // Another account's upload is unknown to bob everywhere.
        let bobs_device = app.device(&bob, "install-2").await;
        let res = bob.post("/api/jobs", &job_with(&bobs_device.device_id, &[&picture])).await;
        assert_error(res, 404, "not_found").await;
        let res = bob.delete(&format!("/api/attachments/{}", id_of(&picture))).await;
        assert_error(res, 404, "not_found").await;

        let res = ann.post("/api/jobs", &job_with(&device.device_id, &[&picture, &log, &empty])).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let job: Value = res.json().await.unwrap();
        let job_id = job["id"].as_str().unwrap().to_owned();
        assert_eq!(job["spec"]["attachments"], json!([picture, log, empty]));
        assert_eq!(ann.job(&job_id).await.spec.attachments.len(), 3);

        // The ledger keeps name, size and digest.
        let sql = format!(
            "SELECT COUNT(*) FROM ledger WHERE kind = 'job.created' AND subject = '{job_id}' \
             AND detail_json LIKE '%{}%' AND detail_json LIKE '%notes.txt%'",
            hex(PNG)
        );
        assert_eq!(query_i64(&app.store, &sql).await, Some(1));

        // Taken: no second job takes it, and it cannot be removed.
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &[&picture])).await;
        assert_error(res, 409, "invalid_state").await;
        let res = ann.delete(&format!("/api/attachments/{}", id_of(&picture))).await;
        assert_error(res, 409, "invalid_state").await;

        // The owner's download: safe headers, a picture shown in place.
        let path = format!("/api/jobs/{job_id}/attachments/{}", id_of(&picture));
        let res = ann.get(&path).await;
        assert_eq!(res.status(), StatusCode::OK);
        let headers = res.headers().clone();
        assert_eq!(headers["content-type"], "image/png");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert!(headers["content-security-policy"].to_str().unwrap().starts_with("sandbox"));
        assert!(headers["content-disposition"].to_str().unwrap().starts_with("inline"));
        assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);
        assert_error(bob.get(&path).await, 404, "not_found").await;
        // Not on this job: 404 as well.
        let other = uploaded(&ann, "other.txt", b"other").await;
        let res = ann.get(&format!("/api/jobs/{job_id}/attachments/{}", id_of(&other))).await;
        assert_error(res, 404, "not_found").await;

        // A removed upload is gone at once.
        let res = ann.delete(&format!("/api/attachments/{}", id_of(&other))).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        let res = ann.delete(&format!("/api/attachments/{}", id_of(&other))).await;
        assert_error(res, 404, "not_found").await;
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &[&other])).await;
        assert_error(res, 404, "not_found").await;
    }

    async fn the_claim_lists_them_and_the_device_reads_them_under_the_lease(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let spare = app.device(&ann, "install-2").await;
        let bob = app.user("bob@example.com").await;
        let bobs_device = app.device(&bob, "install-3").await;

        let picture = uploaded(&ann, "bug.png", PNG).await;
        let log = uploaded(&ann, "build.log", b"error: it broke\n").await;
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &[&log, &picture])).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let job_id = res.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();

        let claimed = device.claim_job().await;
        let listed: Vec<&str> = claimed.spec.attachments.iter().map(|item| item.id.as_str()).collect();
        assert_eq!(listed, [id_of(&log), id_of(&picture)]);
        assert_eq!(claimed.spec.attachments[1].media_type, "image/png");
        let lease = claimed.lease_token.expose().to_owned();

        let res = device_get(&device, &job_id, id_of(&picture), &lease).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "image/png");
        assert_eq!(res.headers()["content-length"], PNG.len().to_string().as_str());
        assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);

        // A wrong lease: 409.
        let wrong = "l".repeat(43);
        let res = device_get(&device, &job_id, id_of(&picture), &wrong).await;
        assert_error(res, 409, "stale_lease").await;
        // An attachment not on this job (waiting, or unknown): 404.
        let waiting = uploaded(&ann, "later.txt", b"later").await;
        let res = device_get(&device, &job_id, id_of(&waiting), &lease).await;
        assert_error(res, 404, "not_found").await;
        // Another device's job, of the same account or another: 404, whatever the lease.
        assert_error(device_get(&spare, &job_id, id_of(&picture), &lease).await, 404, "not_found").await;
        assert_error(device_get(&bobs_device, &job_id, id_of(&picture), &lease).await, 404, "not_found").await;
        // No lease at all: 400.
        let res = device
            .http
            .get(format!("{}{}", device.base, device_path(&job_id, id_of(&picture))))
            .bearer_auth(&device.token)
            .header("x-tether-protocol", "1")
            .send()
            .await
            .unwrap();
        assert_error(res, 400, "invalid_request").await;

        // Once the job ended: 410, even with the lease it had.
        let done = json!({ "outcome": "succeeded", "summary": "Done." });
        assert_eq!(device.complete(&job_id, &lease, &done).await.status(), StatusCode::OK);
        let res = device_get(&device, &job_id, id_of(&picture), &lease).await;
        assert_error(res, 410, "job_ended").await;
        let res = device_get(&device, &job_id, id_of(&picture), &wrong).await;
        assert_error(res, 410, "job_ended").await;
        // The owner still reads them (kept while the job is).
        let res = ann.get(&format!("/api/jobs/{job_id}/attachments/{}", id_of(&log))).await;
        assert_eq!(res.status(), StatusCode::OK);
    }

    async fn limits_are_kept(backend) {
        // More uploads than a minute's rate: the caps below are what is tested here.
        let app = spawn_app_with(backend, |config| {
            config.rate_limits = RateLimitConfig::parse("uploads=1000/min").unwrap();
        })
        .await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;

        // 21 files: 422 naming attachments; 20 are fine.
        let mut items = Vec::new();
        for n in 0..21 {
            items.push(uploaded(&ann, &format!("file-{n}.txt"), format!("file {n}").as_bytes()).await);
        }
        let all: Vec<&Value> = items.iter().collect();
        let message = assert_error(
            ann.post("/api/jobs", &job_with(&device.device_id, &all)).await,
            422,
            "invalid_field",
        )
        .await;
        assert!(message.starts_with("attachments"), "{message}");
        let twice = [all[0], all[0]];
        let message = assert_error(
            ann.post("/api/jobs", &job_with(&device.device_id, &twice)).await,
            422,
            "invalid_field",
        )
        .await;
        assert!(message.starts_with("attachments"), "{message}");
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &all[..20])).await;
        assert_eq!(res.status(), StatusCode::CREATED);

        // Over 100 MB together: 413 naming the limit. The sizes are set in the database, so
        // the test sends no 100 MB; the check reads them from the rows.
        let big: Vec<Value> = {
            let mut big = Vec::new();
            for n in 0..5 {
                big.push(uploaded(&ann, &format!("big-{n}.bin"), format!("big {n}").as_bytes()).await);
            }
            big
        };
        for item in &big {
            exec_sql(
                &app.store,
                &format!("UPDATE attachments SET size = 20000001 WHERE id = '{}'", id_of(item)),
            )
            .await;
        }
        let big_refs: Vec<&Value> = big.iter().collect();
        let message = assert_error(
            ann.post("/api/jobs", &job_with(&device.device_id, &big_refs)).await,
            413,
            "payload_too_large",
        )
        .await;
        assert!(message.contains("100000000"), "{message}");
        // Four of them (80 MB) are fine.
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &big_refs[..4])).await;
        assert_eq!(res.status(), StatusCode::CREATED);

        // One file over 25 MB: 413, by its Content-Length before a byte is read, and while
        // streaming without one.
        let over = vec![b'a'; usize::try_from(MAX_ATTACHMENT_BYTES).unwrap() + 1];
        let token = api_token(&ann).await;
        let head = raw_head(&token, "Content-Length: 25000001");
        let (status, answer) = raw_answer(&app.base, head.as_bytes()).await;
        assert_eq!(status, 413);
        assert!(answer.contains("payload_too_large") && answer.contains("25000000"), "{answer}");
        let mut chunked = raw_head(&token, "Transfer-Encoding: chunked").into_bytes();
        for chunk in over.chunks(1 << 20) {
            chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            chunked.extend_from_slice(chunk);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(raw_answer(&app.base, &chunked).await.0, 413);
        assert!(files_under(&app.config.data_dir.join("blobs/tmp")).is_empty());
        // Exactly 25 MB is fine.
        let res = upload(&ann, "edge.txt", &over[1..]).await;
        assert_eq!(res.status(), StatusCode::CREATED);

        // At most 100 uploads wait for a job: the 101st is 409, saying they expire.
        let waiting = query_i64(
            &app.store,
            "SELECT COUNT(*) FROM attachments WHERE job_id IS NULL AND dropped_at IS NULL",
        )
        .await
        .unwrap();
        for n in waiting..100 {
            uploaded(&ann, &format!("more-{n}.txt"), b"more").await;
        }
        let message = assert_error(upload(&ann, "one-more.txt", b"more").await, 409, "invalid_state").await;
        assert!(message.contains("hour"), "{message}");
        // Another account has its own room.
        let bob = app.user("bob@example.com").await;
        uploaded(&bob, "mine.txt", b"more").await;
    }

    async fn credential_files_and_hostile_names_are_refused(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        for name in [".env", ".env.local", "id_rsa", "server.pem", "credentials.json"] {
            let res = upload(&ann, name, b"SECRET=1").await;
            assert_error(res, 422, "invalid_field").await;
        }
        for header in [
            "..%2Fx", "../x", "%2E%2E", "a%5Cb", "line%0Abreak", "bell%07", "a%E2%80%AEfdp.exe",
            "%FF%FE", "%zz", "%4", "",
        ] {
            let res = upload_raw(&ann, Some(header), b"x".to_vec()).await;
            assert_error(res, 400, "invalid_request").await;
        }
        let long = "a".repeat(256);
        assert_error(upload(&ann, &long, b"x").await, 400, "invalid_request").await;
        assert_error(upload_raw(&ann, None, b"x".to_vec()).await, 400, "invalid_request").await;
        // Nothing was kept.
        assert_eq!(query_i64(&app.store, "SELECT COUNT(*) FROM attachments").await, Some(0));
        // A signed-out caller, or one without the CSRF token, uploads nothing.
        let stranger = app.web();
        assert_eq!(upload(&stranger, "a.txt", b"x").await.status(), StatusCode::UNAUTHORIZED);
        let mut no_csrf = ann.http.post(format!("{}/api/attachments", ann.base));
        no_csrf = no_csrf.header("x-tether-attachment-name", "a.txt").body("x");
        assert_eq!(no_csrf.send().await.unwrap().status(), StatusCode::FORBIDDEN);
        // A malformed id in a path is a clear 400 or 404, never a 500.
        let res = ann.delete("/api/attachments/..%2F..").await;
        assert!(matches!(res.status().as_u16(), 400 | 404), "{}", res.status());
    }

    async fn uploads_are_rate_limited_per_account(backend) {
        let app = spawn_app_with(backend, |config| {
            config.rate_limits = RateLimitConfig::parse("uploads=2/min").unwrap();
        })
        .await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        uploaded(&ann, "one.txt", b"1").await;
        uploaded(&ann, "two.txt", b"2").await;
        let res = upload(&ann, "three.txt", b"3").await;
        assert!(res.headers().contains_key("retry-after"));
        assert_error(res, 429, "rate_limited").await;
        uploaded(&bob, "bobs.txt", b"1").await;
    }

    async fn a_rerun_carries_them_and_takes_what_it_names(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let device = app.device(&ann, "install-1").await;

        let picture = uploaded(&ann, "bug.png", PNG).await;
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &[&picture])).await;
        let first: Value = res.json().await.unwrap();
        let first_id = first["id"].as_str().unwrap().to_owned();
        let claimed = device.claim_job().await;
        let done = json!({ "outcome": "succeeded", "summary": "Done." });
        let lease = claimed.lease_token.expose().to_owned();
        assert_eq!(device.complete(&first_id, &lease, &done).await.status(), StatusCode::OK);

        // Absent: the earlier job's again, as new attachments of the new job, same bytes.
        let res = ann.post_empty(&format!("/api/jobs/{first_id}/rerun")).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let again: Value = res.json().await.unwrap();
        let copied = &again["spec"]["attachments"][0];
        assert_ne!(copied["id"], picture["id"]);
        assert_eq!(copied["sha256"], picture["sha256"]);
        assert_eq!(copied["name"], "bug.png");
        let path = format!("/api/jobs/{}/attachments/{}", again["id"].as_str().unwrap(), id_of(copied));
        let res = ann.get(&path).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);
        // The earlier job keeps its own.
        let res = ann.get(&format!("/api/jobs/{first_id}/attachments/{}", id_of(&picture))).await;
        assert_eq!(res.status(), StatusCode::OK);

        // Given: exactly these — one of the earlier job's and a new upload.
        let log = uploaded(&ann, "new.log", b"new\n").await;
        let body = json!({ "attachments": [picture["id"], log["id"]] });
        let res = ann.post(&format!("/api/jobs/{first_id}/rerun"), &body).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let given: Value = res.json().await.unwrap();
        let names: Vec<&str> = given["spec"]["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["bug.png", "new.log"]);
        assert_eq!(given["spec"]["attachments"][1]["id"], log["id"]);
        // Given empty: none.
        let res = ann.post(&format!("/api/jobs/{first_id}/rerun"), &json!({ "attachments": [] })).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        assert!(res.json::<Value>().await.unwrap()["spec"].get("attachments").is_none());

        // Another job's attachment (not the earlier one's) is taken: 409; another account's
        // upload: 404.
        let body = json!({ "attachments": [copied["id"]] });
        let res = ann.post(&format!("/api/jobs/{first_id}/rerun"), &body).await;
        assert_error(res, 409, "invalid_state").await;
        let bobs = uploaded(&bob, "bob.txt", b"bob").await;
        let body = json!({ "attachments": [bobs["id"]] });
        let res = ann.post(&format!("/api/jobs/{first_id}/rerun"), &body).await;
        assert_error(res, 404, "not_found").await;
        // Bob cannot re-run ann's job to reach them either.
        let res = bob.post_empty(&format!("/api/jobs/{first_id}/rerun")).await;
        assert_error(res, 404, "not_found").await;

        // A follow-up takes only what it names; the continued job's own files it may name,
        // and gets copies of them, as a re-run does. Another job's are still taken.
        let mut follow = job_body(&device.device_id);
        follow["continues"] = json!(first_id);
        follow["attachments"] = json!([copied["id"]]);
        let res = ann.post("/api/jobs", &follow).await;
        assert_error(res, 409, "invalid_state").await;
        follow["attachments"] = json!([picture["id"]]);
        let res = ann.post("/api/jobs", &follow).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let next: Value = res.json().await.unwrap();
        let carried = &next["spec"]["attachments"][0];
        assert_eq!(carried["name"], "bug.png");
        assert_eq!(carried["sha256"], picture["sha256"]);
        assert_ne!(carried["id"], picture["id"]);
        assert_eq!(next["spec"]["attachments"].as_array().map(Vec::len), Some(1));
    }

    async fn unused_uploads_expire_and_their_blobs_go(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;

        let unused = uploaded(&ann, "unused.txt", b"never used").await;
        let removed = uploaded(&ann, "removed.txt", b"removed soon").await;
        let kept = uploaded(&ann, "kept.txt", b"kept by a job").await;
        // The same bytes again, never used: the blob stays, the job names it.
        let same = uploaded(&ann, "same.txt", b"kept by a job").await;
        assert_eq!(same["sha256"], kept["sha256"]);
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &[&kept])).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let res = ann.delete(&format!("/api/attachments/{}", id_of(&removed))).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);

        // Within the hour nothing goes, not even the removed upload's blob.
        let now = app.now().timestamp_millis();
        attachments::sweep(&app.store, &app.config.data_dir, now).await.unwrap();
        for item in [&unused, &removed, &kept] {
            assert!(blob(&app, item["sha256"].as_str().unwrap()).is_file());
        }

        app.advance(Duration::from_secs(u64::try_from(UPLOAD_TTL_SECS).unwrap() + 600));
        let res = ann.post("/api/jobs", &job_with(&device.device_id, &[&unused])).await;
        assert_error(res, 404, "not_found").await;
        let res = ann.delete(&format!("/api/attachments/{}", id_of(&unused))).await;
        assert_error(res, 404, "not_found").await;

        let now = app.now().timestamp_millis();
        let swept = attachments::sweep(&app.store, &app.config.data_dir, now).await.unwrap();
        // The background sweeper may have taken some first; none is left either way.
        assert!(swept <= 3, "{swept}");
        let left = query_i64(&app.store, "SELECT COUNT(*) FROM attachments WHERE job_id IS NULL").await;
        assert_eq!(left, Some(0));
        assert!(!blob(&app, unused["sha256"].as_str().unwrap()).exists());
        assert!(!blob(&app, removed["sha256"].as_str().unwrap()).exists());
        assert!(blob(&app, kept["sha256"].as_str().unwrap()).is_file());
    }
}
