//! Evidence: uploads under the run's lease with every answer of DESIGN §3.3, the blob store
//! on disk, the job's list, and downloads by the job's owner only, never as active documents.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app, spawn_app_with, DeviceClient, TestApp, WebClient};

/// The smallest valid PNG: one transparent pixel.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\0\0\0\0IEND\xaeB`\x82";
const LOG: &[u8] = b"step 1 ok\nstep 2 ok \xe2\x9c\x93\n";

/// `(id, kind, name, bytes, Content-Type, disposition)` of a download.
type Served = (
    &'static str,
    &'static str,
    &'static str,
    &'static [u8],
    &'static str,
    &'static str,
);

/// A running job of a paired device, with its owner and lease.
struct Run {
    app: TestApp,
    owner: WebClient,
    device: DeviceClient,
    job_id: String,
    lease: String,
}

async fn running(app: TestApp) -> Run {
    let owner = app.user("ann@example.com").await;
    let device = app.device(&owner, "install-1").await;
    let job = owner.create_job(&device.device_id).await;
    let claimed = device.claim_job().await;
    Run {
        app,
        owner,
        device,
        job_id: job.id.to_string(),
        lease: claimed.lease_token.expose().to_owned(),
    }
}

/// The description of `bytes` as a device sends it.
fn describe(id: &str, kind: &str, name: &str, bytes: &[u8]) -> Value {
    json!({
        "id": id, "kind": kind, "name": name, "size": bytes.len(),
        "sha256": hex(&Sha256::digest(bytes)),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn header_of(meta: &Value) -> String {
    URL_SAFE_NO_PAD.encode(meta.to_string())
}

impl Run {
    /// `POST …/evidence` with this header (raw) and body, under `lease`.
    async fn post_raw(&self, header: Option<&str>, lease: Option<&str>, body: Vec<u8>) -> Response {
        let mut request = self
            .device
            .http
            .post(format!(
                "{}/api/devices/self/jobs/{}/evidence",
                self.device.base, self.job_id
            ))
            .bearer_auth(&self.device.token)
            .header("x-tether-protocol", "1")
            .header("content-type", "application/octet-stream")
            .body(body);
        if let Some(header) = header {
            request = request.header("x-tether-evidence", header);
        }
        if let Some(lease) = lease {
            request = request.header("x-tether-lease", lease);
        }
        request.send().await.unwrap()
    }

    async fn upload(&self, meta: &Value, body: &[u8]) -> Response {
        self.post_raw(Some(&header_of(meta)), Some(&self.lease), body.to_vec())
            .await
    }

    /// Uploads and expects 201 with the stored item.
    async fn stored(&self, id: &str, kind: &str, name: &str, bytes: &[u8]) -> Value {
        let res = self.upload(&describe(id, kind, name, bytes), bytes).await;
        assert_eq!(res.status(), StatusCode::CREATED, "{id}");
        res.json().await.unwrap()
    }

    fn download_path(&self, id: &str) -> String {
        format!("/api/jobs/{}/evidence/{id}", self.job_id)
    }

    fn blobs(&self) -> PathBuf {
        self.app.config.data_dir.join("blobs/sha256")
    }
}

fn files_under(path: &Path) -> Vec<PathBuf> {
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

/// Sends a hand-written HTTP/1.1 request and returns the answer's status.
async fn raw_status(base: &str, request: &[u8]) -> u16 {
    let address = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    // The server may answer (and close) before all of it is written.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await;
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

fn raw_upload_head(run: &Run, meta: &Value, framing: &str) -> String {
    format!(
        "POST /api/devices/self/jobs/{}/evidence HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {}\r\nx-tether-protocol: 1\r\nx-tether-lease: {}\r\n\
         x-tether-evidence: {}\r\n{framing}\r\nConnection: close\r\n\r\n",
        run.job_id,
        run.device.token,
        run.lease,
        header_of(meta)
    )
}

both_backends! {
    async fn an_upload_is_stored_once_and_read_back_byte_identical(backend) {
        let run = running(spawn_app(backend).await).await;
        let stored = run.stored("shot-1", "screenshot", "screen.png", PNG).await;
        assert_eq!(stored, json!({
            "id": "shot-1", "kind": "screenshot", "name": "screen.png", "size": PNG.len(),
            "sha256": hex(&Sha256::digest(PNG)), "mime": "image/png", "local": false,
            "held": false,
        }));

        // The same id again: 200 with the same item, nothing stored twice.
        let res = run.upload(&describe("shot-1", "screenshot", "screen.png", PNG), PNG).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.json::<Value>().await.unwrap(), stored);
        // The same id with other content is a conflict.
        let res = run.upload(&describe("shot-1", "log", "screen.png", LOG), LOG).await;
        assert_error(res, 409, "invalid_state").await;

        // Identical bytes under another id share one blob, at its content address.
        run.stored("shot-2", "image", "copy.png", PNG).await;
        let digest = hex(&Sha256::digest(PNG));
        assert_eq!(files_under(&run.blobs()), vec![run.blobs().join(&digest[..2]).join(&digest[2..])]);
        assert!(files_under(&run.app.config.data_dir.join("blobs/tmp")).is_empty());

        // Listed on the job, in order.
        let job = run.owner.job(&run.job_id).await;
        let ids: Vec<&str> = job.evidence.iter().map(|item| item.id.as_str()).collect();
        assert_eq!(ids, ["shot-1", "shot-2"]);

        // The owner reads the bytes back exactly, with the protective headers.
        let res = run.owner.get(&run.download_path("shot-1")).await;
        assert_eq!(res.status(), StatusCode::OK);
        let headers = res.headers().clone();
        assert_eq!(headers["content-type"], "image/png");
        assert_eq!(headers["content-disposition"], "inline; filename=\"screen.png\"; filename*=UTF-8''screen.png");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["cache-control"], "no-store");
        assert_eq!(headers["content-security-policy"], "sandbox; default-src 'none'");
        assert_eq!(headers["content-length"], PNG.len().to_string().as_str());
        assert_eq!(res.bytes().await.unwrap().as_ref(), PNG);

        // Nobody else does.
        let bob = run.app.user("bob@example.com").await;
        assert_error(bob.get(&run.download_path("shot-1")).await, 404, "not_found").await;
        assert_error(run.app.web().get(&run.download_path("shot-1")).await, 401, "unauthorized").await;
        assert_error(run.owner.get(&run.download_path("nope")).await, 404, "not_found").await;
        assert_error(run.owner.get(&run.download_path("..%2F..%2Fetc")).await, 404, "not_found").await;

        // The ledger names the upload, never its bytes.
        let account = run.owner.me().await.account.id;
        let entries = tether_server::store::ledger::list(&run.app.store, &account).await.unwrap();
        let uploads: Vec<_> = entries.iter().filter(|entry| entry.kind == "evidence.uploaded").collect();
        assert_eq!(uploads.len(), 2);
        assert!(uploads[0].detail_json.contains("screen.png"));
        assert!(uploads[0].detail_json.contains(&digest));
    }

    async fn downloads_of_active_formats_are_attachments(backend) {
        let run = running(spawn_app(backend).await).await;
        let cases: &[Served] = &[
            ("log", "log", "run.log", LOG, "text/plain; charset=utf-8", "inline"),
            ("json", "report", "result.json", b"{\"passed\": 12}", "application/json; charset=utf-8", "inline"),
            ("html", "report", "report.html", b"<!doctype html><script>alert(1)</script>", "text/html; charset=utf-8", "attachment"),
            ("svg", "file", "chart.svg", b"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\"/>", "image/svg+xml", "attachment"),
            ("pdf", "report", "report.pdf", b"%PDF-1.4\n%\xe2\xe3\n", "application/pdf", "attachment"),
            ("bin", "file", "data.bin", b"\0\x01\x02\xff", "application/octet-stream", "attachment"),
            ("trace", "trace", "trace.zip", b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", "application/zip", "attachment"),
        ];
        for (id, kind, name, bytes, content_type, disposition) in cases {
            run.stored(id, kind, name, bytes).await;
            let res = run.owner.get(&run.download_path(id)).await;
            assert_eq!(res.status(), StatusCode::OK, "{id}");
            let headers = res.headers().clone();
            assert_eq!(headers["content-type"], *content_type, "{id}");
            let got = headers["content-disposition"].to_str().unwrap();
            assert!(got.starts_with(&format!("{disposition}; filename=\"{name}\"")), "{id}: {got}");
            assert_eq!(headers["x-content-type-options"], "nosniff");
            assert_eq!(headers["content-security-policy"], "sandbox; default-src 'none'");
            assert_eq!(res.bytes().await.unwrap().as_ref(), *bytes, "{id}");
        }
        // A name that needs quoting is encoded, never echoed raw into the header.
        let name = "r\u{e9}sum\u{e9} \"x\";.txt";
        run.stored("quoted", "log", name, LOG).await;
        let res = run.owner.get(&run.download_path("quoted")).await;
        assert_eq!(
            res.headers()["content-disposition"],
            "inline; filename=\"r_sum_ _x__.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22x%22%3B.txt"
        );
    }

    async fn types_must_match_their_kind(backend) {
        let run = running(spawn_app(backend).await).await;
        let cases: &[(&str, &str, &[u8])] = &[
            ("log", "screen.log", PNG),
            ("screenshot", "screen.png", LOG),
            ("image", "picture.png", b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>"),
            ("video", "clip.mp4", b"PK\x03\x04 not a video"),
            ("log", "binary.log", b"log with a \0 NUL"),
        ];
        for (kind, name, bytes) in cases {
            let res = run.upload(&describe("typed", kind, name, bytes), bytes).await;
            assert_error(res, 415, "unsupported_media_type").await;
        }
        assert!(files_under(&run.blobs()).is_empty(), "nothing refused is kept");
        assert!(run.owner.job(&run.job_id).await.evidence.is_empty());
    }

    async fn bad_descriptions_and_bodies_are_400(backend) {
        let run = running(spawn_app(backend).await).await;
        let good = describe("log-1", "log", "run.log", LOG);
        let lease = Some(run.lease.as_str());
        let with = |change: Value| {
            let mut meta = good.clone();
            for (key, value) in change.as_object().unwrap() {
                meta[key] = value.clone();
            }
            header_of(&meta)
        };
        let cases: Vec<(Option<String>, &[u8])> = vec![
            (None, LOG),
            (Some("%%% not base64".to_owned()), LOG),
            (Some(URL_SAFE_NO_PAD.encode("not json")), LOG),
            (Some(URL_SAFE_NO_PAD.encode("[1, 2]")), LOG),
            (Some(with(json!({ "kind": "executable" }))), LOG),
            (Some(with(json!({ "name": "../../etc/passwd" }))), LOG),
            (Some(with(json!({ "name": "logs/run.log" }))), LOG),
            (Some(with(json!({ "name": ".." }))), LOG),
            (Some(with(json!({ "id": "../other-job" }))), LOG),
            (Some(with(json!({ "sha256": "zz" }))), LOG),
            // The digest of other bytes, and a size that does not match.
            (Some(with(json!({ "sha256": hex(&Sha256::digest(b"other")) }))), LOG),
            (Some(with(json!({ "size": LOG.len() + 5 }))), LOG),
            (Some(with(json!({ "size": 3 }))), LOG),
            // A file kept on the computer comes without bytes.
            (Some(with(json!({ "local": true }))), LOG),
        ];
        for (header, body) in cases {
            let res = run.post_raw(header.as_deref(), lease, body.to_vec()).await;
            let said = format!("{header:?}");
            assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{said}");
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["error"]["code"], "invalid_request", "{said}: {body}");
        }
        let res = run.post_raw(Some(&header_of(&good)), None, LOG.to_vec()).await;
        assert_error(res, 400, "invalid_request").await;
        // A credential file's name is refused as such.
        for name in [".env", "id_ed25519", "deploy.pem"] {
            let res = run.upload(&describe("cred", "file", name, LOG), LOG).await;
            assert_error(res, 422, "invalid_field").await;
        }
        assert!(files_under(&run.blobs()).is_empty());
        assert!(run.owner.job(&run.job_id).await.evidence.is_empty());
    }

    // The server refuses evidence by the credential rule the agent keeps out of runs and
    // the live file view: SSH's host and key lists are credentials like a private key.
    async fn ssh_host_and_key_lists_are_refused_like_a_key(backend) {
        let run = running(spawn_app(backend).await).await;
        for name in ["id_rsa", "known_hosts", "authorized_keys"] {
            let res = run.upload(&describe("cred", "file", name, LOG), LOG).await;
            let message = assert_error(res, 422, "invalid_field").await;
            assert_eq!(message, "name: keys and credential files are never evidence.", "{name}");
        }
        assert!(files_under(&run.blobs()).is_empty());
        assert!(run.owner.job(&run.job_id).await.evidence.is_empty());
    }

    async fn uploads_need_the_current_lease_and_fit_in_100_files(backend) {
        let run = running(spawn_app(backend).await).await;
        let meta = describe("late", "log", "run.log", LOG);
        let res = run.post_raw(Some(&header_of(&meta)), Some("not-the-lease"), LOG.to_vec()).await;
        assert_error(res, 409, "stale_lease").await;

        // Another device's job is not found, whatever lease it shows.
        let other = run.app.device(&run.owner, "install-2").await;
        let res = other
            .http
            .post(format!("{}/api/devices/self/jobs/{}/evidence", other.base, run.job_id))
            .bearer_auth(&other.token)
            .header("x-tether-protocol", "1")
            .header("x-tether-lease", &run.lease)
            .header("x-tether-evidence", header_of(&meta))
            .body(LOG.to_vec())
            .send()
            .await
            .unwrap();
        assert_error(res, 404, "not_found").await;

        for index in 0..100 {
            let bytes = format!("line {index}\n");
            run.stored(&format!("log-{index}"), "log", &format!("{index}.log"), bytes.as_bytes()).await;
        }
        let res = run.upload(&describe("log-100", "log", "100.log", b"one more\n"), b"one more\n").await;
        let message = assert_error(res, 409, "invalid_state").await;
        assert!(message.contains("100"), "{message}");
        // A repeat of a stored one is still answered.
        let res = run.upload(&describe("log-7", "log", "7.log", b"line 7\n"), b"line 7\n").await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(run.owner.job(&run.job_id).await.evidence.len(), 100);

        // Once the run completed, its lease fences nothing more in.
        let done = json!({ "outcome": "succeeded", "summary": "ok" });
        assert_eq!(run.device.complete(&run.job_id, &run.lease, &done).await.status(), StatusCode::OK);
        let res = run.upload(&describe("after", "log", "after.log", LOG), LOG).await;
        assert_error(res, 409, "stale_lease").await;
    }

    async fn a_file_kept_on_the_computer_is_described_only(backend) {
        let run = running(spawn_app(backend).await).await;
        let mut meta = describe("kept", "video", "session.mp4", &[7; 2048]);
        meta["local"] = json!(true);
        meta["mime"] = json!("video/mp4");
        meta["caption"] = json!("the whole session");
        // Even a description of a file over the limit: its bytes never come.
        meta["size"] = json!(250_000_000_u64);
        let res = run.post_raw(Some(&header_of(&meta)), Some(&run.lease), Vec::new()).await;
        assert_eq!(res.status(), StatusCode::CREATED);
        let item: Value = res.json().await.unwrap();
        assert_eq!((item["local"].clone(), item["mime"].clone()), (json!(true), json!("video/mp4")));
        assert_eq!(item["caption"], "the whole session");
        let res = run.post_raw(Some(&header_of(&meta)), Some(&run.lease), Vec::new()).await;
        assert_eq!(res.status(), StatusCode::OK);

        let job = run.owner.job(&run.job_id).await;
        assert!(job.evidence[0].local);
        let message = assert_error(run.owner.get(&run.download_path("kept")).await, 409, "invalid_state").await;
        assert!(message.contains("kept on the computer"), "{message}");
        assert!(files_under(&run.blobs()).is_empty());

        // The job page lists both kinds of items.
        run.stored("log", "log", "run <1>.log", LOG).await;
        let res = run.owner.get(&format!("/jobs/{}", run.job_id)).await;
        let html = res.text().await.unwrap();
        assert!(html.contains(&format!("href=\"/api/jobs/{}/evidence/log\"", run.job_id)), "{html}");
        assert!(html.contains("run &lt;1&gt;.log"), "names are escaped");
        assert!(html.contains("session.mp4") && html.contains("on the computer, not uploaded"), "{html}");
    }

    async fn bodies_over_the_limit_are_413(backend) {
        let app = spawn_app_with(backend, |config| config.evidence_max_bytes = 1024).await;
        let run = running(app).await;
        let big = vec![b'x'; 1025];
        // Declared too large.
        let res = run.upload(&describe("big", "log", "big.log", &big), &big).await;
        assert_error(res, 413, "payload_too_large").await;
        // Described as small, sent large.
        let small = describe("big", "log", "big.log", &big[..10]);
        let res = run.post_raw(Some(&header_of(&small)), Some(&run.lease), big.clone()).await;
        assert_error(res, 413, "payload_too_large").await;
        // Streamed in chunks without a length: the server stops reading past the limit.
        let at_limit = describe("big", "log", "big.log", &vec![b'x'; 1024]);
        let mut request = raw_upload_head(&run, &at_limit, "Transfer-Encoding: chunked").into_bytes();
        for _ in 0..3 {
            request.extend_from_slice(b"200\r\n");
            request.extend_from_slice(&[b'x'; 512]);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(raw_status(&run.app.base, &request).await, 413);
        // At the limit exactly it is fine.
        run.stored("fits", "log", "fits.log", &vec![b'x'; 1024]).await;
        assert!(files_under(&run.app.config.data_dir.join("blobs/tmp")).is_empty());
    }

    async fn the_default_limit_is_100_mb(backend) {
        let run = running(spawn_app(backend).await).await;
        assert_eq!(run.app.config.evidence_max_bytes, 100_000_000);
        let mut meta = describe("huge", "file", "huge.bin", b"abc");
        meta["size"] = json!(100_000_001_u64);
        let res = run.upload(&meta, b"abc").await;
        assert_error(res, 413, "payload_too_large").await;
        // 100 MB itself is within the limit (refused here only because the body is short).
        meta["size"] = json!(100_000_000_u64);
        let res = run.upload(&meta, b"abc").await;
        assert_error(res, 400, "invalid_request").await;
        // A body announced over 100 MB is refused before it is read.
        let request = raw_upload_head(&run, &meta, "Content-Length: 100000001");
        assert_eq!(raw_status(&run.app.base, request.as_bytes()).await, 413);
    }

    async fn hostile_evidence_requests_never_fail_the_server(backend) {
        let run = running(spawn_app(backend).await).await;
        let long = "a".repeat(20_000);
        let headers = [
            String::new(),
            "====".to_owned(),
            URL_SAFE_NO_PAD.encode("null"),
            URL_SAFE_NO_PAD.encode("{\"id\": {}}"),
            URL_SAFE_NO_PAD.encode(json!({"id": "x", "kind": "log", "name": "a", "size": u64::MAX, "sha256": "0".repeat(64)}).to_string()),
            URL_SAFE_NO_PAD.encode(json!({"id": "x", "kind": "log", "name": "\u{202e}gpj.exe", "size": 1, "sha256": "0".repeat(64)}).to_string()),
            URL_SAFE_NO_PAD.encode(json!({"id": "x", "kind": "log", "name": "a".repeat(300), "size": 1, "sha256": "0".repeat(64)}).to_string()),
            URL_SAFE_NO_PAD.encode(json!({"id": "x", "kind": "log", "name": "a", "size": 1, "sha256": "0".repeat(64), "mime": "text/html\r\nx: y"}).to_string()),
            long.clone(),
        ];
        for header in &headers {
            let res = run.post_raw(Some(header), Some(&run.lease), b"abc".to_vec()).await;
            assert!(res.status().is_client_error(), "{header:.60}: {}", res.status());
        }
        let res = run.post_raw(Some(&long), Some(&long), Vec::new()).await;
        assert!(res.status().is_client_error(), "{}", res.status());
        for path in [
            format!("/api/jobs/{}/evidence/{long}", run.job_id),
            format!("/api/jobs/{}/evidence/%00", run.job_id),
            "/api/jobs/not-a-job/evidence/x".to_owned(),
            format!("/api/jobs/{}/evidence/", run.job_id),
        ] {
            let res = run.owner.get(&path).await;
            assert!(res.status().is_client_error(), "{path:.80}: {}", res.status());
        }
        // The name the device gives is shown on the job page: a bidi override or an
        // invisible character would make `exe.pdf` of `\u{202e}fdp.exe`; a caption keeps
        // its newlines but no other control character.
        for name in ["\u{202e}gpj.exe", "a\u{200b}b.log", "\u{feff}run.log", "run\u{ffff}.log"] {
            let res = run.upload(&describe("bidi", "file", name, b"MZ\x90\0"), b"MZ\x90\0").await;
            assert_error(res, 400, "invalid_request").await;
        }
        let mut meta = describe("cap", "log", "run.log", LOG);
        meta["caption"] = json!("bell\u{7}");
        assert_error(run.upload(&meta, LOG).await, 400, "invalid_request").await;
        meta["caption"] = json!("two lines\n\tindented");
        assert_eq!(run.upload(&meta, LOG).await.status(), StatusCode::CREATED);
        let item = run.stored("names", "file", "Bürorechner ноутбук 笔记本.bin", b"MZ\x90\0").await;
        assert_eq!(item["mime"], "application/octet-stream");
    }
}
