//! What `mcpc gateway` costs, over real HTTP on loopback.
//!
//! The bench is both ends. Its upstream is a small Streamable HTTP MCP
//! server (hyper, in this process) that answers `initialize` with an
//! `Mcp-Session-Id`, `ping` with JSON, and `tools/call` with an SSE stream
//! on which it sends one `sampling/createMessage` and, once that is
//! answered (by the client's POST, or by the gateway's own POST of a
//! denial), the tool's result. Its client (hyper) speaks to that upstream
//! once directly and once through the real `mcpc gateway` (release build,
//! SQLite store in a temp dir, `rate` and a token `budget` in the defaults,
//! as `cli/benches/proxy.rs` has them), and times:
//!
//! * **round trips** (`MCPOLICY_BENCH_ITERS`, default 5,000 for `ping`, a
//!   fifth of that for sampling): `ping` (a POST and its JSON answer,
//!   nothing decided); `sampling allow` (a `tools/call` whose SSE stream
//!   carries a sampling request the client answers in a POST of its own:
//!   the gateway decides it, admits it in the store and settles the
//!   answer); `sampling denied (replay)` (the route's server is `sampling
//!   off`: after the first refusal is stored the gateway answers every
//!   identical request from the store, POSTs the denial upstream itself,
//!   and the client never sees the request). Added latency = gateway −
//!   direct, per percentile.
//! * **decisions per second** from 16 sessions at once, each looping
//!   sampling round trips of distinct prompts for 5 s, with the SQLite
//!   store and, when `MCPOLICY_TEST_POSTGRES` names a server, PostgreSQL.
//! * **1,000 open SSE streams** (`MCPOLICY_BENCH_STREAMS`): 1,000 sessions,
//!   each with its standalone GET stream open through the gateway, then one
//!   event sent on every stream: the time until all arrived, and the
//!   gateway's resident memory before and after.
//!
//! Run: `cargo bench -p mcpc --bench gateway`. Figures: `docs/performance.md`,
//! "Gateway".
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a bench")]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// The policy both transports' benches run under: a `rate` and a token
/// `budget` on every server; `blocked` refused.
const POLICY: &str = include_str!("bench.mcpolicy");

type Body = BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// The upstream: what it waits for, by (session, request id), and the
/// open GET streams, by session.
#[derive(Default)]
struct Upstream {
    sessions: AtomicU64,
    waiting: Mutex<HashMap<(String, String), oneshot::Sender<Value>>>,
    streams: Mutex<HashMap<String, mpsc::UnboundedSender<Bytes>>>,
    next_request: AtomicU64,
}

fn event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

impl Upstream {
    async fn serve(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        let session = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if request.method() == Method::GET {
            let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
            let _ = tx.send(Bytes::from_static(b": open\n\n"));
            self.streams.lock().unwrap().insert(session, tx);
            return Ok(sse_response(rx, None));
        }
        if request.method() == Method::DELETE {
            self.streams.lock().unwrap().remove(&session);
            return Ok(Response::new(full("")));
        }
        let body = request
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = message.get("id").cloned();
        match message.get("method").and_then(Value::as_str) {
            Some("initialize") => {
                let n = self.sessions.fetch_add(1, Ordering::Relaxed);
                let reply = json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "bench-upstream", "version": "1"}}});
                let mut response = Response::new(full(reply.to_string()));
                response
                    .headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                response
                    .headers_mut()
                    .insert("mcp-session-id", format!("s{n}").parse().unwrap());
                Ok(response)
            }
            Some("ping") => {
                let reply = json!({"jsonrpc": "2.0", "id": id, "result": {}});
                let mut response = Response::new(full(reply.to_string()));
                response
                    .headers_mut()
                    .insert("content-type", "application/json".parse().unwrap());
                Ok(response)
            }
            Some("tools/call") => {
                let prompt = message["params"]["arguments"]["prompt"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                let sampling_id = self.next_request.fetch_add(1, Ordering::Relaxed);
                let (answered, answer) = oneshot::channel();
                self.waiting
                    .lock()
                    .unwrap()
                    .insert((session, sampling_id.to_string()), answered);
                let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
                let _ = tx.send(event(&json!({"jsonrpc": "2.0", "id": sampling_id,
                    "method": "sampling/createMessage", "params": {
                        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                        "maxTokens": 10}})));
                tokio::spawn(async move {
                    let answer = answer.await.unwrap_or(Value::Null);
                    let text = if answer.get("result").is_some() {
                        "ok".to_owned()
                    } else {
                        answer["error"]["code"].to_string()
                    };
                    let _ = tx.send(event(&json!({"jsonrpc": "2.0", "id": id,
                        "result": {"content": [{"type": "text", "text": text}]}})));
                });
                Ok(sse_response(rx, Some(2)))
            }
            Some(_) => Ok(accepted()),
            None => {
                // A response to the sampling request: the client's, or the
                // gateway's denial.
                let key = id.as_ref().map(|id| match id {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
                if let Some(key) = key
                    && let Some(waiter) = self.waiting.lock().unwrap().remove(&(session, key))
                {
                    let _ = waiter.send(message);
                }
                Ok(accepted())
            }
        }
    }
}

