//! The Rust side of the binding's overhead bench (`bench/decide.mjs` is the
//! Node side; method in `runtime/node/BENCHMARKS.md`, figures in
//! `docs/performance.md`, "Node binding"): the same decisions on the same
//! table and store, called from Rust. Prints one JSON line of medians.
//!
//! Run: `cargo bench -p mcpolicy-node --bench decide`

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

/// This thread's CPU time in ns (user + system, 10 ms ticks), from
/// `/proc/thread-self/stat` as `runtime/benches/decide.rs` reads it: a
/// figure that holds on a machine shared with other work (Linux only).
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 10_000_000)
}

/// The median over batches of the mean wall ns per call of `decide(i)`,
/// and the CPU ns per call over all of them.
fn median_ns(mut decide: impl FnMut(usize) -> Answer) -> (f64, f64) {
    let cpu_start = thread_cpu_ns().unwrap_or(0);
    let mut means: Vec<f64> = (0..BATCHES)
        .map(|batch| {
            let started = Instant::now();
            for i in 0..BATCH {
                black_box(decide(batch * BATCH + i));
            }
            started.elapsed().as_secs_f64() * 1e9 / BATCH as f64
        })
        .collect();
    let cpu = thread_cpu_ns().unwrap_or(0).saturating_sub(cpu_start) as f64;
    means.sort_by(f64::total_cmp);
    (means[BATCHES / 2], cpu / (BATCH * BATCHES) as f64)
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
    let (fresh, fresh_cpu) = median_ns(|i| engine.decide(&format!("srv-{i}"), &hello, &ctx));
    // A replayed denial: `closed` says `sampling off`, stored once.
    let (replay, replay_cpu) = median_ns(|_| engine.decide("closed", &hello, &ctx));
    println!(
        "{{\"side\":\"rust\",\"fresh_allow_ns\":{fresh:.0},\"replayed_deny_ns\":{replay:.0},\"fresh_allow_cpu_ns\":{fresh_cpu:.0},\"replayed_deny_cpu_ns\":{replay_cpu:.0}}}"
    );
    Ok(())
}
