//! Running cases: each against a fresh in-memory store and its own clock,
//! through the calls an embedding client makes (`Engine::decide`,
//! `PendingConsent::approve`/`refuse`, `Grant::complete`,
//! `Grant::deadline_missed`).
//!
//! Besides the observed result, every step records what the coverage report
//! needs: which statement of which table entry each decision exercised, read
//! from the decision's [`Cause`] (block, statement, step), and which reasons
//! it carried.

use std::collections::HashSet;
use std::sync::Arc;

use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{
    Answer, Cause, ClientContext, Decision, Denial, Grant, Statement, Step,
};
use mcpolicy_runtime::frame::Annotations;
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::table::{Consent, ContextScope, EffectiveBlock, ProtocolRevision, Table};
use mcpolicy_runtime::{Engine, Policy, jsonrpc};
use serde_json::{Map, Value, json};

use super::spec::{Case, Expectation, Location, Step as CaseStep};

/// One statement exercised in one table entry (`servers.len()` is the
/// defaults fallback). Coverage maps it to the source statement that
/// entry's effective block inherited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hit {
    /// The table entry that governed the server (the cause's block).
    pub entry: usize,
    /// What it exercised.
    pub statement: Statement,
}

/// An expectation that did not hold.
#[derive(Debug, Clone)]
pub struct Failure {
    /// `case`, `before[2]`, `before[2] #3`.
    pub step: String,
    /// `outcome`, `data.retryAfter`, `meta.context.applied`, or `run` for a
    /// step that could not do what it asked (e.g. a deadline miss on a denial).
    pub field: String,
    /// What the file says (`None` for a `run` problem).
    pub expected: Option<Value>,
    /// What happened (`None`: the result has no such field).
    pub actual: Option<Value>,
    /// Where the expectation (or the case) was written.
    pub at: Location,
    /// Prose for `run` problems.
    pub note: Option<String>,
    /// For a wrong `outcome`: the message the step did get, if any.
    pub detail: Option<String>,
}

/// A case's result.
#[derive(Debug)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// Where it starts.
    pub at: Location,
    /// Every failed expectation of every step.
    pub failures: Vec<Failure>,
    /// The last step's observed result (for reports).
    pub observed: Value,
    /// Statements exercised by all steps, each once.
    pub hits: Vec<Hit>,
    /// Reasons carried by all steps' outcomes.
    pub reasons: Vec<String>,
    /// Fresh decisions whose cause names no statement where one must (should stay 0).
    pub unattributed: Vec<String>,
}

/// The table entry a cause names (`servers.len()` for the fallback).
fn entry_of(table: &Table, cause: &Cause) -> usize {
    cause.block.entry.unwrap_or(table.servers.len())
}

fn block_of(table: &Table, entry: usize) -> &EffectiveBlock {
    table
        .servers
        .get(entry)
        .map_or(&table.fallback.block, |e| &e.block)
}

/// Runs one case against a fresh store.
pub fn run_case(policy: &Policy, case: &Case) -> CaseResult {
    let clock = Arc::new(ManualClock::new(case.step.now));
    let engine = Engine::new(policy.clone(), Arc::new(MemoryStore::new()), clock.clone());
    let mut result = CaseResult {
        name: case.name.clone(),
        at: case.at.clone(),
        failures: Vec::new(),
        observed: Value::Null,
        hits: Vec::new(),
        reasons: Vec::new(),
        unattributed: Vec::new(),
    };
    let mut hits = HashSet::new();
    for step in case.before.iter().chain(std::iter::once(&case.step)) {
        clock.set(step.now);
        let mut exercised = Exercised {
            table: policy.table(),
            hits: &mut hits,
        };
        let observed = decide_step(&engine, step, &case.at, &mut result, &mut exercised);
        for expectation in &step.expect {
            check(&step.label, expectation, &observed, &mut result.failures);
        }
        result.observed = Value::Object(observed);
    }
    result.hits = hits.into_iter().collect();
    result.reasons.sort_unstable();
    result.reasons.dedup();
    result
}

/// What a case's decisions exercised, read from their causes. Every
/// decision has one deciding statement; a decision that got past a step
/// also exercised the statements of that step which let it through.
struct Exercised<'a> {
    table: &'a Table,
    hits: &'a mut HashSet<Hit>,
}

