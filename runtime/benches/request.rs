//! Adversarial requests at the size cap: parse, validate and identity in
//! time linear in the request's size (`docs/threat-model.md`, a hostile server's huge request).
//!
//! Each shape is built at 1, 4 and 16 MiB (the cap) and decided the way the
//! engine's first two steps decide it: `request::parse_sampling` (strict
//! parse with duplicate-after-NFC detection, then validation) and
//! `identity::request_identity` over the default identity fields. Linear
//! time shows as a constant time per MiB across the three sizes.
//!
//! Run: `cargo bench -p mcpolicy-runtime --bench request`
//! (`-- many_nfd_keys` for one shape).
//!
//! CPU time, steadier on a shared machine: `REQUEST_LOOP=<MiB>/<shape>
//! REQUEST_ITERS=n` decides one input `n` times and exits; run it under
//! `perf stat -e task-clock` and subtract a run with `REQUEST_ITERS=0`
//! (which only builds the input). `REQUEST_PHASE=parse` times the strict
//! parse alone, `REQUEST_PHASE=serde` the same through serde_json's reader
//! without the fast path, and `REQUEST_PHASE=engine` the whole decision
//! from bytes (`Engine::decide`, which reads the request into the borrowed
//! tree, never into a `Value`) under the adapters' policy, memory store.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput};
use mcpolicy_runtime::clock;
use mcpolicy_runtime::engine::{Answer, ClientContext};
use mcpolicy_runtime::identity::request_identity;
use mcpolicy_runtime::request::{self, Limits};
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::{Engine, Policy};

const MIB: usize = 1024 * 1024;

/// The default identity fields.
fn fields() -> Vec<String> {
    [
        "systemPrompt",
        "messages",
        "includeContext",
        "modelPreferences",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// A whole request whose one message carries `extra` (JSON text) inside
/// the identity, so canonicalisation sees all of it.
fn envelope(extra: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{{"maxTokens":100,"messages":[{{"role":"user","content":{{"type":"text","text":"hi","extra":{extra}}}}}]}}}}"#
    )
    .into_bytes()
}

/// Room left for `extra` in a request of `size` bytes.
fn room(size: usize) -> usize {
    size - envelope("").len() - 16
}

/// Comma-separated members `piece(i)` until `budget` bytes.
fn members(budget: usize, piece: impl Fn(usize) -> String) -> String {
    let mut out = String::with_capacity(budget);
    let mut i = 0;
    loop {
        let next = piece(i);
        if out.len() + next.len() + 1 > budget {
            return out;
        }
        if i > 0 {
            out.push(',');
        }
        out.push_str(&next);
        i += 1;
    }
}

/// The shapes, each a request of about `size` bytes.
fn shapes(size: usize) -> Vec<(&'static str, Vec<u8>)> {
    let budget = room(size);
    // Nesting: the request's own containers take 6 levels of the 64.
    let depth = Limits::default().max_depth - 6;
    let deep_array = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let deep_object = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    // A run of combining marks of two classes in reverse canonical order,
    // so NFC must reorder all of it: U+0301 (230) before U+0323 (220).
    let marks_run = {
        let mut text = String::from("\"a");
        while text.len() + 5 < budget {
            text.push_str("\u{301}\u{323}");
        }
        text.push('"');
        text
    };
    vec![
        (
            "many_keys",
            envelope(&format!(
                "{{{}}}",
                members(budget - 2, |i| format!(r#""k{i}":0"#))
            )),
        ),
        (
            "many_nfd_keys",
            envelope(&format!(
                "{{{}}}",
                members(budget - 2, |i| format!("\"k{i}e\u{301}\":0"))
            )),
        ),
        (
            "many_escaped_nfd_keys",
            envelope(&format!(
                "{{{}}}",
                members(budget - 2, |i| format!(r#""k{i}e\u0301":0"#))
            )),
        ),
        ("combining_marks_run", envelope(&marks_run)),
        (
            "combining_marks_keys",
            envelope(&format!(
                "{{{}}}",
                members(budget - 2, |i| format!(
                    "\"{i}{}\":0",
                    "\u{301}\u{323}".repeat(64)
                ))
            )),
        ),
        (
            "arrays_at_nesting_limit",
            envelope(&format!(
                "[{}]",
                members(budget - 2, |_| deep_array.clone())
            )),
        ),
        (
            "objects_at_nesting_limit",
            envelope(&format!(
                "[{}]",
                members(budget - 2, |_| deep_object.clone())
            )),
        ),
    ]
}

/// An engine over the adapters' policy (`tests/cases/adapters/`), whose
/// server `open` allows the shapes, and a memory store.
fn engine() -> Engine {
    let table = include_bytes!("../../tests/cases/adapters/policy.table.json");
    let policy = Policy::from_json(table).expect("the adapters' table");
    Engine::new(
        policy,
        Arc::new(MemoryStore::new()),
        Arc::new(clock::ManualClock::new(clock::timestamp(
            2026, 3, 10, 12, 0, 0,
        ))),
    )
}

fn decide(bytes: &[u8], fields: &[String]) -> usize {
    match request::parse_sampling(bytes) {
        Ok(request) => request_identity("srv", request.params(), fields)
            .as_str()
            .len(),
        Err(rejection) => panic!("{}", rejection.error),
    }
}

fn main() {
    let fields = fields();
    if let Ok(which) = std::env::var("REQUEST_LOOP") {
        let (mib, shape) = which.split_once('/').expect("REQUEST_LOOP=<MiB>/<shape>");
        let mib: usize = mib.parse().expect("MiB");
        let iters: usize = std::env::var("REQUEST_ITERS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let bytes = shapes(mib * MIB)
            .into_iter()
            .find(|(name, _)| *name == shape)
            .map(|(_, bytes)| bytes)
            .expect("a shape name");
        // REQUEST_PHASE=parse: the strict parse alone (value built and
        // dropped); REQUEST_PHASE=serde: the same through serde_json's
        // reader alone, without the fast path (`request/fast.rs`), for an
        // A/B of the two in one binary.
        let phase = std::env::var("REQUEST_PHASE").unwrap_or_default();
        let limits = Limits::default();
        let engine = engine();
        let ctx = ClientContext::with_sampling_context(true);
        for _ in 0..iters {
            if phase == "engine" {
                let answer = engine.decide("open", black_box(&bytes), &ctx);
                assert!(matches!(answer, Answer::Decided { .. }), "{answer:?}");
                black_box(answer);
            } else if phase == "parse" {
                black_box(request::parse_strict(black_box(&bytes)).is_ok());
            } else if phase == "serde" {
                black_box(request::parse_strict_serde(black_box(&bytes), &limits).is_ok());
            } else {
                black_box(decide(black_box(&bytes), &fields));
            }
        }
        return;
    }
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(3))
        .configure_from_args();
    for mib in [1, 4, 16] {
        let mut group = criterion.benchmark_group(format!("request_{mib}MiB"));
        for (name, bytes) in shapes(mib * MIB) {
            assert!(bytes.len() <= Limits::default().max_bytes, "{name}");
            group.throughput(Throughput::Bytes(bytes.len() as u64));
            group.bench_with_input(BenchmarkId::from_parameter(name), &bytes, |b, bytes| {
                b.iter(|| black_box(decide(black_box(bytes), &fields)));
            });
        }
        group.finish();
    }
    criterion.final_summary();
}
