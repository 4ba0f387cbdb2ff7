//! `mcpc eval POLICY --server ID --request FILE|- [--store SPEC] [--now RFC3339]`
//!
//! Decides one request the way an embedding client would and prints what
//! would be sent: the error frame for a denial, the (possibly narrowed)
//! request for an allow or a trim, the JSON-RPC error frame for a request
//! the runtime refuses (as `mcpc identity` does). A summary goes to stderr;
//! with `--explain`, also the decision's cause: the evaluation step, the
//! block and the statement that decided, with its source line.
//! With `--explain` it also prints the block matching and provenance of
//! `mcpc show` and each evaluation step 1–10 with its verdict and the
//! statement that decided it, all read from the decision's cause and the
//! block's statements (`--format json`: one JSON document on stdout instead).
//! Exit codes: 0 allow, trim or consent pending; 1 deny or invalid request;
//! 2 usage, I/O or store failure.

use std::process::ExitCode;
use std::sync::Arc;

use clap::ValueEnum;
use mcpolicy_compiler::explain;
use mcpolicy_runtime::clock::{Clock, FixedClock, SystemClock, parse_rfc3339};
use mcpolicy_runtime::engine::{
    self, Answer, Cause, ClientContext, Decision, Denial, Lowered, Step,
};
use mcpolicy_runtime::request::Rejection;
use mcpolicy_runtime::store::{DecisionStore, MemoryStore};
use mcpolicy_runtime::{Engine, jsonrpc};
use serde_json::{Map, Value, json};

use super::identity::read_request;
use super::policy::{LoadFailure, PolicySource, load_policy_with_source};
use super::show::{BlockReport, Format};
use super::store_open::{self, Create, Now};
use super::{ColorChoice, emit, emit_line, fail};

const EVAL_HELP: &str = "\
--explain prints on stderr, after the one-line summary: the block the server id
selected and why each block before it did not match; the effective block, each
statement with its value and origin (server block, defaults, built-in default)
and the block's digest; then each evaluation step 1-10 (docs/spec/evaluation.md)
with its verdict (passed, trimmed, denied, replayed, asked, refused, not reached)
and the statements it read, the deciding one marked `by`. Stdout is unchanged.

--format json prints one JSON object on stdout instead of the frame:
  outcome   allow, trim, deny, consent, invalid
  exit      the exit code
  output    what stdout carries without --format json (the frame, the request
            to forward, or the consent notice), as JSON
  explain   the `mcpc show --format json` object (server, block, passed_over,
            statements), and
    cause   {step, statement, budget, replayed} as the decision carries it
            (null for an invalid request); statement is the keyword, budget the
            index among the effective block's budgets
    steps   [{step, name, verdict, by, checked, note}] for steps 1-10; by and
            checked are statement objects as in `statements`
--format json without --explain prints the same object without `explain`.