impl Exercised<'_> {
    fn hit(&mut self, entry: usize, statement: Statement) {
        self.hits.insert(Hit { entry, statement });
    }

    /// A decision as it came from `decide` (before any consent answer).
    /// A replayed denial exercises no statement: the decision it repeats did.
    /// Returns the entry the decision was taken in.
    fn decided(&mut self, cause: &Cause) -> Option<usize> {
        if cause.step == Step::Replay {
            return None;
        }
        let entry = entry_of(self.table, cause);
        let block = block_of(self.table, entry);
        // Step 4 let the request through: `sampling on` took part (it is
        // evaluated before `tools`), and `tools on` when the request got
        // past both switches. `sampling off` and `tools off` are credited
        // only when they deny: the cause names them.
        let past_switches = cause.step > Step::Switches;
        if block.sampling.enabled && (past_switches || cause.statement == Some(Statement::Tools)) {
            self.hit(entry, Statement::Sampling);
        }
        if block.tools.enabled && past_switches {
            self.hit(entry, Statement::Tools);
        }
        match cause.statement {
            // The trims are credited from the grant's annotations
            // ([`trims_hits`]): a request may be narrowed by several, and
            // the cause names the first only.
            Some(Statement::MaxContext | Statement::MaxTokens | Statement::Models) | None => {}
            Some(statement) => self.hit(entry, statement),
        }
        Some(entry)
    }
}

fn decide_step(
    engine: &Engine,
    step: &CaseStep,
    case_at: &Location,
    result: &mut CaseResult,
    exercised: &mut Exercised<'_>,
) -> Map<String, Value> {
    let table = exercised.table;
    let ctx = ClientContext::with_sampling_context(step.sampling_context);
    let mut observed = Map::new();
    let problem = |result: &mut CaseResult, note: String| {
        result.failures.push(run_failure(step, case_at, note));
    };
    let (request, decision) = match engine.decide(&step.server, &step.bytes(), &ctx) {
        Answer::Invalid(rejection) => {
            observed.insert("outcome".into(), "invalid".into());
            observed.insert("code".into(), Value::from(rejection.code()));
            // A validation error carries no `data`.
            observed.insert("message".into(), rejection.error.to_string().into());
            observed.insert("frame".into(), frame_value(&rejection.reply()));
            if step.deadline_missed {
                problem(
                    result,
                    "`deadline_missed`: the request was invalid, so nothing was granted".into(),
                );
            }
            return observed;
        }
        Answer::Failed { reply, error } => {
            observed.insert("outcome".into(), "error".into());
            observed.insert("message".into(), error.to_string().into());
            observed.insert("frame".into(), frame_value(&reply));
            return observed;
        }
        Answer::Decided { request, decision } => (request, decision),
    };
    let cause = decision.cause();
    let fresh_entry = exercised.decided(&cause);
    if fresh_entry.is_some() && cause.statement.is_none() && matches!(&decision, Decision::Deny(_))
    {
        result.unattributed.push(format!(
            "{}: a denial for {} names no statement",
            step.label, step.server
        ));
    }
    let entry = entry_of(table, &cause);
    let block = block_of(table, entry);

    let mut consent_asked = false;
    let mut approved = false;
    let grant = match decision {
        Decision::Deny(denial) => {
            denied(
                &denial,
                false,
                step,
                case_at,
                request.id.as_ref(),
                result,
                &mut observed,
            );
            return observed;
        }
        Decision::Allow(grant) | Decision::Trim(grant) => grant,
        Decision::NeedsConsent(pending) => {
            consent_asked = true;
            match step.consent {
                None => {
                    let annotations = pending.annotations().clone();
                    trims_hits(
                        table,
                        entry,
                        request.params(),
                        &annotations,
                        step.sampling_context,
                        exercised,
                    );
                    observed.insert("outcome".into(), "consent".into());
                    observed.insert("consent_asked".into(), true.into());
                    observed.insert("meta".into(), Value::Object(annotations.to_meta()));
                    observed.insert(
                        "params".into(),
                        Value::Object(pending.params(request.params())),
                    );
                    let reasons = trim_reasons(&annotations);
                    result.reasons.extend(reasons.iter().cloned());
                    observed.insert("reasons".into(), json!(reasons));
                    if step.deadline_missed {
                        problem(result, "`deadline_missed`: consent is pending (no `consent` answer), so nothing was granted".into());
                    }
                    // Dropped unanswered: its reservation stays counted.
                    drop(pending);
                    return observed;
                }
                Some(answer) => {
                    // `Ok(grant)` for an approval, `Err(denial)` for a refusal.
                    let resolved = if answer {
                        pending.approve().map(Ok)
                    } else {
                        pending.refuse().recorded().map(Err)
                    };
                    match resolved {
                        Ok(Ok(grant)) => {
                            approved = true;
                            grant
                        }
                        Ok(Err(denial)) => {
                            denied(
                                &denial,
                                true,
                                step,
                                case_at,
                                request.id.as_ref(),
                                result,
                                &mut observed,
                            );
                            return observed;
                        }
                        Err(error) => {
                            problem(result, format!("resolving consent failed: {error}"));
                            observed.insert("outcome".into(), "error".into());
                            return observed;
                        }
                    }
                }
            }
        }
    };
    observed.insert("consent_asked".into(), consent_asked.into());

    // Step 9 let the request through unasked: `consent never` took part.
    if !consent_asked && block.consent == Consent::Never {
        exercised.hit(entry, Statement::Consent);
    }
    trims_hits(
        table,
        entry,
        request.params(),
        grant.annotations(),
        step.sampling_context,
        exercised,
    );
    grant_fields(&grant, request.params(), request.id.as_ref(), &mut observed);
    let reasons = trim_reasons(grant.annotations());
    result.reasons.extend(reasons.iter().cloned());
    let consented = approved || (grant.replayed() && block.consent != Consent::Never);
    if consented {
        result
            .reasons
            .push(mcpolicy_runtime::table::builtin::USER_APPROVED.to_owned());
        if reasons.is_empty() {
            observed.insert(
                "reason".into(),
                mcpolicy_runtime::table::builtin::USER_APPROVED.into(),
            );
        }
    }
    if step.deadline_missed {
        // The miss is reported instead of a completion: the usage of a
        // completion that never came is not settled.
        if let Some(usage) = step.usage {
            problem(
                result,
                format!(
                    "`usage = {usage}` with `deadline_missed`: a missed deadline settles nothing"
                ),
            );
        }
        match grant.deadline_missed() {
            Ok(denial) => {
                exercised.decided(&denial.cause());
                observed.clear();
                observed.insert("consent_asked".into(), consent_asked.into());
                deny_fields(&denial, request.id.as_ref(), &mut observed);
                result.reasons.push(denial.reason().to_owned());
            }
            Err(error) => problem(
                result,
                format!("reporting the deadline miss failed: {error}"),
            ),
        }
    } else if let Some(usage) = step.usage
        && let Err(error) = grant.complete(usage)
    {
        problem(result, format!("settling usage {usage} failed: {error}"));
    }
    observed
}

