//! `mcpolicy-gateway`, the library behind `mcpc gateway`: a Streamable HTTP
//! reverse proxy (MCP 2025-06-18 / 2025-11-25 transport) in front of remote
//! MCP servers. Everything passes through unchanged except what the policy
//! must see: every message from the server (each SSE event, each JSON
//! response body) and every message from the client goes through the same
//! [`Session`](mcpolicy_proxy::session::Session) the stdio proxy uses, one
//! per (route, `Mcp-Session-Id`) (`docs/spec/transports.md`).
//!
//! tokio and hyper carry the bytes; the session decides synchronously on a
//! blocking thread (no decision thread), and what it emits while it reads
//! one message is captured on that thread ([`outlet`]) and routed by the
//! transport. No command-line parsing and no store of its own: the caller
//! (the `mcpc` crate) opens the decision store and builds the
//! [`Engine`](mcpolicy_runtime::Engine).

pub mod headers;
mod outlet;
mod relay;
mod server;
mod sessions;
pub mod sse;
mod tls;
mod upstream;

pub use tls::ListenTls;

use std::net::SocketAddr;
use std::time::Duration;

use hyper::Uri;
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_runtime::Engine;

/// The longest SSE event's data (or JSON response body) the gateway reads
/// from an upstream, by default (4 MiB). A longer one is dropped, answered
/// to the server with -32600, and logged (`gateway/README.md`, "Defences and limits").
pub const MAX_EVENT: usize = 4 << 20;

/// One upstream MCP server: the path segment and server id `name`, and the
/// URL of its MCP endpoint.
#[derive(Debug, Clone)]
pub struct Route {
    /// The path segment (`/NAME/mcp`) and the server id the policy knows
    /// the server by: `[A-Za-z0-9._-]+`.
    pub name: String,
    /// The upstream's MCP endpoint, `http://` or `https://`.
    pub url: Uri,
}

/// Why a route, the listener or the runtime could not be set up. Each has a
/// stable code (`code`), printed by `mcpc gateway`.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A `--route` that is not `NAME=URL`, or a bad name.
    #[error("gateway.route: {0}")]
    Route(String),
    /// The listen address cannot be bound.
    #[error("gateway.listen: cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The async runtime or the TLS roots could not be set up.
    #[error("gateway.runtime: {0}")]
    Runtime(String),
    /// An `--allow-origin` that is not an origin.
    #[error("gateway.origin: {0}")]
    Origin(String),
    /// A certificate, key or CA file that cannot be used.
    #[error("gateway.tls: {0}")]
    Tls(String),
}

impl GatewayError {
    /// The stable code (`gateway.route`, …).
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::Route(_) => "gateway.route",
            GatewayError::Listen { .. } => "gateway.listen",
            GatewayError::Runtime(_) => "gateway.runtime",
            GatewayError::Origin(_) => "gateway.origin",
            GatewayError::Tls(_) => "gateway.tls",
        }
    }
}

/// Whether `name` may name a route: `[A-Za-z0-9._-]+`, and neither `.` nor
/// `..` (a path segment that means something else).
pub fn valid_route_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Route {
    /// A route from `name` and `url`, checked.
    pub fn new(name: &str, url: &str) -> Result<Route, GatewayError> {
        if !valid_route_name(name) {
            return Err(GatewayError::Route(format!(
                "route name `{name}` may only hold A-Z, a-z, 0-9, `.`, `_` and `-` (it is the path segment /NAME/mcp and the server id)"
            )));
        }
        let parsed: Uri = url.parse().map_err(|e| {
            GatewayError::Route(format!("route `{name}`: `{url}` is not a URL: {e}"))
        })?;
        match parsed.scheme_str() {
            Some("http" | "https") if parsed.authority().is_some() => {}
            _ => {
                return Err(GatewayError::Route(format!(
                    "route `{name}`: `{url}` is not an http:// or https:// URL"
                )));
            }
        }
        if parsed.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(GatewayError::Route(format!(
                "route `{name}`: the URL carries credentials; pass them as the client's Authorization instead"
            )));
        }
        Ok(Route {
            name: name.to_owned(),
            url: parsed,
        })
    }

    /// A route from `NAME=URL`.
    pub fn parse(spec: &str) -> Result<Route, GatewayError> {
        let Some((name, url)) = spec.split_once('=') else {
            return Err(GatewayError::Route(format!(
                "`{spec}` is not NAME=URL (e.g. --route notes=https://notes.example/mcp)"
            )));
        };
        Route::new(name, url)
    }
}

