//! Web Push: subscriptions (checked, one per endpoint, another account's a 404) and the
//! messages a phone is sent. The push service is played by a loopback double (an actix
//! server in the test, admitted by `TETHER_PUSH_ALLOW_LOOPBACK`); the test is the browser:
//! it makes the subscription's key pair and auth secret, checks the VAPID signature against
//! `GET /api/push/key`, and decrypts each body per RFC 8291 with its own private key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Key, Nonce};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::Utc;
use hkdf::Hkdf;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::elliptic_curve::rand_core::{OsRng, RngCore};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{PublicKey, SecretKey};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::sync::{mpsc, watch, Mutex};

use crate::both_backends;
use crate::helpers::{
    assert_error, query_i64, spawn_app_with, two_replicas, wait_for_row, Backend, DeviceClient,
    TestApp, WebClient,
};

/// How long a test waits for something the server does in the background.
const WAIT: Duration = Duration::from_secs(10);
const HASH: &str = "9f86d081884c7d659a2feb8e8bfa6ac5c9f4b8b2c4c53e1f1e0c6e8d2b1a3f40";

/// One request the push service double received.
struct Received {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

struct DoubleState {
    /// The status it answers with.
    status: AtomicU16,
    /// `false` holds every request until it turns `true`.
    released: watch::Sender<bool>,
    /// Requests answered so far.
    answered: AtomicUsize,
    seen: mpsc::UnboundedSender<Received>,
}

/// A push service on loopback.
struct PushDouble {
    origin: String,
    state: web::Data<DoubleState>,
    seen: Mutex<mpsc::UnboundedReceiver<Received>>,
}

impl PushDouble {
    async fn start() -> PushDouble {
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let (released, _) = watch::channel(true);
        let state = web::Data::new(DoubleState {
            status: AtomicU16::new(201),
            released,
            answered: AtomicUsize::new(0),
            seen: seen_tx,
        });
        let data = state.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::to(take))
        })
        .workers(1)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .unwrap();
        let origin = format!("http://{}", server.addrs()[0]);
        tokio::spawn(server.run());
        PushDouble {
            origin,
            state,
            seen: Mutex::new(seen),
        }
    }

    fn endpoint(&self, name: &str) -> String {
        format!("{}/push/{name}", self.origin)
    }

    fn answer_with(&self, status: u16) {
        self.state.status.store(status, Ordering::SeqCst);
    }

    fn hold(&self) {
        self.state.released.send_replace(false);
    }

    fn release(&self) {
        self.state.released.send_replace(true);
    }

    fn answered(&self) -> usize {
        self.state.answered.load(Ordering::SeqCst)
    }

    /// The next request, or `None` when none comes within `within`.
    async fn next_within(&self, within: Duration) -> Option<Received> {
        tokio::time::timeout(within, self.seen.lock().await.recv())
            .await
            .ok()
            .flatten()
    }

    async fn next(&self) -> Received {
        self.next_within(WAIT)
            .await
            .expect("the push service double received a request")
    }
}

async fn take(req: HttpRequest, body: web::Bytes, state: web::Data<DoubleState>) -> HttpResponse {
    let headers = req
        .headers()
        .iter()
        .map(|(name, value)| {
            let value = value.to_str().unwrap_or_default().to_owned();
            (name.as_str().to_owned(), value)
        })
        .collect();
    let _ = state.seen.send(Received {
        path: req.path().to_owned(),
        headers,
        body: body.to_vec(),
    });
    let mut released = state.released.subscribe();
    let _ = released.wait_for(|released| *released).await;
    state.answered.fetch_add(1, Ordering::SeqCst);
    let status = state.status.load(Ordering::SeqCst);
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap()).finish()
}

/// The browser's half: its key pair and auth secret.
struct Browser {
    secret: SecretKey,
    auth: [u8; 16],
}

impl Browser {
    fn new() -> Browser {
        let mut auth = [0u8; 16];
        OsRng.fill_bytes(&mut auth);
        Browser {
            secret: SecretKey::random(&mut OsRng),
            auth,
        }
    }

    fn public(&self) -> Vec<u8> {
        self.secret
            .public_key()
            .to_encoded_point(false)
            .as_bytes()
            .to_vec()
    }

