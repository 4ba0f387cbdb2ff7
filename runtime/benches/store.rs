//! Decision store throughput and latency.
//!
//! - `sqlite_cycle/*`: one fresh decision that is also recorded (the engine's
//!   consent path) — a replay miss and an admission against a rate and two
//!   budgets (one transaction, `replay_or_admit`), then the decision
//!   recorded (a second) — for `synchronous=NORMAL` (the default) and
//!   `FULL`, on a store that grows by one decision per iteration. Target
//!   (`docs/performance.md`): ≥ 20,000 decisions/s with the SQLite store on the 2-core
//!   reference machine; a plain fresh decision (no record) is measured
//!   through the engine in `benches/decide.rs` (`decide_sqlite/fresh`).
//! - `sqlite_cycle_threads/*`: the same cycle from 2 threads sharing one store.
//! - `sqlite_replay_hit`: re-presentation answered from the SQLite store.
//! - `memory/*`: replay hit and a fresh cycle with [`MemoryStore`].
//!
//! Run: `cargo bench -p mcpolicy-runtime --bench store`
//! (figures and the machine they came from: `docs/performance.md`, "SQLite
//! store"; what is measured: `runtime/STORE.md`, "Measuring the store").

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, Evaluation, LimitCheck, LimitWindow, MemoryStore,
    Millis, SqliteOptions, SqliteStore, StoredDecision, Synchronous, Verdict,
};

/// Servers the decisions are spread over (each has its own counters).
const SERVERS: u64 = 100;
const DAY: Millis = 86_400_000;
const DATA: &str =
    r#"{"reason":"policy.rate_limit","server":"srv-00","retryable":true,"retryAfter":60}"#;

fn server(n: u64) -> String {
    format!("srv-{:02}", n % SERVERS)
}

/// The checks of a server with `rate 1M per 1m`, `budget 1G requests per day`
/// and `budget 1T tokens per 24h`: limits the bench never reaches, so every
/// admission succeeds and records three spend rows.
fn checks(now: Millis) -> [LimitCheck; 3] {
    let day_start = now - now.rem_euclid(DAY);
    [
        LimitCheck {
            counter: "rate".into(),
            amount: 1,
            limit: 1_000_000,
            window: LimitWindow::Rolling { ms: 60_000 },
        },
        LimitCheck {
            counter: "budget:requests:day".into(),
            amount: 1,
            limit: 1_000_000_000,
            window: LimitWindow::Fixed {
                start: day_start,
                end: day_start + DAY,
            },
        },
        LimitCheck {
            counter: "budget:tokens:rolling:86400000".into(),
            amount: 1_024,
            limit: 1_000_000_000_000,
            window: LimitWindow::Rolling { ms: 86_400_000 },
        },
    ]
}

fn decision(now: Millis) -> StoredDecision {
    StoredDecision {
        verdict: Verdict::Deny,
        reason: "policy.rate_limit".into(),
        digest: "3f1c9a0e5b7d2468ace013579bdf2468".into(),
        expires_at: Some(now + 60_000),
        data: Some(DATA.into()),
        represented: 0,
        decided_at: now,
        recomputable: false,
        statement: None,
    }
}

/// One fresh decision that is also recorded, as the engine makes it when it
/// asks for consent: the replay (a miss) and the admission (in one
/// transaction where the store can, [`DecisionStore::replay_or_admit`]),
/// then the answer recorded. `n` makes the identity new.
fn cycle(store: &dyn DecisionStore, n: u64, now: Millis) {
    let server_id = server(n);
    let key = DecisionKey::new(server_id.clone(), format!("{server_id}:{n:032x}"));
    let digest = "3f1c9a0e5b7d2468ace013579bdf2468";
    let mut checks_buf = Vec::new();
    let mut evaluate = |prior: Option<&StoredDecision>, out: &mut Vec<LimitCheck>| {
        assert!(prior.is_none());
        out.extend(checks(now));
        Evaluation::Admit
    };
    let admission = store
        .replay_or_admit(&key, None, digest, now, &mut checks_buf, &mut evaluate)
        .expect("replay_or_admit")
        .admission;
    assert!(matches!(admission, Some(Admission::Admitted { .. })));
    store.record(&key, &decision(now)).expect("record");
}

/// Simulated time: 1 ms per decision, from 2026-03-10T00:00:00Z.
fn clock(n: u64) -> Millis {
    1_773_100_800_000 + n as Millis
}

fn sqlite_store(dir: &tempfile::TempDir, name: &str, sync: Synchronous) -> SqliteStore {
    let options = SqliteOptions {
        synchronous: sync,
        ..SqliteOptions::default()
    };
    SqliteStore::open_with(dir.path().join(name), &options).expect("open store")
}

