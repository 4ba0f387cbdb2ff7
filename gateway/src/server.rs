//! The listening side: connections, the defences every request meets
//! (`Origin`, `Host`, sizes, caps), and the routes (`/NAME/mcp`, OAuth
//! discovery). Client POSTs go through `Session::from_client`; what the
//! upstream answers goes through `relay.rs`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::frame_text;
use mcpolicy_proxy::wire;
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::jsonrpc;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::sessions::{Gw, MINTED_PREFIX, Sess, short};
use crate::{Config, GatewayError, Route, headers, relay, upstream};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body the gateway writes.
pub(crate) type Body = BoxBody<Bytes, BoxError>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|e| match e {}).boxed()
}

/// A refusal: `status` with a JSON-RPC error body (id `id`, else `null`).
pub(crate) fn jsonrpc_error(
    status: StatusCode,
    id: Option<&Value>,
    code: i32,
    message: &str,
) -> Response<Body> {
    let body = mcpolicy_runtime::frame::request_error_response(id, code, message);
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

pub(crate) async fn serve(
    config: Config,
    engine: Engine,
    log: Log,
    audit: Option<Audit>,
    ready: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), GatewayError> {
    let listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| GatewayError::Listen {
                addr: config.listen,
                source,
            })?;
    let listen = listener
        .local_addr()
        .map_err(|source| GatewayError::Listen {
            addr: config.listen,
            source,
        })?;
    for origin in &config.allow_origins {
        if !headers::is_origin(origin) {
            return Err(GatewayError::Origin(format!(
                "`{origin}` is not an origin (scheme://host[:port], no path)"
            )));
        }
    }
    let acceptor = config.tls.as_ref().map(crate::tls::acceptor).transpose()?;
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    let allow_origins = if config.allow_origins.is_empty() {
        headers::default_origins(scheme, listen.port())
    } else {
        config.allow_origins.clone()
    };
    let gw = Arc::new(Gw {
        routes: config
            .routes
            .iter()
            .map(|r| (r.name.clone(), r.clone()))
            .collect::<HashMap<_, _>>(),
        engine,
        log: log.clone(),
        audit,
        client: upstream::client(&config.upstream_ca)?,
        limits: config.limits.clone(),
        allow_origins,
        listen,
        streams: Arc::new(Semaphore::new(config.limits.max_streams)),
        sessions: Mutex::new(HashMap::new()),
    });
    ready(listen);
    let connections = Arc::new(Semaphore::new(config.limits.max_connections));
    {
        let gw = Arc::clone(&gw);
        let every = (gw.limits.idle_timeout / 4).clamp(
            std::time::Duration::from_millis(50),
            std::time::Duration::from_secs(30),
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                gw.reap_idle().await;
            }
        });
    }
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                log.line(format_args!("accepting a connection failed: {error}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Each SSE event and JSON answer is written as it comes: no Nagle
        // delay behind the client's delayed ACK.
        if let Err(error) = stream.set_nodelay(true) {
            log.line(format_args!(
                "cannot set TCP_NODELAY on a connection: {error}"
            ));
        }
        let permit = Arc::clone(&connections).try_acquire_owned().ok();
        let gw = Arc::clone(&gw);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                None => serve_connection(gw, stream, permit).await,
                Some(acceptor) => {
                    // A handshake is bounded like a request head (slowloris).
                    let timeout = gw.limits.header_read_timeout;
                    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(gw, stream, permit).await,
                        // Not TLS, a bad handshake, or too slow: nothing
                        // was read, nothing to answer (logged, no detail a
                        // client chose).
                        Ok(Err(_)) | Err(_) => {
                            gw.log.line(format_args!(
                                "a TLS handshake failed or took over {} ms; connection closed",
                                timeout.as_millis()
                            ));
                        }
                    }
                }
            }
        });
    }
    log.line(format_args!("stopping: ending every session"));
    gw.end_all().await;
    Ok(())
}

/// Serves one client connection (plain TCP, or TLS once its handshake is
/// done) with the gateway's limits; `permit` is `None` past
/// `--max-connections` (503, and the connection closed).
async fn serve_connection<I>(gw: Arc<Gw>, io: I, permit: Option<tokio::sync::OwnedSemaphorePermit>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(gw.limits.header_read_timeout)
        // hyper's floor is 8 KiB.
        .max_buf_size(gw.limits.max_header_bytes.max(8192));
    let full = permit.is_none();
    let service = hyper::service::service_fn(move |request| {
        let gw = Arc::clone(&gw);
        async move {
            if full {
                let mut response = jsonrpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    jsonrpc::INTERNAL_ERROR,
                    "the gateway is serving its maximum number of connections",
                );
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                return Ok::<_, Infallible>(response);
            }
            Ok::<_, Infallible>(handle(gw, request).await)
        }
    });
    let _ = builder
        .keep_alive(!full)
        .serve_connection(TokioIo::new(io), service)
        .await;
    drop(permit);
}

