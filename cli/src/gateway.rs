//! `mcpc gateway --policy FILE --route NAME=URL … [--listen ADDR] [--store
//! SPEC] [--audit FILE] [--log FILE] [--allow-origin ORIGIN …]
//! [--idle-timeout DURATION] [--tls-cert FILE --tls-key FILE] [--upstream-ca
//! FILE …]`, or the same in a TOML file (`--config`).
//!
//! The Streamable HTTP transport of the policy (`mcpolicy-gateway`): a
//! reverse proxy in front of remote MCP servers, one route per server,
//! deciding every sampling request with the same session as `mcpc proxy`
//! (`docs/spec/transports.md`). It loads the policy and opens the store as
//! `mcpc proxy` does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mcpolicy_gateway::{Config, Limits, ListenTls, Route};
use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::SystemClock;
use serde::Deserialize;

use super::policy::{LoadFailure, load_policy_with_source};
use super::show::BlockReport;
use super::store_open::{self, Create, Now};
use super::{ColorChoice, fail};

/// Where the gateway listens unless told: loopback only.
const DEFAULT_LISTEN: &str = "127.0.0.1:8765";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The policy (`.mcpolicy`) or a compiled table (`.json`).
    #[arg(long, value_name = "FILE")]
    policy: Option<String>,
    /// A TOML file with any of these settings (`policy`, `listen`, `store`, `audit`, `log`,
    /// `allow_origins`, `idle_timeout`, the limits, `tls_cert`, `tls_key`, `upstream_ca`,
    /// and a `[routes]` table of NAME = "URL");
    /// flags given as well win, and `--route`s add to its routes.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where to listen [default: 127.0.0.1:8765]. Port 0 picks a free port; the log says
    /// `listening on http://ADDR` once bound.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// An upstream MCP server: NAME is the path segment (clients use
    /// http://ADDR/NAME/mcp) and the server id the policy knows it by ([A-Za-z0-9._-]+);
    /// URL its Streamable HTTP endpoint (http:// or https://).
    #[arg(long = "route", value_name = "NAME=URL")]
    routes: Vec<String>,
    /// The decision store, as for `mcpc proxy --store` [default: `store` in
    /// ~/.config/mcpolicy/config.toml, else the per-user default path].
    #[arg(long, value_name = "SPEC")]
    store: Option<String>,
    /// Append one JSON line per decision to FILE.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Write the gateway's log to FILE instead of standard error.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// An Origin browsers may send (repeatable) [default: http://127.0.0.1:PORT,
    /// http://localhost:PORT and http://[::1]:PORT of the listening port]. Requests with no
    /// Origin are always allowed (not a browser).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// End a session after this long with no message and no open stream (`30m`, `90s`)
    /// [default: 30m].
    #[arg(long, value_name = "DURATION")]
    idle_timeout: Option<String>,
    /// The largest request body, in bytes (413 past it) [default: 4 MiB].
    #[arg(long, value_name = "BYTES")]
    max_body: Option<usize>,
    /// The largest SSE event or JSON body read from a server, in bytes [default: 4 MiB].
    #[arg(long, value_name = "BYTES")]
    max_event: Option<usize>,
    /// The largest request head, in bytes (at least 8192) [default: 64 KiB].
    #[arg(long, value_name = "BYTES")]
    max_header_bytes: Option<usize>,
    /// How long a client may take to send a request head [default: 10s].
    #[arg(long, value_name = "DURATION")]
    header_read_timeout: Option<String>,
    /// Connections served at once (503 past it) [default: 256].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// SSE streams (and requests that may open one) at once (503 past it) [default: 128].
    #[arg(long, value_name = "N")]
    max_streams: Option<usize>,
    /// Listen on TLS with this PEM certificate chain (leaf first); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A PEM file of CA certificates trusted for https:// upstreams besides the system's
    /// roots (repeatable): a private CA.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    upstream_ca: Vec<PathBuf>,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

