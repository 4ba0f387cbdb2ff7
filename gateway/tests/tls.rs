//! TLS on both sides of the gateway (`gateway/README.md`, "TLS"), with a
//! private CA made by the openssl CLI for each run:
//!
//! - an `https://` upstream whose certificate a private CA signed is
//!   refused (502, nothing forwarded) unless the gateway is given that CA
//!   (`upstream_ca`), and then reached;
//! - a gateway listening on TLS serves a client that trusts the CA, and a
//!   plain-HTTP request to its port gets no answer;
//! - files that make no certificate or key are refused at start with
//!   `gateway.tls`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcpolicy_gateway::{Config, Limits, ListenTls, Route};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use support::{Upstream, start_gateway_with};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI (CI installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A private CA and a certificate it signed for `localhost` and
/// 127.0.0.1: `ca.crt`, `server.crt`, `server.key` in `dir`.
fn private_ca(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=test CA",
    ]);
    openssl(dir, &ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "7",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
}

/// The hostile tests' upstream, served over TLS with `dir`'s certificate.
async fn tls_upstream(dir: &Path) -> std::net::SocketAddr {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.crt"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    #[allow(deprecated, reason = "the gateway's provider too (gateway/src/tls.rs)")]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let up = Arc::new(Upstream {
        stateful: true,
        ..Upstream::default()
    });
    support::start_upstream_on(up, Some(acceptor)).await
}

fn config(url: &str, tls: Option<ListenTls>, upstream_ca: Vec<PathBuf>) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        routes: vec![Route::new("h", url).unwrap()],
        allow_origins: Vec::new(),
        limits: Limits::default(),
        tls,
        upstream_ca,
    }
}

/// POSTs `initialize` to `url` with a client that trusts `ca` (and
/// nothing else) for `https://`; the status.
async fn initialize(url: &str, ca: &Path) -> Result<StatusCode, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    #[allow(deprecated, reason = "the gateway's provider too (gateway/src/tls.rs)")]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from_static(INIT.as_bytes())))
        .unwrap();
    let response =
        tokio::time::timeout(std::time::Duration::from_secs(20), client.request(request))
            .await
            .map_err(|_| "no answer in time".to_owned())?
            .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let _ = response.into_body().collect().await;
    Ok(status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_upstream_is_reached_only_with_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    private_ca(dir.path());
    let ca = dir.path().join("ca.crt");
    let upstream = tls_upstream(dir.path()).await;
    let url = format!("https://localhost:{}/mcp", upstream.port());

    // The system's roots alone: the upstream's certificate is unknown.
    let gateway = start_gateway_with(config(&url, None, Vec::new()))
        .await
        .unwrap();
    let status = initialize(&format!("http://{}/h/mcp", gateway.addr), &ca)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let log = gateway.log.text();
    assert!(log.to_lowercase().contains("certificate"), "{log}");

    // With the private CA: reached.
    let gateway = start_gateway_with(config(&url, None, vec![ca.clone()]))
        .await
        .unwrap();
    let status = initialize(&format!("http://{}/h/mcp", gateway.addr), &ca)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_listens_on_tls_and_a_plain_request_gets_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    private_ca(dir.path());
    let ca = dir.path().join("ca.crt");
    let up = Arc::new(Upstream {
        stateful: true,
        ..Upstream::default()
    });
    let upstream = support::start_upstream(up).await;
    let listen = ListenTls {
        cert: dir.path().join("server.crt"),
        key: dir.path().join("server.key"),
    };
    let gateway = start_gateway_with(config(
        &format!("http://{upstream}/mcp"),
        Some(listen),
        Vec::new(),
    ))
    .await
    .unwrap();
    let port = gateway.addr.port();
    let status = initialize(&format!("https://localhost:{port}/h/mcp"), &ca)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    // Plain HTTP to the TLS port: no HTTP answer, the handshake fails.
    let plain = initialize(&format!("http://127.0.0.1:{port}/h/mcp"), &ca).await;
    assert!(plain.is_err(), "{plain:?}");
    // A client that does not trust the CA cannot connect.
    let other = tempfile::tempdir().unwrap();
    private_ca(other.path());
    let untrusted = initialize(
        &format!("https://localhost:{port}/h/mcp"),
        &other.path().join("ca.crt"),
    )
    .await;
    assert!(untrusted.is_err(), "{untrusted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_that_make_no_certificate_or_key_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    private_ca(dir.path());
    let not_pem = dir.path().join("server.ext");
    let url = "http://127.0.0.1:1/mcp";
    let cases = [
        (
            Some(ListenTls {
                cert: not_pem.clone(),
                key: dir.path().join("server.key"),
            }),
            Vec::new(),
        ),
        (
            Some(ListenTls {
                cert: dir.path().join("server.crt"),
                key: dir.path().join("ca.key"),
            }),
            Vec::new(),
        ),
        (
            Some(ListenTls {
                cert: dir.path().join("server.crt"),
                key: dir.path().join("missing.key"),
            }),
            Vec::new(),
        ),
        (None, vec![not_pem.clone()]),
        (None, vec![dir.path().join("missing.crt")]),
    ];
    for (tls, upstream_ca) in cases {
        let described = format!("{tls:?} {upstream_ca:?}");
        let Err(error) = start_gateway_with(config(url, tls, upstream_ca)).await else {
            panic!("started with {described}");
        };
        assert_eq!(error.code(), "gateway.tls", "{described}: {error}");
    }
}
