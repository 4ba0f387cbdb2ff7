//! What the comparative benchmark's two binaries share (README.md of the
//! directory above): the rules, the policy they make, the request bytes,
//! mcpolicy's engine and decision, the pair order and the timing.
//!
//! The `mcpolicy-peers-alone` binary times mcpolicy in a build of its own:
//! in the peers binary Cedar turns on `serde_json`'s `preserve_order` for
//! every engine (features unify within one build), which no build of
//! mcpolicy has.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_runtime::Policy;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision, Engine};
use mcpolicy_runtime::store::MemoryStore;
use serde_json::Value;

pub const SERVERS: usize = 1_000;
pub const REQUESTS: usize = 13;

/// One server's rules, the single source of all three policies.
pub struct Rule {
    pub id: String,
    pub sampling: bool,
    pub max_messages: usize,
}

pub fn rules() -> Vec<Rule> {
    (0..SERVERS)
        .map(|i| Rule {
            id: format!("server-{i:04}"),
            sampling: i % 7 != 3,
            max_messages: 2 + i % 6,
        })
        .collect()
}

pub fn mcpolicy_source(rules: &[Rule]) -> String {
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

/// Request `k`: `1 + (5k mod 9)` messages of chat prose, some with a system
/// prompt and an `includeContext`; 0.5–2 KB.
pub fn request_bytes(k: usize) -> Vec<u8> {
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

pub fn mcpolicy_engine(policy: &Policy) -> Engine {
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 0, 0,
    )));
    Engine::new(policy.clone(), Arc::new(MemoryStore::new()), clock)
}

/// mcpolicy's answer: allowed, or, for a denial, whether it was replayed.
pub fn mcpolicy_decide(engine: &Engine, server: &str, bytes: &[u8], ctx: &ClientContext) -> bool {
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

/// A fixed permutation of `0..n` (a linear congruential shuffle), so every
/// run visits the pairs in the same order without a random-number crate.
pub fn shuffled(n: usize) -> Vec<usize> {
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

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Nanoseconds per call of `f` over `pairs`.
pub fn time_per_pair(pairs: &[(usize, usize)], mut f: impl FnMut(usize, usize) -> bool) -> f64 {
    let start = Instant::now();
    for &(server, request) in pairs {
        black_box(f(server, request));
    }
    start.elapsed().as_nanos() as f64 / pairs.len() as f64
}

/// The rules' mcpolicy policy, compiled and verified.
pub fn mcpolicy_policy(rules: &[Rule]) -> Policy {
    let database = Database::default();
    let source = SourceText::new(&database, "peers.mcpolicy".into(), mcpolicy_source(rules));
    let table = db::lower_file(&database, source)
        .clone()
        .expect("the mcpolicy policy compiles");
    Policy::verify(table).expect("the compiled table verifies")
}

/// Every (server, request) pair, in the one shuffled order of every run.
pub fn pairs() -> Vec<(usize, usize)> {
    let all: Vec<(usize, usize)> = (0..SERVERS)
        .flat_map(|s| (0..REQUESTS).map(move |r| (s, r)))
        .collect();
    shuffled(all.len()).iter().map(|&i| all[i]).collect()
}
