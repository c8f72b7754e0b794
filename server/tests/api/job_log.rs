//! A run's log: each line stamped when it was printed (from its age in the progress call),
//! the raw log downloaded by its owner only, and its lines read a page at a time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{assert_error, spawn_app};

/// The times of the job's output lines, by text.
fn output_times(job: &tether_protocol::jobs::Job) -> Vec<(String, DateTime<Utc>)> {
    job.events
        .iter()
        .filter(|event| event.kind == "output")
        .map(|event| (event.text.clone(), event.at))
        .collect()
}

both_backends! {
    async fn each_line_of_a_batch_keeps_the_time_it_was_printed(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let (job_id, lease) = (job.id.as_str(), claimed.lease_token.expose());
        app.advance(Duration::from_secs(10));
        let sent = app.now();
        let body = json!({ "seq": 1, "lines": ["a", "b", "c"], "lineAgesMs": [3000, 1000, 0] });
        assert_eq!(device.progress(job_id, lease, &body).await.status(), StatusCode::OK);
        let ms = chrono::Duration::milliseconds;
        let times = output_times(&ann.job(job_id).await);
        assert_eq!(
            times,
            [("a".to_owned(), sent - ms(3000)), ("b".to_owned(), sent - ms(1000)), ("c".to_owned(), sent)],
        );

        // An age past the bound, or one that would put a line before the last one stored,
        // is cut; lines never go back in time nor into the future.
        app.advance(Duration::from_secs(1));
        let later = app.now();
        let body = json!({ "seq": 2, "lines": ["d", "e", "f"], "lineAgesMs": [u64::MAX, 5, 400] });
        assert_eq!(device.progress(job_id, lease, &body).await.status(), StatusCode::OK);
        let times = output_times(&ann.job(job_id).await);
        assert_eq!(times[3], ("d".to_owned(), sent), "not before c");
        assert_eq!(times[4], ("e".to_owned(), later - ms(5)));
        assert_eq!(times[5], ("f".to_owned(), later - ms(5)), "not before e");

        // Without ages, the time the batch arrived.
        app.advance(Duration::from_secs(1));
        let body = json!({ "seq": 3, "lines": ["g", "h"] });
        assert_eq!(device.progress(job_id, lease, &body).await.status(), StatusCode::OK);
        let times = output_times(&ann.job(job_id).await);
        assert_eq!(times[6].1, app.now());
        assert_eq!(times[7].1, app.now());

        // One age per line, or none.
        let body = json!({ "seq": 4, "lines": ["i", "j"], "lineAgesMs": [1] });
        let message = assert_error(device.progress(job_id, lease, &body).await, 422, "invalid_field").await;
        assert!(message.contains("lineAgesMs"), "{message}");
    }

    async fn the_raw_log_is_its_owners_to_download(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let bob = app.user("bob@example.com").await;
        let device = app.device(&ann, "install-1").await;
        let job = ann.create_job(&device.device_id).await;
        let claimed = device.claim_job().await;
        let (job_id, lease) = (job.id.as_str(), claimed.lease_token.expose());
        let lines: Vec<String> = (1..=150).map(|n| format!("\u{1b}[31mline {n}\u{1b}[0m")).collect();
        let body = json!({ "seq": 1, "lines": lines, "status": "building" });
        assert_eq!(device.progress(job_id, lease, &body).await.status(), StatusCode::OK);

        let res = ann.get(&format!("/api/jobs/{job_id}/log")).await;
        assert_eq!(res.status(), StatusCode::OK);
        let header = |name: &str| res.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        assert_eq!(header("content-type"), "text/plain; charset=utf-8");
        assert_eq!(header("content-disposition"), format!("attachment; filename=\"tether-job-{job_id}.log\""));
        assert_eq!(header("x-content-type-options"), "nosniff");
        let text = res.text().await.unwrap();
        let read: Vec<&str> = text.lines().collect();
        assert_eq!(read.len(), 152, "{text}");
        assert!(read[0].starts_with("[system] Claimed by the device"), "{text}");
        // As printed: colours included, for a terminal to show.
        assert_eq!(read[1], "\u{1b}[31mline 1\u{1b}[0m");
        assert_eq!(read[150], "\u{1b}[31mline 150\u{1b}[0m");
        assert_eq!(read[151], "[status] building");

        // Another account's job is not found, as is a job that does not exist.
        let res = bob.get(&format!("/api/jobs/{job_id}/log")).await;
        assert_error(res, 404, "not_found").await;
        let res = bob.get(&format!("/api/jobs/{job_id}/lines")).await;
        assert_error(res, 404, "not_found").await;
        let res = ann.get("/api/jobs/job_00000000000000000000000000/log").await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        let res = reqwest::get(format!("{}/api/jobs/{job_id}/log", app.base)).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

        // A page at a time.
        let res = ann.get(&format!("/api/jobs/{job_id}/lines?after=1&limit=100")).await;
        assert_eq!(res.status(), StatusCode::OK);
        let page: Value = res.json().await.unwrap();
        let events = page["events"].as_array().unwrap();
        assert_eq!((events.len(), &page["more"]), (100, &json!(true)));
        assert_eq!((&events[0]["seq"], &events[0]["text"]), (&json!(2), &json!("\u{1b}[31mline 1\u{1b}[0m")));
        let res = ann.get(&format!("/api/jobs/{job_id}/lines?after=101")).await;
        let page: Value = res.json().await.unwrap();
        assert_eq!((page["events"].as_array().unwrap().len(), &page["more"]), (51, &json!(false)));
        let res = ann.get(&format!("/api/jobs/{job_id}/lines?after=many")).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    }
}
