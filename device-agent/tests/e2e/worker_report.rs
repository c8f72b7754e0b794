//! The worker's report and `tether_attach` from a recipe, end to end with the real server,
//! daemon and sandbox: a recipe that leaves `.tether/result.json` completes with that
//! report on `GET /api/jobs/{id}` (saved values hidden, the file left in place); an invalid
//! `tool report` is refused with the problem (exit 1) and a valid one wins over the file;
//! `tool attach` keeps a file under the name it answers, and refuses one outside the folder;
//! an invalid result file is named in the job's output and no report is kept. A coding
//! agent's run (the scripted ACP agent) says what it used, and its result file is read too.

use std::time::Duration;

use serde_json::json;
use tether_protocol::decisions::Answer;
use tether_protocol::jobs::{Job, JobState};

use super::acp::Computer;
use crate::{agent_ok, backend_works, output_lines, pair, spawn_server, start_daemon, Web};

/// Writes the result file, tries a bad tool report, attaches a log and a file outside.
const FROM_THE_FILE: &str = r#"mkdir -p .tether
cat > .tether/result.json <<'JSON'
{"summary": "Fixed the login\nSessions last a day now.", "done": ["session cookie"],
 "tested": [{"command": "make test", "outcome": "passed"}], "risks": ["old sessions end"],
 "links": ["http://127.0.0.1:3000/login"]}
JSON
echo '{"summary": ""}' | "$TETHER_AGENT" tool report -; echo "bad report exit=$?"
echo "all tests passed" > test.log
"$TETHER_AGENT" tool attach test.log --kind log --caption "The test run"; echo "attach exit=$?"
"$TETHER_AGENT" tool attach ../elsewhere.txt; echo "outside exit=$?""#;

/// A valid tool report, then a result file that would say otherwise.
const FROM_THE_TOOL: &str = r#"printf '{"summary": "Reported through the tool"}' > r.json
"$TETHER_AGENT" tool report r.json; echo "report exit=$?"
mkdir -p .tether && echo '{"summary": "from the file"}' > .tether/result.json"#;

const BROKEN: &str =
    r#"mkdir -p .tether && echo '{"summary": "x", "colour": "red"}' > .tether/result.json"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_hands_back_its_report_and_attaches_a_file() {
    let (backend, network) = if backend_works("bwrap").await {
        ("bwrap", false)
    } else if backend_works("landlock").await {
        // Landlock refuses a job without the internet every `connect`, the channel's too.
        ("landlock", true)
    } else {
        return;
    };
    let server = spawn_server(None).await;
    let web = Web::sign_up(&server.base).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let device_id = pair(&server.base, &web, home.path()).await;
    let work_path = work.path().to_str().unwrap();
    agent_ok(home.path(), &["folders", "share", "work", work_path]).await;
    for (name, script) in [
        ("file", FROM_THE_FILE),
        ("tool", FROM_THE_TOOL),
        ("broken", BROKEN),
    ] {
        agent_ok(
            home.path(),
            &["recipe", "add", name, "--", "sh", "-c", script],
        )
        .await;
    }
    let daemon = start_daemon(home.path(), backend);
    web.wait_for_device(&device_id, |device| device.online)
        .await;
    let run = |engine: &'static str| run(&web, &device_id, engine, network);

    let job = run("file").await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:#?}\n{}",
        daemon.stderr()
    );
    let output = output_lines(&job).join("\n");
    let report = job.outcome.as_ref().and_then(|o| o.report.clone());
    let report = report.unwrap_or_else(|| panic!("no report: {job:#?}\n{output}"));
    assert_eq!(report.first_line(), "Fixed the login");
    assert_eq!(report.done, ["session cookie"]);
    assert_eq!(report.tested[0].command, "make test");
    assert_eq!(report.links, ["http://127.0.0.1:3000/login"]);
    assert!(
        work.path().join(".tether/result.json").exists(),
        "the file stays"
    );
    assert!(
        output.contains("the report is not valid: summary"),
        "{output}"
    );
    assert!(output.contains("bad report exit=1"), "{output}");
    assert!(
        output.contains("kept as test.log in the run's evidence"),
        "{output}"
    );
    assert!(output.contains("attach exit=0"), "{output}");
    assert!(output.contains("outside the run's folder"), "{output}");
    assert!(output.contains("outside exit=1"), "{output}");

    let job = run("tool").await;
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}");
    let report = job.outcome.as_ref().and_then(|o| o.report.clone());
    assert_eq!(
        report.map(|r| r.summary),
        Some("Reported through the tool".to_owned()),
        "the tool's report wins over the file"
    );

    let job = run("broken").await;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "a bad report never fails the run"
    );
    assert_eq!(job.outcome.as_ref().and_then(|o| o.report.clone()), None);
    let output = output_lines(&job).join("\n");
    assert!(
        output.contains("the worker's report in .tether/result.json was not used"),
        "{output}"
    );
    drop(daemon);
}

async fn run(web: &Web, device_id: &str, engine: &str, network: bool) -> Job {
    let body = json!({
        "deviceId": device_id, "title": engine, "prompt": "Fix the login",
        "folder": "work", "engine": engine, "mode": "unattended", "network": network,
        "timeoutMinutes": 5,
    });
    let res = web.post("/api/jobs", &body).await;
    let text = res.text().await.unwrap();
    let job: Job = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
    web.wait_for_job(job.id.as_ref(), Duration::from_secs(60), |job| {
        job.state.is_final()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_run_says_what_it_used_and_hands_back_its_report() {
    let computer = Computer::start().await;
    let report = json!({"summary": "Scripted work done", "risks": ["none known"]}).to_string();
    let steps = json!([
        {"write": {"path": ".tether/result.json", "content": report}},
        {"say": "All done."}
    ]);
    let job_id = computer.create("unattended", true, steps).await;
    let (job, _) = computer.run(&job_id, |_| Answer::Deny).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:#?}");
    let report = job.outcome.as_ref().and_then(|o| o.report.clone());
    assert_eq!(
        report.map(|r| (r.summary, r.risks)),
        Some((
            "Scripted work done".to_owned(),
            vec!["none known".to_owned()]
        )),
        "{job:#?}"
    );
    let used = job.observed.last().map(|attempt| attempt.used.clone());
    let used = used.unwrap_or_else(|| panic!("nothing observed: {job:#?}"));
    assert_eq!(used.engine.as_deref(), Some("scripted-acp-agent"));
    assert_eq!(used.engine_version.as_deref(), Some("1.0.0"));
    assert_eq!(used.model.as_deref(), Some("scripted-model"));
    assert_eq!(used.effort.as_deref(), Some("medium"));
    assert_eq!(used.mode.as_deref(), Some("default"));
    let output = output_lines(&job).join("\n");
    assert!(
        output.contains("the agent ended its turn (end_turn)"),
        "{output}"
    );
}
