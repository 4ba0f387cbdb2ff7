//! The decision store contract, shared by every store's tests: generic
//! test bodies over a [`Fixture`], listed by [`each_contract_test!`].
//! Included with `#[path]` by `runtime/tests/store.rs` (memory and SQLite)
//! and `runtime/postgres/tests/store_contract.rs` (PostgreSQL).

#![allow(dead_code)] // each including binary uses its own part

pub use std::sync::Arc;
pub use std::sync::atomic::{AtomicU64, Ordering};

pub use mcpolicy_runtime::clock::timestamp;
pub use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, LimitCheck, LimitWindow, Millis, Reservation,
    ServerStats, StoreError, StoredDecision, Verdict,
};
pub use tempfile::TempDir;

pub const DAY: u64 = 86_400_000;

/// A store under test and whatever keeps it alive.
#[derive(Debug)]
pub struct Fixture {
    pub store: Arc<dyn DecisionStore>,
    /// The store's bound of decisions per server.
    pub max_per_server: u64,
    pub _dir: Option<TempDir>,
}

/// The bound the contract tests run with: small enough to reach quickly.
pub const TEST_BOUND: u64 = 200;

/// Calls `$m!(name, …)` with the name of every contract test, so each store's
/// test binary instantiates all of them.
macro_rules! each_contract_test {
    ($m:ident) => {
        $m!(
            replay_counts_and_returns_data_byte_for_byte,
            record_replaces_and_resets_represented,
            expiry_is_exclusive,
            digest_mismatch_misses,
            purge_stale_touches_only_that_server,
            rolling_window_and_available_at,
            rolling_window_available_at_with_amounts,
            fixed_window_resets_at_end,
            refusal_records_nothing,
            repeated_counter_in_one_admission,
            amount_larger_than_limit_never_fits,
            an_exhausted_window_refuses_a_zero_amount,
            settle_lowers_and_raises_token_spend,
            settle_unknown_reservation_is_an_error,
            eight_threads_never_overspend,
            concurrent_replays_count_every_one,
            a_clock_step_back_still_counts_the_days_spend,
            a_step_back_past_the_retention_refuses_while_deleted_spend_could_count,
            a_clock_behind_within_the_retention_counts_exactly,
            lengthening_a_rolling_window_does_not_refuse_for_its_length,
            a_flood_of_static_denials_is_bounded_and_keeps_user_answers,
            a_policy_decision_never_replaces_a_users_answer_in_force,
            the_refusal_key_answers_with_denials_and_the_approval_key_with_approvals,
            at_the_clocks_extremes_every_limit_fails_closed,
        );
    };
}

pub fn key(server: &str, n: u64) -> DecisionKey {
    DecisionKey::new(server, format!("{server}:{n:032x}"))
}

pub fn deny(digest: &str, expires_at: Option<Millis>, data: &str) -> StoredDecision {
    StoredDecision {
        verdict: Verdict::Deny,
        reason: "policy.budget_exhausted".into(),
        digest: digest.into(),
        expires_at,
        data: Some(data.into()),
        represented: 0,
        decided_at: 1_000,
        recomputable: false,
        statement: None,
    }
}

pub fn allow(digest: &str) -> StoredDecision {
    StoredDecision {
        verdict: Verdict::Allow,
        reason: "user.approved".into(),
        digest: digest.into(),
        expires_at: None,
        data: None,
        represented: 0,
        decided_at: 1_000,
        recomputable: false,
        statement: None,
    }
}

pub fn rolling(counter: &str, amount: u64, limit: u64, ms: u64) -> LimitCheck {
    LimitCheck {
        counter: counter.into(),
        amount,
        limit,
        window: LimitWindow::Rolling { ms },
    }
}

pub fn fixed(counter: &str, amount: u64, limit: u64, start: Millis, end: Millis) -> LimitCheck {
    LimitCheck {
        counter: counter.into(),
        amount,
        limit,
        window: LimitWindow::Fixed { start, end },
    }
}

pub fn admitted(admission: &Admission) -> bool {
    matches!(admission, Admission::Admitted { .. })
}

pub fn reservation(admission: Admission) -> Reservation {
    match admission {
        Admission::Admitted { reservation } => reservation,
        refused => panic!("expected admission, got {refused:?}"),
    }
}

// A denial's `data` exactly as the engine serialised it: odd spacing, escapes
// and non-ASCII must come back untouched, or a replay is not byte-identical.
pub const DATA: &str = r#"{"reason":"policy.budget_exhausted","server":"release-notes","retryable":false,"resetsAt":"2026-03-11T00:00:00Z","note":"caf\u00e9 café \" 𝄞"}"#;

