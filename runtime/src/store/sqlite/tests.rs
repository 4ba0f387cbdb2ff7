//! Unit tests of the SQLite store's internals (the contract tests are in
//! `runtime/tests/store.rs`).

use super::*;

/// Every statement an admission runs is parsed and planned once per
/// open, not at each use: see the query planner stability guarantee in
/// [`initialise`]. Without it each of these was re-prepared at every
/// execution but the first.
#[test]
fn hot_statements_are_prepared_once() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("store.db"))?;
    let checks = |now: Millis| {
        let hour = now - now.rem_euclid(3_600_000);
        [
            LimitCheck {
                counter: "rate".into(),
                amount: 1,
                limit: 1_000,
                window: LimitWindow::Rolling { ms: 60_000 },
            },
            LimitCheck {
                counter: "budget:requests:hour".into(),
                amount: 1,
                limit: 1_000_000,
                window: LimitWindow::Fixed {
                    start: hour,
                    end: hour + 3_600_000,
                },
            },
        ]
    };
    // 10 s apart over an hour and a half: every rolling admission moves
    // its floor, and spend past the retention is pruned.
    let start: Millis = 1_773_100_800_000;
    for step in 0..540 {
        let now = start + step * 10_000;
        let key = DecisionKey::new("srv", format!("srv:{step}"));
        let mut buf = Vec::new();
        let answer = store.replay_or_admit(&key, None, "d", now, &mut buf, &mut |_, out| {
            out.extend(checks(now));
            Evaluation::Admit
        })?;
        assert!(matches!(answer.admission, Some(Admission::Admitted { .. })));
    }
    // Refusals of a rolling window read its rows for `available_at`.
    let tight = [LimitCheck {
        counter: "tight".into(),
        amount: 1,
        limit: 1,
        window: LimitWindow::Rolling { ms: 60_000 },
    }];
    for step in 0..4 {
        let admission = store.admit("srv", &tight, start + step * 1_000)?;
        assert_eq!(matches!(admission, Admission::Refused { .. }), step > 0);
    }
    let session = store.lock()?;
    for sql in [
        READ_COUNTER,
        RANGE_SUM,
        PRUNE_SELECT,
        PRUNE_DELETE,
        WINDOW_ROWS,
        PROBE,
    ] {
        let stmt = session.conn.prepare_cached(sql)?;
        let runs = stmt.get_status(rusqlite::StatementStatus::Run);
        let reprepared = stmt.get_status(rusqlite::StatementStatus::RePrepare);
        assert!(runs > 0, "not run: {sql}");
        assert_eq!(
            reprepared, 0,
            "re-prepared {reprepared} times in {runs} runs: {sql}"
        );
    }
    Ok(())
}

/// An admission that writes more rows than [`UPSERT_BUILT_ROWS`] builds
/// its statement on the spot, and records the same.
#[test]
fn an_admission_of_many_counters_records_every_row() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("store.db"))?;
    let checks: Vec<LimitCheck> = (0..12u64)
        .map(|n| LimitCheck {
            counter: format!("budget:{n}"),
            amount: n + 1,
            limit: 1_000,
            window: LimitWindow::Rolling { ms: 60_000 },
        })
        .collect();
    let start: Millis = 1_773_100_800_000;
    // The second admission moves every floor: 12 spend, total, floor
    // and window rows, 48 in all.
    for now in [start, start + 30_000] {
        let admitted = store.admit("srv", &checks, now)?;
        assert!(matches!(admitted, Admission::Admitted { .. }));
        assert!(4 * checks.len() > UPSERT_BUILT_ROWS);
    }
    for check in &checks {
        let usage = store.usage("srv", check, start + 30_000)?;
        assert_eq!(usage.spent, 2 * check.amount, "{}", check.counter);
    }
    Ok(())
}

#[test]
fn rows_round_trip_through_ints() {
    assert_eq!(int(u64::MAX), i64::MAX);
    assert_eq!(uint(-1), 0);
    assert_eq!(uint(int(42)), 42);
}
