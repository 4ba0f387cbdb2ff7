//! mcpolicy against Cedar (`cedar-policy` 4) and Rego (`regorus`) on the
//! same rules and the same request bytes (README.md beside this crate).
//!
//! The rules: 1,000 MCP servers, each with sampling on or off and its own
//! `max_messages`, written once as data ([`Rule`]) and then in each
//! language: an mcpolicy policy compiled by `mcpolicy-compiler`, one Cedar
//! policy over `Server` entities that carry the rules as attributes, a Rego
//! module with the rules as `data`. The requests: 13 `sampling/createMessage`
//! frames of 0.5–2 KB, as raw bytes.
//!
//! What each engine does per decision, from the bytes:
//! - mcpolicy: `Engine::decide` (strict parse and validation of the whole
//!   frame, the request identity, the decision, a memory store);
//! - Cedar: `serde_json` parse, extract the message count, build the
//!   request, `is_authorized`;
//! - Rego: `serde_json` parse, extract, build the input, `eval_rule`.
//!
//! Before timing, every (server, request) pair is decided by all three and
//! the answers must agree. Then each round times every engine over all
//! 13,000 pairs in one shuffled order (the engines' order rotates per
//! round) and prints the per-round ratios; a last table gives medians.

use std::hint::black_box;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use cedar_policy::{
    Authorizer, Context, Entities, EntityId, EntityTypeName, EntityUid, PolicySet, Request,
    RestrictedExpression,
};
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_runtime::Policy;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision, Engine};
use mcpolicy_runtime::store::MemoryStore;
use serde_json::Value;
use sha2::{Digest, Sha256};

const SERVERS: usize = 1_000;
const REQUESTS: usize = 13;
const ROUNDS: usize = 7;

/// One server's rules, the single source of all three policies.
struct Rule {
    id: String,
    sampling: bool,
    max_messages: usize,
}

fn rules() -> Vec<Rule> {
    (0..SERVERS)
        .map(|i| Rule {
            id: format!("server-{i:04}"),
            sampling: i % 7 != 3,
            max_messages: 2 + i % 6,
        })
        .collect()
}

fn mcpolicy_source(rules: &[Rule]) -> String {
    let mut text = String::from(
        "mcpolicy 1\nprotocol 2025-11-25\n\ndefaults {\n  sampling on\n  consent never\n}\n",
    );
    for rule in rules {
        let sampling = if rule.sampling { "on" } else { "off" };
        text.push_str(&format!(
            "\nserver \"{}\" {{\n  sampling {sampling}\n  max_messages {}\n}}\n",
            rule.id, rule.max_messages
        ));
    }
    text
}

/// One Cedar policy over the servers' attributes (one `permit` per server
/// would be evaluated one by one: Cedar does not index policies by
/// principal, and 857 of them took ~1.7 ms per request).
const CEDAR_POLICY: &str = r#"permit(principal is Server, action == Action::"createMessage", resource)
  when { principal.sampling && context.messages <= principal.max_messages };
"#;

/// The rules as Cedar entities: a `Server` per rule with its attributes.
fn cedar_entities(rules: &[Rule]) -> Value {
    rules
        .iter()
        .map(|rule| {
            serde_json::json!({
                "uid": {"type": "Server", "id": rule.id},
                "attrs": {"sampling": rule.sampling, "max_messages": rule.max_messages},
                "parents": [],
            })
        })
        .collect()
}

const REGO_MODULE: &str = r#"package mcpolicy.peers

import rego.v1

default allow := false

allow if {
	server := data.servers[input.server]
	server.sampling
	input.messages <= server.max_messages
}
"#;

fn rego_data(rules: &[Rule]) -> Value {
    let servers: serde_json::Map<String, Value> = rules
        .iter()
        .map(|rule| {
            (
                rule.id.clone(),
                serde_json::json!({"sampling": rule.sampling, "max_messages": rule.max_messages}),
            )
        })
        .collect();
    serde_json::json!({ "servers": servers })
}