pub fn replay_counts_and_returns_data_byte_for_byte(f: Fixture) {
    let s = &f.store;
    let k = key("release-notes", 1);
    s.record(&k, &deny("d1", None, DATA)).expect("record");
    for n in 1..=3 {
        let hit = s.replay(&k, "d1", 2_000).expect("replay").expect("hit");
        assert_eq!(hit.represented, n);
        assert_eq!(hit.data.as_deref(), Some(DATA));
        assert_eq!(hit.verdict, Verdict::Deny);
        assert_eq!(&*hit.reason, "policy.budget_exhausted");
        assert_eq!(hit.decided_at, 1_000);
    }
    // get() does not count.
    let seen = s.get(&k).expect("get").expect("present");
    assert_eq!(seen.represented, 3);
    assert_eq!(s.get(&k).expect("get").expect("present").represented, 3);
    // Another identity of the same server is a miss.
    assert_eq!(
        s.replay(&key("release-notes", 2), "d1", 2_000)
            .expect("replay"),
        None
    );
    // An allow replays with no data.
    let a = key("release-notes", 3);
    s.record(&a, &allow("d1")).expect("record");
    let hit = s.replay(&a, "d1", 2_000).expect("replay").expect("hit");
    assert_eq!(
        (hit.verdict, hit.data, hit.represented),
        (Verdict::Allow, None, 1)
    );
}

pub fn record_replaces_and_resets_represented(f: Fixture) {
    let s = &f.store;
    let k = key("srv", 1);
    let mut first = deny("d1", None, DATA);
    first.represented = 7; // ignored: represented starts at 0
    s.record(&k, &first).expect("record");
    assert_eq!(s.get(&k).expect("get").expect("present").represented, 0);
    s.replay(&k, "d1", 0).expect("replay");
    s.record(&k, &allow("d2")).expect("replace");
    let now = s.get(&k).expect("get").expect("present");
    assert_eq!(now, allow("d2"));
}

pub fn expiry_is_exclusive(f: Fixture) {
    let s = &f.store;
    let k = key("srv", 1);
    s.record(&k, &deny("d", Some(60_000), DATA))
        .expect("record");
    assert!(s.replay(&k, "d", 59_999).expect("replay").is_some());
    assert_eq!(s.replay(&k, "d", 60_000).expect("replay"), None);
    assert_eq!(s.replay(&k, "d", 10_000_000).expect("replay"), None);
    // The miss did not count, and get still shows the expired row.
    assert_eq!(s.get(&k).expect("get").expect("present").represented, 1);
    // No expiry: until the block changes.
    let forever = key("srv", 2);
    s.record(&forever, &deny("d", None, DATA)).expect("record");
    assert!(
        s.replay(&forever, "d", Millis::MAX)
            .expect("replay")
            .is_some()
    );
}

pub fn digest_mismatch_misses(f: Fixture) {
    let s = &f.store;
    let k = key("srv", 1);
    s.record(&k, &deny("old", None, DATA)).expect("record");
    assert_eq!(s.replay(&k, "new", 0).expect("replay"), None);
    assert_eq!(s.get(&k).expect("get").expect("present").represented, 0);
    assert!(s.replay(&k, "old", 0).expect("replay").is_some());
}

pub fn purge_stale_touches_only_that_server(f: Fixture) {
    let s = &f.store;
    let now = 100_000;
    s.record(&key("a", 1), &deny("new", None, DATA)).expect("r");
    s.record(&key("a", 2), &deny("new", Some(now + 1), DATA))
        .expect("r");
    s.record(&key("a", 3), &deny("old", None, DATA)).expect("r"); // stale digest
    s.record(&key("a", 4), &deny("new", Some(now), DATA))
        .expect("r"); // expired
    s.record(&key("a", 5), &allow("older")).expect("r"); // stale digest
    s.record(&key("b", 1), &deny("old", None, DATA)).expect("r");
    s.record(&key("b", 2), &deny("new", Some(1), DATA))
        .expect("r");
    // Server ids that share a prefix must not be confused.
    s.record(&key("ab", 1), &deny("old", None, DATA))
        .expect("r");

    assert_eq!(s.purge_stale("a", "new", now).expect("purge"), 3);
    assert!(s.get(&key("a", 1)).expect("get").is_some());
    assert!(s.get(&key("a", 2)).expect("get").is_some());
    for gone in [3, 4, 5] {
        assert_eq!(s.get(&key("a", gone)).expect("get"), None, "a/{gone}");
    }
    for (server, n) in [("b", 1), ("b", 2), ("ab", 1)] {
        assert!(
            s.get(&key(server, n)).expect("get").is_some(),
            "{server}/{n}"
        );
    }
    assert_eq!(s.purge_stale("a", "new", now).expect("purge"), 0);
}

