//! `mcpc store migrate` (`PostgresStore::import_sqlite`) round-trips every
//! counter state and every decision exactly: a property over random
//! admission histories on an SQLite store (rolling and calendar windows,
//! token settlements, clock steps forward past whole windows and back
//! within and past the retention, so that some counters have all their
//! spend aged out and pruned, others a prune mark, others rows left behind
//! below the cut), imported at the history's last instant. After the
//! import, the SQLite store and the PostgreSQL copy answer alike: every
//! stored decision, `usage` of every counter at the import's instant and at
//! instants before and after it, and the same admissions made on both
//! afterwards (`docs/spec/store.md`, "Moving a store").

mod support;

use mcpolicy_runtime::clock::timestamp;
use mcpolicy_runtime::store::{
    Admission, DecisionFilter, DecisionKey, DecisionStore, LimitCheck, LimitWindow, Millis,
    SqliteStore, StoreAdmin, StoredDecision, Verdict,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const MINUTE: Millis = 60_000;
const DAY: Millis = 86_400_000;

/// One step of a history.
#[derive(Debug, Clone)]
enum Step {
    /// The clock moves by this many ms (negative: a step back).
    Clock(Millis),
    /// An admission of these checks (by index into [`checks`]), with a
    /// token amount, settled to `settle` when admitted (if given).
    Admit {
        which: Vec<usize>,
        tokens: u64,
        settle: Option<u64>,
    },
    /// A stored decision for identity `n`.
    Record(u64),
}

/// The counters of the histories, at `now`: a rolling rate, a calendar day
/// budget (window computed as the engine does) and a rolling token budget.
fn checks(now: Millis, tokens: u64) -> Vec<LimitCheck> {
    let day = now.div_euclid(DAY);
    vec![
        LimitCheck {
            counter: "rate".into(),
            amount: 1,
            limit: 3,
            window: LimitWindow::Rolling { ms: MINUTE as u64 },
        },
        LimitCheck {
            counter: "budget:requests:day".into(),
            amount: 1,
            limit: 6,
            window: LimitWindow::Fixed {
                start: day * DAY,
                end: (day + 1) * DAY,
            },
        },
        LimitCheck {
            counter: "budget:tokens:rolling:3600000".into(),
            amount: tokens,
            limit: 1_000,
            window: LimitWindow::Rolling { ms: 3_600_000 },
        },
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => prop_oneof![
            0..2 * MINUTE,
            Just(2 * MINUTE),
            Just(2 * 3_600_000),
            Just(DAY),
            Just(3 * DAY),
            -2 * MINUTE..0,
            Just(-DAY),
            Just(-5 * DAY),
        ]
        .prop_map(Step::Clock),
        4 => (
            prop::sample::subsequence(vec![0usize, 1, 2], 1..=3),
            0u64..400,
            prop::option::of(0u64..400)
        )
            .prop_map(|(which, tokens, settle)| Step::Admit { which, tokens, settle }),
        1 => (0u64..6).prop_map(Step::Record),
    ]
}

fn decision(n: u64, at: Millis) -> StoredDecision {
    StoredDecision {
        verdict: if n.is_multiple_of(2) {
            Verdict::Deny
        } else {
            Verdict::Allow
        },
        reason: if n.is_multiple_of(2) {
            "user.denied"
        } else {
            "user.approved"
        }
        .into(),
        digest: "d1".into(),
        expires_at: (n.is_multiple_of(3)).then_some(at + DAY),
        data: (n.is_multiple_of(2)).then(|| format!("{{\"n\":{n}}}").into()),
        represented: 0,
        decided_at: at,
        recomputable: n == 4,
        statement: Some("consent".into()),
    }
}

/// What an admission answered, without the reservation id (each store
/// issues its own).
fn shape(answer: Admission) -> Result<Millis, (usize, String, Millis)> {
    match answer {
        Admission::Admitted { reservation } => Ok(reservation.at),
        Admission::Refused {
            index,
            counter,
            available_at,
        } => Err((index, counter, available_at)),
    }
}

#[test]
fn migration_round_trips_every_counter_and_decision() {
    let Some(spec) = support::spec() else { return };
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(32);
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let start = timestamp(2026, 3, 10, 23, 58, 0);
    runner
        .run(
            &(
                prop::collection::vec(step(), 1..40),
                prop::collection::vec((-3 * DAY..3 * DAY, 0u64..400), 1..6),
            ),
            |(history, after)| {
                let dir = tempfile::tempdir().expect("tempdir");
                let path = dir.path().join("store.db");
                let sqlite = SqliteStore::open(&path).expect("sqlite");
                let mut now = start;
                for step in &history {
                    match step {
                        Step::Clock(by) => now += by,
                        Step::Admit {
                            which,
                            tokens,
                            settle,
                        } => {
                            let all = checks(now, *tokens);
                            let picked: Vec<LimitCheck> =
                                which.iter().map(|&i| all[i].clone()).collect();
                            let answer = sqlite.admit("srv", &picked, now).expect("admit");
                            if let (Admission::Admitted { reservation }, Some(actual)) =
                                (answer, settle)
                                && picked.iter().any(|c| c.counter == all[2].counter)
                            {
                                sqlite
                                    .settle("srv", reservation, &all[2].counter, *actual)
                                    .expect("settle");
                            }
                        }
                        Step::Record(n) => sqlite
                            .record(
                                &DecisionKey::new("srv", format!("srv:{n:032x}")),
                                &decision(*n, now),
                            )
                            .expect("record"),
                    }
                }
                drop(sqlite);
                let copy = support::fresh_store(&spec, "migrate", 10_000);
                copy.import_sqlite(&path).expect("import");
                let sqlite = SqliteStore::open(&path).expect("reopen");
                let all = DecisionFilter::default();
                prop_assert_eq!(
                    sqlite.decisions(&all).expect("decisions"),
                    copy.decisions(&all).expect("decisions")
                );
                // Every counter as seen now, a little and a long way back,
                // and later: the same spend and the same `available_at`.
                for offset in [0, -30_000, -MINUTE, -DAY, -2 * DAY, 30_000, 2 * MINUTE, DAY] {
                    let at = now + offset;
                    for check in checks(at, 200) {
                        prop_assert_eq!(
                            sqlite.usage("srv", &check, at).expect("usage"),
                            copy.usage("srv", &check, at).expect("usage"),
                            "{} at now{:+}",
                            check.counter,
                            offset
                        );
                    }
                }
                // And the same admissions afterwards answer alike.
                for (by, tokens) in after {
                    let at = now + by;
                    let checks = checks(at, tokens);
                    prop_assert_eq!(
                        shape(sqlite.admit("srv", &checks, at).expect("admit")),
                        shape(copy.admit("srv", &checks, at).expect("admit")),
                        "at now{:+}",
                        by
                    );
                }
                Ok(())
            },
        )
        .unwrap_or_else(|failure| panic!("{failure}"));
}
