//! Group admission (`PostgresOptions::max_batch`): concurrent admissions of
//! one server from one process share one `admit_batch` transaction.
//!
//! - one batch answers exactly what successive `admit` calls answer, in the
//!   same order (the in-memory store as the reference: admitted or refused,
//!   the refusing check, `available_at`, reservation ids);
//! - many threads admitting against one server (through `admit` and the
//!   miss path of `replay_or_admit`) admit what a sequential run admits:
//!   never over a limit, and every refusal is one a sequential run would
//!   give at the end, so the count is exact; and batches of two or more did
//!   happen;
//! - a failed batch fails every request in it with the same error and
//!   records nothing.

mod support;

use std::sync::{Arc, Barrier};

use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, Evaluation, LimitCheck, LimitWindow, MemoryStore,
    Millis, StoreAdmin, StoreError,
};
use mcpolicy_store_postgres::{PostgresOptions, PostgresStore};
use proptest::prelude::*;

fn store(spec: &str, prefix: &str, pool_size: usize) -> PostgresStore {
    let options = PostgresOptions {
        schema: support::fresh_schema(prefix),
        pool_size,
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    };
    PostgresStore::open_with(spec, &options).expect("open a PostgreSQL store")
}

/// The checks of counter `which` (a 10 s and a 3 s rolling window, a 20 s
/// fixed one, as the engine derives it from `now`) of `amount` under `limit`.
fn check(which: u8, amount: u64, limit: u64, now: Millis) -> LimitCheck {
    let (counter, window) = match which % 3 {
        0 => ("rate:a", LimitWindow::Rolling { ms: 10_000 }),
        1 => ("rate:b", LimitWindow::Rolling { ms: 3_000 }),
        _ => {
            let start = now - now.rem_euclid(20_000);
            (
                "budget:c",
                LimitWindow::Fixed {
                    start,
                    end: start + 20_000,
                },
            )
        }
    };
    LimitCheck {
        counter: counter.into(),
        amount,
        limit,
        window,
    }
}