pub fn rolling_window_and_available_at(f: Fixture) {
    let s = &f.store;
    let rate = || [rolling("rate", 1, 3, 1_000)];
    for t in [0, 100, 200] {
        assert!(
            admitted(&s.admit("srv", &rate(), t).expect("admit")),
            "t={t}"
        );
    }
    let refused = Admission::Refused {
        index: 0,
        counter: "rate".into(),
        available_at: 1_000,
    };
    assert_eq!(s.admit("srv", &rate(), 300).expect("admit"), refused);
    assert_eq!(s.admit("srv", &rate(), 999).expect("admit"), refused);
    // The spend at 0 counts in (now - 1000, now] only until now = 1000.
    assert!(admitted(&s.admit("srv", &rate(), 1_000).expect("admit")));
    // Now rows at 100, 200, 1000: the next room opens when 100 leaves.
    assert!(matches!(
        s.admit("srv", &rate(), 1_050).expect("admit"),
        Admission::Refused {
            available_at: 1_100,
            ..
        }
    ));
    // Counters are per server.
    assert!(admitted(&s.admit("other", &rate(), 1_050).expect("admit")));
}

pub fn rolling_window_available_at_with_amounts(f: Fixture) {
    let s = &f.store;
    let tokens = |amount| [rolling("budget:tokens:rolling:1000", amount, 100, 1_000)];
    for t in [0, 100, 200] {
        assert!(admitted(&s.admit("srv", &tokens(30), t).expect("admit")));
    }
    // 90 spent, 50 asked: 40 must leave; 30 leaves at 1000, 60 at 1100.
    assert!(matches!(
        s.admit("srv", &tokens(50), 300).expect("admit"),
        Admission::Refused {
            available_at: 1_100,
            ..
        }
    ));
    // 10 fits now; then 100 is spent and even 1 must wait for the row at 0.
    assert!(admitted(&s.admit("srv", &tokens(10), 300).expect("admit")));
    assert!(matches!(
        s.admit("srv", &tokens(1), 400).expect("admit"),
        Admission::Refused {
            available_at: 1_000,
            ..
        }
    ));
    assert!(admitted(
        &s.admit("srv", &tokens(50), 1_100).expect("admit")
    ));
}

pub fn fixed_window_resets_at_end(f: Fixture) {
    let s = &f.store;
    let day = |start: Millis| {
        [fixed(
            "budget:requests:day",
            1,
            2,
            start,
            start + DAY as Millis,
        )]
    };
    let d0: Millis = 20_000 * DAY as Millis;
    let d1 = d0 + DAY as Millis;
    assert!(admitted(&s.admit("srv", &day(d0), d0).expect("admit")));
    assert!(admitted(&s.admit("srv", &day(d0), d1 - 1).expect("admit")));
    assert_eq!(
        s.admit("srv", &day(d0), d1 - 1).expect("admit"),
        Admission::Refused {
            index: 0,
            counter: "budget:requests:day".into(),
            available_at: d1
        }
    );
    // The next calendar day is a fresh window.
    assert!(admitted(&s.admit("srv", &day(d1), d1).expect("admit")));
    assert!(admitted(&s.admit("srv", &day(d1), d1 + 5).expect("admit")));
    assert!(!admitted(&s.admit("srv", &day(d1), d1 + 6).expect("admit")));
}

pub fn refusal_records_nothing(f: Fixture) {
    let s = &f.store;
    let checks = [
        rolling("rate", 1, 1, 60_000),
        fixed("budget:requests:day", 1, 0, 0, DAY as Millis),
    ];
    assert!(matches!(
        s.admit("srv", &checks, 10).expect("admit"),
        Admission::Refused { index: 1, .. }
    ));
    // The rate check fitted but was not recorded: it still has room for one.
    assert!(admitted(&s.admit("srv", &checks[..1], 11).expect("admit")));
    assert!(!admitted(&s.admit("srv", &checks[..1], 12).expect("admit")));
    // An admission with no checks always succeeds and records nothing.
    assert_eq!(
        s.admit("srv", &[], 13).expect("admit"),
        Admission::Admitted {
            reservation: Reservation::NONE
        }
    );
}

