//! `mcpc proxy --policy FILE [--store SPEC] [--server-id ID] [--audit FILE]
//! [--log FILE] -- SERVER_CMD ARGS…`
//!
//! A stdio MCP proxy for clients that cannot embed the runtime: the client
//! launches `mcpc proxy … -- SERVER_CMD` in place of the server. Exit status:
//! the server's (128 + n if a signal ended it); 130, 143 or 129 when SIGINT,
//! SIGTERM or SIGHUP stopped the proxy (the server stopped first); 2 if the
//! proxy could not start.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_proxy::{self as proxy, server_id};
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::SystemClock;

use super::policy::{LoadFailure, load_policy_with_source};
use super::show::BlockReport;
use super::store_open::{self, Create, Now};
use super::{ColorChoice, fail};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The policy (`.mcpolicy`) or a compiled table (`.json`).
    #[arg(long, value_name = "FILE")]
    policy: String,
    /// The decision store: a SQLite file path, or a PostgreSQL store shared by a fleet
    /// (postgres://USER@HOST/DB?schema=NAME or host=… dbname=…; the password from PGPASSWORD
    /// or a password file, never here; TLS as libpq: sslmode=verify-full sslrootcert=CA.pem)
    /// [default: `store` in ~/.config/mcpolicy/config.toml, else
    /// ~/.local/state/mcpolicy/decisions.sqlite3 on Linux, ~/Library/Application
    /// Support/mcpolicy/… on macOS, %LOCALAPPDATA%\mcpolicy\… on Windows; never
    /// $XDG_STATE_HOME, which an MCP client does not pass on].
    #[arg(long, value_name = "SPEC")]
    store: Option<String>,
    /// The id the policy knows this server by [default: derived from a registry
    /// name in the command, e.g. `npx -y @acme/notes` → `npm:@acme/notes`,
    /// `uvx mcp-server-fetch` → `pypi:mcp-server-fetch`; a script or program
    /// given by path is refused and needs this option].
    #[arg(long, value_name = "ID")]
    server_id: Option<String>,
    /// Append one JSON line per decision to FILE.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Write the proxy's log to FILE instead of standard error.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    /// The server command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "SERVER_CMD")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> ExitCode {
    let (policy, source) = match load_policy_with_source(&args.policy, args.color) {
        Ok(loaded) => loaded,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => {
            return fail(format!(
                "{} has errors; not starting the server",
                args.policy
            ));
        }
    };
    let server_id = match args.server_id.clone() {
        Some(id) => id,
        None => match server_id::derive(&args.command) {
            Ok(id) => id,
            Err(underivable) => return fail(underivable),
        },
    };
    let store_spec = match args.store.clone().map_or_else(store_open::default_spec, Ok) {
        Ok(spec) => spec,
        Err(error) => return fail(error),
    };
    let store = match store_open::open(&store_spec, Create::WithDirectory, Now::System) {
        Ok(store) => store,
        // The store's error names its path.
        Err(error) => return fail(error),
    };
    let log = match &args.log {
        Some(path) => match Log::file(path, &server_id) {
            Ok(log) => log,
            Err(error) => return fail(format!("cannot open log {}: {error}", path.display())),
        },
        None => Log::stderr(&server_id),
    };
    let audit = match &args.audit {
        Some(path) => match Audit::file(path) {
            Ok(audit) => Some(audit),
            Err(error) => {
                return fail(format!("cannot open audit log {}: {error}", path.display()));
            }
        },
        None => None,
    };
    log.line(format_args!("policy {}, store {}", args.policy, store_spec));
    // Which block governs this server, said once at start, as `mcpc show
    // --server` says it (`docs/spec/clients.md`, "Which block governs a server").
    let governing = BlockReport::governing(policy.table(), source.as_ref(), &server_id);
    log.line(format_args!("governing block: {}", governing.governed_by()));
    if let Some(warning) = governing.warning() {
        log.line(format_args!("warning: {warning}"));
    }
    let engine = Engine::new(policy, store, Arc::new(SystemClock));
    let stdout: proxy::session::Sink = Box::new(std::io::stdout());
    // A PostgreSQL store may have read its password from PGPASSWORD: that
    // secret is the proxy's, and the server it polices must not inherit it.
    let withheld: &[&str] = if mcpolicy_store_postgres::StoreSpec::looks_like_postgres(&store_spec)
        && std::env::var_os("PGPASSWORD").is_some()
    {
        log.line(format_args!(
            "PGPASSWORD is withheld from the server: it is the decision store's password"
        ));
        &["PGPASSWORD"]
    } else {
        &[]
    };
    let outcome = proxy::run(&args.command, withheld, move |to_server| {
        Session::new(engine, server_id, to_server, stdout, log, audit)
    });
    match outcome {
        Ok(ended) => ExitCode::from(ended.exit_code()),
        Err(error) => fail(error),
    }
}
