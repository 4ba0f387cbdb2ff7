//! Decisions per second and latency of the PostgreSQL store with 1, 4 and
//! 16 concurrent clients (threads, each on its own pooled connection), for
//! plain decisions (`replay_or_admit` of a fresh request with nothing to
//! count: one round trip) and for rate + budget admission (the request's
//! replay look-up, then one `admit` call checking and recording a rolling
//! rate and a daily budget: two round trips), every client deciding for the
//! same server, so every admission contends for the same two counter rows.
//!
//! Needs `MCPOLICY_TEST_POSTGRES` (see `scripts/pg-test-cluster.sh`).
//! Prints a table (decisions/s, p50, p99 over a fixed run per row), then
//! hands the same operations to criterion for its statistics:
//!
//! ```text
//! eval "$(runtime/postgres/scripts/pg-test-cluster.sh start /tmp/mcpolicy-pg)"
//! cargo bench -p mcpolicy-store-postgres
//! ```
//!
//! `MCPOLICY_BENCH_SECONDS` sets each row's run (default 3).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use mcpolicy_runtime::clock::{Clock, SystemClock};
use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, Evaluation, LimitCheck, LimitWindow, Millis,
};
use mcpolicy_store_postgres::{PostgresOptions, PostgresStore};

/// The wall clock, as a proxy reads it: a rolling window's floor moves
/// with every decision, as in production.
fn now() -> Millis {
    SystemClock.now()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    RateBudget,
    /// Rate + budget, each client deciding for a server of its own: no
    /// two admissions contend for a counter row.
    RateBudgetOwnServer,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::RateBudget => "rate+budget",
            Kind::RateBudgetOwnServer => "rate+budget, a server per client",
        }
    }
}

fn checks(now: Millis) -> Vec<LimitCheck> {
    let day = 86_400_000;
    let start = now - now.rem_euclid(day);
    vec![
        LimitCheck {
            counter: "rate".into(),
            amount: 1,
            limit: 1 << 40,
            window: LimitWindow::Rolling { ms: 60_000 },
        },
        LimitCheck {
            counter: "budget:requests:day".into(),
            amount: 1,
            limit: 1 << 40,
            window: LimitWindow::Fixed {
                start,
                end: start + day,
            },
        },
    ]
}

/// One decision for a request never seen before, as the engine makes it.
fn decide(store: &PostgresStore, kind: Kind, client: usize, identity: &str) {
    let server = match kind {
        Kind::RateBudgetOwnServer => format!("bench{client}"),
        Kind::Plain | Kind::RateBudget => "bench".to_owned(),
    };
    let key = DecisionKey::new(server, identity);
    let mut buffer = Vec::new();
    let now = now();
    let answer = store
        .replay_or_admit(&key, None, "digest", now, &mut buffer, &mut |_, out| {
            if kind != Kind::Plain {
                out.extend(checks(now));
            }
            Evaluation::Admit
        })
        .expect("decide");
    assert!(matches!(answer.admission, Some(Admission::Admitted { .. })));
}

fn open(spec: &str, clients: usize, synchronous_commit: bool) -> Arc<PostgresStore> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let options = PostgresOptions {
        schema: format!("bench_{}_{nanos}", std::process::id()),
        pool_size: clients,
        synchronous_commit,
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    };
    Arc::new(PostgresStore::open_with(spec, &options).expect("open the bench store"))
}

/// Runs `clients` threads for `seconds`; returns (decisions/s, p50, p99).
fn measure(
    store: &Arc<PostgresStore>,
    kind: Kind,
    clients: usize,
    run: Duration,
) -> (f64, Duration, Duration) {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|client| {
            let (store, next) = (Arc::clone(store), Arc::clone(&next));
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                while started.elapsed() < run {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let at = Instant::now();
                    decide(&store, kind, client, &format!("bench:{n:032x}"));
                    latencies.push(at.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("client thread"))
        .collect();
    let elapsed = started.elapsed();
    all.sort();
    let pick = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    (
        all.len() as f64 / elapsed.as_secs_f64(),
        pick(0.50),
        pick(0.99),
    )
}

fn main() {
    let Ok(spec) = std::env::var("MCPOLICY_TEST_POSTGRES") else {
        eprintln!(
            "MCPOLICY_TEST_POSTGRES is not set: start a cluster with scripts/pg-test-cluster.sh"
        );
        return;
    };
    let seconds: u64 = std::env::var("MCPOLICY_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let run = Duration::from_secs(seconds);
    println!("| decisions | synchronous_commit | clients | decisions/s | p50 | p99 |");
    println!("|---|---|---:|---:|---:|---:|");
    for synchronous_commit in [true, false] {
        for kind in [Kind::Plain, Kind::RateBudget, Kind::RateBudgetOwnServer] {
            for clients in [1, 4, 16] {
                if kind == Kind::RateBudgetOwnServer && clients != 16 {
                    continue;
                }
                let store = open(&spec, clients, synchronous_commit);
                // Warm the pool and the plans.
                measure(&store, kind, clients, Duration::from_millis(300));
                let (rate, p50, p99) = measure(&store, kind, clients, run);
                println!(
                    "| {} | {} | {clients} | {rate:.0} | {:.2} ms | {:.2} ms |",
                    kind.name(),
                    if synchronous_commit { "on" } else { "off" },
                    p50.as_secs_f64() * 1e3,
                    p99.as_secs_f64() * 1e3
                );
            }
        }
    }

    // The same operations under criterion (time per decision at each concurrency).
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(seconds))
        .configure_from_args();
    for kind in [Kind::Plain, Kind::RateBudget] {
        let mut group = criterion.benchmark_group(format!("postgres_{}", kind.name()));
        group.throughput(Throughput::Elements(1));
        for clients in [1usize, 4, 16] {
            let store = open(&spec, clients, true);
            let next = Arc::new(AtomicU64::new(0));
            group.bench_function(format!("{clients}_clients"), |b| {
                b.iter_custom(|iters| {
                    let per_client = iters.div_ceil(clients as u64);
                    let started = Instant::now();
                    let threads: Vec<_> = (0..clients)
                        .map(|client| {
                            let (store, next) = (Arc::clone(&store), Arc::clone(&next));
                            std::thread::spawn(move || {
                                for _ in 0..per_client {
                                    let n = next.fetch_add(1, Ordering::Relaxed);
                                    decide(&store, kind, client, &format!("bench:{n:032x}"));
                                }
                            })
                        })
                        .collect();
                    for thread in threads {
                        thread.join().expect("client thread");
                    }
                    // Wall time per decision across all clients.
                    started
                        .elapsed()
                        .mul_f64(iters as f64 / (per_client * clients as u64) as f64)
                });
            });
        }
        group.finish();
    }
    criterion.final_summary();
}
