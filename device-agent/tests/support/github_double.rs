//! A small stand-in for GitHub's REST API on loopback, for tests (GitHub itself is not
//! reachable from them): real HTTP/1.1 and JSON on a plain tokio listener, exactly the
//! routes the agent calls, each checking the bearer token and GitHub's headers.
//!
//! - `GET /repos/{o}/{r}`: the default branch;
//! - `GET /repos/{o}/{r}/pulls?head={o}:{branch}&state=open`: open pull requests of a head;
//! - `POST /repos/{o}/{r}/pulls`: a new one (`{title, head, base, body}`), 201;
//! - `GET /repos/{o}/{r}/commits/{sha}/check-runs` and `.../status`: what the test set;
//! - `PUT /repos/{o}/{r}/pulls/{n}/merge` (`{sha, merge_method}`): merged.
//!
//! A wrong token is a 401 whose body echoes the token it was given, as a careless server
//! might, so a test can check the agent never repeats it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

// Each stand-in reads requests the same way; a test binary holding both has two copies.
#[allow(clippy::duplicate_mod)]
#[path = "http_request.rs"]
mod http_request;
use http_request::{read_request, HttpRequest};

/// One pull request the double holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    pub number: u64,
    pub head: String,
    pub base: String,
    pub title: String,
    pub body: String,
    pub open: bool,
    /// The sha it was merged at.
    pub merged_sha: Option<String>,
}

/// What the double holds and was asked.
#[derive(Debug, Default)]
pub struct State {
    pub token: String,
    pub default_branch: String,
    pub pulls: Vec<Pull>,
    /// `(name, status, conclusion)` of each check run.
    pub check_runs: Vec<(String, String, Option<String>)>,
    /// `(context, state)` of each commit status.
    pub statuses: Vec<(String, String)>,
    /// `METHOD path?query` of every request, in order.
    pub requests: Vec<String>,
}

/// A running double.
pub struct GithubDouble {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
}

impl GithubDouble {
    /// Starts a double taking `token`, on a free loopback port.
    pub async fn start(token: &str) -> std::io::Result<GithubDouble> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            token: token.to_owned(),
            default_branch: "main".to_owned(),
            ..State::default()
        }));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Ok(GithubDouble { addr, state })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let (status, body) = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .requests
            .push(format!("{} {}", request.method, request.target));
        answer(&mut state, &request)
    };
    let text = body.to_string();
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Other",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        text.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(text.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn answer(state: &mut State, request: &HttpRequest) -> (u16, Value) {
    let given = request
        .header("authorization")
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    if given != state.token {
        return (
            401,
            json!({ "message": format!("Bad credentials: {given}") }),
        );
    }
    if request.header("accept") != Some("application/vnd.github+json")
        || request.header("x-github-api-version") != Some("2022-11-28")
        || request.header("user-agent").is_none()
    {
        return (400, json!({ "message": "missing GitHub headers" }));
    }
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((request.target.as_str(), ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    match (request.method.as_str(), parts.as_slice()) {
        ("GET", ["repos", _, _]) => (200, json!({ "default_branch": state.default_branch })),
        ("GET", ["repos", owner, _, "pulls"]) => list_pulls(state, owner, query),
        ("POST", ["repos", owner, repo, "pulls"]) => create_pull(state, owner, repo, &body),
        ("GET", ["repos", _, _, "commits", _, "check-runs"]) => {
            let runs: Vec<Value> = state
                .check_runs
                .iter()
                .map(|(name, status, conclusion)| {
                    json!({ "name": name, "status": status, "conclusion": conclusion })
                })
                .collect();
            (
                200,
                json!({ "total_count": runs.len(), "check_runs": runs }),
            )
        }
        ("GET", ["repos", _, _, "commits", _, "status"]) => {
            let statuses: Vec<Value> = state
                .statuses
                .iter()
                .map(|(context, state)| json!({ "context": context, "state": state }))
                .collect();
            (
                200,
                json!({ "state": "pending", "total_count": statuses.len(), "statuses": statuses }),
            )
        }
        ("PUT", ["repos", _, _, "pulls", number, "merge"]) => merge(state, number, &body),
        _ => (404, json!({ "message": "Not Found" })),
    }
}

fn list_pulls(state: &State, owner: &str, query: &str) -> (u16, Value) {
    let head = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("head="))
        .map(|head| head.replace("%3A", ":").replace("%2F", "/"))
        .unwrap_or_default();
    let open = query.split('&').any(|pair| pair == "state=open");
    let listed: Vec<Value> = state
        .pulls
        .iter()
        .filter(|pull| format!("{owner}:{}", pull.head) == head && (!open || pull.open))
        .map(pull_json)
        .collect();
    (200, Value::Array(listed))
}

fn create_pull(state: &mut State, owner: &str, repo: &str, body: &Value) -> (u16, Value) {
    let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
    let (Some(title), Some(head), Some(base)) = (field("title"), field("head"), field("base"))
    else {
        return (422, json!({ "message": "Validation Failed" }));
    };
    let number = state.pulls.len() as u64 + 1;
    let pull = Pull {
        number,
        head,
        base,
        title,
        body: field("body").unwrap_or_default(),
        open: true,
        merged_sha: None,
    };
    let mut answer = pull_json(&pull);
    answer["html_url"] = json!(format!(
        "https://github.example/{owner}/{repo}/pull/{number}"
    ));
    state.pulls.push(pull);
    (201, answer)
}

fn merge(state: &mut State, number: &str, body: &Value) -> (u16, Value) {
    let sha = body.get("sha").and_then(Value::as_str).unwrap_or_default();
    let method = body.get("merge_method").and_then(Value::as_str);
    let Some(pull) = state
        .pulls
        .iter_mut()
        .find(|pull| pull.number.to_string() == number && pull.open)
    else {
        return (404, json!({ "message": "Not Found" }));
    };
    if method != Some("merge") || sha.is_empty() {
        return (422, json!({ "message": "Validation Failed" }));
    }
    pull.open = false;
    pull.merged_sha = Some(sha.to_owned());
    (
        200,
        json!({ "merged": true, "sha": sha, "message": "Pull Request successfully merged" }),
    )
}

fn pull_json(pull: &Pull) -> Value {
    json!({
        "number": pull.number,
        "html_url": format!("https://github.example/pull/{}", pull.number),
        "state": if pull.open { "open" } else { "closed" },
        "merged": pull.merged_sha.is_some(),
        "head": { "ref": pull.head },
        "base": { "ref": pull.base },
    })
}
