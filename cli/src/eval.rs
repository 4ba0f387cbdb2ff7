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
use mcpolicy_runtime::calendar;
use mcpolicy_runtime::clock::{Clock, FixedClock, SystemClock};
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision, Engine};
use mcpolicy_runtime::store::{DecisionStore, MemoryStore, SqliteStore};
use serde_json::{Value, json};

use super::identity::{read_request, refuse};
use super::policy::{LoadFailure, load_table};
use super::{ColorChoice, emit, fail};

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
    let table = match load_table(&args.policy, args.color) {
        Ok(table) => table,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => return ExitCode::from(1),
    };
    let clock: Arc<dyn Clock> = match &args.now {
        Some(text) => match calendar::parse_rfc3339(text) {
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
        Ok(Err(rejection)) => return refuse(&rejection.frame(), rejection.code()),
        Err(error) => return fail(format!("cannot read {}: {error}", args.request)),
    };
    let engine = Engine::new(table, store, clock);
    let ctx = ClientContext::with_sampling_context(args.sampling_context);
    let (request, mut decision) = match engine.decide_bytes(&args.server, &bytes, &ctx) {
        Answer::Invalid { frame, code } => return refuse(&frame, code),
        Answer::Failed { frame, error } => {
            sayln!("mcpc: error: {error}");
            emit(&format!("{frame}\n"));
            return ExitCode::from(2);
        }
        Answer::Decided { request, decision } => (request, decision),
    };
    if let Decision::NeedsConsent(pending) = decision {
        let identity = pending.identity().to_owned();
        match args.consent {
            ConsentAnswer::Pending => {
                sayln!("consent required for {identity} (answer with --consent approve|deny)");
                emit(&format!(
                    "{}\n",
                    json!({ "consent": "required", "server": args.server, "identity": identity })
                ));
                return ExitCode::SUCCESS;
            }
            answer => match engine.resolve_consent(pending, answer == ConsentAnswer::Approve) {
                Ok(resolved) => decision = resolved,
                Err(error) => return fail(error),
            },
        }
    }
    match decision {
        Decision::Deny(denial) => {
            sayln!(
                "deny {} ({}{})",
                denial.reason,
                if denial.replayed { "replayed, " } else { "" },
                if denial.retryable {
                    "retryable"
                } else {
                    "not retryable"
                },
            );
            emit(&format!("{}\n", denial.frame(request.id.as_ref())));
            ExitCode::from(1)
        }
        Decision::Allow(grant) | Decision::Trim(grant) => {
            let params = grant.params(&request.params);
            let out = match &request.id {
                Some(id) => {
                    json!({ "jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": params })
                }
                None => Value::Object(params),
            };
            let outcome = if grant.lowered.is_empty() {
                "allow"
            } else {
                "trim"
            };
            let annotations = grant.annotations.to_meta();
            let deadline = grant
                .deadline_ms
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
        Decision::NeedsConsent(_) => ExitCode::SUCCESS,
    }
}