/// A failure of the run itself (not of an expected field) at `step`.
fn run_failure(step: &CaseStep, case_at: &Location, note: String) -> Failure {
    Failure {
        step: step.label.clone(),
        field: "run".to_owned(),
        expected: None,
        actual: None,
        at: case_at.clone(),
        note: Some(note),
        detail: None,
    }
}

/// A denial from `decide` (`consent_asked` false) or from the user's
/// refusal (true): whether consent was asked, its fields, its reason, and
/// a `deadline_missed` that cannot apply.
fn denied(
    denial: &Denial,
    consent_asked: bool,
    step: &CaseStep,
    case_at: &Location,
    id: Option<&Value>,
    result: &mut CaseResult,
    observed: &mut Map<String, Value>,
) {
    observed.insert("consent_asked".into(), consent_asked.into());
    deny_fields(denial, id, observed);
    result.reasons.push(denial.reason().to_owned());
    if step.deadline_missed {
        let note = format!(
            "`deadline_missed`: the request was denied ({}), so nothing was granted",
            denial.reason()
        );
        result.failures.push(run_failure(step, case_at, note));
    }
}

/// Trims the grant carries, traced to `max_context`, `max_tokens`, `models`.
/// Under 2026-07-28 a client without `sampling.context` has its scope
/// lowered to `none` by the protocol rule, not by the statement: the
/// statement is credited only when its own scope is the one applied.
/// `max_context allServers` never trims (an unknown scope is refused as
/// invalid params before any trim), so it is credited when it lets a
/// request for `allServers` through untouched.
fn trims_hits(
    table: &Table,
    entry: usize,
    params: &Map<String, Value>,
    annotations: &Annotations,
    sampling_context: bool,
    exercised: &mut Exercised<'_>,
) {
    let block = block_of(table, entry);
    let protocol_rule = table.protocol >= ProtocolRevision::V2026_07_28 && !sampling_context;
    if let Some(context) = &annotations.context {
        if !protocol_rule || context.applied == block.max_context {
            exercised.hit(entry, Statement::MaxContext);
        }
    } else if block.max_context == ContextScope::AllServers
        && params.get("includeContext").and_then(Value::as_str) == Some("allServers")
    {
        exercised.hit(entry, Statement::MaxContext);
    }
    if annotations.max_tokens.is_some() {
        exercised.hit(entry, Statement::MaxTokens);
    }
    if annotations.model.is_some() {
        exercised.hit(entry, Statement::Models);
    }
}