pub fn repeated_counter_in_one_admission(f: Fixture) {
    let s = &f.store;
    // Two checks on one counter must see each other's pending spend.
    let checks = [rolling("c", 3, 5, 1_000), rolling("c", 3, 5, 1_000)];
    // No spend is in the window: only this call's own first check is in the way, so never.
    assert_eq!(
        s.admit("srv", &checks, 0).expect("admit"),
        Admission::Refused {
            index: 1,
            counter: "c".into(),
            available_at: Millis::MAX
        }
    );
    assert!(admitted(&s.admit("srv", &checks[..1], 0).expect("admit")));
}

pub fn amount_larger_than_limit_never_fits(f: Fixture) {
    let s = &f.store;
    let r = s
        .admit("srv", &[rolling("t", 11, 10, 1_000)], 500)
        .expect("admit");
    assert!(!admitted(&r), "{r:?}");
    let r = s
        .admit("srv", &[fixed("t2", 1, 0, 0, 1_000)], 500)
        .expect("admit");
    assert_eq!(
        r,
        Admission::Refused {
            index: 0,
            counter: "t2".into(),
            available_at: 1_000
        }
    );
}

/// `docs/spec/store.md`, "Expiry, windows and reservations": a check fits
/// when `spent + max(amount, 1) <= limit`. A reservation of 0 (`maxTokens:
/// 0` against a token budget) passed a spent budget when `spent + 0 <=
/// limit` was the rule.
pub fn an_exhausted_window_refuses_a_zero_amount(f: Fixture) {
    let s = &f.store;
    assert!(admitted(
        &s.admit("srv", &[rolling("t", 10, 10, 1_000)], 0)
            .expect("admit")
    ));
    assert_eq!(
        s.admit("srv", &[rolling("t", 0, 10, 1_000)], 500)
            .expect("admit"),
        Admission::Refused {
            index: 0,
            counter: "t".into(),
            // The spend of 0 leaves the window at 1 000: then 0 fits.
            available_at: 1_000
        }
    );
    assert!(admitted(
        &s.admit("srv", &[rolling("t", 0, 10, 1_000)], 1_000)
            .expect("admit")
    ));
    assert!(admitted(
        &s.admit("srv", &[fixed("f", 5, 5, 0, 1_000)], 0)
            .expect("admit")
    ));
    assert_eq!(
        s.admit("srv", &[fixed("f", 0, 5, 0, 1_000)], 10)
            .expect("admit"),
        Admission::Refused {
            index: 0,
            counter: "f".into(),
            available_at: 1_000
        }
    );
    // One below the limit: 0 fits, and so does 1.
    assert!(admitted(
        &s.admit("srv", &[fixed("g", 4, 5, 0, 1_000)], 0)
            .expect("admit")
    ));
    assert!(admitted(
        &s.admit("srv", &[fixed("g", 0, 5, 0, 1_000)], 10)
            .expect("admit")
    ));
    assert!(admitted(
        &s.admit("srv", &[fixed("g", 1, 5, 0, 1_000)], 20)
            .expect("admit")
    ));
    // A limit of 0 holds nothing, not even 0.
    assert!(!admitted(
        &s.admit("srv", &[fixed("h", 0, 0, 0, 1_000)], 0)
            .expect("admit")
    ));
}

pub fn settle_lowers_and_raises_token_spend(f: Fixture) {
    let s = &f.store;
    let end = DAY as Millis;
    let tokens = |amount| {
        [
            fixed("budget:requests:day", 1, 100, 0, end),
            fixed("budget:tokens:day", amount, 1_000, 0, end),
        ]
    };
    let first = reservation(s.admit("srv", &tokens(800), 1).expect("admit"));
    assert!(!first.is_none());
    assert!(!admitted(&s.admit("srv", &tokens(300), 2).expect("admit")));
    // The completion used only 100 of the 800 reserved.
    s.settle("srv", first, "budget:tokens:day", 100)
        .expect("settle");
    let second = reservation(s.admit("srv", &tokens(300), 3).expect("admit"));
    assert_ne!(second, first);
    // 100 + 300 = 400 spent; the second used more than it reserved: 900.
    s.settle("srv", second, "budget:tokens:day", 900)
        .expect("settle");
    assert!(!admitted(&s.admit("srv", &tokens(1), 4).expect("admit")));
    s.settle("srv", second, "budget:tokens:day", 899)
        .expect("settle");
    assert!(admitted(&s.admit("srv", &tokens(1), 5).expect("admit")));
    // Settling one counter left the other alone: 3 requests spent of 100.
    let requests = [fixed("budget:requests:day", 97, 100, 0, end)];
    assert!(admitted(&s.admit("srv", &requests, 6).expect("admit")));
    // Settling Reservation::NONE (an admission with no checks) is a no-op.
    s.settle("srv", Reservation::NONE, "budget:tokens:day", 5)
        .expect("settle NONE");
}

