//! Running cases: each against a fresh in-memory store and its own clock,
//! through the same engine calls an embedding client makes (`decide_bytes`,
//! `resolve_consent`, `settle`, `report_deadline_miss`).
//!
//! Besides the observed result, every step records what the coverage report
//! needs: which effect of the effective block decided it (see
//! [`Effect`]) and which reasons it carried.

use std::sync::{Arc, Mutex};

use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{
    Answer, ClientContext, Decision, Denial, Engine, Grant, carries_tools,
};
use mcpolicy_runtime::frame::Annotations;
use mcpolicy_runtime::glob;
use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, LimitCheck, MemoryStore, Millis, Reservation,
    ServerStats, StoreError, StoredDecision,
};
use mcpolicy_runtime::table::{Consent, ContextScope, EffectiveBlock, ProtocolRevision, Table};
use serde_json::{Map, Value, json};

use super::spec::{Case, Expectation, Location, Step};

/// What a fresh decision exercised in its effective block. Coverage maps
/// each to the source statement that block inherited it from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    /// `sampling on` let the request through, or `sampling off` denied it.
    Sampling,
    /// `tools on` let a request with tools through, or `tools off` denied it.
    Tools,
    /// `max_messages` denied.
    MaxMessages,
    /// `max_input` denied.
    MaxInput,
    /// `max_context` trimmed `includeContext`.
    MaxContext,
    /// `max_tokens` clamped `maxTokens`.
    MaxTokens,
    /// `models` dropped model hints.
    Models,
    /// `rate` denied.
    Rate,
    /// The effective block's budget at this index denied.
    Budget(usize),
    /// A deadline miss was reported and denied under `deadline`.
    Deadline,
    /// `consent always|first` asked, or `consent never` granted unasked.
    Consent,
}

/// One effect in one table entry (`servers.len()` is the defaults fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hit {
    /// The table entry that governed the server.
    pub entry: usize,
    /// What it exercised.
    pub effect: Effect,
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
    /// Effects exercised by all steps.
    pub hits: Vec<Hit>,
    /// Reasons carried by all steps' outcomes.
    pub reasons: Vec<String>,
    /// Fresh denials whose statement could not be derived (should stay 0).
    pub unattributed: Vec<String>,
}

/// A memory store that remembers which admission check refused last, so a
/// rate or budget denial is traced to the exact budget that produced it
/// (two budgets may share a reason).
#[derive(Debug, Default)]
struct RecordingStore {
    inner: MemoryStore,
    refusal: Mutex<Option<(usize, String)>>,
}

impl RecordingStore {
    fn take_refusal(&self) -> Option<(usize, String)> {
        self.refusal.lock().ok().and_then(|mut r| r.take())
    }
}

impl DecisionStore for RecordingStore {
    fn replay(
        &self,
        key: &DecisionKey,
        digest: &str,
        now: Millis,
    ) -> Result<Option<StoredDecision>, StoreError> {
        self.inner.replay(key, digest, now)
    }
    fn admit(
        &self,
        server_id: &str,
        checks: &[LimitCheck],
        now: Millis,
    ) -> Result<Admission, StoreError> {
        let admission = self.inner.admit(server_id, checks, now)?;
        if let Admission::Refused { index, counter, .. } = &admission
            && let Ok(mut slot) = self.refusal.lock()
        {
            *slot = Some((*index, counter.clone()));
        }
        Ok(admission)
    }
    fn settle(
        &self,
        server_id: &str,
        reservation: Reservation,
        counter: &str,
        actual: u64,
    ) -> Result<(), StoreError> {
        self.inner.settle(server_id, reservation, counter, actual)
    }
    fn record(&self, key: &DecisionKey, decision: &StoredDecision) -> Result<(), StoreError> {
        self.inner.record(key, decision)
    }
    fn get(&self, key: &DecisionKey) -> Result<Option<StoredDecision>, StoreError> {
        self.inner.get(key)
    }
    fn purge_stale(&self, server_id: &str, digest: &str, now: Millis) -> Result<u64, StoreError> {
        self.inner.purge_stale(server_id, digest, now)
    }
    fn server_stats(&self, server_id: &str) -> Result<ServerStats, StoreError> {
        self.inner.server_stats(server_id)
    }
}

