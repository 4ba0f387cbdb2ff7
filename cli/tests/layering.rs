//! The crate layering holds in the resolved dependency graph, not only in
//! the manifests: what each library links, as `cargo tree -e normal` reports
//! it for that package alone (features resolved as a build of that package
//! would resolve them).
//!
//! - the language server links the language library, never the command
//!   line (clap, TOML), SQLite, the proxy, or an async runtime;
//! - the language library (`mcpolicy-compiler`) links none of those either;
//! - the proxy links neither clap nor SQLite (the CLI opens the store) nor
//!   tokio/rmcp (std threads), nor HTTP (hyper);
//! - the HTTP gateway (`mcpolicy-gateway`, `mcpc gateway`) links tokio and
//!   hyper with rustls on ring, but neither clap nor SQLite (the CLI opens
//!   the store, as for the proxy), nor OpenSSL, nor aws-lc (it needs cmake);
//!   HTTP stays out of the runtime, the proxy, the language library and the
//!   language server;
//! - the runtime never links the compiler, pest, salsa, or an async runtime,
//!   nor Node-API: the Node.js binding (`mcpolicy-node`, runtime/node) wraps
//!   the runtime from outside, and links no async runtime of its own either
//!   (its store calls run on libuv's thread pool);
//! - the rmcp adapter (`mcpolicy-rmcp`) links the runtime, tokio and rmcp,
//!   and none of the command line, the language library or the proxy;
//! - TLS (OpenSSL through native-tls, for the PostgreSQL store) is linked by
//!   the store crate and what embeds it (`mcpc`, the Node.js and Python
//!   bindings): never the runtime, the proxy, the language library or the
//!   language server;
//! - PyO3 is linked by the Python binding (`runtime/python`) alone: the
//!   runtime it wraps stays free of it, and the binding links neither the
//!   command line nor the compiler.
//!
//! Runs `cargo tree --offline --locked`: the lock file and the downloaded
//! sources are already there when this test has been built.

use std::collections::BTreeSet;
use std::process::Command;

/// The names of every package in `package`'s normal dependency tree.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "-p",
            package,
        ])
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let names: BTreeSet<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    // The package itself is the first line: a tree that is empty or names
    // something else means the output format changed, not that all is well.
    assert!(
        names.contains(package),
        "cargo tree -p {package} did not list {package}: {names:?}"
    );
    names
}

/// Fails naming every crate of `forbidden` that `package` links.
fn assert_links_none(package: &str, forbidden: &[&str]) {
    let linked = normal_dependencies(package);
    let found: Vec<&&str> = forbidden
        .iter()
        .filter(|name| linked.contains(**name))
        .collect();
    assert!(found.is_empty(), "{package} links {found:?}");
}

/// What no crate below the command line may link.
const CLI_ONLY: &[&str] = &["clap", "clap_builder", "toml", "tempfile", "mcpc"];
/// The durable store (the runtime's `sqlite` feature).
const SQLITE: &[&str] = &["rusqlite", "libsqlite3-sys"];
/// An async runtime and the MCP SDK (examples and end-to-end tests only).
const ASYNC: &[&str] = &["tokio", "rmcp"];
/// HTTP and its TLS (`mcpolicy-gateway` only).
const HTTP: &[&str] = &[
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "rustls",
    "http-body-util",
];
/// Node-API (`mcpolicy-node` only, the Node.js binding in runtime/node).
const NAPI: &[&str] = &["napi", "napi-sys", "napi-derive"];
/// The Python binding's own (`mcpolicy-python` only).
const PYO3: &[&str] = &["pyo3", "pyo3-ffi", "pyo3-macros"];
/// TLS to PostgreSQL (`mcpolicy-store-postgres` only).
const TLS: &[&str] = &[
    "native-tls",
    "postgres-native-tls",
    "openssl",
    "openssl-sys",
];

#[test]
fn only_the_postgres_store_links_tls() {
    for package in [
        "mcpolicy-runtime",
        "mcpolicy-proxy",
        "mcpolicy-gateway",
        "mcpolicy-compiler",
        "mcpolicy-lsp",
    ] {
        assert_links_none(package, TLS);
    }
    let linked = normal_dependencies("mcpolicy-store-postgres");
    assert!(
        TLS.iter().all(|name| linked.contains(*name)),
        "the PostgreSQL store does not link {TLS:?}: {linked:?}"
    );
}

#[test]
fn the_language_server_links_no_cli_no_sqlite_no_proxy_no_async() {
    for set in [CLI_ONLY, SQLITE, ASYNC, &["mcpolicy-proxy"]] {
        assert_links_none("mcpolicy-lsp", set);
    }
}