/// `--config FILE`: the same settings as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    policy: Option<String>,
    listen: Option<String>,
    store: Option<String>,
    audit: Option<PathBuf>,
    log: Option<PathBuf>,
    #[serde(default)]
    allow_origins: Vec<String>,
    idle_timeout: Option<String>,
    header_read_timeout: Option<String>,
    max_body: Option<usize>,
    max_event: Option<usize>,
    max_header_bytes: Option<usize>,
    max_connections: Option<usize>,
    max_streams: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default)]
    upstream_ca: Vec<PathBuf>,
    #[serde(default)]
    routes: BTreeMap<String, String>,
}

/// The file's settings, relative paths taken from the file's directory.
fn read_config(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("gateway.config: cannot read {}: {e}", path.display()))?;
    let mut config: FileConfig =
        toml::from_str(&text).map_err(|e| format!("gateway.config: {}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let near = |p: &Path| {
        if p.is_relative() {
            dir.join(p)
        } else {
            p.to_owned()
        }
    };
    config.policy = config
        .policy
        .map(|p| near(Path::new(&p)).to_string_lossy().into_owned());
    config.audit = config.audit.as_deref().map(near);
    config.store = config.store.map(|spec| {
        if mcpolicy_store_postgres::StoreSpec::looks_like_postgres(&spec) || spec.contains("://") {
            spec
        } else {
            near(Path::new(&spec)).to_string_lossy().into_owned()
        }
    });
    config.log = config.log.as_deref().map(near);
    config.tls_cert = config.tls_cert.as_deref().map(near);
    config.tls_key = config.tls_key.as_deref().map(near);
    config.upstream_ca = config.upstream_ca.iter().map(|p| near(p)).collect();
    Ok(config)
}

fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    match super::test::spec::parse_duration(text).and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "gateway.config: {flag} `{text}` is not a duration (write e.g. `30m`, `90s`, `1h30m`, `500ms`)"
        )),
    }
}

fn positive(flag: &str, n: usize) -> Result<usize, String> {
    if n == 0 {
        return Err(format!("gateway.config: {flag} must be at least 1"));
    }
    Ok(n)
}

/// Flags over the file over the defaults.
fn settings(args: &Args, file: &FileConfig) -> Result<(Config, String), String> {
    let policy = args
        .policy
        .clone()
        .or_else(|| file.policy.clone())
        .ok_or("gateway.config: no policy: pass --policy FILE (or `policy` in --config)")?;
    let listen = match (args.listen, &file.listen) {
        (Some(listen), _) => listen,
        (None, Some(text)) => text.parse().map_err(|_| {
            format!("gateway.config: listen `{text}` is not an address (write e.g. 127.0.0.1:8765)")
        })?,
        (None, None) => DEFAULT_LISTEN
            .parse()
            .map_err(|_| "gateway.config: the default address does not parse".to_owned())?,
    };
    let mut routes: Vec<Route> = Vec::new();
    let given = file
        .routes
        .iter()
        .map(|(name, url)| Route::new(name, url))
        .chain(args.routes.iter().map(|spec| Route::parse(spec)));
    for route in given {
        let route = route.map_err(|e| e.to_string())?;
        routes.retain(|r| r.name != route.name);
        routes.push(route);
    }
    if routes.is_empty() {
        return Err(
            "gateway.route: no route: pass --route NAME=URL (e.g. --route notes=https://notes.example/mcp)"
                .to_owned(),
        );
    }
    let defaults = Limits::default();
    let idle = args.idle_timeout.as_ref().or(file.idle_timeout.as_ref());
    let header_read = args
        .header_read_timeout
        .as_ref()
        .or(file.header_read_timeout.as_ref());
    let limits = Limits {
        max_body: positive(
            "--max-body",
            args.max_body.or(file.max_body).unwrap_or(defaults.max_body),
        )?,
        max_event: positive(
            "--max-event",
            args.max_event
                .or(file.max_event)
                .unwrap_or(defaults.max_event),
        )?,
        max_header_bytes: args
            .max_header_bytes
            .or(file.max_header_bytes)
            .unwrap_or(defaults.max_header_bytes),
        header_read_timeout: match header_read {
            Some(text) => duration("--header-read-timeout", text)?,
            None => defaults.header_read_timeout,
        },
        max_connections: positive(
            "--max-connections",
            args.max_connections
                .or(file.max_connections)
                .unwrap_or(defaults.max_connections),
        )?,
        max_streams: positive(
            "--max-streams",
            args.max_streams
                .or(file.max_streams)
                .unwrap_or(defaults.max_streams),
        )?,
        idle_timeout: match idle {
            Some(text) => duration("--idle-timeout", text)?,
            None => defaults.idle_timeout,
        },
    };
    if limits.max_header_bytes < 8192 {
        return Err("gateway.config: --max-header-bytes must be at least 8192".to_owned());
    }
    let allow_origins = if args.allow_origins.is_empty() {
        file.allow_origins.clone()
    } else {
        args.allow_origins.clone()
    };
    let tls = match (
        args.tls_cert.as_ref().or(file.tls_cert.as_ref()),
        args.tls_key.as_ref().or(file.tls_key.as_ref()),
    ) {
        (Some(cert), Some(key)) => Some(ListenTls {
            cert: cert.clone(),
            key: key.clone(),
        }),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(
                "gateway.tls: a TLS listener needs both a certificate and its key (--tls-cert FILE --tls-key FILE)"
                    .to_owned(),
            );
        }
    };
    let mut upstream_ca = file.upstream_ca.clone();
    upstream_ca.extend(args.upstream_ca.iter().cloned());
    Ok((
        Config {
            listen,
            routes,
            allow_origins,
            limits,
            tls,
            upstream_ca,
        },
        policy,
    ))
}

