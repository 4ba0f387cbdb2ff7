//! Model-based property test: random sequences of store operations run
//! against both stores and a naive reference model that keeps every spend row
//! forever and sums windows from scratch. The stores prune rows and keep
//! running totals; any drift between them and the model is a bug.

use std::collections::HashMap;

use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, LimitCheck, LimitWindow, MemoryStore, Millis,
    Reservation, StoredDecision, Verdict,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Advance the clock.
    Wait(u16),
    /// Admit for server `server` with the checks selected by `mask` (bit per counter kind).
    Admit {
        server: u8,
        mask: u8,
        tokens: u16,
    },
    /// Settle the `nth` earlier admission's token counter.
    Settle {
        nth: u8,
        actual: u16,
    },
    Record {
        server: u8,
        id: u8,
        digest: u8,
        ttl: Option<u16>,
        deny: bool,
    },
    Replay {
        server: u8,
        id: u8,
        digest: u8,
    },
    Get {
        server: u8,
        id: u8,
    },
    Purge {
        server: u8,
        digest: u8,
    },
    /// `replay_then_admit` as the engine calls it: admit unless a stored
    /// denial answers (or, for a store without it, the two calls).
    ReplayThenAdmit {
        server: u8,
        id: u8,
        digest: u8,
        mask: u8,
        tokens: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u16..700).prop_map(Op::Wait),
        6 => (0u8..2, 1u8..8, 0u16..60).prop_map(|(server, mask, tokens)| Op::Admit { server, mask, tokens }),
        2 => (0u8..16, 0u16..90).prop_map(|(nth, actual)| Op::Settle { nth, actual }),
        2 => (0u8..2, 0u8..4, 0u8..2, proptest::option::of(0u16..2_000), any::<bool>())
            .prop_map(|(server, id, digest, ttl, deny)| Op::Record { server, id, digest, ttl, deny }),
        2 => (0u8..2, 0u8..4, 0u8..2).prop_map(|(server, id, digest)| Op::Replay { server, id, digest }),
        1 => (0u8..2, 0u8..4).prop_map(|(server, id)| Op::Get { server, id }),
        1 => (0u8..2, 0u8..2).prop_map(|(server, digest)| Op::Purge { server, digest }),
        4 => (0u8..2, 0u8..4, 0u8..2, 1u8..8, 0u16..60).prop_map(|(server, id, digest, mask, tokens)| {
            Op::ReplayThenAdmit { server, id, digest, mask, tokens }
        }),
    ]
}

const SERVERS: [&str; 2] = ["alpha", "beta"];

/// The checks an admission makes: rate (rolling 1 s, 5), requests per fixed
/// 1 s window (8), tokens (rolling 3 s, 100), in that order, as `mask` selects.
fn checks(mask: u8, tokens: u16, now: Millis) -> Vec<LimitCheck> {
    let start = now - now.rem_euclid(1_000);
    let all = [
        LimitCheck {
            counter: "rate".into(),
            amount: 1,
            limit: 5,
            window: LimitWindow::Rolling { ms: 1_000 },
        },
        LimitCheck {
            counter: "budget:requests:second".into(),
            amount: 1,
            limit: 8,
            window: LimitWindow::Fixed {
                start,
                end: start + 1_000,
            },
        },
        LimitCheck {
            counter: "budget:tokens:rolling:3000".into(),
            amount: u64::from(tokens),
            limit: 100,
            window: LimitWindow::Rolling { ms: 3_000 },
        },
    ];
    all.into_iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, check)| check)
        .collect()
}

/// The reference: every spend row ever recorded, and a plain map of decisions.
#[derive(Default)]
struct Model {
    rows: Vec<(String, String, Millis, u64, usize)>, // server, counter, at, amount, admission
    decisions: HashMap<DecisionKey, StoredDecision>,
}

impl Model {
    fn spent(&self, server: &str, check: &LimitCheck, now: Millis) -> u64 {
        self.rows
            .iter()
            .filter(|(s, c, at, _, _)| {
                s == server
                    && *c == check.counter
                    && match check.window {
                        LimitWindow::Rolling { ms } => *at > now - ms as Millis,
                        LimitWindow::Fixed { start, end } => *at >= start && *at < end,
                    }
            })
            .map(|row| row.3)
            .sum()
    }