fn accepted() -> Response<Body> {
    let mut response = Response::new(full(""));
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// An SSE body: the events sent on `rx`, ending after `limit` of them
/// (a tool call's stream: the sampling request, then the result), or when
/// the sender is dropped.
struct Events {
    rx: mpsc::UnboundedReceiver<Bytes>,
    limit: Option<usize>,
}

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        use std::task::Poll;
        if self.limit == Some(0) {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(bytes)) => {
                if let Some(left) = &mut self.limit {
                    *left -= 1;
                }
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn sse_response(rx: mpsc::UnboundedReceiver<Bytes>, limit: Option<usize>) -> Response<Body> {
    let mut response = Response::new(BodyExt::boxed(Events { rx, limit }));
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

/// The lines of a streamed response body, as they arrive.
struct Lines {
    body: Incoming,
    buf: Vec<u8>,
}

impl Lines {
    fn of(body: Incoming) -> Lines {
        Lines {
            body,
            buf: Vec::new(),
        }
    }

    async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                let line = line.strip_suffix(b"\n").unwrap_or(&line);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                return Some(String::from_utf8_lossy(line).into_owned());
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                _ => return None,
            }
        }
    }
}

async fn start_upstream() -> (SocketAddr, Arc<Upstream>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let upstream = Arc::new(Upstream::default());
    let state = Arc::clone(&upstream);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            // Small frames each way: no Nagle delay (as a real server sets it).
            let _ = stream.set_nodelay(true);
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request| Arc::clone(&state).serve(request));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, upstream)
}

/// One MCP client session against `url` (directly or through the gateway).
struct Session {
    client: Client<HttpConnector, Body>,
    url: String,
    id: String,
    next: u64,
}

impl Session {
    async fn open(client: &Client<HttpConnector, Body>, url: &str) -> Session {
        let mut session = Session {
            client: client.clone(),
            url: url.to_owned(),
            id: String::new(),
            next: 1,
        };
        let response = session
            .post(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
                "clientInfo": {"name": "bench", "version": "1"}}}),
            )
            .await;
        session.id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session id")
            .to_owned();
        let _ = response.into_body().collect().await;
        let response = session
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        let _ = response.into_body().collect().await;
        session
    }

    async fn post(&self, message: Value) -> Response<Incoming> {
        let mut request = Request::post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if !self.id.is_empty() {
            request = request.header("mcp-session-id", &self.id);
        }
        let request = request.body(full(message.to_string())).expect("request");
        self.client
            .request(request)
            .await
            .expect("the POST is answered")
    }

    async fn ping(&mut self) {
        self.next += 1;
        let response = self
            .post(json!({"jsonrpc": "2.0", "id": self.next, "method": "ping"}))
            .await;
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert!(body.starts_with(b"{"), "{}", String::from_utf8_lossy(&body));
    }

    /// A tool call during which the server samples; answers the sampling
    /// request if it arrives; returns the tool's text.
    async fn sample(&mut self, prompt: &str) -> String {
        self.next += 1;
        let call = self.next;
        let response = self
            .post(json!({"jsonrpc": "2.0", "id": call, "method": "tools/call",
                "params": {"name": "summarise", "arguments": {"prompt": prompt}}}))
            .await;
        let mut lines = Lines::of(response.into_body());
        while let Some(line) = lines.next().await {
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(message) = serde_json::from_str::<Value>(data.trim_start()) else {
                continue;
            };
            if message.get("method").is_some() {
                let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                    "role": "assistant", "content": {"type": "text", "text": "ok"},
                    "model": "m", "stopReason": "endTurn"}});
                let response = self.post(answer).await;
                let _ = response.into_body().collect().await;
            } else if message["id"] == json!(call) {
                return message["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
            }
        }
        panic!("the tool call's stream ended without its result");
    }
}

