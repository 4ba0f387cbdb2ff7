//! The table loader (`Policy::from_json`, the trust boundary of every
//! embedder) against the compiler and against an independent reading of the
//! table (`docs/table-format.md`, "Verified on load"):
//!
//! - every table the compiler writes for a random policy loads;
//! - every mutation of such a table (a value replaced, a member dropped,
//!   added or written twice) is refused, or its first decisions are the
//!   ones a small reference evaluator reading the mutated JSON directly
//!   gives ([`reference`]). Digests are recomputed after the mutation (a
//!   mutated digest stays), so that the digest check alone cannot hide a
//!   value the loader should refuse.
//!
//! 256 cases by default; `PROPTEST_CASES=N` for a long run.

#[allow(dead_code)]
#[path = "differential/interp.rs"]
mod interp;
#[allow(dead_code)]
#[path = "differential/strategies.rs"]
mod strategies;

use std::sync::Arc;

use mcpolicy_compiler::codes::Severity;
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision};
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::table::{Table, entry_digest};
use mcpolicy_runtime::{Engine, Policy};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Value, json};

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// The table `mcpc compile` writes for `text`, or `None` when the checker
/// finds an error.
fn compiled(text: &str) -> Option<String> {
    let db = Database::default();
    let source = SourceText::new(&db, "random.mcpolicy".into(), text.to_owned());
    if db::diagnostics(&db, source)
        .iter()
        .any(|d| d.severity() == Severity::Error)
    {
        return None;
    }
    Some(db::lower_file(&db, source).clone()?.to_json())
}

// ---------------------------------------------------------------- mutations

fn atom() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(2),
        json!(7),
        json!(-1),
        json!(1.5),
        json!(9_007_199_254_740_993_u64),
        json!(9_007_199_254_740_992_u64),
        json!(-32700),
        json!(-32603),
        json!(-32010),
        json!(-32042),
        json!(-32150),
        json!(4_294_967_296_i64),
        json!(""),
        json!("*"),
        json!("x"),
        json!("messages"),
        json!("maxTokens"),
        json!("policy.rate_limit"),
        json!("policy.other"),
        json!("user.denied"),
        json!("acme.custom"),
        json!("nonamespace"),
        json!("none"),
        json!("forever"),
        json!("until_reset"),
        json!("always"),
        json!("never"),
        json!("allServers"),
        json!("2026-07-28"),
        json!("2025-06-18"),
        json!({"after_ms": 0}),
        json!({"after_ms": 1000}),
        json!({"rolling_ms": 0}),
        json!({"rolling_ms": 60000}),
        json!({"calendar": "day"}),
        json!([]),
        json!({}),
        json!(["messages"]),
        json!(["messages", "messages"]),
        json!(["claude-*"]),
        json!([""]),
    ])
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(Value),
    Remove,
    Add(&'static str, Value),
    /// The member written a second time, with this value, in the text.
    Duplicate(Value),
    /// A number of the table (a count, a window, a code) replaced: the
    /// index picks among the numbers only.
    Number(Value),
}

const NAMES: &[&str] = &[
    "identity",
    "protocol",
    "error_code",
    "pattern",
    "rate",
    "window_ms",
    "count",
    "rolling_ms",
    "limit",
    "code",
    "retryable",
    "ttl",
    "message",
    "max_tokens",
    "models",
    "extra",
    "acme.custom",
    "retry_alert",
];

fn mutation() -> impl Strategy<Value = (prop::sample::Index, Mutation)> {
    (
        any::<prop::sample::Index>(),
        prop_oneof![
            6 => atom().prop_map(Mutation::Replace),
            2 => Just(Mutation::Remove),
            2 => (prop::sample::select(NAMES), atom()).prop_map(|(n, v)| Mutation::Add(n, v)),
            2 => atom().prop_map(Mutation::Duplicate),
            4 => prop::sample::select(vec![
                json!(0), json!(0), json!(0), json!(1), json!(2),
                json!(9_007_199_254_740_993_u64), json!(-1), json!(-32700),
            ])
            .prop_map(Mutation::Number),
        ],
    )
}