    fn admit(
        &mut self,
        server: &str,
        checks: &[LimitCheck],
        now: Millis,
        admission: usize,
    ) -> Admission {
        for (index, check) in checks.iter().enumerate() {
            let spent = self.spent(server, check, now);
            if spent + check.amount <= check.limit {
                continue;
            }
            let available_at = match check.window {
                LimitWindow::Fixed { end, .. } => end,
                LimitWindow::Rolling { ms } => {
                    if check.amount > check.limit {
                        Millis::MAX
                    } else {
                        // The earliest t > now at which the window (t - ms, t] leaves room.
                        let mut ats: Vec<Millis> = self
                            .rows
                            .iter()
                            .filter(|r| {
                                r.0 == server && r.1 == check.counter && r.2 > now - ms as Millis
                            })
                            .map(|r| r.2)
                            .collect();
                        ats.sort();
                        ats.dedup();
                        ats.into_iter()
                            .map(|at| at + ms as Millis)
                            .find(|&t| self.spent(server, check, t) + check.amount <= check.limit)
                            .unwrap_or(now)
                    }
                }
            };
            return Admission::Refused {
                index,
                counter: check.counter.clone(),
                available_at,
            };
        }
        for check in checks {
            self.rows.push((
                server.into(),
                check.counter.clone(),
                now,
                check.amount,
                admission,
            ));
        }
        Admission::Admitted {
            reservation: Reservation {
                id: admission as u64,
                at: now,
            },
        }
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let stores: Vec<(&str, Box<dyn DecisionStore>)> = vec![
        ("memory", Box::new(MemoryStore::new())),
        #[cfg(feature = "sqlite")]
        (
            "sqlite",
            Box::new(
                mcpolicy_runtime::store::SqliteStore::open(dir.path().join("m.db")).expect("open"),
            ),
        ),
    ];
    #[cfg(not(feature = "sqlite"))]
    drop(dir);
    let mut model = Model::default();
    // Admitted reservations, per store, in admission order, with the model's admission number.
    let mut admitted: Vec<(usize, &str, Vec<Reservation>)> = Vec::new();
    let mut now: Millis = 1_000_000;
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Wait(ms) => now += Millis::from(ms),
            Op::Admit {
                server,
                mask,
                tokens,
            } => {
                let server = SERVERS[usize::from(server)];
                let checks = checks(mask, tokens, now);
                let expected = model.admit(server, &checks, now, step);
                let mut handles = Vec::new();
                for (name, store) in &stores {
                    let got = store.admit(server, &checks, now).expect("admit");
                    match (&expected, &got) {
                        (Admission::Admitted { .. }, Admission::Admitted { reservation }) => {
                            handles.push(*reservation)
                        }
                        _ => assert_eq!(got, expected, "{name} at step {step}"),
                    }
                }
                if matches!(expected, Admission::Admitted { .. }) {
                    admitted.push((step, server, handles));
                }
            }
            Op::Settle { nth, actual } => {
                if admitted.is_empty() {
                    continue;
                }
                let (admission, server, handles) = &admitted[usize::from(nth) % admitted.len()];
                let counter = "budget:tokens:rolling:3000";
                for row in model.rows.iter_mut() {
                    if row.4 == *admission && row.1 == counter {
                        row.3 = u64::from(actual);
                    }
                }
                for ((name, store), handle) in stores.iter().zip(handles) {
                    store
                        .settle(server, *handle, counter, u64::from(actual))
                        .unwrap_or_else(|e| panic!("{name} settle at step {step}: {e}"));
                }
            }
            Op::Record {
                server,
                id,
                digest,
                ttl,
                deny,
            } => {
                let key = DecisionKey::new(SERVERS[usize::from(server)], format!("i{id}"));
                let decision = StoredDecision {
                    verdict: if deny { Verdict::Deny } else { Verdict::Allow },
                    reason: if deny { "user.denied" } else { "user.approved" }.into(),
                    digest: format!("d{digest}").into(),
                    expires_at: ttl.map(|t| now + Millis::from(t)),
                    data: deny.then(|| format!("{{\"step\":{step}}}").into()),
                    represented: 0,
                    decided_at: now,
                    recomputable: false,
                };
                model.decisions.insert(key.clone(), decision.clone());
                for (_, store) in &stores {
                    store.record(&key, &decision).expect("record");
                }
            }
            Op::Replay { server, id, digest } => {
                let key = DecisionKey::new(SERVERS[usize::from(server)], format!("i{id}"));
                let digest = format!("d{digest}");
                let expected = match model.decisions.get_mut(&key) {
                    Some(d) if *d.digest == *digest && d.expires_at.is_none_or(|at| now < at) => {
                        d.represented += 1;
                        Some(d.clone())
                    }
                    _ => None,
                };
                for (name, store) in &stores {
                    let got = store.replay(&key, &digest, now).expect("replay");
                    assert_eq!(got, expected, "{name} replay at step {step}");
                }
            }
            Op::ReplayThenAdmit {
                server,
                id,
                digest,
                mask,
                tokens,
            } => {
                let server = SERVERS[usize::from(server)];
                let key = DecisionKey::new(server, format!("i{id}"));
                let digest = format!("d{digest}");
                let wanted = checks(mask, tokens, now);
                let expected_replay = match model.decisions.get_mut(&key) {
                    Some(d) if *d.digest == *digest && d.expires_at.is_none_or(|at| now < at) => {
                        d.represented += 1;
                        Some(d.clone())
                    }
                    _ => None,
                };
                let go = |stored: Option<&StoredDecision>| !matches!(stored, Some(d) if d.verdict == Verdict::Deny);
                let expected_admission =
                    go(expected_replay.as_ref()).then(|| model.admit(server, &wanted, now, step));
                let mut handles = Vec::new();
                for (name, store) in &stores {
                    let mut buffer = Vec::new();
                    let mut evaluate =
                        |stored: Option<&StoredDecision>, out: &mut Vec<LimitCheck>| {
                            let admit = go(stored);
                            if admit {
                                out.extend(wanted.iter().cloned());
                            }
                            admit
                        };
                    let (replayed, admission) = match store
                        .replay_then_admit(&key, &digest, now, &mut buffer, &mut evaluate)
                        .expect("replay_then_admit")
                    {
                        Some(answer) => (answer.replayed, answer.admission),
                        None => {
                            let replayed = store.replay(&key, &digest, now).expect("replay");
                            let admission = go(replayed.as_ref())
                                .then(|| store.admit(server, &wanted, now).expect("admit"));
                            (replayed, admission)
                        }
                    };
                    assert_eq!(
                        replayed, expected_replay,
                        "{name} replay_then_admit (replay) at step {step}"
                    );
                    match (&expected_admission, &admission) {
                        (
                            Some(Admission::Admitted { .. }),
                            Some(Admission::Admitted { reservation }),
                        ) => handles.push(*reservation),
                        _ => assert_eq!(
                            admission, expected_admission,
                            "{name} replay_then_admit (admit) at step {step}"
                        ),
                    }
                }
                if matches!(expected_admission, Some(Admission::Admitted { .. })) {
                    admitted.push((step, server, handles));
                }
            }
            Op::Get { server, id } => {
                let key = DecisionKey::new(SERVERS[usize::from(server)], format!("i{id}"));
                for (name, store) in &stores {
                    let got = store.get(&key).expect("get");
                    assert_eq!(
                        got.as_ref(),
                        model.decisions.get(&key),
                        "{name} get at step {step}"
                    );
                }
            }
            Op::Purge { server, digest } => {
                let server = SERVERS[usize::from(server)];
                let digest = format!("d{digest}");
                let before = model.decisions.len();
                model.decisions.retain(|k, d| {
                    k.server_id != server
                        || (*d.digest == *digest && d.expires_at.is_none_or(|at| now < at))
                });
                let removed = (before - model.decisions.len()) as u64;
                for (name, store) in &stores {
                    let got = store.purge_stale(server, &digest, now).expect("purge");
                    assert_eq!(got, removed, "{name} purge at step {step}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn stores_agree_with_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops);
    }
}