/// Request `k`: `1 + (5k mod 9)` messages of chat prose, some with a system
/// prompt and an `includeContext`; 0.5–2 KB.
fn request_bytes(k: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the",
        "release",
        "notes",
        "should",
        "mention",
        "every",
        "change",
        "since",
        "version",
        "1.2,",
        "including",
        "the",
        "café",
        "fix",
        "and",
        "its",
        "tests",
        "—",
        "please",
        "keep",
    ];
    let count = 1 + (5 * k) % 9;
    let words_per_message = 8 + (k * 37) % 40;
    let messages: Vec<Value> = (0..count)
        .map(|m| {
            let text: Vec<&str> = (0..words_per_message)
                .map(|w| WORDS[(w * 7 + m * 3 + k) % WORDS.len()])
                .collect();
            let role = if m % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": {"type": "text", "text": text.join(" ")}})
        })
        .collect();
    let mut params = serde_json::json!({"messages": messages, "maxTokens": 200 + 50 * k});
    if k.is_multiple_of(2) {
        params["systemPrompt"] = "You are a careful release-notes writer.".into();
    }
    if let Some(scope) = ["none", "thisServer", "allServers"].get(k % 4) {
        params["includeContext"] = (*scope).into();
    }
    let frame = serde_json::json!({
        "jsonrpc": "2.0", "id": k, "method": "sampling/createMessage", "params": params,
    });
    serde_json::to_vec(&frame).expect("a JSON value serialises")
}

fn mcpolicy_engine(policy: &Policy) -> Engine {
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 0, 0,
    )));
    Engine::new(policy.clone(), Arc::new(MemoryStore::new()), clock)
}

/// mcpolicy's answer: allowed, or, for a denial, whether it was replayed.
fn mcpolicy_decide(engine: &Engine, server: &str, bytes: &[u8], ctx: &ClientContext) -> bool {
    match engine.decide(server, bytes, ctx) {
        Answer::Decided {
            decision: Decision::Allow(_),
            ..
        } => true,
        Answer::Decided {
            decision: Decision::Deny(_),
            ..
        } => false,
        Answer::Decided { decision, .. } => panic!("unexpected decision {decision:?}"),
        Answer::Invalid(rejection) => panic!("request refused as invalid: {rejection:?}"),
        Answer::Failed { error, .. } => panic!("store failed: {error}"),
    }
}

struct Cedar {
    authorizer: Authorizer,
    policies: PolicySet,
    entities: Entities,
    server_type: EntityTypeName,
    action: EntityUid,
    resource: EntityUid,
}

impl Cedar {
    fn new(rules: &[Rule]) -> Cedar {
        Cedar {
            authorizer: Authorizer::new(),
            policies: CEDAR_POLICY.parse().expect("the Cedar policy parses"),
            entities: Entities::from_json_value(cedar_entities(rules), None)
                .expect("the Cedar entities load"),
            server_type: EntityTypeName::from_str("Server").expect("a type name"),
            action: r#"Action::"createMessage""#.parse().expect("an entity uid"),
            resource: r#"Model::"any""#.parse().expect("an entity uid"),
        }
    }

    fn request(&self, server: &str, messages: i64) -> Request {
        let principal =
            EntityUid::from_type_name_and_id(self.server_type.clone(), EntityId::new(server));
        let context = Context::from_pairs([(
            "messages".to_owned(),
            RestrictedExpression::new_long(messages),
        )])
        .expect("a context");
        Request::new(
            principal,
            self.action.clone(),
            self.resource.clone(),
            context,
            None,
        )
        .expect("a request")
    }

    fn is_authorized(&self, request: &Request) -> bool {
        self.authorizer
            .is_authorized(request, &self.policies, &self.entities)
            .decision()
            == cedar_policy::Decision::Allow
    }

    fn decide(&self, server: &str, bytes: &[u8]) -> bool {
        let request = self.request(server, message_count(bytes));
        self.is_authorized(&request)
    }
}