    /// `PushSubscription.toJSON()` for `endpoint`.
    fn subscription(&self, endpoint: &str) -> Value {
        json!({
            "endpoint": endpoint,
            "expirationTime": null,
            "keys": {
                "p256dh": URL_SAFE_NO_PAD.encode(self.public()),
                "auth": URL_SAFE_NO_PAD.encode(self.auth),
            },
        })
    }

    /// Opens an `aes128gcm` body as RFC 8291 §3 says the user agent does.
    fn decrypt(&self, body: &[u8]) -> Value {
        let salt = &body[..16];
        assert_eq!(
            u32::from_be_bytes(body[16..20].try_into().unwrap()),
            4096,
            "rs"
        );
        assert_eq!(body[20], 65, "idlen");
        let sender = PublicKey::from_sec1_bytes(&body[21..86]).unwrap();
        let shared =
            p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), sender.as_affine());
        let mut info = b"WebPush: info\0".to_vec();
        info.extend(self.public());
        info.extend(&body[21..86]);
        let mut ikm = [0u8; 32];
        Hkdf::<Sha256>::new(Some(&self.auth), &shared.raw_secret_bytes()[..])
            .expand(&info, &mut ikm)
            .unwrap();
        let keys = Hkdf::<Sha256>::new(Some(salt), &ikm);
        let mut cek = [0u8; 16];
        keys.expand(b"Content-Encoding: aes128gcm\0", &mut cek)
            .unwrap();
        let mut nonce = [0u8; 12];
        keys.expand(b"Content-Encoding: nonce\0", &mut nonce)
            .unwrap();
        let cipher = Aes128Gcm::new(&Key::<Aes128Gcm>::from(cek));
        let mut record = cipher.decrypt(&Nonce::from(nonce), &body[86..]).unwrap();
        // The last record: the 0x02 delimiter, then only zero padding.
        while record.last() == Some(&0) {
            record.pop();
        }
        assert_eq!(record.pop(), Some(0x02), "padding delimiter");
        serde_json::from_slice(&record).unwrap()
    }
}

/// The claims of the VAPID header, after checking its ES256 signature with `public_key`.
fn vapid_claims(authorization: &str, public_key: &str) -> Value {
    let rest = authorization
        .strip_prefix("vapid t=")
        .expect("a vapid header");
    let (token, k) = rest.split_once(", k=").unwrap();
    assert_eq!(k, public_key, "k is the server's key");
    let (signing_input, signature) = token.rsplit_once('.').unwrap();
    let (header, claims) = signing_input.split_once('.').unwrap();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    let key = VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(public_key).unwrap()).unwrap();
    let signature = Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
    key.verify(signing_input.as_bytes(), &signature)
        .expect("the signature is valid for the server's public key");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap()
}

async fn public_key(web: &WebClient) -> String {
    let res = web.get("/api/push/key").await;
    assert_eq!(res.status(), StatusCode::OK);
    let key: Value = res.json().await.unwrap();
    key["publicKey"].as_str().unwrap().to_owned()
}

async fn subscribe(web: &WebClient, body: &Value) -> String {
    let res = web.post("/api/push/subscriptions", body).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let made: Value = res.json().await.unwrap();
    made["id"].as_str().unwrap().to_owned()
}

async fn subscriptions(web: &WebClient) -> Vec<Value> {
    let res = web.get("/api/push/subscriptions").await;
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

async fn loopback_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, |config| {
        config.push_allow_loopback = true;
        config.push_subject = Some("mailto:ops@example.com".to_owned());
    })
    .await
}

/// A claimed run of `device`: (job id, lease token).
async fn running(owner: &WebClient, device: &DeviceClient) -> (String, String) {
    let job = owner.create_job(&device.device_id).await;
    let claimed = device.claim_job().await;
    (job.id.to_string(), claimed.lease_token.expose().to_owned())
}

async fn ask(device: &DeviceClient, job_id: &str, lease: &str) -> reqwest::Response {
    device
        .http
        .post(format!(
            "{}/api/devices/self/jobs/{job_id}/ask",
            device.base
        ))
        .bearer_auth(&device.token)
        .header("x-tether-protocol", "1")
        .header("x-tether-lease", lease)
        .json(&json!({
            "kind": "command", "question": "Run the test suite?",
            "action": { "command": ["cargo", "test"], "folder": "work" },
            "actionHash": HASH, "expiresInSecs": 86_400,
        }))
        .send()
        .await
        .unwrap()
}