/// The real `mcpc gateway`, killed at the end.
struct Gateway {
    child: Child,
    base: String,
}

impl Gateway {
    fn start(dir: &std::path::Path, store: &str, upstream: SocketAddr) -> Gateway {
        let policy = dir.join("bench.mcpolicy");
        std::fs::write(&policy, POLICY).expect("write policy");
        let mcpc = env!("CARGO_BIN_EXE_mcpc");
        let url = format!("http://{upstream}/mcp");
        let mut child = Command::new(mcpc)
            .arg("gateway")
            .arg("--policy")
            .arg(&policy)
            .args(["--store", store, "--listen", "127.0.0.1:0"])
            .args([
                "--route",
                &format!("allowed={url}"),
                "--route",
                &format!("blocked={url}"),
            ])
            .args(["--max-streams", "100000", "--max-connections", "100000"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mcpc gateway starts");
        let stderr = child.stderr.take().expect("stderr");
        let (found, listening) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut sent = false;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if !sent && let Some((_, url)) = line.split_once("listening on ") {
                    sent = found
                        .send(url.split_whitespace().next().unwrap_or_default().to_owned())
                        .is_ok();
                }
            }
        });
        let base = listening
            .recv_timeout(Duration::from_secs(60))
            .expect("mcpc gateway says where it listens");
        Gateway {
            child,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    fn url(&self, route: &str) -> String {
        format!("{}/{route}/mcp", self.base)
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn signed_us(a: Duration, b: Duration) -> String {
    let delta = a.as_secs_f64() - b.as_secs_f64();
    format!(
        "{}{:.1} µs",
        if delta >= 0.0 { "+" } else { "−" },
        delta.abs() * 1e6
    )
}

async fn time_round_trips(session: &mut Session, what: &str, n: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let started = Instant::now();
        match what {
            "ping" => session.ping().await,
            "allow" => {
                let text = session.sample(&format!("summarise {i}")).await;
                assert_eq!(text, "ok");
            }
            _ => {
                let text = session.sample("the same refused prompt").await;
                assert_eq!(text, "-32010", "the denial reaches the server");
            }
        }
        // The first tenth warms the connections, the store and the caches.
        if i >= n / 10 {
            times.push(started.elapsed());
        }
    }
    times.sort();
    times
}

async fn decisions_per_second(
    client: &Client<HttpConnector, Body>,
    url: &str,
    sessions: usize,
) -> f64 {
    let mut opened = Vec::new();
    for _ in 0..sessions {
        opened.push(Session::open(client, url).await);
    }
    let until = Instant::now() + Duration::from_secs(5);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (n, mut session) in opened.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < until {
                let text = session.sample(&format!("session {n} prompt {done}")).await;
                assert_eq!(text, "ok");
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("a session ran");
    }
    total as f64 / started.elapsed().as_secs_f64()
}

async fn open_streams(
    client: &Client<HttpConnector, Body>,
    gateway: &Gateway,
    upstream: &Upstream,
    n: usize,
) -> (Duration, u64, u64) {
    let before = gateway.rss_kib();
    let url = gateway.url("allowed");
    let mut readers = Vec::with_capacity(n);
    for _ in 0..n {
        let session = Session::open(client, &url).await;
        let request = Request::get(&url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session.id)
            .header("mcp-protocol-version", "2025-11-25")
            .body(full(""))
            .expect("request");
        let response = client.request(request).await.expect("the GET is answered");
        assert_eq!(response.status(), StatusCode::OK);
        readers.push(Lines::of(response.into_body()));
    }
    // Every GET stream is open at the upstream before the broadcast.
    while upstream.streams.lock().unwrap().len() < n {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let open = gateway.rss_kib();
    let started = Instant::now();
    for stream in upstream.streams.lock().unwrap().values() {
        let _ = stream.send(event(
            &json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "to every stream"}}),
        ));
    }
    let mut waits = Vec::new();
    for mut lines in readers {
        waits.push(tokio::spawn(async move {
            while let Some(line) = lines.next().await {
                if line.contains("to every stream") {
                    return true;
                }
            }
            false
        }));
    }
    for wait in waits {
        assert!(wait.await.expect("a reader ran"), "an event did not arrive");
    }
    (started.elapsed(), before, open)
}

