//! `mcpc eval POLICY --server ID --request FILE|- [--store PATH] [--now RFC3339]`
//!
//! Decides one request the way an embedding client would and prints what
//! would be sent: the error frame for a denial, the (possibly narrowed)
//! request for an allow or a trim, the JSON-RPC error frame for a request
//! the runtime refuses (as `mcpc identity` does). A summary goes to stderr.
//! Exit codes: 0 allow, trim or consent pending; 1 deny or invalid request;
//! 2 usage, I/O or store failure.

use std::process::ExitCode;
use std::sync::Arc;

use clap::ValueEnum;
use mcpolicy_runtime::clock::{Clock, FixedClock, SystemClock, parse_rfc3339};
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision, Denial};
use mcpolicy_runtime::store::{DecisionStore, MemoryStore, SqliteStore};
use mcpolicy_runtime::{Engine, jsonrpc};
use serde_json::{Value, json};

use super::identity::{read_request, refuse};
use super::policy::{LoadFailure, load_policy};
use super::{ColorChoice, emit, emit_line, fail};

/// How to answer a consent prompt, since `eval` cannot ask anyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConsentAnswer {
    /// Report that consent is needed and stop.
    Pending,
    /// Answer as if the user approved.
    Approve,
    /// Answer as if the user refused.
    Deny,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The policy (`.mcpolicy`) or a compiled table (`.json`).
    #[arg(value_name = "POLICY")]
    policy: String,
    /// The server id the request comes from.
    #[arg(long, value_name = "ID")]
    server: String,
    /// A JSON-RPC `sampling/createMessage` request or its params object; `-` reads standard input.
    /// A refused request prints its JSON-RPC error frame on stdout (as `mcpc identity` does) and exits 1.
    #[arg(long, value_name = "FILE")]
    request: String,
    /// A SQLite decision store to read and update (default: a fresh in-memory store).
    #[arg(long, value_name = "PATH")]
    store: Option<String>,
    /// Decide as of this instant (RFC 3339, e.g. 2026-03-10T12:00:00Z) instead of now.
    #[arg(long, value_name = "RFC3339")]
    now: Option<String>,
    /// The answer to a consent prompt.
    #[arg(long, value_enum, default_value_t = ConsentAnswer::Pending)]
    consent: ConsentAnswer,
    /// The client declared the `sampling.context` capability (matters under MCP 2026-07-28).
    #[arg(long)]
    sampling_context: bool,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

pub fn run(args: Args) -> ExitCode {
    let policy = match load_policy(&args.policy, args.color) {
        Ok(policy) => policy,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => return ExitCode::from(1),
    };
    let clock: Arc<dyn Clock> = match &args.now {
        Some(text) => match parse_rfc3339(text) {
            Some(ms) => Arc::new(FixedClock(ms)),
            None => {
                return fail(format!(
                    "--now `{text}` is not an RFC 3339 time like 2026-03-10T12:00:00Z"
                ));
            }
        },
        None => Arc::new(SystemClock),
    };
    let store: Arc<dyn DecisionStore> = match &args.store {
        Some(path) => match SqliteStore::open(path) {
            Ok(store) => Arc::new(store),
            // The store's error names the path already.
            Err(error) => return fail(error),
        },
        None => Arc::new(MemoryStore::new()),
    };
    let bytes = match read_request(&args.request) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(rejection)) => return refuse(&rejection),
        Err(error) => return fail(format!("cannot read {}: {error}", args.request)),
    };
    let engine = Engine::new(policy, store, clock);
    let ctx = ClientContext::with_sampling_context(args.sampling_context);
    let (request, decision) = match engine.decide(&args.server, &bytes, &ctx) {
        Answer::Invalid(rejection) => return refuse(&rejection),
        Answer::Failed { reply, error } => {
            sayln!("mcpc: error: {error}");
            emit_line(&reply);
            return ExitCode::from(2);
        }
        Answer::Decided { request, decision } => (request, decision),
    };
    let grant = match decision {
        Decision::Deny(denial) => return denied(&denial, request.id.as_ref()),
        Decision::Allow(grant) | Decision::Trim(grant) => grant,
        Decision::NeedsConsent(pending) => match args.consent {
            ConsentAnswer::Pending => {
                let identity = pending.identity();
                sayln!("consent required for {identity} (answer with --consent approve|deny)");
                emit(&format!(
                    "{}\n",
                    json!({ "consent": "required", "server": args.server, "identity": identity })
                ));
                return ExitCode::SUCCESS;
            }
            ConsentAnswer::Approve => match pending.approve() {
                Ok(grant) => grant,
                Err(error) => return fail(error),
            },
            ConsentAnswer::Deny => match pending.refuse() {
                Ok(denial) => return denied(&denial, request.id.as_ref()),
                Err(error) => return fail(error),
            },
        },
    };
    let params = grant.params(&request.params);
    let out = match &request.id {
        Some(id) => {
            json!({ "jsonrpc": "2.0", "id": id, "method": jsonrpc::SAMPLING_METHOD, "params": params })
        }
        None => Value::Object(params),
    };
    let outcome = if grant.lowered().is_empty() {
        "allow"
    } else {
        "trim"
    };
    let annotations = grant.annotations().to_meta();
    let deadline = grant
        .deadline_ms()
        .map_or(String::new(), |ms| format!(", deadline {ms} ms"));
    sayln!(
        "{outcome}{deadline}{}",
        if annotations.is_empty() {
            String::new()
        } else {
            format!(", result _meta {}", Value::Object(annotations))
        }
    );
    emit(&format!("{out}\n"));
    ExitCode::SUCCESS
}

/// A denial: the summary on stderr, the reply on stdout, exit code 1.
fn denied(denial: &Denial, id: Option<&Value>) -> ExitCode {
    sayln!(
        "deny {} ({}{})",
        denial.reason(),
        if denial.replayed() { "replayed, " } else { "" },
        if denial.retryable() {
            "retryable"
        } else {
            "not retryable"
        },
    );
    emit_line(&denial.reply(id));
    ExitCode::from(1)
}
