//! The Rust side of the binding's overhead bench (`bench/decide.mjs` is the
//! Node side; figures in `BENCHMARKS.md`): the same decisions on the same
//! table and store, called from Rust. Prints one JSON line of medians.
//!
//! Run: `cargo run --release -p mcpolicy-node --example decide_rust`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::engine::{Answer, ClientContext, Engine};
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::{Error, Policy};

/// Batches of this many decisions; the figure is the median batch's mean.
const BATCH: usize = 1_000;
const BATCHES: usize = 30;

fn request(text: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{{"messages":[{{"role":"user","content":{{"type":"text","text":"{text}"}}}}],"maxTokens":100,"includeContext":"none"}}}}"#
    )
    .into_bytes()
}

/// The median over batches of the mean ns per call of `decide(i)`.
fn median_ns(mut decide: impl FnMut(usize) -> Answer) -> f64 {
    let mut means: Vec<f64> = (0..BATCHES)
        .map(|batch| {
            let started = Instant::now();
            for i in 0..BATCH {
                black_box(decide(batch * BATCH + i));
            }
            started.elapsed().as_secs_f64() * 1e9 / BATCH as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    means[BATCHES / 2]
}

fn main() -> Result<(), Error> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/cases/adapters/policy.table.json"
    );
    let table = std::fs::read(path).map_err(|error| {
        Error::Table(mcpolicy_runtime::table::TableError::InvalidIdentity {
            problem: format!("cannot read {path}: {error}"),
        })
    })?;
    let policy = Policy::from_json(&table)?;
    let engine = Engine::new(policy, Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    let ctx = ClientContext::default();
    let hello = request("Hello");
    // A fresh allow: a server id of its own each time (the fallback block,
    // whose rate counts per server), as in bench/decide.mjs.
    let fresh = median_ns(|i| engine.decide(&format!("srv-{i}"), &hello, &ctx));
    // A replayed denial: `closed` says `sampling off`, stored once.
    let replay = median_ns(|_| engine.decide("closed", &hello, &ctx));
    println!(
        "{{\"side\":\"rust\",\"fresh_allow_ns\":{fresh:.0},\"replayed_deny_ns\":{replay:.0}}}"
    );
    Ok(())
}
