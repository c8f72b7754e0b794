//! An engine's own setup end to end, with the real server and daemon: its home kept between
//! runs, its variables, and its `model` network under bubblewrap (only its endpoint; another
//! loopback port is not there) and under Landlock (refused, saying why).
//!
//! The engine is a shell script that reports what it sees on stderr and exits (so the job
//! fails as an agent that broke the protocol, with every line in its output): what matters
//! here is the process Tether starts, not a conversation.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tether_protocol::jobs::{Job, JobState, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{
    agent_ok, backend_works, output_lines, pair, spawn_server, start_daemon, Daemon, Server, Web,
};

/// An HTTP server on loopback answering every request `200 ok`; its port.
async fn answering_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    port
}

/// The probe engine's script: what its process can reach and see.
const PROBE: &str = r#"#!/bin/sh
echo "model $(curl -s -m 5 -o /dev/null -w '%{http_code}' "$MODEL_BASE_URL/v1")" >&2
echo "other $(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$OTHER_PORT/")" >&2
echo "home $HOME" >&2
echo "before $(cat "$HOME/marker" 2>/dev/null || echo none)" >&2
echo "run" >> "$HOME/marker"
echo "setting $PROBE_SETTING" >&2
exit 3
"#;

/// A paired computer sharing `work`, with the probe engine `probe` on `--network model`.
struct Probe {
    _server: Server,
    web: Web,
    device_id: String,
    home: tempfile::TempDir,
    _work: tempfile::TempDir,
    _scripts: tempfile::TempDir,
    daemon: Daemon,
}

impl Probe {
    async fn start(backend: &str, model_port: u16, other_port: u16) -> Probe {
        let server = spawn_server(None).await;
        let web = Web::sign_up(&server.base).await;
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let scripts = tempfile::tempdir().unwrap();
        let script = scripts.path().join("probe.sh");
        std::fs::write(&script, PROBE).unwrap();
        let device_id = pair(&server.base, &web, home.path()).await;
        agent_ok(
            home.path(),
            &["folders", "share", "work", work.path().to_str().unwrap()],
        )
        .await;
        let model = format!("MODEL_BASE_URL=http://127.0.0.1:{model_port}");
        let other = format!("OTHER_PORT={other_port}");
        let said = agent_ok(
            home.path(),
            &[
                "engine",
                "add",
                "probe",
                "--acp",
                "--network",
                "model",
                "--env",
                &model,
                "--env",
                &other,
                "--env",
                "PROBE_SETTING=on",
                "--",
                "/bin/sh",
                script.to_str().unwrap(),
            ],
        )
        .await;
        assert!(said.contains("network model"), "{said}");
        assert!(
            said.contains("env MODEL_BASE_URL, OTHER_PORT, PROBE_SETTING"),
            "{said}"
        );
        let daemon = start_daemon(home.path(), backend);
        web.wait_for_device(&device_id, |device| {
            device.online
                && device
                    .capabilities
                    .as_ref()
                    .is_some_and(|caps| caps.engines.iter().any(|engine| engine.name == "probe"))
        })
        .await;
        Probe {
            _server: server,
            web,
            device_id,
            home,
            _work: work,
            _scripts: scripts,
            daemon,
        }
    }

    async fn run(&self) -> Job {
        let job = self
            .web
            .create_job(&self.device_id, "probe", "look around")
            .await;
        let id = job.id.to_string();
        self.web
            .wait_until_ended(&id, Duration::from_secs(60))
            .await
    }

    fn state_home(&self) -> std::path::PathBuf {
        let data = self.home.path().canonicalize().unwrap();
        let mut name = data.file_name().unwrap().to_os_string();
        name.push("-engines");
        data.with_file_name(name).join("probe/home")
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let root = self.state_home();
        if let Some(engines) = root.parent().and_then(Path::parent) {
            let _ = std::fs::remove_dir_all(engines);
        }
    }
}

fn said(job: &Job, line: &str) -> bool {
    output_lines(job)
        .iter()
        .any(|seen| seen == &format!("stderr: {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_on_its_model_network_reaches_its_endpoint_only_and_keeps_its_home() {
    if !backend_works("bwrap").await {
        return;
    }
    let (model, other) = (answering_server().await, answering_server().await);
    let probe = Probe::start("bwrap", model, other).await;
    let first = probe.run().await;
    assert_eq!(first.state, JobState::Failed, "{first:#?}");
    assert!(said(&first, "model 200"), "{:#?}", output_lines(&first));
    assert!(
        said(&first, "other 000"),
        "another loopback port is not there: {:#?}",
        output_lines(&first)
    );
    let home = probe.state_home();
    assert!(
        said(&first, &format!("home {}", home.display())),
        "{:#?}",
        output_lines(&first)
    );
    assert!(said(&first, "before none"));
    assert!(said(&first, "setting on"), "--env reaches the engine");
    let second = probe.run().await;
    assert!(
        said(&second, "before run"),
        "the home is kept: {:#?}",
        output_lines(&second)
    );
    assert_eq!(
        std::fs::read_to_string(home.join("marker")).unwrap(),
        "run\nrun\n"
    );
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&home).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);
    assert!(!probe.daemon.stderr().contains("panicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn landlock_cannot_limit_an_engine_to_its_model_so_the_run_is_blocked() {
    if !backend_works("landlock").await {
        return;
    }
    let port = answering_server().await;
    let probe = Probe::start("landlock", port, port).await;
    let job = probe.run().await;
    assert_eq!(job.state, JobState::Blocked, "{job:#?}");
    let outcome = job.outcome.clone().unwrap();
    assert_eq!(outcome.outcome, Outcome::Blocked);
    let summary = outcome.summary;
    assert!(summary.contains("--network on"), "{summary}");
    let status = agent_ok(probe.home.path(), &["sandbox", "status", "--json"]).await;
    let report: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        report["guarantees"]["networkModelEnforced"],
        json!(false),
        "{report}"
    );
}
