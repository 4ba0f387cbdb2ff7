//! The Rust side of the binding's overhead bench (`bench/crossing.py` is
//! the Python side): the same table (`tests/cases/adapters/policy.table.json`),
//! the same request bytes, the in-memory store and a manual clock moved
//! 1 s per decision (under the table's `rate 100 per 1m`), timed the same
//! way: batches of decisions, the median of the per-decision times.
//!
//! - `allow`: `Engine::decide` of the JSON-RPC bytes, then `Grant::complete`;
//! - `deny`: a `sampling off` server's request, replayed from the store.
//!
//! Run: `cargo bench -p mcpolicy-python --bench crossing` (figures in
//! `docs/performance.md`, "Python binding").

use std::sync::Arc;
use std::time::Instant;

use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision, Engine};
use mcpolicy_runtime::store::MemoryStore;

const BATCHES: usize = 15;
const PER_BATCH: usize = 20_000;
const REQUEST: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"Hello"}}],"maxTokens":100,"includeContext":"none"}}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let table = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/cases/adapters/policy.table.json"
    ))?;
    let policy = mcpolicy_runtime::Policy::from_json(&table)?;
    for (path, server) in [("allow", "open"), ("deny", "closed")] {
        let clock = Arc::new(ManualClock::new(1_767_268_800_000));
        let engine = Engine::new(policy.clone(), Arc::new(MemoryStore::new()), clock.clone());
        let ctx = ClientContext::default();
        let mut medians = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let started = Instant::now();
            for _ in 0..PER_BATCH {
                clock.advance(1_000);
                match engine.decide(server, REQUEST, &ctx) {
                    Answer::Decided {
                        decision: Decision::Allow(grant),
                        ..
                    } => grant.complete(42)?,
                    Answer::Decided {
                        decision: Decision::Deny(denial),
                        ..
                    } => {
                        std::hint::black_box(denial);
                    }
                    other => return Err(format!("unexpected answer: {other:?}").into()),
                }
            }
            medians.push(started.elapsed().as_nanos() as f64 / PER_BATCH as f64);
        }
        medians.sort_by(f64::total_cmp);
        println!(
            "rust {path}: median {:.0} ns per decision ({BATCHES} batches of {PER_BATCH})",
            medians[BATCHES / 2]
        );
    }
    Ok(())
}
