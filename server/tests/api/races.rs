//! Requests racing for one unique row get the right answers, never a 500: concurrent
//! signups of one email, concurrent links of pairings of one installation.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_backends;
use crate::helpers::{seal_key, spawn_app};

both_backends! {
    async fn concurrent_signups_of_one_email_make_one_account(backend) {
        let app = spawn_app(backend).await;
        let signups = (0..8).map(|n| {
            let mut web = app.web();
            async move { web.signup("Race@Example.com", "correct horse battery", &format!("Racer {n}")).await }
        });
        let answers = futures_util::future::join_all(signups).await;
        let mut created = 0;
        for res in answers {
            match res.status().as_u16() {
                201 => {
                    created += 1;
                    let body: Value = res.json().await.unwrap();
                    assert_eq!(body["user"]["isAdmin"], true, "the one account is the first");
                }
                409 => {
                    let body: Value = res.json().await.unwrap();
                    assert_eq!(body["error"]["code"], "email_taken", "{body}");
                }
                other => panic!("a signup answered {other}: {}", res.text().await.unwrap()),
            }
        }
        assert_eq!(created, 1);
        // Two different first signups at once: still exactly one admin.
        let signups = (0..4).map(|n| {
            let mut web = app.web();
            async move { web.signup(&format!("later{n}@example.com"), "correct horse battery", "Later").await }
        });
        for res in futures_util::future::join_all(signups).await {
            assert_eq!(res.status(), StatusCode::CREATED);
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["user"]["isAdmin"], false);
        }
    }

    async fn concurrent_links_of_one_installation_make_one_device(backend) {
        let app = spawn_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let mut codes = Vec::new();
        for _ in 0..4 {
            let paired: Value = app.pair("install-same", &seal_key()).await.json().await.unwrap();
            codes.push((paired["userCode"].as_str().unwrap().to_owned(), paired["deviceCode"].as_str().unwrap().to_owned()));
        }
        let bodies: Vec<Value> = codes.iter().map(|(user_code, _)| json!({ "userCode": user_code })).collect();
        let links = bodies.iter().map(|body| ann.post("/api/devices/link", body));
        let mut device_ids = Vec::new();
        for res in futures_util::future::join_all(links).await {
            let status = res.status();
            let body: Value = res.json().await.unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            device_ids.push(body["deviceId"].as_str().unwrap().to_owned());
        }
        device_ids.dedup();
        assert_eq!(device_ids.len(), 1, "one computer: {device_ids:?}");
        assert_eq!(ann.devices().await.len(), 1);
        // Each pairing redeems to that device; the last token redeemed is the one that works.
        let mut last = None;
        for (_, device_code) in &codes {
            let res = app.register(device_code).await;
            assert_eq!(res.status(), StatusCode::OK);
            let registered: Value = res.json().await.unwrap();
            assert_eq!(registered["deviceId"], device_ids[0].as_str());
            last = Some(registered["token"].as_str().unwrap().to_owned());
        }
        let res = reqwest::Client::new().get(format!("{}/api/devices/self", app.base))
            .bearer_auth(last.unwrap()).header("x-tether-protocol", "1").send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }
}