fn sqlite(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("sqlite_cycle");
    group.throughput(Throughput::Elements(1));
    for (name, sync) in [("normal", Synchronous::Normal), ("full", Synchronous::Full)] {
        let store = sqlite_store(&dir, &format!("{name}.db"), sync);
        let mut n = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                cycle(&store, n, clock(n));
            })
        });
    }
    group.finish();

    // The same cycle timed in on-CPU time of this thread (user + kernel, from
    // /proc/thread-self/schedstat): on a shared machine, wall time also counts
    // the run-queue wait behind other processes. It leaves out blocking I/O
    // waits, i.e. the checkpoint fsyncs; docs/performance.md reports both.
    if on_cpu().is_some() {
        let mut group = c.benchmark_group("sqlite_cycle_oncpu");
        group.throughput(Throughput::Elements(1));
        let store = sqlite_store(&dir, "oncpu.db", Synchronous::Normal);
        let mut n = 0u64;
        group.bench_function("normal", |b| {
            b.iter_custom(|iters| {
                let start = on_cpu().unwrap_or_default();
                for _ in 0..iters {
                    n += 1;
                    cycle(&store, n, clock(n));
                }
                on_cpu().unwrap_or_default().saturating_sub(start)
            })
        });
        group.finish();
    }

    // Each operation of the cycle alone, on-CPU: where the time goes.
    if on_cpu().is_some() {
        let mut group = c.benchmark_group("sqlite_op_oncpu");
        let store = sqlite_store(&dir, "ops.db", Synchronous::Normal);
        let digest = "3f1c9a0e5b7d2468ace013579bdf2468";
        let mut n = 0u64;
        let mut oncpu = |name: &str, op: &mut dyn FnMut(u64)| {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let start = on_cpu().unwrap_or_default();
                    for _ in 0..iters {
                        n += 1;
                        op(n);
                    }
                    on_cpu().unwrap_or_default().saturating_sub(start)
                })
            });
        };
        oncpu("replay_miss", &mut |n| {
            let server_id = server(n);
            let key = DecisionKey::new(server_id.clone(), format!("{server_id}:{n:032x}"));
            black_box(store.replay(&key, digest, clock(n)).expect("replay"));
        });
        oncpu("admit", &mut |n| {
            let now = clock(n);
            black_box(store.admit(&server(n), &checks(now), now).expect("admit"));
        });
        oncpu("record", &mut |n| {
            let server_id = server(n);
            let key = DecisionKey::new(server_id.clone(), format!("{server_id}:{n:032x}"));
            store.record(&key, &decision(clock(n))).expect("record");
        });
        group.finish();
    }

    // Two threads share one store: what the mutex and SQLite's lock cost.
    let mut group = c.benchmark_group("sqlite_cycle_threads");
    group.throughput(Throughput::Elements(1));
    let store = Arc::new(sqlite_store(&dir, "threads.db", Synchronous::Normal));
    let next = Arc::new(AtomicU64::new(0));
    group.bench_function("normal_2", |b| {
        b.iter_custom(|iters| threaded(&store, &next, iters, 2))
    });
    group.finish();

    let store = sqlite_store(&dir, "replay.db", Synchronous::Normal);
    for n in 0..1_000 {
        cycle(&store, n, clock(n));
    }
    let mut n = 0u64;
    c.bench_function("sqlite_replay_hit", |b| {
        b.iter(|| {
            n = (n + 1) % 1_000;
            let server_id = server(n);
            let key = DecisionKey::new(server_id.clone(), format!("{server_id}:{n:032x}"));
            let hit = store
                .replay(&key, "3f1c9a0e5b7d2468ace013579bdf2468", clock(n))
                .expect("replay");
            black_box(hit).expect("hit");
        })
    });
}

fn threaded(store: &Arc<SqliteStore>, next: &Arc<AtomicU64>, iters: u64, threads: u64) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = Arc::clone(store);
            let next = Arc::clone(next);
            let share = iters / threads + u64::from(t < iters % threads);
            std::thread::spawn(move || {
                for _ in 0..share {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    cycle(store.as_ref(), n, clock(n));
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("bench thread");
    }
    start.elapsed()
}

/// On-CPU time of the calling thread (Linux only). The kernel refreshes the
/// figure at scheduler events; `sched_yield` is one, so it is read fresh.
fn on_cpu() -> Option<Duration> {
    std::thread::yield_now();
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn memory(c: &mut Criterion) {
    let store = MemoryStore::new();
    let keys: Vec<DecisionKey> = (0..1_000u64)
        .map(|n| {
            let server_id = server(n);
            DecisionKey::new(server_id.clone(), format!("{server_id}:{n:032x}"))
        })
        .collect();
    for (n, key) in keys.iter().enumerate() {
        store
            .record(key, &decision(clock(n as u64)))
            .expect("record");
    }
    let mut i = 0usize;
    c.bench_function("memory/replay_hit", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let hit = store
                .replay(&keys[i], "3f1c9a0e5b7d2468ace013579bdf2468", clock(0))
                .expect("replay");
            black_box(hit).expect("hit");
        })
    });
    if on_cpu().is_some() {
        c.bench_function("memory/replay_hit_oncpu", |b| {
            b.iter_custom(|iters| {
                let start = on_cpu().unwrap_or_default();
                for _ in 0..iters {
                    i = (i + 1) % keys.len();
                    let hit = store
                        .replay(&keys[i], "3f1c9a0e5b7d2468ace013579bdf2468", clock(0))
                        .expect("replay");
                    black_box(hit).expect("hit");
                }
                on_cpu().unwrap_or_default().saturating_sub(start)
            })
        });
    }
    c.bench_function("memory/replay_miss", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let miss = store
                .replay(&keys[i], "another-digest", clock(0))
                .expect("replay");
            black_box(miss);
        })
    });
    let fresh = MemoryStore::new();
    let mut n = 0u64;
    c.bench_function("memory/cycle", |b| {
        b.iter(|| {
            n += 1;
            cycle(&fresh, n, clock(n));
        })
    });
    let admits = MemoryStore::new();
    let mut n = 0u64;
    c.bench_function("memory/admit", |b| {
        b.iter(|| {
            n += 1;
            let now = clock(n);
            black_box(admits.admit(&server(n), &checks(now), now).expect("admit"));
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = sqlite, memory
}
criterion_main!(benches);
