//! The upstream side: the HTTP client, the URLs a route maps to, and the
//! POSTs the gateway makes on its own (a denial for the server, a refusal of
//! a reused id, an error for an unreadable event).

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::sessions::{Gw, Sess};
use crate::{GatewayError, Route};

/// The upstream client: HTTP/1.1, `https://` through rustls (ring) with the
/// system's roots and any private CA (`tls::client_config`).
pub(crate) type Client = HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

pub(crate) fn client(private_cas: &[std::path::PathBuf]) -> Result<Client, GatewayError> {
    // Small messages in both directions (a sampling answer, a denial):
    // without TCP_NODELAY each waits for the peer's delayed ACK (40 ms on
    // Linux), measured in `cli/benches/gateway.rs`.
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(crate::tls::client_config(private_cas)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(HyperClient::builder(TokioExecutor::new()).build(https))
}

/// The route's URL with the client's query appended (when the route's URL
/// has none of its own).
pub(crate) fn target(route: &Route, query: Option<&str>) -> Uri {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return route.url.clone();
    };
    if route.url.query().is_some() {
        return route.url.clone();
    }
    let path = route.url.path();
    let mut parts = route.url.clone().into_parts();
    parts.path_and_query = format!("{path}?{query}").parse().ok();
    Uri::from_parts(parts).unwrap_or_else(|_| route.url.clone())
}

/// The upstream's URL for an OAuth discovery path: `well_known` (e.g.
/// `/.well-known/oauth-protected-resource`) on the route's origin, followed
/// by `suffix` (the route's own path for protected-resource metadata, as
/// RFC 9728 §3.1 builds it).
pub(crate) fn well_known(route: &Route, well_known: &str, suffix: &str) -> Option<Uri> {
    let scheme = route.url.scheme_str()?;
    let authority = route.url.authority()?;
    let suffix = if suffix == "/" { "" } else { suffix };
    format!("{scheme}://{authority}{well_known}{suffix}")
        .parse()
        .ok()
}

/// POSTs one frame the gateway wrote (not one the client sent) upstream,
/// with the session's headers and `authorization` (the client's, from the
/// request whose stream carried the cause). The server answers a response
/// or notification with 202; anything else is logged (never a header value).
pub(crate) async fn post_frame(
    gw: &Gw,
    sess: &Sess,
    frame: Vec<u8>,
    authorization: Option<HeaderValue>,
) {
    let remembered = sess.remembered();
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(sess.route.url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream");
    if let Some(id) = sess.upstream_id() {
        request = request.header("mcp-session-id", id);
    }
    if let Some(version) = remembered.protocol_version {
        request = request.header("mcp-protocol-version", version);
    }
    if let Some(authorization) = authorization.or(remembered.authorization) {
        request = request.header(header::AUTHORIZATION, authorization);
    }
    let request = match request.body(Full::new(Bytes::from(frame))) {
        Ok(request) => request,
        Err(error) => {
            sess.log.line(format_args!(
                "cannot build the gateway's own POST to the server: {error}"
            ));
            return;
        }
    };
    match gw.client.request(request).await {
        Ok(response) => {
            let status = response.status();
            // Read (bounded) and dropped: the server answers a response
            // with 202 and no body.
            let _ = Limited::new(response.into_body(), 64 << 10).collect().await;
            if status != hyper::StatusCode::ACCEPTED && !status.is_success() {
                sess.log.line(format_args!(
                    "the server answered the gateway's own POST with HTTP {status}"
                ));
            }
        }
        Err(error) => sess.log.line(format_args!(
            "the gateway's own POST to the server failed: {}",
            crate::server::with_causes(&error)
        )),
    }
}