fn main() -> ExitCode {
    let iters: usize = std::env::var("MCPOLICY_BENCH_ITERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5_000);
    let streams: usize = std::env::var("MCPOLICY_BENCH_STREAMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    runtime.block_on(async move {
        let dir = tempfile::tempdir().expect("temp dir");
        let (addr, upstream) = start_upstream().await;
        let store = dir.path().join("decisions.sqlite3");
        let gateway = Gateway::start(dir.path(), &store.to_string_lossy(), addr);
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client: Client<HttpConnector, Body> = Client::builder(TokioExecutor::new()).build(connector);
        let direct_url = format!("http://{addr}/mcp");

        println!("| round trip | n | direct p50 | direct p99 | gateway p50 | gateway p99 | added p50 | added p99 |");
        println!("|---|---|---|---|---|---|---|---|");
        for (what, label, n, route) in [
            ("ping", "ping (not sampling)", iters, "allowed"),
            ("allow", "sampling allow", iters / 5, "allowed"),
            ("deny", "sampling denied (replay)", iters / 5, "blocked"),
        ] {
            let direct = if what == "deny" {
                // Directly, nothing refuses: the client answers at once.
                let mut session = Session::open(&client, &direct_url).await;
                time_round_trips(&mut session, "allow", n).await
            } else {
                let mut session = Session::open(&client, &direct_url).await;
                time_round_trips(&mut session, what, n).await
            };
            let mut session = Session::open(&client, &gateway.url(route)).await;
            let through = time_round_trips(&mut session, what, n).await;
            let (d50, d99) = (pct(&direct, 50.0), pct(&direct, 99.0));
            let (g50, g99) = (pct(&through, 50.0), pct(&through, 99.0));
            println!(
                "| {label} | {n} | {} | {} | {} | {} | {} | {} |",
                us(d50), us(d99), us(g50), us(g99), signed_us(g50, d50), signed_us(g99, d99)
            );
        }

        let sqlite = decisions_per_second(&client, &gateway.url("allowed"), 16).await;
        println!("\ndecisions/s, 16 sessions, SQLite store: {sqlite:.0}");
        if let Ok(postgres) = std::env::var("MCPOLICY_TEST_POSTGRES") {
            let schema = format!("bench_gateway_{}", std::process::id());
            let spec = format!("{postgres} schema={schema}");
            let pg_gateway = Gateway::start(dir.path(), &spec, addr);
            let rate = decisions_per_second(&client, &pg_gateway.url("allowed"), 16).await;
            println!("decisions/s, 16 sessions, PostgreSQL store: {rate:.0}");
        } else {
            println!("decisions/s, PostgreSQL store: not run (MCPOLICY_TEST_POSTGRES is not set)");
        }

        let (delivered, before, open) = open_streams(&client, &gateway, &upstream, streams).await;
        println!(
            "\n{streams} SSE streams open through the gateway: one event on each delivered to all in {:.1} ms; gateway RSS {:.1} MiB before, {:.1} MiB with them open ({:.1} KiB per stream)",
            delivered.as_secs_f64() * 1e3,
            before as f64 / 1024.0,
            open as f64 / 1024.0,
            (open.saturating_sub(before)) as f64 / streams as f64
        );
    });
    ExitCode::SUCCESS
}
