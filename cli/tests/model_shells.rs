//! The proxy's reference model (`proxy/tests/model/`), run end to end
//! through both real transports on fixed seeds: the same ops that
//! `proxy/tests/proxy_state_machine.rs` feeds the session directly go
//! through the `mcpc proxy` binary's pipes and through `mcpc gateway` over
//! HTTP (`docs/spec/transports.md`), and the same invariants are checked
//! on what comes out of them. A shell cannot step a clock, so its runs
//! leave out `Op::Step` (and `Op::Resend`: the stdio transport resumes
//! nothing, and the gateway's resumption has its own tests); the policy's
//! deadline is then longer than any run. `MCPOLICY_SEED` and
//! `PROPTEST_CASES` explore further.
//!
//! Over stdio, each `take_*` first synchronises: a `notifications/cancelled`
//! for no request, written as the server, is queued behind every decision
//! under way (`proxy/src/session/decider.rs`), so once the client reads it
//! the proxy has written everything the server's lines caused; then a
//! notification written as the client reaches the server behind every
//! frame the proxy wrote to it. Over HTTP: below, at `mod http`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

#[path = "../../proxy/tests/model/mod.rs"]
mod model;

mod http_upstream;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use model::{Op, POLICY, Shell, op, run, run_from_seed};

/// How long a synchronisation may take before the run fails.
const SYNC: Duration = Duration::from_secs(30);

fn mcpc() -> &'static str {
    env!("CARGO_BIN_EXE_mcpc")
}

/// The model's policy with a deadline no run reaches: a shell's clock is
/// the wall clock, which `Op::Step` cannot move.
fn shell_policy() -> String {
    let policy = POLICY.replace("deadline 5s", "deadline 10m");
    assert_ne!(policy, POLICY, "the model's policy has a deadline");
    policy
}

/// Lines read from `from` on a thread of their own, as they come.
fn lines_of(from: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// New complete lines of the file at `path` past `offset` (moved on).
fn new_lines(path: &Path, offset: &mut usize) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Some(end) = text.rfind('\n') else {
        return Vec::new();
    };
    let fresh = text.get(*offset..=end).unwrap_or_default().to_owned();
    *offset = end + 1;
    fresh.lines().map(str::to_owned).collect()
}

/// `mcpc proxy` in front of a relay the test speaks through: the relay
/// copies a FIFO the test writes to its stdout (the server's lines) and its
/// stdin (the proxy's lines to the server) to a FIFO the test reads.
struct StdioProxy {
    dir: tempfile::TempDir,
    child: Option<Child>,
    client_in: Option<ChildStdin>,
    client_out: Option<Receiver<String>>,
    server_in: Option<File>,
    server_out: Option<Receiver<String>>,
    audit_at: usize,
    log_at: usize,
    /// Lines read while synchronising, not taken yet.
    to_server: Vec<String>,
    to_client: Vec<String>,
    /// Inputs were written since the last synchronisation.
    dirty: bool,
    marks: u64,
}