/// A request: 1–3 checks (counter, amount, limit) and a step of the clock.
fn request() -> impl Strategy<Value = (Vec<(u8, u64, u64)>, i64)> {
    (
        proptest::collection::vec((0u8..3, 0u64..5, 0u64..12), 1..4),
        prop_oneof![3 => Just(0i64), 2 => 0i64..2_500],
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    /// One batch of any requests answers, request by request, what the
    /// in-memory store answers to successive `admit` calls in that order,
    /// and so does a second batch on the state the first left.
    #[test]
    fn a_batch_answers_what_successive_admits_answer(
        first in proptest::collection::vec(request(), 1..24),
        second in proptest::collection::vec(request(), 1..12),
    ) {
        let Some(spec) = support::spec() else { return Ok(()) };
        let pg = store(&spec, "batchseq", 2);
        let memory = MemoryStore::new();
        let mut now: Millis = 1_000_000;
        for part in [first, second] {
            let requests: Vec<(Vec<LimitCheck>, Millis)> = part
                .iter()
                .map(|(checks, step)| {
                    now += step;
                    let checks = checks
                        .iter()
                        .map(|&(which, amount, limit)| check(which, amount, limit, now))
                        .collect();
                    (checks, now)
                })
                .collect();
            let batched = pg.admit_batch("srv", &requests).expect("admit_batch");
            prop_assert_eq!(batched.len(), requests.len());
            for ((checks, at), got) in requests.iter().zip(&batched) {
                let want = memory.admit("srv", checks, *at).expect("memory admit");
                prop_assert_eq!(got, &want, "checks {:?} at {}", checks, at);
            }
        }
    }

    /// Threads admitting against one server, in batches, never admit over a
    /// limit, and refuse only what would not fit at the end: exactly what a
    /// sequential run admits in some order (spend only grows at a fixed
    /// instant, so a request refused then would be refused at the end).
    #[test]
    fn concurrent_admissions_admit_exactly_what_a_sequential_run_admits(
        amounts in proptest::collection::vec(proptest::collection::vec(1u64..4, 6..14), 6..13),
        rate_limit in 10u64..60,
        budget_limit in 10u64..60,
    ) {
        let Some(spec) = support::spec() else { return Ok(()) };
        let pg = Arc::new(store(&spec, "batchrun", 4));
        let now: Millis = 5_000_000;
        let barrier = Arc::new(Barrier::new(amounts.len()));
        let threads: Vec<_> = amounts
            .iter()
            .cloned()
            .enumerate()
            .map(|(thread, amounts)| {
                let (pg, barrier) = (Arc::clone(&pg), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    amounts
                        .into_iter()
                        .enumerate()
                        .map(|(n, amount)| {
                            let checks =
                                vec![check(0, amount, rate_limit, now), check(2, amount, budget_limit, now)];
                            let answer = if thread % 2 == 0 {
                                pg.admit("srv", &checks, now).expect("admit")
                            } else {
                                let key = DecisionKey::new("srv", format!("t{thread}:{n}"));
                                let mut buffer = Vec::new();
                                pg.replay_or_admit(&key, None, "digest", now, &mut buffer, &mut |_, out| {
                                    out.extend(checks.iter().cloned());
                                    Evaluation::Admit
                                })
                                .expect("replay_or_admit")
                                .admission
                                .expect("admitted or refused")
                            };
                            (amount, answer)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let answers: Vec<(u64, Admission)> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("client thread"))
            .collect();
        let admitted: u64 = answers
            .iter()
            .filter(|(_, a)| matches!(a, Admission::Admitted { .. }))
            .map(|(amount, _)| amount)
            .sum();
        let limit = rate_limit.min(budget_limit);
        prop_assert!(admitted <= limit, "admitted {admitted} over the limit {limit}");
        let mut ids = Vec::new();
        for (amount, answer) in &answers {
            match answer {
                Admission::Admitted { reservation } => ids.push(reservation.id),
                Admission::Refused { index, .. } => {
                    let refusing = if *index == 0 { rate_limit } else { budget_limit };
                    prop_assert!(
                        admitted + amount > refusing,
                        "refused {amount} while {admitted} of {refusing} were spent"
                    );
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), answers.iter().filter(|(_, a)| matches!(a, Admission::Admitted { .. })).count());
        // The store's own count is the admitted spend.
        let usage = pg.usage("srv", &check(2, 0, budget_limit, now), now).expect("usage");
        prop_assert_eq!(usage.spent, admitted);
    }
}

/// Uniform requests from many threads: exactly the limit is admitted, and
/// some went in a shared transaction (the batch path ran).
#[test]
fn many_threads_admit_exactly_the_limit_through_batches() {
    let Some(spec) = support::spec() else { return };
    const THREADS: usize = 16;
    const EACH: usize = 25;
    const LIMIT: u64 = 150;
    let pg = Arc::new(store(&spec, "batchmany", 4));
    let now: Millis = 7_000_000;
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (pg, barrier) = (Arc::clone(&pg), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                (0..EACH)
                    .filter(|_| {
                        let checks = vec![check(0, 1, 1 << 40, now), check(2, 1, LIMIT, now)];
                        matches!(
                            pg.admit("srv", &checks, now).expect("admit"),
                            Admission::Admitted { .. }
                        )
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
    assert_eq!(admitted as u64, LIMIT);
    let stats = pg.batch_stats();
    assert!(
        stats.batched > 0 && stats.batches > 0,
        "no admission went in a batch: {stats:?}"
    );
    assert!(stats.batched >= 2 * stats.batches);
}

/// A batch whose statement fails (a counter name PostgreSQL cannot store)
/// fails every request in it with the same error, and nothing of it counts.
#[test]
fn a_failed_batch_fails_every_request_and_records_nothing() {
    let Some(spec) = support::spec() else { return };
    let pg = store(&spec, "batchfail", 2);
    let now: Millis = 9_000_000;
    let good = vec![check(2, 1, 10, now)];
    let mut bad = good.clone();
    bad[0].counter = "nul\0byte".into();
    let error = pg
        .admit_batch(
            "srv",
            &[(good.clone(), now), (bad, now), (good.clone(), now)],
        )
        .expect_err("the batch fails");
    assert!(
        matches!(error, StoreError::Backend { .. }),
        "unexpected error {error:?}"
    );
    let usage = pg.usage("srv", &good[0], now).expect("usage");
    assert_eq!(usage.spent, 0, "a failed batch recorded spend");
    // The store goes on: the next admission is counted from zero.
    assert!(matches!(
        pg.admit("srv", &good, now).expect("admit"),
        Admission::Admitted { .. }
    ));
}
