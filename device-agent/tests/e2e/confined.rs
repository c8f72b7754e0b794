//! Confinement end to end, with the real server and the real daemon, under `bwrap` and again
//! under `landlock`: a job whose recipe tries to escape leaves the host untouched; a recipe on
//! the hard floor ends `blocked` without running; killing the agent with SIGKILL leaves no
//! process of the run behind; and with the backend taken away, the report says `none` and a
//! job ends `blocked` with the reason. The default choice, with nothing pinned, runs jobs
//! under bubblewrap where it works.

use std::path::Path;
use std::time::Duration;

use tether_protocol::jobs::JobState;

use super::{
    agent_command, agent_ok, backend_works, external, output_lines, pair, spawn_server, wait_until,
    Daemon, Web,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confined_jobs_leave_the_host_untouched_bwrap() {
    confined_jobs("bwrap").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confined_jobs_leave_the_host_untouched_landlock() {
    confined_jobs("landlock").await;
}

/// With no `TETHER_SANDBOX` at all (the default, `auto`), a computer where bubblewrap works
/// runs its jobs under bubblewrap, not Landlock: the daemon reports `bwrap` and the recipe
/// sees bubblewrap's PID namespace and an empty home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_choice_runs_jobs_under_bubblewrap() {
    if !backend_works("bwrap").await {
        return;
    }
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let person = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(person.path().join(".ssh")).unwrap();
    std::fs::write(person.path().join(".ssh/id_ed25519"), "FAKE-PRIVATE-KEY\n").unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let looks = format!(
        "printf 'init %s\\n' \"$(cat /proc/1/comm)\"; \
         printf 'home [%s]\\n' \"$(ls -A {person} 2>&1)\"; \
         cat {person}/.ssh/id_ed25519; echo done",
        person = person.path().display(),
    );
    agent_ok(
        home.path(),
        &["folders", "share", "work", work.path().to_str().unwrap()],
    )
    .await;
    agent_ok(
        home.path(),
        &["recipe", "add", "looks", "--", "sh", "-c", &looks],
    )
    .await;

    // Nothing pinned: the agent as a person runs it.
    let unpinned = || {
        let mut command = agent_command(home.path());
        command
            .env_remove("TETHER_SANDBOX")
            .env("HOME", person.path());
        command
    };
    let status = unpinned()
        .args(["sandbox", "status", "--json"])
        .output()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(report["backend"], "bwrap", "{report}");
    assert_eq!(report["strength"], "strong", "{report}");
    let daemon = Daemon::spawn(unpinned());
    let device = web
        .wait_for_device(&device_id, |device| {
            device.online && device.capabilities.is_some()
        })
        .await;
    let capabilities = device.capabilities.unwrap();
    assert_eq!(capabilities.sandbox.backend, "bwrap");
    assert_eq!(serde_json::to_value(&capabilities.sandbox).unwrap(), report);

    let job = web.create_job(&device_id, "looks", "look around").await;
    let job = web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(60))
        .await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let output = output_lines(&job);
    // Process 1 of the run's world is bubblewrap itself; under Landlock it is the host's.
    assert!(output.contains(&"init bwrap".to_owned()), "{output:?}");
    // The home is an empty folder in there (Landlock would refuse to list it instead).
    assert!(output.contains(&"home []".to_owned()), "{output:?}");
    assert!(
        !output.iter().any(|line| line.contains("FAKE-PRIVATE-KEY")),
        "{output:?}"
    );
    assert!(output.contains(&"done".to_owned()), "{output:?}");
}

/// `tether-agent run` with the given environment on top of the tests' usual one.
fn start_daemon(home: &Path, env: &[(&str, &str)]) -> Daemon {
    let mut command = agent_command(home);
    for (name, value) in env {
        command.env(name, value);
    }
    Daemon::spawn(command)
}

fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        if stat.is_empty()
            || stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        {
            continue;
        }
        let cmdline =
            String::from_utf8_lossy(&std::fs::read(path.join("cmdline")).unwrap_or_default())
                .replace('\0', " ");
        if cmdline.contains(marker) && !cmdline.contains("cargo") {
            found.push(cmdline);
        }
    }
    found
}