pub fn run(args: Args) -> ExitCode {
    let file = match &args.config {
        Some(path) => match read_config(path) {
            Ok(file) => file,
            Err(error) => return fail(error),
        },
        None => FileConfig::default(),
    };
    let (config, policy_path) = match settings(&args, &file) {
        Ok(settings) => settings,
        Err(error) => return fail(error),
    };
    let (policy, source) = match load_policy_with_source(&policy_path, args.color) {
        Ok(loaded) => loaded,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => {
            return fail(format!(
                "{policy_path} has errors; not starting the gateway"
            ));
        }
    };
    let store_spec = match args
        .store
        .clone()
        .or_else(|| file.store.clone())
        .map_or_else(store_open::default_spec, Ok)
    {
        Ok(spec) => spec,
        Err(error) => return fail(error),
    };
    let store = match store_open::open(&store_spec, Create::WithDirectory, Now::System) {
        Ok(store) => store,
        Err(error) => return fail(error),
    };
    let log_path = args.log.clone().or_else(|| file.log.clone());
    let log = match &log_path {
        Some(path) => match Log::file(path, "gateway") {
            Ok(log) => log.with_prefix("mcpc gateway"),
            Err(error) => return fail(format!("cannot open log {}: {error}", path.display())),
        },
        None => Log::stderr("gateway").with_prefix("mcpc gateway"),
    };
    let audit = match args.audit.clone().or_else(|| file.audit.clone()) {
        Some(path) => match Audit::file(&path) {
            Ok(audit) => Some(audit),
            Err(error) => {
                return fail(format!("cannot open audit log {}: {error}", path.display()));
            }
        },
        None => None,
    };
    log.line(format_args!("policy {policy_path}, store {store_spec}"));
    for route in &config.routes {
        // Which block governs each route's server, said once at start, as
        // `mcpc show --server` says it.
        let governing = BlockReport::governing(policy.table(), source.as_ref(), &route.name);
        log.line(format_args!(
            "route {} → {}: governing block {}",
            route.name,
            route.url,
            governing.governed_by()
        ));
        if let Some(warning) = governing.warning() {
            log.line(format_args!("warning: route {}: {warning}", route.name));
        }
    }
    if !config.listen.ip().is_loopback() {
        log.line(format_args!(
            "warning: listening on {}, not loopback: anyone who can reach it can use every route",
            config.listen
        ));
    }
    let engine = Engine::new(policy, store, Arc::new(SystemClock));
    let to_file = log_path.is_some();
    let ready_log = log.clone();
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let outcome = mcpolicy_gateway::run(config, engine, log.clone(), audit, move |addr| {
        ready_log.line(format_args!("listening on {scheme}://{addr}"));
        if to_file {
            sayln!("mcpc gateway: listening on {scheme}://{addr}");
        }
    });
    match outcome {
        Ok(()) => {
            log.line("stopped");
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}
