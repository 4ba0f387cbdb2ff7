//! `Engine::decide` without identity, against a 1,000-server table and the
//! in-memory store.
//!
//! - `decide/fresh`: a request with no stored decision: server lookup,
//!   replay miss, switches, input limits (canonical byte count of a small
//!   request), trims, one admission against a rate and an hourly budget,
//!   and the grant. Target (`docs/performance.md`): ≤ 1 µs.
//! - `decide/replay`: a re-presented request answered from a stored denial.
//!   Target: ≤ 300 ns.
//! - `decide/fresh_with_identity`: `fresh` plus the request identity, for scale.
//! - `cpu:` lines (printed, not criterion groups): the same two paths over a
//!   fixed 2,000,000 iterations, timed by the thread's user+system CPU time
//!   from `/proc/thread-self/stat` instead of the wall clock, so the figure
//!   holds on a machine shared with other builds (Linux only).
//!
//! - `decide_sqlite/*` and the `sqlite cpu:` line: the same paths with the
//!   durable [`SqliteStore`] (default options, a file in a temporary
//!   directory): what "decisions per second with the SQLite store" means for
//!   the engine. A fresh decision is a replay miss (one read) and one write
//!   transaction (the replay probe again and the admission); a replay of a
//!   stored denial is one read, its count written in batches
//!   (`docs/spec/store.md`, "Durability").
//!
//! Run: `CARGO_TARGET_DIR=target-engine cargo bench -p mcpolicy-runtime --bench decide`
//! (figures in `docs/performance.md`, "Decisions"; method in `runtime/ENGINE.md`).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use mcpolicy_runtime::Policy;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{ClientContext, Decision, Engine};
use mcpolicy_runtime::identity;
use mcpolicy_runtime::store::{MemoryStore, SqliteStore};
use mcpolicy_runtime::table::{
    Budget, BudgetMetric, CalendarUnit, Consent, ContextScope, Deadline, EffectiveBlock, Limit,
    ProtocolRevision, Rate, ReasonSpec, ServerEntry, Switch, TABLE_FORMAT, Table, Window,
    block_digest, builtin,
};
use serde_json::{Map, Value, json};

const SERVERS: usize = 1_000;

fn reasons() -> BTreeMap<String, ReasonSpec> {
    builtin::ALL
        .iter()
        .map(|b| (b.name.to_owned(), builtin::spec(b, -32010)))
        .collect()
}

/// A realistic block: every statement set, limits the bench never reaches.
fn block(sampling: bool) -> EffectiveBlock {
    EffectiveBlock {
        sampling: Switch {
            enabled: sampling,
            reason: builtin::SAMPLING_DISABLED.into(),
        },
        tools: Switch {
            enabled: false,
            reason: builtin::TOOLS_DISABLED.into(),
        },
        max_context: ContextScope::ThisServer,
        max_input: Some(Limit {
            max: 64 * 1024,
            reason: builtin::INPUT_TOO_LARGE.into(),
        }),
        max_messages: Some(Limit {
            max: 50,
            reason: builtin::INPUT_TOO_LARGE.into(),
        }),
        max_tokens: Some(4096),
        rate: Some(Rate {
            count: 600,
            window_ms: 60_000,
            reason: builtin::RATE_LIMIT.into(),
        }),
        budgets: vec![Budget {
            metric: BudgetMetric::Requests,
            limit: 1_000_000,
            window: Window::Calendar(CalendarUnit::Hour),
            reason: builtin::BUDGET_EXHAUSTED.into(),
        }],
        deadline: Some(Deadline {
            ms: 60_000,
            reason: builtin::DEADLINE.into(),
        }),
        consent: Consent::Never,
        models: None,
        retry_alert: None,
    }
}

/// [`table`] verified.
fn policy(sampling: bool) -> Policy {
    Policy::verify(table(sampling)).expect("the bench table verifies")
}

/// 1,000 server blocks: exact ids, with a glob every 100 entries (globs are
/// tried in order before a later exact entry).
fn table(sampling: bool) -> Table {
    let reasons = reasons();
    let servers = (0..SERVERS)
        .map(|i| {
            let pattern = if i % 100 == 50 {
                format!("tenant-{i}-*")
            } else {
                format!("server-{i:04}")
            };
            let block = block(sampling);
            ServerEntry {
                pattern,
                digest: block_digest(&block, &reasons),
                block,
            }
        })
        .collect();
    let fallback = block(sampling);
    let table = Table {
        format: TABLE_FORMAT.into(),
        protocol: ProtocolRevision::V2025_11_25,
        error_code: -32010,
        identity: [
            "systemPrompt",
            "messages",
            "includeContext",
            "modelPreferences",
        ]
        .map(String::from)
        .to_vec(),
        servers,
        fallback: ServerEntry {
            pattern: "*".into(),
            digest: block_digest(&fallback, &reasons),
            block: fallback,
        },
        reasons,
    };
    table.verify().expect("bench table verifies");
    table
}

fn request() -> Map<String, Value> {
    match json!({
        "systemPrompt": "You are a release-notes writer.",
        "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise the changes since v1.2 in three bullet points."}}],
        "includeContext": "thisServer",
        "maxTokens": 400,
    }) {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

fn servers() -> Vec<String> {
    (0..SERVERS)
        .filter(|i| i % 100 != 50)
        .map(|i| format!("server-{i:04}"))
        .collect()
}

/// Nanoseconds of CPU this thread has used (user + system), if the kernel
/// says; resolution one clock tick (10 ms), so measure long loops.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) * 10_000_000)
}