/// The table entry governing `server_id`, as the engine finds it: the first
/// block whose pattern matches, else the defaults (`servers.len()`).
pub fn entry_index(table: &Table, server_id: &str) -> usize {
    table
        .servers
        .iter()
        .position(|e| glob::matches(&e.pattern, server_id))
        .unwrap_or(table.servers.len())
}

fn block_of(table: &Table, entry: usize) -> &EffectiveBlock {
    table
        .servers
        .get(entry)
        .map_or(&table.fallback.block, |e| &e.block)
}

/// Runs one case against a fresh store.
pub fn run_case(table: &Table, case: &Case) -> CaseResult {
    let store = Arc::new(RecordingStore::default());
    let clock = Arc::new(ManualClock::new(case.step.now));
    let engine = Engine::new(table.clone(), store.clone(), clock.clone());
    let mut result = CaseResult {
        name: case.name.clone(),
        at: case.at.clone(),
        failures: Vec::new(),
        observed: Value::Null,
        hits: Vec::new(),
        reasons: Vec::new(),
        unattributed: Vec::new(),
    };
    for step in case.before.iter().chain(std::iter::once(&case.step)) {
        clock.set(step.now);
        let observed = run_step(&engine, &store, step, &case.at, &mut result);
        for expectation in &step.expect {
            check(&step.label, expectation, &observed, &mut result.failures);
        }
        result.observed = Value::Object(observed);
    }
    result.hits.sort_unstable();
    result.hits.dedup();
    result.reasons.sort_unstable();
    result.reasons.dedup();
    result
}

fn run_step(
    engine: &Engine,
    store: &RecordingStore,
    step: &Step,
    case_at: &Location,
    result: &mut CaseResult,
) -> Map<String, Value> {
    let mut effects = Vec::new();
    let entry = entry_index(engine.table(), &step.server);
    let observed = decide_step(engine, store, step, case_at, result, &mut effects);
    result
        .hits
        .extend(effects.into_iter().map(|effect| Hit { entry, effect }));
    observed
}

