//! A gateway on a loopback port with a real upstream written with hyper
//! (a TCP server, not a mock of the gateway), and a client written with
//! hyper: what the integration tests share.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, reason = "tests")]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_gateway::{Config, Limits, Route};
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::store::MemoryStore;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

pub const POLICY: &str = r#"mcpolicy 1
protocol 2025-11-25
identity systemPrompt, messages, includeContext, modelPreferences

defaults {
  max_tokens 20
  rate 1000 per 1m
  consent never
}

server "tiny" { max_input 16 B }
server "slow" { deadline 300ms }
"#;

/// A body fed chunk by chunk (the hostile upstream's SSE, split on purpose).
pub struct Chunks(pub mpsc::Receiver<Bytes>);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// One request the upstream received: method, headers (name, value), body.
pub type Received = (String, Vec<(String, String)>, Vec<u8>);

/// What the upstream does.
#[derive(Default)]
pub struct Upstream {
    /// Every request it received: method, headers (name → value), body.
    pub received: Mutex<Vec<Received>>,
    /// The SSE chunks it answers the next `tools/call` with.
    pub script: Mutex<Vec<Vec<u8>>>,
    /// The SSE chunks it answers the next GET with (`None`: 405, no GET
    /// stream).
    pub get_script: Mutex<Option<Vec<Vec<u8>>>>,
    /// Assign `Mcp-Session-Id: sN` on each `initialize` (false: a stateless server).
    pub stateful: bool,
    /// Keep a `tools/call` stream open this long after its last chunk.
    pub hold: Duration,
    /// How many sessions it assigned.
    pub sessions: std::sync::atomic::AtomicUsize,
}

impl Upstream {
    /// The bodies of the JSON messages it received (after `initialize`).
    pub fn bodies(&self) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, _, body)| serde_json::from_slice(body).ok())
            .collect()
    }

    /// Waits until a received body satisfies `check`.
    pub async fn wait_for(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..500 {
            if let Some(found) = self.bodies().into_iter().find(|b| check(b)) {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the upstream never received {what}: {:?}", self.bodies());
    }
}

pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// What the upstream answers `request` with.
pub async fn upstream_handle(up: Arc<Upstream>, request: Request<Incoming>) -> Response<Body> {
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let mut headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    headers.push((":path".into(), path.clone()));
    let unauthorized = request
        .headers()
        .get("authorization")
        .is_some_and(|v| v == "Bearer bad");
    let body = request.into_body().collect().await.unwrap().to_bytes();
    up.received
        .lock()
        .unwrap()
        .push((method.clone(), headers, body.to_vec()));
    if unauthorized {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(
                "www-authenticate",
                "Bearer resource_metadata=\"http://upstream/.well-known/oauth-protected-resource/mcp\"",
            )
            .body(full(""))
            .unwrap();
    }
    if path.starts_with("/.well-known/") {
        return Response::builder()
            .header("content-type", "application/json")
            .body(full(format!("{{\"served\":\"{path}\"}}")))
            .unwrap();
    }
    if method == "GET"
        && let Some(chunks) = up.get_script.lock().unwrap().take()
    {
        return sse_response("text/event-stream", chunks, Duration::ZERO);
    }
    if method != "POST" {
        let mut response = Response::new(full(""));
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return response;
    }
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match message["method"].as_str() {
        Some("initialize") => {
            let result = serde_json::json!({
                "jsonrpc": "2.0", "id": message["id"],
                "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "hostile", "version": "1"}}
            });
            let mut response = Response::builder().header("content-type", "application/json");
            if up.stateful {
                // s1, s2, …: one session per initialize.
                let n = up
                    .sessions
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    + 1;
                response = response.header("mcp-session-id", format!("s{n}"));
            }
            response.body(full(result.to_string())).unwrap()
        }
        Some("tools/call") if message["params"]["name"] == "slowjson" => {
            tokio::time::sleep(Duration::from_millis(600)).await;
            Response::builder()
                .header("content-type", "application/json")
                .body(full(
                    serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}})
                        .to_string(),
                ))
                .unwrap()
        }
        Some("tools/call") if message["params"]["name"] == "redirect" => Response::builder()
            .status(StatusCode::TEMPORARY_REDIRECT)
            .header("location", "http://127.0.0.1:9/mcp")
            .body(full(""))
            .unwrap(),
        Some("tools/call") => {
            // `sneaky`: a content type only a loose reader takes for SSE.
            let content_type = if message["params"]["name"] == "sneaky" {
                "application/octet-stream; note=text/event-stream"
            } else {
                "text/event-stream"
            };
            let chunks = std::mem::take(&mut *up.script.lock().unwrap());
            sse_response(content_type, chunks, up.hold)
        }
        Some(_) if message.get("id").is_some() => Response::builder()
            .header("content-type", "application/json")
            .body(full(
                serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "result": {}})
                    .to_string(),
            ))
            .unwrap(),
        _ => {
            let mut response = Response::new(full(""));
            *response.status_mut() = StatusCode::ACCEPTED;
            response
        }
    }
}

