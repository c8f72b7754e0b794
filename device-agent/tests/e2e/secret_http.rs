//! Secrets used by reference, end to end: a secret sealed with allowed sites reaches the real
//! agent, a recipe never sees it in its environment, and `tether-agent secret-http` (run
//! inside the recipe's sandbox) sends it to its site only. A site it does not allow gets
//! nothing, a redirect is not followed, and the answer comes back with the value hidden.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tether_protocol::jobs::{Job, JobState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::{
    agent_ok, backend_works, output_lines, pair, save_secret, spawn_server, start_daemon, Web,
};

const LIMITED: &str = "tok-5e1f-limited-to-one-site";
const PLAIN: &str = "tok-91aa-plain-environment";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_secret_goes_only_to_its_site_landlock() {
    if backend_works("landlock").await {
        used_by_reference("landlock").await;
    }
}

/// Under bubblewrap the broker's socket and the agent's program are bind mounts in the run's
/// private file tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_secret_goes_only_to_its_site_bwrap() {
    if backend_works("bwrap").await {
        used_by_reference("bwrap").await;
    }
}

async fn used_by_reference(backend: &str) {
    let other = Recorder::start("").await;
    let allowed = Recorder::start(&other.origin).await;
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &[
            "recipe",
            "add",
            "call",
            "--",
            "sh",
            "-c",
            &recipe(&allowed.origin, &other.origin),
        ],
    )
    .await;
    let daemon = start_daemon(home.path(), backend);
    let device = web
        .wait_for_device(&device_id, |device| {
            device.online && device.seal_key.is_some()
        })
        .await;
    let seal_key = device.seal_key.unwrap();
    let sites = [allowed.origin.as_str()];
    save_secret(
        &web,
        home.path(),
        &device_id,
        &seal_key,
        ("API_TOKEN", LIMITED),
        Some(&sites),
    )
    .await;
    save_secret(
        &web,
        home.path(),
        &device_id,
        &seal_key,
        ("PLAIN_TOKEN", PLAIN),
        None,
    )
    .await;
    let listed = agent_ok(home.path(), &["secrets", "list"]).await;
    assert!(
        listed.contains(&format!("only to {}", allowed.origin)),
        "{listed}"
    );

    let job = run_job(&web, &device_id, &["API_TOKEN", "PLAIN_TOKEN"]).await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let output = output_lines(&job);
    let has = |expected: &str| {
        assert!(
            output.iter().any(|line| line.contains(expected)),
            "{expected:?} not in {output:#?}"
        );
    };
    // The allowed site got the value; the run got it back hidden.
    has("you sent: GET /echo auth=Bearer [hidden] body= | exit=0");
    has(&format!(
        "secret-http: GET {}/echo with API_TOKEN → 200",
        allowed.origin
    ));
    // Another site: refused before anything was sent.
    has(&format!(
        "API_TOKEN may only be sent to {}, not to {}",
        allowed.origin, other.origin
    ));
    let refusals = output
        .iter()
        .filter(|line| line.ends_with(" | exit=2"))
        .count();
    assert_eq!(refusals, 2, "{output:#?}");
    // A redirect is answered, not followed.
    has("HTTP 302");
    has(&format!("location: {}/stolen", other.origin));
    // A secret without sites goes anywhere, in the body too.
    has("you sent: POST /echo auth= body=key=[hidden] | exit=0");
    // A name the job did not give the run is refused.
    has("this job does not name the secret OTHER_TOKEN");

    let seen_allowed = allowed.requests();
    assert_eq!(
        seen_allowed,
        vec![
            format!("GET /echo auth=Bearer {LIMITED} body="),
            format!("GET /redirect auth=Bearer {LIMITED} body="),
        ]
    );
    assert_eq!(
        other.requests(),
        vec![format!("POST /echo auth= body=key={PLAIN}")],
        "the other site saw the limited secret or followed a redirect"
    );
    // The recipe's environment had the plain secret and never the limited one.
    let env = std::fs::read_to_string(work.path().join("env.txt")).unwrap();
    assert!(env.contains(&format!("PLAIN_TOKEN={PLAIN}")), "{env}");
    assert!(
        !env.contains(LIMITED),
        "the limited value was in the environment"
    );
    assert!(!env.contains("API_TOKEN="), "{env}");
    assert!(env.contains("TETHER_SECRETS_SOCKET="), "{env}");
    // Neither value left the computer.
    let everything = serde_json::to_string(&job).unwrap();
    assert!(!everything.contains(LIMITED) && !everything.contains(PLAIN));
    // The broker's socket went with the run.
    let runs = runs_root(home.path());
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&runs);
}