fn decide_step(
    engine: &Engine,
    store: &RecordingStore,
    step: &Step,
    case_at: &Location,
    result: &mut CaseResult,
    effects: &mut Vec<Effect>,
) -> Map<String, Value> {
    let table = engine.table();
    let ctx = ClientContext::with_sampling_context(step.sampling_context);
    let mut observed = Map::new();
    let problem = |result: &mut CaseResult, note: String| {
        result.failures.push(Failure {
            step: step.label.clone(),
            field: "run".to_owned(),
            expected: None,
            actual: None,
            at: case_at.clone(),
            note: Some(note),
            detail: None,
        });
    };
    store.take_refusal();
    let (request, decision) = match engine.decide_bytes(&step.server, &step.bytes, &ctx) {
        Answer::Invalid { frame, code } => {
            let frame: Value = serde_json::from_str(&frame).unwrap_or(Value::String(frame));
            observed.insert("outcome".into(), "invalid".into());
            observed.insert("code".into(), Value::from(code));
            if let Some(error) = frame.get("error") {
                for key in ["message", "data"] {
                    if let Some(v) = error.get(key) {
                        observed.insert(key.into(), v.clone());
                    }
                }
            }
            observed.insert("frame".into(), frame);
            if step.deadline_missed {
                problem(
                    result,
                    "`deadline_missed`: the request was invalid, so nothing was granted".into(),
                );
            }
            return observed;
        }
        Answer::Failed { frame, error } => {
            observed.insert("outcome".into(), "error".into());
            observed.insert("message".into(), error.to_string().into());
            observed.insert(
                "frame".into(),
                serde_json::from_str(&frame).unwrap_or(Value::String(frame)),
            );
            return observed;
        }
        Answer::Decided { request, decision } => (request, decision),
    };
    let entry = entry_index(table, &step.server);
    let block = block_of(table, entry);
    let mut hit = |effect: Effect| effects.push(effect);

    let replayed_denial = matches!(&decision, Decision::Deny(d) if d.replayed);
    let tools = carries_tools(&request.params);
    if !replayed_denial && block.sampling.enabled {
        hit(Effect::Sampling);
        if tools && block.tools.enabled {
            hit(Effect::Tools);
        }
    }

    // A fresh denial straight from `decide`: trace it to its statement.
    if let Decision::Deny(denial) = &decision
        && !denial.replayed
    {
        match attribute_denial(block, store.take_refusal(), &request.params, &denial.reason) {
            Some(effect) => hit(effect),
            None => result.unattributed.push(format!(
                "{}: `{}` for {}",
                step.label, denial.reason, step.server
            )),
        }
    }

    let mut consent_asked = false;
    let mut approved = false;
    let decision = match decision {
        Decision::NeedsConsent(pending) => {
            consent_asked = true;
            hit(Effect::Consent);
            match step.consent {
                None => {
                    let annotations = pending.annotations().clone();
                    trims_hits(
                        table,
                        block,
                        &request.params,
                        &annotations,
                        step.sampling_context,
                        &mut hit,
                    );
                    let mut params = request.params.clone();
                    pending.lowered().apply(&mut params);
                    observed.insert("outcome".into(), "consent".into());
                    observed.insert("consent_asked".into(), true.into());
                    observed.insert("meta".into(), Value::Object(annotations.to_meta()));
                    observed.insert("params".into(), Value::Object(params));
                    let reasons = trim_reasons(&annotations);
                    result.reasons.extend(reasons.iter().cloned());
                    observed.insert("reasons".into(), json!(reasons));
                    if step.deadline_missed {
                        problem(result, "`deadline_missed`: consent is pending (no `consent` answer), so nothing was granted".into());
                    }
                    return observed;
                }
                Some(answer) => {
                    approved = answer;
                    match engine.resolve_consent(pending, answer) {
                        Ok(decision) => decision,
                        Err(error) => {
                            problem(result, format!("resolving consent failed: {error}"));
                            observed.insert("outcome".into(), "error".into());
                            return observed;
                        }
                    }
                }
            }
        }
        other => other,
    };
    observed.insert("consent_asked".into(), consent_asked.into());

    match decision {
        Decision::Deny(denial) => {
            deny_fields(&denial, request.id.as_ref(), &mut observed);
            result.reasons.push(denial.reason.to_string());
            if step.deadline_missed {
                problem(
                    result,
                    format!(
                        "`deadline_missed`: the request was denied ({}), so nothing was granted",
                        denial.reason
                    ),
                );
            }
        }
        Decision::Allow(grant) | Decision::Trim(grant) => {
            if !consent_asked && block.consent == Consent::Never {
                hit(Effect::Consent);
            }
            trims_hits(
                table,
                block,
                &request.params,
                &grant.annotations,
                step.sampling_context,
                &mut hit,
            );
            grant_fields(&grant, &request.params, request.id.as_ref(), &mut observed);
            let reasons = trim_reasons(&grant.annotations);
            result.reasons.extend(reasons.iter().cloned());
            let consented = approved || (grant.replayed && block.consent != Consent::Never);
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
            if let Some(usage) = step.usage
                && let Err(error) = engine.settle(&grant.ticket, usage)
            {
                problem(result, format!("settling usage {usage} failed: {error}"));
            }
            if step.deadline_missed {
                match engine.report_deadline_miss(&grant.ticket) {
                    Ok(denial) => {
                        hit(Effect::Deadline);
                        observed.clear();
                        observed.insert("consent_asked".into(), consent_asked.into());
                        deny_fields(&denial, request.id.as_ref(), &mut observed);
                        result.reasons.push(denial.reason.to_string());
                    }
                    Err(error) => problem(
                        result,
                        format!("reporting the deadline miss failed: {error}"),
                    ),
                }
            }
        }
        Decision::NeedsConsent(_) => {
            // resolve_consent never asks again.
            problem(result, "consent was asked twice for one request".into());
        }
    }
    observed
}

