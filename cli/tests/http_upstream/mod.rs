//! A test upstream's plumbing, shared by `model_shells.rs` and
//! `gateway_fleet.rs`: a handler served over HTTP/1.1 on a loopback port,
//! the body type it answers with, and where the `mcpc gateway` in front of
//! it listens.
#![allow(dead_code, reason = "each includer uses its part")]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// What the upstream answers with.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// Serves `handle(state, request)` on a loopback port until the runtime ends.
pub async fn serve<S, F, Fut>(state: Arc<S>, handle: F) -> SocketAddr
where
    S: Send + Sync + 'static,
    F: Fn(Arc<S>, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let state = Arc::clone(&state);
                    async move { Ok::<_, Infallible>(handle(state, request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Where a `mcpc gateway` started with `--log FILE` and stderr piped
/// listens (`ADDR` of its `listening on http://ADDR` line on stderr); the
/// rest of its stderr is drained.
pub fn gateway_address(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut ready = String::new();
    stderr.read_line(&mut ready).unwrap();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let at = ready
        .find("listening on http://")
        .unwrap_or_else(|| panic!("no listening line: {ready:?}"));
    ready[at + "listening on http://".len()..].trim().to_owned()
}