impl StdioProxy {
    fn new() -> StdioProxy {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.mcpolicy"), shell_policy()).unwrap();
        for fifo in ["to-proxy", "from-proxy"] {
            let status = Command::new("mkfifo")
                .arg(dir.path().join(fifo))
                .status()
                .unwrap();
            assert!(status.success());
        }
        let mut proxy = StdioProxy {
            dir,
            child: None,
            client_in: None,
            client_out: None,
            server_in: None,
            server_out: None,
            audit_at: 0,
            log_at: 0,
            to_server: Vec::new(),
            to_client: Vec::new(),
            dirty: false,
            marks: 0,
        };
        proxy.start();
        proxy
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&mut self) {
        let mut child = Command::new(mcpc())
            .arg("proxy")
            .arg("--policy")
            .arg(self.path("p.mcpolicy"))
            .arg("--store")
            .arg(self.path("store.db"))
            .arg("--audit")
            .arg(self.path("audit.jsonl"))
            .arg("--log")
            .arg(self.path("proxy.log"))
            .args([
                "--server-id",
                "s",
                "--",
                "sh",
                "-c",
                r#"cat "$1" & exec cat > "$2""#,
                "relay",
            ])
            .arg(self.path("to-proxy"))
            .arg(self.path("from-proxy"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.client_in = child.stdin.take();
        self.client_out = Some(lines_of(child.stdout.take().unwrap()));
        // Each open waits for the relay's end of its FIFO.
        self.server_in = Some(
            File::options()
                .write(true)
                .open(self.path("to-proxy"))
                .unwrap(),
        );
        self.server_out = Some(lines_of(File::open(self.path("from-proxy")).unwrap()));
        self.child = Some(child);
    }

    fn write(to: &mut Option<impl Write>, frame: &[u8]) {
        let to = to.as_mut().expect("the proxy runs");
        to.write_all(frame).unwrap();
        if frame.last() != Some(&b'\n') {
            to.write_all(b"\n").unwrap();
        }
        to.flush().unwrap();
    }

    /// Reads `from` until `mark`, keeping the lines before it in `into`.
    fn read_to(from: &Receiver<String>, mark: &str, into: &mut Vec<String>, side: &str) {
        loop {
            match from.recv_timeout(SYNC) {
                Ok(line) if line == mark => return,
                Ok(line) => into.push(line),
                Err(error) => panic!("the {side} never received the mark {mark} ({error})"),
            }
        }
    }

    fn sync(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        self.marks += 1;
        let server_mark = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": format!("sync-{}", self.marks)}})
        .to_string();
        Self::write(&mut self.server_in, server_mark.as_bytes());
        let client_out = self.client_out.as_ref().unwrap();
        Self::read_to(client_out, &server_mark, &mut self.to_client, "client");
        let client_mark = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "debug", "data": format!("sync-{}", self.marks)}})
        .to_string();
        Self::write(&mut self.client_in, client_mark.as_bytes());
        let server_out = self.server_out.as_ref().unwrap();
        Self::read_to(server_out, &client_mark, &mut self.to_server, "server");
    }
}

impl Shell for StdioProxy {
    fn carries(&self, op: &Op) -> bool {
        !matches!(op, Op::Step { .. } | Op::Resend { .. })
    }

    fn steps(&self) -> bool {
        false
    }

    fn server_says(&mut self, frame: &[u8]) {
        Self::write(&mut self.server_in, frame);
        self.dirty = true;
    }

    fn server_again(&mut self, _: &[u8]) {
        unreachable!("the stdio transport resumes nothing")
    }

    fn client_says(&mut self, frame: &[u8]) {
        Self::write(&mut self.client_in, frame);
        self.dirty = true;
    }

    fn step(&mut self, _: u32, _: bool) -> String {
        unreachable!("a shell's clock is the wall clock")
    }

    fn end(&mut self) {
        self.sync();
        // The client goes: the proxy closes the server's input; the relay's
        // other half ends when the test's FIFO closes; the server exits and
        // the proxy ends its session.
        drop(self.client_in.take());
        drop(self.server_in.take());
        let mut child = self.child.take().unwrap();
        let status = child.wait().unwrap();
        assert!(status.success() || status.code().is_some(), "{status}");
        for line in self.client_out.take().unwrap().iter() {
            self.to_client.push(line);
        }
        for line in self.server_out.take().unwrap().iter() {
            self.to_server.push(line);
        }
    }

    fn restart(&mut self) {
        self.start();
    }

    fn take_server(&mut self) -> Vec<String> {
        self.sync();
        std::mem::take(&mut self.to_server)
    }

    fn take_client(&mut self) -> Vec<String> {
        self.sync();
        std::mem::take(&mut self.to_client)
    }

    fn take_log(&mut self) -> Vec<String> {
        self.sync();
        let path = self.path("proxy.log");
        new_lines(&path, &mut self.log_at)
    }

    fn take_audit(&mut self) -> Vec<String> {
        self.sync();
        let path = self.path("audit.jsonl");
        new_lines(&path, &mut self.audit_at)
    }
}

impl Drop for StdioProxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(self.client_in.take());
            drop(self.server_in.take());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The fixed seeds and cases per seed, or `MCPOLICY_SEED` and
/// `PROPTEST_CASES` (a failure prints its seed) to replay or explore.
fn seeds() -> (Vec<u64>, u32) {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    match env("MCPOLICY_SEED") {
        Some(seed) => (vec![seed], env("PROPTEST_CASES").map_or(4, |c| c as u32)),
        None => (vec![1, 2, 3], 4),
    }
}

/// The model's random interleavings through `mcpc proxy`.
#[test]
fn the_model_holds_through_mcpc_proxy() {
    let (seeds, cases) = seeds();
    for seed in seeds {
        run_from_seed(
            &proptest::collection::vec(op(), 1..60),
            seed,
            cases,
            |ops| run(Box::new(StdioProxy::new()), &ops),
        );
    }
}