/// A response streaming `chunks`, each its own read at the gateway, then
/// held open for `hold`.
fn sse_response(content_type: &str, chunks: Vec<Vec<u8>>, hold: Duration) -> Response<Body> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        for chunk in chunks {
            if tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
        tokio::time::sleep(hold).await;
    });
    Response::builder()
        .header("content-type", content_type)
        .body(Chunks(rx).boxed())
        .unwrap()
}

/// An upstream that assigns session ids, and a gateway in front of it.
pub async fn stateful(limits: Limits) -> (Arc<Upstream>, Gateway) {
    setup(
        Upstream {
            stateful: true,
            ..Upstream::default()
        },
        limits,
    )
    .await
}

/// `up` on a loopback port and a gateway (`limits`) in front of it.
pub async fn setup(up: Upstream, limits: Limits) -> (Arc<Upstream>, Gateway) {
    let up = Arc::new(up);
    let upstream = start_upstream(Arc::clone(&up)).await;
    let gateway = start_gateway(upstream, limits).await;
    (up, gateway)
}

/// Starts the upstream on a loopback port.
pub async fn start_upstream(up: Arc<Upstream>) -> SocketAddr {
    start_upstream_on(up, None).await
}

/// Starts the upstream on a loopback port, over TLS with `tls`'s
/// certificate when given.
pub async fn start_upstream_on(
    up: Arc<Upstream>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (up, tls) = (Arc::clone(&up), tls.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let up = Arc::clone(&up);
                    async move { Ok::<_, Infallible>(upstream_handle(up, request).await) }
                });
                let http = hyper::server::conn::http1::Builder::new();
                let _ = match tls {
                    None => http.serve_connection(TokioIo::new(stream), service).await,
                    Some(tls) => match tls.accept(stream).await {
                        Ok(stream) => http.serve_connection(TokioIo::new(stream), service).await,
                        Err(_) => return,
                    },
                };
            });
        }
    });
    addr
}

/// A running gateway; stops when dropped.
pub struct Gateway {
    pub addr: SocketAddr,
    pub log: SharedLog,
    _stop: oneshot::Sender<()>,
}

/// The gateway's log, readable by the test.
#[derive(Clone, Default)]
pub struct SharedLog(pub Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedLog {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Starts a gateway with routes `h`, `tiny` and `slow` to `upstream`.
pub async fn start_gateway(upstream: SocketAddr, limits: Limits) -> Gateway {
    let url = format!("http://{upstream}/mcp");
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        routes: vec![
            Route::new("h", &url).unwrap(),
            Route::new("tiny", &url).unwrap(),
            Route::new("slow", &url).unwrap(),
        ],
        allow_origins: Vec::new(),
        limits,
        tls: None,
        upstream_ca: Vec::new(),
    };
    start_gateway_with(config).await.unwrap()
}

/// A gateway serving `config` with the test policy, or why it did not start.
pub async fn start_gateway_with(config: Config) -> Result<Gateway, mcpolicy_gateway::GatewayError> {
    let db = Database::default();
    let source = SourceText::new(&db, "t.mcpolicy".into(), POLICY.into());
    let table = db::lower_file(&db, source).clone().unwrap();
    let policy = mcpolicy_runtime::Policy::verify(table).unwrap();
    let engine = Engine::new(policy, Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    let log = SharedLog::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let (ready, bound) = oneshot::channel();
    let (failed, failure) = oneshot::channel();
    let sink = log.clone();
    tokio::spawn(async move {
        let result = mcpolicy_gateway::serve_until(
            config,
            engine,
            Log::to(Box::new(sink), "gateway").with_prefix("mcpc gateway"),
            Some(Audit::to(Box::new(std::io::sink()))),
            move |addr| {
                let _ = ready.send(addr);
            },
            async move {
                let _ = stopped.await;
            },
        )
        .await;
        if let Err(error) = result {
            let _ = failed.send(error);
        }
    });
    // The ready callback is dropped unsent when the gateway fails to start.
    match bound.await {
        Ok(addr) => Ok(Gateway {
            addr,
            log,
            _stop: stop,
        }),
        Err(_) => Err(failure.await.unwrap()),
    }
}

/// A client's response: status, headers, whole body.
pub struct Answer {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

/// Sends one request to the gateway and reads the whole answer.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), client.request(request))
        .await
        .expect("the gateway answers in time")
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(20), body.collect())
        .await
        .expect("the body ends in time")
        .unwrap()
        .to_bytes()
        .to_vec();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// `initialize` on `route`: the session id the client is given.
pub async fn initialize(addr: SocketAddr, route: &str) -> String {
    let answer = send(
        addr,
        "POST",
        &format!("/{route}/mcp"),
        &[],
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}}"#,
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    answer
        .headers
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_owned()
}

/// The events a client reads from an SSE body (any WHATWG reader reads
/// the canonical form the same way: `sse_differential.rs`).
pub fn events(body: &[u8]) -> Vec<mcpolicy_gateway::sse::Event> {
    let mut parser = mcpolicy_gateway::sse::Parser::new(usize::MAX);
    let mut out = Vec::new();
    parser.feed(body, &mut out);
    out.into_iter()
        .filter_map(|item| match item {
            mcpolicy_gateway::sse::Item::Event(event) => Some(event),
            _ => None,
        })
        .collect()
}