Exit codes:
  0  allowed, trimmed, or consent pending (--consent pending)
  1  denied (the denial frame is printed), the request is invalid (its JSON-RPC
     error frame is printed), or the policy has errors (printed on stderr)
  2  usage or I/O error, or the decision store failed (the -32603 frame is printed)";

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
#[command(after_help = EVAL_HELP)]
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
    /// Also say why: the block matching, the effective block with each
    /// statement's origin, and every evaluation step with its verdict and
    /// the statement that decided it (lines when POLICY is source), on
    /// standard error.
    #[arg(long)]
    explain: bool,
    /// `json` prints one JSON document on stdout (the outcome, the exit code
    /// and the frame inside it, with `--explain` the explanation too)
    /// instead of the frame.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
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
        format: args.format,
        server: args.server.clone(),
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
        Some(spec) => match store_open::open(spec, Create::IfMissing, given(&args.now)) {
            Ok(store) => store,
            // The store's error names the path already.
            Err(error) => return fail(error),
        },
        None => Arc::new(MemoryStore::new()),
    };
    let bytes = match read_request(&args.request) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(rejection)) => return explainer.refused(&rejection),
        Err(error) => return fail(format!("cannot read {}: {error}", args.request)),
    };
    let engine = Engine::new(policy, store, clock);
    let ctx = ClientContext::with_sampling_context(args.sampling_context);
    let (request, decision) = match engine.decide(&args.server, &bytes, &ctx) {
        Answer::Invalid(rejection) => return explainer.refused(&rejection),
        Answer::Failed { reply, error } => {
            sayln!("mcpc: error: {error}");
            emit_line(&reply);
            return ExitCode::from(2);
        }
        Answer::Decided { request, decision } => (request, decision),
    };
    let (grant, ended) = match decision {
        Decision::Deny(denial) => {
            return denied(
                &denial,
                request.id.as_ref(),
                &explainer,
                Ended::Denied,
                None,
            );
        }
        Decision::Allow(grant) | Decision::Trim(grant) => (grant, Ended::Granted),
        Decision::NeedsConsent(pending) => match args.consent {
            ConsentAnswer::Pending => {
                let identity = pending.identity();
                sayln!("consent required for {identity} (answer with --consent approve|deny)");
                let out =
                    json!({ "consent": "required", "server": args.server, "identity": identity });
                return explainer.conclude(Concluded {
                    outcome: "consent",
                    cause: Some(pending.cause()),
                    ended: Ended::Pending,
                    lowered: Some(pending.lowered()),
                    output: out.to_string().into_bytes(),
                    code: 0,
                });
            }
            ConsentAnswer::Approve => match pending.approve() {
                Ok(grant) => (grant, Ended::Approved),
                Err(error) => return fail(error),
            },
            ConsentAnswer::Deny => {
                let lowered = pending.lowered().clone();
                match pending.refuse().recorded() {
                    Ok(denial) => {
                        return denied(
                            &denial,
                            request.id.as_ref(),
                            &explainer,
                            Ended::Refused,
                            Some(&lowered),
                        );
                    }
                    Err(error) => return fail(error),
                }
            }
        },
    };
    // The trims applied to the params in place, and the params moved into
    // the envelope, never copied (a request of a million hints is held once).
    let id = request.id.clone();
    let mut params = request.into_params();
    grant.lowered().apply(&mut params);
    let out = match &id {
        Some(id) => {
            let mut envelope = Map::new();
            envelope.insert("jsonrpc".to_owned(), Value::from("2.0"));
            envelope.insert("id".to_owned(), id.clone());
            envelope.insert("method".to_owned(), Value::from(jsonrpc::SAMPLING_METHOD));
            envelope.insert("params".to_owned(), Value::Object(params));
            Value::Object(envelope)
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
    explainer.conclude(Concluded {
        outcome,
        cause: Some(grant.cause()),
        ended,
        lowered: Some(grant.lowered()),
        output: out.to_string().into_bytes(),
        code: 0,
    })
}

/// A denial: the summary on stderr, the reply on stdout, exit code 1.
fn denied(
    denial: &Denial,
    id: Option<&Value>,
    explainer: &Explainer,
    ended: Ended,
    lowered: Option<&Lowered>,
) -> ExitCode {
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
    explainer.conclude(Concluded {
        outcome: "deny",
        cause: Some(&denial.cause()),
        ended,
        lowered,
        output: denial.reply(id),
        code: 1,
    })
}

/// How the request's evaluation ended, for the steps' verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Refused at step 1.
    Invalid,
    /// Denied at the cause's step (or answered from the store).
    Denied,
    /// Allowed or trimmed without asking.
    Granted,
    /// Waiting for the user at step 9.
    Pending,
    /// The user approved (`--consent approve`).
    Approved,
    /// The user refused (`--consent deny`).
    Refused,
}

/// What `eval` concluded: what it prints and why.
struct Concluded<'a> {
    outcome: &'static str,
    cause: Option<&'a Cause>,
    ended: Ended,
    /// The trims step 6 computed, when the decision carries them.
    lowered: Option<&'a Lowered>,
    /// What stdout carries (one line).
    output: Vec<u8>,
    code: u8,
}

/// What stdout carries without `--format json`, as JSON (a frame or a
/// request is JSON; anything else is kept as text).
fn output_json(output: &[u8]) -> Value {
    serde_json::from_slice::<Value>(output)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(output).into()))
}

/// `--explain`: says what the runtime's [`Cause`] names, in the policy's
/// words, with the block matching and provenance of `mcpc show`. Nothing
/// is re-derived here: the block, the statement and the step are the
/// engine's, each step's statements are the block's
/// (`engine::Statement::of_block`, `engine::Statement::step`), and their
/// origins are the compiler's merge.
struct Explainer {
    on: bool,
    format: Format,
    server: String,
    table: mcpolicy_runtime::table::Table,
    source: Option<PolicySource>,
}

/// One step of the explanation.
struct StepRow {
    step: Step,
    verdict: &'static str,
    /// The statements that decided it (rows of the report).
    by: Vec<usize>,
    /// The other statements it read that are set.
    checked: Vec<usize>,
    note: Option<&'static str>,
}

impl Explainer {
    fn report(&self, entry: Option<usize>) -> BlockReport {
        let selection = explain::select(
            self.table.servers.iter().map(|e| e.pattern.as_str()),
            &self.server,
        );
        BlockReport::new(&self.table, self.source.as_ref(), &selection, entry)
    }