// ---------------------------------------------------------------------------
// `mcpc gateway`: the upstream is written here (hyper, a real TCP server),
// the client too; server lines travel as SSE events on the session's GET
// stream, client lines as POSTs.
//
// Synchronising: the upstream sends, as one more pair of events, a
// notification with an id (which the session refuses -32600 in a POST of
// the gateway's own) and a `notifications/cancelled` for no request (which
// reaches the client). Once the client reads the second, every event
// before it was handled; once the upstream receives the refusal of the
// first, every POST of the gateway's own before it arrived too (they go
// out one at a time, in order: `docs/spec/transports.md`). The client's
// own POSTs are answered only once the upstream has them.

mod http {
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use http_body_util::BodyExt;
    use hyper::body::{Frame, Incoming};
    use hyper::{Request, Response, StatusCode};
    use serde_json::Value;
    use tokio::sync::{Notify, mpsc};

    pub use super::http_upstream::{Body, full};

    /// A body fed by a channel: an SSE stream.
    struct Channel(mpsc::UnboundedReceiver<Bytes>);

    impl hyper::body::Body for Channel {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    /// What the upstream holds: the messages it received (the client's and
    /// the gateway's own), and the GET stream its lines go out on.
    #[derive(Default)]
    pub struct Upstream {
        pub received: Mutex<Vec<String>>,
        pub arrived: Notify,
        pub get: Mutex<Option<mpsc::UnboundedSender<Bytes>>>,
        pub opened: Notify,
        sessions: Mutex<u32>,
    }

    async fn handle(up: Arc<Upstream>, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().clone();
        let body = request.into_body().collect().await.unwrap().to_bytes();
        if method == hyper::Method::GET {
            let (tx, rx) = mpsc::unbounded_channel();
            *up.get.lock().unwrap() = Some(tx);
            up.opened.notify_waiters();
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Channel(rx).boxed())
                .unwrap();
        }
        if method == hyper::Method::DELETE {
            return Response::new(full(""));
        }
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if message["method"] == "initialize" {
            let n = {
                let mut sessions = up.sessions.lock().unwrap();
                *sessions += 1;
                *sessions
            };
            let result = serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "serverInfo": {"name": "model", "version": "1"}}});
            return Response::builder()
                .header("content-type", "application/json")
                .header("mcp-session-id", format!("up-{n}"))
                .body(full(result.to_string()))
                .unwrap();
        }
        up.received
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&body).into_owned());
        up.arrived.notify_waiters();
        let mut accepted = Response::new(full(""));
        *accepted.status_mut() = StatusCode::ACCEPTED;
        accepted
    }

    /// Serves `up` on a loopback port.
    pub async fn serve(up: Arc<Upstream>) -> std::net::SocketAddr {
        super::http_upstream::serve(up, handle).await
    }
}

/// `mcpc gateway` between the upstream and the client written here.
struct Gateway {
    rt: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    up: std::sync::Arc<http::Upstream>,
    up_addr: std::net::SocketAddr,
    child: Option<Child>,
    addr: Option<std::net::SocketAddr>,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    sid: String,
    /// The events of the client's GET stream, as data (id-only events dropped).
    events: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    audit_at: usize,
    log_at: usize,
    to_client: Vec<String>,
    /// How many of the upstream's received messages were taken.
    server_at: usize,
    dirty: bool,
    marks: u64,
    event_ids: u64,
}

