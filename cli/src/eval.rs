//! `mcpc eval POLICY --server ID --request FILE|- [--store PATH] [--now RFC3339]`
//!
//! Decides one request the way an embedding client would and prints what
//! would be sent: the error frame for a denial, the (possibly narrowed)
//! request for an allow or a trim, the JSON-RPC error frame for a request
//! the runtime refuses (as `mcpc identity` does). A summary goes to stderr;
//! with `--explain`, also the decision's cause: the evaluation step, the
//! block and the statement that decided, with its source line.
//! Exit codes: 0 allow, trim or consent pending; 1 deny or invalid request;
//! 2 usage, I/O or store failure.

use std::process::ExitCode;
use std::sync::Arc;

use clap::ValueEnum;
use mcpolicy_runtime::clock::{Clock, FixedClock, SystemClock, parse_rfc3339};
use mcpolicy_runtime::engine::{Answer, Cause, ClientContext, Decision, Denial, Statement, Step};
use mcpolicy_runtime::store::{DecisionStore, MemoryStore};
use mcpolicy_runtime::{Engine, jsonrpc};
use serde_json::{Value, json};

use super::identity::{read_request, refuse};
use super::policy::{LoadFailure, PolicySource, load_policy_with_source};
use super::store_open::{self, Create};
use super::test::coverage::StatementMap;
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
    /// A decision store to read and update, as `mcpc proxy --store` takes it
    /// (a SQLite file path, or a postgres:// URL or host=… dbname=… string) (default: a
    /// fresh in-memory store).
    #[arg(long, value_name = "SPEC")]
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
    /// Also say why: the evaluation step, the block and the statement that
    /// decided (with its line when POLICY is source), on standard error.
    #[arg(long)]
    explain: bool,
    /// Colour for policy diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

pub fn run(args: Args) -> ExitCode {
    let (policy, source) = match load_policy_with_source(&args.policy, args.color) {
        Ok(loaded) => loaded,
        Err(LoadFailure::Usage(message)) => return fail(message),
        Err(LoadFailure::Findings) => return ExitCode::from(1),
    };
    let explainer = Explainer {
        on: args.explain,
        table: policy.table().clone(),
        source,
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
        Some(spec) => match store_open::open(spec, Create::IfMissing) {
            Ok(store) => store,
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
        Decision::Deny(denial) => return denied(&denial, request.id.as_ref(), &explainer),
        Decision::Allow(grant) | Decision::Trim(grant) => grant,
        Decision::NeedsConsent(pending) => match args.consent {
            ConsentAnswer::Pending => {
                let identity = pending.identity();
                sayln!("consent required for {identity} (answer with --consent approve|deny)");
                explainer.explain(pending.cause());
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
                Ok(denial) => return denied(&denial, request.id.as_ref(), &explainer),
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
    explainer.explain(grant.cause());
    emit(&format!("{out}\n"));
    ExitCode::SUCCESS
}

/// A denial: the summary on stderr, the reply on stdout, exit code 1.
fn denied(denial: &Denial, id: Option<&Value>, explainer: &Explainer) -> ExitCode {
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
    explainer.explain(&denial.cause());
    emit_line(&denial.reply(id));
    ExitCode::from(1)
}

/// `--explain`: says what the runtime's [`Cause`] names, in the policy's
/// words. Nothing is re-derived here: the block, the statement and the step
/// are the engine's; the source only gives the statement's line and text.
struct Explainer {
    on: bool,
    table: mcpolicy_runtime::table::Table,
    source: Option<PolicySource>,
}

impl Explainer {
    fn explain(&self, cause: &Cause) {
        if self.on {
            sayln!("{}", self.describe(cause));
        }
    }

    fn describe(&self, cause: &Cause) -> String {
        let entry = cause.block.entry.unwrap_or(self.table.servers.len());
        let block = match cause.block.entry {
            Some(_) => format!("server \"{}\"", cause.block.pattern),
            None => "defaults".to_owned(),
        };
        let map = self
            .source
            .as_ref()
            .and_then(|source| StatementMap::new(source, &self.table).ok());
        let statement = match cause.statement {
            None => "no statement stops it".to_owned(),
            Some(statement) => {
                let written = map.as_ref().and_then(|map| map.statement(entry, statement));
                match written {
                    Some(s) => format!("`{}` ({}, line {})", s.text, s.block, s.line),
                    None => match statement {
                        Statement::Budget(i) => format!("budget #{} (built in)", i + 1),
                        other => format!("`{}` (built in)", other.name()),
                    },
                }
            }
        };
        let replay = if cause.step == Step::Replay {
            ", answered from the store (the statement is derived from the stored reason)"
        } else if cause.replayed {
            ", on a stored approval"
        } else {
            ""
        };
        format!(
            "explain: step {} ({}) for {block}: {statement}{replay}",
            cause.step.number(),
            step_name(cause.step),
        )
    }
}

/// The evaluation step's name, as `docs/spec/evaluation.md` lists them.
fn step_name(step: Step) -> &'static str {
    match step {
        Step::Validation => "validation",
        Step::Identity => "identity",
        Step::Replay => "replay",
        Step::Switches => "switches",
        Step::InputLimits => "input limits",
        Step::Trims => "trims",
        Step::Rate => "rate",
        Step::Budgets => "budgets",
        Step::Consent => "consent",
        Step::Allow => "allow",
    }
}