    /// A refused request: its frame, exit code 1, and with `--explain` the
    /// block it would have gone to and step 1 refusing it.
    fn refused(&self, rejection: &Rejection) -> ExitCode {
        sayln!("invalid request ({})", rejection.code());
        self.conclude(Concluded {
            outcome: "invalid",
            cause: None,
            ended: Ended::Invalid,
            lowered: None,
            output: rejection.reply(),
            code: 1,
        })
    }

    fn conclude(&self, c: Concluded<'_>) -> ExitCode {
        if !self.on {
            match self.format {
                Format::Human => emit_line(&c.output),
                Format::Json => emit(&format!(
                    "{:#}\n",
                    json!({
                        "outcome": c.outcome,
                        "exit": c.code,
                        "output": output_json(&c.output),
                    })
                )),
            }
            return ExitCode::from(c.code);
        }
        // The cause names the block; without one (an invalid request) the
        // block the id selects is shown.
        let entry = match c.cause {
            Some(cause) => cause.block.entry,
            None => {
                explain::select(
                    self.table.servers.iter().map(|e| e.pattern.as_str()),
                    &self.server,
                )
                .matched
            }
        };
        let report = self.report(entry);
        let steps = self.steps(&report, &c);
        match self.format {
            Format::Human => {
                if let Some(cause) = c.cause {
                    sayln!("{}", self.summary(&report, cause));
                }
                let mut text = report.human();
                text.push_str("steps:\n");
                for row in &steps {
                    let line = format!(
                        "  {:>2} {:<13} {:<12}{}",
                        row.step.number(),
                        step_name(row.step),
                        row.verdict,
                        step_detail(&report, row),
                    );
                    text.push_str(line.trim_end());
                    text.push('\n');
                }
                super::emit_err(&text);
                emit_line(&c.output);
            }
            Format::Json => {
                let mut explained = report.json();
                explained["cause"] = c.cause.map_or(Value::Null, |cause| {
                    json!({
                        "step": cause.step.number(),
                        "statement": cause.statement.map(|s| s.name()),
                        "budget": match cause.statement {
                            Some(engine::Statement::Budget(i)) => Some(i),
                            _ => None,
                        },
                        "replayed": cause.replayed,
                    })
                });
                explained["steps"] = steps
                    .iter()
                    .map(|row| {
                        json!({
                            "step": row.step.number(),
                            "name": step_name(row.step),
                            "verdict": row.verdict,
                            "by": row.by.iter().map(|&i| report.row_json(&report.rows[i])).collect::<Vec<_>>(),
                            "checked": row.checked.iter().map(|&i| report.row_json(&report.rows[i])).collect::<Vec<_>>(),
                            "note": row.note,
                        })
                    })
                    .collect();
                let doc = json!({
                    "outcome": c.outcome,
                    "exit": c.code,
                    "output": output_json(&c.output),
                    "explain": explained,
                });
                emit(&format!("{doc:#}\n"));
            }
        }
        ExitCode::from(c.code)
    }