impl Gateway {
    fn new() -> Gateway {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.mcpolicy"), shell_policy()).unwrap();
        let up = std::sync::Arc::new(http::Upstream::default());
        let up_addr = rt.block_on(http::serve(std::sync::Arc::clone(&up)));
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let mut gateway = Gateway {
            rt,
            dir,
            up,
            up_addr,
            child: None,
            addr: None,
            client,
            sid: String::new(),
            events: None,
            audit_at: 0,
            log_at: 0,
            to_client: Vec::new(),
            server_at: 0,
            dirty: false,
            marks: 0,
            event_ids: 0,
        };
        gateway.start();
        gateway
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts `mcpc gateway`, initializes a session and opens its GET stream.
    fn start(&mut self) {
        let mut child = Command::new(mcpc())
            .arg("gateway")
            .arg("--policy")
            .arg(self.path("p.mcpolicy"))
            .arg("--route")
            .arg(format!("s=http://{}/mcp", self.up_addr))
            .args(["--listen", "127.0.0.1:0"])
            .arg("--store")
            .arg(self.path("store.db"))
            .arg("--audit")
            .arg(self.path("audit.jsonl"))
            .arg("--log")
            .arg(self.path("gateway.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        self.addr = Some(http_upstream::gateway_address(&mut child).parse().unwrap());
        self.child = Some(child);
        let init = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}},"clientInfo":{"name":"model","version":"1"}}}"#;
        let (status, headers, _) = self.post(init);
        assert_eq!(status, hyper::StatusCode::OK);
        self.sid = headers["mcp-session-id"].to_str().unwrap().to_owned();
        // The GET stream, and the upstream's end of it.
        *self.up.get.lock().unwrap() = None;
        let request = self.request("GET", "");
        let client = self.client.clone();
        let up = std::sync::Arc::clone(&self.up);
        let events = self.rt.block_on(async move {
            let opened = up.opened.notified();
            let response = client.request(request).await.unwrap();
            assert_eq!(response.status(), hyper::StatusCode::OK);
            if up.get.lock().unwrap().is_none() {
                tokio::time::timeout(SYNC, opened).await.unwrap();
            }
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(async move {
                use http_body_util::BodyExt;
                let mut body = response.into_body();
                let mut parser = mcpolicy_gateway::sse::Parser::new(mcpolicy_gateway::MAX_EVENT);
                let mut items = Vec::new();
                while let Some(Ok(frame)) = body.frame().await {
                    let Ok(chunk) = frame.into_data() else {
                        continue;
                    };
                    parser.feed(&chunk, &mut items);
                    for item in items.drain(..) {
                        if let mcpolicy_gateway::sse::Item::Event(event) = item
                            && let Some(data) = event.data
                            && tx.send(data).is_err()
                        {
                            return;
                        }
                    }
                }
            });
            rx
        });
        self.events = Some(events);
    }

    fn request(
        &self,
        method: &str,
        body: &str,
    ) -> hyper::Request<http_body_util::Full<bytes::Bytes>> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(format!("http://{}/s/mcp", self.addr.unwrap()))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-06-18");
        if !self.sid.is_empty() {
            request = request.header("mcp-session-id", &self.sid);
        }
        request
            .body(http_body_util::Full::new(bytes::Bytes::from(
                body.to_owned(),
            )))
            .unwrap()
    }

    /// POSTs `body` as the client; the status, headers and body.
    fn post(&self, body: &str) -> (hyper::StatusCode, hyper::HeaderMap, Vec<u8>) {
        let request = self.request("POST", body);
        let client = self.client.clone();
        self.rt.block_on(async move {
            use http_body_util::BodyExt;
            let response = tokio::time::timeout(SYNC, client.request(request))
                .await
                .expect("the gateway answers in time")
                .unwrap();
            let (parts, body) = response.into_parts();
            let body = tokio::time::timeout(SYNC, body.collect())
                .await
                .expect("the body ends in time")
                .unwrap()
                .to_bytes()
                .to_vec();
            (parts.status, parts.headers, body)
        })
    }

    /// One line from the server: an SSE event on the GET stream.
    fn push(&mut self, frame: &[u8]) {
        self.event_ids += 1;
        let mut event = Vec::new();
        let text = std::str::from_utf8(frame)
            .unwrap()
            .trim_end_matches(['\r', '\n']);
        let id = format!("e{}", self.event_ids);
        mcpolicy_gateway::sse::write_event(&mut event, Some(&id), None, Some(text.as_bytes()));
        let get = self.up.get.lock().unwrap();
        get.as_ref()
            .expect("the upstream's GET stream is open")
            .send(bytes::Bytes::from(event))
            .unwrap();
    }

    fn next_event(&mut self) -> String {
        let events = self.events.as_mut().unwrap();
        self.rt
            .block_on(async { tokio::time::timeout(SYNC, events.recv()).await })
            .expect("an event in time")
            .expect("the GET stream is open")
    }

    fn sync(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        self.marks += 1;
        let mark = format!("sync-{}", self.marks);
        let refused = serde_json::json!({"jsonrpc": "2.0", "id": mark, "method": "notifications/message", "params": {}});
        let cancelled = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": mark}});
        self.push(refused.to_string().as_bytes());
        self.push(cancelled.to_string().as_bytes());
        let cancelled = cancelled.to_string();
        loop {
            let event = self.next_event();
            if event == cancelled {
                break;
            }
            self.to_client.push(event);
        }
        let up = std::sync::Arc::clone(&self.up);
        let marked = move |up: &http::Upstream| {
            up.received.lock().unwrap().iter().any(|m| {
                serde_json::from_str::<serde_json::Value>(m).is_ok_and(|v| v["id"] == mark)
            })
        };
        self.rt.block_on(async move {
            let deadline = tokio::time::Instant::now() + SYNC;
            while !marked(&up) {
                let arrived = up.arrived.notified();
                if marked(&up) {
                    break;
                }
                tokio::time::timeout_at(deadline, arrived)
                    .await
                    .expect("the gateway's refusal of the mark in time");
            }
        });
    }
}

