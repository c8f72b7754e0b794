//! Wake-ups, file relays and outage recovery with real processes: the agent binary, the
//! server (in this process, or as its own binary when the test kills it), and a proxy
//! between them that a test can cut.
//!
//! Side effects are counted, not guessed: the recipes append a line to `runs.txt` in the
//! shared folder at start and at end, so a run that ran twice (or not to its end) shows.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tether_protocol::jobs::JobState;
use tokio::process::{Child, Command};

use super::delivery::git;
use super::proxy::Proxy;
use super::*;

/// Appends `start N` and `end N` (N = TETHER_RESUMED, 0 for a first run) around a sleep.
/// The first attempt sleeps `$1` seconds, a carried-on one 1 second.
const COUNTED: &str = r#"n=${TETHER_RESUMED:-0}; echo "start $n" >> runs.txt; echo "started $n"; if [ "$n" = 0 ]; then sleep "$1"; else sleep 1; fi; echo "end $n" >> runs.txt; echo "finished $n""#;

/// A computer paired with a server, sharing `work` and `spare` (two runs at once need two
/// folders: a run waits for a folder another run holds), with `counted` recipes.
struct Rig {
    web: Web,
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    spare: tempfile::TempDir,
    device_id: String,
}

impl Rig {
    /// Signs up on `server_base`, pairs the agent through `agent_base` (the server or a
    /// proxy in front of it), shares a folder and adds `counted-<secs>` recipes.
    async fn new(server_base: &str, agent_base: &str, sleeps: &[u32]) -> Rig {
        let web = Web::sign_up(server_base).await;
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let spare = tempfile::tempdir().unwrap();
        let device_id = pair(agent_base, &web, home.path()).await;
        for (label, dir) in [("work", &work), ("spare", &spare)] {
            agent_ok(
                home.path(),
                &["folders", "share", label, dir.path().to_str().unwrap()],
            )
            .await;
        }
        agent_ok(
            home.path(),
            &["recipe", "add", "echo", "--", "sh", "-c", "echo started"],
        )
        .await;
        for secs in sleeps {
            let name = format!("counted-{secs}");
            let secs = secs.to_string();
            agent_ok(
                home.path(),
                &[
                    "recipe", "add", &name, "--", "sh", "-c", COUNTED, "counted", &secs,
                ],
            )
            .await;
        }
        Rig {
            web,
            home,
            work,
            spare,
            device_id,
        }
    }

    /// Starts `tether-agent run` and waits until the device is online with its recipes and
    /// its event stream is connected.
    async fn start_daemon(&self) -> Daemon {
        self.start_daemon_with(&[]).await
    }

    /// Like [`Rig::start_daemon`], with more arguments for `run`.
    async fn start_daemon_with(&self, args: &[&str]) -> Daemon {
        let daemon = Daemon::start_with(self.home.path(), args);
        self.web
            .wait_for_device(&self.device_id, |device| {
                device.online
                    && device
                        .capabilities
                        .as_ref()
                        .is_some_and(|caps| !caps.engines.is_empty())
            })
            .await;
        daemon
            .wait_for_log("event stream connected", Duration::from_secs(30))
            .await;
        daemon
    }

