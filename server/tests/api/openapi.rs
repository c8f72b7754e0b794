//! The OpenAPI document: served, complete (every route the server registers is in it, and
//! nothing else), valid (openapi-spec-validator, from PyPI, accepts it; operation ids are
//! unique), and true (schemathesis, from PyPI, fuzzes the web and device routes against it
//! and fails on any 5xx or any answer the document does not describe).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::both_backends;
use crate::external;
use crate::helpers::{spawn_app_with, Backend};

/// `(METHOD, path)` of every route declared in `server/src/routes` and `server/src/pages`:
/// the route table's declarations, and any route mounted on actix around the table.
fn registered_routes() -> BTreeSet<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut routes = BTreeSet::new();
    for folder in ["routes", "pages"] {
        for entry in std::fs::read_dir(src.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "rs") {
                let source = std::fs::read_to_string(path).unwrap();
                scan_table(&source, &mut routes);
                scan_actix(&source, &mut routes);
            }
        }
    }
    routes
}

/// Finds `table.get("P"`, `.post(`, `.patch(`, `.put(`, `.delete(`, `.page(` and `.asset(`
/// calls whose first argument is a path literal (`"/…"`, wherever rustfmt breaks the line).
fn scan_table(source: &str, routes: &mut BTreeSet<(String, String)>) {
    for (needle, method) in [
        (".get(", "GET"),
        (".post(", "POST"),
        (".patch(", "PATCH"),
        (".put(", "PUT"),
        (".delete(", "DELETE"),
        (".page(", "GET"),
        (".asset(", "GET"),
    ] {
        for (index, _) in source.match_indices(needle) {
            let after = source[index + needle.len()..].trim_start();
            let Some(literal) = after.strip_prefix("\"/") else {
                continue;
            };
            let end = literal.find('"').unwrap();
            routes.insert((method.to_owned(), format!("/{}", &literal[..end])));
        }
    }
}

/// Finds `web::resource("P")…route(web::get()` and `.route("P", web::post()` in order: a route
/// mounted on actix directly, around the table.
fn scan_actix(source: &str, routes: &mut BTreeSet<(String, String)>) {
    let mut current: Option<String> = None;
    let mut rest = source;
    while let Some(at) = [
        "web::resource(\"",
        ".route(\"",
        "web::get()",
        "web::post()",
        "web::patch()",
        "web::put()",
        "web::delete()",
    ]
    .iter()
    .filter_map(|needle| rest.find(needle).map(|index| (index, *needle)))
    .min()
    {
        let (index, needle) = at;
        let after = &rest[index + needle.len()..];
        match needle {
            "web::resource(\"" | ".route(\"" => {
                let end = after.find('"').unwrap();
                current = Some(after[..end].to_owned());
            }
            method => {
                let method = method
                    .trim_start_matches("web::")
                    .trim_end_matches("()")
                    .to_ascii_uppercase();
                if let Some(path) = &current {
                    routes.insert((method, path.clone()));
                }
            }
        }
        rest = after;
    }
}

fn documented_routes(document: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    routes
}

#[tokio::test]
async fn the_document_lists_every_registered_route_and_nothing_else() {
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let res = reqwest::get(format!("{}/api/openapi.json", app.base))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let document: Value = res.json().await.unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let registered = registered_routes();
    assert!(
        registered.len() > 50,
        "the scan found the routes: {registered:?}"
    );
    let documented = documented_routes(&document);
    let missing: Vec<_> = registered.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "registered but not documented: {missing:?}"
    );
    let stale: Vec<_> = documented.difference(&registered).collect();
    assert!(stale.is_empty(), "documented but not registered: {stale:?}");
    for schema in [
        "Job",
        "NewJobParams",
        "ErrorBody",
        "HeartbeatParams",
        "ClaimedJob",
    ] {
        assert!(
            document["components"]["schemas"][schema].is_object(),
            "{schema} is described"
        );
    }
}

/// openapi-spec-validator, or `None` (with a reason) when it is not installed and not required.
fn spec_validator() -> Option<&'static str> {
    let found = Command::new("openapi-spec-validator")
        .arg("--version")
        .output();
    if found.is_ok_and(|output| output.status.success()) {
        return Some("openapi-spec-validator");
    }
    external::unavailable(
        "openapi-spec-validator is not installed (pip install openapi-spec-validator)",
    );
    None
}