/// A synchronisation mark (its refusal, or the client's copy of it).
fn is_mark(frame: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(frame).is_ok_and(|v| {
        let id = v["id"]
            .as_str()
            .or_else(|| v.pointer("/params/requestId").and_then(|r| r.as_str()));
        id.is_some_and(|id| id.starts_with("sync-"))
    })
}

impl Shell for Gateway {
    fn carries(&self, op: &Op) -> bool {
        !matches!(op, Op::Step { .. } | Op::Resend { .. })
    }

    fn steps(&self) -> bool {
        false
    }

    fn server_says(&mut self, frame: &[u8]) {
        self.push(frame);
        self.dirty = true;
    }

    fn server_again(&mut self, _: &[u8]) {
        unreachable!("resumption is tested in gateway/tests/hostile_upstream.rs")
    }

    fn client_says(&mut self, frame: &[u8]) {
        let text = std::str::from_utf8(frame).unwrap().to_owned();
        let (status, headers, body) = self.post(&text);
        let json = headers
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        match status {
            hyper::StatusCode::ACCEPTED => {}
            hyper::StatusCode::OK if json => {
                self.to_client.push(String::from_utf8(body).unwrap());
            }
            hyper::StatusCode::OK => {
                for event in mcpolicy_gateway_events(&body) {
                    self.to_client.push(event);
                }
            }
            other => panic!("the gateway answered the client's {text} with {other}"),
        }
        self.dirty = true;
    }

    fn step(&mut self, _: u32, _: bool) -> String {
        unreachable!("a shell's clock is the wall clock")
    }

    fn end(&mut self) {
        self.sync();
        let request = self.request("DELETE", "");
        let client = self.client.clone();
        let status = self
            .rt
            .block_on(async move { client.request(request).await.unwrap().status() });
        assert!(status.is_success(), "DELETE: {status}");
    }

    fn restart(&mut self) {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait().unwrap();
        self.events = None;
        self.sid.clear();
        self.start();
    }

    fn take_server(&mut self) -> Vec<String> {
        self.sync();
        let received = self.up.received.lock().unwrap();
        let fresh = received[self.server_at..].to_vec();
        self.server_at = received.len();
        fresh.into_iter().filter(|m| !is_mark(m)).collect()
    }

    fn take_client(&mut self) -> Vec<String> {
        self.sync();
        std::mem::take(&mut self.to_client)
            .into_iter()
            .filter(|m| !is_mark(m))
            .collect()
    }

    fn take_log(&mut self) -> Vec<String> {
        self.sync();
        let path = self.path("gateway.log");
        new_lines(&path, &mut self.log_at)
    }

    fn take_audit(&mut self) -> Vec<String> {
        self.sync();
        let path = self.path("audit.jsonl");
        new_lines(&path, &mut self.audit_at)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The data of each event of an SSE body.
fn mcpolicy_gateway_events(body: &[u8]) -> Vec<String> {
    let mut parser = mcpolicy_gateway::sse::Parser::new(mcpolicy_gateway::MAX_EVENT);
    let mut items = Vec::new();
    parser.feed(body, &mut items);
    parser.feed(b"\n\n", &mut items);
    items
        .into_iter()
        .filter_map(|item| match item {
            mcpolicy_gateway::sse::Item::Event(event) => event.data,
            _ => None,
        })
        .collect()
}

/// The model's random interleavings through `mcpc gateway`.
#[test]
fn the_model_holds_through_mcpc_gateway() {
    let (seeds, cases) = seeds();
    for seed in seeds {
        run_from_seed(
            &proptest::collection::vec(op(), 1..60),
            seed,
            cases,
            |ops| run(Box::new(Gateway::new()), &ops),
        );
    }
}