/// What the peers extract from the bytes: `params.messages`' length.
fn message_count(bytes: &[u8]) -> i64 {
    let frame: Value = serde_json::from_slice(bytes).expect("the request parses");
    frame["params"]["messages"]
        .as_array()
        .map_or(0, |messages| messages.len() as i64)
}

fn rego_engine(rules: &[Rule]) -> regorus::Engine {
    let mut engine = regorus::Engine::new();
    engine
        .add_policy("peers.rego".into(), REGO_MODULE.into())
        .expect("the Rego module parses");
    engine
        .add_data(regorus::Value::from(rego_data(rules)))
        .expect("the Rego data loads");
    engine
}

fn rego_decide(engine: &mut regorus::Engine, server: &str, bytes: &[u8]) -> bool {
    let messages = message_count(bytes);
    let mut input = regorus::Value::new_object();
    let fields = input.as_object_mut().expect("an object");
    fields.insert("server".into(), server.into());
    fields.insert("messages".into(), messages.into());
    engine.set_input(input);
    engine
        .eval_rule("data.mcpolicy.peers.allow".into())
        .expect("the rule evaluates")
        == regorus::Value::from(true)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// A fixed permutation of `0..n` (a linear congruential shuffle), so every
/// run visits the pairs in the same order without a random-number crate.
fn shuffled(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        order.swap(i, (state >> 33) as usize % (i + 1));
    }
    order
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Nanoseconds per call of `f` over `pairs`.
fn time_per_pair(pairs: &[(usize, usize)], mut f: impl FnMut(usize, usize) -> bool) -> f64 {
    let start = Instant::now();
    for &(server, request) in pairs {
        black_box(f(server, request));
    }
    start.elapsed().as_nanos() as f64 / pairs.len() as f64
}

fn main() {
    let rules = rules();
    let requests: Vec<Vec<u8>> = (0..REQUESTS).map(request_bytes).collect();
    let sizes: Vec<usize> = requests.iter().map(Vec::len).collect();
    println!(
        "{} servers, {} requests of {}–{} bytes; load average {} at the start",
        SERVERS,
        REQUESTS,
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0),
        load_average()
    );

    let database = Database::default();
    let source = SourceText::new(&database, "peers.mcpolicy".into(), mcpolicy_source(&rules));
    let table = db::lower_file(&database, source)
        .clone()
        .expect("the mcpolicy policy compiles");
    let policy = Policy::verify(table).expect("the compiled table verifies");
    let ctx = ClientContext::with_sampling_context(true);
    let cedar = Cedar::new(&rules);
    let mut rego = rego_engine(&rules);

    // Agreement on every pair, before any timing.
    let engine = mcpolicy_engine(&policy);
    let mut pairs = Vec::with_capacity(SERVERS * REQUESTS);
    let mut allowed = 0;
    for (s, rule) in rules.iter().enumerate() {
        for (r, bytes) in requests.iter().enumerate() {
            let ours = mcpolicy_decide(&engine, &rule.id, bytes, &ctx);
            let theirs = cedar.decide(&rule.id, bytes);
            let rego_says = rego_decide(&mut rego, &rule.id, bytes);
            assert!(
                ours == theirs && ours == rego_says,
                "disagreement on ({}, request {r}): mcpolicy {ours}, Cedar {theirs}, Rego {rego_says}",
                rule.id
            );
            allowed += usize::from(ours);
            pairs.push((s, r));
        }
    }
    println!(
        "agreement: all {} (server, request) pairs decided alike ({allowed} allowed, {} denied)",
        pairs.len(),
        pairs.len() - allowed
    );
    let order = shuffled(pairs.len());
    let pairs: Vec<(usize, usize)> = order.iter().map(|&i| pairs[i]).collect();
    let denied: Vec<(usize, usize)> = pairs
        .iter()
        .copied()
        .filter(|&(s, r)| !cedar.decide(&rules[s].id, &requests[r]))
        .collect();
    let prebuilt: Vec<Request> = pairs
        .iter()
        .map(|&(s, r)| cedar.request(&rules[s].id, message_count(&requests[r])))
        .collect();

    const NAMES: [&str; 7] = [
        "SHA-256 of the request bytes",
        "mcpolicy decide, fresh",
        "Cedar from bytes",
        "Rego from bytes",
        "mcpolicy decide, replayed denial",
        "Cedar, same denied pairs",
        "Cedar is_authorized, request prebuilt",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); NAMES.len()];
    let mut ratios: [Vec<f64>; 4] = Default::default();
    println!(
        "\nper round, ns per decision (Cedar/mcpolicy, Rego/mcpolicy, mcpolicy/SHA-256, replay/SHA-256):"
    );
    for round in 0..ROUNDS {
        // A fresh store per round: every pair is decided fresh once.
        let engine = mcpolicy_engine(&policy);
        let mut round_times = [0.0; NAMES.len()];
        for turn in 0..4 {
            match (turn + round) % 4 {
                0 => {
                    round_times[0] =
                        time_per_pair(&pairs, |_, r| Sha256::digest(&requests[r])[0] & 1 == 0)
                }
                1 => {
                    round_times[1] = time_per_pair(&pairs, |s, r| {
                        mcpolicy_decide(&engine, &rules[s].id, &requests[r], &ctx)
                    })
                }
                2 => {
                    round_times[2] =
                        time_per_pair(&pairs, |s, r| cedar.decide(&rules[s].id, &requests[r]))
                }
                _ => {
                    round_times[3] = time_per_pair(&pairs, |s, r| {
                        rego_decide(&mut rego, &rules[s].id, &requests[r])
                    })
                }
            }
        }
        // Every denial is stored now: the same denied pairs again.
        round_times[4] = time_per_pair(&denied, |s, r| {
            mcpolicy_decide(&engine, &rules[s].id, &requests[r], &ctx)
        });
        round_times[5] = time_per_pair(&denied, |s, r| cedar.decide(&rules[s].id, &requests[r]));
        let mut next = 0;
        round_times[6] = time_per_pair(&pairs, |_, _| {
            next += 1;
            cedar.is_authorized(&prebuilt[next - 1])
        });
        let round_ratios = [
            round_times[2] / round_times[1],
            round_times[3] / round_times[1],
            round_times[1] / round_times[0],
            round_times[4] / round_times[0],
        ];
        println!(
            "round {:2}: sha {:6.0}  mcpolicy {:6.0}  cedar {:6.0}  rego {:6.0}  replay {:6.0}  | {:.2}× {:.2}× {:.2}× {:.2}×  (load {})",
            round + 1,
            round_times[0],
            round_times[1],
            round_times[2],
            round_times[3],
            round_times[4],
            round_ratios[0],
            round_ratios[1],
            round_ratios[2],
            round_ratios[3],
            load_average()
        );
        for (all, value) in times.iter_mut().zip(round_times) {
            all.push(value);
        }
        for (all, value) in ratios.iter_mut().zip(round_ratios) {
            all.push(value);
        }
    }

    println!("\nmedians of {ROUNDS} rounds:");
    println!("| what | ns per decision |\n|---|---:|");
    for (name, values) in NAMES.iter().zip(times.iter_mut()) {
        println!("| {name} | {:.0} |", median(values));
    }
    let ratio_names = [
        "Cedar from bytes / mcpolicy fresh",
        "Rego from bytes / mcpolicy fresh",
        "mcpolicy fresh / SHA-256 of the bytes",
        "mcpolicy replay / SHA-256 of the bytes",
    ];
    println!("\n| paired ratio | median | min | max |\n|---|---:|---:|---:|");
    for (name, values) in ratio_names.iter().zip(ratios.iter_mut()) {
        let m = median(values);
        println!(
            "| {name} | {m:.2}× | {:.2}× | {:.2}× |",
            values[0],
            values[values.len() - 1]
        );
    }
    println!("\nload average {} at the end", load_average());
}