#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn paths(value: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(at.clone());
    match value {
        Value::Object(members) => {
            for (key, child) in members {
                at.push(Step::Key(key.clone()));
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                at.push(Step::Index(index));
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'v>(value: &'v mut Value, path: &[Step]) -> Option<&'v mut Value> {
    path.iter().try_fold(value, |node, step| match step {
        Step::Key(key) => node.get_mut(key.as_str()),
        Step::Index(index) => node.get_mut(*index),
    })
}

/// The marker a duplicated member is written under, then renamed in the text.
const DUPLICATE: &str = "\u{1}duplicate";

/// The mutated table as text. Every digest is recomputed, unless a digest
/// was the mutation's target (then it stays as mutated).
fn mutated(table: &Value, (index, mutation): &(prop::sample::Index, Mutation)) -> String {
    let mut value = table.clone();
    let mut all = Vec::new();
    paths(&value, &mut Vec::new(), &mut all);
    if matches!(mutation, Mutation::Number(_)) {
        all.retain(|path| {
            let mut copy = table.clone();
            node_mut(&mut copy, path).is_some_and(|node| node.is_number())
        });
        if all.is_empty() {
            return serde_json::to_string_pretty(&value).expect("serialise");
        }
    }
    let path = index.get(&all).clone();
    let touches_digest = path
        .iter()
        .any(|step| matches!(step, Step::Key(k) if k == "digest"));
    let mut duplicate_of: Option<String> = None;
    match mutation {
        Mutation::Replace(atom) | Mutation::Number(atom) => {
            if let Some(node) = node_mut(&mut value, &path) {
                *node = atom.clone();
            }
        }
        Mutation::Remove => {
            if let Some((last, parent)) = path.split_last()
                && let Some(parent) = node_mut(&mut value, parent)
            {
                match (last, parent) {
                    (Step::Key(key), Value::Object(members)) => {
                        members.remove(key);
                    }
                    (Step::Index(index), Value::Array(items)) => {
                        items.remove(*index);
                    }
                    _ => {}
                }
            }
        }
        Mutation::Add(name, atom) => {
            if let Some(Value::Object(members)) = node_mut(&mut value, &path) {
                members.insert((*name).to_owned(), atom.clone());
            }
        }
        Mutation::Duplicate(atom) => {
            if let Some((Step::Key(key), parent)) = path.split_last()
                && let Some(Value::Object(members)) = node_mut(&mut value, parent)
            {
                members.insert(DUPLICATE.to_owned(), atom.clone());
                duplicate_of = Some(key.clone());
            }
        }
    }
    if !touches_digest {
        redigest(&mut value);
    }
    let mut text = serde_json::to_string_pretty(&value).expect("serialise");
    if let Some(key) = duplicate_of {
        let marker = serde_json::to_string(DUPLICATE).expect("serialise");
        let key = serde_json::to_string(&key).expect("serialise");
        text = text.replace(&marker, &key);
    }
    text
}

/// Every entry's digest recomputed from the (mutated) table, when the table
/// still has the format's shape.
fn redigest(value: &mut Value) {
    let Ok(table) = serde_json::from_value::<Table>(value.clone()) else {
        return;
    };
    let digest = |block| entry_digest(block, &table.reasons, &table.identity, table.protocol);
    if let Some(Value::Array(servers)) = value.get_mut("servers") {
        for (entry, server) in servers.iter_mut().zip(&table.servers) {
            entry["digest"] = json!(digest(&server.block));
        }
    }
    if value.get("fallback").is_some() {
        value["fallback"]["digest"] = json!(digest(&table.fallback.block));
    }
}

// ---------------------------------------------------------------- the reference

/// An independent reading of a table's JSON: the first decision for one
/// request on an empty store (`docs/spec/evaluation.md`, steps 4–9), read
/// from the JSON members directly, not through the runtime's types.
mod reference {
    use serde_json::{Map, Value};

    /// What the first decision is.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Outcome {
        Allow,
        Trim,
        Deny {
            reason: String,
            code: i64,
            retryable: bool,
        },
        Consent,
    }

    fn glob(pattern: &[char], id: &[char]) -> bool {
        match pattern.split_first() {
            None => id.is_empty(),
            Some(('*', rest)) => (0..=id.len()).any(|skip| glob(rest, &id[skip..])),
            Some(('?', rest)) => !id.is_empty() && glob(rest, &id[1..]),
            Some((c, rest)) => id.first() == Some(c) && glob(rest, &id[1..]),
        }
    }

    pub fn matches(pattern: &str, id: &str) -> bool {
        let pattern: Vec<char> = pattern.chars().collect();
        let id: Vec<char> = id.chars().collect();
        glob(&pattern, &id)
    }

    /// RFC 8785 length of the probes' values: ASCII strings without
    /// escapes, integers, arrays and objects with sorted keys.
    fn canonical_len(value: &Value) -> usize {
        match value {
            Value::String(s) => s.len() + 2,
            Value::Number(n) => n.to_string().len(),
            Value::Bool(b) => b.to_string().len(),
            Value::Null => 4,
            Value::Array(items) => {
                2 + items.iter().map(canonical_len).sum::<usize>() + items.len().saturating_sub(1)
            }
            Value::Object(members) => {
                2 + members
                    .iter()
                    .map(|(k, v)| k.len() + 3 + canonical_len(v))
                    .sum::<usize>()
                    + members.len().saturating_sub(1)
            }
        }
    }

    fn deny(table: &Value, reason: &str) -> Outcome {
        let spec = &table["reasons"][reason];
        Outcome::Deny {
            reason: reason.to_owned(),
            code: spec["code"].as_i64().unwrap_or(i64::MIN),
            retryable: spec["retryable"].as_bool().unwrap_or(false),
        }
    }

    fn scope_rank(scope: &str) -> u8 {
        match scope {
            "thisServer" => 1,
            "allServers" => 2,
            _ => 0,
        }
    }

    /// Whether the first decision admitted its request (and so spent).
    pub fn admitted(outcome: &Outcome) -> bool {
        !matches!(outcome, Outcome::Deny { .. })
    }

    /// The decision for `params` when `earlier` identical requests were
    /// admitted at the same instant (each spent 1 on the rate and request
    /// budgets and its reservation on token budgets).
    pub fn decide(
        table: &Value,
        server: &str,
        params: &Map<String, Value>,
        earlier: u64,
    ) -> Outcome {
        let entry = table["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["pattern"].as_str().is_some_and(|p| matches(p, server)))
            .unwrap_or(&table["fallback"]);
        let block = &entry["block"];
        let reason_of = |statement: &Value| statement["reason"].as_str().unwrap_or("").to_owned();
        // Step 4.
        if block["sampling"]["enabled"] != Value::Bool(true) {
            return deny(table, &reason_of(&block["sampling"]));
        }
        let offers_tools = match params.get("tools") {
            None | Some(Value::Null) => false,
            Some(Value::Array(items)) => !items.is_empty(),
            Some(_) => true,
        } || params.get("toolChoice").is_some_and(|c| !c.is_null());
        if block["tools"]["enabled"] != Value::Bool(true) && offers_tools {
            return deny(table, &reason_of(&block["tools"]));
        }
        // Step 5.
        let messages = params["messages"].as_array().map_or(0, Vec::len);
        if let Some(max) = block["max_messages"]["max"].as_u64()
            && messages as u64 > max
        {
            return deny(table, &reason_of(&block["max_messages"]));
        }
        let input = params.get("systemPrompt").map_or(0, canonical_len)
            + params.get("messages").map_or(0, canonical_len);
        if let Some(max) = block["max_input"]["max"].as_u64()
            && input as u64 > max
        {
            return deny(table, &reason_of(&block["max_input"]));
        }
        // Step 6: whether anything is trimmed, and the reservation.
        let requested = params
            .get("includeContext")
            .and_then(Value::as_str)
            .unwrap_or("none");
        let allowed = if table["protocol"] == "2026-07-28" {
            "none"
        } else {
            block["max_context"].as_str().unwrap_or("none")
        };
        let mut trimmed = scope_rank(requested) > scope_rank(allowed);
        let mut tokens = params["maxTokens"].as_u64().unwrap_or(0);
        if let Some(max) = block["max_tokens"].as_u64()
            && tokens > max
        {
            tokens = max;
            trimmed = true;
        }
        if let (Some(models), Some(Value::Array(hints))) = (
            block["models"].as_array(),
            params.get("modelPreferences").and_then(|p| p.get("hints")),
        ) {
            let allowed = |name: &str| {
                models
                    .iter()
                    .any(|m| m.as_str().is_some_and(|m| matches(m, name)))
            };
            if hints
                .iter()
                .any(|h| !h["name"].as_str().is_some_and(allowed))
            {
                trimmed = true;
            }
        }
        // Step 7: the rate; the earlier admissions are in its window (at
        // the same instant, in any window of at least 1 ms).
        if block["rate"].is_object() && earlier + 1 > block["rate"]["count"].as_u64().unwrap_or(0) {
            return deny(table, &reason_of(&block["rate"]));
        }
        // Step 8: budgets, in order; an amount needs room for at least 1.
        for budget in block["budgets"].as_array().into_iter().flatten() {
            let spend = if budget["metric"] == "tokens" {
                tokens
            } else {
                1
            };
            if earlier * spend + spend.max(1) > budget["limit"].as_u64().unwrap_or(0) {
                return deny(table, &reason_of(budget));
            }
        }
        // Step 9.
        match block["consent"].as_str() {
            Some("never") => {
                if trimmed {
                    Outcome::Trim
                } else {
                    Outcome::Allow
                }
            }
            _ => Outcome::Consent,
        }
    }
}

fn probes() -> Vec<Map<String, Value>> {
    let message = |text: &str| json!({"role": "user", "content": {"type": "text", "text": text}});
    let as_map = |v: Value| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    vec![
        as_map(json!({"messages": [message("hello")], "maxTokens": 100})),
        as_map(json!({
            "messages": [message("a"), message("b"), message("c"), message("d")],
            "maxTokens": 5000,
            "systemPrompt": "abcdefghij".repeat(40),
            "includeContext": "allServers",
            "modelPreferences": {"hints": [{"name": "gpt-4o"}]},
            "tools": [{"name": "search", "inputSchema": {"type": "object"}}],
            "toolChoice": {"mode": "auto"},
        })),
        as_map(json!({
            "messages": [message("x")],
            "maxTokens": 1,
            "includeContext": "thisServer",
            "modelPreferences": {"hints": [{"name": "claude-3-opus"}]},
        })),
    ]
}

/// Server ids that reach each entry: each pattern with its wildcards filled
/// in, and one no pattern names.
fn server_ids(table: &Value) -> Vec<String> {
    let mut ids: Vec<String> = table["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["pattern"].as_str())
        .map(|p| p.replace('*', "x").replace('?', "y"))
        .collect();
    ids.push("unmatched-server-id".to_owned());
    ids
}

fn outcome(decision: &Decision) -> reference::Outcome {
    match decision {
        Decision::Allow(_) => reference::Outcome::Allow,
        Decision::Trim(_) => reference::Outcome::Trim,
        Decision::Deny(denial) => reference::Outcome::Deny {
            reason: denial.reason().to_owned(),
            code: i64::from(denial.code()),
            retryable: denial.retryable(),
        },
        Decision::NeedsConsent(_) => reference::Outcome::Consent,
    }
}

/// The loaded policy's first decisions agree with the reference reading of `text`.
fn agrees(policy: &Policy, text: &str) -> Result<(), TestCaseError> {
    let table: Value = serde_json::from_str(text).expect("the loader read it");
    for server in server_ids(&table) {
        for params in probes() {
            let engine = Engine::new(
                policy.clone(),
                Arc::new(MemoryStore::new()),
                Arc::new(ManualClock::new(1_773_000_000_000)),
            );
            let request = json!({
                "jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": params,
            });
            // The request up to five times at one instant: each is compared
            // while the ones before were admitted (nothing was stored, so
            // it is decided afresh, against their spend).
            for earlier in 0..5 {
                let mut expected = reference::decide(&table, &server, &params, earlier);
                // Every earlier request was a prompt left unanswered: from
                // the cooldown's count on, the server is not prompted again
                // (`docs/spec/evaluation.md`, "Consent cooldown"; the code
                // is the table's, as for every policy reason).
                if expected == reference::Outcome::Consent
                    && earlier >= mcpolicy_runtime::engine::CONSENT_COOLDOWN_PROMPTS
                {
                    expected = reference::Outcome::Deny {
                        reason: "policy.consent_cooldown".to_owned(),
                        code: table["error_code"].as_i64().unwrap_or(-32_001),
                        retryable: true,
                    };
                }
                let got = match engine.decide(
                    &server,
                    request.to_string().as_bytes(),
                    &ClientContext::default(),
                ) {
                    Answer::Decided { decision, .. } => outcome(&decision),
                    other => return Err(TestCaseError::fail(format!("{server}: {other:?}"))),
                };
                prop_assert_eq!(
                    &got,
                    &expected,
                    "server {} request {:?}, {} earlier",
                    server,
                    params,
                    earlier
                );
                if !reference::admitted(&got) {
                    break;
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// Every table the compiler writes loads, and decides as the reference
    /// reads it.
    #[test]
    fn every_compiled_table_loads(text in strategies::policy()) {
        let Some(json) = compiled(&text) else { return Ok(()) };
        let policy = Policy::from_json(json.as_bytes());
        prop_assert!(policy.is_ok(), "{text}\n{json}\n{policy:?}");
        agrees(&policy.expect("loads"), &json)?;
    }

    /// Every mutation of a compiled table is refused, or decides as the
    /// reference reads the mutated table.
    #[test]
    fn every_mutation_is_refused_or_decides_as_read(
        text in strategies::policy(),
        mutation in mutation(),
    ) {
        let Some(json) = compiled(&text) else { return Ok(()) };
        let table: Value = serde_json::from_str(&json).expect("compiled JSON");
        let bytes = mutated(&table, &mutation);
        if let Ok(policy) = Policy::from_json(bytes.as_bytes()) {
            agrees(&policy, &bytes)?;
        }
    }
}

/// The mutations the loader accepted before it refused what the compiler
/// never writes, each now refused with its stable code.
#[test]
fn values_the_compiler_never_writes_are_refused() {
    let text = "mcpolicy 1\ndefaults {\n  rate 5 per 1m\n  budget 10 requests per 1h\n  consent never\n}\nserver \"a\" { sampling off }\n";
    let json = compiled(text).expect("compiles");
    let table: Value = serde_json::from_str(&json).expect("json");
    let load = |value: &Value, digests: bool| {
        let mut value = value.clone();
        if digests {
            redigest(&mut value);
        }
        Policy::from_json(value.to_string().as_bytes())
    };
    assert!(load(&table, false).is_ok());
    let refused = |value: Value, code: &str| match load(&value, true) {
        Err(mcpolicy_runtime::Error::Table(error)) => assert_eq!(error.code(), code, "{error}"),
        other => panic!("{value}: must be refused as {code}: {other:?}"),
    };
    let mut t = table.clone();
    t["fallback"]["block"]["rate"]["window_ms"] = json!(0);
    refused(t, "table.out_of_range");
    let mut t = table.clone();
    t["fallback"]["block"]["budgets"][0]["window"] = json!({"rolling_ms": 0});
    refused(t, "table.out_of_range");
    let mut t = table.clone();
    t["fallback"]["block"]["rate"]["count"] = json!(9_007_199_254_740_993_u64);
    refused(t, "table.out_of_range");
    for identity in [
        json!([]),
        json!(["messages", "messages"]),
        json!(["prompt"]),
    ] {
        let mut t = table.clone();
        t["identity"] = identity;
        refused(t, "table.invalid_identity");
    }
    for code in [-32700, -1, -32601, -32150, -32002] {
        let mut t = table.clone();
        t["reasons"]["policy.rate_limit"]["code"] = json!(code);
        refused(t, "table.forbidden_code");
    }
    let mut t = table.clone();
    t["servers"][0]["pattern"] = json!("");
    refused(t, "table.invalid_entry");
    // A reason written twice: refused, not resolved last-wins.
    let text = table.to_string().replacen(
        "\"reasons\":{",
        "\"reasons\":{\"policy.rate_limit\":{\"retryable\":false,\"ttl\":\"none\",\"code\":-32011,\"message\":\"m\"},",
        1,
    );
    match Policy::from_json(text.as_bytes()) {
        Err(mcpolicy_runtime::Error::Table(error)) => assert_eq!(error.code(), "table.json"),
        other => panic!("a duplicated reason must be refused: {other:?}"),
    }
    // The digest covers the identity and the protocol: editing either
    // without the digests is refused.
    let mut t = table.clone();
    t["identity"] = json!(["messages"]);
    assert!(matches!(
        load(&t, false),
        Err(mcpolicy_runtime::Error::Table(e)) if e.code() == "table.digest_mismatch"
    ));
    let mut t = table.clone();
    t["protocol"] = json!("2026-07-28");
    assert!(matches!(
        load(&t, false),
        Err(mcpolicy_runtime::Error::Table(e)) if e.code() == "table.digest_mismatch"
    ));
}