/// CPU nanoseconds per call of `f` over `iters` calls.
fn cpu_per_iter(iters: u64, mut f: impl FnMut()) -> Option<f64> {
    let start = thread_cpu_ns()?;
    for _ in 0..iters {
        f();
    }
    let used = thread_cpu_ns()?.saturating_sub(start);
    Some(used as f64 / iters as f64)
}

fn bench(c: &mut Criterion) {
    let params = request();
    let ids = servers();
    let fields = table(true).identity;
    let identities: Vec<String> = ids
        .iter()
        .map(|s| identity::request_identity(s, &params, &fields).into_string())
        .collect();
    let ctx = ClientContext::with_sampling_context(true);
    let mut group = c.benchmark_group("decide");

    // Fresh: each server is visited every ~1,000 iterations, 60 ms apart, so
    // its rate window holds a row or two and its hourly budget about 60.
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 0, 0,
    )));
    let engine = Engine::new(policy(true), Arc::new(MemoryStore::new()), clock.clone());
    let mut n = 0usize;
    group.bench_function("fresh", |b| {
        b.iter(|| {
            n = (n + 1) % ids.len();
            clock.advance(60);
            let decision = engine
                .decide_with_identity(&ids[n], identities[n].clone(), &params, &ctx)
                .expect("decide");
            debug_assert!(matches!(decision, Decision::Allow(_)));
            black_box(decision)
        })
    });
    group.bench_function("fresh_with_identity", |b| {
        b.iter(|| {
            n = (n + 1) % ids.len();
            clock.advance(60);
            let identity =
                identity::request_identity(&ids[n], &params, &engine.policy().table().identity);
            black_box(
                engine
                    .decide_with_identity(&ids[n], identity.into_string(), &params, &ctx)
                    .expect("decide"),
            )
        })
    });

    // Replay: every server has sampling off and one stored denial.
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 0, 0,
    )));
    let engine = Engine::new(policy(false), Arc::new(MemoryStore::new()), clock);
    for (id, identity) in ids.iter().zip(&identities) {
        let first = engine
            .decide_with_identity(id, identity.clone(), &params, &ctx)
            .expect("decide");
        assert!(matches!(first, Decision::Deny(_)));
    }
    group.bench_function("replay", |b| {
        b.iter(|| {
            n = (n + 1) % ids.len();
            let decision = engine
                .decide_with_identity(&ids[n], identities[n].clone(), &params, &ctx)
                .expect("decide");
            debug_assert!(matches!(&decision, Decision::Deny(d) if d.replayed()));
            black_box(decision)
        })
    });
    group.finish();

    const ITERS: u64 = 2_000_000;
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 0, 0,
    )));
    let fresh = Engine::new(policy(true), Arc::new(MemoryStore::new()), clock.clone());
    let fresh_ns = cpu_per_iter(ITERS, || {
        n = (n + 1) % ids.len();
        clock.advance(60);
        black_box(
            fresh
                .decide_with_identity(&ids[n], identities[n].clone(), &params, &ctx)
                .expect("decide"),
        );
    });
    let replay_ns = cpu_per_iter(ITERS, || {
        n = (n + 1) % ids.len();
        black_box(
            engine
                .decide_with_identity(&ids[n], identities[n].clone(), &params, &ctx)
                .expect("decide"),
        );
    });
    if let (Some(fresh_ns), Some(replay_ns)) = (fresh_ns, replay_ns) {
        println!("cpu: decide/fresh {fresh_ns:.0} ns/iter, decide/replay {replay_ns:.0} ns/iter");
    }

    // The same with the SQLite store.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("decide_sqlite");
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 0, 0,
    )));
    let store = Arc::new(SqliteStore::open(dir.path().join("fresh.db")).expect("open store"));
    let fresh = Engine::new(policy(true), store, clock.clone());
    let mut f = 0usize;
    let mut fresh_op = || {
        f = (f + 1) % ids.len();
        let n = f;
        clock.advance(60);
        let decision = fresh
            .decide_with_identity(&ids[n], identities[n].clone(), &params, &ctx)
            .expect("decide");
        debug_assert!(matches!(decision, Decision::Allow(_)));
        black_box(decision);
    };
    group.bench_function("fresh", |b| b.iter(&mut fresh_op));
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 0, 0,
    )));
    let store = Arc::new(SqliteStore::open(dir.path().join("replay.db")).expect("open store"));
    let replays = Engine::new(policy(false), store, clock);
    for (id, identity) in ids.iter().zip(&identities) {
        let first = replays
            .decide_with_identity(id, identity.clone(), &params, &ctx)
            .expect("decide");
        assert!(matches!(first, Decision::Deny(_)));
    }
    let mut r = 0usize;
    let mut replay_op = || {
        r = (r + 1) % ids.len();
        let n = r;
        black_box(
            replays
                .decide_with_identity(&ids[n], identities[n].clone(), &params, &ctx)
                .expect("decide"),
        );
    };
    group.bench_function("replay", |b| b.iter(&mut replay_op));
    group.finish();
    const SQLITE_ITERS: u64 = 50_000;
    if let (Some(fresh_ns), Some(replay_ns)) = (
        cpu_per_iter(SQLITE_ITERS, &mut fresh_op),
        cpu_per_iter(SQLITE_ITERS, &mut replay_op),
    ) {
        println!(
            "sqlite cpu: decide/fresh {fresh_ns:.0} ns/iter ({:.0}/s), decide/replay {replay_ns:.0} ns/iter ({:.0}/s)",
            1e9 / fresh_ns,
            1e9 / replay_ns
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