/// The gateway's bounds, each with a default and a flag in `mcpc gateway`
/// (`gateway/README.md`, "Defences and limits").
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest request body (413 past it).
    pub max_body: usize,
    /// The largest SSE event or JSON body read from an upstream.
    pub max_event: usize,
    /// The largest request head (hyper's read buffer: 431/400 past it).
    pub max_header_bytes: usize,
    /// How long a client may take to send a request head (slowloris).
    pub header_read_timeout: Duration,
    /// Connections served at once (503 past it).
    pub max_connections: usize,
    /// SSE streams (and requests that may open one) at once (503 past it).
    pub max_streams: usize,
    /// A session with no message and no open stream for this long ends.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body: 4 << 20,
            max_event: MAX_EVENT,
            max_header_bytes: 64 << 10,
            header_read_timeout: Duration::from_secs(10),
            max_connections: 256,
            max_streams: 128,
            idle_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// What `mcpc gateway` runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (loopback by default in `mcpc gateway`).
    pub listen: SocketAddr,
    /// The upstreams, by name.
    pub routes: Vec<Route>,
    /// Origins allowed besides none; empty: the loopback origins of the
    /// listening port (`headers::default_origins`).
    pub allow_origins: Vec<String>,
    /// The bounds.
    pub limits: Limits,
    /// Listen on TLS with this certificate and key (`None`: plain HTTP).
    pub tls: Option<ListenTls>,
    /// PEM files of CA certificates trusted for upstreams besides the
    /// system's roots (a private CA).
    pub upstream_ca: Vec<std::path::PathBuf>,
}

/// Runs the gateway until SIGINT or SIGTERM: binds `config.listen`, calls
/// `ready` with the bound address, and serves. Every session decides with
/// a clone of `engine`. At the end every session is closed as a DELETE
/// closes one (`docs/spec/transports.md`).
pub fn run(
    config: Config,
    engine: Engine,
    log: Log,
    audit: Option<Audit>,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), GatewayError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .enable_all()
        .thread_name("gateway")
        .build()
        .map_err(|e| GatewayError::Runtime(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(server::serve(
        config,
        engine,
        log,
        audit,
        ready,
        server::stop_signal(),
    ))
}

/// [`run`] until `stop` completes instead of a signal (tests, embedders):
/// on the caller's tokio runtime.
pub async fn serve_until(
    config: Config,
    engine: Engine,
    log: Log,
    audit: Option<Audit>,
    ready: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), GatewayError> {
    server::serve(config, engine, log, audit, ready, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_names_are_path_segments_and_server_ids() {
        for good in ["notes", "a.b-c_d", "A1", "..."] {
            assert!(valid_route_name(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "é", "a%2f", "a?b"] {
            assert!(!valid_route_name(bad), "{bad}");
        }
        assert!(Route::parse("notes=https://notes.example/mcp").is_ok());
        for bad in [
            "notes",
            "notes=notes.example/mcp",
            "notes=file:///etc/passwd",
            "notes=https://user:pass@notes.example/mcp",
            "no/te=https://notes.example/mcp",
        ] {
            let error = Route::parse(bad).err().map(|e| e.code());
            assert_eq!(error, Some("gateway.route"), "{bad}");
        }
    }
}