pub fn settle_unknown_reservation_is_an_error(f: Fixture) {
    let s = &f.store;
    let r = reservation(
        s.admit("srv", &[rolling("t", 1, 10, 1_000)], 0)
            .expect("admit"),
    );
    let bogus = Reservation {
        id: r.id.wrapping_add(1 << 40),
        ..r
    };
    assert!(matches!(
        s.settle("srv", bogus, "t", 1),
        Err(StoreError::UnknownReservation { .. })
    ));
    // The next id of this store, not issued yet, is unknown too.
    let next = Reservation { id: r.id + 1, ..r };
    assert!(matches!(
        s.settle("srv", next, "t", 1),
        Err(StoreError::UnknownReservation { .. })
    ));
}

pub fn eight_threads_never_overspend(f: Fixture) {
    let admitted_total = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&f.store);
            let admitted_total = Arc::clone(&admitted_total);
            std::thread::spawn(move || {
                for i in 0..1_000 {
                    let checks = [
                        rolling("rate", 1, 1_000_000, 60_000),
                        fixed("budget:requests:day", 1, 500, 0, DAY as Millis),
                    ];
                    let now = 1_000 + i;
                    match store.admit("srv", &checks, now).expect("admit") {
                        Admission::Admitted { .. } => {
                            admitted_total.fetch_add(1, Ordering::Relaxed);
                        }
                        Admission::Refused { index, .. } => assert_eq!(index, 1, "thread {t}"),
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    assert_eq!(admitted_total.load(Ordering::Relaxed), 500);
    // And the rate counter recorded exactly the admitted ones.
    let rate_room = [rolling("rate", 1_000_000 - 500, 1_000_000, 60_000)];
    assert!(admitted(
        &f.store.admit("srv", &rate_room, 2_000).expect("admit")
    ));
}

pub fn concurrent_replays_count_every_one(f: Fixture) {
    let k = key("srv", 9);
    f.store.record(&k, &deny("d", None, DATA)).expect("record");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let store = Arc::clone(&f.store);
            let k = k.clone();
            std::thread::spawn(move || {
                for _ in 0..250 {
                    store.replay(&k, "d", 0).expect("replay").expect("hit");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    assert_eq!(
        f.store.get(&k).expect("get").expect("present").represented,
        1_000
    );
}

/// The day window around `now`, as the engine computes `budget … per day`.
pub fn per_day(counter: &str, limit: u64, now: Millis) -> [LimitCheck; 1] {
    let start = now - now.rem_euclid(DAY as Millis);
    [fixed(counter, 1, limit, start, start + DAY as Millis)]
}

/// `docs/spec/store.md`, "Pruning and clock steps": `budget 1 requests per day`, admitted at 12:00, then
/// just after midnight (whose admission pruned the earlier day), then the
/// clock steps back to 12:01 of the first day. That day's spend must still
/// count: refused until the day ends, as an unpruned store would answer.
pub fn a_clock_step_back_still_counts_the_days_spend(f: Fixture) {
    let s = &f.store;
    let noon = timestamp(2026, 3, 10, 12, 0, 0);
    let after_midnight = timestamp(2026, 3, 11, 0, 0, 1);
    let back = timestamp(2026, 3, 10, 12, 1, 0);
    let counter = "budget:requests:day";
    assert!(admitted(
        &s.admit("srv", &per_day(counter, 1, noon), noon)
            .expect("admit")
    ));
    assert!(admitted(
        &s.admit("srv", &per_day(counter, 1, after_midnight), after_midnight)
            .expect("admit")
    ));
    let answer = s
        .admit("srv", &per_day(counter, 1, back), back)
        .expect("admit");
    assert_eq!(
        answer,
        Admission::Refused {
            index: 0,
            counter: counter.into(),
            available_at: timestamp(2026, 3, 11, 0, 0, 0),
        }
    );
}

/// A step back further than a counter keeps spend (one window and an
/// eighth, at least a minute) lands on deleted spend: the store cannot
/// count it and refuses, until the deleted spend would have left the window.
pub fn a_step_back_past_the_retention_refuses_while_deleted_spend_could_count(f: Fixture) {
    let s = &f.store;
    let rate = |limit| [rolling("rate", 1, limit, 1_000)];
    let t0: Millis = 1_000_000;
    assert!(admitted(&s.admit("srv", &rate(100), t0).expect("admit")));
    // Ten minutes on: the row of t0 is past the retention and deleted.
    let later = t0 + 600_000;
    assert!(admitted(&s.admit("srv", &rate(100), later).expect("admit")));
    // Back to t0 + 500: an unpruned store would count the row of t0; this
    // one deleted it, and refuses however much room the limit leaves.
    match s.admit("srv", &rate(100), t0 + 500).expect("admit") {
        Admission::Refused { available_at, .. } => {
            // The deleted row (at t0) counts in a rolling window until t0 + 1000.
            assert_eq!(available_at, t0 + 1_000);
        }
        other => panic!("admitted over deleted spend: {other:?}"),
    }
    // Once the deleted row would have left the window, counting is exact again.
    assert!(admitted(
        &s.admit("srv", &rate(100), t0 + 1_000).expect("admit")
    ));
}

/// A process sharing the store whose clock is behind (or a small step back):
/// within the retention every row still counts, exactly.
pub fn a_clock_behind_within_the_retention_counts_exactly(f: Fixture) {
    let s = &f.store;
    let rate = [rolling("rate", 1, 3, 10_000)];
    let t0: Millis = 5_000_000;
    for t in [t0, t0 + 1, t0 + 2] {
        assert!(admitted(&s.admit("srv", &rate, t).expect("admit")));
    }
    // Far enough ahead that all three left the window (and the floor moved past them).
    assert!(admitted(
        &s.admit("srv", &rate, t0 + 10_005).expect("admit")
    ));
    // A clock 9 s behind: the rows of t0..t0+2 count again, and the one of
    // t0 + 10,005 (ahead of it) too: full.
    assert!(!admitted(
        &s.admit("srv", &rate, t0 + 1_000).expect("admit")
    ));
    // Back at t0 + 10,002 the rows of t0..t0+2 have left; beside the row of
    // t0 + 10,005 (ahead of this clock, counted) two more fit.
    assert!(admitted(
        &s.admit("srv", &rate, t0 + 10_002).expect("admit")
    ));
    assert!(admitted(
        &s.admit("srv", &rate, t0 + 10_003).expect("admit")
    ));
    assert!(!admitted(
        &s.admit("srv", &rate, t0 + 10_004).expect("admit")
    ));
}

/// A policy edit lengthening `rate` (whose counter name does not carry its
/// window): the spend deleted under the short window is not held against
/// the long one (as before: a counter keeps one window), rather than every
/// admission being refused for up to the new window's length.
pub fn lengthening_a_rolling_window_does_not_refuse_for_its_length(f: Fixture) {
    let s = &f.store;
    let t0: Millis = 1_000_000;
    let rate = |ms| [rolling("rate", 1, 2, ms)];
    assert!(admitted(&s.admit("srv", &rate(1_000), t0).expect("admit")));
    let later = t0 + 600_000; // the row of t0 is deleted here
    assert!(admitted(
        &s.admit("srv", &rate(1_000), later).expect("admit")
    ));
    // `rate 2 per 1h` now: the row of `later` counts, the deleted one does not.
    assert!(admitted(
        &s.admit("srv", &rate(3_600_000), later + 1).expect("admit")
    ));
    assert!(!admitted(
        &s.admit("srv", &rate(3_600_000), later + 2).expect("admit")
    ));
    // A clock step back under the new window still finds its own deletions:
    // far ahead (deleting `later`'s rows), then back.
    let far = later + 10 * 3_600_000;
    assert!(admitted(
        &s.admit("srv", &rate(3_600_000), far).expect("admit")
    ));
    assert!(!admitted(
        &s.admit("srv", &rate(3_600_000), later + 3).expect("admit")
    ));
}

/// A static denial, as the engine records one for `sampling off`.
pub fn static_denial(n: u64) -> StoredDecision {
    StoredDecision {
        verdict: Verdict::Deny,
        reason: "policy.sampling_disabled".into(),
        digest: "d".into(),
        expires_at: None,
        data: Some(DATA.into()),
        represented: 0,
        decided_at: 1_000 + n as Millis,
        recomputable: true,
        statement: None,
    }
}

/// `docs/spec/store.md`, "Bounds and eviction": a server varying its prompt under `sampling off`
/// grew a store without bound. Now a server keeps at most the store's bound;
/// the static denials (recomputable) go first, a user's refusal stays, and
/// the evicted rows and their `represented` are counted.
pub fn a_flood_of_static_denials_is_bounded_and_keeps_user_answers(f: Fixture) {
    let s = &f.store;
    let refused = DecisionKey::new("srv", "srv:refused");
    let user = StoredDecision {
        reason: "user.denied".into(),
        recomputable: false,
        ..static_denial(0)
    };
    s.record(&refused, &user).expect("record");
    let cap = f.max_per_server;
    let flood = cap + cap / 2;
    for n in 0..flood {
        s.record(&key("srv", n), &static_denial(n)).expect("record");
        if n == 3 {
            // Re-presented twice before it is evicted.
            s.replay(&key("srv", 3), "d", 2_000).expect("replay");
            s.replay(&key("srv", 3), "d", 2_000).expect("replay");
        }
    }
    let stats = s.server_stats("srv").expect("stats");
    assert_eq!(
        stats,
        ServerStats {
            stored: cap,
            evicted: flood + 1 - cap,
            evicted_represented: 2,
        }
    );
    assert_eq!(
        s.get(&refused).expect("get").map(|d| d.reason),
        Some(user.reason)
    );
    // The oldest static denials went first; the newest are there.
    assert!(s.get(&key("srv", 0)).expect("get").is_none());
    assert!(s.get(&key("srv", flood - 1)).expect("get").is_some());
    // Another server is untouched by this one's bound.
    s.record(&key("other", 1), &static_denial(1))
        .expect("record");
    assert_eq!(s.server_stats("other").expect("stats").stored, 1);
    assert_eq!(s.server_stats("srv").expect("stats").stored, cap);
}

/// `docs/spec/store.md`, "What a later decision may replace": a user's
/// answer replaces anything; a policy decision replaces anything but a
/// user's answer in force (same digest, not expired).
pub fn a_policy_decision_never_replaces_a_users_answer_in_force(f: Fixture) {
    let s = &f.store;
    let users_refusal = StoredDecision {
        reason: "user.denied".into(),
        statement: Some("consent".into()),
        ..deny("d", None, DATA)
    };
    let k = key("srv", 1);
    s.record(&k, &users_refusal).expect("record");
    // A budget denial of the same key, later: the user's refusal stays.
    let later_budget = StoredDecision {
        decided_at: 5_000,
        ..deny("d", Some(90_000), DATA)
    };
    s.record(&k, &later_budget).expect("record");
    assert_eq!(s.get(&k).expect("get"), Some(users_refusal.clone()));
    assert_eq!(s.server_stats("srv").expect("stats").stored, 1);
    // An approval keeps against a policy denial too.
    let a = key("srv", 2);
    s.record(&a, &allow("d")).expect("record");
    s.record(&a, &later_budget).expect("record");
    assert_eq!(s.get(&a).expect("get"), Some(allow("d")));
    // A user's answer replaces a user's answer, and a policy denial.
    s.record(&a, &users_refusal).expect("record");
    assert_eq!(s.get(&a).expect("get"), Some(users_refusal.clone()));
    let p = key("srv", 3);
    s.record(&p, &later_budget).expect("record");
    s.record(&p, &allow("d")).expect("record");
    assert_eq!(s.get(&p).expect("get"), Some(allow("d")));
    // A user's answer no longer in force (another digest, or expired when
    // the new decision is made) is replaced.
    s.record(&k, &deny("d2", None, DATA)).expect("record");
    assert_eq!(s.get(&k).expect("get"), Some(deny("d2", None, DATA)));
    let brief = StoredDecision {
        expires_at: Some(4_000),
        ..users_refusal.clone()
    };
    let e = key("srv", 4);
    s.record(&e, &brief).expect("record");
    s.record(&e, &later_budget).expect("record");
    assert_eq!(s.get(&e).expect("get"), Some(later_budget.clone()));
    assert_eq!(s.server_stats("srv").expect("stats").stored, 4);
}

/// `docs/spec/store.md`, "The atomic decision": `replay_or_admit` probes
/// the refusal key for a denial, then the approval key for an approval,
/// and counts only the row it answers with.
pub fn the_refusal_key_answers_with_denials_and_the_approval_key_with_approvals(f: Fixture) {
    let s = &f.store;
    let refusal = key("srv", 1);
    let approval = "srv:approval:00000000000000000000000000000001";
    let approval_key = DecisionKey::new("srv", approval);
    let probe = |approval: Option<&str>| {
        let mut checks = Vec::new();
        s.replay_or_admit(&refusal, approval, "d", 10, &mut checks, &mut |_, _| {
            mcpolicy_runtime::store::Evaluation::Admit
        })
        .expect("replay_or_admit")
        .replayed
    };
    // Nothing stored: a miss.
    assert_eq!(probe(Some(approval)), None);
    // An approval under the approval key answers, and only it is counted.
    s.record(&approval_key, &allow("d")).expect("record");
    let hit = probe(Some(approval)).expect("the approval");
    assert_eq!((hit.verdict.clone(), hit.represented), (Verdict::Allow, 1));
    assert_eq!(probe(None), None, "no approval key given: a miss");
    // An approval stored under a refusal key (as before the two keys) is
    // never replayed, nor counted.
    s.record(&refusal, &allow("d")).expect("record");
    assert_eq!(probe(None), None);
    assert_eq!(
        s.get(&refusal).expect("get").expect("present").represented,
        0
    );
    // A denial under the refusal key answers first; the approval is not
    // counted. (The user's refusal replaces the old approval; a policy
    // denial would not: `a_policy_decision_never_replaces_a_users_answer_in_force`.)
    let users_refusal = StoredDecision {
        reason: "user.denied".into(),
        ..deny("d", None, DATA)
    };
    s.record(&refusal, &users_refusal).expect("record");
    let hit = probe(Some(approval)).expect("the denial");
    assert_eq!((hit.verdict, hit.represented), (Verdict::Deny, 1));
    assert_eq!(
        s.get(&approval_key)
            .expect("get")
            .expect("present")
            .represented,
        1
    );
    // A denial under an approval key is never an approval.
    let other = "srv:approval:00000000000000000000000000000002";
    s.record(&DecisionKey::new("srv", other), &deny("d", None, DATA))
        .expect("record");
    let mut checks = Vec::new();
    let miss = s
        .replay_or_admit(
            &key("srv", 9),
            Some(other),
            "d",
            10,
            &mut checks,
            &mut |_, _| mcpolicy_runtime::store::Evaluation::Admit,
        )
        .expect("replay_or_admit");
    assert_eq!(miss.replayed, None);
}

/// The instants a clock can be at: the ends of `Millis`, the edges of the
/// calendar (`store::CALENDAR_FIRST`, `CALENDAR_LAST`) and either side of
/// them, any `i64`, and any instant inside the calendar.
pub fn any_now() -> impl proptest::strategy::Strategy<Value = Millis> {
    use mcpolicy_runtime::store::{CALENDAR_FIRST, CALENDAR_LAST};
    use proptest::prelude::*;
    prop_oneof![
        prop::sample::select(vec![
            Millis::MIN,
            Millis::MIN + 1,
            Millis::MAX,
            Millis::MAX - 1,
            CALENDAR_FIRST - 1,
            CALENDAR_FIRST,
            CALENDAR_LAST,
            CALENDAR_LAST + 1,
            0,
        ]),
        any::<Millis>(),
        CALENDAR_FIRST..=CALENDAR_LAST,
    ]
}

/// At `Millis::MAX`, `Millis::MIN` and every instant outside the calendar,
/// every rate and budget fails closed: the admission is refused by its
/// first check, never available, and records nothing, for rolling and
/// fixed windows alike. Inside the
/// calendar a limit of L admits exactly L at one instant. A property over
/// extreme and random instants, run against every store (memory, SQLite,
/// PostgreSQL), which therefore agree (`docs/spec/store.md`, "Time outside
/// the calendar").
pub fn at_the_clocks_extremes_every_limit_fails_closed(f: Fixture) {
    use mcpolicy_runtime::store::in_calendar;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let next = AtomicU64::new(0);
    let windows = prop::sample::select(vec![0u64, 1, 1_000, DAY, u64::MAX]);
    runner
        .run(
            &(any_now(), windows, 1u64..4, any::<bool>()),
            |(now, ms, limit, settle)| {
                let server = format!("extreme{}", next.fetch_add(1, Ordering::Relaxed));
                let check = if ms == 0 {
                    let day = now.div_euclid(DAY as Millis);
                    fixed(
                        "budget:requests:day",
                        1,
                        limit,
                        day.saturating_mul(DAY as Millis),
                        day.saturating_add(1).saturating_mul(DAY as Millis),
                    )
                } else {
                    rolling("rate", 1, limit, ms)
                };
                let checks = [check.clone(), rolling("budget:tokens", 1, 1_000, DAY)];
                let mut granted = 0;
                for _ in 0..=limit {
                    let answer = f.store.admit(&server, &checks, now).expect("admit");
                    if !in_calendar(now) {
                        prop_assert_eq!(
                            &answer,
                            &Admission::Refused {
                                index: 0,
                                counter: check.counter.clone(),
                                available_at: Millis::MAX,
                            },
                            "now {}",
                            now
                        );
                    }
                    if let Admission::Admitted { reservation } = answer {
                        granted += 1;
                        if settle {
                            f.store
                                .settle(&server, reservation, "budget:tokens", 0)
                                .expect("settle");
                        }
                    }
                }
                let expected = if in_calendar(now) { limit } else { 0 };
                prop_assert_eq!(granted, expected, "now {}, window {}", now, ms);
                Ok(())
            },
        )
        .unwrap_or_else(|failure| panic!("{failure}"));
}