async fn asked(device: &DeviceClient, job_id: &str, lease: &str) -> String {
    let res = ask(device, job_id, lease).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let body: Value = res.json().await.unwrap();
    body["decisionId"].as_str().unwrap().to_owned()
}

/// A run of `laptop` ends and no browser hears of it (so the replica learns the account is
/// quiet).
async fn ended_unheard(owner: &WebClient, laptop: &DeviceClient, double: &PushDouble) {
    let (job_id, lease) = running(owner, laptop).await;
    let res = laptop.complete(&job_id, &lease, &succeeded()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(double
        .next_within(Duration::from_millis(500))
        .await
        .is_none());
}

/// A run of `laptop` ends and `browser` is told.
async fn ended_heard(
    owner: &WebClient,
    laptop: &DeviceClient,
    double: &PushDouble,
    browser: &Browser,
) {
    let (job_id, lease) = running(owner, laptop).await;
    let res = laptop.complete(&job_id, &lease, &succeeded()).await;
    assert_eq!(res.status(), StatusCode::OK);
    let push = double.next().await;
    let told = browser.decrypt(&push.body);
    assert_eq!(
        (told["kind"].as_str(), told["url"].as_str()),
        (Some("job_ended"), Some(format!("/jobs/{job_id}").as_str()))
    );
}

/// An account one replica found quiet is told of ends once a browser subscribes through
/// another replica.
#[tokio::test]
async fn a_browser_subscribing_on_another_replica_is_heard_at_the_next_end() {
    let Some((a, b)) = two_replicas(|config| config.push_allow_loopback = true).await else {
        return;
    };
    let double = PushDouble::start().await;
    let ann = a.user("ann@example.com").await;
    let laptop = a.device(&ann, "install-1").await;
    ended_unheard(&ann, &laptop, &double).await;

    let on_b = WebClient {
        base: b.base.clone(),
        http: ann.http.clone(),
        csrf: ann.csrf.clone(),
    };
    let browser = Browser::new();
    subscribe(&on_b, &browser.subscription(&double.endpoint("phone"))).await;
    ended_heard(&ann, &laptop, &double, &browser).await;
}

fn succeeded() -> Value {
    json!({ "outcome": "succeeded", "summary": "All green." })
}

both_backends! {
    async fn a_decision_and_a_job_end_reach_the_phone_signed_and_encrypted(backend) {
        let app = loopback_app(backend).await;
        let double = PushDouble::start().await;
        let ann = app.user("ann@example.com").await;
        let key = public_key(&ann).await;
        assert_eq!(URL_SAFE_NO_PAD.decode(&key).unwrap().len(), 65);
        let browser = Browser::new();
        let id = subscribe(&ann, &browser.subscription(&double.endpoint("phone"))).await;
        let laptop = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &laptop).await;

        let decision_id = asked(&laptop, &job_id, &lease).await;
        let push = double.next().await;
        assert_eq!(push.path, "/push/phone");
        assert_eq!(push.headers["ttl"], "3600");
        assert_eq!(push.headers["urgency"], "high");
        assert_eq!(push.headers["content-encoding"], "aes128gcm");
        assert_eq!(push.headers["content-type"], "application/octet-stream");
        let claims = vapid_claims(&push.headers["authorization"], &key);
        assert_eq!(claims["aud"], double.origin.as_str(), "the endpoint's origin, with its port");
        assert_eq!(claims["sub"], "mailto:ops@example.com");
        let exp = claims["exp"].as_i64().unwrap();
        let now = Utc::now().timestamp();
        assert!(exp > now && exp <= now + 24 * 3600, "exp {exp}, now {now}");
        let mut told = browser.decrypt(&push.body);
        let answer_key = told["decision"]["answerKey"].take();
        assert_eq!(URL_SAFE_NO_PAD.decode(answer_key.as_str().unwrap()).unwrap().len(), 32);
        assert_eq!(
            told,
            json!({
                "kind": "decision", "title": "Run the test suite?", "computer": "laptop",
                "url": format!("/needs-me#{decision_id}"), "tag": format!("decision-{decision_id}"),
                "decision": { "id": decision_id, "actionHash": HASH, "answerKey": null,
                              "allowFromNotification": false },
            })
        );

        let res = laptop.complete(&job_id, &lease, &succeeded()).await;
        assert_eq!(res.status(), StatusCode::OK);
        let push = double.next().await;
        assert_eq!(push.headers["ttl"], "86400");
        assert_eq!(push.headers["urgency"], "normal");
        vapid_claims(&push.headers["authorization"], &key);
        assert_eq!(
            browser.decrypt(&push.body),
            json!({
                "kind": "job_ended", "title": "Run the tests succeeded", "computer": "laptop",
                "url": format!("/jobs/{job_id}"), "tag": format!("job-{job_id}"),
            })
        );
        // The same completion again (a retry) tells nobody twice.
        let res = laptop.complete(&job_id, &lease, &succeeded()).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(double.next_within(Duration::from_millis(500)).await.is_none());

        let sql = format!("SELECT last_success_at FROM push_subscriptions WHERE id = '{id}'");
        wait_for_row(&app.store, &sql, |at| at.is_some()).await;
        let listed = subscriptions(&ann).await;
        assert!(listed[0]["lastSuccessAt"].is_string(), "{listed:?}");
    }

    async fn a_subscription_the_push_service_calls_gone_is_removed(backend) {
        let app = loopback_app(backend).await;
        let double = PushDouble::start().await;
        double.answer_with(410);
        let ann = app.user("ann@example.com").await;
        subscribe(&ann, &Browser::new().subscription(&double.endpoint("old"))).await;
        let laptop = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &laptop).await;
        asked(&laptop, &job_id, &lease).await;
        double.next().await;
        wait_for_row(&app.store, "SELECT COUNT(*) FROM push_subscriptions", |n| n == Some(0)).await;
        assert!(subscriptions(&ann).await.is_empty());
        // Once, not retried.
        assert!(double.next_within(Duration::from_millis(500)).await.is_none());
    }

    async fn a_push_service_that_never_answers_holds_up_no_request(backend) {
        let app = loopback_app(backend).await;
        let double = PushDouble::start().await;
        double.hold();
        let ann = app.user("ann@example.com").await;
        let id = subscribe(&ann, &Browser::new().subscription(&double.endpoint("slow"))).await;
        let laptop = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &laptop).await;

        let first = tokio::time::timeout(WAIT, ask(&laptop, &job_id, &lease)).await;
        assert_eq!(first.expect("the ask answered").status(), StatusCode::CREATED);
        // The push service now holds the first message and does not answer.
        double.next().await;
        let second = tokio::time::timeout(WAIT, ask(&laptop, &job_id, &lease)).await;
        assert_eq!(second.expect("the second ask answered").status(), StatusCode::CREATED);
        let done = tokio::time::timeout(WAIT, laptop.complete(&job_id, &lease, &succeeded())).await;
        assert_eq!(done.expect("the completion answered").status(), StatusCode::OK);
        assert_eq!(double.answered(), 0, "every request returned while the push service held");

        double.release();
        let sql = format!("SELECT last_success_at FROM push_subscriptions WHERE id = '{id}'");
        wait_for_row(&app.store, &sql, |at| at.is_some()).await;
    }

    async fn kinds_turned_off_are_not_sent(backend) {
        let app = loopback_app(backend).await;
        let double = PushDouble::start().await;
        let ann = app.user("ann@example.com").await;
        let quiet = Browser::new();
        let quiet_id = subscribe(&ann, &quiet.subscription(&double.endpoint("quiet"))).await;
        let loud = Browser::new();
        let mut loud_body = loud.subscription(&double.endpoint("loud"));
        loud_body["kinds"] = json!({ "device_offline": false });
        let loud_id = subscribe(&ann, &loud_body).await;
        let res = ann
            .patch(&format!("/api/push/subscriptions/{quiet_id}"), &json!({ "kinds": { "decision": false } }))
            .await;
        assert_eq!(res.status(), StatusCode::OK);
        let changed: Value = res.json().await.unwrap();
        assert_eq!(changed["kinds"], json!({ "decision": false, "job_ended": true, "device_offline": true }));
        let res = ann.get(&format!("/api/push/subscriptions/{loud_id}")).await;
        let loud_listed: Value = res.json().await.unwrap();
        assert_eq!(loud_listed["kinds"], json!({ "decision": true, "job_ended": true, "device_offline": false }));

        let laptop = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &laptop).await;
        asked(&laptop, &job_id, &lease).await;
        let first = double.next().await;
        assert_eq!(first.path, "/push/loud");
        assert_eq!(loud.decrypt(&first.body)["kind"], "decision");
        laptop.complete(&job_id, &lease, &succeeded()).await;
        let mut ended = Vec::new();
        for _ in 0..2 {
            let push = double.next().await;
            let browser = if push.path == "/push/quiet" { &quiet } else { &loud };
            assert_eq!(browser.decrypt(&push.body)["kind"], "job_ended");
            ended.push(push.path);
        }
        ended.sort();
        assert_eq!(ended, ["/push/loud", "/push/quiet"]);
        assert!(double.next_within(Duration::from_millis(500)).await.is_none());
    }

    async fn an_account_found_quiet_hears_of_ends_as_soon_as_a_browser_wants_them(backend) {
        let app = loopback_app(backend).await;
        let double = PushDouble::start().await;
        let ann = app.user("ann@example.com").await;
        let browser = Browser::new();
        let mut body = browser.subscription(&double.endpoint("phone"));
        body["kinds"] = json!({ "job_ended": false });
        let id = subscribe(&ann, &body).await;
        let laptop = app.device(&ann, "install-1").await;
        ended_unheard(&ann, &laptop, &double).await;

        // Turning ends on is heard at the next end, though this replica had found the
        // account quiet.
        let kinds = json!({ "kinds": { "job_ended": true } });
        let res = ann.patch(&format!("/api/push/subscriptions/{id}"), &kinds).await;
        assert_eq!(res.status(), StatusCode::OK);
        ended_heard(&ann, &laptop, &double, &browser).await;

        // So is a new browser's subscription.
        let res = ann.patch(&format!("/api/push/subscriptions/{id}"), &json!({ "kinds": { "job_ended": false } })).await;
        assert_eq!(res.status(), StatusCode::OK);
        ended_unheard(&ann, &laptop, &double).await;
        let tablet = Browser::new();
        subscribe(&ann, &tablet.subscription(&double.endpoint("tablet"))).await;
        ended_heard(&ann, &laptop, &double, &tablet).await;
    }

    async fn deny_answers_from_the_notification_and_allow_only_when_the_owner_lets_it(backend) {
        let app = loopback_app(backend).await;
        let double = PushDouble::start().await;
        let ann = app.user("ann@example.com").await;
        let browser = Browser::new();
        subscribe(&ann, &browser.subscription(&double.endpoint("phone"))).await;
        let laptop = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &laptop).await;
        let first = asked(&laptop, &job_id, &lease).await;
        let told = browser.decrypt(&double.next().await.body);
        let key = told["decision"]["answerKey"].as_str().unwrap().to_owned();
        let anonymous = reqwest::Client::new();
        let answer = |id: &str, body: Value| {
            anonymous
                .post(format!("{}/api/decisions/{id}/notification-answer", app.base))
                .json(&body)
                .send()
        };

        // Another key, another decision's id, garbage: nothing is answered.
        let wrong_key = URL_SAFE_NO_PAD.encode([7u8; 32]);
        let res = answer(&first, json!({ "answer": "deny", "actionHash": HASH, "answerKey": wrong_key })).await.unwrap();
        assert_error(res, 404, "not_found").await;
        let unknown = "01900000-0000-7000-8000-000000000000";
        let res = answer(unknown, json!({ "answer": "deny", "actionHash": HASH, "answerKey": key })).await.unwrap();
        assert_error(res, 404, "not_found").await;
        let res = answer(&first, json!({ "answer": "maybe", "actionHash": HASH, "answerKey": key })).await.unwrap();
        assert!(res.status().is_client_error(), "{}", res.status());
        // The key answers only the action the notification showed.
        let other_hash = "0".repeat(64);
        let res = answer(&first, json!({ "answer": "deny", "actionHash": other_hash, "answerKey": key })).await.unwrap();
        assert_error(res, 409, "invalid_state").await;
        // Allow needs the owner's consent; until then it is refused and nothing changes.
        let res = answer(&first, json!({ "answer": "allow", "actionHash": HASH, "answerKey": key })).await.unwrap();
        assert_error(res, 403, "forbidden").await;
        let listed: Value = ann.get("/api/decisions?state=pending").await.json().await.unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

        let res = answer(&first, json!({ "answer": "deny", "actionHash": HASH, "answerKey": key })).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let denied: Value = res.json().await.unwrap();
        assert_eq!(denied["state"], "answered");
        assert_eq!(denied["answer"], "deny");
        assert_eq!(denied["answeredBy"], "notification");
        let seen: Value = laptop
            .http
            .get(format!("{}/api/devices/self/decisions/{first}", laptop.base))
            .bearer_auth(&laptop.token)
            .header("x-tether-protocol", "1")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(seen["answer"], "deny");
        // The first answer wins: the same tap again, or the page afterwards, changes nothing.
        let res = answer(&first, json!({ "answer": "deny", "actionHash": HASH, "answerKey": key })).await.unwrap();
        assert_error(res, 409, "already_answered").await;
        let res = ann.post(&format!("/api/decisions/{first}/answer"), &json!({ "answer": "allow", "scope": "once" })).await;
        assert_error(res, 409, "already_answered").await;

        // The owner lets notifications allow: the next question's Allow answers.
        let settings: Value = ann.get("/api/push/settings").await.json().await.unwrap();
        assert_eq!(settings, json!({ "allowFromNotifications": false }));
        let res = ann.patch("/api/push/settings", &json!({ "allowFromNotifications": true })).await;
        assert_eq!(res.status(), StatusCode::OK);
        let res = ann.patch("/api/push/settings", &json!({ "allowFromNotifications": "yes" })).await;
        assert!(res.status().is_client_error(), "{}", res.status());
        let ledger = query_i64(&app.store, "SELECT COUNT(*) FROM ledger WHERE kind = 'account.notification_settings'").await;
        assert_eq!(ledger, Some(1));
        let second = asked(&laptop, &job_id, &lease).await;
        let told = browser.decrypt(&double.next().await.body);
        assert_eq!(told["decision"]["allowFromNotification"], true);
        let second_key = told["decision"]["answerKey"].as_str().unwrap().to_owned();
        // One decision's key does not answer another.
        let res = answer(&second, json!({ "answer": "allow", "actionHash": HASH, "answerKey": key })).await.unwrap();
        assert_error(res, 404, "not_found").await;
        let res = answer(&second, json!({ "answer": "allow", "actionHash": HASH, "answerKey": second_key })).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let allowed: Value = res.json().await.unwrap();
        assert_eq!((allowed["answer"].as_str(), allowed["scope"].as_str()), (Some("allow"), Some("once")));
    }

    async fn a_computer_gone_silent_with_work_running_is_told_once_per_outage(backend) {
        let app = spawn_app_with(backend, |config| {
            config.push_allow_loopback = true;
            config.sweep_secs = 1;
        })
        .await;
        let double = PushDouble::start().await;
        let ann = app.user("ann@example.com").await;
        let browser = Browser::new();
        subscribe(&ann, &browser.subscription(&double.endpoint("phone"))).await;
        let laptop = app.device(&ann, "install-1").await;
        let (job_id, lease) = running(&ann, &laptop).await;

        // Past the online window (90 s), within the lease (120 s).
        app.advance(Duration::from_secs(100));
        let push = double.next().await;
        let told = browser.decrypt(&push.body);
        assert_eq!(told["kind"], "device_offline");
        assert_eq!(told["computer"], "laptop");
        assert_eq!(told["url"], "/computers");
        assert_eq!(push.headers["urgency"], "normal");
        // Later sweeps of the same outage tell nobody again.
        assert!(double.next_within(Duration::from_millis(2_500)).await.is_none());

        // It comes back, extending its lease, and goes silent again: a new outage.
        let sql = format!("SELECT last_seen_at FROM devices WHERE id = '{}'", laptop.device_id);
        let before = query_i64(&app.store, &sql).await;
        let res = laptop.heartbeat(&[(&job_id, &lease)]).await;
        assert_eq!(res.status(), StatusCode::OK);
        wait_for_row(&app.store, &sql, |seen| seen > before).await;
        app.advance(Duration::from_secs(100));
        let push = double.next().await;
        assert_eq!(browser.decrypt(&push.body)["kind"], "device_offline");

        // Its lease runs out: the sweeper ends the run, and that is told too.
        app.advance(Duration::from_secs(30));
        let push = double.next().await;
        let told = browser.decrypt(&push.body);
        assert_eq!(told["kind"], "job_ended");
        assert_eq!(told["title"], "Run the tests interrupted");
    }

    async fn endpoints_to_inside_addresses_are_refused(backend) {
        let app = spawn_app_with(backend, |_| {}).await;
        let ann = app.user("ann@example.com").await;
        let browser = Browser::new();
        let huge = format!("https://push.example.com/{}", "a".repeat(3_000));
        for endpoint in [
            "https://127.0.0.1/", "https://10.0.0.1/", "https://[::1]/", "https://localhost/",
            "http://example.com/", "https://169.254.169.254/", "https://100.64.0.1/",
            "https://192.168.0.1/", "https://[fd00::1]/", "https://[fe80::1]/",
            "https://224.0.0.1/", "https://0.0.0.0/", "https://[::ffff:127.0.0.1]/",
            "https://2130706433/", "https://printer.local/", "https://intranet/",
            "http://127.0.0.1:9/push", "ftp://example.com/", "not a url", huge.as_str(),
        ] {
            let res = ann.post("/api/push/subscriptions", &browser.subscription(endpoint)).await;
            let message = assert_error(res, 422, "invalid_field").await;
            assert!(message.starts_with("endpoint:"), "{endpoint}: {message}");
        }
        assert!(subscriptions(&ann).await.is_empty());
        let res = ann
            .post("/api/push/subscriptions", &browser.subscription("https://push.example.com/abc"))
            .await;
        assert_eq!(res.status(), StatusCode::CREATED);
    }

    async fn hostile_subscriptions_are_refused_never_500(backend) {
        let app = loopback_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let browser = Browser::new();
        let good = browser.subscription("https://push.example.com/x");
        let mut off_curve = vec![0x04];
        off_curve.extend([7u8; 64]);
        let compressed = browser.secret.public_key().to_encoded_point(true);
        for (key, value, field) in [
            ("p256dh", json!(URL_SAFE_NO_PAD.encode([4u8; 64])), "keys.p256dh"),
            ("p256dh", json!(URL_SAFE_NO_PAD.encode(compressed.as_bytes())), "keys.p256dh"),
            ("p256dh", json!(URL_SAFE_NO_PAD.encode(&off_curve)), "keys.p256dh"),
            ("p256dh", json!("not base64 at all!"), "keys.p256dh"),
            ("p256dh", json!(""), "keys.p256dh"),
            ("p256dh", json!("A".repeat(100_000)), "keys.p256dh"),
            ("auth", json!(URL_SAFE_NO_PAD.encode([1u8; 15])), "keys.auth"),
            ("auth", json!(URL_SAFE_NO_PAD.encode([1u8; 32])), "keys.auth"),
            ("auth", json!("***"), "keys.auth"),
        ] {
            let mut body = good.clone();
            body["keys"][key] = value;
            let res = ann.post("/api/push/subscriptions", &body).await;
            let message = assert_error(res, 422, "invalid_field").await;
            assert!(message.starts_with(field), "{key}: {message}");
        }
        let mut named = good.clone();
        named["name"] = json!("n".repeat(101));
        let message = assert_error(ann.post("/api/push/subscriptions", &named).await, 422, "invalid_field").await;
        assert!(message.starts_with("name:"), "{message}");
        named["name"] = json!("phone\u{202e}");
        assert_error(ann.post("/api/push/subscriptions", &named).await, 422, "invalid_field").await;
        for body in [
            json!({ "endpoint": "https://push.example.com/x" }),
            json!({ "endpoint": 7, "keys": good["keys"].clone() }),
            json!({ "endpoint": "https://push.example.com/x", "keys": { "p256dh": 1, "auth": [] } }),
            json!({ "endpoint": "https://push.example.com/x", "keys": good["keys"].clone(), "kinds": { "decision": "yes" } }),
            json!([]),
        ] {
            assert_error(ann.post("/api/push/subscriptions", &body).await, 400, "invalid_request").await;
        }
        // A cookie-signed change without the page's CSRF header.
        let res = ann.http.post(format!("{}/api/push/subscriptions", ann.base)).json(&good).send().await.unwrap();
        assert_error(res, 403, "csrf_rejected").await;
        assert!(subscriptions(&ann).await.is_empty(), "nothing was stored");
        let res = ann.patch("/api/push/subscriptions/nope", &json!({ "kinds": {} })).await;
        assert_error(res, 404, "not_found").await;
    }

    async fn subscribing_again_updates_the_same_subscription(backend) {
        let app = loopback_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let endpoint = "https://push.example.com/wpush/v2/secret-capability";
        let mut first = Browser::new().subscription(endpoint);
        first["name"] = json!("Phone");
        first["kinds"] = json!({ "job_ended": false });
        let id = subscribe(&ann, &first).await;

        let again = Browser::new().subscription(endpoint);
        let res = ann.post("/api/push/subscriptions", &again).await;
        assert_eq!(res.status(), StatusCode::OK);
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["id"], id.as_str());
        let sql = format!(
            "SELECT COUNT(*) FROM push_subscriptions WHERE id = '{id}' AND p256dh = '{}'",
            again["keys"]["p256dh"].as_str().unwrap()
        );
        assert_eq!(query_i64(&app.store, &sql).await, Some(1), "the new keys were kept");

        let res = ann.get("/api/push/subscriptions").await;
        let text = res.text().await.unwrap();
        assert!(!text.contains("secret-capability") && !text.contains("p256dh"), "{text}");
        let listed: Vec<Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["name"], "Phone", "a name left out is kept");
        assert_eq!(listed[0]["origin"], "https://push.example.com");
        assert_eq!(listed[0]["kinds"], json!({ "decision": true, "job_ended": false, "device_offline": true }));
        assert!(listed[0]["createdAt"].is_string() && listed[0]["lastSuccessAt"].is_null());

        let res = ann.delete(&format!("/api/push/subscriptions/{id}")).await;
        assert_eq!(res.status(), StatusCode::NO_CONTENT);
        assert!(subscriptions(&ann).await.is_empty());
        assert_error(ann.delete(&format!("/api/push/subscriptions/{id}")).await, 404, "not_found").await;
    }

    async fn another_accounts_subscription_is_not_found(backend) {
        let app = loopback_app(backend).await;
        let ann = app.user("ann@example.com").await;
        let eve = app.user("eve@example.com").await;
        let id = subscribe(&ann, &Browser::new().subscription("https://push.example.com/ann")).await;
        let path = format!("/api/push/subscriptions/{id}");

        assert_error(eve.get(&path).await, 404, "not_found").await;
        assert_error(eve.patch(&path, &json!({ "kinds": { "decision": false } })).await, 404, "not_found").await;
        assert_error(eve.delete(&path).await, 404, "not_found").await;
        assert!(subscriptions(&eve).await.is_empty());
        let mine: Value = ann.get(&path).await.json().await.unwrap();
        assert_eq!(mine["kinds"]["decision"], true, "unchanged");
        // The same endpoint in another account is that account's own subscription.
        let theirs = subscribe(&eve, &Browser::new().subscription("https://push.example.com/ann")).await;
        assert_ne!(theirs, id);
    }

    async fn the_key_needs_a_sign_in_and_survives_a_restart(backend) {
        let app = loopback_app(backend).await;
        let res = reqwest::get(format!("{}/api/push/key", app.base)).await.unwrap();
        assert_error(res, 401, "unauthorized").await;
        let ann = app.user("ann@example.com").await;
        let key = public_key(&ann).await;
        let point = URL_SAFE_NO_PAD.decode(&key).unwrap();
        assert!(PublicKey::from_sec1_bytes(&point).is_ok() && point[0] == 0x04);
        let restarted = app.another().await;
        let mut again = restarted.web();
        again.login("ann@example.com", "correct horse battery").await;
        assert_eq!(public_key(&again).await, key, "the same data dir keeps the same key");
    }
}

#[tokio::test]
async fn a_configured_vapid_key_is_the_one_announced() {
    let secret = SecretKey::random(&mut OsRng);
    let encoded = URL_SAFE_NO_PAD.encode(secret.to_bytes());
    let app = spawn_app_with(Backend::Sqlite, |config| {
        config.vapid_private_key = Some(encoded);
    })
    .await;
    let ann = app.user("ann@example.com").await;
    let expected = URL_SAFE_NO_PAD.encode(secret.public_key().to_encoded_point(false).as_bytes());
    assert_eq!(public_key(&ann).await, expected);
}