    /// The one-line summary: the deciding step, block and statement.
    fn summary(&self, report: &BlockReport, cause: &Cause) -> String {
        let block = match cause.block.entry {
            Some(_) => format!("server \"{}\"", cause.block.pattern),
            None => "defaults".to_owned(),
        };
        let statement = match cause.statement {
            None => "no statement stops it".to_owned(),
            Some(statement) => match report.row_of(statement) {
                Some(i) => report.describe_row(&report.rows[i]),
                None => format!("`{}`", statement.name()),
            },
        };
        let replay = if cause.step == Step::Replay {
            ", answered from the store (the statement recorded with the decision)"
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

    /// Steps 1–10 with their verdicts, from the cause and how it ended.
    fn steps(&self, report: &BlockReport, c: &Concluded<'_>) -> Vec<StepRow> {
        let entry = c.cause.and_then(|cause| cause.block.entry);
        let block = entry
            .and_then(|i| self.table.servers.get(i))
            .unwrap_or(&self.table.fallback)
            .block
            .clone();
        // The block's statements by the step that reads them.
        let of_step = |step: Step| -> Vec<usize> {
            engine::Statement::of_block(&block)
                .into_iter()
                .filter(|s| s.step() == step)
                .filter_map(|s| report.row_of(s))
                .filter(|&i| report.rows[i].value.is_some())
                .collect()
        };
        let decided = c
            .cause
            .and_then(|cause| cause.statement)
            .and_then(|s| report.row_of(s));
        let trimmed: Vec<usize> = c
            .lowered
            .map(|l| {
                let mut by = Vec::new();
                if l.include_context.is_some() {
                    by.push(engine::Statement::MaxContext);
                }
                if l.max_tokens.is_some() {
                    by.push(engine::Statement::MaxTokens);
                }
                if l.model_hints.is_some() {
                    by.push(engine::Statement::Models);
                }
                by.into_iter().filter_map(|s| report.row_of(s)).collect()
            })
            .unwrap_or_default();
        let all = [
            Step::Validation,
            Step::Identity,
            Step::Replay,
            Step::Switches,
            Step::InputLimits,
            Step::Trims,
            Step::Rate,
            Step::Budgets,
            Step::Consent,
            Step::Allow,
        ];
        let row = |step: Step, verdict: &'static str, by: Vec<usize>, note| {
            // A denying statement stops its step: only the statements
            // before it (in the engine's order) were read.
            let read = of_step(step);
            let checked = if verdict == "denied" {
                read.into_iter().take_while(|i| !by.contains(i)).collect()
            } else {
                read.into_iter().filter(|i| !by.contains(i)).collect()
            };
            StepRow {
                step,
                verdict,
                by,
                checked,
                note,
            }
        };
        let Some(cause) = c.cause else {
            return all
                .iter()
                .map(|&step| match step {
                    Step::Validation => StepRow {
                        step,
                        verdict: "refused",
                        by: vec![],
                        checked: vec![],
                        note: Some("not a valid sampling request"),
                    },
                    _ => StepRow {
                        step,
                        verdict: "not reached",
                        by: vec![],
                        checked: vec![],
                        note: None,
                    },
                })
                .collect();
        };
        let decided_by = || decided.into_iter().collect::<Vec<_>>();
        let replayed = cause.step == Step::Replay;
        all.iter()
            .map(|&step| match step {
                Step::Validation | Step::Identity => row(step, "passed", vec![], None),
                Step::Replay if replayed => row(
                    step,
                    "replayed",
                    decided_by(),
                    Some("a stored denial answers; nothing else is evaluated"),
                ),
                Step::Replay if cause.replayed => row(
                    step,
                    "replayed",
                    vec![],
                    Some("a stored approval: consent is not asked again"),
                ),
                Step::Replay => row(step, "passed", vec![], Some("no stored decision answers")),
                _ if replayed => row(step, "not reached", vec![], None),
                Step::Consent => match c.ended {
                    Ended::Pending => row(
                        step,
                        "asked",
                        decided_by(),
                        Some("waiting for the user: --consent pending"),
                    ),
                    Ended::Approved => row(
                        step,
                        "passed",
                        decided_by(),
                        Some("approved by the user: --consent approve"),
                    ),
                    Ended::Refused => row(
                        step,
                        "denied",
                        decided_by(),
                        Some("refused by the user: --consent deny"),
                    ),
                    Ended::Granted => row(step, "passed", vec![], None),
                    Ended::Denied | Ended::Invalid => row(step, "not reached", vec![], None),
                },
                Step::Allow => match c.ended {
                    Ended::Granted | Ended::Approved => row(step, "passed", vec![], None),
                    _ => row(step, "not reached", vec![], None),
                },
                // Steps 4–8.
                _ if c.ended == Ended::Denied && step == cause.step => {
                    row(step, "denied", decided_by(), None)
                }
                _ if c.ended == Ended::Denied && step > cause.step => {
                    row(step, "not reached", vec![], None)
                }
                Step::Trims if !trimmed.is_empty() => row(step, "trimmed", trimmed.clone(), None),
                Step::Trims if c.ended == Ended::Denied => row(
                    step,
                    "passed",
                    vec![],
                    Some("a denied request runs nothing, so no trim is reported"),
                ),
                _ => row(step, "passed", vec![], None),
            })
            .collect()
    }
}

/// A step's statements and note, as the human explanation shows them.
fn step_detail(report: &BlockReport, row: &StepRow) -> String {
    let list = |rows: &[usize]| {
        rows.iter()
            .map(|&i| report.describe_row(&report.rows[i]))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !row.by.is_empty() {
        parts.push(format!("by {}", list(&row.by)));
    }
    if !row.checked.is_empty() && row.verdict != "not reached" {
        parts.push(format!("checked {}", list(&row.checked)));
    }
    let mut text = parts.join("; ");
    if let Some(note) = row.note {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!("({note})"));
    }
    text
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

/// Whose clock `--now` makes the decision by.
fn given(now: &Option<String>) -> Now {
    match now {
        Some(_) => Now::Given,
        None => Now::System,
    }
}