    /// The lines the runs appended to `runs.txt`, in either folder.
    fn side_effects(&self) -> Vec<String> {
        [&self.work, &self.spare]
            .iter()
            .flat_map(|dir| {
                std::fs::read_to_string(dir.path().join("runs.txt"))
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

impl Daemon {
    /// `tether-agent run ARGS…` in the background, its output collected.
    fn start_with(home: &Path, args: &[&str]) -> Daemon {
        let mut child = agent_command(home)
            .arg("run")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        tokio::spawn(collect(child.stderr.take().unwrap(), stderr.clone()));
        tokio::spawn(collect(child.stdout.take().unwrap(), stderr.clone()));
        Daemon { child, stderr }
    }

    /// Waits until the agent's log says `text`.
    async fn wait_for_log(&self, text: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the agent never said {text:?}:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A job for a connected, idle agent starts at once through the event stream: the server's
/// heartbeat is five minutes here (the longest the agent takes), far longer than the test
/// runs, so after the first one only a push can start anything. The times are printed, not
/// asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_starts_a_job_on_an_idle_agent_at_once() {
    let server = spawn_server_with(None, |config| {
        config.heartbeat_secs = 300;
        // Online by its first heartbeat for as long as the test runs.
        config.online_secs = 3600;
    })
    .await;
    let rig = Rig::new(&server.base, &server.base, &[]).await;
    let _daemon = rig.start_daemon().await;
    // Let the first heartbeat's claim pass, so the agent is idle and waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let jobs = jobs_to_measure(10);
    let mut to_claim = Vec::new();
    let mut to_output = Vec::new();
    for _ in 0..jobs {
        let created_at = Instant::now();
        let job = rig.web.create_job(&rig.device_id, "echo", "hi").await;
        let job = rig
            .web
            .wait_for_job(job.id.as_str(), Duration::from_secs(10), |job| {
                output_lines(job).iter().any(|line| line == "started")
            })
            .await;
        to_output.push(created_at.elapsed());
        let claimed = job.started_at.unwrap() - job.created_at;
        to_claim.push(claimed.to_std().unwrap_or_default());
        rig.web
            .wait_until_ended(job.id.as_str(), Duration::from_secs(10))
            .await;
    }
    eprintln!(
        "push, {jobs} jobs, heartbeat 300 s: assignment→claim (server clock) {}; \
         assignment→first output seen by the web (includes the 250 ms output batching and \
         this test's 100 ms polling) {}",
        percentiles(&mut to_claim),
        percentiles(&mut to_output)
    );
}

/// An idle agent whose event stream is open is asked for the idle pace (300 s here, a
/// hundred leases); a run it then claims is reported at once and kept at the busy pace, so a
/// run that prints nothing for longer than its lease still finishes, once. A stream lost
/// while idle ends the slow pace too, so jobs are claimed by heartbeat again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_claimed_at_the_idle_pace_keeps_its_lease() {
    let server = spawn_server_with(None, |config| {
        config.lease_secs = 3;
        config.heartbeat_secs = 1;
        config.idle_heartbeat_secs = 300;
        // The stream's traffic keeps the device online between idle heartbeats.
        config.events_ping_secs = 1;
        config.online_secs = 5;
    })
    .await;
    let proxy = Proxy::start(&server.base).await;
    let rig = Rig::new(&server.base, &proxy.base, &[8]).await;
    let daemon = rig.start_daemon().await;
    // The heartbeats after the stream opened are answered with the idle pace.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let job = rig
        .web
        .create_job(&rig.device_id, "counted-8", "count")
        .await;
    daemon
        .wait_for_log("no longer idle", Duration::from_secs(10))
        .await;
    let job = rig
        .web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(40))
        .await;
    assert_eq!(
        (job.state, job.attempt),
        (JobState::Succeeded, 1),
        "{job:#?}\n{}",
        daemon.stderr()
    );
    assert_eq!(rig.side_effects(), ["start 0", "end 0"]);

    // Idle again, at the slow pace; then the stream is cut (and refused).
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.drop_events();
    daemon
        .wait_for_log("event stream lost", Duration::from_secs(10))
        .await;
    let job = rig.web.create_job(&rig.device_id, "echo", "hi").await;
    let job = rig
        .web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(15))
        .await;
    assert_eq!(job.state, JobState::Succeeded, "{}", daemon.stderr());
}

/// How many jobs a latency test assigns: `TETHER_PICKUP_JOBS` (for a longer measurement),
/// else `default`.
fn jobs_to_measure(default: usize) -> usize {
    std::env::var("TETHER_PICKUP_JOBS")
        .ok()
        .and_then(|jobs| jobs.parse().ok())
        .unwrap_or(default)
        .max(1)
}

/// `p50 …, p99 …, max …` of the samples (sorted in place).
fn percentiles(samples: &mut [Duration]) -> String {
    samples.sort();
    let at = |share: f64| {
        let index = ((samples.len() as f64 * share).ceil() as usize).clamp(1, samples.len());
        samples[index - 1]
    };
    format!(
        "p50 {:?}, p99 {:?}, max {:?}",
        at(0.5),
        at(0.99),
        samples[samples.len() - 1]
    )
}

/// With the event stream dropped (and refused), a new job still starts within a heartbeat:
/// the agent claims on every heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_event_stream_costs_at_most_a_heartbeat() {
    let heartbeat = Duration::from_secs(2);
    let server = spawn_server_with(None, |config| config.heartbeat_secs = 2).await;
    let proxy = Proxy::start(&server.base).await;
    let rig = Rig::new(&server.base, &proxy.base, &[]).await;
    let daemon = rig.start_daemon().await;
    assert_eq!(proxy.events_opened(), 1);

    proxy.drop_events();
    daemon
        .wait_for_log("event stream lost", Duration::from_secs(10))
        .await;
    let jobs = jobs_to_measure(1);
    let mut to_claim = Vec::new();
    for _ in 0..jobs {
        let job = rig.web.create_job(&rig.device_id, "echo", "hi").await;
        let job = rig
            .web
            .wait_until_ended(job.id.as_str(), Duration::from_secs(20))
            .await;
        assert_eq!(job.state, JobState::Succeeded, "{}", daemon.stderr());
        let claimed = (job.started_at.unwrap() - job.created_at)
            .to_std()
            .unwrap_or_default();
        // One heartbeat, plus the claim's own round trip.
        assert!(
            claimed <= heartbeat + Duration::from_secs(1),
            "{claimed:?}\n{}",
            daemon.stderr()
        );
        to_claim.push(claimed);
    }
    eprintln!(
        "no event stream (polling only), {jobs} job(s), heartbeat {heartbeat:?}: \
         assignment→claim {}",
        percentiles(&mut to_claim)
    );
    assert_eq!(proxy.events_opened(), 1, "the stream stayed down");

    // Once the stream is allowed again, the agent reconnects by itself.
    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(40);
    while proxy.events_opened() < 2 {
        assert!(Instant::now() < deadline, "{}", daemon.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The web reads a job's folder live from the device, after the job ended, within the
/// device's rules: no secrets (every `.env*` name, `.gitconfig`), no `.git`, no links
/// leading out, text redacted (also each secret pair of a one-line JSON and URL passwords),
/// and the hostile inputs of issue 13 (a 1 MiB line of base64, 1 MiB of 64 KiB lines of
/// `a.`) answered well within the relay's wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_reads_a_jobs_folder_live_within_the_devices_rules() {
    let server = spawn_server(None).await;
    let rig = Rig::new(&server.base, &server.base, &[]).await;
    let work = rig.work.path();
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::create_dir_all(work.join(".git")).unwrap();
    std::fs::write(work.join("README.md"), "hello\n").unwrap();
    std::fs::write(work.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(work.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    std::fs::write(work.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(
        work.join("deploy.sh"),
        "export API_TOKEN=abc123\ncurl -H 'x: ghp_abcdefghijklmnopqrstuvwxyz0123'\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/hostname", work.join("escape")).unwrap();
    for secret in [".envrc", ".env-prod", ".gitconfig"] {
        std::fs::write(work.join(secret), "TOKEN=x\n").unwrap();
    }
    std::fs::write(
        work.join("settings.json"),
        r#"{"client_secret": "s3cr3t", "password": "p@ss", "db": "postgres://u:secret@db/app"}"#,
    )
    .unwrap();
    let base64: String = (0..1024 * 1024u32)
        .map(|i| {
            char::from(
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                    [(i.wrapping_mul(2_654_435_761) >> 26) as usize],
            )
        })
        .collect();
    std::fs::write(work.join("blob.txt"), &base64).unwrap();
    let dots = format!("{}\n", "a.".repeat(32 * 1024 - 1));
    std::fs::write(work.join("hostile.txt"), dots.repeat(16)).unwrap();
    let daemon = rig.start_daemon().await;
    let job = rig.web.create_job(&rig.device_id, "echo", "hi").await;
    let job_id = job.id.to_string();
    rig.web
        .wait_until_ended(&job_id, Duration::from_secs(30))
        .await;

    let res = rig.web.get(&format!("/api/jobs/{job_id}/tree?path=")).await;
    assert_eq!(res.status(), StatusCode::OK, "{}", daemon.stderr());
    let tree: Value = res.json().await.unwrap();
    let names: Vec<&str> = tree["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "src",
            "README.md",
            "blob.txt",
            "deploy.sh",
            "escape",
            "hostile.txt",
            "settings.json"
        ],
        "{tree}"
    );

    let read = |path: &str| {
        let web = &rig.web;
        let url = format!("/api/jobs/{job_id}/file?path={path}");
        async move {
            let res = web.get(&url).await;
            let status = res.status();
            (status, res.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, file) = read("README.md").await;
    assert_eq!(
        (status, file["text"].as_str()),
        (StatusCode::OK, Some("hello\n"))
    );
    let (status, file) = read("deploy.sh").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        file["text"],
        "export API_TOKEN=[redacted]\ncurl -H 'x: [redacted]'\n"
    );
    let (status, file) = read("settings.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        file["text"],
        r#"{"client_secret": "[redacted]", "password": "[redacted]", "db": "postgres://u:[redacted]@db/app"}"#
    );
    // Before issue 13 these held an agent core for minutes and the web got a 504.
    let (status, file) = read("blob.txt").await;
    assert_eq!(status, StatusCode::OK, "{file}");
    assert_eq!(
        file["text"],
        "[redacted: a line of 1048576 bytes is too long to check]"
    );
    let (status, file) = read("hostile.txt").await;
    assert_eq!(status, StatusCode::OK, "{file}");
    assert_eq!(file["text"].as_str().map(str::len), Some(dots.len() * 16));
    for refused in [
        ".env",
        ".git/config",
        "escape",
        ".envrc",
        ".env-prod",
        ".gitconfig",
    ] {
        let (status, body) = read(refused).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused}: {body}");
        assert_eq!(body["error"]["code"], "path_refused", "{refused}: {body}");
    }
    let (status, body) = read("missing.txt").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

/// `kill -9` of the agent mid-run: after the lease, the job is interrupted; the agent started
/// again carries it on (a new attempt with TETHER_RESUMED=1) and it finishes once. The first
/// attempt's process never reaches its end (it dies with the agent, or the restarted agent
/// stops what is left of it before carrying on).
async fn an_agent_killed_mid_run_is_interrupted_then_resumed_once(database_url: Option<String>) {
    let server = spawn_server_with(database_url, |config| {
        config.lease_secs = 3;
        config.heartbeat_secs = 1;
    })
    .await;
    let rig = Rig::new(&server.base, &server.base, &[30]).await;
    let mut daemon = rig.start_daemon().await;

    let job = rig
        .web
        .create_job(&rig.device_id, "counted-30", "count")
        .await;
    let job_id = job.id.to_string();
    rig.web
        .wait_for_job(&job_id, Duration::from_secs(30), |job| {
            output_lines(job).contains(&"started 0".to_owned())
        })
        .await;
    daemon.signal("KILL").await;
    let _ = daemon.wait(Duration::from_secs(10)).await;
    let first = daemon.stderr();

    let killed_at = Instant::now();
    let job = rig
        .web
        .wait_until_ended(&job_id, Duration::from_secs(30))
        .await;
    assert_eq!(job.state, JobState::Interrupted, "{job:#?}");
    eprintln!("interrupted {:?} after the kill", killed_at.elapsed());
    assert_eq!(rig.side_effects(), ["start 0"]);
    assert!(rig
        .home
        .path()
        .join("runs")
        .join(format!("{job_id}.json"))
        .exists());

    let daemon = rig.start_daemon().await;
    // The job is already final (interrupted); wait for the carry-on's attempt to end.
    let job = rig
        .web
        .wait_for_job(&job_id, Duration::from_secs(60), |job| {
            job.attempt >= 2 && job.state.is_final()
        })
        .await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n--- first agent:\n{first}\n--- second agent:\n{}",
        daemon.stderr()
    );
    assert_eq!(job.attempt, 2);
    assert!(output_lines(&job).contains(&"finished 1".to_owned()));
    // Nothing more happens: no second carry-on, no leftover of the first attempt.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rig.side_effects(), ["start 0", "start 1", "end 1"]);
    let job = rig.web.job(&job_id).await;
    assert_eq!((job.state, job.attempt), (JobState::Succeeded, 2));
    assert!(!rig
        .home
        .path()
        .join("runs")
        .join(format!("{job_id}.json"))
        .exists());
    eprintln!("--- second agent said:\n{}", daemon.stderr());
}

/// A network outage longer than the lease, with the server up: the sweeper marks the job
/// interrupted; when the network is back the agent reattaches the run (same attempt, new
/// lease) and it finishes once. One run keeps going through the outage, one finishes
/// during it (its completion is reported after the reattach).
async fn a_network_outage_past_the_lease_is_reattached_and_finishes_once(
    database_url: Option<String>,
) {
    let server = spawn_server_with(database_url, |config| {
        config.lease_secs = 3;
        config.heartbeat_secs = 1;
    })
    .await;
    let proxy = Proxy::start(&server.base).await;
    let rig = Rig::new(&server.base, &proxy.base, &[3, 12]).await;
    // Jobs are assigned only once the device has published its recipes.
    let daemon = rig.start_daemon_with(&["--max-runs", "2"]).await;

    let short = rig
        .web
        .create_job(&rig.device_id, "counted-3", "short")
        .await;
    let long = rig
        .web
        .create_job_in(&rig.device_id, "counted-12", "long", "spare")
        .await;
    for job in [&short, &long] {
        rig.web
            .wait_for_job(job.id.as_str(), Duration::from_secs(30), |job| {
                output_lines(job).contains(&"started 0".to_owned())
            })
            .await;
    }

    proxy.cut();
    let cut_at = Instant::now();
    for job in [&short, &long] {
        let seen = rig
            .web
            .wait_until_ended(job.id.as_str(), Duration::from_secs(20))
            .await;
        assert_eq!(seen.state, JobState::Interrupted, "{seen:#?}");
    }
    // The short run finishes while cut off.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.side_effects().len() < 3 {
        assert!(Instant::now() < deadline, "{:?}", rig.side_effects());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "both interrupted; network back after {:?}",
        cut_at.elapsed()
    );
    proxy.restore();

    for job in [&short, &long] {
        // Interrupted is final too; wait for it to come back and end.
        let done = rig
            .web
            .wait_for_job(job.id.as_str(), Duration::from_secs(40), |job| {
                job.state.is_final() && job.state != JobState::Interrupted
            })
            .await;
        assert_eq!(
            done.state,
            JobState::Succeeded,
            "{done:#?}\n{}",
            daemon.stderr()
        );
        assert_eq!(done.attempt, 1, "reattached, not resumed");
        assert!(
            output_lines(&done).contains(&"finished 0".to_owned()),
            "output printed while cut off is delivered: {:?}",
            output_lines(&done)
        );
        assert!(
            done.events
                .iter()
                .any(|event| event.text.contains("Reattached")),
            "{:#?}",
            done.events
        );
    }
    let mut effects = rig.side_effects();
    effects.sort();
    assert_eq!(effects, ["end 0", "end 0", "start 0", "start 0"]);
    assert!(daemon.stderr().contains("reattached after an outage"));
}

/// `kill -9` of the server mid-run, restarted on the same database after longer than a
/// lease: one run finishes while the server is down (its output and completion wait), one
/// keeps going through the outage. Both finish once, under their first attempt and their
/// first lease, with no second execution of the recipe and nothing reattached: the
/// restarted server gives running leases one more period before its first sweep, and the
/// agent, which reports a finished run's lease until its completion is answered, extends
/// both at its next heartbeat (at least once a heartbeat period, a second here).
///
/// The agent reaches the server through a proxy held shut until the restarted server has
/// granted that period, so its first request never races the grant; the restarted server's
/// lease (8 s) leaves that heartbeat ample time.
async fn a_server_killed_mid_run_and_restarted_finishes_the_runs_once(
    database_url: Option<String>,
) {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = ServerProcess::start(data_dir.path(), port, database_url.as_deref(), 3).await;
    let proxy = Proxy::start(&server.base).await;
    let rig = Rig::new(&server.base, &proxy.base, &[2, 16]).await;
    // Jobs are assigned only once the device has published its recipes.
    let daemon = rig.start_daemon_with(&["--max-runs", "2"]).await;

    let short = rig
        .web
        .create_job(&rig.device_id, "counted-2", "short")
        .await;
    let long = rig
        .web
        .create_job_in(&rig.device_id, "counted-16", "long", "spare")
        .await;
    for job in [&short, &long] {
        rig.web
            .wait_for_job(job.id.as_str(), Duration::from_secs(30), |job| {
                output_lines(job).contains(&"started 0".to_owned())
            })
            .await;
    }
    server.kill9().await;
    proxy.cut();
    // Down for longer than the restarted server's lease (8 s), so it grants the outage
    // period; the short run ends meanwhile, the long one goes on.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(rig.side_effects().len(), 3, "{:?}", rig.side_effects());
    let server = ServerProcess::start(data_dir.path(), port, database_url.as_deref(), 8).await;
    server
        .wait_for_log("running leases extended", Duration::from_secs(30))
        .await;
    proxy.restore();

    for job in [&short, &long] {
        let done = rig
            .web
            .wait_for_job(job.id.as_str(), Duration::from_secs(60), |job| {
                job.state.is_final() && job.state != JobState::Interrupted
            })
            .await;
        assert_eq!(
            done.state,
            JobState::Succeeded,
            "{done:#?}\n--- agent:\n{}\n--- server:\n{}",
            daemon.stderr(),
            server.log()
        );
        assert_eq!(done.attempt, 1);
        assert!(output_lines(&done).contains(&"finished 0".to_owned()));
        assert!(
            !done
                .events
                .iter()
                .any(|event| event.text.contains("Reattached")),
            "{:#?}\n--- agent:\n{}",
            done.events,
            daemon.stderr()
        );
    }
    assert!(
        !daemon.stderr().contains("reattached"),
        "{}",
        daemon.stderr()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut effects = rig.side_effects();
    effects.sort();
    assert_eq!(effects, ["end 0", "end 0", "start 0", "start 0"]);
}

/// Appends `start N`, prints `started N`, and after 3 seconds appends `end N`, prints
/// `finished N` and exits 3 (N = TETHER_RESUMED): the last line cannot be delivered when the
/// server is down by then, and the outcome reported is told from a run again.
const COUNTED_FAILING: &str = r#"n=${TETHER_RESUMED:-0}; echo "start $n" >> runs.txt; echo "started $n"; sleep 3; echo "end $n" >> runs.txt; echo "finished $n"; exit 3"#;

/// The recipe ends while the server is down, and the agent is killed before the server
/// comes back: the outcome was journaled when the process ended, so the agent started
/// again reports it (exit code 3, attempt 1) and runs nothing a second time.
async fn a_run_that_ended_while_the_server_was_down_is_reported_after_a_restart_not_run_again(
    database_url: Option<String>,
) {
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(data_dir.path(), port, database_url.as_deref(), 3).await;
    let rig = Rig::new(&server.base, &server.base, &[]).await;
    agent_ok(
        rig.home.path(),
        &[
            "recipe",
            "add",
            "counted-fail",
            "--",
            "sh",
            "-c",
            COUNTED_FAILING,
        ],
    )
    .await;
    let daemon = rig.start_daemon().await;
    let job = rig
        .web
        .create_job(&rig.device_id, "counted-fail", "once")
        .await;
    let job_id = job.id.to_string();
    let restarted = Restart {
        data_dir: data_dir.path(),
        port,
        database_url: database_url.as_deref(),
    };
    let settled = restarted.settled(&rig, &job_id, server, daemon).await;
    let (done, context) = (&settled.job, || settled.context());
    assert_eq!(done.state, JobState::Failed, "{}", context());
    assert_eq!(done.attempt, 1, "{}", context());
    assert_eq!(
        done.outcome.as_ref().map(|outcome| outcome.exit_code),
        Some(Some(3)),
        "{}",
        context()
    );
    // Nothing more happens: no carry-on, the record settled.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rig.side_effects(), ["start 0", "end 0"], "{}", context());
    let job = rig.web.job(&job_id).await;
    assert_eq!((job.state, job.attempt), (JobState::Failed, 1));
    assert!(!record_of(&rig, &job_id).exists(), "{}", context());
}

/// The same with a git delivery (`commit`) that had not begun when the agent was killed:
/// the restarted agent neither runs the recipe again nor delivers. The run, which
/// succeeded, is reported `blocked`, saying Tether made no commit; the repository has
/// none but its first.
async fn a_delivery_cut_off_by_a_restart_is_reported_not_made(database_url: Option<String>) {
    if !crate::external::git() {
        return;
    }
    let data_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = ServerProcess::start(data_dir.path(), port, database_url.as_deref(), 3).await;
    let rig = Rig::new(&server.base, &server.base, &[]).await;
    let work = rig.work.path();
    git(work, &["init", "-q", "-b", "main"]);
    git(work, &["commit", "-q", "--allow-empty", "-m", "first"]);
    // Succeeds, so a delivery would commit what it appended.
    let script = COUNTED_FAILING.replace("; exit 3", "");
    agent_ok(
        rig.home.path(),
        &["recipe", "add", "counted-ok", "--", "sh", "-c", &script],
    )
    .await;
    let daemon = rig.start_daemon().await;
    let body = json!({
        "deviceId": rig.device_id, "title": "deliver once", "prompt": "once",
        "folder": "work", "engine": "counted-ok", "mode": "unattended", "network": false,
        "timeoutMinutes": 5, "git": {"delivery": "commit"},
    });
    let res = rig.web.post("/api/jobs", &body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let job: Job = res.json().await.unwrap();
    let job_id = job.id.to_string();
    let restarted = Restart {
        data_dir: data_dir.path(),
        port,
        database_url: database_url.as_deref(),
    };
    let settled = restarted.settled(&rig, &job_id, server, daemon).await;
    let (done, context) = (&settled.job, || settled.context());
    assert_eq!(
        (done.state, done.attempt),
        (JobState::Blocked, 1),
        "{}",
        context()
    );
    let summary = done
        .outcome
        .as_ref()
        .map(|outcome| outcome.summary.clone())
        .unwrap_or_default();
    assert!(
        summary.contains("no commit, push or merge"),
        "{}",
        context()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rig.side_effects(), ["start 0", "end 0"], "{}", context());
    assert_eq!(git(work, &["rev-list", "--count", "HEAD"]), "1");
    assert!(!record_of(&rig, &job_id).exists(), "{}", context());
}

/// Where a server killed and started again keeps its data, and on which port.
struct Restart<'a> {
    data_dir: &'a Path,
    port: u16,
    database_url: Option<&'a str>,
}

/// A job settled after [`Restart::after_the_run_ended`], with the processes that settled it
/// (dropping them stops them) and what the first agent said.
struct Settled {
    job: Job,
    server: ServerProcess,
    daemon: Daemon,
    first: String,
}

impl Settled {
    /// The job and every log, for a failed assertion.
    fn context(&self) -> String {
        format!(
            "{:#?}\n--- first agent:\n{}\n--- second agent:\n{}\n--- server:\n{}",
            self.job,
            self.first,
            self.daemon.stderr(),
            self.server.log()
        )
    }
}

impl Restart<'_> {
    /// [`Restart::after_the_run_ended`], then waits for the job to end other than
    /// interrupted.
    async fn settled(
        &self,
        rig: &Rig,
        job_id: &str,
        server: ServerProcess,
        daemon: Daemon,
    ) -> Settled {
        let (server, daemon, first) = self.after_the_run_ended(rig, job_id, server, daemon).await;
        let job = rig
            .web
            .wait_for_job(job_id, Duration::from_secs(60), |job| {
                job.state.is_final() && job.state != JobState::Interrupted
            })
            .await;
        Settled {
            job,
            server,
            daemon,
            first,
        }
    }

    /// Kills the server once `job_id` printed `started 0`, lets its recipe end while the
    /// server is down, kills the agent, then starts both again: the new server, the new
    /// agent, and what the first agent said.
    async fn after_the_run_ended(
        &self,
        rig: &Rig,
        job_id: &str,
        mut server: ServerProcess,
        mut daemon: Daemon,
    ) -> (ServerProcess, Daemon, String) {
        rig.web
            .wait_for_job(job_id, Duration::from_secs(30), |job| {
                output_lines(job).contains(&"started 0".to_owned())
            })
            .await;
        server.kill9().await;
        wait_until(Duration::from_secs(20), || {
            rig.side_effects().contains(&"end 0".to_owned())
        })
        .await;
        assert_eq!(rig.side_effects(), ["start 0", "end 0"]);
        // Give the agent the moment it needs to journal the end (it never comes without
        // the fix: the kill goes ahead anyway).
        let record = record_of(rig, job_id);
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&record).is_ok_and(|text| !text.contains("\"running\""))
        })
        .await;
        daemon.signal("KILL").await;
        let _ = daemon.wait(Duration::from_secs(10)).await;
        let first = daemon.stderr();
        let server = ServerProcess::start(self.data_dir, self.port, self.database_url, 3).await;
        (server, rig.start_daemon().await, first)
    }
}

/// The agent's journal record of `job_id`.
fn record_of(rig: &Rig, job_id: &str) -> PathBuf {
    rig.home.path().join("runs").join(format!("{job_id}.json"))
}

/// A partition that holds every connection open and silent (nothing answers, nothing is
/// closed) for longer than the lease, the server up: the job is interrupted; when the hold
/// ends, the calls that waited through it fail, and the agent reattaches the run (same
/// attempt), which finishes once. The calls went out while the lease still ran, so the
/// outage is dated from then, not from when they failed.
async fn a_partition_that_holds_calls_past_the_lease_is_reattached_and_finishes_once(
    database_url: Option<String>,
) {
    let server = spawn_server_with(database_url, |config| {
        config.lease_secs = 3;
        config.heartbeat_secs = 1;
    })
    .await;
    let proxy = Proxy::start(&server.base).await;
    let rig = Rig::new(&server.base, &proxy.base, &[12]).await;
    let daemon = rig.start_daemon().await;
    let job = rig
        .web
        .create_job(&rig.device_id, "counted-12", "held")
        .await;
    let job_id = job.id.to_string();
    rig.web
        .wait_for_job(&job_id, Duration::from_secs(30), |job| {
            output_lines(job).contains(&"started 0".to_owned())
        })
        .await;

    proxy.hold();
    let seen = rig
        .web
        .wait_until_ended(&job_id, Duration::from_secs(20))
        .await;
    assert_eq!(seen.state, JobState::Interrupted, "{seen:#?}");
    proxy.release();

    let done = rig
        .web
        .wait_for_job(&job_id, Duration::from_secs(40), |job| {
            job.state.is_final() && job.state != JobState::Interrupted
        })
        .await;
    assert_eq!(
        done.state,
        JobState::Succeeded,
        "{done:#?}\n{}",
        daemon.stderr()
    );
    assert_eq!(done.attempt, 1, "reattached, not resumed");
    assert!(output_lines(&done).contains(&"finished 0".to_owned()));
    assert!(
        done.events
            .iter()
            .any(|event| event.text.contains("Reattached")),
        "{:#?}",
        done.events
    );
    assert_eq!(rig.side_effects(), ["start 0", "end 0"]);
    assert!(daemon.stderr().contains("reattached after an outage"));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The built `tether-server` binary, next to the agent's.
fn server_binary() -> PathBuf {
    let path = Path::new(AGENT).with_file_name("tether-server");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p tether-server` first (the README's test \
         command builds the whole workspace)",
        path.display()
    );
    path
}

/// `tether-server` as its own process, on SQLite in `data_dir` (or on `database_url`), with
/// short timings and a lease of `lease_secs`.
struct ServerProcess {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
}

impl ServerProcess {
    async fn start(
        data_dir: &Path,
        port: u16,
        database_url: Option<&str>,
        lease_secs: u32,
    ) -> ServerProcess {
        let mut command = Command::new(server_binary());
        if let Some(url) = database_url {
            command.env("TETHER_DATABASE_URL", url);
        } else {
            command.env_remove("TETHER_DATABASE_URL");
        }
        let mut child = command
            .env("TETHER_LISTEN", format!("127.0.0.1:{port}"))
            .env("TETHER_DATA_DIR", data_dir)
            .env("TETHER_LEASE_SECS", lease_secs.to_string())
            .env("TETHER_HEARTBEAT_SECS", "1")
            .env("TETHER_SWEEP_SECS", "1")
            .env("TETHER_ONLINE_SECS", "5")
            .env("TETHER_RATE_LIMITS", "off")
            .env_remove("TETHER_REDIS_URL")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        tokio::spawn(collect(child.stderr.take().unwrap(), log.clone()));
        tokio::spawn(collect(child.stdout.take().unwrap(), log.clone()));
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let healthy = http
                .get(format!("{base}/healthz"))
                .send()
                .await
                .is_ok_and(|res| res.status().is_success());
            if healthy {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not start:\n{}",
                log.lock().unwrap()
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "the server exited:\n{}",
                log.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ServerProcess { child, base, log }
    }

    async fn kill9(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the server's log says `text`.
    async fn wait_for_log(&self, text: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the server never said {text:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs each recovery scenario on SQLite and on PostgreSQL.
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(None).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(url) = crate::postgres::fresh_database_url() {
                        super::$name(Some(url)).await;
                    }
                }
            }
        )*
    };
}

on_both_databases!(
    an_agent_killed_mid_run_is_interrupted_then_resumed_once,
    a_network_outage_past_the_lease_is_reattached_and_finishes_once,
    a_server_killed_mid_run_and_restarted_finishes_the_runs_once,
    a_run_that_ended_while_the_server_was_down_is_reported_after_a_restart_not_run_again,
    a_delivery_cut_off_by_a_restart_is_reported_not_made,
    a_partition_that_holds_calls_past_the_lease_is_reattached_and_finishes_once,
);