async fn confined_jobs(backend: &str) {
    let probe = agent_command(Path::new("/nonexistent-home"))
        .env("TETHER_SANDBOX", backend)
        .args(["sandbox", "status", "--json"])
        .output()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    if report["backend"] != backend {
        external::unavailable(&format!(
            "the {backend} backend does not work here: {report}"
        ));
        return;
    }

    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    std::fs::create_dir_all(work.path().join(".git/hooks")).unwrap();
    std::fs::write(work.path().join(".git/config"), "[core]\n").unwrap();
    let token = std::fs::read_to_string(home.path().join("device-token")).unwrap();
    let id = format!("{}{}", backend, std::process::id());
    let etc = format!("/etc/tether-e2e-{id}");
    let escape = format!(
        "cat {data}/device-token > stolen-token; cat {data}/seal-key.json {data}/local.key > stolen-keys; \
         echo pwned > {etc}; echo pwned > {outside}/x; echo evil > .git/hooks/pre-commit; \
         printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config; \
         curl -s -m 3 http://{server} >/dev/null; echo \"curl=$?\"; env; echo done",
        data = home.path().display(),
        outside = outside.path().display(),
        server = server.base.trim_start_matches("http://"),
    );
    let marker = format!("96{}", std::process::id());
    let lingering =
        format!("setsid sleep {marker}1 & (sleep {marker}2 &); echo started; sleep {marker}3");
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    agent_ok(
        home.path(),
        &["recipe", "add", "escape", "--", "bash", "-c", &escape],
    )
    .await;
    // `recipe add` refuses this command; a configuration edited by hand can still hold it,
    // and the run's own check must stop it then.
    let config_path = home.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["recipes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "name": "floor", "program": "bash", "args": ["-lc", "touch ran; sudo id"],
        }));
    std::fs::write(&config_path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    agent_ok(
        home.path(),
        &["recipe", "add", "linger", "--", "bash", "-c", &lingering],
    )
    .await;

    let mut daemon = start_daemon(home.path(), &[("TETHER_SANDBOX", backend)]);
    let device = web
        .wait_for_device(&device_id, |device| {
            device.online
                && device
                    .capabilities
                    .as_ref()
                    .is_some_and(|caps| caps.engines.len() == 3)
        })
        .await;
    let capabilities = device.capabilities.unwrap();
    assert_eq!(capabilities.sandbox.backend, backend);
    assert_eq!(serde_json::to_value(&capabilities.sandbox).unwrap(), report);

    // The escape: the job itself succeeds, and the host is as it was.
    let job = web.create_job(&device_id, "escape", "try to get out").await;
    let job = web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(60))
        .await;
    let output = output_lines(&job);
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    assert!(output.contains(&"done".to_owned()), "{output:?}");
    assert!(!Path::new(&etc).exists(), "{etc} was written");
    let _ = std::fs::remove_file(&etc);
    assert!(!outside.path().join("x").exists());
    for name in ["stolen-token", "stolen-keys"] {
        let stolen = std::fs::read_to_string(work.path().join(name)).unwrap_or_default();
        assert!(stolen.is_empty(), "{name}: {stolen:?}");
    }
    assert!(
        !output.iter().any(|line| line.contains(token.trim())),
        "the token leaked"
    );
    assert!(
        !work.path().join(".git/hooks/pre-commit").exists(),
        "{output:?}"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(
        output
            .iter()
            .any(|line| line.starts_with("curl=") && line != "curl=0"),
        "{output:?}"
    );
    assert!(
        !output
            .iter()
            .any(|line| line.starts_with("TETHER_AGENT_HOME=")),
        "{output:?}"
    );

    // The hard floor: blocked, naming the rule, and nothing ran.
    let job = web.create_job(&device_id, "floor", "x").await;
    let job = web
        .wait_until_ended(job.id.as_str(), Duration::from_secs(60))
        .await;
    assert_eq!(job.state, JobState::Blocked, "{job:#?}");
    let summary = job.outcome.unwrap().summary;
    assert!(summary.contains("rule privilege"), "{summary}");
    assert!(!work.path().join("ran").exists());

    // SIGKILL the agent mid-run: nothing of the run survives it.
    let job = web.create_job(&device_id, "linger", "x").await;
    web.wait_for_job(job.id.as_str(), Duration::from_secs(60), |job| {
        output_lines(job).contains(&"started".to_owned())
    })
    .await;
    assert!(host_processes_with(&format!("sleep {marker}")).len() >= 3);
    daemon.signal("KILL").await;
    let pattern = format!("sleep {marker}");
    wait_until(Duration::from_secs(10), || {
        host_processes_with(&pattern).is_empty()
    })
    .await;
    let left = host_processes_with(&pattern);
    assert!(
        left.is_empty(),
        "survivors of the agent's SIGKILL: {left:?}"
    );
    let _ = daemon.child.wait().await;

    // The backend taken away: reported as `none`, and a job ends blocked with the reason.
    let taken_away = [
        ("TETHER_SANDBOX", backend),
        ("TETHER_BWRAP", "/nonexistent/bwrap"),
    ];
    if backend == "bwrap" {
        let mut daemon = start_daemon(home.path(), &taken_away);
        let device = web
            .wait_for_device(&device_id, |device| {
                device.online
                    && device
                        .capabilities
                        .as_ref()
                        .is_some_and(|caps| caps.sandbox.backend == "none")
            })
            .await;
        let reasons = device.capabilities.unwrap().sandbox.reasons;
        assert!(reasons[0].contains("/nonexistent/bwrap"), "{reasons:?}");
        let job = web.create_job(&device_id, "escape", "x").await;
        let job = web
            .wait_until_ended(job.id.as_str(), Duration::from_secs(60))
            .await;
        assert_eq!(
            job.state,
            JobState::Blocked,
            "{job:#?}\n{}",
            daemon.stderr()
        );
        assert!(job.outcome.unwrap().summary.contains("no working sandbox"));
        daemon.signal("TERM").await;
        let _ = daemon.wait(Duration::from_secs(30)).await;
    }
    eprintln!("confined jobs under {backend}: the host is untouched");
}