/// An ACP agent's terminal command uses the secret the same way: the broker's variables
/// reach the agent's terminals, and the value never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_uses_a_limited_secret_from_its_terminal() {
    let site = Recorder::start("").await;
    let computer = crate::acp::Computer::start().await;
    let device = computer
        .web
        .wait_for_device(&computer.device_id, |device| device.seal_key.is_some())
        .await;
    let sites = [site.origin.as_str()];
    save_secret(
        &computer.web,
        computer.home.path(),
        &computer.device_id,
        &device.seal_key.unwrap(),
        ("API_TOKEN", LIMITED),
        Some(&sites),
    )
    .await;
    let command = format!(
        r#""$TETHER_AGENT" secret-http -H 'Authorization: Bearer {{{{API_TOKEN}}}}' {}/echo; echo " | in env: $(env | grep -c '^API_TOKEN=')""#,
        site.origin
    );
    let steps = json!([{ "terminal": { "command": "sh", "args": ["-c", command] } }]);
    let job_id = computer
        .create_naming("unattended", true, steps, &["API_TOKEN"])
        .await;
    let (job, _) = computer.run(&job_id, |_| unreachable!("unattended")).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}");
    assert_eq!(
        site.requests(),
        vec![format!("GET /echo auth=Bearer {LIMITED} body=")]
    );
    let output = output_lines(&job).join("\n");
    assert!(
        output.contains("you sent: GET /echo auth=Bearer [hidden] body= | in env: 0"),
        "{output}"
    );
    assert!(output.contains("with API_TOKEN → 200"), "{output}");
    assert!(!serde_json::to_string(&job).unwrap().contains(LIMITED));
}

/// Each call prints its answer and then ` | exit=N` on the same line.
fn recipe(allowed: &str, other: &str) -> String {
    format!(
        r#"env > env.txt
call() {{ "$TETHER_AGENT" secret-http "$@"; echo " | exit=$?"; }}
call -H 'Authorization: Bearer {{{{API_TOKEN}}}}' {allowed}/echo
call -H 'Authorization: Bearer {{{{API_TOKEN}}}}' {other}/echo
call -i -H 'Authorization: Bearer {{{{API_TOKEN}}}}' {allowed}/redirect
call -X POST -d 'key={{{{PLAIN_TOKEN}}}}' {other}/echo
call -H 'X-Key: {{{{OTHER_TOKEN}}}}' {allowed}/echo
echo done"#
    )
}

/// `<data dir>-runs`, beside the agent's data dir (`TETHER_AGENT_HOME`).
fn runs_root(home: &Path) -> std::path::PathBuf {
    let name = home.file_name().unwrap().to_string_lossy();
    home.with_file_name(format!("{name}-runs"))
}

async fn run_job(web: &Web, device_id: &str, secrets: &[&str]) -> Job {
    let body = json!({
        "deviceId": device_id, "title": "call an API", "prompt": "",
        "folder": "work", "engine": "call", "mode": "unattended", "network": true,
        "timeoutMinutes": 5, "secrets": secrets,
    });
    let res = web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: serde_json::Value = res.json().await.unwrap();
    web.wait_for_job(
        job["id"].as_str().unwrap(),
        Duration::from_secs(60),
        |job| job.state.is_final(),
    )
    .await
}

/// A plain HTTP server on loopback that records `METHOD PATH auth=… body=…` of each
/// request. `/echo` answers that line; `/redirect` sends the caller to `redirect_to`'s
/// `/stolen` (which must never be asked for).
struct Recorder {
    origin: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    async fn start(redirect_to: &str) -> Recorder {
        let location = format!("{redirect_to}/stolen");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (record, location) = (record.clone(), location.clone());
                tokio::spawn(async move {
                    let Some(line) = read_request(&mut stream).await else {
                        return;
                    };
                    record.lock().unwrap().push(line.clone());
                    let response = if line.contains(" /redirect ") {
                        format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    } else {
                        let body = format!("you sent: {line}");
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        Recorder { origin, seen }
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request: `METHOD PATH auth=… body=…`.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        raw.extend_from_slice(&chunk[..read]);
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let mut lines = head.lines();
    let mut request_line = lines.next()?.split(' ');
    let (method, path) = (request_line.next()?, request_line.next()?);
    let header = |name: &str| {
        head.lines()
            .skip(1)
            .find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some(format!(
        "{method} {path} auth={} body={}",
        header("authorization"),
        String::from_utf8_lossy(&body)
    ))
}