/// SIGINT or SIGTERM.
pub(crate) async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

async fn handle(gw: Arc<Gw>, request: Request<Incoming>) -> Response<Body> {
    // DNS rebinding (MCP transport, "Security Warning"): a browser page
    // may reach a loopback port; its Origin, or its Host, gives it away.
    if !headers::origin_allowed(request.headers(), &gw.allow_origins) {
        return jsonrpc_error(
            StatusCode::FORBIDDEN,
            None,
            jsonrpc::INVALID_REQUEST,
            "Forbidden: this Origin is not allowed (mcpc gateway --allow-origin)",
        );
    }
    if gw.listen.ip().is_loopback() && !headers::host_allowed(request.headers(), gw.listen) {
        return jsonrpc_error(
            StatusCode::FORBIDDEN,
            None,
            jsonrpc::INVALID_REQUEST,
            "Forbidden: the Host is not this loopback gateway",
        );
    }
    let path = request.uri().path().to_owned();
    if let Some(rest) = path.strip_prefix("/.well-known/") {
        return discovery(&gw, request, rest).await;
    }
    let mut segments = path.trim_start_matches('/').splitn(2, '/');
    let (Some(name), Some("mcp")) = (segments.next(), segments.next()) else {
        return empty(StatusCode::NOT_FOUND);
    };
    let Some(route) = gw.routes.get(name).cloned() else {
        return empty(StatusCode::NOT_FOUND);
    };
    match *request.method() {
        Method::POST => post(&gw, &route, request).await,
        Method::GET => get(&gw, &route, request).await,
        Method::DELETE => delete(&gw, &route, request).await,
        Method::OPTIONS => preflight(&gw, &route, request).await,
        _ => {
            let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
            response.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
            );
            response
        }
    }
}

fn session_id(request: &Request<Incoming>) -> Option<String> {
    request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The upstream request for a client request on `route`: the client's
/// headers filtered, no `Accept-Encoding` (the gateway reads every body it
/// relays), no session id for a session the gateway minted.
fn upstream_request(
    route: &Route,
    parts: &hyper::http::request::Parts,
    sess: Option<&Sess>,
    body: Bytes,
) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
    let mut headers = headers::forwarded(&parts.headers);
    headers.remove(header::ACCEPT_ENCODING);
    if sess.is_some_and(Sess::is_minted) {
        headers.remove("mcp-session-id");
    }
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(upstream::target(route, parts.uri.query()))
        .body(Full::new(body))?;
    *request.headers_mut() = headers;
    Ok(request)
}

fn bad_gateway(
    sess: &Sess,
    error: &(dyn std::error::Error + 'static),
    id: Option<&Value>,
) -> Response<Body> {
    sess.log.line(format_args!(
        "the server could not be reached: {}",
        with_causes(error)
    ));
    jsonrpc_error(
        StatusCode::BAD_GATEWAY,
        id,
        jsonrpc::INTERNAL_ERROR,
        "the gateway could not reach the server",
    )
}

/// An error and every error under it, `: `-separated: the connector's
/// "client error (Connect)" alone hides a refused certificate or a reset.
pub(crate) fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        next = cause.source();
    }
    text
}

/// What the gateway needs to know of a client's message.
#[derive(serde::Deserialize)]
struct ClientProbe {
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    id: Option<Value>,
}