fn trim_reasons(annotations: &Annotations) -> Vec<String> {
    let meta = annotations.to_meta();
    ["context", "maxTokens", "model"]
        .iter()
        .filter_map(|k| meta.get(*k))
        .filter_map(|note| note.get("reason").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// The reply bytes as JSON, for `frame` expectations: a test file states
/// what the far side receives, so this is the one place the bytes are read
/// back (every other field comes from the runtime's typed values).
fn frame_value(reply: &[u8]) -> Value {
    serde_json::from_slice(reply)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(reply).into_owned()))
}

fn deny_fields(denial: &Denial, id: Option<&Value>, observed: &mut Map<String, Value>) {
    observed.insert("outcome".into(), "deny".into());
    observed.insert("reason".into(), Value::from(denial.reason()));
    observed.insert("reasons".into(), json!([denial.reason()]));
    observed.insert("code".into(), Value::from(denial.code()));
    observed.insert("message".into(), denial.message().into());
    observed.insert("retryable".into(), denial.retryable().into());
    observed.insert("replayed".into(), denial.replayed().into());
    observed.insert("represented".into(), Value::from(denial.represented()));
    observed.insert("data".into(), denial.data().to_value());
    observed.insert("frame".into(), frame_value(&denial.reply(id)));
}

fn grant_fields(
    grant: &Grant,
    original: &Map<String, Value>,
    id: Option<&Value>,
    observed: &mut Map<String, Value>,
) {
    let params = grant.params(original);
    let reasons = trim_reasons(grant.annotations());
    observed.insert(
        "outcome".into(),
        if grant.annotations().is_empty() {
            "allow"
        } else {
            "trim"
        }
        .into(),
    );
    if reasons.len() == 1 {
        observed.insert("reason".into(), reasons[0].clone().into());
    }
    observed.insert("reasons".into(), json!(reasons));
    observed.insert("replayed".into(), grant.replayed().into());
    if let Some(ms) = grant.deadline_ms() {
        observed.insert("deadline_ms".into(), Value::from(ms));
    }
    observed.insert("meta".into(), Value::Object(grant.annotations().to_meta()));
    let frame = match id {
        Some(id) => {
            json!({"jsonrpc": "2.0", "id": id, "method": jsonrpc::SAMPLING_METHOD, "params": params})
        }
        None => Value::Object(params.clone()),
    };
    observed.insert("params".into(), Value::Object(params));
    observed.insert("frame".into(), frame);
}

// ------------------------------------------------------------ comparison

fn check(
    step: &str,
    expectation: &Expectation,
    observed: &Map<String, Value>,
    out: &mut Vec<Failure>,
) {
    let mut mismatches = Vec::new();
    compare(
        &expectation.field,
        &expectation.value,
        observed.get(&expectation.field),
        &mut mismatches,
    );
    let detail = observed
        .get("message")
        .and_then(Value::as_str)
        .filter(|_| expectation.field == "outcome")
        .map(str::to_owned);
    out.extend(
        mismatches
            .into_iter()
            .map(|(field, expected, actual)| Failure {
                step: step.to_owned(),
                field,
                expected: Some(expected),
                actual,
                at: expectation.at.clone(),
                note: None,
                detail: detail.clone(),
            }),
    );
}

/// Objects in the expectation match as subsets (only the keys written are
/// compared); everything else must be equal.
fn compare(
    path: &str,
    expected: &Value,
    actual: Option<&Value>,
    out: &mut Vec<(String, Value, Option<Value>)>,
) {
    match (expected, actual) {
        (Value::Object(e), Some(Value::Object(a))) => {
            for (key, value) in e {
                compare(&format!("{path}.{key}"), value, a.get(key), out);
            }
        }
        (e, Some(a)) if json_eq(e, a) => {}
        (e, a) => out.push((path.to_owned(), e.clone(), a.cloned())),
    }
}

/// JSON equality where `60` and `60.0` agree.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}