#[tokio::test]
async fn the_document_is_valid_openapi_with_unique_operation_ids() {
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let res = reqwest::get(format!("{}/api/openapi.json", app.base))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let text = res.text().await.unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let mut ids: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"].as_str();
            let id = id.unwrap_or_else(|| panic!("{method} {path} has no operation id"));
            ids.entry(id.to_owned())
                .or_default()
                .push(format!("{method} {path}"));
        }
    }
    let shared: Vec<_> = ids.iter().filter(|(_, uses)| uses.len() > 1).collect();
    assert!(shared.is_empty(), "operation ids used twice: {shared:?}");
    for (path, method) in [
        ("/api/jobs", "get"),
        ("/jobs", "get"),
        ("/assets/app.js", "get"),
    ] {
        let id = &document["paths"][path][method]["operationId"];
        assert!(id.is_string(), "{method} {path} has an id");
    }
    assert_eq!(
        document["paths"]["/jobs"]["get"]["operationId"],
        "page_jobs"
    );

    let Some(program) = spec_validator() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("openapi.json");
    std::fs::write(&file, &text).unwrap();
    let output = Command::new(program)
        .args(["--validation-errors", "all"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "openapi-spec-validator rejects the document:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The headers the document names where the server needs them: the protocol header on the
/// device routes and pairing, the lease on lease-bound ones, the CSRF header on cookie changes.
#[tokio::test]
async fn the_document_names_the_headers_routes_take() {
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let document: Value = reqwest::get(format!("{}/api/openapi.json", app.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let headers = |method: &str, path: &str| -> BTreeMap<String, bool> {
        let parameters = document["paths"][path][method]["parameters"].as_array();
        parameters
            .into_iter()
            .flatten()
            .filter(|parameter| parameter["in"] == "header")
            .map(|parameter| {
                let name = parameter["name"].as_str().unwrap().to_owned();
                (name, parameter["required"] == true)
            })
            .collect()
    };
    for path in ["/api/devices/pair", "/api/devices/register"] {
        assert_eq!(
            headers("post", path).get("x-tether-protocol"),
            Some(&false),
            "{path}"
        );
    }
    let progress = headers("post", "/api/devices/self/jobs/{id}/progress");
    assert_eq!(progress.get("x-tether-protocol"), Some(&true));
    assert_eq!(progress.get("x-tether-lease"), Some(&true));
    for (method, path) in [
        ("post", "/api/jobs"),
        ("post", "/api/auth/logout"),
        ("patch", "/api/devices/{id}"),
        ("delete", "/api/tokens/{id}"),
        ("post", "/api/decisions/{id}/answer"),
    ] {
        assert_eq!(
            headers(method, path).get("x-tether-csrf"),
            Some(&false),
            "{method} {path}"
        );
    }
    for (method, path) in [("get", "/api/jobs"), ("post", "/api/auth/login")] {
        assert!(
            !headers(method, path).contains_key("x-tether-csrf"),
            "{method} {path}"
        );
    }
}

/// The schemathesis program, or `None` (with a reason) when it is not installed and not
/// required.
fn schemathesis() -> Option<&'static str> {
    let found = Command::new("schemathesis").arg("--version").output();
    if found.is_ok_and(|output| output.status.success()) {
        return Some("schemathesis");
    }
    external::unavailable("schemathesis is not installed (pip install schemathesis==4.32.5)");
    None
}

/// Runs schemathesis on the operations of one tag with `headers`; its output on failure.
fn fuzz(base: &str, tags: &[&str], headers: &[String], examples: u32) -> Result<(), String> {
    let program = schemathesis().ok_or_else(String::new)?;
    // schemathesis keeps a cache and reports in its working folder: not in the checkout.
    let scratch = tempfile::tempdir().map_err(|error| error.to_string())?;
    let mut command = Command::new(program);
    command
        .current_dir(scratch.path())
        .arg("run")
        .arg(format!("{base}/api/openapi.json"))
        .args(["--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"])
        .args(["--max-examples", &examples.to_string()])
        .args(["--seed", "20261201"])
        // One worker: schemathesis 4.32's generator is not safe across worker threads.
        .args(["--workers", "1"])
        .args(["--request-timeout", "10"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--suppress-health-check", "all"])
        .args(["--warnings", "off"])
        .args(["--no-color"])
        // Streams that stay open, and the call that would remove the fuzzing device itself.
        .args(["--exclude-path", "/api/decisions/events"])
        .args(["--exclude-path", "/api/spaces/{id}/events"])
        .args(["--exclude-path", "/api/jobs/{id}/events"])
        .args(["--exclude-path", "/api/devices/self/events"])
        .args(["--exclude-path", "/api/auth/logout"])
        .args(["--exclude-operation-id", "delete_devices_self"])
        .env("NO_COLOR", "1");
    for tag in tags {
        command.args(["--include-tag", tag]);
    }
    for header in headers {
        command.args(["-H", header]);
    }
    let output = command.output().map_err(|error| error.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    if output.status.success() {
        return Ok(());
    }
    // The report ends with the failures and a summary; what comes before is progress.
    let lines: Vec<&str> = stdout.lines().collect();
    let tail = lines[lines.len().saturating_sub(200)..].join("\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr: String = stderr.chars().take(4000).collect();
    Err(format!("{tail}\n{stderr}"))
}

both_backends! {
async fn schemathesis_finds_no_server_error_and_no_undocumented_answer(backend) {
    if schemathesis().is_none() {
        return;
    }
    let app = spawn_app_with(backend, |config| {
        // The fuzzer must reach the handlers' validation, not the limits in front of them.
        config.rate_limits = tether_server::rate_limits::RateLimitConfig::off();
    })
    .await;
    let owner = app.user("fuzz@example.com").await;
    let device = app.device(&owner, "install-fuzz").await;
    owner.create_job(&device.device_id).await;
    let res = owner.post("/api/tokens", &json!({ "name": "fuzz" })).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let token: Value = res.json().await.unwrap();
    let user = format!("Authorization: Bearer {}", token["token"].as_str().unwrap());
    let base = app.base.clone();
    let device_headers = vec![
        format!("Authorization: Bearer {}", device.token),
        "x-tether-protocol: 1".to_owned(),
    ];
    let results = tokio::task::spawn_blocking(move || {
        [
            fuzz(&base, &["web", "pairing", "admin", "operator"], &[user], 25),
            fuzz(&base, &["device"], &device_headers, 25),
        ]
    })
    .await
    .unwrap();
    for result in results {
        if let Err(report) = result {
            panic!("schemathesis found problems:\n{report}");
        }
    }
}
}