#[test]
fn the_language_library_links_no_cli_no_sqlite_no_proxy_no_async() {
    for set in [CLI_ONLY, SQLITE, ASYNC, &["mcpolicy-proxy"]] {
        assert_links_none("mcpolicy-compiler", set);
    }
}

#[test]
fn the_proxy_links_no_cli_no_sqlite_no_async_no_compiler() {
    for set in [CLI_ONLY, SQLITE, ASYNC, HTTP, &["mcpolicy-compiler"]] {
        assert_links_none("mcpolicy-proxy", set);
    }
}

#[test]
fn the_gateway_links_http_but_no_cli_no_sqlite_no_aws_lc() {
    for set in [
        CLI_ONLY,
        SQLITE,
        &[
            "rmcp",
            "mcpolicy-compiler",
            "aws-lc-rs",
            "aws-lc-sys",
            "cmake",
        ],
    ] {
        assert_links_none("mcpolicy-gateway", set);
    }
    let linked = normal_dependencies("mcpolicy-gateway");
    for name in ["tokio", "hyper", "hyper-rustls", "ring", "mcpolicy-proxy"] {
        assert!(
            linked.contains(name),
            "mcpolicy-gateway does not link {name}: {linked:?}"
        );
    }
    for package in ["mcpolicy-runtime", "mcpolicy-compiler", "mcpolicy-lsp"] {
        assert_links_none(package, HTTP);
    }
}

#[test]
fn the_runtime_links_no_compiler_and_no_async() {
    for set in [
        CLI_ONLY,
        ASYNC,
        NAPI,
        PYO3,
        &[
            "mcpolicy-compiler",
            "mcpolicy-grammar",
            "pest",
            "salsa",
            "miette",
        ],
    ] {
        assert_links_none("mcpolicy-runtime", set);
    }
}

#[test]
fn only_the_python_binding_links_pyo3() {
    for package in [
        "mcpolicy-store-postgres",
        "mcpolicy-proxy",
        "mcpolicy-compiler",
        "mcpolicy-lsp",
        "mcpc",
    ] {
        assert_links_none(package, PYO3);
    }
    let linked = normal_dependencies("mcpolicy-python");
    for name in ["pyo3", "mcpolicy-runtime", "mcpolicy-store-postgres"] {
        assert!(
            linked.contains(name),
            "mcpolicy-python does not link {name}: {linked:?}"
        );
    }
    for set in [CLI_ONLY, &["mcpolicy-compiler", "mcpolicy-proxy", "rmcp"]] {
        assert_links_none("mcpolicy-python", set);
    }
}

/// The rmcp adapter (`runtime/rmcp`) is where tokio and rmcp meet the
/// runtime: it links those three, and nothing of the command line, the
/// language, the proxy or PostgreSQL's TLS.
#[test]
fn the_rmcp_adapter_links_the_runtime_and_rmcp_alone() {
    for set in [
        CLI_ONLY,
        TLS,
        &[
            "mcpolicy-compiler",
            "mcpolicy-proxy",
            "mcpolicy-lsp",
            "pest",
            "salsa",
        ],
    ] {
        assert_links_none("mcpolicy-rmcp", set);
    }
    let linked = normal_dependencies("mcpolicy-rmcp");
    for name in ["mcpolicy-runtime", "rmcp", "tokio"] {
        assert!(
            linked.contains(name),
            "mcpolicy-rmcp does not link {name}: {linked:?}"
        );
    }
}

/// The check above can fail: the command line does link what the
/// libraries must not.
#[test]
fn the_command_line_links_what_the_libraries_must_not() {
    let linked = normal_dependencies("mcpc");
    for name in [
        "clap",
        "toml",
        "rusqlite",
        "mcpolicy-proxy",
        "mcpolicy-compiler",
        "native-tls",
    ] {
        assert!(
            linked.contains(name),
            "mcpc does not link {name}: {linked:?}"
        );
    }
}

/// The Node.js binding links Node-API and the runtime it wraps, and neither
/// the compiler nor the command line. Its PostgreSQL store runs a tokio of
/// its own inside it (runtime/postgres), so `tokio` is there; rmcp is not.
#[test]
fn the_node_binding_links_napi_and_the_runtime_and_no_compiler() {
    let linked = normal_dependencies("mcpolicy-node");
    for name in ["napi", "mcpolicy-runtime", "mcpolicy-store-postgres"] {
        assert!(
            linked.contains(name),
            "mcpolicy-node does not link {name}: {linked:?}"
        );
    }
    for set in [CLI_ONLY, &["rmcp", "mcpolicy-compiler", "mcpolicy-proxy"]] {
        assert_links_none("mcpolicy-node", set);
    }
}