async fn post(gw: &Arc<Gw>, route: &Route, request: Request<Incoming>) -> Response<Body> {
    let max = gw.limits.max_body;
    let too_large = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|len| len > max as u64);
    if too_large {
        return jsonrpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            jsonrpc::INVALID_REQUEST,
            &format!("Request body over {max} bytes"),
        );
    }
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return jsonrpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                jsonrpc::INVALID_REQUEST,
                &format!("Request body over {max} bytes, or cut short"),
            );
        }
    };
    let text = frame_text(&body);
    if text.trim_ascii_start().first() == Some(&b'[') {
        // JSON-RPC batches left MCP in 2025-06-18; one message per POST.
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            None,
            jsonrpc::INVALID_REQUEST,
            "Invalid request: the gateway takes one JSON-RPC message per POST, not a batch",
        );
    }
    let probe: Option<ClientProbe> = serde_json::from_slice(text).ok();
    let method = probe.as_ref().and_then(|p| p.method.clone());
    let id = probe.as_ref().and_then(|p| p.id.clone());
    let is_request = method.is_some() && id.is_some();
    let sid = session_id_of(&parts);
    let (sess, pending, created) = match &sid {
        Some(sid) => {
            let (sess, created) = gw.session_for(route, sid);
            (sess, false, created)
        }
        // `initialize` (or a stateless server's message): filed once the
        // upstream's answer says under which id.
        None => (gw.new_session(route), true, false),
    };
    sess.remember(&parts.headers);
    let _busy = sess.busy();
    if method.is_none()
        && let Some(key) = id.as_ref().and_then(wire::value_key)
    {
        sess.answered(&key.to_string());
    }
    // A request may open a stream: it counts against the cap.
    let permit = if is_request {
        match Arc::clone(&gw.streams).try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                return jsonrpc_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    id.as_ref(),
                    jsonrpc::INTERNAL_ERROR,
                    "the gateway is carrying its maximum number of streams",
                );
            }
        }
    } else {
        None
    };
    let input = body.clone();
    let captured = sess.call(move |session| session.from_client(&input)).await;
    // A frame for the client that answers this POST's request (the session
    // refusing a retry itself) answers the POST; any other goes to a stream.
    let (answers, elsewhere): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
        captured.to_client.into_iter().partition(|frame| {
            id.is_some()
                && serde_json::from_slice::<ClientProbe>(frame)
                    .ok()
                    .and_then(|p| p.id)
                    == id
        });
    sess.to_client_elsewhere(elsewhere).await;
    let mut to_server = captured.to_server;
    let Some(last) = to_server.pop() else {
        return match answers.into_iter().next() {
            Some(answer) => {
                let mut response = Response::new(full(answer));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            None => empty(StatusCode::ACCEPTED),
        };
    };
    // Frames before the last go in POSTs of their own; the last is this
    // POST's body: the client's own bytes when the session forwarded them
    // unchanged.
    relay::post_all(
        &sess,
        to_server,
        parts.headers.get(header::AUTHORIZATION).cloned(),
    )
    .await;
    let upstream_body = if last == text {
        body
    } else {
        Bytes::from(last)
    };
    let upstream = match upstream_request(route, &parts, Some(&sess), upstream_body) {
        Ok(request) => request,
        Err(error) => return bad_gateway(&sess, &error, id.as_ref()),
    };
    let response = match gw.client.request(upstream).await {
        Ok(response) => response,
        Err(error) => return bad_gateway(&sess, &error, id.as_ref()),
    };
    let status = response.status();
    let mut minted = None;
    if pending {
        let assigned = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match (assigned, status.is_success(), method.as_deref()) {
            (Some(assigned), true, _) => gw.insert(&assigned, false, &sess),
            (None, true, Some("initialize")) => {
                // A stateless server: the gateway's own id towards the
                // client, never sent upstream, so the client's messages
                // still meet one session.
                let id = mint_id();
                gw.insert(&id, true, &sess);
                sess.log.line(format_args!(
                    "the server assigned no session id: the gateway minted {} for the client",
                    short(&id)
                ));
                minted = Some(id);
            }
            _ => {}
        }
    } else if let Some(sid) = &sid
        && !sess.is_minted()
    {
        forget_if_unknown(gw, route, sid, created, status).await;
    }
    let mut response = respond(gw, &sess, response, &parts, id.as_ref(), false, permit).await;
    if let Some(minted) = minted
        && let Ok(value) = HeaderValue::from_str(&minted)
    {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// The server ended the session (404), or never knew the id the gateway
/// just filed for it (`created`, any 4xx): the gateway forgets it too.
async fn forget_if_unknown(gw: &Gw, route: &Route, sid: &str, created: bool, status: StatusCode) {
    if status == StatusCode::NOT_FOUND || (created && status.is_client_error()) {
        gw.end(
            &route.name,
            sid,
            &format!("the server answered {status} for it"),
        )
        .await;
    }
}

fn session_id_of(parts: &hyper::http::request::Parts) -> Option<String> {
    parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn mint_id() -> String {
    let mut bits = [0u8; 16];
    if getrandom::fill(&mut bits).is_err() {
        // No randomness: the time is unique enough for one process's ids
        // towards its own clients (the id grants nothing upstream).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bits = nanos.to_le_bytes();
    }
    let hex: String = bits.iter().map(|b| format!("{b:02x}")).collect();
    format!("{MINTED_PREFIX}{hex}")
}

/// The client's response for an upstream response: SSE and JSON bodies of a
/// success through the session, everything else as it came.
async fn respond(
    gw: &Arc<Gw>,
    sess: &Arc<Sess>,
    response: Response<Incoming>,
    request: &hyper::http::request::Parts,
    id: Option<&Value>,
    get: bool,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Response<Body> {
    let authorization = request.headers.get(header::AUTHORIZATION).cloned();
    // Read as loosely as any client reads it: the TypeScript SDK takes a
    // content type that merely *contains* `text/event-stream` (then
    // `application/json`) for one; the Python SDK looks at how it starts.
    // Whatever some client could read as MCP messages goes through the
    // session, and goes out with exactly one content type.
    let content_type = response
        .headers()
        .get_all(header::CONTENT_TYPE)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(",");
    let kind = if content_type.contains("event-stream") {
        Some("text/event-stream")
    } else if content_type.contains("json") {
        Some("application/json")
    } else {
        None
    };
    let status = response.status();
    if status.is_redirection() {
        // A client's fetch follows a redirect by itself: to the server's
        // own address, its stream would reach the client undecided.
        sess.log.line(format_args!(
            "the server answered HTTP {status} (a redirect); refused, a client would follow it around the gateway"
        ));
        return jsonrpc_error(
            StatusCode::BAD_GATEWAY,
            id,
            jsonrpc::INTERNAL_ERROR,
            "the server answered with a redirect; the gateway does not follow or pass redirects",
        );
    }
    if let (true, Some(kind)) = (status.is_success(), kind) {
        if response.headers().contains_key(header::CONTENT_ENCODING) {
            sess.log.line(format_args!(
                "the server sent an encoded {kind} body the gateway cannot read; refused"
            ));
            return jsonrpc_error(
                StatusCode::BAD_GATEWAY,
                id,
                jsonrpc::INTERNAL_ERROR,
                "the server's response is content-encoded; the gateway must read it",
            );
        }
        if kind == "text/event-stream" {
            // A GET with `Last-Event-ID` resumes a stream: where that
            // event stands, if this session wrote it.
            let resumed = request
                .headers
                .get("last-event-id")
                .filter(|_| get)
                .and_then(|v| v.to_str().ok())
                .and_then(|id| sess.resume_point(id));
            return relay::sse(gw, sess, response, authorization, get, resumed, permit);
        }
        return relay::json(gw, sess, response, authorization, id).await;
    }
    passthrough(response)
}

/// An upstream response as it came, hop-by-hop headers removed.
fn passthrough(response: Response<Incoming>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let length = parts.headers.get(header::CONTENT_LENGTH).cloned();
    parts.headers = headers::forwarded(&parts.headers);
    if let Some(length) = length {
        parts.headers.insert(header::CONTENT_LENGTH, length);
    }
    Response::from_parts(parts, body.map_err(|e| -> BoxError { Box::new(e) }).boxed())
}

async fn get(gw: &Arc<Gw>, route: &Route, request: Request<Incoming>) -> Response<Body> {
    let sid = session_id(&request);
    let (parts, _) = request.into_parts();
    let (sess, created) = match &sid {
        Some(sid) => gw.session_for(route, sid),
        None => (gw.new_session(route), false),
    };
    sess.remember(&parts.headers);
    let _busy = sess.busy();
    if sess.is_minted() {
        // A stateless server has no stream to give.
        let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
        return response;
    }
    let Ok(permit) = Arc::clone(&gw.streams).try_acquire_owned() else {
        return jsonrpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            jsonrpc::INTERNAL_ERROR,
            "the gateway is carrying its maximum number of streams",
        );
    };
    let upstream = match upstream_request(route, &parts, Some(&sess), Bytes::new()) {
        Ok(request) => request,
        Err(error) => return bad_gateway(&sess, &error, None),
    };
    let response = match gw.client.request(upstream).await {
        Ok(response) => response,
        Err(error) => return bad_gateway(&sess, &error, None),
    };
    if let Some(sid) = &sid {
        forget_if_unknown(gw, route, sid, created, response.status()).await;
    }
    respond(gw, &sess, response, &parts, None, true, Some(permit)).await
}

async fn delete(gw: &Arc<Gw>, route: &Route, request: Request<Incoming>) -> Response<Body> {
    let Some(sid) = session_id(&request) else {
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            None,
            jsonrpc::INVALID_REQUEST,
            "Bad Request: DELETE needs an Mcp-Session-Id",
        );
    };
    let (parts, _) = request.into_parts();
    if sid.starts_with(MINTED_PREFIX) {
        gw.end(&route.name, &sid, "the client deleted it").await;
        return empty(StatusCode::OK);
    }
    let upstream = match upstream_request(route, &parts, None, Bytes::new()) {
        Ok(request) => request,
        Err(error) => {
            gw.log
                .line(format_args!("cannot forward a DELETE: {error}"));
            return empty(StatusCode::BAD_GATEWAY);
        }
    };
    let response = gw.client.request(upstream).await;
    let status = response.as_ref().map(Response::status).ok();
    if status.is_some_and(|s| s.is_success() || s == StatusCode::NOT_FOUND) {
        gw.end(&route.name, &sid, "the client deleted it").await;
    }
    match response {
        Ok(response) => passthrough(response),
        Err(error) => {
            gw.log.line(format_args!(
                "forwarding a DELETE failed: {}",
                with_causes(&error)
            ));
            empty(StatusCode::BAD_GATEWAY)
        }
    }
}

/// A CORS preflight (a browser client from an allowed origin): the
/// upstream's answer, as it came; it carries no message.
async fn preflight(gw: &Arc<Gw>, route: &Route, request: Request<Incoming>) -> Response<Body> {
    let (parts, _) = request.into_parts();
    let upstream = match upstream_request(route, &parts, None, Bytes::new()) {
        Ok(request) => request,
        Err(_) => return empty(StatusCode::BAD_GATEWAY),
    };
    match gw.client.request(upstream).await {
        Ok(response) => passthrough(response),
        Err(error) => {
            gw.log.line(format_args!(
                "forwarding a preflight on route {} failed: {error}",
                route.name
            ));
            empty(StatusCode::BAD_GATEWAY)
        }
    }
}

/// OAuth discovery (MCP authorization): the gateway's well-known paths map
/// to the upstream's, so a client authorizes with the upstream's
/// authorization server end to end.
///
/// - `/.well-known/oauth-protected-resource/NAME[/…]` → the upstream's
///   protected-resource metadata for its MCP endpoint (RFC 9728 §3.1);
/// - `/.well-known/oauth-authorization-server/NAME[/…]` and
///   `/.well-known/openid-configuration/NAME[/…]` → the upstream origin's,
///   with the rest of the path; without a NAME, the only route's.
async fn discovery(gw: &Arc<Gw>, request: Request<Incoming>, rest: &str) -> Response<Body> {
    if request.method() != Method::GET {
        return empty(StatusCode::METHOD_NOT_ALLOWED);
    }
    let (document, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let (name, suffix) = tail.split_once('/').unwrap_or((tail, ""));
    let route = match gw.routes.get(name) {
        Some(route) => Some((route, format!("/{suffix}"))),
        None if name.is_empty() && gw.routes.len() == 1 => gw
            .routes
            .values()
            .next()
            .map(|route| (route, String::new())),
        None => None,
    };
    let Some((route, suffix)) = route else {
        return empty(StatusCode::NOT_FOUND);
    };
    let target = match document {
        "oauth-protected-resource" => upstream::well_known(
            route,
            "/.well-known/oauth-protected-resource",
            route.url.path(),
        ),
        "oauth-authorization-server" | "openid-configuration" => {
            let suffix = if suffix == "/" { "" } else { suffix.as_str() };
            upstream::well_known(route, &format!("/.well-known/{document}"), suffix)
        }
        _ => None,
    };
    let Some(target) = target else {
        return empty(StatusCode::NOT_FOUND);
    };
    let (parts, _) = request.into_parts();
    let mut headers = headers::forwarded(&parts.headers);
    headers.remove(header::COOKIE);
    let Ok(mut upstream) = Request::builder()
        .method(Method::GET)
        .uri(target)
        .body(Full::new(Bytes::new()))
    else {
        return empty(StatusCode::BAD_GATEWAY);
    };
    *upstream.headers_mut() = headers;
    match gw.client.request(upstream).await {
        Ok(response) => passthrough(response),
        Err(error) => {
            gw.log.line(format_args!(
                "OAuth discovery on route {} failed: {error}",
                route.name
            ));
            empty(StatusCode::BAD_GATEWAY)
        }
    }
}
