//! A fleet of `mcpc gateway` replicas on one PostgreSQL store
//! (`gateway/README.md`; README, "Run a fleet"): two replicas of the real
//! binary in front of one upstream, many client sessions on each at once,
//! each session's stream carrying sampling requests the upstream sends
//! all together. The day's budget is spent exactly, across the replicas:
//! as many requests reach clients as the budget allows, never one more,
//! and every other one is refused to the server with `policy.budget_exhausted`.
//!
//! The database is `MCPOLICY_TEST_POSTGRES` (as
//! `runtime/postgres/scripts/pg-test-cluster.sh start DIR` prints it), a
//! schema of its own per run. Without it the test passes over itself with
//! a note, except under `MCPOLICY_REQUIRE_POSTGRES=1` (CI), where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod http_upstream;
mod postgres_spec;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use http_upstream::{Body, full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const BUDGET: usize = 10;
const REPLICAS: usize = 2;
const SESSIONS: usize = 6;
const PER_CALL: usize = 3;

/// The upstream: a session per `initialize`; every `tools/call` answered
/// with an event stream of `PER_CALL` sampling requests, each with a text
/// of its own, then the call's result; what the gateways POST on their
/// own (denials) is kept.
#[derive(Default)]
struct Upstream {
    sessions: Mutex<usize>,
    calls: Mutex<usize>,
    received: Mutex<Vec<Value>>,
}

async fn handle(up: Arc<Upstream>, request: Request<Incoming>) -> Response<Body> {
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match message["method"].as_str() {
        Some("initialize") => {
            let n = {
                let mut sessions = up.sessions.lock().unwrap();
                *sessions += 1;
                *sessions
            };
            let result = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "serverInfo": {"name": "fleet", "version": "1"}}});
            Response::builder()
                .header("content-type", "application/json")
                .header("mcp-session-id", format!("up-{n}"))
                .body(full(result.to_string()))
                .unwrap()
        }
        Some("tools/call") => {
            let call = {
                let mut calls = up.calls.lock().unwrap();
                *calls += 1;
                *calls
            };
            let mut events = String::new();
            for i in 0..PER_CALL {
                let sampling = json!({"jsonrpc": "2.0", "id": i, "method": "sampling/createMessage",
                    "params": {"messages": [{"role": "user", "content": {"type": "text",
                        "text": format!("call {call}, request {i}")}}], "maxTokens": 10}});
                events.push_str(&format!("id: c{call}-{i}\ndata: {sampling}\n\n"));
            }
            let done = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}});
            events.push_str(&format!("data: {done}\n\n"));
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(full(events))
                .unwrap()
        }
        _ => {
            up.received.lock().unwrap().push(message);
            let mut accepted = Response::new(full(""));
            *accepted.status_mut() = StatusCode::ACCEPTED;
            accepted
        }
    }
}

/// One replica: `mcpc gateway` on the shared store; its address.
fn replica(
    dir: &std::path::Path,
    n: usize,
    upstream: std::net::SocketAddr,
    store: &str,
) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpc"))
        .arg("gateway")
        .arg("--policy")
        .arg(dir.join("fleet.mcpolicy"))
        .arg("--route")
        .arg(format!("s=http://{upstream}/mcp"))
        .args(["--listen", "127.0.0.1:0", "--store", store])
        .arg("--log")
        .arg(dir.join(format!("replica-{n}.log")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = http_upstream::gateway_address(&mut child);
    (child, addr)
}

async fn post(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
    sid: Option<&str>,
    body: Value,
) -> (hyper::HeaderMap, Vec<u8>) {
    let mut request = Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(sid) = sid {
        request = request.header("mcp-session-id", sid);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{body}");
    let (parts, body) = response.into_parts();
    (
        parts.headers,
        body.collect().await.unwrap().to_bytes().to_vec(),
    )
}

/// One client session on `gateway`: initialize, one `tools/call`; how many
/// sampling requests its stream carried to the client.
async fn session(gateway: String) -> usize {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let url = format!("http://{gateway}/s/mcp");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"sampling": {}},
        "clientInfo": {"name": "fleet", "version": "1"}}});
    let (headers, _) = post(&client, &url, None, init).await;
    let sid = headers["mcp-session-id"].to_str().unwrap().to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "t", "arguments": {}}});
    let (_, body) = post(&client, &url, Some(&sid), call).await;
    let mut parser = mcpolicy_gateway::sse::Parser::new(mcpolicy_gateway::MAX_EVENT);
    let mut items = Vec::new();
    parser.feed(&body, &mut items);
    items
        .into_iter()
        .filter_map(|item| match item {
            mcpolicy_gateway::sse::Item::Event(event) => event.data,
            _ => None,
        })
        .filter(|data| data.contains("sampling/createMessage"))
        .count()
}

#[test]
fn replicas_on_one_store_spend_the_budget_exactly() {
    let Some(store) = postgres_spec::store_spec("gateway_fleet") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fleet.mcpolicy"),
        format!(
            "mcpolicy 1\nprotocol 2025-11-25\nidentity messages\n\nserver \"s\" {{\n  consent never\n  budget {BUDGET} requests per day\n}}\n"
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let up = Arc::new(Upstream::default());
    let upstream = rt.block_on(http_upstream::serve(Arc::clone(&up), handle));
    let mut replicas: Vec<(Child, String)> = (0..REPLICAS)
        .map(|n| replica(dir.path(), n, upstream, &store))
        .collect();
    let forwarded: usize = rt.block_on(async {
        let sessions: Vec<_> = (0..REPLICAS * SESSIONS)
            .map(|n| tokio::spawn(session(replicas[n % REPLICAS].1.clone())))
            .collect();
        let mut total = 0;
        for session in sessions {
            total += session.await.unwrap();
        }
        total
    });
    let asked = REPLICAS * SESSIONS * PER_CALL;
    assert!(asked > BUDGET);
    assert_eq!(forwarded, BUDGET, "requests that reached a client");
    // Every other one is refused to the server, by whichever replica.
    let refused = rt.block_on(async {
        for _ in 0..500 {
            let refused = up
                .received
                .lock()
                .unwrap()
                .iter()
                .filter(|m| m["error"]["data"]["reason"] == "policy.budget_exhausted")
                .count();
            if refused >= asked - BUDGET {
                return refused;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        0
    });
    assert_eq!(refused, asked - BUDGET, "refusals the server received");
    for (child, _) in &mut replicas {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}