/// Which statement a fresh denial from `decide` came from: the store names
/// the refusing admission check (rate first, then budgets in block order);
/// otherwise the engine's order of switches and input limits decides, and
/// the derived statement's reason must be the one the engine gave.
fn attribute_denial(
    block: &EffectiveBlock,
    refusal: Option<(usize, String)>,
    params: &Map<String, Value>,
    reason: &str,
) -> Option<Effect> {
    if let Some((index, counter)) = refusal {
        let has_rate = usize::from(block.rate.is_some());
        if counter == "rate" {
            return block
                .rate
                .as_ref()
                .filter(|r| r.reason == reason)
                .map(|_| Effect::Rate);
        }
        let budget = index.checked_sub(has_rate)?;
        return block
            .budgets
            .get(budget)
            .filter(|b| b.reason == reason)
            .map(|_| Effect::Budget(budget));
    }
    let (effect, expected) = if !block.sampling.enabled {
        (Effect::Sampling, block.sampling.reason.as_str())
    } else if !block.tools.enabled && carries_tools(params) {
        (Effect::Tools, block.tools.reason.as_str())
    } else if let Some(limit) = block.max_messages.as_ref().filter(|l| {
        let count = params
            .get("messages")
            .and_then(Value::as_array)
            .map_or(0, Vec::len) as u64;
        count > l.max
    }) {
        (Effect::MaxMessages, limit.reason.as_str())
    } else if let Some(limit) = &block.max_input {
        (Effect::MaxInput, limit.reason.as_str())
    } else {
        return None;
    };
    (expected == reason).then_some(effect)
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
    block: &EffectiveBlock,
    params: &Map<String, Value>,
    annotations: &Annotations,
    sampling_context: bool,
    hit: &mut impl FnMut(Effect),
) {
    let protocol_rule = table.protocol >= ProtocolRevision::V2026_07_28 && !sampling_context;
    if let Some(context) = &annotations.context {
        if !protocol_rule || context.applied == block.max_context {
            hit(Effect::MaxContext);
        }
    } else if block.max_context == ContextScope::AllServers
        && params.get("includeContext").and_then(Value::as_str) == Some("allServers")
    {
        hit(Effect::MaxContext);
    }
    if annotations.max_tokens.is_some() {
        hit(Effect::MaxTokens);
    }
    if annotations.model.is_some() {
        hit(Effect::Models);
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

fn deny_fields(denial: &Denial, id: Option<&Value>, observed: &mut Map<String, Value>) {
    let frame_text = denial.frame(id);
    let frame: Value = serde_json::from_str(&frame_text).unwrap_or(Value::String(frame_text));
    let data: Value = serde_json::from_str(&denial.data)
        .unwrap_or_else(|_| Value::String(denial.data.to_string()));
    observed.insert("outcome".into(), "deny".into());
    observed.insert("reason".into(), Value::from(&*denial.reason));
    observed.insert("reasons".into(), json!([&*denial.reason]));
    observed.insert("code".into(), Value::from(denial.code));
    observed.insert("message".into(), denial.message().into());
    observed.insert("retryable".into(), denial.retryable.into());
    observed.insert("replayed".into(), denial.replayed.into());
    observed.insert("represented".into(), Value::from(denial.represented));
    observed.insert("data".into(), data);
    observed.insert("frame".into(), frame);
}

fn grant_fields(
    grant: &Grant,
    original: &Map<String, Value>,
    id: Option<&Value>,
    observed: &mut Map<String, Value>,
) {
    let params = grant.params(original);
    let reasons = trim_reasons(&grant.annotations);
    observed.insert(
        "outcome".into(),
        if grant.annotations.is_empty() {
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
    observed.insert("replayed".into(), grant.replayed.into());
    if let Some(ms) = grant.deadline_ms {
        observed.insert("deadline_ms".into(), Value::from(ms));
    }
    observed.insert("meta".into(), Value::Object(grant.annotations.to_meta()));
    let frame = match id {
        Some(id) => {
            json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": params})
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
